// OpQueue (runtime/engine/op_queue.h) through whole communicators, ranks as threads of this
// process on the inproc transport: the engine's slot, where an operation queued on an idle
// communicator waits for its caller or the progress thread.
//
//   - a caller that issues and at once waits takes the queue's lock once per operation (to
//     admit it), not again to take it or to give the engine back; a group once, at group_end;
//   - nested groups and the members' order;
//   - a wait on a member of a group waiting in the slot runs the group on the caller's thread;
//   - abort() completes an operation that waits in the slot;
//   - an operation with another queued behind it is not taken from the slot by its caller;
//   - the caller and the progress thread racing for the slot, and two callers of one communicator:
//     every operation runs once, in order.
#include <dlfcn.h>
#include <gtest/gtest.h>
#include <pthread.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <random>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "runtime/communicator_impl.h"
#include "tests/support/in_process_job.h"

// Counts this thread's mutex locks while counting is on, and passes each on to the C library's:
// defined in the executable, it stands in for libc's everywhere.
namespace {
thread_local bool counting_locks = false;
thread_local int mutex_locks = 0;
}  // namespace

extern "C" __attribute__((no_sanitize("address"))) int pthread_mutex_lock(pthread_mutex_t* m) noexcept {
  using Lock = int (*)(pthread_mutex_t*);
  static const auto real = reinterpret_cast<Lock>(dlsym(RTLD_NEXT, "pthread_mutex_lock"));
  if (counting_locks) ++mutex_locks;
  return real(m);
}

namespace braid {
namespace {

using namespace std::chrono_literals;

constexpr auto kBound = 20s;  // every wait for a completion ends within this, or the case fails

testing::JobSettings settings(int ranks, std::chrono::microseconds tick) {
  testing::JobSettings s;
  s.ranks = ranks;
  s.hand_off_tick = tick;
  s.waits_at_once = tick;
  return s;
}

void on_every_rank(testing::InProcessJob& job, const std::function<void(int, Communicator&, CommunicatorImpl&)>& body) {
  testing::run_ranks(job.ranks(), [&](int r) {
    CommunicatorImpl* impl = nullptr;
    Communicator comm = job.make(r, 0, &impl);
    body(r, comm, *impl);
  });
}

// Polls test() (never wait(), which could run the operation itself) until `w` completes.
bool completes_unwaited(const Work& w) {
  const auto until = std::chrono::steady_clock::now() + kBound;
  while (!w.test() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return w.test();
}

// One rank: nothing of the run itself locks, so what is counted is the queue's. Before the
// engine's slot, push, take_for_wait and release took the lock each: 3 per operation.
TEST(OpQueue, ACallerThatWaitsAtOnceTakesTheLockOncePerOperation) {
  testing::InProcessJob job(settings(1, 2s));
  on_every_rank(job, [&](int, Communicator& comm, CommunicatorImpl& impl) {
    std::vector<float> v(16, 1.0f);
    for (int i = 0; i < 20; ++i) comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum).wait();  // warm
    const uint64_t before = impl.hand_off_counts().on_caller;
    constexpr int kOps = 200;
    mutex_locks = 0;
    counting_locks = true;
    for (int i = 0; i < kOps; ++i) comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum).wait();
    counting_locks = false;
    EXPECT_EQ(impl.hand_off_counts().on_caller - before, static_cast<uint64_t>(kOps)) << "all ran on the caller";
    EXPECT_LE(mutex_locks, kOps + 20) << "locks taken by " << kOps << " all_reduce_async().wait() calls";
  });
}

// The same for a send/recv group on two ranks, counted while it is issued (the inproc transport
// locks too while it runs): group_start and the members take no lock (held under the group's own
// spin, numbered at group_end), group_end one. Before: 4 (group_start, each member, group_end).
TEST(OpQueue, AGroupTakesTheQueuesLockOnceToBeIssued) {
  testing::InProcessJob job(settings(2, 2s));
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl&) {
    int64_t out = r, in = -1;
    auto exchange = [&] {
      comm.group_start();
      comm.send_async(&out, 1, DType::i64, 1 - r);
      comm.recv_async(&in, 1, DType::i64, 1 - r);
      return comm.group_end();
    };
    for (int i = 0; i < 20; ++i) exchange().wait();  // warm
    constexpr int kGroups = 100;
    int issuing = 0;
    for (int i = 0; i < kGroups; ++i) {
      out = r + 2 * i;
      mutex_locks = 0;
      counting_locks = true;
      Work w = exchange();
      counting_locks = false;
      issuing += mutex_locks;
      w.wait();
      ASSERT_EQ(in, 1 - r + 2 * i) << "group " << i;
    }
    EXPECT_LE(issuing, kGroups + 20) << "locks taken to issue " << kGroups << " groups";
  });
}

// The members of nested groups run as one group at the outermost group_end, numbered in the order
// they were issued, and a blocking pair after the group is numbered after them: each message's
// payload names its step and place.
TEST(OpQueue, NestedGroupsRunAsOneAndKeepTheirMembersOrder) {
  testing::InProcessJob job(settings(2, 2s));
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl&) {
    for (int i = 0; i < 50; ++i) {
      int64_t out[3] = {r * 100 + i, r * 100 + i + 1, r * 100 + i + 2}, in[3] = {-1, -1, -1};
      comm.group_start();
      comm.send_async(&out[0], 1, DType::i64, 1 - r);
      comm.group_start();
      comm.recv_async(&in[0], 1, DType::i64, 1 - r);
      comm.send_async(&out[1], 1, DType::i64, 1 - r);
      comm.group_end();  // nested: runs nothing yet
      comm.recv_async(&in[1], 1, DType::i64, 1 - r);
      comm.group_end().wait();
      // A blocking pair after the group: numbered after its members.
      if (r == 0) comm.send(&out[2], 1, DType::i64, 1);
      comm.recv(&in[2], 1, DType::i64, 1 - r);
      if (r == 1) comm.send(&out[2], 1, DType::i64, 0);
      for (int k = 0; k < 3; ++k) ASSERT_EQ(in[k], (1 - r) * 100 + i + k) << "step " << i << ", message " << k;
    }
  });
}

// A wait on one member of a group that waits in the slot (the group's own Work not waited for)
// runs the group here, as a wait on the group would.
TEST(OpQueue, AWaitOnAGroupMemberRunsTheGroupOnTheCallersThread) {
  testing::InProcessJob job(settings(2, 2s));  // a tick far longer than the case: the progress thread waits
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    comm.barrier();
    const uint64_t before = impl.hand_off_counts().on_caller;
    int64_t out = r + 10, in = -1;
    comm.group_start();
    comm.send_async(&out, 1, DType::i64, 1 - r);
    Work recv = comm.recv_async(&in, 1, DType::i64, 1 - r);
    Work group = comm.group_end();
    recv.wait();
    EXPECT_EQ(in, 1 - r + 10) << "rank " << r;
    EXPECT_TRUE(group.test()) << "rank " << r << ": the whole group ran";
    EXPECT_EQ(impl.hand_off_counts().on_caller - before, 1u) << "rank " << r << ": the group ran on the caller's thread";
    group.wait();
  });
}

// A caller that took its operation from the slot (without the lock), but only after computing
// for a while: its next operation is predicted to be computed over too, and wakes the progress
// thread at once (counted by the after_wake hook on the caller's thread).
TEST(OpQueue, ACallerThatCameLateForTheSlotGetsItsNextStartedAtOnce) {
  static thread_local int wakes = 0;
  testing::JobSettings s = settings(2, 2s);  // the progress thread takes nothing left to a caller within the case
  s.waits_at_once = 1ms;
  s.after_wake = [] { ++wakes; };
  testing::InProcessJob job(s);
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl&) {
    std::vector<float> v(8, 1.0f);
    comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum).wait();  // at once: the next is left here
    Work late = comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);
    std::this_thread::sleep_for(20ms);  // computes, far past waits_at_once, well within the tick
    late.wait();                        // takes it from the slot
    const int before = wakes;
    Work next = comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);
    EXPECT_EQ(wakes - before, 1) << "rank " << r << ": the progress thread is woken for the next one";
    next.wait();
  });
}

// abort() while an operation waits in the slot for its caller: it completes (aborted, or run if
// the progress thread took it first), and nothing hangs.
TEST(OpQueue, AbortCompletesAnOperationWaitingInTheSlot) {
  testing::InProcessJob job(settings(2, 2s));
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl&) {
    std::vector<float> v(8, 1.0f);
    comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum).wait();  // predicted: waits at once
    if (r == 1) return;  // rank 0 alone: its all_reduce cannot finish without rank 1
    Work w = comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);  // left in the slot
    comm.abort("the test aborts");
    ASSERT_TRUE(completes_unwaited(w));
    EXPECT_EQ(w.error_code(), ErrorCode::aborted) << w.error_message();
  });
}

// A tick of 200 us and waits that come at once, after a spin past the tick or after a sleep:
// the caller and the progress thread race for the slot, and each operation must run once, in
// issue order (each all_reduce's sum tells which one ran), with the blocking call, groups and
// operations queued behind others mixed in.
TEST(OpQueue, TheCallerAndTheProgressThreadRacingForTheSlotRunEachOperationOnce) {
  testing::InProcessJob job(settings(2, 200us));
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl& impl) {
    std::mt19937 shape(7u);                                  // the same operations on both ranks
    std::mt19937 rng(11u + static_cast<unsigned>(r));        // their own pauses
    constexpr int kOps = 600;
    for (int i = 0; i < kOps; ++i) {
      std::vector<float> a(4, static_cast<float>(i + r)), b(4, static_cast<float>(2 * i + r));
      const int how = static_cast<int>(shape() % 5);
      if (how == 4) {
        comm.all_reduce(a.data(), a.size(), DType::f32, Op::sum);
      } else if (how == 3) {
        Work first = comm.all_reduce_async(a.data(), a.size(), DType::f32, Op::sum);
        Work second = comm.all_reduce_async(b.data(), b.size(), DType::f32, Op::sum);  // behind the first
        second.wait();
        ASSERT_TRUE(first.test()) << "op " << i << ": the first finished before the second";
        first.wait();
        ASSERT_EQ(b[0], static_cast<float>(4 * i + 1)) << "op " << i;
      } else {
        Work w = comm.all_reduce_async(a.data(), a.size(), DType::f32, Op::sum);
        const auto pause = std::chrono::microseconds(rng() % 400);
        if (how == 1) {
          const auto until = std::chrono::steady_clock::now() + pause;
          while (std::chrono::steady_clock::now() < until) {
          }
        } else if (how == 2) {
          std::this_thread::sleep_for(pause);
        }
        w.wait();
      }
      ASSERT_EQ(a[0], static_cast<float>(2 * i + 1)) << "op " << i;
      ASSERT_EQ(a[3], static_cast<float>(2 * i + 1)) << "op " << i;
    }
    const auto counts = impl.hand_off_counts();
    EXPECT_GT(counts.on_caller, 0u);
    EXPECT_GT(counts.on_progress_thread, 0u) << "the progress thread took some: the race happened";
  });
}

// Both ranks post a receive and then a send, each *_async, and wait for the receive first (the
// usual irecv/isend/wait of an MPI program). The receive waits in the engine's slot with the
// send queued behind it: a caller that took it from the slot and ran it alone would wait for the
// peer's send, which waits behind the peer's receive in the same way, until BRAID_TIMEOUT_S. The
// progress thread runs the two overlapped instead. Every exchange completes, with the right data.
TEST(OpQueue, AReceiveWithASendQueuedBehindItIsNotRunAloneByItsCaller) {
  testing::JobSettings s = settings(2, 200us);
  s.timeout_s = 5;
  testing::InProcessJob job(s);
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl&) {
    for (int i = 0; i < 20; ++i) {
      int64_t out = 100 * r + i, in = -1;
      Work received = comm.recv_async(&in, 1, DType::i64, 1 - r);
      Work sent = comm.send_async(&out, 1, DType::i64, 1 - r);
      received.wait();
      sent.wait();
      ASSERT_EQ(in, 100 * (1 - r) + i) << "rank " << r << ", exchange " << i;
    }
  });
}

// Two threads of rank 0 issue on its one communicator at once, each exchanging with its own peer
// (point-to-point messages are matched per peer and direction, so their interleaving on rank 0
// does not matter): they race for the slot, queue behind each other's operations, give the
// engine back while the other pushes. Every message arrives, in order, and nothing is lost.
TEST(OpQueue, TwoThreadsIssuingOnOneCommunicatorEachGetTheirOperationsRun) {
  testing::InProcessJob job(settings(3, 200us));
  constexpr int kSteps = 60;  // kept small: with two issuing threads each step is slow, on main too (docs/performance.md)
  on_every_rank(job, [&](int r, Communicator& comm, CommunicatorImpl&) {
    // No groups: a group is the communicator's, and would take in the other thread's operations.
    auto exchange = [&comm](int peer, int step, bool first_send, int how) {
      int64_t out = 1000 * peer + step, in = -1;
      if (how == 0) {  // blocking calls
        if (first_send) comm.send(&out, 1, DType::i64, peer);
        comm.recv(&in, 1, DType::i64, peer);
        if (!first_send) comm.send(&out, 1, DType::i64, peer);
      } else if (how == 1) {  // *_async, waited at once
        if (first_send) comm.send_async(&out, 1, DType::i64, peer).wait();
        comm.recv_async(&in, 1, DType::i64, peer).wait();
        if (!first_send) comm.send_async(&out, 1, DType::i64, peer).wait();
      } else {  // sent first and received while it may still wait in the slot
        Work sent = comm.send_async(&out, 1, DType::i64, peer);
        comm.recv_async(&in, 1, DType::i64, peer).wait();
        sent.wait();
      }
      return in;
    };
    if (r == 0) {
      std::vector<std::thread> threads;
      for (int peer : {1, 2}) {
        threads.emplace_back([&, peer] {
          for (int i = 0; i < kSteps; ++i) {
            const int64_t in = exchange(peer, i, true, i % 3);
            if (in != 1000 * 0 + i) {
              ADD_FAILURE() << "rank 0 from " << peer << ", step " << i << ": " << in;
              return;
            }
          }
        });
      }
      for (auto& t : threads) t.join();
    } else {
      for (int i = 0; i < kSteps; ++i) ASSERT_EQ(exchange(0, i, false, i % 3), 1000 * r + i) << "rank " << r << ", step " << i;
    }
  });
}

}  // namespace
}  // namespace braid
