// PeerLinks over connections of two transports at once (tcp over io_uring, and tcp over epoll
// or shm): one poll sleeps on both and wakes for whichever has news, or for wake(). The detection
// bounds (seconds, against a 30 s timeout) only tell "woke" from "slept to the end". And the
// spin the communicator settles on after connecting reaches each kind of transport.
#include "runtime/links/peer_links.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "common/spin.h"
#include "tests/transport/transport_link.h"

namespace braid {
namespace {

using transport::testing::Link;
using transport::testing::loopback_options;
using transport::testing::make_link;
using Clock = std::chrono::steady_clock;

constexpr auto kLongWait = std::chrono::seconds(30);
constexpr auto kBound = std::chrono::seconds(10);

class TwoTransports : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    Status a = make_link("tcp", loopback_options(), loopback_options(), uring_);
    if (!a.is_ok()) GTEST_SKIP() << "the io_uring engine cannot be set up here: " << a.message();
    Status b = make_link(GetParam(), loopback_options(), loopback_options(), other_);
    if (!b.is_ok() && GetParam() == "shm") GTEST_SKIP() << "shm cannot be set up here: " << b.message();
    ASSERT_TRUE(b.is_ok()) << b.message();
    // Rank 0 holds the accepting ends: peer 1 over io_uring, peer 2 over the other transport.
    std::vector<std::unique_ptr<transport::Transport>> transports;
    transports.push_back(std::move(uring_.a));
    transports.push_back(std::move(other_.a));
    std::vector<std::unique_ptr<transport::Connection>> peers(3);
    peers[1] = std::move(uring_.ca);
    peers[2] = std::move(other_.ca);
    links_ = std::make_unique<PeerLinks>(0, std::move(transports), std::move(peers), std::vector<size_t>{0, 0, 1});
  }
  void TearDown() override {
    links_.reset();
    uring_.cb.reset();
    other_.cb.reset();
  }

  // `link`'s far end sends 8 bytes after a short delay, on its own thread (which then owns
  // that transport), and drives its send to completion.
  static std::thread send_later(Link& link, const char* bytes) {
    return std::thread([&link, bytes] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      ASSERT_TRUE(link.cb->post_send(bytes, 8, 99).is_ok());
      // Only the far end is polled here: the near one belongs to the PeerLinks.
      const auto end = Clock::now() + std::chrono::seconds(20);
      while (link.done_b.empty() && Clock::now() < end) {
        ASSERT_TRUE(link.b->poll(link.done_b, std::chrono::milliseconds(10)).is_ok());
      }
      EXPECT_FALSE(link.done_b.empty()) << "the send did not complete";
    });
  }

  // Polls once with a long timeout; returns the completions and how long it slept.
  std::vector<transport::Completion> poll_once(Clock::duration* took) {
    std::vector<transport::Completion> out;
    const auto start = Clock::now();
    EXPECT_TRUE(links_->poll(out, kLongWait).is_ok());
    *took = Clock::now() - start;
    return out;
  }

  Link uring_, other_;  // other_: tcp-poll or shm
  std::unique_ptr<PeerLinks> links_;
};

TEST_P(TwoTransports, OnePollWakesForEitherTransport) {
  EXPECT_EQ(links_->transport_name(1), "tcp (io_uring)");
  EXPECT_EQ(links_->transport_name(2), GetParam() == "shm" ? "shm" : "tcp (epoll)");
  EXPECT_EQ(links_->transport_name(0), "");
  char got1[8] = {}, got2[8] = {};
  ASSERT_TRUE(links_->peers()[1]->post_recv(got1, sizeof got1, 1).is_ok());
  ASSERT_TRUE(links_->peers()[2]->post_recv(got2, sizeof got2, 2).is_ok());
  for (int peer : {2, 1}) {
    Link& link = peer == 1 ? uring_ : other_;
    std::thread sender = send_later(link, peer == 1 ? "io_uring" : "another");
    std::vector<transport::Completion> out;
    Clock::duration took{};
    // Anything else the transports report first (nothing, here) is polled past, within the bound.
    const auto start = Clock::now();
    while (out.empty() && Clock::now() - start < kBound) out = poll_once(&took);
    sender.join();
    ASSERT_EQ(out.size(), 1u) << "peer " << peer;
    EXPECT_EQ(out[0].cookie, static_cast<uint64_t>(peer));
    EXPECT_TRUE(out[0].status.is_ok()) << out[0].status.message();
    EXPECT_LT(took, kBound) << "the poll slept through peer " << peer << "'s message";
  }
  EXPECT_EQ(std::string(got1, 8), "io_uring");
  EXPECT_EQ(std::string(got2, 7), "another");
  // The narrowest of the two connections'.
  EXPECT_EQ(links_->capabilities().max_in_flight,
            std::min(links_->peers()[1]->capabilities().max_in_flight, links_->peers()[2]->capabilities().max_in_flight));
  // Each connection says what its transport can do, not the seam's default.
  for (int peer : {1, 2}) {
    EXPECT_NE(links_->peers()[peer]->capabilities().max_in_flight, transport::Capabilities{}.max_in_flight) << peer;
  }
}

TEST_P(TwoTransports, WakeEndsTheSleepOnBoth) {
  std::thread waker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    links_->wake();
  });
  Clock::duration took{};
  std::vector<transport::Completion> out = poll_once(&took);
  waker.join();
  EXPECT_TRUE(out.empty());
  EXPECT_LT(took, kBound) << "wake() did not end the poll";
}

INSTANTIATE_TEST_SUITE_P(Mixes, TwoTransports, ::testing::Values("tcp-poll", "shm"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param == "shm" ? std::string("WithShm") : std::string("WithEpoll");
                         });

// The communicator decides the spin after the links cards are read, when the transports are
// already up (runtime/links/spin_policy.h); set_spin_us() must reach them. Told that this host runs
// more ranks than CPUs, every spin pass yields and is counted (common/spin.h), so a poll that
// finds nothing shows whether its transport spun: not at 0, and at a spin longer than the poll.
class OneTransport : public ::testing::TestWithParam<std::string> {};

TEST_P(OneTransport, SetSpinReachesTheTransport) {
  Link link;
  Status made = make_link(GetParam(), loopback_options(), loopback_options(), link);
  if (!made.is_ok() && GetParam() != "tcp-poll") GTEST_SKIP() << GetParam() << " cannot be set up here: " << made.message();
  ASSERT_TRUE(made.is_ok()) << made.message();
  std::vector<std::unique_ptr<transport::Transport>> transports;
  transports.push_back(std::move(link.a));
  std::vector<std::unique_ptr<transport::Connection>> peers(2);
  peers[1] = std::move(link.ca);
  auto links = std::make_unique<PeerLinks>(0, std::move(transports), std::move(peers), std::vector<size_t>{0, 0});
  set_ranks_on_node(1 << 20);
  std::vector<transport::Completion> out;

  links->set_spin_us(0);
  long before = spin_yields();
  ASSERT_TRUE(links->poll(out, std::chrono::milliseconds(20)).is_ok());
  EXPECT_TRUE(out.empty());
  EXPECT_EQ(spin_yields(), before) << GetParam() << " spun after set_spin_us(0)";

  // A tcp peer on this process's CPUs turns spinning off whatever the setting (spin_allowed).
  if (cpu_sharing_peers() > 0) GTEST_SKIP() << "the loopback peer shares this process's CPUs: tcp never spins here";
  links->set_spin_us(10'000'000);
  before = spin_yields();
  ASSERT_TRUE(links->poll(out, std::chrono::milliseconds(20)).is_ok());
  EXPECT_TRUE(out.empty());
  EXPECT_GT(spin_yields(), before) << GetParam() << " did not spin after set_spin_us(10 s)";
  links.reset();
  link.cb.reset();
}

INSTANTIATE_TEST_SUITE_P(Each, OneTransport, ::testing::Values("shm", "tcp", "tcp-poll"),
                         [](const ::testing::TestParamInfo<std::string>& p) {
                           return p.param == "tcp-poll" ? std::string("TcpPoll") : p.param;
                         });

}  // namespace
}  // namespace braid
