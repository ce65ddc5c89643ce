#include "runtime/device/device_staging.h"

#include <algorithm>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/validate.h"
#include "common/log.h"
#include "runtime/device/event_pool.h"
#include "runtime/work_state.h"

namespace braid {

using collectives::CollectiveArgs;

namespace {

// Pinned allocations take milliseconds (the pages are locked), so buffers are kept for reuse:
// a training loop stages the same few sizes every step. At most kKeep stay cached; one is
// reused for a request of at least a quarter of its size.
class PinnedPool {
 public:
  Result<char*> take(DeviceApi* api, size_t bytes) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      collect_later_locked();
      auto best = free_.end();
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->api == api && it->bytes >= bytes && it->bytes / 4 <= bytes &&
            (best == free_.end() || it->bytes < best->bytes)) {
          best = it;
        }
      }
      if (best != free_.end()) {
        char* p = best->data;
        free_.erase(best);
        return p;
      }
    }
    ASSIGN_OR_RETURN(void* p, api->alloc_pinned(bytes));
    std::lock_guard<std::mutex> lock(mu_);
    known_.push_back(Entry{api, static_cast<char*>(p), bytes});
    return static_cast<char*>(p);
  }

  // Buffers a copy on the GPU may still write (its operation ended first): they come back
  // once `event` is done, checked whenever a buffer is taken.
  void give_later(DeviceApi* api, int device, DeviceApi::Event event, std::vector<char*> buffers) {
    std::lock_guard<std::mutex> lock(mu_);
    later_.push_back(Later{api, device, event, std::move(buffers)});
  }

  void give(char* p) {
    std::lock_guard<std::mutex> lock(mu_);
    give_locked(p);
  }

 private:
  void collect_later_locked() {
    for (size_t i = 0; i < later_.size();) {
      Result<bool> done = later_[i].api->done(later_[i].event);
      if (done.is_ok() && !done.value()) {
        ++i;
        continue;
      }
      EventPool::get().give(later_[i].api, later_[i].device, later_[i].event);
      for (char* p : later_[i].buffers) give_locked(p);
      later_.erase(later_.begin() + static_cast<std::ptrdiff_t>(i));
    }
  }

  void give_locked(char* p) {
    auto it = std::find_if(known_.begin(), known_.end(), [&](const Entry& e) { return e.data == p; });
    if (it == known_.end()) return;
    free_.push_back(*it);
    if (free_.size() > kKeep) {  // the smallest goes: big ones are the expensive ones to make
      auto smallest = std::min_element(free_.begin(), free_.end(),
                                       [](const Entry& a, const Entry& b) { return a.bytes < b.bytes; });
      char* gone = smallest->data;
      DeviceApi* owner = smallest->api;
      free_.erase(smallest);
      known_.erase(std::find_if(known_.begin(), known_.end(), [&](const Entry& e) { return e.data == gone; }));
      owner->free_pinned(gone);
    }
  }

  static constexpr size_t kKeep = 8;
  struct Entry {
    DeviceApi* api;
    char* data;
    size_t bytes;
  };
  std::mutex mu_;
  std::vector<Entry> known_;  // every buffer this pool made and still holds or lent, with its size
  std::vector<Entry> free_;
  struct Later {
    DeviceApi* api;
    int device;
    DeviceApi::Event event;
    std::vector<char*> buffers;
  };
  std::vector<Later> later_;
};

PinnedPool& pool() {
  static auto* p = new PinnedPool;  // never destroyed: CUDA may be gone at exit
  return *p;
}

}  // namespace

Result<std::unique_ptr<DeviceStaging>> DeviceStaging::stage(
    DeviceApi* api, CollectiveArgs& args, int rank, int size, void* stream,
    const std::function<std::shared_ptr<StagingPool>()>& pool) {
  // Once per operation, not per buffer: without CUDA started every buffer is host memory.
  if (api == nullptr || !api->in_use()) return std::unique_ptr<DeviceStaging>();
  collectives::BufferExtents x = collectives::buffer_extents(args, rank, size);
  x.send *= dtype_size(args.dtype);  // bytes from here on
  x.recv *= dtype_size(args.dtype);
  const auto* send = static_cast<const char*>(args.send);
  auto* recv = static_cast<char*>(args.recv);
  const DevicePointer ps = x.send > 0 && send != nullptr ? api->classify(send) : DevicePointer{};
  DevicePointer pr;  // in place: the same buffer, asked about once
  if (x.recv > 0 && recv != nullptr) pr = x.send > 0 && static_cast<const void*>(recv) == args.send ? ps : api->classify(recv);
  if (!ps.on_device && !pr.on_device) return std::unique_ptr<DeviceStaging>();
  if (ps.on_device && pr.on_device && ps.device != pr.device) {
    return invalid_argument("the send buffer is on GPU " + std::to_string(ps.device) + " and the receive buffer on GPU " +
                            std::to_string(pr.device) + ": both must be on the same GPU");
  }
  const int device = ps.on_device ? ps.device : pr.device;
  RETURN_IF_ERROR(api->load_kernels(device));  // before this operation (or any) holds a stream
  std::unique_ptr<DeviceStaging> st(new DeviceStaging(api, device, stream));
  if (pool && StagingPipeline::covers(args) && (x.send == 0 || ps.on_device) && (x.recv == 0 || pr.on_device)) {
    ASSIGN_OR_RETURN(st->pipe_, StagingPipeline::make(api, pool(), args, rank, size, device, stream));
    if (st->pipe_ != nullptr) return st;
  }
  if (ps.on_device && pr.on_device && send < recv + x.recv && recv < send + x.send) {
    // In place, or one buffer inside the other (all_gather's own block, reduce_scatter's): one
    // pinned buffer for both. Only the input is copied in: every operation writes the whole of
    // its output, so the rest would only be overwritten (all_gather in place: 1/size of it).
    const char* lo = std::min<const char*>(send, recv);
    const char* hi = std::max<const char*>(send + x.send, recv + x.recv);
    ASSIGN_OR_RETURN(char* buf, st->take(static_cast<size_t>(hi - lo)));
    RETURN_IF_ERROR(api->copy_async(buf + (send - lo), send, x.send, DeviceApi::Copy::to_host, device, stream));
    args.send = buf + (send - lo);
    args.recv = buf + (recv - lo);
    st->out_host_ = buf + (recv - lo);
  } else {
    if (ps.on_device) {
      ASSIGN_OR_RETURN(char* buf, st->take(x.send));
      RETURN_IF_ERROR(api->copy_async(buf, send, x.send, DeviceApi::Copy::to_host, device, stream));
      args.send = buf;
    }
    if (pr.on_device) {  // every operation writes the whole of this rank's output
      ASSIGN_OR_RETURN(char* buf, st->take(x.recv));
      args.recv = buf;
      st->out_host_ = buf;
    }
  }
  if (pr.on_device) {
    st->out_device_ = recv;
    st->out_bytes_ = x.recv;
  }
  ASSIGN_OR_RETURN(st->input_, EventPool::get().take(api, device));
  Status recorded = api->record(st->input_, device, stream);
  if (!recorded.is_ok()) {
    EventPool::get().give(api, device, st->input_);
    st->input_ = nullptr;  // nothing recorded: the destructor has nothing to wait for
    return recorded;
  }
  return st;
}

Result<char*> DeviceStaging::take(size_t bytes) {
  ASSIGN_OR_RETURN(char* p, pool().take(api_, std::max<size_t>(bytes, 1)));
  pinned_[npinned_++] = p;
  return p;
}

Result<std::vector<DeviceStaging::Chunk>> DeviceStaging::chunks(std::shared_ptr<detail::WorkState> work) {
  RETURN_IF_ERROR(pipe_->start(std::move(work)));
  std::vector<Chunk> out(pipe_->chunks());
  for (size_t i = 0; i < out.size(); ++i) {
    out[i].args = pipe_->chunk_args(i);
    out[i].work = std::make_shared<detail::WorkState>();
    out[i].staging.reset(new DeviceStaging(api_, device_, stream_));
    out[i].staging->pipe_ = pipe_;
    out[i].staging->chunk_ = i;
    out[i].staging->work_ = out[i].work;
  }
  return out;
}

DeviceStaging::~DeviceStaging() {
  if (pipe_ != nullptr) {
    if (chunk_ != kWhole) {
      pipe_->drop(chunk_, work_->done() ? work_->status()
                                        : Status(ErrorCode::aborted, "the operation ended before this chunk ran"));
    }
    return;
  }
  std::vector<char*> buffers;
  for (int i = 0; i < npinned_; ++i) buffers.push_back(pinned_[i]);
  // An operation that failed before its input arrived: the copy may still write into a pinned
  // buffer, which goes back to the pool only once the GPU has passed the event.
  if (!input_ready()) {
    pool().give_later(api_, device_, input_, std::move(buffers));
    return;
  }
  EventPool::get().give(api_, device_, input_);
  for (char* p : buffers) pool().give(p);
}

Status DeviceStaging::hold_stream(const std::shared_ptr<detail::WorkState>& work, double bound_s) {
  ASSIGN_OR_RETURN(DeviceApi::Gate gate, api_->hold(device_, stream_, bound_s));
  // Released when the Work completes, or when its state goes away without completing (a
  // communicator destroyed mid-operation): a held stream is never left behind.
  work->on_done = [api = api_, gate] { api->release(gate); };
  return Status::ok();
}

bool DeviceStaging::input_ready() {
  if (pipe_ != nullptr) {
    Result<bool> r = pipe_->input_ready(chunk_);
    return !r.is_ok() || r.value();  // an error counts as ready: waiting reports it
  }
  if (input_done_ || input_ == nullptr) return true;
  Result<bool> r = api_->done(input_);
  if (r.is_ok() && !r.value()) return false;
  input_done_ = r.is_ok();
  return true;
}

Status DeviceStaging::wait_input(const Deadline& deadline, const std::function<bool()>& stop) {
  if (pipe_ == nullptr && (input_done_ || input_ == nullptr)) return Status::ok();
  for (int pass = 0;; ++pass) {
    ASSIGN_OR_RETURN(bool done, pipe_ != nullptr ? pipe_->input_ready(chunk_) : api_->done(input_));
    if (done) {
      input_done_ = true;
      return Status::ok();
    }
    if (stop()) return Status(ErrorCode::aborted, "stopped while waiting for the GPU");
    if (deadline.expired()) {
      return timeout_error("the GPU work queued on the stream before this operation (and the copy of its input) "
                           "did not finish in time (BRAID_TIMEOUT_S); is a kernel on GPU " + std::to_string(device_) +
                           " stuck, or is the stream waiting for another rank?");
    }
    // A kernel that is still running: poll often at first, then every 100 us.
    if (pass < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
}

Status DeviceStaging::finish(const Deadline& deadline) {
  if (pipe_ != nullptr) return pipe_->finish(chunk_, deadline);
  if (out_bytes_ == 0) return Status::ok();
  return api_->copy_to_device(out_device_, out_host_, out_bytes_, device_, deadline);
}

}  // namespace braid
