// The stream runner's lean path (runtime/engine/stream_runner.h): an operation of a shape run
// before, run on the caller's thread, runs its kept run alone (LoneRun). Ranks as threads of
// this process on the inproc transport; CommunicatorImpl::lean_runs() counts the path.
//
//   - an operation waited at once, of a shape kept, takes it; the first of each shape (prepared
//     anew) and one on the progress thread do not; the run used longest ago leaves the cache
//     first, however long ago it was kept; a group's members run their kept runs in place, two
//     of one shape each their own;
//   - a timeout, an abort and a mismatch found inside it end the operation with the same code
//     and wording as on the stream's path, and the communicator fails as there.
//
// The tick is long (JobSettings::hand_off_tick) so that operations waited at once run on the
// caller's thread even on a busy machine, as in hand_off_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "braid/error.h"
#include "runtime/communicator_impl.h"
#include "tests/runtime/engine/lean_path_support.h"
#include "tests/support/in_process_job.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
using lean_path::error_of;
using lean_path::kBound;
using lean_path::kRanks;
using lean_path::settings;
using lean_path::wait_for;

std::vector<float> ones_times_rank(int rank, size_t n) { return std::vector<float>(n, static_cast<float>(rank + 1)); }
constexpr float kSum = kRanks * (kRanks + 1) / 2.0f;

// Polls test() (never wait(), which could run the operation itself) until `w` completes.
bool completes_unwaited(const Work& w) {
  const auto until = std::chrono::steady_clock::now() + kBound;
  while (!w.test() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return w.test();
}

// Rank r's all_reduce of `n` floats, in place, waited at once; checks the sum.
void sum_in_place(Communicator& comm, int r, size_t n) {
  std::vector<float> v = ones_times_rank(r, n);
  comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum).wait();
  ASSERT_EQ(v[0], kSum) << "rank " << r;
  ASSERT_EQ(v[n - 1], kSum) << "rank " << r;
}

TEST(LoneRun, AnOperationOfAKeptShapeWaitedAtOnceRunsItsKeptRunAlone) {
  testing::InProcessJob job(settings());
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    constexpr int kIters = 10;
    // Two shapes in turn: each is prepared once, then run again from the cache.
    for (int i = 0; i < kIters; ++i) {
      sum_in_place(comm, r, 1000);
      sum_in_place(comm, r, 7);
    }
    EXPECT_EQ(impl->lean_runs(), 2u * kIters - 2) << "rank " << r;
    // The blocking form takes it too (its out-of-place shape is new once).
    std::vector<float> in = ones_times_rank(r, 7), out(7, -1);
    for (int i = 0; i < 3; ++i) {
      comm.all_reduce(in.data(), out.data(), in.size(), DType::f32, Op::sum);
      ASSERT_EQ(out[6], kSum) << "rank " << r;
    }
    EXPECT_EQ(impl->lean_runs(), 2u * kIters - 2 + 2) << "rank " << r;
    EXPECT_EQ(impl->hand_off_counts().on_progress_thread, 0u) << "rank " << r;
  });
}

TEST(LoneRun, TheKeptRunUsedLongestAgoMakesRoomForANewShape) {
  testing::InProcessJob job(settings());
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    // As many shapes as the cache keeps (RunCache::kSize, 8): counts 1..8, each prepared.
    for (size_t n = 1; n <= 8; ++n) sum_in_place(comm, r, n);
    EXPECT_EQ(impl->lean_runs(), 0u) << "rank " << r;
    sum_in_place(comm, r, 1);  // run again where it is kept: now the most recently used
    EXPECT_EQ(impl->lean_runs(), 1u) << "rank " << r;
    sum_in_place(comm, r, 9);  // a ninth shape: count 2, used longest ago, makes room
    sum_in_place(comm, r, 1);  // still kept, though it was kept first
    EXPECT_EQ(impl->lean_runs(), 2u) << "rank " << r;
    sum_in_place(comm, r, 2);  // prepared anew
    EXPECT_EQ(impl->lean_runs(), 2u) << "rank " << r;
  });
}

// A send/recv group runs its members' kept runs where the cache keeps them (RunCache::lend);
// two members of one shape (two sends of a count to one peer) must get two runs, in order.
TEST(LoneRun, AGroupWithTwoMembersOfOneShapeRunsTwoKeptRunsInOrder) {
  testing::InProcessJob job(settings(/*timeout_s=*/5));
  testing::run_ranks(kRanks, [&](int r) {
    Communicator comm = job.make(r, 0);
    const int peer = 1 - r;
    for (int i = 0; i < 6; ++i) {
      const auto [got_first, got_second] = lean_path::two_message_group(comm, r, peer, i, /*sends_first=*/true);
      ASSERT_EQ(got_first, peer * 100 + i) << "rank " << r << ", group " << i;
      ASSERT_EQ(got_second, peer * 100 + 50 + i) << "rank " << r << ", group " << i;
    }
  });
}

TEST(LoneRun, AnOperationOnTheProgressThreadDoesNotTakeIt) {
  testing::JobSettings s = settings();
  s.hand_off_tick = 5ms;  // an operation not waited for within a tick goes to the progress thread
  s.waits_at_once = 5ms;
  testing::InProcessJob job(s);
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    for (int i = 0; i < 3; ++i) {
      std::vector<float> v = ones_times_rank(r, 64);
      Work w = comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);
      ASSERT_TRUE(completes_unwaited(w)) << "rank " << r;
      w.wait();
      EXPECT_EQ(v[63], kSum) << "rank " << r;
    }
    EXPECT_EQ(impl->hand_off_counts().on_progress_thread, 3u) << "rank " << r;
    EXPECT_EQ(impl->lean_runs(), 0u) << "rank " << r;
  });
}

// Rank 0 runs a kept all_reduce (its second) that rank 1 never joins: what the wait throws.
// `stop` ends it from another thread when set (an abort); otherwise BRAID_TIMEOUT_S does.
std::pair<ErrorCode, std::string> kept_run_left_alone(double timeout_s, bool abort) {
  testing::InProcessJob job(settings(timeout_s));
  std::atomic<bool> rank0_ended{false};
  std::pair<ErrorCode, std::string> got{ErrorCode::ok, ""};
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    sum_in_place(comm, r, 64);
    if (r == 1) {  // stays, without a second operation, until rank 0 has its error
      EXPECT_TRUE(wait_for(rank0_ended));
      return;
    }
    std::thread aborter;
    if (abort) {
      aborter = std::thread([&] {
        std::this_thread::sleep_for(200ms);
        comm.abort("the lone run test aborts");
      });
    }
    got = error_of([&] { sum_in_place(comm, r, 64); });
    if (aborter.joinable()) aborter.join();
    EXPECT_EQ(impl->lean_runs(), 1u) << "the second all_reduce did not take the lean path";
    EXPECT_NE(comm.state(), CommState::ok);
    rank0_ended = true;
  });
  return got;
}

TEST(LoneRun, ATimeoutInsideItIsReportedAsOnTheStreamPath) {
  const auto [code, message] = kept_run_left_alone(/*timeout_s=*/1, /*abort=*/false);
  EXPECT_EQ(code, ErrorCode::timeout) << message;
  // RunChecks' words, as RunSet says them: the operation, its run and rank, the limit.
  EXPECT_NE(message.find("all_reduce #2 ("), std::string::npos) << message;
  EXPECT_NE(message.find(" on rank 0) did not finish within 1 s (BRAID_TIMEOUT_S); waiting for "), std::string::npos)
      << message;
}

TEST(LoneRun, AnAbortInsideItIsReportedAsOnTheStreamPath) {
  const auto [code, message] = kept_run_left_alone(/*timeout_s=*/20, /*abort=*/true);
  EXPECT_EQ(code, ErrorCode::aborted) << message;
  EXPECT_NE(message.find("all_reduce #2 on rank 0: aborted on this rank (the lone run test aborts)"), std::string::npos)
      << message;
}

TEST(LoneRun, AMismatchInsideItIsCaughtBeforeItsDataLands) {
  testing::InProcessJob job(settings());
  std::vector<std::pair<ErrorCode, std::string>> got(kRanks);
  std::vector<float> second_of_rank0;
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    sum_in_place(comm, r, 64);
    // Rank 1 calls a different count: rank 0's kept run must refuse its header.
    std::vector<float> v = ones_times_rank(r, r == 0 ? 64 : 65);
    got[static_cast<size_t>(r)] = error_of([&] { comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum).wait(); });
    if (r == 0) {
      EXPECT_EQ(impl->lean_runs(), 1u) << "the second all_reduce did not take the lean path";
      second_of_rank0 = v;
    }
  });
  EXPECT_EQ(got[0].first, ErrorCode::mismatch) << got[0].second;
  EXPECT_NE(got[0].second.find("all_reduce"), std::string::npos) << got[0].second;
  for (float x : second_of_rank0) ASSERT_EQ(x, 1.0f) << "rank 1's data reached rank 0's buffer";
}

}  // namespace
}  // namespace braid
