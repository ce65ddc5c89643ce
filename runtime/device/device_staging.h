// runtime/device/device_staging.h - collectives on CUDA device buffers, staged through pinned host memory.
//
// When a call's buffer is device memory, the operation runs on pinned host copies, ordered on
// the communicator's CUDA stream (Communicator::set_stream):
//   at the call    the device input is copied into a pinned buffer on that stream and an event is
//                  recorded after it (recorded even when nothing is copied: it marks the GPU
//                  work queued before the call); then the stream's later work is held
//                  (DeviceApi::hold) until the operation's Work completes;
//   when it runs   the operation waits (bounded by its timeout) for the event, runs on the pinned
//                  buffers like any host operation, and on success copies the result into the
//                  device buffer before its Work completes.
// So Work::wait() returning means the device buffer holds the result, and work queued on the
// stream after the call sees it. A failed operation leaves the device buffer untouched.
// Every collective but send/recv and the uneven forms goes further: it runs chunk by chunk through
// the communicator's bounded pinned slots, the copies overlapping the network, and all_reduce and
// reduce may reduce on the GPU (staging_pipeline.h); such a staging is split into one staging per
// chunk (chunks()), each queued as an operation. send/recv and the uneven forms copy whole buffers
// once in and once out, through pinned buffers kept for reuse outside that bound, and reduce on
// the host.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>

#include "collectives/collective.h"
#include "common/deadline.h"
#include "common/status.h"
#include "runtime/device/device_api.h"
#include "runtime/device/staging_pipeline.h"

namespace braid {

namespace detail {
struct WorkState;
}

class DeviceStaging {
 public:
  // When `args` reads or writes device memory: queues the input copy and the event on `stream`,
  // points args at pinned buffers and returns the staging; nullptr when no buffer is on a GPU
  // (or `api` is null). Fails when the buffers are on two different GPUs or CUDA refuses a call.
  // `pool` (called only when a buffer is on a GPU) gives the communicator's pinned slots; without
  // it nothing is pipelined.
  static Result<std::unique_ptr<DeviceStaging>> stage(
      DeviceApi* api, collectives::CollectiveArgs& args, int rank, int size, void* stream,
      const std::function<std::shared_ptr<StagingPool>()>& pool = {});
  // Returns the pinned buffers once the input copy is surely done (bounded; leaks them rather
  // than free memory a copy may still write).
  ~DeviceStaging();
  DeviceStaging(const DeviceStaging&) = delete;
  DeviceStaging& operator=(const DeviceStaging&) = delete;

  // Holds the stream's later work until `work` completes (DeviceApi::hold; `bound_s` bounds the
  // fallback where the stream cannot wait on memory). Call before `work` is handed out.
  Status hold_stream(const std::shared_ptr<detail::WorkState>& work, double bound_s);
  // Whether the GPU has passed the event (an error counts as ready: waiting reports it).
  bool input_ready();
  // Waits until the GPU has passed the event, `deadline` passes or `stop()` says so.
  Status wait_input(const Deadline& deadline, const std::function<bool()>& stop);
  // After the operation succeeded: copies the result into the device buffer.
  Status finish(const Deadline& deadline);

  int device() const { return device_; }

  // Whether the operation runs as chunks: then chunks() replaces it (args are left as they were).
  bool pipelined() const { return pipe_ != nullptr && chunk_ == kWhole; }
  struct Chunk {
    collectives::CollectiveArgs args;          // the chunk's host collective, on its pinned slot
    std::unique_ptr<DeviceStaging> staging;    // its input, result and slot
    std::shared_ptr<detail::WorkState> work;   // its own Work: `work` (below) ends when all did
  };
  // The chunks, in order; `work` (the caller's) completes after the last chunk's result reached
  // the device buffer, or with the first failure. Call in the order operations are queued.
  Result<std::vector<Chunk>> chunks(std::shared_ptr<detail::WorkState> work);

 private:
  DeviceStaging(DeviceApi* api, int device, void* stream) : api_(api), device_(device), stream_(stream) {}
  Result<char*> take(size_t bytes);

  DeviceApi* api_;
  int device_;
  void* stream_;
  char* pinned_[2] = {};  // at most one for the input and one for the output
  int npinned_ = 0;
  DeviceApi::Event input_ = nullptr;
  bool input_done_ = false;
  // The result's way back: `bytes` from `host` (pinned) to `device_ptr`.
  void* out_device_ = nullptr;
  const char* out_host_ = nullptr;
  size_t out_bytes_ = 0;
  // Pipelined: the operation's pipeline, and which chunk this is (kWhole: the operation itself).
  static constexpr size_t kWhole = ~size_t{0};
  std::shared_ptr<StagingPipeline> pipe_;
  size_t chunk_ = kWhole;
  std::shared_ptr<detail::WorkState> work_;
};

}  // namespace braid
