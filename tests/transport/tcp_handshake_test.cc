// The connection handshake (transport/common/handshake_format.h) as a connector sees it, against an acceptor played
// by hand: versions, the acceptor's answer and proof, and the host identity both carry, which
// decides whether a connection's peer shares our only CPU.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <sched.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <functional>
#include <thread>

#include "common/job_secret.h"
#include "common/spin.h"
#include "tests/support/subprocess.h"
#include "tests/transport/transport_link.h"
#include "transport/common/host_identity.h"
#include "transport/common/socket_setup.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/wire_format.h"

namespace braid::transport::testing {
namespace {

using namespace std::chrono_literals;
using braid::testing::usable_cpu;
using transport::Handshake;
using transport::HostIdentity;

tcp::TcpConnection* as_tcp(const std::unique_ptr<Connection>& c) { return dynamic_cast<tcp::TcpConnection*>(c.get()); }

TEST(Handshake, ChecksNameWhatIsWrong) {
  Handshake h;
  h.comm_id = 7, h.from_rank = 1, h.to_rank = 0, h.nsocks = 2, h.socket_index = 1;
  EXPECT_TRUE(transport::check_handshake(h, 7, 0).is_ok());
  Handshake old = h;
  old.version = 1;
  Status s = transport::check_handshake(old, 7, 0);
  EXPECT_EQ(s.code(), ErrorCode::protocol);
  EXPECT_NE(s.message().find("protocol version 1, this build speaks 3"), std::string::npos) << s.message();
  s = transport::check_handshake(h, 8, 0);
  EXPECT_NE(s.message().find("communicator id 7 is not ours (8)"), std::string::npos) << s.message();
  s = transport::check_handshake(h, 7, 3);
  EXPECT_NE(s.message().find("meant for rank 0, this is rank 3"), std::string::npos) << s.message();
  Handshake bad_index = h;
  bad_index.socket_index = 2;
  EXPECT_EQ(transport::check_handshake(bad_index, 7, 0).code(), ErrorCode::protocol);
}

// A handshake of another version is refused on its first bytes: a version 1 peer sends only 32,
// and waiting for the 176 of ours would end in a timeout that says nothing about versions.
TEST(Handshake, AnotherVersionIsRefusedWithoutWaitingForItsBody) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  Handshake v1;
  v1.version = 1, v1.comm_id = 7, v1.from_rank = 1;
  ASSERT_EQ(::send(fds[1], &v1, 32, 0), 32);
  auto got = transport::read_handshake(fds[0], Deadline::after(30s));
  ASSERT_FALSE(got.is_ok());
  EXPECT_EQ(got.status().code(), ErrorCode::protocol) << got.status().message();
  EXPECT_NE(got.status().message().find("protocol version 1"), std::string::npos) << got.status().message();
  ::close(fds[0]);  // as the acceptor does with a refused socket
  ::close(fds[1]);
  // Ours, whole: every field arrives, the host identity included.
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds), 0);
  Handshake h;
  h.comm_id = 7, h.from_rank = 1, h.to_rank = 0;
  h.boot_id = transport::local_host_identity().boot_id;
  h.cpu_mask = transport::cpu_mask_of({3, 1000});
  ASSERT_EQ(::send(fds[1], &h, sizeof h, 0), static_cast<ssize_t>(sizeof h));
  got = transport::read_handshake(fds[0], Deadline::after(30s));
  ASSERT_TRUE(got.is_ok()) << got.status().message();
  EXPECT_EQ(got.value().comm_id, 7u);
  EXPECT_EQ(got.value().boot_id, h.boot_id);
  EXPECT_EQ(got.value().cpu_mask, h.cpu_mask);
  ::close(fds[0]);
  ::close(fds[1]);
}

// A listening socket that plays the acceptor by hand, to send answers a real one would not.
class FakeAcceptor {
 public:
  FakeAcceptor() {
    listen_fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in sa{};
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof sa;
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<sockaddr*>(&sa), sizeof sa), 0);
    EXPECT_EQ(::listen(listen_fd_, 4), 0);
    getsockname(listen_fd_, reinterpret_cast<sockaddr*>(&sa), &len);
    address_ = "127.0.0.1:" + std::to_string(ntohs(sa.sin_port));
  }
  ~FakeAcceptor() {
    if (fd_ >= 0) ::close(fd_);
    ::close(listen_fd_);
  }
  const std::string& address() const { return address_; }

  // Reads exactly `n` bytes within the receive timeout. EINTR is retried: io_uring's completion
  // work for a thread that also drives a transport interrupts a blocking recv, which a receive
  // timeout makes return rather than restart.
  bool recv_all(void* p, size_t n) {
    size_t got = 0;
    while (got < n) {
      const ssize_t r = ::recv(fd_, static_cast<char*>(p) + got, n - got, 0);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) return false;
      got += static_cast<size_t>(r);
    }
    return true;
  }
  // Accepts the connector's socket and reads its handshake.
  Handshake accept_handshake() {
    fd_ = ::accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    EXPECT_GE(fd_, 0);
    timeval tv{20, 0};
    setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    EXPECT_TRUE(recv_all(&hello_, sizeof hello_));
    return hello_;
  }
  // Sends `answer` (a fresh nonce put in) with the proof `secret` makes for it, then reads the
  // connector's proof: whether it came, and verified.
  bool answer(Handshake answer, const auth::JobSecret& secret) {
    answer.nonce = auth::fresh_nonce();
    const std::string transcript = transport::handshake_transcript(hello_, answer);
    const auth::Mac proof = secret.prove(auth::Direction::to_connector, hello_.nonce, answer.nonce, transcript);
    unsigned char bytes[transport::kAnswerBytes];
    std::memcpy(bytes, &answer, sizeof answer);
    std::memcpy(bytes + sizeof answer, proof.data(), proof.size());
    EXPECT_EQ(::send(fd_, bytes, sizeof bytes, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof bytes));
    auth::Mac theirs;
    if (!recv_all(theirs.data(), theirs.size())) return false;
    return secret.verify(auth::Direction::to_acceptor, answer.nonce, hello_.nonce, transcript, theirs);
  }
  // An 8-byte message (seq 0).
  void send_message(uint64_t payload) {
    unsigned char bytes[tcp::kFrameHeaderBytes + 8];
    tcp::FrameHeader f;
    f.slice_len = 8, f.seq = 0, f.total_len = 8, f.offset = 0;
    std::memcpy(bytes, &f, sizeof f);
    std::memcpy(bytes + sizeof f, &payload, 8);
    EXPECT_EQ(::send(fd_, bytes, sizeof bytes, MSG_NOSIGNAL), static_cast<ssize_t>(sizeof bytes));
  }
  // Closes the socket without answering, as an acceptor does with a handshake it refuses.
  void refuse() {
    ::close(fd_);
    fd_ = -1;
  }

 private:
  int listen_fd_ = -1, fd_ = -1;
  std::string address_;
  Handshake hello_;
};

// Skips an engine this machine cannot run (io_uring denied), as transport_test does.
class TcpEngineTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const auto& e : transport_registry()) {
      if (e.name == GetParam() && !e.available) GTEST_SKIP() << e.name << " unavailable: " << e.unavailable_reason;
    }
  }
};

class AnswerTest : public TcpEngineTest {
 protected:
  struct Outcome {
    Status connected;     // what connect() said
    Completion received;  // the receive of the acceptor's message, when connected
    bool shares = false;  // what the connection decided
    bool proof_ok = false;  // whether our proof reached the fake acceptor and verified
    uint64_t payload = 0;
  };
  // On a thread pinned to one CPU (usable_cpu(0)): connects to a FakeAcceptor as rank 1 of
  // communicator 7, lets `make_answer` turn the handshake it received into the answer (magic 0:
  // refuse, closing the socket unanswered; magic 1: never answer), proved with
  // `acceptor_secret`, and receives one message.
  Outcome connect_and_receive(const std::function<Handshake(Handshake)>& make_answer,
                              const auth::JobSecret& acceptor_secret = {},
                              std::chrono::milliseconds limit = 20s) {
    Outcome o;
    auto t = create_transport(GetParam(), loopback_options());
    if (!t.is_ok()) {
      ADD_FAILURE() << t.status().message();
      return o;
    }
    FakeAcceptor acceptor;
    const int cpu = usable_cpu(0);
    on_cpu(cpu, [&] {
      std::thread peer([&] {
        Handshake h = acceptor.accept_handshake();
        EXPECT_EQ(h.version, transport::kProtocolVersion);
        EXPECT_EQ(h.from_rank, 1);
        EXPECT_EQ(h.boot_id, transport::local_host_identity().boot_id);
        EXPECT_EQ(h.cpu_mask, transport::cpu_mask_of({size_t(cpu)})) << "the connecting thread is pinned to CPU " << cpu;
        const Handshake answer = make_answer(h);
        if (answer.magic == 0) return acceptor.refuse();
        if (answer.magic == 1) return;
        o.proof_ok = acceptor.answer(answer, acceptor_secret);
        if (o.proof_ok) acceptor.send_message(0x1122334455667788);
      });
      auto c = t.value()->connect(acceptor.address(), PeerIdentity{7, 1, 0}, Deadline::after(limit));
      peer.join();
      o.connected = c.status();
      if (!c.is_ok()) return;
      o.shares = as_tcp(c.value())->peer_shares_cpu();
      EXPECT_EQ(cpu_sharing_peers(), o.shares ? 1 : 0) << "known from the answer, before any message";
      ASSERT_TRUE(c.value()->post_recv(&o.payload, 8, 1).is_ok());
      std::vector<Completion> out;
      auto end = std::chrono::steady_clock::now() + 20s;
      while (out.empty() && std::chrono::steady_clock::now() < end) ASSERT_TRUE(t.value()->poll(out, 50ms).is_ok());
      ASSERT_EQ(out.size(), 1u);
      o.received = out[0];
    });
    EXPECT_EQ(cpu_sharing_peers(), 0) << "the connection is gone, its vote must be too";
    return o;
  }

  // What a real acceptor pinned to `cpus` on host `boot_id` answers.
  static std::function<Handshake(Handshake)> answer_from(transport::BootId boot_id, transport::CpuMask cpus) {
    return [=](Handshake h) {
      std::swap(h.from_rank, h.to_rank);
      h.boot_id = boot_id;
      h.cpu_mask = cpus;
      return h;
    };
  }
};

TEST_P(AnswerTest, AnAcceptorOnOurCpuIsSeenFromItsAnswer) {
  const size_t cpu = static_cast<size_t>(usable_cpu(0));
  Outcome o = connect_and_receive(answer_from(transport::local_host_identity().boot_id, transport::cpu_mask_of({cpu})));
  ASSERT_TRUE(o.connected.is_ok()) << o.connected.message();
  EXPECT_TRUE(o.proof_ok);
  ASSERT_TRUE(o.received.status.is_ok()) << o.received.status.message();
  EXPECT_EQ(o.payload, 0x1122334455667788u) << "the frame after the handshake was misread";
  EXPECT_TRUE(o.shares);
}

TEST_P(AnswerTest, AnAcceptorElsewhereIsNot) {
  const transport::BootId here = transport::local_host_identity().boot_id;
  transport::BootId elsewhere = here;
  elsewhere[0] ^= 1;
  const size_t cpu = static_cast<size_t>(usable_cpu(0));  // ours; the answers name others
  for (const auto& [boot_id, cpus] : {std::pair{here, transport::cpu_mask_of({cpu + 1})},
                                      std::pair{here, transport::cpu_mask_of({cpu, cpu + 1})},
                                      std::pair{elsewhere, transport::cpu_mask_of({cpu})}}) {
    Outcome o = connect_and_receive(answer_from(boot_id, cpus));
    ASSERT_TRUE(o.connected.is_ok()) << o.connected.message();
    ASSERT_TRUE(o.received.status.is_ok()) << o.received.status.message();
    EXPECT_EQ(o.payload, 0x1122334455667788u);
    EXPECT_FALSE(o.shares) << "answered from CPUs " << transport::describe_cpus(cpus);
  }
}

TEST_P(AnswerTest, AWrongAnswerFailsTheConnectionAndSaysWhy) {
  Outcome o = connect_and_receive([](Handshake h) {
    h.from_rank = 5;  // someone else answers: not the rank we connected to
    h.to_rank = 1;
    return h;
  });
  EXPECT_EQ(o.connected.code(), ErrorCode::protocol) << o.connected.message();
  EXPECT_NE(o.connected.message().find("bad answer to our handshake"), std::string::npos) << o.connected.message();
  EXPECT_NE(o.connected.message().find("rank 5"), std::string::npos) << o.connected.message();
  EXPECT_EQ(o.connected.message().rfind("rank 1 connecting to rank 0 at 127.0.0.1:", 0), 0u) << o.connected.message();
  EXPECT_FALSE(o.proof_ok) << "a connector proves itself only to the rank it meant to reach";
}

TEST_P(AnswerTest, ARefusedHandshakeIsNamedAsSuch) {
  Outcome o = connect_and_receive([](Handshake) { return Handshake{.magic = 0}; });
  EXPECT_EQ(o.connected.code(), ErrorCode::peer_lost) << o.connected.message();
  EXPECT_NE(o.connected.message().find("without answering our handshake: it refused it"), std::string::npos)
      << o.connected.message();
  EXPECT_EQ(o.connected.message().rfind("rank 1 connecting to rank 0 at 127.0.0.1:", 0), 0u) << o.connected.message();
}

// A listener that takes the handshake and never answers (a stranger, or a hung peer): connect()
// ends at its deadline and says what it waited for.
TEST_P(AnswerTest, AnAcceptorThatNeverAnswersEndsConnectAtItsDeadline) {
  Outcome o = connect_and_receive([](Handshake) { return Handshake{.magic = 1}; }, {}, 500ms);
  EXPECT_EQ(o.connected.code(), ErrorCode::timeout) << o.connected.message();
  EXPECT_NE(o.connected.message().find("did not answer our handshake"), std::string::npos) << o.connected.message();
  EXPECT_EQ(o.connected.message().rfind("rank 1 connecting to rank 0 at 127.0.0.1:", 0), 0u) << o.connected.message();
}

// An acceptor that cannot prove it knows our secret (here: it has one, we have none) is not
// given our proof, and connect() says why in words that point at the secrets.
TEST_P(AnswerTest, AnAcceptorWithAnotherSecretIsRefused) {
  auto other = auth::JobSecret::from_text("another job's secret, 32 bytes!", "test");
  ASSERT_TRUE(other.is_ok());
  const size_t cpu = static_cast<size_t>(usable_cpu(0));
  Outcome o = connect_and_receive(answer_from(transport::local_host_identity().boot_id, transport::cpu_mask_of({cpu})),
                                  other.value());
  EXPECT_EQ(o.connected.code(), ErrorCode::unauthenticated) << o.connected.message();
  EXPECT_EQ(o.connected.message().rfind("rank 1 connecting to rank 0 at 127.0.0.1:", 0), 0u) << o.connected.message();
  EXPECT_NE(o.connected.message().find(auth::secret_hint()), std::string::npos) << o.connected.message();
  EXPECT_FALSE(o.proof_ok);
}

// Two real transports of this process whose connecting and accepting threads are pinned as two
// `taskset`-started ranks would be. Both ends must reach the same decision.
class SharedCpuTest : public TcpEngineTest {
 protected:
  void link_on(int accept_cpu, int connect_cpu) {
    Status s = make_pinned_link(GetParam(), accept_cpu, connect_cpu, link_);
    ASSERT_TRUE(s.is_ok()) << s.message();
  }
  // One message each way (the connector reads the acceptor's answer before its first frame).
  void exchange() {
    uint64_t ping = 1, pong = 2, got_a = 0, got_b = 0;
    ASSERT_TRUE(link_.ca->post_recv(&got_a, 8, 1).is_ok());
    ASSERT_TRUE(link_.cb->post_recv(&got_b, 8, 2).is_ok());
    ASSERT_TRUE(link_.cb->post_send(&ping, 8, 3).is_ok());
    ASSERT_TRUE(link_.ca->post_send(&pong, 8, 4).is_ok());
    ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == 2 && link_.done_b.size() == 2; }, 20s))
        << link_.error.message();
    for (const auto& c : link_.done_a) EXPECT_TRUE(c.status.is_ok()) << c.status.message();
    for (const auto& c : link_.done_b) EXPECT_TRUE(c.status.is_ok()) << c.status.message();
    EXPECT_EQ(got_a, ping);
    EXPECT_EQ(got_b, pong);
  }
  Link link_;
};

TEST_P(SharedCpuTest, PeersPinnedToOneCpuStopSpinning) {
  ASSERT_EQ(cpu_sharing_peers(), 0);
  link_on(usable_cpu(0), usable_cpu(0));
  EXPECT_TRUE(as_tcp(link_.ca)->peer_shares_cpu()) << "the acceptor knows from the handshake";
  exchange();
  EXPECT_TRUE(as_tcp(link_.ca)->peer_shares_cpu());
  EXPECT_TRUE(as_tcp(link_.cb)->peer_shares_cpu()) << "the connector knows from the answer";
  EXPECT_EQ(cpu_sharing_peers(), 2);
  EXPECT_FALSE(spin_allowed());
  link_.ca->close();
  EXPECT_EQ(cpu_sharing_peers(), 1);
  link_.cb.reset();
  EXPECT_EQ(cpu_sharing_peers(), 0);
  EXPECT_TRUE(spin_allowed());
}

TEST_P(SharedCpuTest, PeersOnTwoCpusKeepSpinning) {
  if (usable_cpu_count() < 2) GTEST_SKIP() << "needs two CPUs; this process may use " << usable_cpu_count();
  link_on(usable_cpu(0), usable_cpu(1));
  exchange();
  EXPECT_FALSE(as_tcp(link_.ca)->peer_shares_cpu());
  EXPECT_FALSE(as_tcp(link_.cb)->peer_shares_cpu());
  EXPECT_EQ(cpu_sharing_peers(), 0);
  EXPECT_TRUE(spin_allowed());
}

// Unpinned threads (every CPU each): two spinners, two CPUs, nothing to give away.
TEST_P(SharedCpuTest, UnpinnedPeersKeepSpinning) {
  if (usable_cpu_count() < 2) GTEST_SKIP() << "needs two CPUs; this process may use " << usable_cpu_count();
  Status s = make_link(GetParam(), loopback_options(), loopback_options(), link_);
  ASSERT_TRUE(s.is_ok()) << s.message();
  exchange();
  EXPECT_FALSE(as_tcp(link_.ca)->peer_shares_cpu());
  EXPECT_FALSE(as_tcp(link_.cb)->peer_shares_cpu());
}

auto engine_name = [](const auto& info) { return std::string(info.param == "tcp" ? "io_uring" : "epoll"); };
INSTANTIATE_TEST_SUITE_P(Engines, AnswerTest, ::testing::Values("tcp", "tcp-poll"), engine_name);
INSTANTIATE_TEST_SUITE_P(Engines, SharedCpuTest, ::testing::Values("tcp", "tcp-poll"), engine_name);

}  // namespace
}  // namespace braid::transport::testing
