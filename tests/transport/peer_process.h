// tests/transport/peer_process.h - rank 0 of a two-rank job whose rank 1 is a real process
// (tests/transport/tcp_peer, started with posix_spawn): this side's transport listens, accepts
// the peer and polls on the test's thread. Shared by the tcp and shm process tests.
#pragma once

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <climits>
#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace braid::transport::testing {

// The tcp_peer binary: TCP_PEER_BINARY as meson sets it, else `relative` to this test binary's
// folder (for a test run by hand from the build tree).
inline std::string peer_binary(const std::string& relative = "tcp_peer") {
  if (const char* p = std::getenv("TCP_PEER_BINARY")) return p;
  char self[PATH_MAX] = {};
  ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir(self, n > 0 ? static_cast<size_t>(n) : 0);
  return dir.substr(0, dir.rfind('/')) + "/" + relative;
}

// `Base`: ::testing::Test or a ::testing::TestWithParam<>.
template <typename Base = ::testing::Test>
class PeerProcessTest : public Base {
 protected:
  // Makes this side's transport; the status says why where this build or machine lacks it
  // (the caller skips or fails, as fits).
  Status create(const std::string& name, const TransportOptions& o) {
    auto t = create_transport(name, o);
    if (!t.is_ok()) return t.status();
    t_ = std::move(t).value();
    return Status::ok();
  }
  // Listens on the transport create() made; its address goes to addr_.
  void listen() {
    ASSERT_NE(t_, nullptr);
    auto addr = t_->listen();
    ASSERT_TRUE(addr.is_ok()) << addr.status().message();
    addr_ = addr.value();
  }
  // Accepts the peer process as rank 1 (of communicator 7) into conn_.
  void accept_peer() {
    auto c = t_->accept(PeerIdentity{7, 0, 1}, Deadline::after(std::chrono::seconds(20)));
    ASSERT_TRUE(c.is_ok()) << c.status().message() << "\npeer: " << peer_->output();
    conn_ = std::move(c).value();
  }
  // Kills the peer (SIGKILL) and polls until a completion fails, posting more work through
  // `refill` after each success; that failure must say the peer was lost, within a detection
  // bound. Returns it for the caller's checks of its message.
  Completion kill_peer_until_failure(const std::function<void()>& refill) {
    peer_->kill(SIGKILL);
    const auto killed_at = std::chrono::steady_clock::now();
    Completion failed = until_failure(refill, std::chrono::seconds(10));
    EXPECT_LT(std::chrono::steady_clock::now() - killed_at, std::chrono::seconds(5));  // a detection bound
    EXPECT_EQ(failed.status.code(), ErrorCode::peer_lost) << failed.status.message();
    return failed;
  }
  // Polls until a completion fails and returns it (a default Completion after `limit`); posts
  // more work through `refill` after each success.
  Completion until_failure(const std::function<void()>& refill, std::chrono::seconds limit) {
    const auto end = std::chrono::steady_clock::now() + limit;
    std::vector<Completion> out;
    while (std::chrono::steady_clock::now() < end) {
      out.clear();
      EXPECT_TRUE(t_->poll(out, std::chrono::milliseconds(50)).is_ok());
      for (const Completion& c : out) {
        if (!c.status.is_ok()) return c;
        refill();
      }
    }
    return Completion{};
  }

  std::unique_ptr<Transport> t_;
  std::string addr_;
  std::unique_ptr<braid::testing::Subprocess> peer_;
  std::unique_ptr<Connection> conn_;
};

}  // namespace braid::transport::testing
