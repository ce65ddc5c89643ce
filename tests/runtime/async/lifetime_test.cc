// Communicator lifetimes inside one process: ranks as threads, on the tcp transport (io_uring
// and epoll engines, over 127.0.0.1) and on inproc. Each case makes communicators, runs them
// into a clean end, an abort, or a failed peer, destroys them, and then checks that the process
// has exactly the descriptors and threads it had before.
//
// The counts catch a descriptor or thread left behind; what they cannot see (a leaked object,
// a Work or a progress thread touching a communicator already freed) is what the AddressSanitizer
// build in scripts/test.sh runs this test for. That is why the cases keep Work handles and
// child communicators past the death of what made them: those are the likely use-after-free
// spots. Valgrind is no help here: it cannot see io_uring's kernel-side writes.
//
// The communicators come from tests/support/in_process_job.h, which says why they are built from
// a CommunicatorConfig.
#include <dirent.h>
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "braid/store.h"
#include "runtime/communicator_impl.h"
#include "tests/support/in_process_job.h"
#include "transport/inproc/inproc_transport.h"
#include "transport/registry.h"

namespace braid {
namespace {

using namespace std::chrono_literals;

constexpr int kRanks = 3;
// Every wait in these cases ends well within this; a hang fails the case instead of the run.
constexpr auto kBound = 30s;

int count_entries(const char* dir) {
  int n = 0;
  DIR* d = opendir(dir);
  if (d == nullptr) return -1;
  while (dirent* e = readdir(d)) n += e->d_name[0] != '.';
  closedir(d);
  return n;
}

struct ProcessCounts {
  int fds = 0;
  int threads = 0;
};

ProcessCounts process_counts() {
  // The directory stream that lists /proc/self/fd is itself one of the entries.
  return {count_entries("/proc/self/fd") - 1, count_entries("/proc/self/task")};
}

// io_uring's worker threads (iou-wrk-*) and the kernel's release of a ring end shortly after the
// ring's fd is closed, not at once: give them a bounded moment before comparing.
void expect_back_to(const ProcessCounts& before, const std::string& what) {
  ProcessCounts now = process_counts();
  const auto until = std::chrono::steady_clock::now() + 5s;
  while ((now.fds != before.fds || now.threads != before.threads) && std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(10ms);
    now = process_counts();
  }
  EXPECT_EQ(now.fds, before.fds) << what << ": descriptors left open after every communicator was destroyed";
  EXPECT_EQ(now.threads, before.threads) << what << ": threads left running after every communicator was destroyed";
}

// One job of kRanks ranks on `engine` (tcp, tcp-poll or inproc).
struct Job : testing::InProcessJob {
  explicit Job(std::string engine) : InProcessJob({std::move(engine), kRanks}) {}
};

// Runs body(rank) on one thread per rank; a braid::Error escaping a body fails the case.
void on_every_rank(const std::function<void(int)>& body) { testing::run_ranks(kRanks, body); }

// The code a Work ended with, waiting at most kBound (a Work still running is a failure).
ErrorCode outcome(Work& w, int rank) {
  try {
    if (!w.wait_for(std::chrono::duration_cast<std::chrono::milliseconds>(kBound))) {
      ADD_FAILURE() << "rank " << rank << ": the operation did not end within the bound";
      return ErrorCode::internal;
    }
    return ErrorCode::ok;
  } catch (const Error& e) {
    return e.code();
  }
}

class Lifetime : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (GetParam() == "inproc") return;
    // io_uring may be denied (seccomp, kernel.io_uring_disabled) or compiled out: then say so.
    transport::TransportOptions options;
    options.listen_host = "127.0.0.1";
    auto probe = transport::create_transport(GetParam(), options);
    if (!probe.is_ok()) GTEST_SKIP() << GetParam() << " is not available here: " << probe.status().message();
  }
};

TEST_P(Lifetime, CleanEndWithSplitChildAndWorkOutlivingThem) {
  const ProcessCounts before = process_counts();
  {
    Job job(GetParam());
    on_every_rank([&](int r) {
      std::vector<float> v(4099, 1.0f);
      Work kept;
      std::optional<Communicator> child;
      {
        Communicator comm = job.make(r);
        comm.all_reduce(v.data(), v.size(), DType::f32, Op::sum);
        EXPECT_EQ(v[4098], static_cast<float>(kRanks));
        child.emplace(comm.split(0, -r));  // the child has its own progress thread and connections
        kept = comm.all_reduce_async(v.data(), v.size(), DType::f32, Op::max);
        // Destroyed with `kept` possibly still queued: the destructor lets it finish first.
      }
      EXPECT_EQ(outcome(kept, r), ErrorCode::ok) << kept.error_message();
      EXPECT_TRUE(kept.test());
      // The child outlives its parent, whose store and transport are gone.
      std::vector<int32_t> one(17, 1);
      child->all_reduce(one.data(), one.size(), DType::i32, Op::sum);
      EXPECT_EQ(one[16], kRanks);
      Work last = child->barrier_async();
      child.reset();
      EXPECT_EQ(outcome(last, r), ErrorCode::ok) << last.error_message();
    });
  }
  expect_back_to(before, "clean end");
}

TEST_P(Lifetime, AbortWhileOperationsArePending) {
  const ProcessCounts before = process_counts();
  {
    Job job(GetParam());
    on_every_rank([&](int r) {
      Communicator comm = job.make(r);
      std::vector<float> a(1024, 1.0f), b(1024, 1.0f);
      comm.all_reduce(a.data(), a.size(), DType::f32, Op::sum);
      // Rank 0 comes late, so ranks 1 and 2 have two operations pending when rank 1 aborts.
      if (r == 0) std::this_thread::sleep_for(700ms);
      std::thread aborter;
      if (r == 1) {
        aborter = std::thread([&] {
          std::this_thread::sleep_for(200ms);
          comm.abort("the lifetime test aborts");
        });
      }
      Work w2 = comm.all_reduce_async(a.data(), a.size(), DType::f32, Op::sum);
      Work w3 = comm.all_reduce_async(b.data(), b.size(), DType::f32, Op::sum);
      const ErrorCode c2 = outcome(w2, r), c3 = outcome(w3, r);
      if (aborter.joinable()) aborter.join();
      EXPECT_NE(c2, ErrorCode::ok) << "rank " << r;
      EXPECT_NE(c3, ErrorCode::ok) << "rank " << r;
      if (r == 1) {
        EXPECT_EQ(c3, ErrorCode::aborted) << w3.error_message();
      }
      EXPECT_NE(comm.state(), CommState::ok) << "rank " << r;
      // A communicator that ended is still destroyed (here, at the end of the scope) like any other.
    });
  }
  expect_back_to(before, "abort");
}

// Rank 2 leaves while ranks 0 and 1 wait for it inside an all_reduce: it destroys its
// communicator (tcp: its sockets close under the peers), or, on inproc, the fabric kills it as a
// crashed process would die. The survivors must fail, and then be destroyed cleanly too.
TEST_P(Lifetime, PeerFailsDuringAnOperation) {
  const bool kill_on_fabric = GetParam() == "inproc";
  const ProcessCounts before = process_counts();
  {
    Job job(GetParam());
    on_every_rank([&](int r) {
      std::optional<Communicator> comm(job.make(r));
      std::vector<float> v(100000, 1.0f);
      comm->all_reduce(v.data(), v.size(), DType::f32, Op::sum);
      if (r == 2) {
        std::this_thread::sleep_for(300ms);  // the others are inside all_reduce #2 by now
        if (kill_on_fabric) {
          job.fabric().kill(2);
          Work mine = comm->all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);
          EXPECT_NE(outcome(mine, r), ErrorCode::ok);
        }
        comm.reset();
        return;
      }
      Work w = comm->all_reduce_async(v.data(), v.size(), DType::f32, Op::sum);
      const ErrorCode c = outcome(w, r);
      EXPECT_TRUE(c == ErrorCode::peer_lost || c == ErrorCode::aborted)
          << "rank " << r << ": " << to_string(c) << ": " << w.error_message();
      EXPECT_EQ(comm->state(), CommState::failed) << "rank " << r;
    });
  }
  expect_back_to(before, "failed peer");
}

INSTANTIATE_TEST_SUITE_P(Engines, Lifetime, ::testing::Values("tcp", "tcp-poll", "inproc"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param == "tcp" ? std::string("io_uring")
                                                   : p.param == "tcp-poll" ? std::string("epoll") : p.param;
                         });

}  // namespace
}  // namespace braid
