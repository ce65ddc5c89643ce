// Who runs an *_async operation (runtime/communicator_impl.h, "the hand-off"): ranks as threads
// of this process on the inproc transport, counting with CommunicatorImpl::hand_off_counts()
// where each operation ran.
//
//   - wait() right after *_async on an otherwise idle communicator runs the operation on the
//     caller's thread, as the blocking call does (collectives and send/recv groups alike);
//   - an operation nobody waits for still completes, on the progress thread, while the caller
//     does something else; the next one then starts there at once, and a caller that waits
//     at once again gets its operations back; a caller that computes before it waits gets its
//     next operation started at once;
//   - operations queued behind another run on the progress thread, overlapped;
//   - BRAID_CALLER_PROGRESS=0 runs everything on the progress thread.
//
// The tick is lengthened (JobSettings::hand_off_tick) so that a caller descheduled for a while
// on a busy machine still counts as waiting at once: the cases check where operations ran,
// never how long they took.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "runtime/communicator_impl.h"
#include "tests/support/in_process_job.h"

namespace braid {
namespace {

using namespace std::chrono_literals;

constexpr int kRanks = 2;
constexpr auto kBound = 20s;  // every wait for a completion ends within this, or the case fails

testing::JobSettings settings(std::chrono::microseconds tick, bool caller_progress = true) {
  testing::JobSettings s;
  s.ranks = kRanks;
  s.hand_off_tick = tick;
  s.waits_at_once = tick;
  s.caller_progress = caller_progress;
  return s;
}

// Polls test() (never wait(), which could run the operation itself) until `w` completes.
bool completes_unwaited(const Work& w) {
  const auto until = std::chrono::steady_clock::now() + kBound;
  while (!w.test() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return w.test();
}

// All-reduces `n` values of rank + 1, returning them (each must be 1 + 2 + ... + kRanks).
std::vector<float> ones_times_rank(int rank, size_t n) { return std::vector<float>(n, static_cast<float>(rank + 1)); }
constexpr float kSum = kRanks * (kRanks + 1) / 2.0f;

// Each rank's communicator, with the CommunicatorImpl behind it whose hand_off_counts() say
// where its operations ran.
void on_every_rank(testing::InProcessJob& job, const std::function<void(int, Communicator&, CommunicatorImpl&)>& body) {
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    body(r, comm, *impl);
  });
}

// Rank r's operations so far ran `on_caller` times on its own thread and `on_progress` times on
// the progress thread.
void expect_ran(const CommunicatorImpl& impl, int r, uint64_t on_caller, uint64_t on_progress) {
  const auto counts = impl.hand_off_counts();
  EXPECT_EQ(counts.on_caller, on_caller) << "rank " << r << ": operations run on the caller's thread";
  EXPECT_EQ(counts.on_progress_thread, on_progress) << "rank " << r << ": operations run on the progress thread";
}

// braid-perf's latency step: a blocking barrier, then a send/recv group with the other rank
// waited at once; checks what arrived.
void barrier_then_exchange(Communicator& comm, int r, int i) {
  comm.barrier();
  int64_t out = r * 1000 + i, in = -1;
  comm.group_start();
  comm.send_async(&out, 1, DType::i64, 1 - r);
  comm.recv_async(&in, 1, DType::i64, 1 - r);
  comm.group_end().wait();
  ASSERT_EQ(in, (1 - r) * 1000 + i) << "rank " << r;
}

TEST(HandOff, WaitRightAfterAsyncRunsOnTheCallersThread) {
  testing::InProcessJob job(settings(2s));
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    constexpr int kIters = 20;
    for (int i = 0; i < kIters; ++i) {
      std::vector<float> v = ones_times_rank(r, 1000);
      comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum).wait();
      ASSERT_EQ(v[0], kSum);
      ASSERT_EQ(v[999], kSum);
    }
    // A send/recv exchange as one group, as braid-perf's sendrecv issues it.
    std::vector<int32_t> out(64, r), in(64, -1);
    comm.group_start();
    comm.send_async(out.data(), out.size(), DType::i32, 1 - r);
    comm.recv_async(in.data(), in.size(), DType::i32, 1 - r);
    comm.group_end().wait();
    EXPECT_EQ(in[63], 1 - r);
    expect_ran(impl, r, kIters + 1, 0);
  });
}

TEST(HandOff, WorkNobodyWaitsForCompletesOnTheProgressThread) {
  testing::InProcessJob job(settings(5ms));
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    for (int i = 0; i < 3; ++i) {  // the first left to the caller for a tick, the next started at once
      std::vector<float> v = ones_times_rank(r, 4096);
      Work w = comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);
      // The caller does something else; the operation must finish without a wait().
      ASSERT_TRUE(completes_unwaited(w)) << "rank " << r << ": un-waited all_reduce " << i << " never completed";
      w.wait();
      EXPECT_EQ(v[4095], kSum);
    }
    expect_ran(impl, r, 0, 3);
  });
}

TEST(HandOff, ACallerThatWaitsAtOnceAgainGetsItsOperationsBack) {
  testing::InProcessJob job(settings(200ms));
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    std::vector<float> v = ones_times_rank(r, 64);
    Work w = comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);
    ASSERT_TRUE(completes_unwaited(w)) << "rank " << r;
    ASSERT_EQ(impl.hand_off_counts().on_progress_thread, 1u) << "rank " << r;
    // Predicted to compute: the first of these wakes the progress thread, which may or may not
    // beat this wait(); the wait shows the caller waits at once, and the rest run here.
    for (int i = 0; i < 5; ++i) {
      v = ones_times_rank(r, 64);
      comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum).wait();
      ASSERT_EQ(v[63], kSum);
    }
    const auto counts = impl.hand_off_counts();
    EXPECT_GE(counts.on_caller, 4u) << "rank " << r;
    EXPECT_LE(counts.on_progress_thread, 2u) << "rank " << r;
  });
}

// The progress thread finished an operation before its caller came to wait() (the caller was
// descheduled past the tick, or the operation was started at once): the wait had nothing to
// hand over, yet the caller waited at once, and its next operation must be left to it again.
// Before the prediction was settled after the fact, such a caller kept waking the progress
// thread for every operation.
TEST(HandOff, AWaitAfterTheProgressThreadFinishedStillCountsAsWaitingAtOnce) {
  testing::JobSettings s = settings(1s);
  s.waits_at_once = 10s;
  testing::InProcessJob job(s);
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    std::vector<float> v = ones_times_rank(r, 64);
    Work w = comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);
    ASSERT_TRUE(completes_unwaited(w)) << "rank " << r;  // taken by the progress thread after a tick
    w.wait();  // done already; well within waits_at_once of the queueing
    ASSERT_EQ(impl.hand_off_counts().on_progress_thread, 1u) << "rank " << r;
    v = ones_times_rank(r, 64);
    w = comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);
    std::this_thread::sleep_for(20ms);  // far less than the tick: a woken progress thread would take it now
    w.wait();
    EXPECT_EQ(v[63], kSum);
    expect_ran(impl, r, 1, 1);
  });
}

// A caller that computes between *_async and wait() (here: sleeps longer than waits_at_once)
// gets its next operation started at once on the progress thread, overlapping the compute.
TEST(HandOff, ACallerThatComputesBeforeWaitingGetsOverlap) {
  testing::JobSettings s = settings(2s);
  s.waits_at_once = 50ms;
  testing::InProcessJob job(s);
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    std::vector<float> v = ones_times_rank(r, 64);
    comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum).wait();  // at once: here
    v = ones_times_rank(r, 64);
    Work w = comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);
    std::this_thread::sleep_for(100ms);  // left to this caller (predicted), which computes first
    w.wait();
    ASSERT_EQ(impl.hand_off_counts().on_caller, 2u) << "rank " << r;
    v = ones_times_rank(r, 64);
    w = comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);
    ASSERT_TRUE(completes_unwaited(w)) << "rank " << r;  // started at once, without a wait()
    w.wait();
    EXPECT_EQ(v[63], kSum);
    expect_ran(impl, r, 2, 1);
  });
}

TEST(HandOff, OperationsQueuedBehindAnotherRunOnTheProgressThread) {
  testing::InProcessJob job(settings(2s));  // a hand-off would show here as a 2 s stall
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    std::vector<std::vector<float>> bufs(4, ones_times_rank(r, 256));
    std::vector<Work> works;
    for (auto& b : bufs) works.push_back(comm.all_reduce_async(b.data(), b.size(), DType::f32, Op::sum));
    // None waited for yet: the second one queued ends the first one's grace.
    for (Work& w : works) ASSERT_TRUE(completes_unwaited(w)) << "rank " << r;
    for (Work& w : works) w.wait();
    for (auto& b : bufs) EXPECT_EQ(b[255], kSum);
    expect_ran(impl, r, 0, 4);
  });
}

TEST(HandOff, WithoutCallerProgressEverythingRunsOnTheProgressThread) {
  testing::InProcessJob job(settings(2s, /*caller_progress=*/false));
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    std::vector<float> v = ones_times_rank(r, 100);
    comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum).wait();
    comm.barrier();
    EXPECT_EQ(v[99], kSum);
    expect_ran(impl, r, 0, 2);
  });
}

// The progress thread ran an operation its caller waited for at once: it must have let go of
// the communicator by the time the caller sees the operation done, or the caller's next call
// finds it busy and queues, and so every later one (each then a wake-up each way). braid-perf's
// latency loop: a blocking barrier, a send/recv group waited at once, an all_reduce waited at
// once (tests/transport/ib/ib_hand_off_guest_test.cc runs the same over ib in the guest). The
// progress thread is made slow to let go after each operation, as it was in the guest.
TEST(HandOff, AfterTheProgressThreadRanOneTheCallerGetsTheNextBack) {
  testing::JobSettings s = settings(20ms);
  s.after_progress_op = [] { std::this_thread::sleep_for(5ms); };
  testing::InProcessJob job(s);
  testing::run_ranks(kRanks, [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    std::vector<float> a = ones_times_rank(r, 2), b = ones_times_rank(r, 2);
    Work first = comm.all_reduce_async(a.data(), a.size(), DType::f32, Op::sum);
    comm.all_reduce_async(b.data(), b.size(), DType::f32, Op::sum).wait();  // queued behind: progress thread
    first.wait();
    ASSERT_EQ(b[1], kSum);
    const auto before = impl->hand_off_counts();
    constexpr int kIters = 60;
    for (int i = 0; i < kIters; ++i) {
      ASSERT_NO_FATAL_FAILURE(barrier_then_exchange(comm, r, i));
      std::vector<float> v = ones_times_rank(r, 2);
      comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum).wait();
      ASSERT_EQ(v[1], kSum) << "rank " << r;
    }
    const auto after = impl->hand_off_counts();
    EXPECT_LE(after.on_progress_thread - before.on_progress_thread, 4u)
        << "rank " << r << ": of " << 3 * kIters << " operations, " << after.on_caller - before.on_caller
        << " ran on the caller's thread";
  });
}

// While a caller runs its operations itself, one after another (each waited at once), the
// progress thread has nothing to take: it must not wake every tick to look (where a rank has one
// CPU, each such wake-up preempts the caller in the middle of an operation: two thread switches
// for nothing). Operations that each last many ticks make the ticks certain; the progress
// thread may look once or twice per HandOff::kParked, so at most 4 per kParked are allowed where
// one per tick is 100 per kParked here.
TEST(HandOff, WhileTheCallerRunsItsOperationsTheProgressThreadDoesNotTick) {
  constexpr auto kTick = 200us;
  testing::InProcessJob job(settings(kTick));
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    // 4 MiB: an all_reduce lasts several ticks. The maximum leaves the buffer as it is, so the
    // caller does nothing between operations (between them the progress thread still ticks).
    constexpr size_t kCount = size_t{1} << 20;
    std::vector<float> v = ones_times_rank(r, kCount);
    comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::max).wait();
    const auto before = impl.hand_off_counts();
    const auto start = std::chrono::steady_clock::now();
    constexpr int kIters = 40;
    for (int i = 0; i < kIters; ++i) {
      comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::max).wait();
      ASSERT_EQ(v[kCount - 1], static_cast<float>(kRanks)) << "rank " << r << " iteration " << i;
    }
    const auto elapsed = std::chrono::steady_clock::now() - start;
    const auto after = impl.hand_off_counts();
    const uint64_t wakeups = after.progress_wakeups - before.progress_wakeups;
    const auto ticks = static_cast<uint64_t>(elapsed / kTick);
    const auto allowed = static_cast<uint64_t>(4 + 4 * (elapsed / HandOff::kParked));
    EXPECT_LE(wakeups, allowed) << "rank " << r << ": the progress thread woke " << wakeups << " times in "
                                << std::chrono::duration_cast<std::chrono::milliseconds>(elapsed).count() << " ms ("
                                << ticks << " ticks) while the caller ran " << kIters << " operations";
    EXPECT_EQ(after.on_progress_thread, before.on_progress_thread) << "rank " << r;
  });
}

// The prediction counts only the caller's own time between getting its Work back and waiting
// for it. Waking the progress thread is not the caller's: where a wake-up costs a while (an
// emulated CPU, a rank bound to one CPU that the woken thread takes over), counting it made a
// caller that always waits at once look like one that computes, so each operation woke the
// progress thread again and ran there, for good. One operation left unwaited for a while sets
// the prediction to "computes"; the wake-up it causes is made slow; the caller's next ones,
// each waited at once, come back to its own thread.
TEST(HandOff, ASlowWakeUpIsNotCountedAsTheCallersCompute) {
  testing::JobSettings s = settings(5ms);
  s.after_wake = [] { std::this_thread::sleep_for(15ms); };
  testing::InProcessJob job(s);
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    std::vector<float> a = ones_times_rank(r, 2);
    Work first = comm.all_reduce_async(a.data(), a.size(), DType::f32, Op::sum);
    std::this_thread::sleep_for(30ms);  // computes before it waits
    first.wait();
    const auto before = impl.hand_off_counts();
    constexpr int kIters = 20;
    for (int i = 0; i < kIters; ++i) ASSERT_NO_FATAL_FAILURE(barrier_then_exchange(comm, r, i));
    const auto after = impl.hand_off_counts();
    EXPECT_LE(after.on_progress_thread - before.on_progress_thread, 2u)
        << "rank " << r << ": of " << kIters << " groups waited at once, " << after.on_caller - before.on_caller - kIters
        << " ran on the caller's thread";
  });
}

// Completions keep the order the operations ran in: the progress thread lets go of the
// communicator before it completes the operation it ran (complete_last), and a caller that
// takes the communicator in between must not see its own later operation done first (a
// program, or braid.torch, may read "this one is done" as "every earlier one is too"). The
// progress thread is held in that gap for longer than the caller's barrier takes.
TEST(HandOff, AnOperationThatRanLaterNeverCompletesFirst) {
  std::atomic<int> in_gap{0};
  testing::JobSettings s = settings(20ms);
  s.before_held_complete = [&] {
    in_gap.fetch_add(1);
    std::this_thread::sleep_for(500ms);
  };
  testing::InProcessJob job(s);
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    std::vector<float> a = ones_times_rank(r, 2);
    Work first = comm.all_reduce_async(a.data(), a.size(), DType::f32, Op::sum);
    const auto until = std::chrono::steady_clock::now() + kBound;  // nobody waits: the progress thread takes it
    while (in_gap.load() < kRanks && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(in_gap.load(), kRanks) << "rank " << r << ": the progress threads never ran the first operation";
    const auto before = impl.hand_off_counts();
    comm.barrier();  // the communicator is free: this runs on the caller's thread
    EXPECT_EQ(impl.hand_off_counts().on_caller, before.on_caller + 1) << "rank " << r;
    EXPECT_TRUE(first.test()) << "rank " << r << ": the barrier completed before the all_reduce that ran first";
    first.wait();
    EXPECT_EQ(a[1], kSum);
  });
}

}  // namespace
}  // namespace braid
