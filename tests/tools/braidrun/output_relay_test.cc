#include "tools/braidrun/output_relay.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <string>

#include "tools/braidrun/rank_env.h"
#include "tools/braidrun/rank_exit.h"

namespace braid::braidrun {
namespace {

// Both ends of a pipe; read() collects what was written so far.
struct Pipe {
  int fds[2];
  Pipe() {
    EXPECT_EQ(pipe2(fds, O_NONBLOCK | O_CLOEXEC), 0);
  }
  ~Pipe() { close(fds[0]), close(fds[1]); }
  std::string read_all() {
    std::string out;
    char buf[4096];
    ssize_t n;
    while ((n = ::read(fds[0], buf, sizeof buf)) > 0) out.append(buf, static_cast<size_t>(n));
    return out;
  }
};

TEST(RankOutput, PrefixesWholeLinesOnly) {
  Pipe out, err;
  RankOutput o(3, true, RelayTargets{out.fds[1], err.fds[1]}, -1);
  o.feed(StreamKind::out, "hel", 3);
  EXPECT_EQ(out.read_all(), "");  // half a line waits
  o.feed(StreamKind::out, "lo\nwor", 6);
  EXPECT_EQ(out.read_all(), "[rank 3] hello\n");
  o.feed(StreamKind::err, "oops\n", 5);
  EXPECT_EQ(err.read_all(), "[rank 3] oops\n");
  o.finish(StreamKind::out);
  EXPECT_EQ(out.read_all(), "[rank 3] wor\n");
}

TEST(RankOutput, NoPrefixAndLogFile) {
  Pipe out, err, log;
  RankOutput o(0, false, RelayTargets{out.fds[1], err.fds[1]}, dup(log.fds[1]));
  o.feed(StreamKind::out, "a\n\nb\n", 5);
  EXPECT_EQ(out.read_all(), "a\n\nb\n");
  EXPECT_EQ(log.read_all(), "a\n\nb\n");
}

TEST(RankOutput, KeepsTheLastLines) {
  Pipe out, err;
  RankOutput o(1, true, RelayTargets{out.fds[1], err.fds[1]}, -1);
  for (int i = 0; i < 30; ++i) {
    std::string line = "line " + std::to_string(i) + "\n";
    o.feed(i % 2 ? StreamKind::err : StreamKind::out, line.data(), line.size());
  }
  auto tail = o.tail();
  ASSERT_EQ(tail.size(), RankOutput::kTailLines);
  EXPECT_EQ(tail.front(), "line 10");
  EXPECT_EQ(tail.back(), "line 29");
}

TEST(RankOutput, EndlessLineIsCut) {
  Pipe out, err;
  ASSERT_GE(fcntl(out.fds[1], F_SETPIPE_SZ, 1 << 20), 0);
  RankOutput o(0, false, RelayTargets{out.fds[1], err.fds[1]}, -1);
  std::string big(RankOutput::kMaxLineBytes + 10, 'x');
  o.feed(StreamKind::out, big.data(), big.size());
  std::string got = out.read_all();
  EXPECT_EQ(got.size(), RankOutput::kMaxLineBytes + 1);
  EXPECT_EQ(std::count(got.begin(), got.end(), '\n'), 1);
}

TEST(RankExit, Describes) {
  EXPECT_EQ(describe_wait_status(3 << 8), "exit code 3");
  EXPECT_EQ(exit_code_of(3 << 8), 3);
  EXPECT_EQ(describe_wait_status(SIGSEGV), "killed by SIGSEGV (signal 11)");
  EXPECT_EQ(exit_code_of(SIGKILL), 137);
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
}

TEST(RankEnv, SetsTorchrunVariablesOverBase) {
  RankIdentity id{.rank = 5, .local_rank = 1, .world_size = 8, .local_world_size = 4, .node_rank = 1,
                  .nnodes = 2, .master_addr = "10.0.0.1", .master_port = 1234, .store_port = 1235, .run_id = "job"};
  auto env = build_rank_env({"PATH=/bin", "RANK=99", "RANKING=keep"}, id);
  auto has = [&](const std::string& kv) { return std::find(env.begin(), env.end(), kv) != env.end(); };
  for (const char* kv : {"PATH=/bin", "RANKING=keep", "RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=8", "LOCAL_WORLD_SIZE=4",
                         "GROUP_RANK=1", "GROUP_WORLD_SIZE=2", "ROLE_RANK=5", "ROLE_WORLD_SIZE=8",
                         "MASTER_ADDR=10.0.0.1", "MASTER_PORT=1234", "TORCHELASTIC_RUN_ID=job", "BRAID_AGENT_STORE=1",
                         "BRAID_STORE_PORT=1235"}) {
    EXPECT_TRUE(has(kv)) << kv;
  }
  EXPECT_FALSE(has("RANK=99"));
}

}  // namespace
}  // namespace braid::braidrun
