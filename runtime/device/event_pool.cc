#include "runtime/device/event_pool.h"

#include <mutex>
#include <vector>

namespace braid {
namespace {

// Enough for a few pipelines in flight per GPU; beyond it, events go back to the driver.
constexpr size_t kKeepPerDevice = 64;

struct Kept {
  DeviceApi* api;
  int device;
  DeviceApi::Event event;
};

std::mutex g_mu;
std::vector<Kept>* g_kept = new std::vector<Kept>;  // never destroyed: see event_pool.h

}  // namespace

EventPool& EventPool::get() {
  static EventPool pool;
  return pool;
}

Result<DeviceApi::Event> EventPool::take(DeviceApi* api, int device) {
  {
    std::lock_guard<std::mutex> lock(g_mu);
    for (auto it = g_kept->rbegin(); it != g_kept->rend(); ++it) {
      if (it->api == api && it->device == device) {
        DeviceApi::Event e = it->event;
        g_kept->erase(std::next(it).base());
        return e;
      }
    }
  }
  return api->create_event(device);
}

void EventPool::give(DeviceApi* api, int device, DeviceApi::Event event) {
  if (event == nullptr) return;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    size_t same = 0;
    for (const Kept& k : *g_kept) same += k.api == api && k.device == device ? 1 : 0;
    if (same < kKeepPerDevice) {
      g_kept->push_back(Kept{api, device, event});
      return;
    }
  }
  api->destroy_event(event);
}

}  // namespace braid
