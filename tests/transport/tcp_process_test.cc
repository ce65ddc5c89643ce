// Transport tests with real peer processes (tcp_peer, started with posix_spawn): a peer killed
// with SIGKILL, io_uring denied by seccomp, and (as root) peers in network namespaces joined by
// a veth link, one of which goes silent.
#include <gtest/gtest.h>
#include <sched.h>
#include <unistd.h>

#include <cstdlib>
#include <map>
#include <optional>
#include <sstream>
#include <thread>

#include "braid_config.h"
#include "common/job_secret.h"
#include "tests/support/subprocess.h"
#include "tests/support/two_hosts.h"
#include "tests/transport/peer_process.h"
#include "tests/transport/transport_link.h"

namespace braid::transport::testing {
namespace {

using namespace std::chrono_literals;
using braid::testing::usable_cpu;
using braid::testing::Subprocess;
using braid::testing::TwoHosts;

// The first output line starting with `prefix` (without it), waiting up to `limit`.
std::optional<std::string> wait_line(Subprocess& p, const std::string& prefix, std::chrono::milliseconds limit) {
  auto end = std::chrono::steady_clock::now() + limit;
  for (;;) {
    std::istringstream in(p.output());
    for (std::string line; std::getline(in, line);) {
      if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
    }
    if (std::chrono::steady_clock::now() > end) return std::nullopt;
    std::this_thread::sleep_for(20ms);
  }
}

class ProcessTest : public PeerProcessTest<::testing::TestWithParam<std::string>> {
 protected:
  void SetUp() override {
    const Status made = create(GetParam(), loopback_options());
    if (!made.is_ok()) GTEST_SKIP() << made.message();
    listen();
  }
  // Starts a tcp_peer that connects to us as rank 1 and runs `script`; accepts it.
  void start_peer(const std::string& script) {
    peer_ = std::make_unique<Subprocess>(std::vector<std::string>{
        peer_binary(), "transport=" + GetParam(), "role=connect", "addr=" + addr_, "rank=1", "peer=0",
        "script=" + script});
    accept_peer();
  }
};

TEST_P(ProcessTest, PeerKilledMidTransferFailsReceivesAsPeerLost) {
  start_peer("stream");
  std::vector<char> buf(1 << 20);
  int received = 0;
  auto post = [&] { ASSERT_TRUE(conn_->post_recv(buf.data(), buf.size(), 0).is_ok()); };
  post();
  std::vector<Completion> out;
  auto end = std::chrono::steady_clock::now() + 20s;
  while (received < 5 && std::chrono::steady_clock::now() < end) {  // the stream is flowing
    out.clear();
    ASSERT_TRUE(t_->poll(out, 50ms).is_ok());
    for (const auto& c : out) {
      ASSERT_TRUE(c.status.is_ok()) << c.status.message();
      ++received;
      post();
    }
  }
  ASSERT_EQ(received, 5) << peer_->output();
  Completion failed = kill_peer_until_failure(post);
  EXPECT_NE(failed.status.message().find("rank 1 (127.0.0.1:"), std::string::npos) << failed.status.message();
  EXPECT_NE(failed.status.message().find("during a receive"), std::string::npos) << failed.status.message();
}

TEST_P(ProcessTest, PeerKilledFailsPendingSendsAsPeerLost) {
  start_peer("sink");
  std::vector<char> buf(1 << 20);
  auto post = [&] { ASSERT_TRUE(conn_->post_send(buf.data(), buf.size(), 0).is_ok()); };
  for (int i = 0; i < 4; ++i) post();
  std::this_thread::sleep_for(200ms);
  Completion failed = kill_peer_until_failure(post);
  EXPECT_NE(failed.status.message().find("rank 1 (127.0.0.1:"), std::string::npos) << failed.status.message();
}

INSTANTIATE_TEST_SUITE_P(Engines, ProcessTest, ::testing::Values("tcp", "tcp-poll"), [](const auto& info) {
  return std::string(info.param == "tcp" ? "io_uring" : "epoll");
});

// Accepts rank 1 on `t` and echoes the `count` messages of `bytes` its pingpong script sends.
void echo_for(Transport& t, Subprocess& peer, int count, size_t bytes) {
  auto c = t.accept(PeerIdentity{7, 0, 1}, Deadline::after(20s));
  ASSERT_TRUE(c.is_ok()) << c.status().message() << "\n" << peer.output();
  std::vector<char> buf(bytes);
  std::vector<Completion> out;
  for (int i = 0; i < count; ++i) {  // echo what the peer sends
    ASSERT_TRUE(c.value()->post_recv(buf.data(), buf.size(), 0).is_ok());
    out.clear();
    auto end = std::chrono::steady_clock::now() + 20s;
    while (out.empty() && std::chrono::steady_clock::now() < end) ASSERT_TRUE(t.poll(out, 50ms).is_ok());
    ASSERT_EQ(out.size(), 1u) << peer.output();
    ASSERT_TRUE(out[0].status.is_ok()) << out[0].status.message();
    ASSERT_TRUE(c.value()->post_send(buf.data(), out[0].bytes, 1).is_ok());
    out.clear();
    while (out.empty() && std::chrono::steady_clock::now() < end) ASSERT_TRUE(t.poll(out, 50ms).is_ok());
  }
  EXPECT_EQ(peer.wait(20s), 0) << peer.output();
}

// Rank 0 on tcp-poll, for a peer process that connects and runs the pingpong script.
class PingpongTest : public PeerProcessTest<> {
 protected:
  // Listens with `o`, starts a tcp_peer as rank 1 with `args` (and `env`) that sends `count`
  // messages of `bytes`, echoes them, and checks that it exits with status 0; its output.
  std::string pingpong(std::vector<std::string> args, int count, size_t bytes,
                       const std::map<std::string, std::string>& env = {},
                       const TransportOptions& o = loopback_options()) {
    const Status made = create("tcp-poll", o);
    EXPECT_TRUE(made.is_ok()) << made.message();
    if (made.is_ok()) listen();
    if (HasFatalFailure() || !made.is_ok()) return "";
    args.insert(args.begin(), peer_binary());
    args.insert(args.end(), {"role=connect", "addr=" + addr_, "script=pingpong", "count=" + std::to_string(count),
                             "bytes=" + std::to_string(bytes)});
    Subprocess peer(args, env);
    echo_for(*t_, peer, count, bytes);
    return peer.output();
  }
};
using Fallback = PingpongTest;
using Secret = PingpongTest;

constexpr const char* kSecret = "a secret braidrun would make";

// Loopback options whose handshakes prove kSecret, as a launcher hands it to a rank.
TransportOptions with_secret() {
  TransportOptions o = loopback_options();
  auto s = auth::JobSecret::from_text(kSecret, "BRAID_SECRET");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  if (s.is_ok()) o.secret = s.value();
  return o;
}

TEST_F(Fallback, AutoUsesEpollWhenSeccompDeniesIoUring) {
  const std::string out = pingpong({"deny_io_uring=1", "transport=auto"}, 5, 300001);
  EXPECT_NE(out.find("TRANSPORT tcp (epoll)"), std::string::npos) << out;
  EXPECT_NE(out.find("io_uring is unavailable"), std::string::npos) << out;
  EXPECT_NE(out.find("OK"), std::string::npos) << out;
  // The warning of auto says what happened and how to choose it quietly; it used to say that
  // "BRAID_TRANSPORT=tcp needs io_uring", which the user never set.
  EXPECT_NE(out.find("WARN: transport: BRAID_TRANSPORT=auto fell back to tcp over epoll, because io_uring "
                     "is unavailable here ("),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("set BRAID_TRANSPORT=tcp-poll to choose it and silence this warning"), std::string::npos) << out;
  EXPECT_EQ(out.find("BRAID_TRANSPORT=tcp needs"), std::string::npos) << out;
}

// Where epoll_pwait2 is missing (kernels before 5.11, valgrind), the fallback engine waits in
// epoll_pwait instead; it used to fail its first wait with ENOSYS.
TEST_F(Fallback, EpollWorksWithoutEpollPwait2) {
  const std::string out = pingpong({"deny_io_uring=1", "deny_epoll_pwait2=1", "transport=auto"}, 20, 300001);
  EXPECT_NE(out.find("TRANSPORT tcp (epoll)"), std::string::npos) << out;
  EXPECT_NE(out.find("EPOLL_PWAIT2 no"), std::string::npos) << out;
  EXPECT_NE(out.find("OK"), std::string::npos) << out;
}

// Ranks in separate processes: the secret travels the way a launcher hands it over
// (BRAID_SECRET here); without any, they connect and each says once that the job is open.
TEST_F(Secret, ProcessesWithTheSameSecretConnect) {
  const std::string out =
      pingpong({"transport=auto"}, 3, 1000, {{"BRAID_SECRET", kSecret}, {"BRAID_SECRET_FILE", "\x01"}}, with_secret());
  EXPECT_EQ(out.find("no secret"), std::string::npos) << out;
}

TEST_F(Secret, ProcessesWithoutASecretConnectAndSaySoOnce) {
  const std::string out =
      pingpong({"transport=auto"}, 3, 1000, {{"BRAID_SECRET", "\x01"}, {"BRAID_SECRET_FILE", "\x01"}});
  const size_t first = out.find("rank 1: this job has no secret");
  EXPECT_NE(first, std::string::npos) << out;
  EXPECT_EQ(out.find("this job has no secret", first + 30), std::string::npos) << "said more than once:\n" << out;
}

TEST_F(Secret, AProcessWithoutTheSecretIsRefusedClearly) {
  const Status made = create("tcp-poll", with_secret());
  ASSERT_TRUE(made.is_ok()) << made.message();
  ASSERT_NO_FATAL_FAILURE(listen());
  Subprocess peer({peer_binary(), "transport=auto", "role=connect", "addr=" + addr_, "script=pingpong"},
                  {{"BRAID_SECRET", "\x01"}, {"BRAID_SECRET_FILE", "\x01"}});
  auto c = t_->accept(PeerIdentity{7, 0, 1}, Deadline::after(3s));
  EXPECT_EQ(c.status().code(), ErrorCode::timeout) << c.status().message();
  EXPECT_EQ(peer.wait(20s), 1) << peer.output();
  EXPECT_NE(peer.output().find("ERROR rank 1 connecting to rank 0 at " + addr_ + ": rank 0 could not prove"),
            std::string::npos)
      << peer.output();
  EXPECT_NE(peer.output().find("BRAID_SECRET"), std::string::npos) << peer.output();
}

TEST_F(Fallback, TcpDemandsIoUringAndSaysWhy) {
  Subprocess peer({peer_binary(), "deny_io_uring=1", "transport=tcp", "role=listen"});
  EXPECT_EQ(peer.wait(20s), 1) << peer.output();
#if BRAID_HAVE_LIBURING
  EXPECT_NE(peer.output().find("ERROR BRAID_TRANSPORT=tcp needs io_uring"), std::string::npos) << peer.output();
#else  // compiled out: the error says so instead
  EXPECT_NE(peer.output().find("built without liburing"), std::string::npos) << peer.output();
#endif
  EXPECT_NE(peer.output().find("tcp-poll"), std::string::npos) << peer.output();
}

// Two rank processes started as `taskset -c N` starts them: pinned to one CPU, each must learn
// from the handshake (the acceptor) or its answer (the connector) that its peer shares that
// CPU, so neither spins while the other needs the CPU to answer; pinned to two CPUs, neither.
class PinnedPairTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    auto t = create_transport(GetParam(), loopback_options());
    if (!t.is_ok()) GTEST_SKIP() << t.status().message();
  }
  // The SHARED_CPU_PEERS line of the listening and of the connecting process.
  std::pair<std::string, std::string> run_pair(int listen_cpu, int connect_cpu) {
    Subprocess a({peer_binary(), "transport=" + GetParam(), "role=listen", "rank=0", "peer=1",
                  "cpu=" + std::to_string(listen_cpu), "script=echo", "count=200", "bytes=8"});
    std::string addr = wait_line(a, "ADDR ", 20s).value_or("");
    EXPECT_FALSE(addr.empty()) << a.output();
    Subprocess b({peer_binary(), "transport=" + GetParam(), "role=connect", "addr=" + addr, "rank=1", "peer=0",
                  "cpu=" + std::to_string(connect_cpu), "script=pingpong", "count=200", "bytes=8"});
    EXPECT_EQ(b.wait(60s), 0) << b.output();
    EXPECT_EQ(a.wait(20s), 0) << a.output();
    return {wait_line(a, "SHARED_CPU_PEERS ", 1s).value_or("missing: " + a.output()),
            wait_line(b, "SHARED_CPU_PEERS ", 1s).value_or("missing: " + b.output())};
  }
};

TEST_P(PinnedPairTest, OnOneCpuBothEndsStopSpinning) {
  auto [listener, connector] = run_pair(usable_cpu(0), usable_cpu(0));
  EXPECT_EQ(listener, "1");
  EXPECT_EQ(connector, "1");
}

TEST_P(PinnedPairTest, OnTwoCpusNeitherDoes) {
  if (usable_cpu(1) < 0) GTEST_SKIP() << "needs two CPUs; this process may use one";
  auto [listener, connector] = run_pair(usable_cpu(0), usable_cpu(1));
  EXPECT_EQ(listener, "0");
  EXPECT_EQ(connector, "0");
}

INSTANTIATE_TEST_SUITE_P(Engines, PinnedPairTest, ::testing::Values("tcp", "tcp-poll"), [](const auto& info) {
  return std::string(info.param == "tcp" ? "io_uring" : "epoll");
});

class NamespaceTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    if (geteuid() != 0) GTEST_SKIP() << "network namespaces need root";
    auto t = create_transport(GetParam(), loopback_options());
    if (!t.is_ok()) GTEST_SKIP() << t.status().message();
    ns_ = std::make_unique<TwoHosts>("brdt", "10.213.0");
    if (!ns_->error().empty()) GTEST_SKIP() << ns_->error();
  }
  // Runs `argv` inside `host`.
  std::vector<std::string> in(int host, const std::vector<std::string>& argv) const {
    std::vector<std::string> all = ns_->exec_in(host);
    all.insert(all.end(), argv.begin(), argv.end());
    return all;
  }
  std::unique_ptr<TwoHosts> ns_;
};

TEST_P(NamespaceTest, TwoHostsExchangeMessages) {
  Subprocess a(in(0, {peer_binary(), "transport=" + GetParam(), "role=listen", "host=10.213.0.1", "rank=0", "peer=1",
                      "script=echo", "count=8", "bytes=4000037"}));
  std::string addr = wait_line(a, "ADDR ", 20s).value_or("");
  ASSERT_FALSE(addr.empty()) << a.output();
  Subprocess b(in(1, {peer_binary(), "transport=" + GetParam(), "role=connect", "addr=" + addr, "rank=1", "peer=0",
                      "script=pingpong", "count=8", "bytes=4000037"}));
  EXPECT_EQ(b.wait(60s), 0) << b.output();
  EXPECT_EQ(a.wait(20s), 0) << a.output();
  EXPECT_NE(b.output().find("OK"), std::string::npos) << b.output();
}

TEST_P(NamespaceTest, SilencedPeerIsDetectedWithinThePeerTimeout) {
  constexpr int kPeerTimeoutS = 2;
  Subprocess a(in(0, {peer_binary(), "transport=" + GetParam(), "role=listen", "host=10.213.0.1", "rank=0", "peer=1",
                      "script=wait", "peer_timeout=" + std::to_string(kPeerTimeoutS)}));
  std::string addr = wait_line(a, "ADDR ", 20s).value_or("");
  ASSERT_FALSE(addr.empty()) << a.output();
  Subprocess b(in(1, {peer_binary(), "transport=" + GetParam(), "role=connect", "addr=" + addr, "rank=1", "peer=0",
                      "script=idle", "peer_timeout=" + std::to_string(kPeerTimeoutS)}));
  ASSERT_TRUE(wait_line(a, "WAITING", 20s).has_value()) << a.output();
  ASSERT_TRUE(ns_->link_down(1));
  auto silenced_at = std::chrono::steady_clock::now();
  std::string lost = wait_line(a, "LOST ", std::chrono::seconds(kPeerTimeoutS + 10)).value_or("");
  auto took = std::chrono::steady_clock::now() - silenced_at;
  ASSERT_FALSE(lost.empty()) << a.output();
  EXPECT_LT(took, std::chrono::seconds(kPeerTimeoutS + 4)) << lost;
  EXPECT_EQ(lost.rfind("peer lost", 0), 0u) << lost;
  EXPECT_NE(lost.find("rank 1 (10.213.0.2:"), std::string::npos) << lost;
  EXPECT_NE(lost.find("went silent"), std::string::npos) << lost;
}

INSTANTIATE_TEST_SUITE_P(Engines, NamespaceTest, ::testing::Values("tcp", "tcp-poll"),
                         [](const auto& info) { return std::string(info.param == "tcp" ? "io_uring" : "epoll"); });

}  // namespace
}  // namespace braid::transport::testing
