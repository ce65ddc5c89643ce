// runtime/device/event_pool.h - DeviceApi events kept for reuse instead of made per operation.
//
// Creating and destroying a CUDA event costs a driver call each; an operation on device buffers
// needs a few (its input, each staged chunk, its result). The pool hands out events that are
// free to record again: one is given back only once nothing can still ask about its previous
// record (its waiters captured it when they were queued, which is CUDA's rule for
// cudaStreamWaitEvent). The pool is per process and never destroyed (CUDA may be gone at exit).
#pragma once

#include "common/status.h"
#include "runtime/device/device_api.h"

namespace braid {

class EventPool {
 public:
  static EventPool& get();
  // A free event of `device`: a kept one, else a new one.
  Result<DeviceApi::Event> take(DeviceApi* api, int device);
  // Keeps `event` for the next take (destroys it when the pool already keeps enough).
  void give(DeviceApi* api, int device, DeviceApi::Event event);
};

}  // namespace braid
