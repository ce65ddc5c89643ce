// cuda_staging_bench: all_reduce on device buffers (staged through BRAID_CUDA_STAGING_BYTES of
// pinned memory, runtime/device/staging_pipeline.h) next to the same on host buffers, in one run: two
// ranks as threads of one process on GPU 0 over the tcp transport (loopback), host and device
// iterations alternating. Prints median busbw of each and their ratio (device / host; the goal
// is >= 0.9: the copies hidden behind the network), and the pinned memory braid held: at the
// end of each size and at its peak (which must stay at BRAID_CUDA_STAGING_BYTES per rank plus the
// host path's none). BRAID_CUDA_REDUCE (auto: the GPU with 2 ranks) says where device buffers
// are reduced. scripts/gpu_check.sh runs it with host and device.
//
//   cuda_staging_bench [MiB ...]     (default: 64 1024)
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "common/env.h"
#include "runtime/device/device_api.h"
#include "tests/support/in_process_job.h"

namespace {

using Clock = std::chrono::steady_clock;
constexpr int kRanks = 2;

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per all_reduce of `bytes`, host and device, rank 0's view (medians).
bool measure(braid::testing::InProcessJob& job, size_t bytes, int iters, double* host_s, double* device_s) {
  std::vector<double> host_t[kRanks], dev_t[kRanks];
  bool ok = true;
  std::vector<std::thread> threads;
  for (int r = 0; r < kRanks; ++r) {
    threads.emplace_back([&, r] {
      try {
        cudaSetDevice(0);
        braid::Communicator comm = job.make(r);
        cudaStream_t stream = nullptr;
        cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking);
        comm.set_stream(stream);
        const size_t n = bytes / sizeof(float);
        std::vector<float> host(n, 1.0f);
        float* dev = nullptr;
        if (cudaMalloc(&dev, bytes) != cudaSuccess) throw std::runtime_error("cudaMalloc failed");
        cudaMemcpy(dev, host.data(), bytes, cudaMemcpyHostToDevice);
        for (int it = -2; it < iters; ++it) {  // two warm-up rounds
          comm.barrier();
          auto t0 = Clock::now();
          comm.all_reduce(host.data(), n, braid::DType::f32, braid::Op::sum);
          auto t1 = Clock::now();
          comm.barrier();
          auto t2 = Clock::now();
          comm.all_reduce(dev, n, braid::DType::f32, braid::Op::sum);
          cudaStreamSynchronize(stream);
          auto t3 = Clock::now();
          if (it >= 0) {
            host_t[r].push_back(std::chrono::duration<double>(t1 - t0).count());
            dev_t[r].push_back(std::chrono::duration<double>(t3 - t2).count());
          }
        }
        cudaFree(dev);
        cudaStreamDestroy(stream);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "cuda_staging_bench: rank %d: %s\n", r, e.what());
        ok = false;
      }
    });
  }
  for (auto& t : threads) t.join();
  if (!ok) return false;
  *host_s = median(host_t[0]);
  *device_s = median(dev_t[0]);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<size_t> mib;
  for (int i = 1; i < argc; ++i) mib.push_back(std::strtoull(argv[i], nullptr, 10));
  if (mib.empty()) mib = {64, 1024};
  int ndev = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev == 0) {
    std::fprintf(stderr, "cuda_staging_bench: no usable CUDA device\n");
    return 2;
  }
  cudaDeviceProp prop{};
  cudaGetDeviceProperties(&prop, 0);
  const auto& env = braid::global_env();
  if (!env.is_ok()) {
    std::fprintf(stderr, "cuda_staging_bench: %s\n", env.status().message().c_str());
    return 2;
  }
  const size_t staging = env.value().cuda_staging_bytes;
  const std::string reduce = env.value().cuda_reduce;
  std::printf("GPU 0: %s; %d ranks on it (one process, BRAID_TRANSPORT=auto: shm); BRAID_CUDA_STAGING_BYTES %zu; BRAID_CUDA_REDUCE %s\n",
              prop.name, kRanks, staging, reduce.c_str());
  std::printf("%10s %16s %18s %8s %16s %16s\n", "bytes", "host busbw GB/s", "device busbw GB/s", "ratio",
              "pinned now MiB", "pinned peak MiB");
  for (size_t m : mib) {
    const size_t bytes = m << 20;
    braid::testing::JobSettings settings{"auto", kRanks, 300, 60, 0x5a9e + m};
    settings.cuda_staging_bytes = staging;
    settings.cuda_reduce = reduce;
    braid::testing::InProcessJob job(settings);
    double host_s = 0, dev_s = 0;
    if (!measure(job, bytes, m >= 512 ? 5 : 15, &host_s, &dev_s)) return 1;
    // busbw = algbw * 2(n-1)/n (nccl-tests); n = 2: algbw.
    const double factor = 2.0 * (kRanks - 1) / kRanks;
    const double host_bw = bytes / host_s * factor / 1e9, dev_bw = bytes / dev_s * factor / 1e9;
    const braid::DeviceApi::PinnedUse pinned = braid::cuda_device_api()->pinned_use();
    std::printf("%10zu %16.2f %18.2f %8.2f %16.1f %16.1f\n", bytes, host_bw, dev_bw, dev_bw / host_bw,
                pinned.in_use / 1048576.0, pinned.peak / 1048576.0);
  }
  return 0;
}
