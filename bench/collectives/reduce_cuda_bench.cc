// Device throughput of cuda_reduce_into: in-place sum a += b of f32 and bf16 in GPU memory,
// next to a device-to-device copy of the same bytes, in one run. Bytes/s counts the output
// bytes, as reduce_bench does for the host kernels, so the two tables line up; the memory
// traffic behind it is 3x that for the sum (read a and b, write a) and 2x for the copy.
//
// Timed with CUDA events on one stream of the benchmark's own (manual time): each iteration
// is a batch of back-to-back launches between two events (Time is per batch), so the event
// resolution and the host's launch cost are spread over the batch. At 256 KiB a kernel runs
// for about a microsecond, so that figure includes the gaps between kernels; 64 MiB is
// memory-bound.
//
//   build-cuda/bench/collectives/reduce_cuda_bench --benchmark_min_time=0.5
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/kernels/cuda/reduce_cuda.h"
#include "bench/collectives/sum_inputs.h"

namespace braid::collectives {
namespace {

constexpr int64_t kSmall = 256 << 10;
constexpr int64_t kLarge = 64 << 20;

size_t batch_for(size_t bytes) { return bytes < (size_t{4} << 20) ? 200 : 20; }

// Device memory, an event pair and a stream for one benchmark; every error ends the benchmark.
class DeviceRig {
 public:
  explicit DeviceRig(size_t bytes) {
    ok_ = cudaMalloc(&a_, bytes) == cudaSuccess && cudaMalloc(&b_, bytes) == cudaSuccess &&
          cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking) == cudaSuccess &&
          cudaEventCreate(&start_) == cudaSuccess && cudaEventCreate(&stop_) == cudaSuccess;
  }
  ~DeviceRig() {
    if (stop_ != nullptr) cudaEventDestroy(stop_);
    if (start_ != nullptr) cudaEventDestroy(start_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    if (b_ != nullptr) cudaFree(b_);
    if (a_ != nullptr) cudaFree(a_);
  }
  DeviceRig(const DeviceRig&) = delete;
  DeviceRig& operator=(const DeviceRig&) = delete;

  bool ok() const { return ok_; }
  void* a() const { return a_; }
  void* b() const { return b_; }
  cudaStream_t stream() const { return stream_; }

  // Runs `work` `times` times between two events; the elapsed GPU time in seconds, or < 0.
  template <typename Work>
  double time(size_t times, Work work) {
    if (cudaEventRecord(start_, stream_) != cudaSuccess) return -1;
    for (size_t i = 0; i < times; ++i) {
      if (!work()) return -1;
    }
    if (cudaEventRecord(stop_, stream_) != cudaSuccess || cudaEventSynchronize(stop_) != cudaSuccess) return -1;
    float ms = 0;
    if (cudaEventElapsedTime(&ms, start_, stop_) != cudaSuccess) return -1;
    return ms / 1e3;
  }

 private:
  void* a_ = nullptr;
  void* b_ = nullptr;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t start_ = nullptr;
  cudaEvent_t stop_ = nullptr;
  bool ok_ = false;
};

template <typename Work>
void run_timed(benchmark::State& state, DeviceRig& rig, size_t bytes, Work work) {
  const size_t batch = batch_for(bytes);
  if (rig.time(batch, work) < 0) {  // warm-up: first launch, clocks up
    state.SkipWithError("a CUDA call failed in the warm-up");
    return;
  }
  for (auto _ : state) {
    const double seconds = rig.time(batch, work);
    if (seconds < 0) {
      state.SkipWithError("a CUDA call failed");
      return;
    }
    state.SetIterationTime(seconds);
  }
  // One iteration is a whole batch; the time column is per batch, the rate per byte.
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * batch * bytes));
  state.counters["launches_per_iter"] = static_cast<double>(batch);
}

bool have_device(benchmark::State& state) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    state.SkipWithError("no CUDA device");
    return false;
  }
  return true;
}

void BM_CudaMemcpy(benchmark::State& state) {
  if (!have_device(state)) return;
  const size_t bytes = static_cast<size_t>(state.range(0));
  DeviceRig rig(bytes);
  if (!rig.ok()) return state.SkipWithError("cannot allocate device buffers, stream or events");
  run_timed(state, rig, bytes, [&] {
    return cudaMemcpyAsync(rig.a(), rig.b(), bytes, cudaMemcpyDeviceToDevice, rig.stream()) == cudaSuccess;
  });
}

template <DType kType>
void BM_CudaSumInPlace(benchmark::State& state) {
  if (!have_device(state)) return;
  const size_t bytes = static_cast<size_t>(state.range(0));
  const size_t count = bytes / dtype_size(kType);
  DeviceRig rig(bytes);
  if (!rig.ok()) return state.SkipWithError("cannot allocate device buffers, stream or events");
  std::vector<uint8_t> a, b;
  bench::fill_sum_inputs(kType, bytes, &a, &b);
  if (cudaMemcpy(rig.a(), a.data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess ||
      cudaMemcpy(rig.b(), b.data(), bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
    return state.SkipWithError("cannot fill the device buffers");
  }
  run_timed(state, rig, bytes,
            [&] { return cuda_reduce_into(rig.a(), rig.b(), count, kType, Op::sum, rig.stream()) == 0; });
}

BENCHMARK(BM_CudaMemcpy)->Arg(kSmall)->Arg(kLarge)->UseManualTime();
BENCHMARK(BM_CudaSumInPlace<DType::f32>)->Arg(kSmall)->Arg(kLarge)->UseManualTime();
BENCHMARK(BM_CudaSumInPlace<DType::bf16>)->Arg(kSmall)->Arg(kLarge)->UseManualTime();

}  // namespace
}  // namespace braid::collectives

// Names the device in the benchmark's context lines, so a saved result says what it ran on.
int main(int argc, char** argv) {
  cudaDeviceProp prop{};
  int driver = 0;
  if (cudaGetDeviceProperties(&prop, 0) == cudaSuccess && cudaDriverGetVersion(&driver) == cudaSuccess) {
    benchmark::AddCustomContext("cuda_device", prop.name);
    benchmark::AddCustomContext("cuda_driver_api", std::to_string(driver));
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
