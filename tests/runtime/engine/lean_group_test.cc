// The group runner's lean path (runtime/engine/group_runner.h): a small send/recv group whose
// members all have kept runs, run on the caller's thread, drives them in a LeanGroup. Ranks as
// threads of this process on the inproc transport; CommunicatorImpl::lean_groups() counts the
// path.
//
//   - a send/recv pair repeated takes it from its second step, its data right; a group's first
//     step, a group larger than LeanGroup::kMaxRuns and a member of a new shape do not; two
//     members with the same peer and direction keep their order on it;
//   - a timeout, an abort and a mismatch inside it end the group with the same code and wording
//     as on RunSet's path (the same group run for the first time), and the communicator fails
//     as there.
//
// The tick is long (JobSettings::hand_off_tick) so that groups waited at once run on the
// caller's thread even on a busy machine, as in lone_run_test.cc.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <regex>
#include <string>
#include <thread>
#include <utility>
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

// One step of a send/recv exchange with `peer`: `n` ints out (each `mark`), `n` in; returns what
// came in.
std::vector<int32_t> exchange(Communicator& comm, int peer, size_t n, int32_t mark) {
  std::vector<int32_t> out(n, mark), in(n, -1);
  comm.group_start();
  comm.send_async(out.data(), out.size(), DType::i32, peer);
  comm.recv_async(in.data(), in.size(), DType::i32, peer);
  comm.group_end().wait();
  return in;
}

TEST(LeanGroup, ARepeatedSendRecvPairTakesItFromItsSecondStep) {
  testing::InProcessJob job(settings());
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    const int peer = 1 - r;
    constexpr int kIters = 8;
    for (int i = 0; i < kIters; ++i) {
      const std::vector<int32_t> got = exchange(comm, peer, 4, r * 100 + i);
      ASSERT_EQ(got[0], peer * 100 + i) << "rank " << r << ", step " << i;
      ASSERT_EQ(got[3], peer * 100 + i) << "rank " << r << ", step " << i;
    }
    EXPECT_EQ(impl->lean_groups(), kIters - 1u) << "rank " << r;
    // A new count is a new shape: prepared once, then kept.
    (void)exchange(comm, peer, 9, 1);
    EXPECT_EQ(impl->lean_groups(), kIters - 1u) << "rank " << r;
    EXPECT_EQ(exchange(comm, peer, 9, r)[8], peer) << "rank " << r;
    EXPECT_EQ(impl->lean_groups(), kIters + 0u) << "rank " << r;
    EXPECT_EQ(impl->lean_runs(), 0u) << "rank " << r;
    EXPECT_EQ(impl->hand_off_counts().on_progress_thread, 0u) << "rank " << r;
  });
}

TEST(LeanGroup, TwoMembersWithOnePeerAndDirectionKeepTheirOrderOnIt) {
  testing::InProcessJob job(settings(/*timeout_s=*/5));
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    const int peer = 1 - r;
    for (int i = 0; i < 5; ++i) {
      const auto [got_first, got_second] = lean_path::two_message_group(comm, r, peer, i, /*sends_first=*/false);
      ASSERT_EQ(got_first, peer * 100 + i) << "rank " << r << ", group " << i;
      ASSERT_EQ(got_second, peer * 100 + 50 + i) << "rank " << r << ", group " << i;
    }
    EXPECT_EQ(impl->lean_groups(), 4u) << "rank " << r;
  });
}

TEST(LeanGroup, AGroupLargerThanItHoldsDoesNotTakeIt) {
  testing::InProcessJob job(settings());
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    const int peer = 1 - r;
    for (int i = 0; i < 3; ++i) {
      std::vector<std::vector<int32_t>> out(3, std::vector<int32_t>(2, r + i)), in(3, std::vector<int32_t>(2, -1));
      comm.group_start();
      for (size_t k = 0; k < 3; ++k) comm.send_async(out[k].data(), 2, DType::i32, peer);
      for (size_t k = 0; k < 3; ++k) comm.recv_async(in[k].data(), 2, DType::i32, peer);
      comm.group_end().wait();
      for (size_t k = 0; k < 3; ++k) ASSERT_EQ(in[k][1], peer + i) << "rank " << r << ", group " << i;
    }
    EXPECT_EQ(impl->lean_groups(), 0u) << "rank " << r;
  });
}

struct Stopped {
  ErrorCode code = ErrorCode::ok;
  std::string message;
  uint64_t lean_groups = 0;
};

// Rank 0 runs a send/recv group that rank 1 never joins: what the wait throws. With `warm`, the
// same group ran once before (its runs are kept: the lean path); without, it is the first (RunSet's
// path). `abort` ends it from another thread; otherwise BRAID_TIMEOUT_S does.
Stopped group_left_alone(double timeout_s, bool abort, bool warm) {
  testing::InProcessJob job(settings(timeout_s));
  std::atomic<bool> rank0_ended{false};
  Stopped got;
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    if (warm) (void)exchange(comm, 1 - r, 4, r);
    if (r == 1) {  // stays, without another operation, until rank 0 has its error
      EXPECT_TRUE(wait_for(rank0_ended));
      return;
    }
    std::thread aborter;
    if (abort) {
      aborter = std::thread([&] {
        std::this_thread::sleep_for(200ms);
        comm.abort("the lean group test aborts");
      });
    }
    std::tie(got.code, got.message) = error_of([&] { (void)exchange(comm, 1, 4, r); });
    if (aborter.joinable()) aborter.join();
    got.lean_groups = impl->lean_groups();
    EXPECT_NE(comm.state(), CommState::ok);
    rank0_ended = true;
  });
  return got;
}

// What the group itself said (the communicator's timeout report after it names other operations),
// with the warm group's numbers (#3-#4) written as the first group's (#1-#2) and any inproc
// endpoint as one.
std::string as_first_group(const std::string& m) {
  std::string s = m.substr(0, m.find(" Timeout report"));
  s = std::regex_replace(s, std::regex("#3-#4"), "#1-#2");
  return std::regex_replace(s, std::regex("inproc:[0-9]+"), "inproc:N");
}

TEST(LeanGroup, ATimeoutInsideItIsReportedAsOnRunSetsPath) {
  const Stopped lean = group_left_alone(/*timeout_s=*/1, /*abort=*/false, /*warm=*/true);
  const Stopped first = group_left_alone(/*timeout_s=*/1, /*abort=*/false, /*warm=*/false);
  EXPECT_EQ(lean.lean_groups, 1u) << "the second group did not take the lean path";
  EXPECT_EQ(first.lean_groups, 0u);
  EXPECT_EQ(lean.code, ErrorCode::timeout) << lean.message;
  EXPECT_EQ(first.code, ErrorCode::timeout) << first.message;
  EXPECT_NE(lean.message.find("group of 2 operations #3-#4 ("), std::string::npos) << lean.message;
  EXPECT_NE(lean.message.find(" on rank 0) did not finish within 1 s (BRAID_TIMEOUT_S); waiting for "), std::string::npos)
      << lean.message;
  EXPECT_EQ(as_first_group(lean.message), as_first_group(first.message));
}

TEST(LeanGroup, AnAbortInsideItIsReportedAsOnRunSetsPath) {
  const Stopped lean = group_left_alone(/*timeout_s=*/20, /*abort=*/true, /*warm=*/true);
  const Stopped first = group_left_alone(/*timeout_s=*/20, /*abort=*/true, /*warm=*/false);
  EXPECT_EQ(lean.lean_groups, 1u) << "the second group did not take the lean path";
  EXPECT_EQ(lean.code, ErrorCode::aborted) << lean.message;
  EXPECT_NE(lean.message.find("group of 2 operations #3-#4 on rank 0: aborted on this rank (the lean group test aborts)"),
            std::string::npos)
      << lean.message;
  EXPECT_EQ(as_first_group(lean.message), as_first_group(first.message));
}

TEST(LeanGroup, AMismatchInsideItIsCaughtBeforeItsDataLands) {
  testing::InProcessJob job(settings(/*timeout_s=*/5));
  std::vector<std::pair<ErrorCode, std::string>> got(kRanks);
  std::vector<int32_t> second_of_rank0;
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    const int peer = 1 - r;
    (void)exchange(comm, peer, 4, r);
    // Rank 1 sends a different count: rank 0's kept receive must refuse its header.
    std::vector<int32_t> out(r == 0 ? 4 : 5, 7), in(4, -1);
    got[static_cast<size_t>(r)] = error_of([&] {
      comm.group_start();
      comm.send_async(out.data(), out.size(), DType::i32, peer);
      comm.recv_async(in.data(), in.size(), DType::i32, peer);
      comm.group_end().wait();
    });
    if (r == 0) {
      EXPECT_EQ(impl->lean_groups(), 1u) << "the second group did not take the lean path";
      second_of_rank0 = in;
    }
  });
  EXPECT_EQ(got[0].first, ErrorCode::mismatch) << got[0].second;
  EXPECT_NE(got[0].second.find("recv #4 on rank 0: mismatch with rank 1"), std::string::npos) << got[0].second;
  for (int32_t x : second_of_rank0) ASSERT_EQ(x, -1) << "rank 1's data reached rank 0's buffer";
}

}  // namespace
}  // namespace braid
