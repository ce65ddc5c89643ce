// StagingPipeline's reductions on the GPU (staging_pipeline.h): which operations take them, and
// the result step of such a chunk.
//
// Why gather then reduce: the chunk pipeline runs each chunk as one host collective between an
// input copy and a result copy. Gathering every rank's part of the chunk into the slot keeps it
// that way (one host collective, then GPU work in the result step, which is ordered like any
// result copy), where splitting all_reduce into reduce_scatter and all_gather would need GPU work
// between two host collectives of one chunk. The price is traffic: an all_gather moves (n-1)
// parts into each rank where the ring all_reduce moves 2(n-1)/n, the same for 2 ranks and more
// beyond; and n parts cross PCIe to the GPU instead of one. So auto picks the GPU for 2 ranks.
#include <string>

#include "runtime/device/event_pool.h"
#include "runtime/device/staging_pipeline.h"

namespace braid {

using collectives::CollectiveArgs;
using collectives::Kind;

bool StagingPipeline::reduce_on_device(const std::string& mode, const CollectiveArgs& a, int size) {
  // avg is a sum scaled once at the end: the CUDA kernels have no scale, so it stays on the host.
  if ((a.kind != Kind::all_reduce && a.kind != Kind::reduce) || a.op == Op::avg || size < 2) return false;
  if (mode == "device") return true;
  if (mode == "host") return false;
  return size == 2;
}

// Part 0 goes straight into the result, the others into the slot's landing buffer, and each is
// reduced into the result in rank order; all on lane 1, so a reduction starts after the copies
// before it, and the slot's free event, recorded on lane 1 after them, covers the landing buffer.
Status StagingPipeline::queue_device_reduction_locked(size_t i, char* dest) {
  const size_t off = i * chunk_elems_;
  const size_t n = std::min(chunk_elems_, args_.count - off);
  const size_t part = n * esize_;
  const StagingPool::Slot& s = slot(i);
  char* result = dest + off * esize_;
  RETURN_IF_ERROR(api_->copy_async(result, s.data, part, DeviceApi::Copy::to_device, device_, lane_out_));
  if (size_ < 2) return Status::ok();
  RETURN_IF_ERROR(api_->copy_async(s.landing, s.data + part, part * static_cast<size_t>(size_ - 1),
                                   DeviceApi::Copy::to_device, device_, lane_out_));
  // The fault hook queues the reductions where nothing orders them after those copies.
  void* lane = staging_faults_for_testing().reduce_off_lane ? lane_in_ : lane_out_;
  for (size_t r = 1; r < static_cast<size_t>(size_); ++r) {
    RETURN_IF_ERROR(
        api_->reduce_async(result, s.landing + (r - 1) * part, n, args_.dtype, args_.op, device_, lane));
  }
  return Status::ok();
}

}  // namespace braid
