// tests/runtime/device/device_test_support.h - what every fake-device test sets up: the one
// FakeDevice of the test binary, in-process jobs whose ranks stage through it, a fixture that
// installs it and puts its knobs (delays, injected failures, broken orderings) back, and
// bounded waits.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>

#include "braid/communicator.h"
#include "runtime/device/device_api.h"
#include "runtime/device/staging_pipeline.h"
#include "tests/runtime/device/fake_device.h"
#include "tests/support/in_process_job.h"

namespace braid::testing {

inline constexpr std::chrono::seconds kDeviceBound{30};

// One for the whole binary: the event pool and the pinned caches remember which DeviceApi made
// what they keep, so it lives as long as they do (never destroyed).
inline FakeDevice& fake() {
  static auto* f = new FakeDevice;
  return *f;
}

// Ranks as threads on the inproc transport; each makes its communicator and its own stream.
// staging_bytes: BRAID_CUDA_STAGING_BYTES (0: the default); reduce: BRAID_CUDA_REDUCE (empty:
// the default, auto); timeout_s: BRAID_TIMEOUT_S.
class DeviceJob : public InProcessJob {
 public:
  explicit DeviceJob(int ranks, size_t staging_bytes = 0, const std::string& reduce = "", double timeout_s = 20)
      : InProcessJob(settings(ranks, staging_bytes, reduce, timeout_s)) {}
  void on_every_rank(const std::function<void(int)>& body) { run_ranks(ranks(), body); }
  // Each rank with its communicator and its own stream, set as the communicator's. Once `body`
  // returns, however it returns, the stream is drained (bounded) before either goes away.
  void on_every_rank_with_stream(const std::function<void(int, Communicator&, FakeStream&)>& body) {
    run_ranks(ranks(), [&](int r) {
      Communicator comm = make(r);
      FakeStream stream;
      comm.set_stream(&stream);
      body(r, comm, stream);
      ASSERT_TRUE(stream.synchronize(kDeviceBound)) << "rank " << r << ": the stream did not drain";
    });
  }

 private:
  static JobSettings settings(int ranks, size_t staging_bytes, const std::string& reduce, double timeout_s) {
    JobSettings s;
    s.ranks = ranks;
    s.timeout_s = timeout_s;
    s.comm_id = 0xde71ce;
    s.cuda_staging_bytes = staging_bytes;
    s.cuda_reduce = reduce;
    return s;
  }
};

// Installs the fake device for the test and leaves it, and the staging fault hooks, as found.
class FakeDeviceTest : public ::testing::Test {
 protected:
  void SetUp() override {
    reset();
    set_device_api_for_testing(&fake());
    pinned_base_ = fake().pinned_bytes.load();
    fake().pinned_bytes_peak = pinned_base_;
  }
  // Pinned bytes at their peak during the test, beyond what was held before it (the whole-buffer
  // path's cache of pinned buffers, kept for the process's life).
  size_t pinned_peak() const { return fake().pinned_bytes_peak.load() - pinned_base_; }
  void TearDown() override {
    set_device_api_for_testing(nullptr);
    reset();
  }

 private:
  size_t pinned_base_ = 0;
  static void reset() {
    FakeDevice& f = fake();
    f.copy_delay_us = 0;
    f.copy_back_delay_us = 0;
    f.reduce_delay_us = 0;
    f.fail_to_device_at = 0;
    f.fail_load = false;
    StagingFaultsForTesting& x = staging_faults_for_testing();
    x.skip_input_wait = x.skip_slot_wait = x.early_result_copy = x.skip_result_wait = x.reduce_off_lane = false;
  }
};

// How `w` ended, waiting at most kDeviceBound (braid::Error does not escape: a rank that throws
// would leave the others and the fake streams waiting).
inline ErrorCode outcome(Work& w) {
  try {
    if (!w.wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(kDeviceBound))) return ErrorCode::internal;
    return ErrorCode::ok;
  } catch (const Error& e) {
    return e.code();
  }
}

// `n` elements of T in the fake's device memory on GPU `gpu`, zeroed.
template <typename T>
T* device_array(size_t n, int gpu = 0) {
  return static_cast<T*>(fake().alloc(n * sizeof(T), gpu));
}
inline float* device_floats(size_t n, int gpu = 0) { return device_array<float>(n, gpu); }

// An all_reduce (sum) of `count` floats, 42 on every rank, while the fake refuses a chunk's result
// copy on one rank (set fake().fail_to_device_at first), then a second all_reduce on the same
// buffers. What a failure midway must leave: the failing rank's Work says its buffer is
// untouched and it is (still 42 everywhere), its stream is released, every other rank gets the
// sum, and the next operation is right on every rank (the ranks stayed in step). Returns how
// many ranks failed.
inline int all_reduce_failing_midway(DeviceJob& job, size_t count) {
  std::atomic<int> failed{0};
  const auto n = static_cast<long>(count);
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream& stream) {
    float* buf = device_floats(count);
    std::fill(buf, buf + count, 42.0f);
    Work w = comm.all_reduce_async(buf, count, DType::f32, Op::sum);
    std::atomic<bool> released{false};
    stream.push([&] { released = true; });
    const ErrorCode code = outcome(w);
    ASSERT_TRUE(stream.synchronize(kDeviceBound)) << "rank " << r << ": the stream stayed held";
    EXPECT_TRUE(released);
    if (code != ErrorCode::ok) {
      ++failed;
      EXPECT_NE(w.error_message().find("untouched"), std::string::npos) << w.error_message();
      EXPECT_EQ(std::count(buf, buf + count, 42.0f), n)
          << "rank " << r << ": a failed operation changed the device buffer";
    } else {
      EXPECT_EQ(std::count(buf, buf + count, 42.0f * static_cast<float>(job.ranks())), n) << "rank " << r;
    }
    std::fill(buf, buf + count, 1.0f);
    comm.all_reduce(buf, count, DType::f32, Op::sum);
    EXPECT_EQ(std::count(buf, buf + count, static_cast<float>(job.ranks())), n)
        << "rank " << r << ": the next operation";
  });
  return failed.load();
}

}  // namespace braid::testing
