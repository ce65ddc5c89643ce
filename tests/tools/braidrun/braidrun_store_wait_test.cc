// braidrun waiting for a job's store that does not answer: it says what it waits for and where,
// every ~10 s, and SIGTERM/SIGINT end it at once (they used to be ignored while a store call
// waited for a silent store, and nothing was printed until the rendezvous timeout).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>

#include "tests/support/subprocess.h"
#include "tests/tools/braidrun/braidrun_runner.h"

namespace braid::braidrun::testing {
namespace {

using Clock = std::chrono::steady_clock;
using braid::testing::Subprocess;
using std::chrono::seconds;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// A port on 127.0.0.1 that completes TCP handshakes (the kernel's backlog) but never reads nor
// answers: a store whose process is stopped looks exactly like this.
class SilentListener {
 public:
  SilentListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    if (bind(fd_, reinterpret_cast<sockaddr*>(&a), len) != 0 || listen(fd_, 64) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      return;
    }
    port_ = ntohs(a.sin_port);
  }
  ~SilentListener() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Starts braidrun as node 1 of 2 against 127.0.0.1:port, waits for its first progress line, then
// sends `sig`: braidrun must end within a few seconds with 128+sig, saying why and where.
void expect_progress_then_stop(int port, int sig, const std::string& waiting_for) {
  Subprocess run({braidrun_path(), "--nnodes", "2", "--node-rank", "1", "--nproc-per-node", "1", "--rdzv-endpoint",
                  "127.0.0.1:" + std::to_string(port), "--rdzv-timeout-s", "300", "/bin/true"},
                 {});
  const auto deadline = Clock::now() + seconds(25);
  while (!has(run.output(), "still waiting for") && Clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  const std::string before = run.output();
  EXPECT_TRUE(has(before, "braidrun: still waiting for " + waiting_for)) << before;
  EXPECT_TRUE(has(before, "127.0.0.1:" + std::to_string(port))) << before;
  run.kill(sig);
  const int rc = run.wait(seconds(5));
  ASSERT_NE(rc, -1) << "braidrun still running 5 s after signal " << sig << ":\n" << run.output();
  EXPECT_EQ(rc, 128 + sig) << run.output();
  EXPECT_TRUE(has(run.output(), "interrupted by SIG")) << run.output();
}

TEST(BraidrunStoreWait, SilentStoreSigtermEndsItAndProgressIsPrinted) {
  SilentListener store;
  ASSERT_NE(store.port(), 0);
  expect_progress_then_stop(store.port(), SIGTERM, "the job's store at 127.0.0.1:");
}

TEST(BraidrunStoreWait, RefusedStoreSigintEndsItAndProgressIsPrinted) {
  const int port = braid::testing::free_port();  // nothing listens there
  expect_progress_then_stop(port, SIGINT, "the job's store at 127.0.0.1:" + std::to_string(port) + " to accept a connection");
}

}  // namespace
}  // namespace braid::braidrun::testing
