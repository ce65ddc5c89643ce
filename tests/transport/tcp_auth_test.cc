// Whom a tcp transport admits: only ranks that prove they know the job's secret
// (transport/common/handshake_format.h), never a stranger in a rank's place, and never itself.
#include <gtest/gtest.h>

#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <thread>

#include "common/job_secret.h"
#include "tests/transport/stderr_capture.h"
#include "tests/transport/transport_link.h"
#include "transport/common/socket_address.h"
#include "transport/tcp/wire_format.h"

namespace braid::transport::testing {
namespace {

using namespace std::chrono_literals;
using transport::Handshake;

auth::JobSecret secret(const std::string& text) {
  auto s = auth::JobSecret::from_text(text, "test");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? s.value() : auth::JobSecret();
}

TransportOptions with(const auth::JobSecret& s) {
  TransportOptions o = loopback_options();
  o.secret = s;
  return o;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// A raw socket that plays someone who is not a rank of the job but knows its comm_id and ranks.
class Stranger {
 public:
  explicit Stranger(const std::string& address) {
    auto to = transport::SocketAddress::parse(address);
    EXPECT_TRUE(to.is_ok());
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    EXPECT_EQ(::connect(fd_, to.value().get(), to.value().length), 0);
    timeval tv{10, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
  }
  ~Stranger() { ::close(fd_); }
  Stranger(const Stranger&) = delete;
  Stranger& operator=(const Stranger&) = delete;

  // A hello as rank `from` of communicator 7 would send it to rank `to`.
  void hello(int from, int to) {
    hello_.comm_id = 7, hello_.from_rank = from, hello_.to_rank = to;
    hello_.nonce = auth::fresh_nonce();
    send_bytes(&hello_, sizeof hello_);
  }
  void send_bytes(const void* p, size_t n) { EXPECT_EQ(::send(fd_, p, n, MSG_NOSIGNAL), static_cast<ssize_t>(n)); }
  // Reads the acceptor's answer and sends the proof `s` makes for it.
  bool prove_with(const auth::JobSecret& s) {
    unsigned char answer[transport::kAnswerBytes];
    size_t got = 0;
    while (got < sizeof answer) {
      // EINTR: io_uring's completion work for this thread (the test drives a transport here too)
      // interrupts a blocking recv, which a receive timeout makes return rather than restart.
      const ssize_t n = ::recv(fd_, answer + got, sizeof answer - got, 0);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) return false;
      got += static_cast<size_t>(n);
    }
    const Handshake a = transport::decode_handshake(answer);
    const auth::Mac proof =
        s.prove(auth::Direction::to_acceptor, a.nonce, hello_.nonce, transport::handshake_transcript(hello_, a));
    send_bytes(proof.data(), proof.size());
    return true;
  }
  // Whether the acceptor closed our socket (a refusal), waiting up to 10 s.
  bool closed_by_peer() {
    char b[256];
    for (;;) {
      ssize_t n = ::recv(fd_, b, sizeof b, 0);
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
      if (n < 0 && errno == EINTR) continue;  // as in prove_with
      if (n < 0) return false;  // timed out
    }
  }

 private:
  int fd_ = -1;
  Handshake hello_;
};

class AuthTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const auto& e : transport_registry()) {
      if (e.name == GetParam() && !e.available) GTEST_SKIP() << e.name << " unavailable: " << e.unavailable_reason;
    }
  }
  // One message each way over a freshly made link, every byte checked.
  static void exchange(Link& link) {
    std::vector<unsigned char> ab(100003), ba(77), got_ab(ab.size()), got_ba(ba.size());
    fill(ab, 1);
    fill(ba, 2);
    ASSERT_TRUE(link.cb->post_recv(got_ba.data(), got_ba.size(), 1).is_ok());
    ASSERT_TRUE(link.ca->post_recv(got_ab.data(), got_ab.size(), 2).is_ok());
    ASSERT_TRUE(link.ca->post_send(ba.data(), ba.size(), 3).is_ok());
    ASSERT_TRUE(link.cb->post_send(ab.data(), ab.size(), 4).is_ok());
    ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 2 && link.done_b.size() == 2; }, 20s))
        << link.error.message();
    for (const auto& c : link.done_a) EXPECT_TRUE(c.status.is_ok()) << c.status.message();
    for (const auto& c : link.done_b) EXPECT_TRUE(c.status.is_ok()) << c.status.message();
    EXPECT_TRUE(check(got_ab.data(), got_ab.size(), 1));
    EXPECT_TRUE(check(got_ba.data(), got_ba.size(), 2));
  }
  // a (rank 0, `oa`) accepts rank 1 on a thread while `before` runs against its address; then b
  // (rank 1, `ob`) connects. Fills link_ (a, b and, when both succeed, the connections).
  void accept_after(const TransportOptions& oa, const TransportOptions& ob,
                    const std::function<void(const std::string&)>& before) {
    auto ta = create_transport(GetParam(), oa);
    auto tb = create_transport(GetParam(), ob);
    ASSERT_TRUE(ta.is_ok() && tb.is_ok());
    link_.a = std::move(ta).value();
    link_.b = std::move(tb).value();
    auto addr = link_.a->listen();
    ASSERT_TRUE(addr.is_ok());
    address_ = addr.value();
    std::thread acceptor([&] { accepted_ = link_.a->accept(PeerIdentity{7, 0, 1}, Deadline::after(20s)); });
    before(address_);
    connected_ = link_.b->connect(address_, PeerIdentity{7, 1, 0}, Deadline::after(20s));
    acceptor.join();
  }

  Link link_;
  std::string address_;
  Result<std::unique_ptr<Connection>> accepted_ = Status(ErrorCode::internal, "accept did not run");
  Result<std::unique_ptr<Connection>> connected_ = Status(ErrorCode::internal, "connect did not run");
};

TEST_P(AuthTest, RanksWithTheSameSecretConnect) {
  const auth::JobSecret s = secret("the job's secret, as braidrun makes it");
  ASSERT_TRUE(make_link(GetParam(), with(s), with(s), link_).is_ok());
  exchange(link_);
}

TEST_P(AuthTest, RanksWithoutASecretConnect) {
  ASSERT_TRUE(make_link(GetParam(), with({}), with({}), link_).is_ok());
  exchange(link_);
}

// Several sockets per peer: each is its own exchange, bound to its socket_index.
TEST_P(AuthTest, EverySocketOfAStripedConnectionIsAdmitted) {
  const auth::JobSecret s = secret("the job's secret, as braidrun makes it");
  TransportOptions o = with(s);
  o.env.nsocks = 4;
  ASSERT_TRUE(make_link(GetParam(), o, o, link_).is_ok());
  exchange(link_);
}

// A rank started without the job's secret (or with another one) is told so by connect(), in
// words that name both ranks and the address and say what to do; the rank that has the secret
// keeps waiting and admits the real peer.
TEST_P(AuthTest, AConnectorWithoutTheSecretIsRefusedClearly) {
  const auth::JobSecret s = secret("the job's secret, as braidrun makes it");
  auto t_none = create_transport(GetParam(), with({}));
  auto t_wrong = create_transport(GetParam(), with(secret("another job's secret")));
  ASSERT_TRUE(t_none.is_ok() && t_wrong.is_ok());
  Result<std::unique_ptr<Connection>> none = Status(ErrorCode::internal, "not run");
  Result<std::unique_ptr<Connection>> wrong = none.status();
  accept_after(with(s), with(s), [&](const std::string& address) {
    none = t_none.value()->connect(address, PeerIdentity{7, 1, 0}, Deadline::after(20s));
    wrong = t_wrong.value()->connect(address, PeerIdentity{7, 1, 0}, Deadline::after(20s));
  });
  for (const auto* refused : {&none, &wrong}) {
    ASSERT_FALSE(refused->is_ok());
    const Status& st = refused->status();
    EXPECT_EQ(st.code(), ErrorCode::unauthenticated) << st.message();
    EXPECT_EQ(st.message().rfind("rank 1 connecting to rank 0 at " + address_ + ": rank 0 could not prove", 0), 0u)
        << st.message();
    EXPECT_NE(st.message().find(auth::secret_hint()), std::string::npos) << st.message();
  }
  ASSERT_TRUE(accepted_.is_ok()) << accepted_.status().message();
  ASSERT_TRUE(connected_.is_ok()) << connected_.status().message();
  link_.ca = std::move(accepted_).value();
  link_.cb = std::move(connected_).value();
  exchange(link_);
}

// Someone who knows the job's comm_id and ranks (they are no secret) connects to rank 0 during
// setup before rank 1 does, with a perfect hello claiming to be rank 1. Before version 3 the
// acceptor took the first such socket as rank 1's: a stranger could take over the connection.
TEST_P(AuthTest, AStrangerCannotTakeTheRankItClaims) {
  const auth::JobSecret s = secret("the job's secret, as braidrun makes it");
  StderrCapture log;
  std::vector<std::unique_ptr<Stranger>> strangers;
  bool answered = true;
  accept_after(with(s), with(s), [&](const std::string& address) {
    for (int i = 0; i < 4; ++i) strangers.push_back(std::make_unique<Stranger>(address));
    for (auto& x : strangers) x->hello(1, 0);
    answered = strangers[0]->prove_with(auth::JobSecret()) && strangers[1]->prove_with(secret("a guessed secret"));
    const unsigned char junk[transport::kProofBytes] = {1, 2, 3};
    strangers[2]->send_bytes(junk, sizeof junk);  // strangers[3] says nothing more
  });
  EXPECT_TRUE(answered) << "the acceptor answers a right-looking hello with its own proof";
  ASSERT_TRUE(accepted_.is_ok()) << accepted_.status().message();
  ASSERT_TRUE(connected_.is_ok()) << connected_.status().message();
  link_.ca = std::move(accepted_).value();
  link_.cb = std::move(connected_).value();
  exchange(link_);
  for (int i = 0; i < 3; ++i) EXPECT_TRUE(strangers[i]->closed_by_peer()) << "stranger " << i;
  const std::string text = log.text();
  EXPECT_NE(text.find("rank 0 on " + address_ + " refused a connection from 127.0.0.1:"), std::string::npos) << text;
  EXPECT_NE(text.find("that claimed to be rank 1: its proof of the job's secret is wrong"), std::string::npos) << text;
  EXPECT_EQ(count_of(text, "refused a connection"), 1u) << "refusals are logged at most once per interval:\n" << text;
}

// Connections that say nothing cost the acceptor nothing: it runs every socket's handshake at
// once. Before, it read each new socket's hello in turn with a 2 s deadline, so 20 silent
// connections during setup held the real peer for 40 s, past the 20 s both ends wait here.
TEST_P(AuthTest, SilentConnectionsDuringSetupDoNotHoldUpTheRealPeer) {
  const auth::JobSecret s = secret("the job's secret, as braidrun makes it");
  std::vector<std::unique_ptr<Stranger>> silent;
  accept_after(with(s), with(s), [&](const std::string& address) {
    for (int i = 0; i < 20; ++i) silent.push_back(std::make_unique<Stranger>(address));
  });
  ASSERT_TRUE(accepted_.is_ok()) << accepted_.status().message();
  ASSERT_TRUE(connected_.is_ok()) << connected_.status().message();
  link_.ca = std::move(accepted_).value();
  link_.cb = std::move(connected_).value();
  exchange(link_);
}

// An acceptor whose peer never proves itself ends at its deadline, and says what it refused.
TEST_P(AuthTest, AnAcceptorThatTimesOutNamesTheConnectionsItRefused) {
  const auth::JobSecret s = secret("the job's secret, as braidrun makes it");
  auto a = create_transport(GetParam(), with(s));
  auto b = create_transport(GetParam(), with({}));
  ASSERT_TRUE(a.is_ok() && b.is_ok());
  auto addr = a.value()->listen();
  ASSERT_TRUE(addr.is_ok());
  Result<std::unique_ptr<Connection>> got = Status(ErrorCode::internal, "not run");
  std::thread acceptor([&] { got = a.value()->accept(PeerIdentity{7, 0, 1}, Deadline::after(1500ms)); });
  auto refused = b.value()->connect(addr.value(), PeerIdentity{7, 1, 0}, Deadline::after(20s));
  acceptor.join();
  EXPECT_EQ(refused.status().code(), ErrorCode::unauthenticated) << refused.status().message();
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), ErrorCode::timeout) << got.status().message();
  EXPECT_NE(got.status().message().find("rank 0 waited in accept() on " + addr.value() +
                                        " for rank 1, but refused the 1 connection(s) that claimed to be it"),
            std::string::npos)
      << got.status().message();
  EXPECT_NE(got.status().message().find(auth::secret_hint()), std::string::npos) << got.status().message();
}

// A rank never connects to itself: not by its own rank, not by its own address, and a hello that
// claims to come from the acceptor's own rank is refused.
TEST_P(AuthTest, ARankCannotConnectToItself) {
  auto t = create_transport(GetParam(), with({}));
  ASSERT_TRUE(t.is_ok());
  auto addr = t.value()->listen();
  ASSERT_TRUE(addr.is_ok());
  auto self = t.value()->connect(addr.value(), PeerIdentity{7, 0, 0}, Deadline::after(2s));
  ASSERT_FALSE(self.is_ok());
  EXPECT_EQ(self.status().code(), ErrorCode::invalid_argument) << self.status().message();
  EXPECT_EQ(self.status().message().rfind("rank 0 connecting to rank 0 at " + addr.value() +
                                              ": a rank cannot connect to itself", 0),
            0u)
      << self.status().message();
  auto own_address = t.value()->connect(addr.value(), PeerIdentity{7, 0, 1}, Deadline::after(2s));
  ASSERT_FALSE(own_address.is_ok());
  EXPECT_EQ(own_address.status().code(), ErrorCode::invalid_argument) << own_address.status().message();
  EXPECT_NE(own_address.status().message().find("this rank's own listening address"), std::string::npos)
      << own_address.status().message();
  auto from_self = t.value()->accept(PeerIdentity{7, 0, 0}, Deadline::after(2s));
  EXPECT_EQ(from_self.status().code(), ErrorCode::invalid_argument) << from_self.status().message();

  StderrCapture log;
  std::unique_ptr<Stranger> mirror;
  accept_after(with({}), with({}), [&](const std::string& address) {
    mirror = std::make_unique<Stranger>(address);
    mirror->hello(0, 0);
  });
  EXPECT_TRUE(mirror->closed_by_peer());
  EXPECT_NE(log.text().find("this rank itself"), std::string::npos) << log.text();
  ASSERT_TRUE(accepted_.is_ok()) << accepted_.status().message();
  ASSERT_TRUE(connected_.is_ok()) << connected_.status().message();
}

// The runtime's order (runtime/links/peer_links.cc, connect_peers): each rank accepts from every
// lower rank in rank order, then connects to every higher one, each connect() waiting for its
// acceptor's answer. With several sockets per peer, every rank gets through.
TEST_P(AuthTest, TheRuntimesOrderConnectsEveryRank) {
  constexpr int kRanks = 5;
  TransportOptions o = with(secret("the job's secret, as braidrun makes it"));
  o.env.nsocks = 3;
  std::vector<std::unique_ptr<Transport>> t;
  std::vector<std::string> addresses;
  for (int r = 0; r < kRanks; ++r) {
    auto x = create_transport(GetParam(), o);
    ASSERT_TRUE(x.is_ok());
    t.push_back(std::move(x).value());
    auto addr = t.back()->listen();
    ASSERT_TRUE(addr.is_ok());
    addresses.push_back(addr.value());
  }
  std::vector<std::vector<std::unique_ptr<Connection>>> conns(kRanks);
  std::vector<Status> status(kRanks);
  std::vector<std::thread> ranks;
  for (int r = 0; r < kRanks; ++r) {
    ranks.emplace_back([&, r] {
      conns[r].resize(kRanks);
      const Deadline deadline = Deadline::after(30s);
      for (int p = 0; p < kRanks && status[r].is_ok(); ++p) {
        if (p == r) continue;
        auto c = p < r ? t[r]->accept(PeerIdentity{7, r, p}, deadline)
                       : t[r]->connect(addresses[p], PeerIdentity{7, r, p}, deadline);
        if (c.is_ok()) {
          conns[r][p] = std::move(c).value();
        } else {
          status[r] = c.status();
        }
      }
    });
  }
  for (auto& x : ranks) x.join();
  for (int r = 0; r < kRanks; ++r) EXPECT_TRUE(status[r].is_ok()) << "rank " << r << ": " << status[r].message();
}

auto engine_name = [](const auto& info) { return std::string(info.param == "tcp" ? "io_uring" : "epoll"); };
INSTANTIATE_TEST_SUITE_P(Engines, AuthTest, ::testing::Values("tcp", "tcp-poll"), engine_name);

}  // namespace
}  // namespace braid::transport::testing
