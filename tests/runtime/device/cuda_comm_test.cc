// Collectives on real CUDA buffers: two ranks as threads of one process over the tcp transport,
// both on GPU 0, each ordering its operations on a non-blocking stream of its own; one rank on
// the legacy default stream; and every collective for 2 and 4 ranks against host buffers. Built with the `cuda` feature; skips (saying why) where no GPU is usable.
// scripts/gpu_check.sh runs it on a machine with a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "collectives/kernels/half_float.h"
#include "runtime/device/device_api.h"
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

// What staging relies on: while one stream is held (an operation waiting for its peers), the calls
// braid makes for another rank's operation must not wait for it. Held here by a host function
// that waits, the fallback hold where a stream cannot wait on memory (device_api.h).
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

// An operation holds its caller's stream until it ends. CUDA may run the host functions of all
// streams on one thread of its own, so a hold made of a host function that waits for the
// operation would stop other streams' host functions too (device_api.h): here rank 1's operation
// holds its stream while rank 0's stream must first run a host function of the program's own
// before rank 0's input is ready. Held that way, both ranks time out; held on a word of memory,
// both finish.
TEST_F(CudaComm, AHeldStreamDoesNotStopAnotherStreamsHostFunctions) {
  constexpr size_t kCount = 1024;
  std::atomic<bool> issued{false};
  on_every_rank([&](int r) {
    Communicator comm = make(r);
    cudaStream_t stream = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    comm.set_stream(stream);
    float* buf = nullptr;
    float* host = nullptr;
    CUDA_OK(cudaMalloc(&buf, kCount * sizeof(float)));
    CUDA_OK(cudaMallocHost(&host, kCount * sizeof(float)));
    for (size_t i = 0; i < kCount; ++i) host[i] = static_cast<float>(r + 1);
    CUDA_OK(cudaMemcpy(buf, host, kCount * sizeof(float), cudaMemcpyHostToDevice));
    comm.barrier();
    std::atomic<int> ran{0};
    if (r == 1) {
      Work w = comm.all_reduce_async(buf, kCount, DType::f32, Op::sum);
      issued = true;
      w.wait();
    } else {
      const auto until = std::chrono::steady_clock::now() + 10s;
      while (!issued.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      std::this_thread::sleep_for(200ms);  // rank 1's hold has reached the GPU
      CUDA_OK(cudaLaunchHostFunc(stream, [](void* p) { static_cast<std::atomic<int>*>(p)->store(1); }, &ran));
      comm.all_reduce(buf, kCount, DType::f32, Op::sum);
      EXPECT_EQ(ran.load(), 1) << "the operation ran before the host function queued ahead of it";
    }
    CUDA_OK(cudaMemcpyAsync(host, buf, kCount * sizeof(float), cudaMemcpyDeviceToHost, stream));
    CUDA_OK(cudaStreamSynchronize(stream));
    size_t wrong = 0;
    for (size_t i = 0; i < kCount; ++i) wrong += host[i] != 3.0f;
    EXPECT_EQ(wrong, 0u) << "rank " << r << ": elements wrong";
    comm.barrier();  // frees (which wait for the whole GPU) only once no operation holds a stream
    cudaFreeHost(host);
    cudaFree(buf);
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

// Every collective on device buffers against the same on host buffers, byte for byte, for 2 and
// 4 ranks (threads of this process on GPU 0) and both places of reduction (BRAID_CUDA_REDUCE).
// The staging bound is 1 MiB (256 KiB slots), so each operation runs as several chunks.
enum class Coll { all_reduce, reduce, broadcast, all_gather, reduce_scatter, gather, scatter, all_to_all, send_recv };
struct Case {
  Coll coll;
  DType dtype;
  Op op;
  const char* name;
};
constexpr Case kCases[] = {
    {Coll::all_reduce, DType::f32, Op::sum, "all_reduce f32 sum"},
    {Coll::all_reduce, DType::bf16, Op::sum, "all_reduce bf16 sum"},
    {Coll::all_reduce, DType::f16, Op::max, "all_reduce f16 max"},
    {Coll::all_reduce, DType::i32, Op::prod, "all_reduce i32 prod"},
    {Coll::all_reduce, DType::i64, Op::bxor, "all_reduce i64 bxor"},
    {Coll::all_reduce, DType::f64, Op::avg, "all_reduce f64 avg"},
    {Coll::reduce, DType::f32, Op::sum, "reduce f32 sum"},
    {Coll::reduce, DType::i8, Op::min, "reduce i8 min"},
    {Coll::broadcast, DType::f32, Op::sum, "broadcast f32"},
    {Coll::all_gather, DType::u8, Op::sum, "all_gather u8"},
    {Coll::reduce_scatter, DType::f32, Op::sum, "reduce_scatter f32 sum"},
    {Coll::gather, DType::i32, Op::sum, "gather i32"},
    {Coll::scatter, DType::f64, Op::sum, "scatter f64"},
    {Coll::all_to_all, DType::f32, Op::sum, "all_to_all f32"},
    {Coll::send_recv, DType::bf16, Op::sum, "send/recv bf16"},
};
constexpr int kRoot = 1;

// Small values, exact in every dtype whatever the order of reduction.
void fill_values(unsigned char* p, DType t, size_t n, int r) {
  for (size_t i = 0; i < n; ++i) {
    const int v = static_cast<int>((i * 5 + static_cast<size_t>(r) * 3) % 9) - 2;
    const float f = static_cast<float>(v);
    switch (t) {
      case DType::f32: reinterpret_cast<float*>(p)[i] = f; break;
      case DType::f64: reinterpret_cast<double*>(p)[i] = f; break;
      case DType::f16: reinterpret_cast<uint16_t*>(p)[i] = collectives::f32_to_f16(f); break;
      case DType::bf16: reinterpret_cast<uint16_t*>(p)[i] = collectives::f32_to_bf16(f); break;
      case DType::i8: reinterpret_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
      case DType::u8: p[i] = static_cast<unsigned char>(v); break;
      case DType::i32: reinterpret_cast<int32_t*>(p)[i] = v; break;
      case DType::i64: reinterpret_cast<int64_t*>(p)[i] = v; break;
    }
  }
}

// Elements (per rank) of the input and the output of `coll` with blocks of c.
std::pair<size_t, size_t> extents(Coll coll, size_t c, int ranks, int r) {
  const size_t all = c * static_cast<size_t>(ranks);
  switch (coll) {
    case Coll::all_gather: return {c, all};
    case Coll::gather: return {c, r == kRoot ? all : 0};
    case Coll::reduce_scatter: return {all, c};
    case Coll::scatter: return {r == kRoot ? all : 0, c};
    case Coll::all_to_all: return {all, all};
    case Coll::reduce: return {c, r == kRoot ? c : 0};
    default: return {c, c};
  }
}

// Runs `k` on (in, out) and waits; send/recv goes round a ring, even ranks sending first.
void run_case(Communicator& comm, const Case& k, const void* in, void* out, size_t c, int r, int ranks) {
  const int next = (r + 1) % ranks, prev = (r + ranks - 1) % ranks;
  switch (k.coll) {
    case Coll::all_reduce: comm.all_reduce(in, out, c, k.dtype, k.op); break;
    case Coll::reduce: comm.reduce(in, out, c, k.dtype, k.op, kRoot); break;
    case Coll::broadcast: comm.broadcast(in, out, c, k.dtype, kRoot); break;
    case Coll::all_gather: comm.all_gather(in, out, c, k.dtype); break;
    case Coll::reduce_scatter: comm.reduce_scatter(in, out, c, k.dtype, k.op); break;
    case Coll::gather: comm.gather(in, r == kRoot ? out : nullptr, c, k.dtype, kRoot); break;
    case Coll::scatter: comm.scatter(r == kRoot ? in : nullptr, out, c, k.dtype, kRoot); break;
    case Coll::all_to_all: comm.all_to_all(in, out, c, k.dtype); break;
    case Coll::send_recv: {
      Work s, v;
      if (r % 2 == 0) s = comm.send_async(in, c, k.dtype, next);
      v = comm.recv_async(out, c, k.dtype, prev);
      if (r % 2 == 1) s = comm.send_async(in, c, k.dtype, next);
      s.wait();
      v.wait();
      break;
    }
  }
}

class EveryCollective : public ::testing::TestWithParam<std::tuple<int, const char*>> {
 protected:
  void SetUp() override {
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
      GTEST_SKIP() << "no usable CUDA device (cudaGetDeviceCount: " << cudaGetErrorName(e) << ", " << n << " devices)";
    }
  }
};

TEST_P(EveryCollective, OnDeviceBuffersGivesTheHostResult) {
  const auto [ranks, reduce] = GetParam();
  constexpr size_t kBlock = 100003;  // elements per rank's block
  constexpr size_t kMaxBytes = 4 * kBlock * 8;
  testing::JobSettings settings{"auto", ranks, 60, 30, 0xc0de0 + static_cast<uint64_t>(ranks)};
  settings.cuda_staging_bytes = 1 << 20;
  settings.cuda_reduce = reduce;
  testing::InProcessJob job(settings);
  testing::run_ranks(ranks, [&](int r) {
    cudaSetDevice(0);
    Communicator comm = job.make(r);
    cudaStream_t stream = nullptr;
    CUDA_OK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    comm.set_stream(stream);
    // Pinned host buffers and every device buffer before the first operation (see
    // AllReduceOnTheCallersStream).
    unsigned char *h_in = nullptr, *h_out = nullptr, *back = nullptr, *d_in = nullptr, *d_out = nullptr;
    CUDA_OK(cudaMallocHost(&h_in, kMaxBytes));
    CUDA_OK(cudaMallocHost(&h_out, kMaxBytes));
    CUDA_OK(cudaMallocHost(&back, kMaxBytes));
    CUDA_OK(cudaMalloc(&d_in, kMaxBytes));
    CUDA_OK(cudaMalloc(&d_out, kMaxBytes));
    comm.barrier();
    for (const Case& k : kCases) {
      const size_t e = dtype_size(k.dtype);
      const auto [nin, nout] = extents(k.coll, kBlock, ranks, r);
      fill_values(h_in, k.dtype, std::max(nin, kBlock), r);
      std::memset(h_out, 0x5c, kMaxBytes);  // what an output never written keeps
      CUDA_OK(cudaMemcpyAsync(d_in, h_in, kMaxBytes, cudaMemcpyHostToDevice, stream));
      CUDA_OK(cudaMemcpyAsync(d_out, h_out, kMaxBytes, cudaMemcpyHostToDevice, stream));
      run_case(comm, k, h_in, h_out, kBlock, r, ranks);   // host buffers: the reference
      run_case(comm, k, d_in, d_out, kBlock, r, ranks);   // device buffers, ordered on the stream
      CUDA_OK(cudaMemcpyAsync(back, d_out, kMaxBytes, cudaMemcpyDeviceToHost, stream));
      CUDA_OK(cudaStreamSynchronize(stream));
      EXPECT_EQ(std::memcmp(back, h_out, std::max<size_t>(nout, 1) * e), 0)
          << k.name << " on rank " << r << " of " << ranks << " (BRAID_CUDA_REDUCE=" << reduce
          << "): the device result differs from the host's";
    }
    comm.barrier();  // frees wait for the whole GPU: only once no operation holds a stream
    cudaFreeHost(h_in);
    cudaFreeHost(h_out);
    cudaFreeHost(back);
    cudaFree(d_in);
    cudaFree(d_out);
    cudaStreamDestroy(stream);
  });
}

INSTANTIATE_TEST_SUITE_P(CudaComm, EveryCollective,
                         ::testing::Combine(::testing::Values(2, 4), ::testing::Values("host", "device")),
                         [](const auto& info) {
                           return std::to_string(std::get<0>(info.param)) + "ranks_" + std::get<1>(info.param);
                         });

}  // namespace
}  // namespace braid
