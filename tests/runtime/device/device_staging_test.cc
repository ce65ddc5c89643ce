// Collectives on device buffers, through the staging seam (runtime/device/device_staging.h) with a fake
// device (fake_device.h): ranks as threads on the inproc transport, each with its own stream.
// What is checked is what a CUDA user relies on: the operation reads its input only after the
// work queued on the stream before the call, the stream's later work waits for the operation,
// Work::wait() means the result is in the device buffer, a failure leaves that buffer alone,
// a stuck GPU is a bounded error naming it, and what cannot be done is refused at the call.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <link.h>
#include <time.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "runtime/device/device_staging.h"
#include "runtime/work_state.h"
#include "tests/runtime/device/device_test_support.h"

// Counts the scans of the loaded objects (the CUDA device API's look for the driver) and passes
// each on to the C library's: defined in the executable, it stands in for libc's everywhere.
namespace {
std::atomic<int> loader_scans{0};
thread_local int loader_scans_here = 0;  // this thread's
}  // namespace

// Not instrumented: AddressSanitizer's runtime scans the loaded objects while it starts, before
// its shadow memory exists.
extern "C" __attribute__((no_sanitize("address"))) int dl_iterate_phdr(int (*callback)(dl_phdr_info*, size_t, void*), void* data) {
  using Scan = int (*)(int (*)(dl_phdr_info*, size_t, void*), void*);
  static const auto real = reinterpret_cast<Scan>(dlsym(RTLD_NEXT, "dl_iterate_phdr"));
  loader_scans.fetch_add(1, std::memory_order_relaxed);
  ++loader_scans_here;
  return real(callback, data);
}

namespace braid {
namespace {

using namespace std::chrono_literals;
using testing::DeviceJob;
using testing::device_floats;
using testing::fake;
using testing::FakeDeviceTest;
using testing::FakeStream;
using testing::outcome;
using Job = DeviceJob;
using DeviceStagingTest = FakeDeviceTest;

constexpr auto kBound = testing::kDeviceBound;

// The index of the first element that is not first + step * (i % 97) (n: none).
size_t first_wrong(const float* p, size_t n, float first, float step) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != first + step * static_cast<float>(i % 97)) return i;
  }
  return n;
}

// A "kernel": fills `p` on the stream, after a pause long enough that an operation reading the
// buffer without waiting for the stream would read what was there before.
void fill_later(FakeStream& s, float* p, size_t n, float first, float step) {
  s.push([=] {
    std::this_thread::sleep_for(30ms);
    for (size_t i = 0; i < n; ++i) p[i] = first + step * static_cast<float>(i % 97);
  });
}

TEST_F(DeviceStagingTest, AllReduceWaitsForTheStreamAndHoldsItsLaterWork) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 100003;
  Job job(kRanks);
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream& stream) {
    EXPECT_EQ(comm.stream(), &stream);
    float* buf = device_floats(kCount);
    fill_later(stream, buf, kCount, static_cast<float>(r + 1), 1.0f);
    Work w = comm.all_reduce_async(buf, kCount, DType::f32, Op::sum);
    // The next "kernel" on the stream reads the buffer: it must see the sum, and the operation done.
    std::vector<float> seen(kCount);
    std::atomic<bool> done_when_read{false};
    stream.push([&] {
      done_when_read = w.test();
      std::copy(buf, buf + kCount, seen.begin());
    });
    EXPECT_EQ(outcome(w), ErrorCode::ok) << w.error_message();
    // Work::wait() returning means the device buffer holds the result already.
    EXPECT_EQ(first_wrong(buf, kCount, 6.0f, 3.0f), kCount) << "rank " << r << ": wrong result in the device buffer";
    // (No early return before this: the stream's queued work refers to this scope's variables.)
    ASSERT_TRUE(stream.synchronize(kBound));
    EXPECT_TRUE(done_when_read) << "work queued on the stream after the call ran before the operation ended";
    EXPECT_EQ(first_wrong(seen.data(), kCount, 6.0f, 3.0f), kCount) << "rank " << r << ": later work saw another result";
  });
}

TEST_F(DeviceStagingTest, EveryShapeOfBufferIsStagedRight) {
  constexpr int kRanks = 3;
  constexpr size_t kCount = 1031;
  const int pinned_before = fake().pinned_allocs.load();
  Job job(kRanks);
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream& stream) {
    // broadcast in place from rank 1 (blocking form)
    float* b = device_floats(kCount);
    fill_later(stream, b, kCount, r == 1 ? 7.0f : -1.0f, 0.5f);
    comm.broadcast(b, kCount, DType::f32, 1);
    for (size_t i = 0; i < kCount; ++i) ASSERT_EQ(b[i], 7.0f + 0.5f * static_cast<float>(i % 97)) << i;

    // all_gather with the input inside the output (this rank's block): one staged buffer
    float* g = device_floats(kCount * kRanks);
    fill_later(stream, g + r * kCount, kCount, static_cast<float>(10 * r), 0.0f);
    comm.all_gather(g + r * kCount, g, kCount, DType::f32);
    for (int q = 0; q < kRanks; ++q) ASSERT_EQ(g[q * kCount + 5], static_cast<float>(10 * q)) << "block " << q;

    // reduce_scatter from host memory into device memory (mixed)
    std::vector<float> host_in(kCount * kRanks);
    for (size_t i = 0; i < host_in.size(); ++i) host_in[i] = static_cast<float>(i / kCount + r);
    float* rs = device_floats(kCount);
    comm.reduce_scatter(host_in.data(), rs, kCount, DType::f32, Op::sum);
    ASSERT_EQ(rs[0], static_cast<float>(kRanks * r + 0 + 1 + 2));

    // send/recv in a ring on device buffers (async, then wait)
    float* out = device_floats(kCount);
    float* in = device_floats(kCount);
    fill_later(stream, out, kCount, static_cast<float>(100 + r), 0.0f);
    // Sends complete when the peer takes the data: even ranks send first, odd ranks receive first.
    Work s, v;
    if (r % 2 == 0) s = comm.send_async(out, kCount, DType::f32, (r + 1) % kRanks);
    v = comm.recv_async(in, kCount, DType::f32, (r + kRanks - 1) % kRanks);
    if (r % 2 == 1) s = comm.send_async(out, kCount, DType::f32, (r + 1) % kRanks);
    s.wait();
    v.wait();
    ASSERT_EQ(in[kCount - 1], static_cast<float>(100 + (r + kRanks - 1) % kRanks));

    // i32 all_reduce, out of place, device to device
    auto* xi = static_cast<int32_t*>(fake().alloc(kCount * sizeof(int32_t)));
    auto* yi = static_cast<int32_t*>(fake().alloc(kCount * sizeof(int32_t)));
    for (size_t i = 0; i < kCount; ++i) xi[i] = static_cast<int32_t>(i) * (r + 1);
    comm.all_reduce(xi, yi, kCount, DType::i32, Op::sum);
    ASSERT_EQ(yi[kCount - 1], static_cast<int32_t>(kCount - 1) * 6);
    ASSERT_EQ(xi[kCount - 1], static_cast<int32_t>(kCount - 1) * (r + 1)) << "the input must not change";
  });
  // Buffers go back to a pool and are reused: a handful made for ~30 staged calls.
  EXPECT_LE(fake().pinned_allocs.load() - pinned_before, 8 * 3 + 8);
}

TEST_F(DeviceStagingTest, AFailedOperationLeavesTheDeviceBufferAsItWasAndReleasesTheStream) {
  constexpr int kRanks = 2;
  Job job(kRanks);
  const int copies_before = fake().copies_back.load();
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream& stream) {
    float* buf = device_floats(64);
    for (int i = 0; i < 64; ++i) buf[i] = 42.0f;
    // The ranks disagree on the size: a mismatch, on both.
    Work w = comm.all_reduce_async(buf, r == 0 ? 64 : 32, DType::f32, Op::sum);
    std::atomic<bool> released{false};
    stream.push([&] { released = true; });
    EXPECT_EQ(outcome(w), ErrorCode::mismatch) << "rank " << r << ": " << w.error_message();
    ASSERT_TRUE(stream.synchronize(kBound)) << "the stream stayed held after the operation failed";
    EXPECT_TRUE(released);
    for (int i = 0; i < 64; ++i) ASSERT_EQ(buf[i], 42.0f) << "rank " << r << " element " << i;
  });
  EXPECT_EQ(fake().copies_back.load(), copies_before) << "a failed operation copied a result back";
}

// The hold on the caller's stream ends with the operation's Work, however that ends: here rank 0's
// operation never finds its peer and the rank aborts; each hold is released exactly once.
TEST_F(DeviceStagingTest, EveryHeldStreamIsReleasedOnceAlsoWhenTheOperationIsAborted) {
  constexpr int kRanks = 2;
  Job job(kRanks);
  const int holds_before = fake().holds.load();
  const int releases_before = fake().releases.load();
  std::atomic<bool> rank0_done{false};
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream& stream) {
    float* buf = device_floats(64);
    if (r == 1) {  // never joins, and keeps its connections open until rank 0 is done
      const auto until = std::chrono::steady_clock::now() + kBound;
      while (!rank0_done.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
      return;
    }
    Work w = comm.all_reduce_async(buf, 64, DType::f32, Op::sum);
    std::atomic<bool> released{false};
    stream.push([&] { released = true; });
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(released) << "the stream went on while the operation was still running";
    comm.abort("the test gives up on rank 1");
    EXPECT_EQ(outcome(w), ErrorCode::aborted) << w.error_message();
    const bool went_on = stream.synchronize(kBound);
    rank0_done = true;
    ASSERT_TRUE(went_on) << "the stream stayed held after the operation was aborted";
    EXPECT_TRUE(released);
  });
  EXPECT_EQ(fake().holds.load() - holds_before, 1);
  EXPECT_EQ(fake().releases.load() - releases_before, 1);
}

// The release runs once: at completion, or when the state goes away without completing.
TEST(WorkStateOnDone, RunsOnceAtCompletionOrAtDestruction) {
  int completed_runs = 0;
  {
    detail::WorkState w;
    w.on_done = [&] { ++completed_runs; };
    w.complete(Status::ok());
    EXPECT_EQ(completed_runs, 1);
  }
  EXPECT_EQ(completed_runs, 1) << "ran again at destruction";
  int dropped_runs = 0;
  {
    detail::WorkState w;
    w.on_done = [&] { ++dropped_runs; };
  }
  EXPECT_EQ(dropped_runs, 1) << "a state destroyed without completing left its stream held";
}

TEST_F(DeviceStagingTest, AStuckGpuIsABoundedErrorThatNamesIt) {
  Job job(1, /*staging_bytes=*/0, /*reduce=*/"", /*timeout_s=*/1);
  job.on_every_rank_with_stream([&](int, Communicator& comm, FakeStream& stream) {
    float* buf = device_floats(16);
    std::atomic<bool> release{false};
    stream.push([&] {  // a kernel that runs far past the operation's timeout
      while (!release) std::this_thread::sleep_for(1ms);
    });
    const auto start = std::chrono::steady_clock::now();
    Work w = comm.all_reduce_async(buf, 16, DType::f32, Op::sum);
    EXPECT_EQ(outcome(w), ErrorCode::timeout) << w.error_message();
    EXPECT_LT(std::chrono::steady_clock::now() - start, 5s) << "the wait for the GPU was not bounded by BRAID_TIMEOUT_S";
    EXPECT_NE(w.error_message().find("all_reduce"), std::string::npos) << w.error_message();
    EXPECT_NE(w.error_message().find("GPU 0"), std::string::npos) << w.error_message();
    // The communicator is not held up by the stuck copy: its next operation runs (the pinned
    // buffers the stuck copy may still write are set aside, not reused).
    float* other = device_floats(16);
    for (int i = 0; i < 16; ++i) other[i] = 5.0f;
    Work next = comm.all_reduce_async(other, 16, DType::f32, Op::sum);
    release = true;
    EXPECT_EQ(outcome(next), ErrorCode::ok) << next.error_message();
    EXPECT_EQ(other[15], 5.0f);
  });
}

TEST_F(DeviceStagingTest, WhatCannotBeDoneIsRefusedAtTheCall) {
  Job job(1);
  job.on_every_rank_with_stream([&](int, Communicator& comm, FakeStream&) {
    float* on0 = device_floats(8, 0);
    float* on1 = device_floats(8, 1);
    try {
      comm.all_reduce(on0, on1, 8, DType::f32, Op::sum);
      ADD_FAILURE() << "buffers on two GPUs were accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("GPU 0"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("GPU 1"), std::string::npos) << e.what();
    }
    comm.group_start();
    try {
      comm.all_reduce_async(on0, 8, DType::f32, Op::sum);
      ADD_FAILURE() << "a GPU buffer inside a group was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(e.what()).find("group"), std::string::npos) << e.what();
    }
    comm.group_end().wait();
    // The communicator is still usable.
    for (int i = 0; i < 8; ++i) on0[i] = 3.0f;
    comm.all_reduce(on0, 8, DType::f32, Op::max);
    EXPECT_EQ(on0[7], 3.0f);
  });
}

// What the chunk pipeline leaves whole (docs/cuda.md): the uneven forms, and send/recv (a send's
// chunk 5 would wait for the peer to take chunk 1, so a rank whose send completes only once its own
// later receive is posted would stall on the bound). Buffers past the staging bound (64 KiB here)
// are staged whole, outside it, and give the right results.
TEST_F(DeviceStagingTest, UnevenFormsAndPointToPointAreStagedWhole) {
  constexpr int kRanks = 2;
  constexpr size_t kBig = 100000;  // 400 KB of floats, 6x the bound
  Job job(kRanks, /*staging_bytes=*/64 << 10);
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream& stream) {
    const int peer = 1 - r;

    float* out = device_floats(kBig);
    float* in = device_floats(kBig);
    fill_later(stream, out, kBig, static_cast<float>(10 * r), 1.0f);
    // A send completes when the peer takes the data: rank 0 sends first, rank 1 receives first.
    Work s, v;
    if (r == 0) s = comm.send_async(out, kBig, DType::f32, peer);
    v = comm.recv_async(in, kBig, DType::f32, peer);
    if (r == 1) s = comm.send_async(out, kBig, DType::f32, peer);
    EXPECT_EQ(outcome(s), ErrorCode::ok) << s.error_message();
    EXPECT_EQ(outcome(v), ErrorCode::ok) << v.error_message();
    EXPECT_EQ(first_wrong(in, kBig, static_cast<float>(10 * peer), 1.0f), kBig) << "rank " << r << ": send/recv";

    const std::vector<size_t> counts = {3001, 5003};  // rank q's block: counts[q] elements
    float* mine = device_floats(counts[static_cast<size_t>(r)]);
    float* all = device_floats(counts[0] + counts[1]);
    fill_later(stream, mine, counts[static_cast<size_t>(r)], static_cast<float>(r + 1), 0.0f);
    comm.all_gatherv(mine, all, counts, DType::f32);
    EXPECT_EQ(all[0], 1.0f);
    EXPECT_EQ(all[counts[0] + counts[1] - 1], 2.0f) << "rank " << r << ": all_gatherv";

    float* whole = device_floats(counts[0] + counts[1]);
    fill_later(stream, whole, counts[0] + counts[1], static_cast<float>(r + 1), 0.0f);
    float* part = device_floats(counts[static_cast<size_t>(r)]);
    comm.reduce_scatterv(whole, part, counts, DType::f32, Op::sum);
    EXPECT_EQ(first_wrong(part, counts[static_cast<size_t>(r)], 3.0f, 0.0f), counts[static_cast<size_t>(r)])
        << "rank " << r << ": reduce_scatterv";

    // all_to_allv: rank q sends (q + 1) * 1000 + p elements to rank p.
    std::vector<size_t> send_counts(2), recv_counts(2);
    for (size_t p = 0; p < 2; ++p) {
      send_counts[p] = (static_cast<size_t>(r) + 1) * 1000 + p;
      recv_counts[p] = (p + 1) * 1000 + static_cast<size_t>(r);
    }
    float* a2a_in = device_floats(send_counts[0] + send_counts[1]);
    float* a2a_out = device_floats(recv_counts[0] + recv_counts[1]);
    fill_later(stream, a2a_in, send_counts[0] + send_counts[1], static_cast<float>(r), 0.0f);
    comm.all_to_allv(a2a_in, send_counts, a2a_out, recv_counts, DType::f32);
    EXPECT_EQ(a2a_out[0], 0.0f) << "rank " << r << ": all_to_allv";
    EXPECT_EQ(a2a_out[recv_counts[0] + recv_counts[1] - 1], 1.0f) << "rank " << r << ": all_to_allv";
  });
}

// Events come from a pool: a training loop's thousands of operations make a handful, not one
// (or several) each.
TEST_F(DeviceStagingTest, EventsAreReusedAcrossOperations) {
  constexpr int kRanks = 2;
  constexpr int kOps = 200;
  Job job(kRanks);
  const int created_before = fake().events_created.load();
  job.on_every_rank_with_stream([&](int, Communicator& comm, FakeStream&) {
    float* buf = device_floats(256);
    for (int i = 0; i < kOps; ++i) {
      std::fill(buf, buf + 256, 1.0f);
      comm.all_reduce(buf, 256, DType::f32, Op::sum);
      ASSERT_EQ(buf[255], 2.0f) << "operation " << i;
      float* other = device_floats(8);
      comm.broadcast(other, 8, DType::f32, 0);  // another kind, another path through staging
    }
  });
  EXPECT_LE(fake().events_created.load() - created_before, 32)
      << "events are made per operation instead of taken from the pool (" << 2 * kOps * kRanks << " operations)";
}

TEST(DeviceApi, WithoutCudaOrATestDeviceEveryBufferIsHostMemory) {
  set_device_api_for_testing(nullptr);
  collectives::CollectiveArgs a;
  a.count = 4;
  float x[4] = {};
  a.send = x;
  a.recv = x;
  auto st = DeviceStaging::stage(nullptr, a, 0, 1, nullptr);
  ASSERT_TRUE(st.is_ok());
  EXPECT_EQ(st.value(), nullptr);
  if (cuda_device_api() != nullptr) {
    // Built with CUDA: a host array is still host memory, and asking did not start CUDA in this
    // process, which never used it (the driver library is still not loaded).
    EXPECT_FALSE(cuda_device_api()->classify(x).on_device);
    EXPECT_FALSE(cuda_device_api()->classify(x + 1).on_device);
    bool driver_loaded = false;
    dl_iterate_phdr(
        [](dl_phdr_info* info, size_t, void* found) {
          if (info->dlpi_name != nullptr && std::strstr(info->dlpi_name, "libcuda.so") != nullptr) {
            *static_cast<bool*>(found) = true;
          }
          return 0;
        },
        &driver_loaded);
    EXPECT_FALSE(driver_loaded) << "classifying a host pointer loaded the CUDA driver";
  }
}

// A small operation's every microsecond counts (docs/performance.md, "The steady cost of a small
// operation"): whether CUDA is started is asked once per operation, not once per buffer (and a
// look holds for the rest of the coarse clock's tick: none if one was taken in this tick).
TEST(DeviceApi, AnOperationOnHostBuffersLooksForTheCudaDriverAtMostOnce) {
  set_device_api_for_testing(nullptr);
  if (cuda_device_api() == nullptr) GTEST_SKIP() << "built without CUDA: no driver to look for";
  if (cuda_device_api()->in_use()) GTEST_SKIP() << "CUDA is started in this process: nothing is looked for";
  float send[4] = {}, recv[4] = {};
  collectives::CollectiveArgs a;
  a.kind = collectives::Kind::all_reduce;
  a.count = 4;
  a.dtype = DType::f32;
  a.send = send;
  a.recv = recv;  // out of place: two buffers
  const int before = loader_scans.load();
  auto st = DeviceStaging::stage(device_api(), a, 0, 2, nullptr);
  const int scans = loader_scans.load() - before;
  ASSERT_TRUE(st.is_ok());
  EXPECT_EQ(st.value(), nullptr) << "host buffers were taken for device memory";
  EXPECT_LE(scans, 1) << "the loaded objects were scanned for the CUDA driver " << scans << " times for one operation";
}

// Operations one after another look at the loaded objects at most once per tick of the coarse
// clock, however many there are.
TEST(DeviceApi, OperationsOnHostBuffersLookForTheCudaDriverAtMostOncePerTick) {
  set_device_api_for_testing(nullptr);
  if (cuda_device_api() == nullptr) GTEST_SKIP() << "built without CUDA: no driver to look for";
  if (cuda_device_api()->in_use()) GTEST_SKIP() << "CUDA is started in this process: nothing is looked for";
  timespec res{};
  clock_getres(CLOCK_MONOTONIC_COARSE, &res);
  const auto tick = std::chrono::seconds(res.tv_sec) + std::chrono::nanoseconds(res.tv_nsec);
  float buf[4] = {};
  const int before = loader_scans.load();
  const auto start = coarse_now();
  constexpr int kOps = 2000;
  for (int i = 0; i < kOps; ++i) ASSERT_FALSE(device_api()->in_use());
  const auto ticks = (coarse_now() - start) / tick;
  const int scans = loader_scans.load() - before;
  EXPECT_LE(scans, ticks + 1) << scans << " scans for " << kOps << " operations over " << ticks << " ticks";
  EXPECT_FALSE(cuda_device_api()->classify(buf).on_device);
}

// ... and still notice a driver loaded later: at the first look of the next tick, before the
// program could have started it on a GPU. A stand-in named like the driver is loaded in a child
// process (the driver, once seen, stays seen).
TEST(DeviceApiDeathTest, ADriverLoadedLaterIsNoticedWithinATick) {
  set_device_api_for_testing(nullptr);
  if (cuda_device_api() == nullptr) GTEST_SKIP() << "built without CUDA: no driver to look for";
  if (cuda_device_api()->in_use()) GTEST_SKIP() << "CUDA is started in this process: nothing is looked for";
  const char* stand_in = std::getenv("CUDA_DRIVER_STAND_IN");
  if (stand_in == nullptr) GTEST_SKIP() << "CUDA_DRIVER_STAND_IN (a library named libcuda.so) is not set";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (cuda_device_api()->in_use()) std::_Exit(2);  // looked in this tick: nothing there
        if (dlopen(stand_in, RTLD_NOW | RTLD_LOCAL) == nullptr) std::_Exit(3);
        timespec res{};
        clock_getres(CLOCK_MONOTONIC_COARSE, &res);
        const auto tick = std::chrono::seconds(res.tv_sec) + std::chrono::nanoseconds(res.tv_nsec);
        const auto start = coarse_now();
        while (coarse_now() - start < 2 * tick) {
        }
        std::_Exit(cuda_device_api()->in_use() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// ... and so is a whole operation on a communicator, out of place on host buffers (each rank runs
// its own on its calling thread, where the scans are counted).
TEST(DeviceApi, AnAllReduceOnHostBuffersLooksForTheCudaDriverAtMostOncePerRank) {
  set_device_api_for_testing(nullptr);
  if (cuda_device_api() == nullptr) GTEST_SKIP() << "built without CUDA: no driver to look for";
  if (cuda_device_api()->in_use()) GTEST_SKIP() << "CUDA is started in this process: nothing is looked for";
  Job job(2);
  job.on_every_rank([&](int r) {
    Communicator comm = job.make(r);
    std::vector<float> in(4, static_cast<float>(r + 1)), out(4, 0);
    comm.barrier();
    const int before = loader_scans_here;
    comm.all_reduce(in.data(), out.data(), in.size(), DType::f32, Op::sum);
    const int scans = loader_scans_here - before;
    EXPECT_EQ(out[3], 3.0f) << "rank " << r;
    EXPECT_LE(scans, 1) << "rank " << r << ": the loaded objects were scanned " << scans << " times for one all_reduce";
  });
}

}  // namespace
}  // namespace braid
