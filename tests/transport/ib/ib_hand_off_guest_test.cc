// Small operations over ib run on the thread that waits for them (runtime/communicator_impl.h,
// "the hand-off"), in the Soft-RoCE guest: two ranks as threads of this process, rank 0 on rxe0
// and rank 1 on rxe1, each counting with CommunicatorImpl::hand_off_counts() where its
// operations ran. braid-perf's latency loop, a blocking barrier and then an 8 B send/recv group
// waited at once, is what it runs, with an 8 B all_reduce waited at once beside it.
//
// The loop starts right after two operations queued back to back, which the progress thread
// runs: each later operation must still run on its caller's thread, the ib completion queues
// polled there. It fails when the progress thread signals an operation done while it still
// holds the communicator: the caller, waiting at once, issues the next operation before the
// progress thread lets go, finds the communicator busy and queues it, and from then on every
// operation goes through the progress thread (a futex round trip each, a timer tick each in the
// guest).
//
// The tick is lengthened so that a caller descheduled for a while (the guest is slow) still
// counts as waiting at once: the case checks where operations ran, never how long they took.
// Outside the guest it skips.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "braid/store.h"
#include "runtime/communicator_impl.h"
#include "runtime/engine/hand_off.h"
#include "tests/support/in_process_job.h"
#include "tests/transport/ib/soft_roce_guest.h"

namespace braid::transport::ib {
namespace {

using namespace std::chrono_literals;

constexpr int kRanks = 2;
constexpr int kIters = 60;
// Operations of the loop that may still run on the progress thread: a blocking call that meets
// the progress thread's once-a-second look at the failure board, and the one or two after a
// starter operation while the prediction settles (hand_off_test.cc).
constexpr uint64_t kFewHandOffs = 4;

// Rank `rank` of a job on `server`, over ib on rxe<rank> with the hand-off's tick `tick`.
Communicator make_rank(TcpStoreServer& server, int rank, std::chrono::microseconds tick, CommunicatorImpl** impl) {
  TcpStoreOptions options;
  options.timeout = 60s;
  CommunicatorConfig cfg;
  cfg.rank = rank;
  cfg.size = kRanks;
  cfg.local_rank = rank;
  cfg.local_size = kRanks;
  cfg.comm_id = 0x1b4a2d0ff;
  cfg.store = std::shared_ptr<Store>(TcpStore::connect("127.0.0.1", server.port(), options).release());
  cfg.master_addr = "127.0.0.1";
  cfg.env.transport = "ib";
  cfg.env.ib_hca = "=rxe" + std::to_string(rank);
  cfg.env.timeout_s = 120;
  cfg.env.rendezvous_timeout_s = 120;
  cfg.env.peer_timeout_s = 60;
  cfg.hand_off_tick = tick;
  cfg.waits_at_once = tick;
  std::unique_ptr<CommunicatorImpl> made = value_or_raise(make_communicator_impl(std::move(cfg)));
  *impl = made.get();
  return Communicator::from_impl_(std::move(made));
}

void run_ranks(const std::function<void(int)>& body) { braid::testing::run_ranks(kRanks, body); }

TEST(IbHandOffGuest, SmallOperationsWaitedAtOnceRunOnTheCallersThread) {
  SKIP_OUTSIDE_GUEST();
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  run_ranks([&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = make_rank(*server, r, 20ms, &impl);
    const int peer = 1 - r;
    ASSERT_EQ(comm.peer_transports()[static_cast<size_t>(peer)], "ib") << "rank " << r;
    // The starters: two operations queued back to back run on the progress thread, the second
    // waited at once.
    std::vector<float> a(2, static_cast<float>(r + 1)), b(2, static_cast<float>(r + 1));
    Work first = comm.all_reduce_async(a.data(), a.size(), DType::f32, Op::sum);
    comm.all_reduce_async(b.data(), b.size(), DType::f32, Op::sum).wait();
    first.wait();
    ASSERT_EQ(b[1], 3.0f) << "rank " << r;
    const auto before = impl->hand_off_counts();

    int64_t out = 0, in = -1;
    float sum = 0;
    for (int i = 0; i < kIters; ++i) {
      comm.barrier();  // blocking, as braid-perf's per-iteration barrier
      out = r * 1000 + i;
      comm.group_start();
      comm.send_async(&out, 1, DType::i64, peer);
      comm.recv_async(&in, 1, DType::i64, peer);
      comm.group_end().wait();
      ASSERT_EQ(in, peer * 1000 + i) << "rank " << r << " iteration " << i;
      sum = static_cast<float>(r + i);
      comm.all_reduce_async(&sum, 1, DType::f32, Op::sum).wait();
      ASSERT_EQ(sum, static_cast<float>(1 + 2 * i)) << "rank " << r << " iteration " << i;
    }
    const auto after = impl->hand_off_counts();
    const uint64_t on_progress = after.on_progress_thread - before.on_progress_thread;
    const uint64_t on_caller = after.on_caller - before.on_caller;
    EXPECT_LE(on_progress, kFewHandOffs) << "rank " << r << ": " << on_progress << " of " << 3 * kIters
                                         << " operations ran on the progress thread, " << on_caller
                                         << " on the caller's";
    EXPECT_GE(on_caller, 3 * kIters - kFewHandOffs) << "rank " << r;
  });
}

// The same loop, barriers and send/recv groups only, at the hand-off's own tick: each operation
// runs on its caller's thread, and the progress thread, with nothing to take while the caller
// holds the communicator, must not wake every tick to look (each such wake-up preempts a caller
// that has one CPU in the middle of its operation; docs/ib.md has what it cost). It may look
// once or twice per HandOff::kParked; at most 4 per kParked are allowed, where a tick is 20 per
// kParked.
TEST(IbHandOffGuest, WhileCallersRunTheirOperationsTheProgressThreadDoesNotTick) {
  SKIP_OUTSIDE_GUEST();
  auto server = TcpStoreServer::start("127.0.0.1", 0);
  constexpr int kLoop = 200;
  run_ranks([&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = make_rank(*server, r, 1ms, &impl);
    const int peer = 1 - r;
    int64_t out = 0, in = -1;
    comm.barrier();
    const auto before = impl->hand_off_counts();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < kLoop; ++i) {
      comm.barrier();
      out = r * 1000 + i;
      comm.group_start();
      comm.send_async(&out, 1, DType::i64, peer);
      comm.recv_async(&in, 1, DType::i64, peer);
      comm.group_end().wait();
      ASSERT_EQ(in, peer * 1000 + i) << "rank " << r << " iteration " << i;
    }
    const auto elapsed = std::chrono::steady_clock::now() - start;
    const auto after = impl->hand_off_counts();
    const uint64_t wakeups = after.progress_wakeups - before.progress_wakeups;
    const auto allowed = static_cast<uint64_t>(4 + 4 * (elapsed / HandOff::kParked));
    EXPECT_LE(wakeups, allowed) << "rank " << r << ": the progress thread woke " << wakeups << " times in "
                                << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count()
                                << " ms of " << kLoop << " iterations; " << after.on_caller - before.on_caller
                                << " operations ran on the caller's thread, "
                                << after.on_progress_thread - before.on_progress_thread << " on the progress thread";
  });
}

}  // namespace
}  // namespace braid::transport::ib
