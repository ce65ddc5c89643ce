// runtime/device/comm_device.h - a communicator's CUDA side: the caller's stream that operations
// on device buffers are ordered on, and the pinned slots they are staged through, made at first
// use (device_staging.h, staging_pipeline.h).
//
// Threading: any thread.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include "collectives/collective.h"
#include "common/function_ref.h"
#include "runtime/communicator_config.h"
#include "runtime/device/device_staging.h"
#include "runtime/work_state.h"

namespace braid {

class CommDevice {
 public:
  // `cfg` outlives this.
  explicit CommDevice(const CommunicatorConfig& cfg) : cfg_(cfg) {}

  void set_stream(void* stream) { stream_.store(stream, std::memory_order_relaxed); }
  void* stream() const { return stream_.load(std::memory_order_relaxed); }

  // When `args` touches device memory: stages it (args then point at pinned buffers) and holds
  // the stream until `work` completes; null for host buffers. Throws braid::Error, naming the
  // operation, on failure, and when `group_open()` says a group is open (not supported yet).
  std::unique_ptr<DeviceStaging> stage(collectives::CollectiveArgs& args, const std::shared_ptr<detail::WorkState>& work,
                                       FunctionRef<bool()> group_open) {
    // Host buffers while CUDA is not started, the common case: asked once, before anything is
    // built, and inline (the staging below sets up a large frame before it could return).
    DeviceApi* api = device_api();
    if (api == nullptr || !api->in_use()) return nullptr;
    return stage_on(api, args, work, group_open);
  }

 private:
  std::unique_ptr<DeviceStaging> stage_on(DeviceApi* api, collectives::CollectiveArgs& args,
                                          const std::shared_ptr<detail::WorkState>& work, FunctionRef<bool()> group_open);

  const CommunicatorConfig& cfg_;
  std::atomic<void*> stream_{nullptr};
  std::once_flag staging_once_;
  std::shared_ptr<StagingPool> staging_pool_;  // set once, under staging_once_
};

}  // namespace braid
