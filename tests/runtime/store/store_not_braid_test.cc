// Something that is not a braid store on the store's port (MASTER_PORT taken by a web server, a
// program that answers garbage or nothing) is named as such: a reply that is not a braid hello
// fails the connect at once, not after BRAID_RENDEZVOUS_TIMEOUT_S of retries; a silent one is
// named within the handshake's bound.
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "braid/error.h"
#include "braid/store.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

// A listener on 127.0.0.1, port 0, that gives every connection `reply` (then closes it), or,
// with an empty reply, holds it open and says nothing.
class FakeServer {
 public:
  explicit FakeServer(std::string reply) : reply_(std::move(reply)) {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    EXPECT_EQ(::bind(fd_, reinterpret_cast<sockaddr*>(&a), len), 0);
    EXPECT_EQ(::listen(fd_, 64), 0);
    EXPECT_EQ(::getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len), 0);
    port_ = ntohs(a.sin_port);
    thread_ = std::thread([this] { serve(); });
  }
  ~FakeServer() {
    stop_ = true;
    thread_.join();
    for (int c : held_) ::close(c);
    ::close(fd_);
  }
  uint16_t port() const { return port_; }
  int accepted() const { return accepted_; }

 private:
  void serve() {
    while (!stop_) {
      pollfd p{fd_, POLLIN, 0};
      if (::poll(&p, 1, 20) <= 0) continue;
      int c = ::accept4(fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (c < 0) continue;
      ++accepted_;
      if (reply_.empty()) {
        held_.push_back(c);
        continue;
      }
      (void)!::write(c, reply_.data(), reply_.size());
      ::close(c);
    }
  }
  std::string reply_;
  int fd_ = -1;
  uint16_t port_ = 0;
  std::atomic<bool> stop_{false};
  std::atomic<int> accepted_{0};
  std::vector<int> held_;
  std::thread thread_;
};

// Connects with `timeout`; returns the error's message and how long it took.
std::string connect_error(uint16_t port, std::chrono::milliseconds timeout, Clock::duration* took) {
  const auto start = Clock::now();
  try {
    TcpStore::connect("127.0.0.1", port, {.timeout = timeout, .secret = ""});
  } catch (const Error& e) {
    *took = Clock::now() - start;
    return e.what();
  }
  *took = Clock::now() - start;
  return "connected";
}

TEST(StoreNotBraid, AnHttpServerOnThePortFailsTheConnectAtOnceNamingItsAddress) {
  FakeServer http("HTTP/1.1 400 Bad Request\r\n\r\n");
  Clock::duration took{};
  const std::string what = connect_error(http.port(), 30s, &took);
  const std::string where = "127.0.0.1:" + std::to_string(http.port());
  EXPECT_NE(what.find(where), std::string::npos) << what;
  EXPECT_NE(what.find("not a braid store"), std::string::npos) << what;
  EXPECT_NE(what.find("HTTP/1.1 400 Bad Request"), std::string::npos) << what;  // what it said
  EXPECT_NE(what.find("MASTER_PORT"), std::string::npos) << what;
  // Detected, not retried until the 30 s timeout.
  EXPECT_LT(took, 10s) << what;
  EXPECT_EQ(http.accepted(), 1) << what;
}

TEST(StoreNotBraid, AProgramThatSendsAFewBytesAndClosesIsNamedToo) {
  FakeServer chatter("hi\n");
  Clock::duration took{};
  const std::string what = connect_error(chatter.port(), 30s, &took);
  EXPECT_NE(what.find("127.0.0.1:" + std::to_string(chatter.port())), std::string::npos) << what;
  EXPECT_NE(what.find("not a braid store"), std::string::npos) << what;
  EXPECT_LT(took, 10s) << what;
}

TEST(StoreNotBraid, ASilentProgramIsNamedWithinTheHandshakesBound) {
  FakeServer silent("");
  // A braid store that is only slow is tried again until the timeout; whatever it is, the
  // warning comes after one handshake's bound (5 s) and the error names the suspect.
  ::testing::internal::CaptureStderr();
  Clock::duration took{};
  const std::string what = connect_error(silent.port(), 7s, &took);
  const std::string log = ::testing::internal::GetCapturedStderr();
  const std::string where = "127.0.0.1:" + std::to_string(silent.port());
  EXPECT_NE(log.find(where), std::string::npos) << log;
  EXPECT_NE(log.find("sent nothing"), std::string::npos) << log;
  EXPECT_NE(what.find(where), std::string::npos) << what;
  EXPECT_NE(what.find("not a braid store"), std::string::npos) << what;
  EXPECT_LT(took, 7s + 5s) << what;
}

}  // namespace
}  // namespace braid
