// Rendezvous across real processes: ranks find each other through the environment, and every
// kind of bad input ends in a clear error, never a hang.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "braid_config.h"
#include "tests/support/rank_job.h"
#include "tests/support/subprocess.h"

namespace braid {
namespace {

using std::chrono::seconds;
using testing::Subprocess;

constexpr auto kBound = seconds(60);  // no test here may take anywhere near this long

// Every rank of these tests gives up on rendezvous after 10 s.
const testing::EnvMap kJobEnv = {{"BRAID_RENDEZVOUS_TIMEOUT_S", "10"}};

// comm_rank in `mode`; `extra`: more environment for every rank (e.g. BRAID_DEBUG=TRACE, whose
// lines tests count).
testing::RankJob comm_job(const std::string& mode, const testing::EnvMap& extra = {}) {
  testing::RankJob job{.argv = {testing::binary_from_env("COMM_RANK"), mode}, .env = kJobEnv};
  job.env.insert(extra.begin(), extra.end());
  return job;
}

TEST(Comm, RanksJoinWithoutALauncher) {
  auto ranks = testing::start_ranks(4, comm_job("join"));
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(ranks[r]->wait(kBound), 0) << ranks[r]->output();
    EXPECT_NE(ranks[r]->output().find("rank " + std::to_string(r) + " of 4"), std::string::npos) << ranks[r]->output();
    EXPECT_NE(ranks[r]->output().find("all_reduce sum = 10"), std::string::npos) << ranks[r]->output();
  }
}

int count_of(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// BRAID_CALLER_PROGRESS: a blocking call with nothing queued runs on the caller's thread (TRACE
// says where each operation ran), and results stay right while operations move between the
// caller and the progress thread, and while queued operations overlap, on both tcp engines and shm.
// With the knob off, none runs on the caller's thread.
class CallerProgress : public ::testing::TestWithParam<std::string> {};

TEST_P(CallerProgress, BlockingCallsRunOnTheCallersThread) {
  const char* uring = std::getenv("BRAID_TEST_HAVE_IO_URING");
  if (GetParam() == "tcp" && (uring == nullptr || std::string(uring) != "1")) {
    GTEST_SKIP() << "built without liburing: the io_uring engine (BRAID_TRANSPORT=tcp) is not there";
  }
  for (const char* on : {"1", "0"}) {
    std::vector<std::unique_ptr<Subprocess>> ranks(2);
    int port = testing::free_port();
    for (int r = 0; r < 2; ++r) {
      auto env = testing::rank_env(port, r, 2, kJobEnv);
      env["BRAID_DEBUG"] = "TRACE";
      env["BRAID_TRANSPORT"] = GetParam();
      env["BRAID_CALLER_PROGRESS"] = on;
      ranks[r] = std::make_unique<Subprocess>(std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "mixed"}, env);
    }
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(ranks[r]->wait(kBound), 0) << ranks[r]->output();
      const std::string& out = ranks[r]->output();
      EXPECT_NE(out.find("mixed done, 0 wrong"), std::string::npos) << out;
      // Queued operations overlap: the next starts once the one before has posted everything
      // (the six asynchronous calls issued together at the end, at least).
      EXPECT_GE(count_of(out, "(overlapping "), 1) << out;
      const int here = count_of(out, "on the caller's thread");
      const int there = count_of(out, "on the progress thread");
      if (std::string(on) == "1") {
        // The first 40 are blocking calls with nothing queued: all of them, bar the rare one
        // that meets the progress thread in its once-a-second failure-board check.
        EXPECT_GE(here, 38) << out;
        EXPECT_GE(here + there, 160) << out;
      } else {
        EXPECT_EQ(here, 0) << out;
        EXPECT_GE(there, 160) << out;
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Engines, CallerProgress, ::testing::Values("tcp", "tcp-poll", "shm"));

// BRAID_DEBUG=INFO: one line per rank once connected: rank, transport and engine, interface
// and address, sockets per peer, the algorithm table (or the forced algorithm).
TEST(Comm, InfoPrintsOneInitLinePerRank) {
  for (const char* algo : {"auto", "ring"}) {
    int port = testing::free_port();
    std::vector<std::unique_ptr<Subprocess>> ranks(2);
    for (int r = 0; r < 2; ++r) {
      auto env = testing::rank_env(port, r, 2, kJobEnv);
      env["BRAID_DEBUG"] = "INFO";
      env["BRAID_TRANSPORT"] = "tcp-poll";
      env["BRAID_ALGO"] = algo;
      env["BRAID_TIMOUT_S"] = "60";  // misspelt: warned about once, never a setting
      if (std::string(algo) == "ring") env["BRAID_RING_DEPTH"] = "3";
      ranks[r] = std::make_unique<Subprocess>(std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "join"}, env);
    }
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(ranks[r]->wait(kBound), 0) << ranks[r]->output();
      const std::string& out = ranks[r]->output();
      EXPECT_EQ(count_of(out, "communicator ready: rank " + std::to_string(r) + " of 2"), 1) << out;
      // The build, once per process, before anything else the communicator says.
      EXPECT_EQ(count_of(out, std::string("INFO: braid ") + BRAID_VERSION + " (io_uring "), 1) << out;
      EXPECT_NE(out.find(", ib "), std::string::npos) << out;
      EXPECT_NE(out.find(", cuda "), std::string::npos) << out;
      EXPECT_NE(out.find(", torch "), std::string::npos) << out;
      EXPECT_EQ(count_of(out, "BRAID_TIMOUT_S: unknown; did you mean BRAID_TIMEOUT_S?"), 1) << out;
      EXPECT_NE(out.find("transport tcp (epoll) on "), std::string::npos) << out;
      EXPECT_NE(out.find("1 socket per peer"), std::string::npos) << out;
      if (std::string(algo) == "auto") {
        EXPECT_NE(out.find("algorithms by size: all_reduce "), std::string::npos) << out;
        EXPECT_NE(out.find("ring depth 1 (every rank on a host-local address)"), std::string::npos) << out;
      } else {
        EXPECT_NE(out.find("algorithms ring (BRAID_ALGO)"), std::string::npos) << out;
        EXPECT_NE(out.find("ring depth 3 (BRAID_RING_DEPTH)"), std::string::npos) << out;
      }
    }
  }
}

// inproc needs ranks that are threads of one process; in a job of processes it is a clear
// invalid-argument error on every rank, not a message about TransportOptions.
TEST(Comm, InprocTransportInAJobOfProcessesSaysItIsForTests) {
  int port = testing::free_port();
  std::vector<std::unique_ptr<Subprocess>> ranks(2);
  for (int r = 0; r < 2; ++r) {
    auto env = testing::rank_env(port, r, 2, kJobEnv);
    env["BRAID_TRANSPORT"] = "inproc";
    ranks[r] = std::make_unique<Subprocess>(std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "join"}, env);
  }
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(ranks[r]->wait(kBound), 0) << ranks[r]->output();
    const std::string& out = ranks[r]->output();
    EXPECT_NE(out.find("BRAID_TRANSPORT=inproc: the inproc transport is for tests whose ranks are threads of one process"),
              std::string::npos)
        << out;
    EXPECT_NE(out.find("use BRAID_TRANSPORT=auto"), std::string::npos) << out;
    EXPECT_EQ(out.find("TransportOptions"), std::string::npos) << out;
  }
}

TEST(Comm, RankZeroMayLeaveFirst) {
  auto ranks = testing::start_ranks(3, comm_job("leave_early"));
  for (auto& p : ranks) EXPECT_EQ(p->wait(kBound), 0) << p->output();
}

// comm = comm.split(...) on every rank: rank 0's parent, which started the store's server, goes
// first, while the children (its own and the other color's, which rank 0 is not in) still meet
// through the store. Every rank's children keep it up.
TEST(Comm, SplitChildrenOutliveTheirParent) {
  auto ranks = testing::start_ranks(4, comm_job("split_drop_parent"));
  for (auto& p : ranks) {
    EXPECT_EQ(p->wait(kBound), 0) << p->output();
    EXPECT_NE(p->output().find("used its child after the parent went"), std::string::npos) << p->output();
    EXPECT_EQ(p->output().find("the store is gone"), std::string::npos) << p->output();
  }
}

// torch hands braid its store, served in its rank 0, which may exit first at a clean end: the
// others leave without a warning (only an INFO line says the store went first).
TEST(Comm, AProgramsStoreMayGoFirstWithoutAWarning) {
  const int port = testing::free_port();
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < 2; ++r) {
    auto env = testing::rank_env(port, r, 2, kJobEnv);
    env["BRAID_DEBUG"] = "INFO";
    env["BRAID_SECRET"] = "comm-test-foreign-store";  // else the store warns that the job has none
    ranks.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "foreign_store"}, env));
  }
  for (auto& p : ranks) ASSERT_EQ(p->wait(kBound), 0) << p->output();
  const std::string& late = ranks[1]->output();
  EXPECT_NE(late.find("the program's store is gone already"), std::string::npos) << late;
  EXPECT_EQ(late.find("leaving: the store is gone"), std::string::npos) << late;
}

TEST(Comm, EightRanksUnderBraidrun) {
  const char* braidrun = std::getenv("BRAIDRUN");
  if (!braidrun) GTEST_SKIP() << "BRAIDRUN not set (braidrun not built)";
  Subprocess run({braidrun, "--standalone", "--nproc-per-node", "8", testing::binary_from_env("COMM_RANK"), "join"},
                 {{"BRAID_RENDEZVOUS_TIMEOUT_S", "30"}});
  ASSERT_EQ(run.wait(kBound), 0) << run.output();
  for (int r = 0; r < 8; ++r) {
    EXPECT_NE(run.output().find("rank " + std::to_string(r) + " of 8"), std::string::npos) << run.output();
  }
}

// torchrun's agent holds MASTER_PORT with torch's own store (another protocol); the ranks
// see TORCHELASTIC_USE_AGENT_STORE=True and meet in braid's store on the next port instead.
TEST(Comm, UnderTorchrunStyleAgentStore) {
  int agent = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int port = 0;
  for (int attempt = 0; attempt < 20 && port == 0; ++attempt) {  // a port whose successor is free too
    addr.sin_port = 0;
    ASSERT_EQ(bind(agent, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
    getsockname(agent, reinterpret_cast<sockaddr*>(&addr), &len);
    int probe = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in next = addr;
    next.sin_port = htons(static_cast<uint16_t>(ntohs(addr.sin_port) + 1));
    if (bind(probe, reinterpret_cast<sockaddr*>(&next), sizeof(next)) == 0) port = ntohs(addr.sin_port);
    close(probe);
    if (port == 0) {
      close(agent);
      agent = socket(AF_INET, SOCK_STREAM, 0);
    }
  }
  ASSERT_NE(port, 0);
  ASSERT_EQ(listen(agent, 4), 0);
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < 2; ++r) {
    auto env = testing::rank_env(port, r, 2, kJobEnv);
    env["TORCHELASTIC_USE_AGENT_STORE"] = "True";
    ranks.push_back(std::make_unique<Subprocess>(std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "join"}, env));
  }
  for (auto& p : ranks) EXPECT_EQ(p->wait(kBound), 0) << p->output();
  close(agent);
}

// A fresh communicator is as fast from its first operations as later: nothing it needs is set
// up page by page as they run (the shm rings once were: a page fault per 4 KiB operation and
// process for the first lap of each ring, which made the first hundred or so several times
// slower). 300 small all_reduces after 5 take almost no page faults in either rank; a ring
// faulted in by use takes one per operation. Over shm (the default here) and over tcp.
TEST(Comm, AFreshCommunicatorsFirstOperationsTakeNoPageFaults) {
  const char* uring = std::getenv("BRAID_TEST_HAVE_IO_URING");
  const bool have_uring = uring != nullptr && std::string(uring) == "1";
  for (const char* transport : {"shm", have_uring ? "tcp" : "tcp-poll"}) {
    SCOPED_TRACE(transport);
    auto ranks = testing::start_ranks(2, comm_job("first_ops", {{"BRAID_TRANSPORT", transport}}));
    for (auto& p : ranks) {
      ASSERT_EQ(p->wait(kBound), 0) << p->output();
      const size_t at = p->output().find(": first_ops ");
      ASSERT_NE(at, std::string::npos) << p->output();
      const long faults = std::stol(p->output().substr(at + 12));
      EXPECT_LT(faults, 60) << p->output();
      EXPECT_NE(p->output().find("page faults in 300 operations, 0 wrong"), std::string::npos) << p->output();
    }
  }
}

// Operations of a shape this rank ran before run again on the run kept from then (TRACE says
// "run again"), on whatever buffers the call brings: results stay right with buffers that change
// between calls, in-place and out-of-place forms of one count, roots that move, and several
// runs of one shape in flight at once.
TEST(Comm, RepeatedCollectivesRunAgainOnNewBuffers) {
  auto ranks = testing::start_ranks(3, comm_job("repeat", {{"BRAID_DEBUG", "TRACE"}}));
  for (auto& p : ranks) {
    ASSERT_EQ(p->wait(kBound), 0) << p->output();
    EXPECT_NE(p->output().find("repeat done, 0 wrong"), std::string::npos) << p->output();
    // 180 calls in the rounds: 10 shapes (broadcast and reduce with 3 roots each), of which at
    // most 8 are kept, so a rooted shape is rebuilt when its root comes back (64 builds, 116
    // runs again); then 18 in the bursts, of which the first burst's 6 may all be built. 128
    // here; fewer means runs are not kept or not found.
    EXPECT_GE(count_of(p->output(), ", run again"), 128) << p->output();
    // Above 1 MiB nothing is kept: each of the three large calls is built.
    EXPECT_EQ(count_of(p->output(), "count 300000 f32 starts"), 3) << p->output();
    EXPECT_EQ(count_of(p->output(), "count 300000 f32 starts on the progress thread, run again") +
                  count_of(p->output(), "count 300000 f32 starts on the caller's thread, run again"),
              0)
        << p->output();
  }
}

// Send/recv groups are kept and run again like collectives, per peer and count: results stay
// right with buffers, tags and counts that change between calls.
TEST(Comm, RepeatedSendRecvGroupsRunAgainOnNewBuffers) {
  auto ranks = testing::start_ranks(3, comm_job("repeat_p2p", {{"BRAID_DEBUG", "TRACE"}}));
  for (auto& p : ranks) {
    ASSERT_EQ(p->wait(kBound), 0) << p->output();
    EXPECT_NE(p->output().find("repeat_p2p done, 0 wrong"), std::string::npos) << p->output();
    // 40 groups of a send and a receive in 2 shapes each: 4 built, 76 run again.
    EXPECT_GE(count_of(p->output(), ", run again"), 72) << p->output();
    EXPECT_LE(count_of(p->output(), ", built"), 8) << p->output();
  }
}

// A group with more sends and receives than half the cache holds is built anew each time, so
// that the collectives around it keep their runs (ten messages per group here, eight runs kept).
TEST(Comm, ALargeSendRecvGroupDoesNotPushOutKeptCollectives) {
  auto ranks = testing::start_ranks(2, comm_job("big_groups", {{"BRAID_DEBUG", "TRACE"}}));
  for (auto& p : ranks) {
    ASSERT_EQ(p->wait(kBound), 0) << p->output();
    EXPECT_NE(p->output().find("big_groups done, 0 wrong"), std::string::npos) << p->output();
    EXPECT_EQ(count_of(p->output(), "count 10 i32 peer " + std::to_string(p == ranks[0] ? 1 : 0) + ", built"), 100)
        << p->output();
    EXPECT_GE(count_of(p->output(), "count 100 i32 starts on the caller's thread, run again") +
                  count_of(p->output(), "count 100 i32 starts on the progress thread, run again"),
              9)
        << p->output();
  }
}

// A send/recv group run again still checks the operation's header: a receive with another tag
// than its message's fails on the receiving rank, naming both tags (the sender's own send and
// receive did match, so it finishes).
TEST(Comm, ASendRecvRunAgainStillDetectsATagMismatch) {
  auto ranks = testing::start_ranks(2, comm_job("repeat_p2p_mismatch"));
  EXPECT_EQ(ranks[0]->wait(kBound), 0) << ranks[0]->output();
  EXPECT_NE(ranks[0]->output().find("its send and receive matched"), std::string::npos) << ranks[0]->output();
  const int rc = ranks[1]->wait(kBound);
  const std::string& out = ranks[1]->output();
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("five tagged exchanges done"), std::string::npos) << out;
  EXPECT_NE(out.find("mismatch"), std::string::npos) << out;
  EXPECT_NE(out.find("tag 6"), std::string::npos) << out;
  EXPECT_NE(out.find("tag 5"), std::string::npos) << out;
}

// A rank that runs a kept run again still sends and checks the operation's header: a peer that
// calls a different count is a mismatch on both sides, as on a first call.
TEST(Comm, ARunAgainStillDetectsAMismatch) {
  auto ranks = testing::start_ranks(2, comm_job("repeat_mismatch"));
  for (auto& p : ranks) {
    EXPECT_EQ(p->wait(kBound), 1) << p->output();
    EXPECT_NE(p->output().find("five all_reduces done"), std::string::npos) << p->output();
    EXPECT_NE(p->output().find("mismatch"), std::string::npos) << p->output();
  }
  // What rank 0's run sent is this call's header (number 6), not the one it was built for.
  EXPECT_NE(ranks[1]->output().find("which called all_reduce #6 (count 1000 i32 sum)"), std::string::npos)
      << ranks[1]->output();
}

// Ranks started with settings that change what bytes go where (here BRAID_ALGO) used to meet
// anyway: 2 ranks finished "successfully" with every element wrong, 4 hung, 3 blamed the element
// counts. Now every rank fails as it creates the communicator, naming the variable, each value
// and the ranks that hold it.
struct Disagreement {
  std::string name;
  std::vector<std::string> algos;  // BRAID_ALGO per rank
  size_t count;                    // f32 elements all_reduced
  std::vector<std::string> expect;  // in every rank's output
};

class SettingsDisagree : public ::testing::TestWithParam<Disagreement> {};

TEST_P(SettingsDisagree, EveryRankNamesTheSettingAndTheRanks) {
  const Disagreement& d = GetParam();
  const int size = static_cast<int>(d.algos.size());
  int port = testing::free_port();
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < size; ++r) {
    auto env = testing::rank_env(port, r, size, kJobEnv);
    env["BRAID_ALGO"] = d.algos[static_cast<size_t>(r)];
    ranks.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "sum", std::to_string(d.count)}, env));
  }
  // The old code hung here with 4 ranks: the bound makes that a failure, not a hung test.
  const auto deadline = std::chrono::steady_clock::now() + seconds(30);
  for (auto& p : ranks) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    const int rc = p->wait(std::max(left, std::chrono::milliseconds(1)));
    EXPECT_NE(rc, -1) << "hung: " << p->output();
    EXPECT_EQ(rc, 1) << p->output();
    EXPECT_EQ(p->output().find("returned"), std::string::npos) << "the all_reduce ran: " << p->output();
    EXPECT_NE(p->output().find("BRAID_ALGO differs between ranks"), std::string::npos) << p->output();
    for (const auto& e : d.expect) EXPECT_NE(p->output().find(e), std::string::npos) << e << " in: " << p->output();
    EXPECT_NE(p->output().find("set it the same on every rank (or leave it unset)"), std::string::npos)
        << p->output();
  }
}

INSTANTIATE_TEST_SUITE_P(
    Algo, SettingsDisagree,
    ::testing::Values(
        // Old code: both ranks returned, every element wrong.
        Disagreement{"TwoRanks4KiB", {"ring", "tree"}, 1024, {"rank 0 has 'ring', rank 1 has 'tree'"}},
        // Old code: all four hung.
        Disagreement{"FourRanks1MiB", {"ring", "tree", "ring", "ring"}, 262144,
                     {"ranks 0, 2, 3 have 'ring', rank 1 has 'tree'"}},
        // Old code: "expected 1332 bytes from rank 2, got 2000 - ... the same counts?"
        Disagreement{"ThreeRanks", {"ring", "ring", "tree"}, 1000, {"ranks 0, 1 have 'ring', rank 2 has 'tree'"}}),
    [](const ::testing::TestParamInfo<Disagreement>& info) { return info.param.name; });

// Several settings at once: each is named, with its values.
TEST(Comm, EverySettingThatDiffersIsNamed) {
  int port = testing::free_port();
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < 2; ++r) {
    auto env = testing::rank_env(port, r, 2, kJobEnv);
    env["BRAID_CHUNK_BYTES"] = r == 0 ? "65536" : "\x01";
    env["BRAID_RING_DEPTH"] = r == 0 ? "\x01" : "3";
    env["BRAID_TRANSPORT"] = r == 0 ? "tcp-poll" : "auto";  // the same wire protocol: they agree
    ranks.push_back(std::make_unique<Subprocess>(std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "sum"}, env));
  }
  for (auto& p : ranks) {
    const int rc = p->wait(kBound);
    EXPECT_EQ(rc, 1) << p->output();
    const std::string& out = p->output();
    EXPECT_NE(out.find("BRAID_CHUNK_BYTES differs between ranks: rank 0 has '65536', rank 1 has '0' (automatic)"),
              std::string::npos) << out;
    EXPECT_NE(out.find("BRAID_RING_DEPTH differs between ranks: rank 0 has '0' (automatic), rank 1 has '3'"),
              std::string::npos) << out;
    EXPECT_EQ(out.find("BRAID_TRANSPORT differs"), std::string::npos) << out;
  }
}

// Two engines of one family in a list: the second is the first's fallback ("tcp,tcp-poll": io_uring,
// else epoll), and the ranks meet on the same listener. (Each rank once listened on both and a
// connecting rank picked the peer's last tcp address while the peer accepted on its first: the
// handshake waited out the rendezvous bound.)
TEST(Comm, ATransportListedTwiceInOneFamilyConnects) {
  for (const char* list : {"tcp,tcp-poll", "tcp-poll,tcp"}) {
    int port = testing::free_port();
    std::vector<std::unique_ptr<Subprocess>> ranks;
    for (int r = 0; r < 2; ++r) {
      auto env = testing::rank_env(port, r, 2, kJobEnv);
      env["BRAID_TRANSPORT"] = list;
      env["BRAID_RENDEZVOUS_TIMEOUT_S"] = "20";
      ranks.push_back(std::make_unique<Subprocess>(std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "sum"}, env));
    }
    for (auto& p : ranks) EXPECT_EQ(p->wait(kBound), 0) << list << ": " << p->output();
  }
}

// A destroyed communicator's store keys are deleted: creating and destroying communicators (and
// splits of them) on one store, again and again, leaves the store's key count where it was.
TEST(Comm, DestroyedCommunicatorsLeaveNoKeys) {
  std::vector<std::unique_ptr<Subprocess>> churn;
  int port = testing::free_port();
  for (int r = 0; r < 3; ++r) {
    churn.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "churn", "12"},
        testing::rank_env(port, r, 3, kJobEnv)));
  }
  for (auto& p : churn) ASSERT_EQ(p->wait(kBound), 0) << p->output();
  const std::string& out = churn[0]->output();
  const size_t at = out.find("keys after the first round ");
  ASSERT_NE(at, std::string::npos) << out;
  long long first = -1, last = -2;
  int rounds = 0;
  ASSERT_EQ(std::sscanf(out.c_str() + at, "keys after the first round %lld, after round %d %lld", &first, &rounds, &last), 3)
      << out;
  EXPECT_EQ(last, first) << out;
}

TEST(Comm, TagsAreChecked) {
  auto ranks = testing::start_ranks(2, comm_job("tags"));
  for (auto& p : ranks) {
    int rc = p->wait(kBound);
    EXPECT_EQ(rc, 1) << p->output();
    EXPECT_NE(p->output().find("tag 7 matched, v[0] = 42"), std::string::npos) << p->output();
    EXPECT_NE(p->output().find("mismatch"), std::string::npos) << p->output();
    EXPECT_NE(p->output().find("tag 8"), std::string::npos) << p->output();
    EXPECT_NE(p->output().find("tag 9"), std::string::npos) << p->output();
  }
}

TEST(Comm, TcpUrlInitMethod) {
  int port = testing::free_port();
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < 3; ++r) {
    std::string url = "tcp://127.0.0.1:" + std::to_string(port) + "?rank=" + std::to_string(r) + "&world_size=3";
    ranks.push_back(std::make_unique<Subprocess>(std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "url", url},
                                                 std::map<std::string, std::string>{{"RANK", "\x01"}, {"WORLD_SIZE", "\x01"}}));
  }
  for (auto& p : ranks) {
    EXPECT_EQ(p->wait(kBound), 0) << p->output();
    EXPECT_NE(p->output().find("all_reduce sum = 6"), std::string::npos) << p->output();
  }
}

TEST(Comm, FileUrlInitMethod) {
  char dir[] = "/tmp/braid-file-init-XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  std::string url = std::string("file://") + dir + "/store";
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < 3; ++r) {
    ranks.push_back(std::make_unique<Subprocess>(std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "url", url},
                                                 std::map<std::string, std::string>{{"RANK", std::to_string(r)}, {"WORLD_SIZE", "3"}}));
  }
  for (auto& p : ranks) {
    EXPECT_EQ(p->wait(kBound), 0) << p->output();
    EXPECT_NE(p->output().find("all_reduce sum = 6"), std::string::npos) << p->output();
  }
  std::system((std::string("rm -rf ") + dir).c_str());
}

// Starts one rank process per environment in `envs`, all at once: each must fail, not hang,
// and say `expect`.
void expect_all_fail(const std::vector<std::map<std::string, std::string>>& envs, const std::string& expect) {
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (const auto& env : envs) {
    ranks.push_back(
        std::make_unique<Subprocess>(std::vector<std::string>{testing::binary_from_env("COMM_RANK"), "join"}, env));
  }
  for (const auto& p : ranks) {
    int rc = p->wait(kBound);
    EXPECT_NE(rc, 0) << p->output();
    EXPECT_NE(rc, -1) << "hung: " << p->output();
    EXPECT_NE(p->output().find(expect), std::string::npos) << "want '" << expect << "' in: " << p->output();
  }
}

// One process with a broken environment: it must fail at once with `expect` in its message.
void expect_failure(const std::map<std::string, std::string>& env, const std::string& expect) {
  expect_all_fail({env}, expect);
}

TEST(Comm, MissingVariablesAreListed) {
  expect_failure({{"MASTER_ADDR", "\x01"}, {"MASTER_PORT", "\x01"}, {"RANK", "\x01"}, {"WORLD_SIZE", "\x01"}},
                 "missing environment variables MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE");
}

TEST(Comm, NonNumericAndNegativeValues) {
  auto env = testing::rank_env(testing::free_port(), 0, 2, kJobEnv);
  env["RANK"] = "zero";
  expect_failure(env, "RANK='zero' is not an integer");
  env["RANK"] = "-2";
  expect_failure(env, "RANK='-2' is not an integer");
  env["RANK"] = "0";
  env["WORLD_SIZE"] = "-4";
  expect_failure(env, "WORLD_SIZE='-4'");
}

TEST(Comm, RankNotBelowWorldSize) {
  expect_failure(testing::rank_env(testing::free_port(), 5, 4, kJobEnv), "RANK=5 is not below WORLD_SIZE=4");
}

TEST(Comm, BadBraidVariable) {
  auto env = testing::rank_env(testing::free_port(), 0, 1, kJobEnv);
  env["BRAID_TIMEOUT_S"] = "soon";
  expect_failure(env, "BRAID_TIMEOUT_S='soon'");
}

TEST(Comm, TwoProcessesClaimTheSameRank) {
  int port = testing::free_port();
  expect_all_fail({testing::rank_env(port, 0, 3, kJobEnv), testing::rank_env(port, 1, 3, kJobEnv),
                   testing::rank_env(port, 1, 3, kJobEnv)},
                  "two processes claim RANK=1");
}

TEST(Comm, RanksDisagreeOnWorldSize) {
  int port = testing::free_port();
  expect_all_fail({testing::rank_env(port, 0, 2, kJobEnv), testing::rank_env(port, 1, 3, kJobEnv)},
                  "disagree on WORLD_SIZE");
}

TEST(Comm, UnreachableMasterIsNamedAfterTheTimeout) {
  int port = testing::free_port();
  auto env = testing::rank_env(port, 1, 2, kJobEnv);
  env["BRAID_RENDEZVOUS_TIMEOUT_S"] = "2";
  auto start = std::chrono::steady_clock::now();
  expect_failure(env, "127.0.0.1:" + std::to_string(port));
  EXPECT_LT(std::chrono::steady_clock::now() - start, seconds(20));
}

TEST(Comm, MissingRanksAreNamedAtTheTimeout) {
  int port = testing::free_port();
  std::string bin = testing::binary_from_env("COMM_RANK");
  auto env = testing::rank_env(port, 0, 3, kJobEnv);
  env["BRAID_RENDEZVOUS_TIMEOUT_S"] = "2";
  Subprocess r0({bin, "join"}, env);
  int rc = r0.wait(kBound);
  EXPECT_NE(rc, 0);
  EXPECT_NE(rc, -1) << "hung";
  EXPECT_NE(r0.output().find("for ranks 1, 2"), std::string::npos) << r0.output();
}

TEST(Comm, PortInUse) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(listen(fd, 4), 0);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  int port = ntohs(addr.sin_port);
  expect_failure(testing::rank_env(port, 0, 2, kJobEnv), "MASTER_PORT=" + std::to_string(port));
  close(fd);
}

}  // namespace
}  // namespace braid
