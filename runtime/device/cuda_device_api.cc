// The CUDA DeviceApi (runtime/device/device_api.h), built with the `cuda` feature.
#include <cuda.h>
#include <cuda_runtime.h>
#include <link.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "common/log.h"
#include "runtime/device/device_api.h"

#if BRAID_DEVICE_KERNELS
#include "collectives/kernels/cuda/reduce_cuda.h"
#endif

namespace braid {
namespace {

// Whether this process has started CUDA: the driver library is loaded by the first CUDA call.
// A program that never touched CUDA has no device buffers, and asking the runtime about a
// pointer would start CUDA (a context on the GPU, hundreds of MiB) for nothing. The loaded
// objects are scanned for the driver only when their count of loads changed since the last look
// (next to nothing otherwise); dlopen(RTLD_NOLOAD) would say the same at about the cost of a
// whole small operation (docs/code_figures.md).
//
// Even a look that stops at the first object is a call into the loader under its lock, a fair
// share of a small operation (docs/performance.md), and operations ask for every buffer. So a
// look that found no driver holds for the rest of the coarse clock's tick (common/deadline.h: a
// few milliseconds): before a device buffer exists, the program must load the driver, start it
// on a GPU and make a context there, which takes far longer than a tick. A driver loaded later
// is noticed at the first operation of the next tick, before any of its buffers can come.
struct DriverProbe {
  unsigned long long known_adds;
  unsigned long long adds = 0;
  bool first = true;
  bool unchanged = false;
  bool found = false;
};

int probe_object(dl_phdr_info* info, size_t, void* arg) {
  auto* p = static_cast<DriverProbe*>(arg);
  if (p->first) {
    p->first = false;
    p->adds = info->dlpi_adds;
    if (p->adds == p->known_adds) return p->unchanged = true;
  }
  if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libcuda.so") != nullptr) return p->found = true;
  return 0;
}

bool cuda_started() {
  static std::atomic<bool> started{false};
  static std::atomic<unsigned long long> scanned_adds{~0ull};
  static std::atomic<Clock::rep> looked_in_tick{Clock::time_point::min().time_since_epoch().count()};
  if (started.load(std::memory_order_relaxed)) return true;
  const Clock::rep tick = coarse_now().time_since_epoch().count();
  if (looked_in_tick.load(std::memory_order_relaxed) == tick) return false;
  DriverProbe probe{scanned_adds.load(std::memory_order_relaxed)};
  dl_iterate_phdr(probe_object, &probe);
  if (probe.found) {
    started.store(true, std::memory_order_relaxed);
    return true;
  }
  if (!probe.unchanged) scanned_adds.store(probe.adds, std::memory_order_relaxed);
  looked_in_tick.store(tick, std::memory_order_relaxed);
  return false;
}

Status cuda_error(const std::string& what, cudaError_t e) {
  return internal_error(what + " failed: " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

// Makes `device` current for the scope and restores the caller's device after.
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (device < 0 || cudaGetDevice(&previous_) != cudaSuccess || previous_ == device) return;
    switched_ = cudaSetDevice(device) == cudaSuccess;
  }
  ~DeviceScope() {
    if (switched_) cudaSetDevice(previous_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int previous_ = -1;
  bool switched_ = false;
};

// The fallback hold where the driver offers no stream memory operations: a host function that
// waits for the gate's word (device_api.h says what that costs other streams).
struct HostWait {
  DeviceApi::Gate gate;
  double bound_s;
};

void run_host_wait(void* p) {
  auto* w = static_cast<HostWait*>(p);
  const Deadline deadline = Deadline::after_seconds(w->bound_s);
  while (static_cast<int32_t>(__atomic_load_n(w->gate.word, __ATOMIC_ACQUIRE) - w->gate.value) < 0 &&
         !deadline.expired()) {
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
  delete w;
}

// Words of mapped pinned memory that streams wait on. A word's value only grows: a gate takes
// the word's value + 1 and release() stores it, so the word may serve the next gate at once (a
// wait still queued for an older value stays satisfied).
class GateWords {
 public:
  Result<uint32_t*> take() {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.empty()) {
      void* slab = nullptr;
      cudaError_t e = cudaHostAlloc(&slab, kSlabWords * sizeof(uint32_t), cudaHostAllocMapped | cudaHostAllocPortable);
      if (e != cudaSuccess) return cuda_error("cudaHostAlloc of the words braid's stream holds wait on", e);
      std::memset(slab, 0, kSlabWords * sizeof(uint32_t));
      for (size_t i = 0; i < kSlabWords; ++i) free_.push_back(static_cast<uint32_t*>(slab) + i);
    }
    uint32_t* w = free_.back();
    free_.pop_back();
    return w;
  }
  void give(uint32_t* w) {
    std::lock_guard<std::mutex> lock(mu_);
    free_.push_back(w);
  }

 private:
  static constexpr size_t kSlabWords = 1024;
  std::mutex mu_;
  std::vector<uint32_t*> free_;
};

using WaitValue32 = CUresult (*)(CUstream, CUdeviceptr, cuuint32_t, unsigned int);

// cuStreamWaitValue32 through the runtime (braid links cudart, not the driver library); null
// where the driver does not offer it.
WaitValue32 wait_value32() {
  static WaitValue32 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuStreamWaitValue32", &p, 12000, cudaEnableDefault, &found) != cudaSuccess ||
        found != cudaDriverEntryPointSuccess) {
      (void)cudaGetLastError();
      return static_cast<WaitValue32>(nullptr);
    }
    return reinterpret_cast<WaitValue32>(p);
  }();
  return fn;
}

class CudaDeviceApi final : public DeviceApi {
 public:
  const char* name() const override { return "cuda"; }
  bool in_use() override { return cuda_started(); }

  DevicePointer classify(const void* p) override {
    if (!cuda_started()) return {};
    cudaPointerAttributes a{};
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
      (void)cudaGetLastError();  // not a pointer CUDA knows: host memory
      return {};
    }
    if (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) return {true, a.device};
    return {};
  }

  Result<void*> alloc_pinned(size_t bytes) override {
    void* p = nullptr;
    cudaError_t e = cudaHostAlloc(&p, bytes, cudaHostAllocPortable);
    if (e != cudaSuccess) return cuda_error("cudaHostAlloc of " + std::to_string(bytes) + " bytes", e);
    std::lock_guard<std::mutex> lock(pinned_mu_);
    pinned_[p] = bytes;
    pinned_in_use_ += bytes;
    pinned_peak_ = std::max(pinned_peak_, pinned_in_use_);
    return p;
  }

  void free_pinned(void* p) override {
    {
      std::lock_guard<std::mutex> lock(pinned_mu_);
      auto it = pinned_.find(p);
      if (it != pinned_.end()) {
        pinned_in_use_ -= it->second;
        pinned_.erase(it);
      }
    }
    cudaFreeHost(p);
  }

  PinnedUse pinned_use() override {
    std::lock_guard<std::mutex> lock(pinned_mu_);
    return {pinned_in_use_, pinned_peak_};
  }

  Status copy_async(void* dst, const void* src, size_t bytes, Copy kind, int device, void* stream) override {
    DeviceScope scope(device);
    const cudaMemcpyKind k = kind == Copy::to_host     ? cudaMemcpyDeviceToHost
                             : kind == Copy::to_device ? cudaMemcpyHostToDevice
                                                       : cudaMemcpyDeviceToDevice;
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, k, static_cast<cudaStream_t>(stream));
    return e == cudaSuccess ? Status::ok() : cuda_error("cudaMemcpyAsync (GPU " + std::to_string(device) + ")", e);
  }

  Status reduce_async(void* dst, const void* src, size_t count, DType dtype, Op op, int device,
                      void* stream) override {
#if BRAID_DEVICE_KERNELS
    DeviceScope scope(device);
    const int e = collectives::cuda_reduce_into(dst, src, count, dtype, op, stream);
    if (e == 0) return Status::ok();
    return cuda_error("the reduction kernel (" + std::string(to_string(dtype)) + " " + to_string(op) + ", " +
                          std::to_string(count) + " elements on GPU " + std::to_string(device) + ")",
                      static_cast<cudaError_t>(e));
#else
    (void)dst, (void)src, (void)count, (void)dtype, (void)op, (void)device, (void)stream;
    return invalid_argument("braid was built without nvcc, so without its CUDA reduction kernels: "
                            "set BRAID_CUDA_REDUCE=host, or rebuild with nvcc in /usr/local/cuda/bin");
#endif
  }

  Result<void*> own_stream(int device, int lane) override {
    DeviceScope scope(device);
    ASSIGN_OR_RETURN(cudaStream_t s, stream_of(device, lane));
    return static_cast<void*>(s);
  }

  Result<void*> alloc_device(size_t bytes, int device) override {
    DeviceScope scope(device);
    void* p = nullptr;
    cudaError_t e = cudaMalloc(&p, bytes);
    if (e != cudaSuccess) {
      return cuda_error("cudaMalloc of " + std::to_string(bytes) + " bytes on GPU " + std::to_string(device), e);
    }
    return p;
  }

  void free_device(void* p, int device) override {
    DeviceScope scope(device);
    cudaFree(p);
  }

  Status copy_to_device(void* dst, const void* src, size_t bytes, int device, const Deadline& deadline) override {
    DeviceScope scope(device);
    ASSIGN_OR_RETURN(cudaStream_t s, stream_of(device, 1));
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess) return cuda_error("cudaMemcpyAsync (host to GPU " + std::to_string(device) + ")", e);
    for (int pass = 0;; ++pass) {
      e = cudaStreamQuery(s);
      if (e == cudaSuccess) return Status::ok();
      if (e != cudaErrorNotReady) return cuda_error("copying the result to GPU " + std::to_string(device), e);
      if (deadline.expired()) {
        return timeout_error("copying the result to GPU " + std::to_string(device) + " did not finish in time");
      }
      if (pass < 64) {
        std::this_thread::yield();
      } else {
        std::this_thread::sleep_for(std::chrono::microseconds(20));
      }
    }
  }

  Result<Event> create_event(int device) override {
    DeviceScope scope(device);
    cudaEvent_t event = nullptr;
    cudaError_t e = cudaEventCreateWithFlags(&event, cudaEventDisableTiming);
    if (e != cudaSuccess) return cuda_error("cudaEventCreateWithFlags", e);
    return static_cast<Event>(event);
  }

  void destroy_event(Event event) override { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

  Status record(Event event, int device, void* stream) override {
    DeviceScope scope(device);
    cudaError_t e = cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream));
    return e == cudaSuccess ? Status::ok() : cuda_error("cudaEventRecord on GPU " + std::to_string(device), e);
  }

  Result<bool> done(Event event) override {
    cudaError_t e = cudaEventQuery(static_cast<cudaEvent_t>(event));
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    return cuda_error("waiting for the GPU work queued before the operation", e);
  }

  Status wait_event(int device, void* stream, Event event) override {
    DeviceScope scope(device);
    cudaError_t e = cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0);
    return e == cudaSuccess ? Status::ok() : cuda_error("cudaStreamWaitEvent on GPU " + std::to_string(device), e);
  }

  Result<Gate> hold(int device, void* stream, double bound_s) override {
    DeviceScope scope(device);
    ASSIGN_OR_RETURN(uint32_t* word, words_.take());
    const Gate gate{word, __atomic_load_n(word, __ATOMIC_ACQUIRE) + 1};
    auto* s = static_cast<cudaStream_t>(stream);
    if (WaitValue32 wait = wait_value32()) {
      void* on_device = nullptr;
      cudaError_t e = cudaHostGetDevicePointer(&on_device, word, 0);
      if (e == cudaSuccess) {
        const CUresult r = wait(s, reinterpret_cast<CUdeviceptr>(on_device), gate.value, CU_STREAM_WAIT_VALUE_GEQ);
        if (r == CUDA_SUCCESS) return gate;
      }
      (void)cudaGetLastError();
    }
    // No stream memory operations on this GPU or driver: hold the stream in a host function.
    static std::once_flag said;
    std::call_once(said, [device] {
      BRAID_LOG(warn) << "CUDA: GPU " << device << " or its driver does not take stream memory operations "
                      << "(cuStreamWaitValue32), so braid holds the caller's stream in a host function instead; "
                      << "with several communicators or ranks in one process their operations may then wait for "
                      << "each other (docs/cuda.md, \"Ordering with the caller's stream\")";
    });
    auto* boxed = new HostWait{gate, bound_s};
    cudaError_t e = cudaLaunchHostFunc(s, run_host_wait, boxed);
    if (e != cudaSuccess) {
      delete boxed;
      words_.give(word);
      return cuda_error("cudaLaunchHostFunc on the communicator's stream", e);
    }
    return gate;
  }

  void release(const Gate& gate) override {
    __atomic_store_n(gate.word, gate.value, __ATOMIC_RELEASE);
    words_.give(gate.word);
  }

  Status load_kernels(int device) override {
#if BRAID_DEVICE_KERNELS
    std::lock_guard<std::mutex> lock(loaded_mu_);
    if (loaded_.count(device) != 0) return Status::ok();
    DeviceScope scope(device);
    const int e = collectives::cuda_reduce_load();
    if (e != 0) {
      return cuda_error("loading braid's reduction kernels on GPU " + std::to_string(device) +
                            " (were they built for this GPU? meson's gpu_archs option names the architectures)",
                        static_cast<cudaError_t>(e));
    }
    loaded_.insert(device);
#else
    (void)device;
#endif
    return Status::ok();
  }

 private:
  // Streams of our own per GPU and lane (device_api.h): they must not wait for the legacy
  // default stream, which the caller's stream may be (and which a hold of ours may hold).
  Result<cudaStream_t> stream_of(int device, int lane) {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = streams_.find({device, lane});
    if (it != streams_.end()) return it->second;
    cudaStream_t s = nullptr;
    cudaError_t e = cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    if (e != cudaSuccess) return cuda_error("cudaStreamCreateWithFlags", e);
    streams_[{device, lane}] = s;
    return s;
  }

  std::mutex mu_;
  std::map<std::pair<int, int>, cudaStream_t> streams_;
  GateWords words_;
  std::mutex loaded_mu_;
  std::set<int> loaded_;  // GPUs whose context holds braid's kernels
  std::mutex pinned_mu_;
  std::map<void*, size_t> pinned_;  // every pinned buffer braid holds, with its size
  size_t pinned_in_use_ = 0;
  size_t pinned_peak_ = 0;
};

}  // namespace

DeviceApi* cuda_device_api() {
  static auto* api = new CudaDeviceApi;  // never destroyed: CUDA may be torn down first at exit
  return api;
}

}  // namespace braid
