// Collectives on real CUDA buffers: two ranks as threads of one process over the tcp transport,
// both on GPU 0, each ordering its operations on a non-blocking stream of its own; and one rank
// on the legacy default stream. Built with the `cuda` feature; skips (saying why) where no GPU is usable.
// scripts/gpu_check.sh runs it on a machine with a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "runtime/device_api.h"
#include "tests/support/in_process_job.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
constexpr int kRanks = 2;

#define CUDA_OK(call)                                                                       \
  do {                                                                                      \
    cudaError_t e_ = (call);                                                                \
    ASSERT_EQ(e_, cudaSuccess) << #call << ": " << cudaGetErrorName(e_) << " " << cudaGetErrorString(e_); \
  } while (0)

class CudaComm : public ::testing::Test {
 protected:
  void SetUp() override {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      GTEST_SKIP() << "no usable CUDA device (cudaGetDeviceCount: " << cudaGetErrorName(e) << ", " << n << " devices)";
    }
    job_ = std::make_unique<testing::InProcessJob>(testing::JobSettings{"auto", kRanks, 30, 10, 0xc0da});
  }

  Communicator make(int rank, int size = kRanks) { return job_->make(rank, size); }

  void on_every_rank(const std::function<void(int)>& body) {
    testing::run_ranks(kRanks, [&](int r) {
      cudaSetDevice(0);
      body(r);
    });
  }

  std::unique_ptr<testing::InProcessJob> job_;
};

TEST_F(CudaComm, DeviceBuffersAreClassifiedAndHostOnesAreNot) {
  float* d = nullptr;
  float* m = nullptr;
  float* pinned = nullptr;
  CUDA_OK(cudaMalloc(&d, 64));
  CUDA_OK(cudaMallocManaged(&m, 64));
  CUDA_OK(cudaMallocHost(&pinned, 64));
  std::vector<float> plain(16);
  DeviceApi* api = cuda_device_api();
  ASSERT_NE(api, nullptr);
  EXPECT_TRUE(api->classify(d).on_device);
  EXPECT_EQ(api->classify(d + 3).device, 0);
  EXPECT_TRUE(api->classify(m).on_device);  // managed: staged too, so stream order holds
  EXPECT_FALSE(api->classify(pinned).on_device);
  EXPECT_FALSE(api->classify(plain.data()).on_device);
  cudaFree(d);
  cudaFree(m);
  cudaFreeHost(pinned);
}

// What staging relies on: while one stream is held by a host function (an operation waiting
// for its peers), the calls braid makes for another rank's operation must not wait for it.
void calls_made_while_a_stream_is_held(bool legacy) {
  cudaStream_t held = nullptr;  // the legacy default stream when `legacy`
  if (!legacy) CUDA_OK(cudaStreamCreateWithFlags(&held, cudaStreamNonBlocking));
  std::atomic<bool> release{false};
  auto* flag = &release;
  CUDA_OK(cudaLaunchHostFunc(
      held, [](void* p) { while (!static_cast<std::atomic<bool>*>(p)->load()) std::this_thread::sleep_for(1ms); }, flag));
  std::atomic<int> step{0};
  std::thread other([&] {
    cudaSetDevice(0);
    cudaStream_t s = nullptr;
    void* pinned = nullptr;
    void* dev = nullptr;
    cudaEvent_t ev = nullptr;
    cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
    step = 1;
    cudaHostAlloc(&pinned, 1 << 20, cudaHostAllocPortable);
    step = 2;
    cudaMalloc(&dev, 1 << 20);
    step = 3;
    cudaMemcpyAsync(pinned, dev, 1 << 20, cudaMemcpyDeviceToHost, s);
    cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
    cudaEventRecord(ev, s);
    step = 4;
    while (cudaEventQuery(ev) == cudaErrorNotReady) std::this_thread::sleep_for(1ms);
    step = 5;
    cudaEventDestroy(ev);
    cudaFree(dev);
    cudaFreeHost(pinned);
    cudaStreamDestroy(s);
  });
  const auto until = std::chrono::steady_clock::now() + 5s;
  while (step.load() < 5 && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  const int reached = step.load();
  release = true;
  other.join();
  cudaStreamSynchronize(held);
  if (held != nullptr) cudaStreamDestroy(held);
  EXPECT_EQ(reached, 5) << "with a stream held, the other thread stopped after step " << reached
                        << " (1: stream made, 2: cudaHostAlloc, 3: cudaMalloc, 4: copy queued, 5: copy done)";
}

TEST_F(CudaComm, CallsMadeWhileAStreamIsHeldDoNotWaitForIt) { calls_made_while_a_stream_is_held(false); }
TEST_F(CudaComm, CallsMadeWhileTheLegacyStreamIsHeldDoNotWaitForIt) { calls_made_while_a_stream_is_held(true); }

TEST_F(CudaComm, AllReduceOnTheCallersStream) {
  constexpr size_t kCount = (8 << 20) / sizeof(float) + 3;  // 8 MiB and a bit
  on_every_rank([&](int r) {
    Communicator comm = make(r);
    // Several ranks of one process: non-blocking streams (communicator.h says why).
    cudaStream_t stream = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    comm.set_stream(stream);
    // Pinned host memory for the copies around the operation: a copy to or from pageable memory
    // queued behind a held stream stalls other GPU copies of the process (communicator.h). And
    // every allocation before any rank's first operation: cudaMalloc may wait for the whole
    // GPU, whose other rank's stream an operation holds until this rank joins it.
    float* input = nullptr;
    float* seen = nullptr;
    CUDA_OK(cudaMallocHost(&input, kCount * sizeof(float)));
    CUDA_OK(cudaMallocHost(&seen, kCount * sizeof(float)));
    for (size_t i = 0; i < kCount; ++i) input[i] = static_cast<float>((i % 1000) * (r + 1)), seen[i] = -1.0f;
    float* buf = nullptr;
    CUDA_OK(cudaMalloc(&buf, kCount * sizeof(float)));
    constexpr size_t kHalves = 4097;
    uint16_t* ones = nullptr;  // bf16 1.0, pinned
    uint16_t* back = nullptr;
    uint16_t* in = nullptr;
    uint16_t* out = nullptr;
    CUDA_OK(cudaMallocHost(&ones, kHalves * 2));
    CUDA_OK(cudaMallocHost(&back, kHalves * 2));
    for (size_t i = 0; i < kHalves; ++i) ones[i] = 0x3f80;
    CUDA_OK(cudaMalloc(&in, kHalves * 2));
    CUDA_OK(cudaMalloc(&out, kHalves * 2));
    comm.barrier();
    CUDA_OK(cudaMemsetAsync(buf, 0, kCount * sizeof(float), stream));
    // The input reaches the buffer asynchronously on the stream: the operation must wait for it.
    CUDA_OK(cudaMemcpyAsync(buf, input, kCount * sizeof(float), cudaMemcpyHostToDevice, stream));
    Work w = comm.all_reduce_async(buf, kCount, DType::f32, Op::sum);
    // Work queued after the call must see the result.
    CUDA_OK(cudaMemcpyAsync(seen, buf, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_TRUE(w.test()) << "the stream ran past the operation before it was done";
    w.wait();
    size_t wrong = 0;
    for (size_t i = 0; i < kCount; ++i) wrong += seen[i] != static_cast<float>((i % 1000) * 3);
    EXPECT_EQ(wrong, 0u) << "rank " << r << ": elements wrong after the stream's later copy";
    // Blocking form, out of place, bf16 avg: the result is in the device buffer when it returns.
    CUDA_OK(cudaMemcpyAsync(in, ones, kHalves * 2, cudaMemcpyHostToDevice, stream));
    comm.all_reduce(in, out, kHalves, DType::bf16, Op::avg);
    CUDA_OK(cudaMemcpy(back, out, kHalves * 2, cudaMemcpyDeviceToHost));
    EXPECT_EQ(back[kHalves - 1], 0x3f80) << "bf16 avg of ones";
    comm.barrier();  // frees (which wait for the whole GPU) only once no operation holds a stream
    cudaFreeHost(ones);
    cudaFreeHost(back);
    cudaFreeHost(input);
    cudaFreeHost(seen);
    cudaFree(buf);
    cudaFree(in);
    cudaFree(out);
    cudaStreamDestroy(stream);
  });
}

TEST_F(CudaComm, OneRankOnTheLegacyDefaultStream) {
  constexpr size_t kCount = 1 << 20;
  Communicator comm = make(0, 1);
  comm.set_stream(nullptr);  // the default: the legacy default stream
  int64_t* input = nullptr;  // pinned: see AllReduceOnTheCallersStream
  int64_t* seen = nullptr;
  CUDA_OK(cudaMallocHost(&input, kCount * sizeof(int64_t)));
  CUDA_OK(cudaMallocHost(&seen, kCount * sizeof(int64_t)));
  for (size_t i = 0; i < kCount; ++i) input[i] = static_cast<int64_t>(i) * 3 - 7, seen[i] = -1;
  int64_t* src = nullptr;
  int64_t* dst = nullptr;
  CUDA_OK(cudaMalloc(&src, kCount * sizeof(int64_t)));
  CUDA_OK(cudaMalloc(&dst, kCount * sizeof(int64_t)));
  CUDA_OK(cudaMemcpyAsync(src, input, kCount * sizeof(int64_t), cudaMemcpyHostToDevice, nullptr));
  Work w = comm.all_reduce_async(src, dst, kCount, DType::i64, Op::max);
  CUDA_OK(cudaMemcpyAsync(seen, dst, kCount * sizeof(int64_t), cudaMemcpyDeviceToHost, nullptr));
  CUDA_OK(cudaStreamSynchronize(nullptr));
  EXPECT_TRUE(w.test());
  w.wait();
  EXPECT_EQ(std::memcmp(seen, input, kCount * sizeof(int64_t)), 0);
  cudaFreeHost(input);
  cudaFreeHost(seen);
  cudaFree(src);
  cudaFree(dst);
}

TEST_F(CudaComm, GatherShapesBroadcastAndPointToPoint) {
  constexpr size_t kCount = 100003;
  on_every_rank([&](int r) {
    Communicator comm = make(r);
    cudaStream_t stream = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    comm.set_stream(stream);
    int32_t* all = nullptr;
    CUDA_OK(cudaMalloc(&all, kRanks * kCount * sizeof(int32_t)));
    comm.barrier();  // allocations before any operation (see AllReduceOnTheCallersStream)
    std::vector<int32_t> mine(kCount, 10 + r);
    CUDA_OK(cudaMemcpyAsync(all + r * kCount, mine.data(), kCount * sizeof(int32_t), cudaMemcpyHostToDevice, stream));
    comm.all_gather(all + r * kCount, all, kCount, DType::i32);  // in place
    std::vector<int32_t> got(kRanks * kCount);
    CUDA_OK(cudaMemcpyAsync(got.data(), all, got.size() * sizeof(int32_t), cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    EXPECT_EQ(got[0], 10);
    EXPECT_EQ(got[kRanks * kCount - 1], 10 + kRanks - 1);

    // broadcast from rank 1, then a send/recv pair on device memory, in the order that matches
    comm.broadcast(all + kCount, all, kCount, DType::i32, 1);  // rank 1's block into everyone's first
    CUDA_OK(cudaMemcpy(got.data(), all, kCount * sizeof(int32_t), cudaMemcpyDeviceToHost));
    EXPECT_EQ(got[kCount - 1], 11);
    if (r == 0) {
      comm.send(all, kCount, DType::i32, 1, 7);
    } else {
      CUDA_OK(cudaMemsetAsync(all, 0, kCount * sizeof(int32_t), stream));
      comm.recv(all, kCount, DType::i32, 0, 7);
      CUDA_OK(cudaMemcpy(got.data(), all, kCount * sizeof(int32_t), cudaMemcpyDeviceToHost));
      EXPECT_EQ(got[5], 11);
    }
    // Host memory in a process that uses CUDA still takes the host path.
    std::vector<double> h(33, r + 1.0);
    comm.all_reduce(h.data(), h.size(), DType::f64, Op::prod);
    EXPECT_EQ(h[32], 2.0);
    comm.barrier();
    cudaFree(all);
    cudaStreamDestroy(stream);
  });
}

}  // namespace
}  // namespace braid
