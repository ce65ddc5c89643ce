// runtime/device/device_api.h - the few CUDA calls the runtime makes for device buffers, as a seam.
//
// A collective on device memory is staged through pinned host buffers (device_staging.h). What
// that needs from CUDA is small: tell a device pointer from a host one, pinned host memory,
// copies in both directions, events, a stream held until an operation ends, and a reduction launched
// on a stream. This interface
// names exactly that, so the staging logic runs in CI against a fake (tests/runtime/device)
// and on a GPU against CUDA (cuda_device_api.cc, built with the `cuda` feature).
//
// A device pointer's GPU (`device`) travels with every call that touches it: the calling thread
// may have another current device, which the CUDA implementation restores before returning.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>

#include "braid/types.h"
#include "common/deadline.h"
#include "common/status.h"

namespace braid {

struct DevicePointer {
  bool on_device = false;  // device (or managed) memory: reached only through copies
  int device = -1;         // its GPU
};

class DeviceApi {
 public:
  virtual ~DeviceApi() = default;
  virtual const char* name() const = 0;

  // Never fails: anything that is not known device memory is host memory.
  virtual DevicePointer classify(const void* p) = 0;
  // False while no buffer of this process can be device memory (CUDA not started), so that an
  // operation asks once for all its buffers instead of once per buffer; classify() says the same
  // for each pointer. Cheap: for CUDA a look at the loaded objects at most once per tick of the
  // coarse clock (cuda_device_api.cc says why a tick is safe), a clock read otherwise.
  virtual bool in_use() { return true; }

  // Page-locked host memory, which copies reach at full speed and asynchronously.
  virtual Result<void*> alloc_pinned(size_t bytes) = 0;
  virtual void free_pinned(void* p) = 0;

  // Queued on `stream` (a cudaStream_t; nullptr: the default stream), after what is queued there.
  enum class Copy { to_host, to_device, on_device };
  virtual Status copy_async(void* dst, const void* src, size_t bytes, Copy kind, int device, void* stream) = 0;
  // Copies host -> device on a stream of braid's own that waits for no other stream (the
  // caller's stream may be held back until this very operation ends), and returns when
  // the copy is done or `deadline` passed.
  virtual Status copy_to_device(void* dst, const void* src, size_t bytes, int device, const Deadline& deadline) = 0;
  // Streams of braid's own on `device` (lane 0: towards the host, 1: towards the device), created
  // once and kept. They wait for no other stream, so a hold on the caller's stream
  // never holds them back.
  virtual Result<void*> own_stream(int device, int lane) = 0;

  // dst[i] = dst[i] op src[i] for `count` elements of device memory, queued on `stream` (the CUDA
  // kernels of collectives/kernels/cuda, with reduce_into's contract: op is never avg).
  virtual Status reduce_async(void* dst, const void* src, size_t count, DType dtype, Op op, int device,
                              void* stream) = 0;

  // Device memory for results that must not reach the caller's buffer before the whole
  // operation succeeded (staging_pipeline.h).
  virtual Result<void*> alloc_device(size_t bytes, int device) = 0;
  virtual void free_device(void* p, int device) = 0;

  // Events are made once and recorded many times (event_pool.h keeps them): record() marks what
  // is queued on `stream` now; done() says whether the GPU got there; wait_event() makes the
  // later work of `stream` wait for the event's latest record.
  using Event = void*;
  virtual Result<Event> create_event(int device) = 0;
  virtual void destroy_event(Event event) = 0;
  virtual Status record(Event event, int device, void* stream) = 0;
  virtual Result<bool> done(Event event) = 0;
  virtual Status wait_event(int device, void* stream, Event event) = 0;

  // Pinned host memory braid holds now, and the most it held at once (bytes), for benchmarks
  // and checks; 0 where the implementation does not count.
  struct PinnedUse {
    size_t in_use = 0;
    size_t peak = 0;
  };
  virtual PinnedUse pinned_use() { return {}; }

  // Holds `stream`'s later work until release(gate). The stream waits on a word of memory (on
  // CUDA a stream memory operation, cuStreamWaitValue32), not in a host function: CUDA may run
  // the host functions of all streams on one thread of its own, so a host function that blocks
  // until an operation ends also stops every other stream's host functions, other ranks' and
  // other communicators' among them, which that operation may be waiting for. `bound_s` limits
  // the hold only where the word cannot be waited on and a host function is the fallback.
  struct Gate {
    uint32_t* word = nullptr;
    uint32_t value = 0;  // the stream goes on once *word reaches it
  };
  virtual Result<Gate> hold(int device, void* stream, double bound_s) = 0;
  // Lets the held stream go on; once per gate, from any thread.
  virtual void release(const Gate& gate) = 0;

  // Loads what braid runs on `device` (its reduction kernels) into the GPU's context, once per
  // device; the staging calls it before it holds any stream (before hold()). CUDA
  // loads kernels lazily, and loading one may wait for every stream of the GPU, the held one
  // included: a first reduction queued while an operation holds its caller's stream would wait
  // for that operation, which waits for the reduction.
  virtual Status load_kernels(int device) = 0;
};

// The process's DeviceApi: the CUDA one when braid was built with CUDA, else nullptr. A
// program that never touched CUDA has no device buffers, and braid does not start CUDA for it.
DeviceApi* device_api();
// Tests: replaces the process's DeviceApi (nullptr restores the built-in one).
void set_device_api_for_testing(DeviceApi* api);

// The built-in CUDA implementation (nullptr without the `cuda` feature).
DeviceApi* cuda_device_api();

}  // namespace braid
