// The shm transport with a real peer process (tests/transport/tcp_peer run with transport=shm,
// started with posix_spawn): messages of 0 B to 64 MiB both ways through both large-message
// paths, a peer killed with SIGKILL while data flows (the survivor fails within the bound, naming
// the rank and its pid, and nothing is left in /dev/shm), and a peer with another secret.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include "common/job_secret.h"
#include "common/log.h"
#include "tests/support/subprocess.h"
#include "tests/transport/peer_process.h"
#include "tests/transport/stderr_capture.h"
#include "tests/transport/transport_link.h"
#include "transport/shm/shm_connection.h"

namespace braid::transport::testing {
namespace {

using namespace std::chrono_literals;
using braid::testing::Subprocess;

constexpr const char* kSecret = "shm process test secret 0123456789abcdef";

std::set<std::string> dev_shm() {
  std::set<std::string> names;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator("/dev/shm", ec)) names.insert(e.path().filename());
  return names;
}

// Parameter: BRAID_SHM_CMA on both ends: "1" (single copy from 64 KiB), "0" (the ring) or "auto"
// (single copy when larger than the ring, the buffer moved onto huge pages first).
class ShmProcessTest : public PeerProcessTest<::testing::TestWithParam<std::string>> {
 protected:
  void SetUp() override {
    TransportOptions o;
    o.env.shm_cma = GetParam() == "1";
    o.env.shm_cma_auto = GetParam() == "auto";
    o.secret = auth::JobSecret::from_text(kSecret, "test").value();
    const Status made = create("shm", o);
    ASSERT_TRUE(made.is_ok()) << made.message();
    listen();
  }
  void start_peer(const std::string& script, const std::vector<std::string>& more = {},
                  const std::string& secret = kSecret) {
    std::vector<std::string> argv = {
        peer_binary("../tcp_peer"), "transport=shm", "role=connect", "addr=" + addr_, "rank=1", "peer=0",
        "script=" + script};
    argv.insert(argv.end(), more.begin(), more.end());
    peer_ = std::make_unique<Subprocess>(
        argv, std::map<std::string, std::string>{{"BRAID_SECRET", secret}, {"BRAID_SHM_CMA", GetParam()}});
  }
  Completion next() {
    auto end = std::chrono::steady_clock::now() + 60s;
    while (q_.empty() && std::chrono::steady_clock::now() < end) EXPECT_TRUE(t_->poll(q_, 100ms).is_ok());
    if (q_.empty()) return Completion{nullptr, 0, false, 0, timeout_error("no completion in 60 s")};
    Completion c = q_.front();
    q_.erase(q_.begin());
    return c;
  }
  std::vector<Completion> q_;
};

TEST_P(ShmProcessTest, EchoesEverySizeFromZeroTo64MiB) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, (size_t{1} << 20) + 3, size_t{64} << 20}) {
    SCOPED_TRACE("bytes " + std::to_string(bytes));
    start_peer("pingpong", {"bytes=" + std::to_string(bytes), "count=3"});
    accept_peer();
    std::vector<char> buf(bytes + 1);
    for (int i = 0; i < 3; ++i) {  // the peer checks what comes back
      ASSERT_TRUE(conn_->post_recv(buf.data(), buf.size(), 1).is_ok());
      Completion r = next();
      ASSERT_TRUE(r.status.is_ok()) << r.status.message() << "\npeer: " << peer_->output();
      ASSERT_EQ(r.bytes, bytes);
      ASSERT_TRUE(conn_->post_send(buf.data(), r.bytes, 2).is_ok());
      Completion s = next();
      ASSERT_TRUE(s.status.is_ok()) << s.status.message();
    }
    EXPECT_EQ(peer_->wait(30s), 0) << peer_->output();
    EXPECT_NE(peer_->output().find("OK"), std::string::npos) << peer_->output();
    conn_.reset();
  }
}

TEST_P(ShmProcessTest, PeerKilledMidTransferFailsReceivesNamingItAndLeavesNoFiles) {
  const auto before = dev_shm();
  start_peer("stream", {"bytes=" + std::to_string(1 << 20)});
  accept_peer();
  std::vector<char> buf(1 << 20);
  auto post = [&] { ASSERT_TRUE(conn_->post_recv(buf.data(), buf.size(), 0).is_ok()); };
  post();
  int received = 0;
  while (received < 5) {  // the stream flows
    Completion c = next();
    ASSERT_TRUE(c.status.is_ok()) << c.status.message() << "\npeer: " << peer_->output();
    ++received;
    post();
  }
  const pid_t pid = peer_->pid();
  Completion failed = kill_peer_until_failure(post);
  const std::string& m = failed.status.message();
  EXPECT_NE(m.find("rank 1 (pid " + std::to_string(pid)), std::string::npos) << m;
  EXPECT_NE(m.find("exited"), std::string::npos) << m;
  EXPECT_NE(m.find("check rank 1"), std::string::npos) << m;
  peer_.reset();
  conn_.reset();
  t_.reset();
  EXPECT_EQ(dev_shm(), before);
}

// 32 MiB messages: with "1" and "auto" each is read straight from the peer's buffer, in pieces,
// so the kill lands while one is being read. Every message that arrived is whole; the one being
// read fails naming the peer.
TEST_P(ShmProcessTest, PeerKilledWhileALargeMessageIsReadFailsNamingItAndNoWrongBytesArrive) {
  const size_t bytes = size_t{32} << 20;
  start_peer("stream", {"bytes=" + std::to_string(bytes)});
  accept_peer();
  std::vector<char> buf(bytes);
  auto post = [&] {
    std::fill(buf.begin(), buf.end(), 0);
    ASSERT_TRUE(conn_->post_recv(buf.data(), buf.size(), 0).is_ok());
  };
  auto whole = [&] { return std::all_of(buf.begin(), buf.end(), [](char c) { return c == 'x'; }); };
  post();
  for (int received = 0; received < 3; ++received) {
    Completion c = next();
    ASSERT_TRUE(c.status.is_ok()) << c.status.message() << "\npeer: " << peer_->output();
    ASSERT_EQ(c.bytes, bytes);
    ASSERT_TRUE(whole());
    post();
  }
  const pid_t pid = peer_->pid();
  Completion failed = kill_peer_until_failure([&] {
    EXPECT_TRUE(whole()) << "a message that completed after the kill";
    post();
  });
  const std::string& m = failed.status.message();
  EXPECT_NE(m.find("shm receive on rank 0 with rank 1 (pid " + std::to_string(pid)), std::string::npos) << m;
  EXPECT_NE(m.find("exited"), std::string::npos) << m;
}

// A peer whose process_vm_readv is refused (seccomp, EPERM, as ptrace rules would) cannot read
// our buffers: our large messages to it go through the ring, its to us still single-copy, and
// we say so once, with the reason.
TEST_P(ShmProcessTest, PeerThatMayNotReadOurMemoryGetsTheRingAndWeSayWhy) {
  if (GetParam() == "0") GTEST_SKIP() << "single copy is off";
  const size_t bytes = size_t{8} << 20;
  start_peer("pingpong", {"bytes=" + std::to_string(bytes), "count=2", "deny_cma=1"});
  set_log_level(LogLevel::info);
  {
    StderrCapture log;
    accept_peer();
    EXPECT_NE(log.text().find("rank 1 cannot read this rank's memory (process_vm_readv: " + std::string(std::strerror(EPERM))),
              std::string::npos)
        << log.text();
  }
  set_log_level(LogLevel::warn);
  auto* shm_conn = dynamic_cast<shm::ShmConnection*>(conn_.get());
  ASSERT_NE(shm_conn, nullptr);
  EXPECT_FALSE(shm_conn->peer_reads_us());
  const std::string d = t_->describe();
  EXPECT_NE(d.find("single copy to 0 of 1 peers only"), std::string::npos) << d;
  EXPECT_NE(d.find(std::strerror(EPERM)), std::string::npos) << d;
  std::vector<char> buf(bytes);
  for (int i = 0; i < 2; ++i) {  // the peer checks what comes back
    ASSERT_TRUE(conn_->post_recv(buf.data(), buf.size(), 1).is_ok());
    Completion r = next();
    ASSERT_TRUE(r.status.is_ok()) << r.status.message() << "\npeer: " << peer_->output();
    ASSERT_TRUE(conn_->post_send(buf.data(), r.bytes, 2).is_ok());
    Completion s = next();
    ASSERT_TRUE(s.status.is_ok()) << s.status.message();
  }
  EXPECT_EQ(shm_conn->cma_sent(), 0u);
  EXPECT_EQ(peer_->wait(30s), 0) << peer_->output();
  EXPECT_NE(peer_->output().find("OK"), std::string::npos) << peer_->output();
}

TEST_P(ShmProcessTest, PeerKilledFailsPendingSends) {
  start_peer("sink", {"bytes=" + std::to_string(1 << 20)});
  accept_peer();
  std::vector<char> buf(1 << 20);
  auto post = [&] { ASSERT_TRUE(conn_->post_send(buf.data(), buf.size(), 0).is_ok()); };
  for (int i = 0; i < 8; ++i) post();
  std::this_thread::sleep_for(200ms);
  Completion failed = kill_peer_until_failure(post);
  EXPECT_NE(failed.status.message().find("shm send"), std::string::npos) << failed.status.message();
}

TEST_P(ShmProcessTest, PeerWithAnotherSecretIsRefused) {
  start_peer("idle", {}, "another secret entirely, 0123456789");
  auto c = t_->accept(PeerIdentity{7, 0, 1}, Deadline::after(3s));
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), ErrorCode::timeout) << c.status().message();
  EXPECT_EQ(peer_->wait(20s), 1) << peer_->output();
  EXPECT_NE(peer_->output().find("could not prove that it knows this job's secret"), std::string::npos)
      << peer_->output();
}

INSTANTIATE_TEST_SUITE_P(LargePath, ShmProcessTest, ::testing::Values("1", "0", "auto"), [](const auto& info) {
  return info.param == "1" ? std::string("cma") : info.param == "0" ? std::string("two_copy") : info.param;
});

}  // namespace
}  // namespace braid::transport::testing
