#include "runtime/device/device_api.h"

#include <atomic>

#include "braid_config.h"

namespace braid {
namespace {
std::atomic<DeviceApi*> g_testing{nullptr};
}  // namespace

DeviceApi* device_api() {
  DeviceApi* api = g_testing.load(std::memory_order_acquire);
  return api != nullptr ? api : cuda_device_api();
}

void set_device_api_for_testing(DeviceApi* api) { g_testing.store(api, std::memory_order_release); }

#if !BRAID_HAVE_CUDA
DeviceApi* cuda_device_api() { return nullptr; }  // built without the `cuda` feature
#endif

}  // namespace braid
