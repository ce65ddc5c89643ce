// CommunicatorImpl::enqueue_chunks: an operation on device buffers, pipelined through pinned
// slots (staging_pipeline.h), queued as one ordinary operation per chunk.
#include "runtime/communicator_impl.h"
#include "runtime/work_state.h"

namespace braid {

Work CommunicatorImpl::enqueue_chunks(std::unique_ptr<DeviceStaging> staged,
                                      const std::shared_ptr<detail::WorkState>& work) {
  {
    // Under mu_: the chunks take their slots' turns in the order the operations are queued.
    std::lock_guard<std::mutex> lock(mu_);
    auto chunks = staged->chunks(work);
    if (!chunks.is_ok()) {
      work->complete(chunks.status().with_context("staging a collective on GPU " + std::to_string(staged->device()) +
                                                  " on rank " + std::to_string(cfg_.rank) + ": "));
      return Work(work);
    }
    for (DeviceStaging::Chunk& c : chunks.value()) {
      Pending op;
      // A refused chunk is completed with the reason, and its staging fails the operation.
      if (!admit_locked(std::move(c.args), c.work, &op)) continue;
      op.device = std::move(c.staging);
      queue_.push_back(std::move(op));
      enqueued_.fetch_add(1, std::memory_order_release);
    }
  }
  cv_.notify_one();
  return Work(work);
}

}  // namespace braid
