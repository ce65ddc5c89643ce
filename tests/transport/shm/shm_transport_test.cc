// The shm transport with both ends in this process: every size through both large-message paths
// (cross-memory attach and the two-copy ring), order with many in flight, a receive too small,
// the address and its host, and who is refused. tests/transport/transport_test.cc runs the
// seam's common suite on shm as well.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/env.h"
#include "common/job_secret.h"
#include "tests/support/subprocess.h"
#include "tests/transport/transport_link.h"
#include "transport/shm/shm_connection.h"
#include "transport/shm/shm_layout.h"
#include "transport/shm/shm_setup.h"
#include "transport/shm/shm_transport.h"

namespace braid::transport::testing {
namespace {

using namespace std::chrono_literals;

auth::JobSecret secret(const std::string& text) {
  auto s = auth::JobSecret::from_text(text, "test");
  EXPECT_TRUE(s.is_ok()) << s.status().message();
  return s.is_ok() ? s.value() : auth::JobSecret();
}

// Parameter: whether large messages go by cross-memory attach (BRAID_SHM_CMA=1) or never (0).
class ShmTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    o_.env.shm_cma = GetParam();
    o_.env.shm_cma_auto = false;  // the ring alone, whatever pages the buffers landed on
    o_.secret = secret("shm transport test secret 0123456789");
  }
  void join() { ASSERT_TRUE(make_link("shm", o_, o_, link_).is_ok()); }

  // Sends `sizes` from b to a, all posted at once, in buffers `slack` bytes larger; checks bytes
  // and order.
  void transfer(const std::vector<size_t>& sizes, size_t slack = 16) {
    std::vector<std::vector<unsigned char>> out(sizes.size()), in(sizes.size());
    for (size_t i = 0; i < sizes.size(); ++i) {
      out[i].resize(sizes[i]);
      fill(out[i], i);
      in[i].assign(sizes[i] + slack, 0);
      ASSERT_TRUE(link_.ca->post_recv(in[i].data(), in[i].size(), 1000 + i).is_ok());
      ASSERT_TRUE(link_.cb->post_send(out[i].data(), out[i].size(), 2000 + i).is_ok());
    }
    ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == sizes.size() && link_.done_b.size() == sizes.size(); }))
        << link_.done_a.size() << " received, " << link_.done_b.size() << " sent of " << sizes.size();
    for (size_t i = 0; i < sizes.size(); ++i) {
      const Completion& r = link_.done_a[i];
      ASSERT_TRUE(r.status.is_ok()) << r.status.message();
      EXPECT_EQ(r.cookie, 1000 + i) << "receives complete in order";
      EXPECT_EQ(r.bytes, sizes[i]);
      EXPECT_TRUE(check(in[i].data(), sizes[i], i)) << "message " << i << " of " << sizes[i] << " bytes differs";
      ASSERT_TRUE(link_.done_b[i].status.is_ok()) << link_.done_b[i].status.message();
      EXPECT_EQ(link_.done_b[i].cookie, 2000 + i) << "sends complete in order";
    }
    link_.done_a.clear();
    link_.done_b.clear();
  }

  TransportOptions o_;
  Link link_;
};

TEST_P(ShmTest, EverySizeFromZeroTo64MiB) {
  join();
  transfer({0, 1, 31, 32, 33, 63, 64, 65, 4096, 65535, 65536, 65537, (1u << 20) + 3, 0, 5u << 20});
  transfer({64u << 20});
}

TEST_P(ShmTest, DescribeSaysWhichLargeMessagePath) {
  join();
  const std::string d = link_.b->describe();
  if (GetParam()) {
    EXPECT_NE(d.find("single-copy (cross-memory attach)"), std::string::npos) << d;
  } else {
    EXPECT_NE(d.find("two-copy ring (BRAID_SHM_CMA=1"), std::string::npos) << d;
  }
  EXPECT_NE(d.find("KiB per direction"), std::string::npos) << d;
}

TEST_P(ShmTest, ManyInFlightKeepTheirOrder) {
  join();
  const size_t n = link_.a->capabilities().max_in_flight;
  std::vector<size_t> sizes;
  for (size_t i = 0; i < n; ++i) sizes.push_back(i % 5 == 0 ? 70000 + i : (i * 37) % 3000);
  transfer(sizes);
  transfer(sizes);  // the rings wrapped meanwhile
}

TEST_P(ShmTest, MoreThanMaxInFlightIsRefused) {
  join();
  const size_t n = link_.a->capabilities().max_in_flight;
  std::vector<unsigned char> buf(8);
  for (size_t i = 0; i < n; ++i) ASSERT_TRUE(link_.ca->post_recv(buf.data(), buf.size(), i).is_ok());
  Status s = link_.ca->post_recv(buf.data(), buf.size(), n);
  EXPECT_EQ(s.code(), ErrorCode::invalid_argument) << s.message();
}

TEST_P(ShmTest, TooSmallReceiveFailsWithProtocolAndTheNextMessageArrives) {
  join();
  for (size_t big : {size_t{100}, size_t{1} << 20}) {
    std::vector<unsigned char> msg(big), next(50), small(10), in_next(64);
    fill(msg, 1);
    fill(next, 2);
    ASSERT_TRUE(link_.ca->post_recv(small.data(), small.size(), 1).is_ok());
    ASSERT_TRUE(link_.ca->post_recv(in_next.data(), in_next.size(), 2).is_ok());
    ASSERT_TRUE(link_.cb->post_send(msg.data(), msg.size(), 1).is_ok());
    ASSERT_TRUE(link_.cb->post_send(next.data(), next.size(), 2).is_ok());
    ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == 2 && link_.done_b.size() == 2; }, 20s));
    EXPECT_EQ(link_.done_a[0].status.code(), ErrorCode::protocol) << link_.done_a[0].status.message();
    EXPECT_NE(link_.done_a[0].status.message().find(std::to_string(big) + " bytes"), std::string::npos)
        << link_.done_a[0].status.message();
    EXPECT_TRUE(std::all_of(small.begin(), small.end(), [](unsigned char c) { return c == 0; })) << "no overrun";
    ASSERT_TRUE(link_.done_a[1].status.is_ok()) << link_.done_a[1].status.message();
    EXPECT_EQ(link_.done_a[1].bytes, 50u);
    EXPECT_TRUE(check(in_next.data(), 50, 2));
    link_.done_a.clear();
    link_.done_b.clear();
  }
}

TEST_P(ShmTest, BothDirectionsAtOnce) {
  join();
  const size_t n = 3u << 20;
  std::vector<unsigned char> ab(n), ba(n), in_a(n), in_b(n);
  fill(ab, 1);
  fill(ba, 2);
  ASSERT_TRUE(link_.ca->post_recv(in_a.data(), n, 1).is_ok());
  ASSERT_TRUE(link_.cb->post_recv(in_b.data(), n, 2).is_ok());
  ASSERT_TRUE(link_.ca->post_send(ab.data(), n, 3).is_ok());
  ASSERT_TRUE(link_.cb->post_send(ba.data(), n, 4).is_ok());
  ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == 2 && link_.done_b.size() == 2; }));
  EXPECT_TRUE(check(in_a.data(), n, 2));
  EXPECT_TRUE(check(in_b.data(), n, 1));
}

TEST_P(ShmTest, WhatWasSentBeforeCloseIsStillDelivered) {
  join();
  std::vector<unsigned char> msg(3000), in(3000);
  fill(msg, 4);
  ASSERT_TRUE(link_.cb->post_send(msg.data(), msg.size(), 1).is_ok());
  ASSERT_TRUE(link_.drive([&] { return link_.done_b.size() == 1; }, 10s));
  link_.cb->close();
  ASSERT_TRUE(link_.ca->post_recv(in.data(), in.size(), 2).is_ok());
  ASSERT_TRUE(link_.ca->post_recv(in.data(), in.size(), 3).is_ok());  // nothing more comes
  ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == 2; }, 10s));
  ASSERT_TRUE(link_.done_a[0].status.is_ok()) << link_.done_a[0].status.message();
  EXPECT_TRUE(check(in.data(), 3000, 4));
  EXPECT_EQ(link_.done_a[1].status.code(), ErrorCode::peer_lost) << link_.done_a[1].status.message();
  EXPECT_NE(link_.done_a[1].status.message().find("closed its connection"), std::string::npos)
      << link_.done_a[1].status.message();
}

INSTANTIATE_TEST_SUITE_P(LargePath, ShmTest, ::testing::Values(true, false),
                         [](const auto& info) { return std::string(info.param ? "cma" : "two_copy"); });

TEST(ShmAddress, NamesItsHostAndIsHostLocal) {
  auto t = create_transport("shm", TransportOptions{});
  ASSERT_TRUE(t.is_ok()) << t.status().message();
  auto addr = t.value()->listen();
  ASSERT_TRUE(addr.is_ok()) << addr.status().message();
  EXPECT_TRUE(t.value()->is_host_local(addr.value()));
  EXPECT_FALSE(t.value()->is_host_local("127.0.0.1:5000"));
  auto parsed = shm::ShmAddress::parse(addr.value());
  ASSERT_TRUE(parsed.is_ok()) << parsed.status().message();
  EXPECT_TRUE(parsed.value().host == shm::local_shm_host());
  EXPECT_FALSE(parsed.value().host.boot_id.empty());
  EXPECT_NE(parsed.value().host.netns, 0u);
  EXPECT_EQ(parsed.value().to_string(), addr.value());
  EXPECT_FALSE(shm::ShmAddress::parse("shm:x/y").is_ok());
  EXPECT_FALSE(shm::ShmAddress::parse("10.0.0.1:80").is_ok());
}

TEST(ShmAddress, AnotherHostsAddressIsRefusedNamingBoth) {
  auto t = create_transport("shm", TransportOptions{});
  ASSERT_TRUE(t.is_ok());
  auto addr = t.value()->listen();
  ASSERT_TRUE(addr.is_ok());
  auto other = shm::ShmAddress::parse(addr.value()).value();
  other.host.netns += 1;  // another network namespace of this kernel: another host for shm
  auto c = t.value()->connect(other.to_string(), PeerIdentity{7, 1, 0}, Deadline::after(2s));
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(c.status().message().find("another host"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("BRAID_TRANSPORT=tcp"), std::string::npos) << c.status().message();
}

TEST(ShmAuth, AnotherSecretIsRefusedBothWays) {
  TransportOptions oa, ob;
  oa.secret = secret("the first secret of this test 0123");
  ob.secret = secret("the other secret of this test 4567");
  auto ta = create_transport("shm", oa);
  auto tb = create_transport("shm", ob);
  ASSERT_TRUE(ta.is_ok() && tb.is_ok());
  auto addr = ta.value()->listen();
  ASSERT_TRUE(addr.is_ok());
  Result<std::unique_ptr<Connection>> accepted = Status(ErrorCode::internal, "not run");
  std::thread acceptor([&] { accepted = ta.value()->accept(PeerIdentity{7, 0, 1}, Deadline::after(3s)); });
  auto c = tb.value()->connect(addr.value(), PeerIdentity{7, 1, 0}, Deadline::after(3s));
  acceptor.join();
  // The connector learns first: the acceptor's proof does not verify with its secret.
  ASSERT_FALSE(c.is_ok());
  EXPECT_EQ(c.status().code(), ErrorCode::unauthenticated) << c.status().message();
  EXPECT_NE(c.status().message().find("rank 1 connecting over shm to rank 0"), std::string::npos)
      << c.status().message();
  ASSERT_FALSE(accepted.is_ok());
  EXPECT_EQ(accepted.status().code(), ErrorCode::timeout) << accepted.status().message();
}

TEST(ShmAuth, AnotherCommunicatorIsRefused) {
  TransportOptions o;
  auto ta = create_transport("shm", o);
  auto tb = create_transport("shm", o);
  ASSERT_TRUE(ta.is_ok() && tb.is_ok());
  auto addr = ta.value()->listen();
  ASSERT_TRUE(addr.is_ok());
  Result<std::unique_ptr<Connection>> accepted = Status(ErrorCode::internal, "not run");
  std::thread acceptor([&] { accepted = ta.value()->accept(PeerIdentity{7, 0, 1}, Deadline::after(3s)); });
  auto c = tb.value()->connect(addr.value(), PeerIdentity{8, 1, 0}, Deadline::after(3s));
  acceptor.join();
  EXPECT_FALSE(c.is_ok());
  EXPECT_FALSE(accepted.is_ok());
  EXPECT_EQ(accepted.status().code(), ErrorCode::timeout) << accepted.status().message();
}

// A limit on file sizes (RLIMIT_FSIZE) stands in for a tmpfs or memory limit too small for the
// rings: the memfd cannot grow past it, as it could not past a full /dev/shm.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    getrlimit(RLIMIT_FSIZE, &saved_);
    old_handler_ = signal(SIGXFSZ, SIG_IGN);  // the error code is enough
    rlimit l = saved_;
    l.rlim_cur = bytes;
    setrlimit(RLIMIT_FSIZE, &l);
  }
  ~FileSizeLimit() {
    setrlimit(RLIMIT_FSIZE, &saved_);
    signal(SIGXFSZ, old_handler_);
  }

 private:
  rlimit saved_{};
  sighandler_t old_handler_ = SIG_DFL;
};

TEST(ShmSegment, TooLittleSharedMemoryGivesSmallerRings) {
  size_t ring = size_t{4} << 20;
  {
    FileSizeLimit limit(shm::segment_bytes(size_t{1} << 20));
    auto fd = shm::create_segment(ring);
    ASSERT_TRUE(fd.is_ok()) << fd.status().message();
  }
  EXPECT_EQ(ring, size_t{1} << 20);
}

TEST(ShmSegment, FarTooLittleIsAnErrorNamingTheSize) {
  size_t ring = size_t{4} << 20;
  FileSizeLimit limit(shm::segment_bytes(shm::kMinRingBytes) - 1);
  auto fd = shm::create_segment(ring);
  ASSERT_FALSE(fd.is_ok());
  const std::string& m = fd.status().message();
  EXPECT_NE(m.find(std::to_string(shm::segment_bytes(size_t{4} << 20)) + " bytes"), std::string::npos) << m;
  EXPECT_NE(m.find("BRAID_TRANSPORT=tcp"), std::string::npos) << m;
}

// BRAID_SHM_RING_BYTES: what Env takes, and the rings a connection then has on both ends.
TEST(ShmRingBytes, EnvTakesSizesAndZeroMeansTheDefault) {
  auto parse = [](const char* value) {
    return Env::parse([&](const char* name) { return std::string(name) == "BRAID_SHM_RING_BYTES" ? value : nullptr; });
  };
  auto mib = parse("1M");
  ASSERT_TRUE(mib.is_ok()) << mib.status().message();
  EXPECT_EQ(mib.value().shm_ring_bytes, size_t{1} << 20);
  auto zero = parse("0");
  ASSERT_TRUE(zero.is_ok()) << zero.status().message();
  EXPECT_EQ(zero.value().shm_ring_bytes, Env().shm_ring_bytes);
  EXPECT_TRUE(parse("64K").is_ok());
  EXPECT_TRUE(parse("1G").is_ok());
  EXPECT_FALSE(parse("2G").is_ok());
  EXPECT_FALSE(parse("65537").is_ok());
}

// Sends `sizes` from b to a one after another and checks their bytes.
void send_each(Link& link, const std::vector<size_t>& sizes) {
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::vector<unsigned char> out(sizes[i]), in(sizes[i]);
    fill(out, i);
    ASSERT_TRUE(link.ca->post_recv(in.data(), in.size(), i).is_ok());
    ASSERT_TRUE(link.cb->post_send(out.data(), out.size(), i).is_ok());
    ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 1 && link.done_b.size() == 1; }));
    ASSERT_TRUE(link.done_a[0].status.is_ok()) << link.done_a[0].status.message();
    ASSERT_TRUE(link.done_b[0].status.is_ok()) << link.done_b[0].status.message();
    EXPECT_TRUE(check(in.data(), sizes[i], i)) << sizes[i] << " bytes differ";
    link.done_a.clear();
    link.done_b.clear();
  }
}

// Posts every size at once (the ring is not empty between them), then checks bytes and order.
void transfer_all_at_once(Link& link, const std::vector<size_t>& sizes) {
  std::vector<std::vector<unsigned char>> out(sizes.size()), in(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    out[i].resize(sizes[i]);
    fill(out[i], i + 7);
    in[i].assign(sizes[i], 0);
    ASSERT_TRUE(link.ca->post_recv(in[i].data(), in[i].size(), i).is_ok());
    ASSERT_TRUE(link.cb->post_send(out[i].data(), out[i].size(), i).is_ok());
  }
  ASSERT_TRUE(link.drive([&] { return link.done_a.size() == sizes.size() && link.done_b.size() == sizes.size(); }));
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(link.done_a[i].status.is_ok()) << link.done_a[i].status.message();
    EXPECT_EQ(link.done_a[i].cookie, i);
    EXPECT_TRUE(check(in[i].data(), sizes[i], i + 7)) << "message " << i << " of " << sizes[i] << " bytes differs";
  }
  link.done_a.clear();
  link.done_b.clear();
}

TEST(ShmRingBytes, ConnectionsUseTheConfiguredRingOnBothEnds) {
  for (size_t ring : {size_t{64} << 10, size_t{1} << 20}) {
    TransportOptions o;
    o.secret = secret("shm transport test secret 0123456789");
    o.env.shm_ring_bytes = ring;
    Link link;
    ASSERT_TRUE(make_link("shm", o, o, link).is_ok());
    const std::string want = "rings of " + std::to_string(ring >> 10) + " KiB per direction";
    EXPECT_NE(link.a->describe().find(want), std::string::npos) << link.a->describe();
    EXPECT_NE(link.b->describe().find(want), std::string::npos) << link.b->describe();
    // Larger than the ring, and not a multiple of its chunks: it streams through, wrapping.
    send_each(link, {ring - 1, ring, 3 * ring + 17, 5u << 20});
  }
}

// A fresh connection runs as fast as a warm one: its rings are mapped in both processes when
// it is made, not page by page as the first lap of messages touches them (a fault per page on
// each side, which made a communicator's first few hundred small operations several times
// slower than later ones). One lap of 4 KiB messages, buffers reused, counts this process's
// page faults: both ends live here, so a ring faulted in by use costs at least one per page.
TEST(ShmRing, AFreshConnectionsFirstLapTakesNoPageFaults) {
  TransportOptions o;
  o.secret = secret("shm transport test secret 0123456789");
  Link link;
  ASSERT_TRUE(make_link("shm", o, o, link).is_ok());
  const size_t msg = 4096, laps_msgs = o.env.shm_ring_bytes / msg + 8;
  std::vector<unsigned char> out(msg), in(msg);
  fill(out, 3);
  link.done_a.reserve(2);
  link.done_b.reserve(2);
  auto one = [&](size_t i) {
    ASSERT_TRUE(link.ca->post_recv(in.data(), in.size(), i).is_ok());
    ASSERT_TRUE(link.cb->post_send(out.data(), out.size(), i).is_ok());
    ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 1 && link.done_b.size() == 1; }));
    ASSERT_TRUE(link.done_a[0].status.is_ok()) << link.done_a[0].status.message();
    link.done_a.clear();
    link.done_b.clear();
  };
  one(0);  // whatever a first message sets up once
  rusage before{}, after{};
  getrusage(RUSAGE_SELF, &before);
  for (size_t i = 1; i <= laps_msgs && !::testing::Test::HasFatalFailure(); ++i) one(i);
  getrusage(RUSAGE_SELF, &after);
  EXPECT_TRUE(check(in.data(), msg, 3));
  const long faults = after.ru_minflt - before.ru_minflt;
  const long ring_pages = static_cast<long>(o.env.shm_ring_bytes / 4096);
  EXPECT_LT(faults, ring_pages / 8) << faults << " page faults in one lap of a ring of " << ring_pages
                                    << " pages: the rings were not mapped when the connection was made";
}

// Small messages that find the ring empty reuse its first lines rather than walking the whole
// ring (shm_layout.h, the wrap record): one message at a time, each read before the next, never
// gets past the first two large records of a lap (and a small one before them). Mixed sizes, a message too large to go back to the
// start and back-to-back messages (the ring not empty) still arrive whole and in order.
TEST(ShmRing, SmallMessagesOneAtATimeReuseTheStartOfTheRing) {
  TransportOptions o;
  o.secret = secret("shm transport test secret 0123456789");
  Link link;
  ASSERT_TRUE(make_link("shm", o, o, link).is_ok());
  auto* sender = dynamic_cast<shm::ShmConnection*>(link.cb.get());
  ASSERT_NE(sender, nullptr);
  const size_t msg = 4096, record = shm::record_bytes(msg);
  for (size_t i = 0; i < 3 * o.env.shm_ring_bytes / record && !::testing::Test::HasFatalFailure(); ++i) {
    send_each(link, {i % 3 == 0 ? 1 : msg});
    ASSERT_LE(sender->lap_offset(), 2 * record + shm::record_bytes(1))
        << "message " << i << " went to byte " << sender->lap_offset() << " of the lap: small messages walk the whole ring";
  }
  send_each(link, {1, 200 << 10, 3, msg, 0, (1u << 20) + 5, msg});
  transfer_all_at_once(link, {msg, 1, msg, 64, msg, 0, msg});
}

// A small message one at a time, the usual case, is written into the ring and read out of it in
// one piece each, header and payload together (no queue entry, no piecewise walk), two-part
// messages too; one larger than a piece of the walk (64 KiB) is not, and all arrive intact.
TEST(ShmRing, SmallMessagesOneAtATimeGoInAndOutWhole) {
  TransportOptions o;
  o.secret = secret("shm transport test secret 0123456789");
  Link link;
  ASSERT_TRUE(make_link("shm", o, o, link).is_ok());
  auto* sender = dynamic_cast<shm::ShmConnection*>(link.cb.get());
  auto* receiver = dynamic_cast<shm::ShmConnection*>(link.ca.get());
  ASSERT_NE(sender, nullptr);
  ASSERT_NE(receiver, nullptr);
  const size_t msgs = 3 * o.env.shm_ring_bytes / 4096;  // past the ring's end, three times
  for (size_t i = 0; i < msgs && !::testing::Test::HasFatalFailure(); ++i) {
    send_each(link, {i % 3 == 0 ? size_t{1} : i % 3 == 1 ? size_t{4096} : size_t{0}});
  }
  EXPECT_EQ(sender->whole_written(), msgs);
  EXPECT_EQ(receiver->whole_read(), msgs);
  std::vector<unsigned char> head(64), data(4096), in(64 + 4096, 0);
  fill(head, 3);
  fill(data, 4);
  ASSERT_TRUE(link.ca->post_recv(in.data(), in.size(), 1).is_ok());
  ASSERT_TRUE(link.cb->post_send_parts(head.data(), head.size(), data.data(), data.size(), 2).is_ok());
  ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 1 && link.done_b.size() == 1; }));
  EXPECT_TRUE(std::equal(head.begin(), head.end(), in.begin()));
  EXPECT_TRUE(std::equal(data.begin(), data.end(), in.begin() + 64));
  link.done_a.clear();
  link.done_b.clear();
  EXPECT_EQ(sender->whole_written(), msgs + 1);
  EXPECT_EQ(receiver->whole_read(), msgs + 1);
  send_each(link, {(64u << 10) + 1});
  EXPECT_EQ(sender->whole_written(), msgs + 1);
  EXPECT_EQ(receiver->whole_read(), msgs + 1);
}

// A receiver polling for a message that has not come yet finds so at a glance (quiet_looks),
// and the glance still lets through what then arrives and a peer that then closes.
TEST(ShmRing, AWaitingReceiverLooksAtAGlanceAndStillSeesWhatComes) {
  TransportOptions o;
  o.secret = secret("shm transport test secret 0123456789");
  Link link;
  ASSERT_TRUE(make_link("shm", o, o, link).is_ok());
  auto* receiver = dynamic_cast<shm::ShmConnection*>(link.ca.get());
  ASSERT_NE(receiver, nullptr);
  std::vector<unsigned char> out(4096), in(4096, 0);
  fill(out, 5);
  ASSERT_TRUE(link.ca->post_recv(in.data(), in.size(), 1).is_ok());
  const uint64_t before = receiver->quiet_looks();
  for (int i = 0; i < 10; ++i) ASSERT_TRUE(link.a->poll(link.done_a, std::chrono::microseconds(0)).is_ok());
  EXPECT_GE(receiver->quiet_looks(), before + 10);
  EXPECT_TRUE(link.done_a.empty());
  ASSERT_TRUE(link.cb->post_send(out.data(), out.size(), 2).is_ok());
  ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 1 && link.done_b.size() == 1; }));
  EXPECT_TRUE(check(in.data(), in.size(), 5));
  for (const auto& [c, conn, cookie, is_send] : {std::tuple{link.done_a[0], link.ca.get(), 1u, false},
                                                  std::tuple{link.done_b[0], link.cb.get(), 2u, true}}) {
    EXPECT_TRUE(c.status.is_ok()) << c.status.message();
    EXPECT_EQ(c.connection, conn);
    EXPECT_EQ(c.cookie, cookie);
    EXPECT_EQ(c.is_send, is_send);
    EXPECT_EQ(c.bytes, out.size());
  }
  ASSERT_TRUE(link.ca->post_recv(in.data(), in.size(), 3).is_ok());
  link.cb->close();
  ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 2; }, std::chrono::seconds(10)));
  EXPECT_EQ(link.done_a[1].status.code(), ErrorCode::peer_lost) << link.done_a[1].status.message();
}

// An operation posts its receives before its sends. A receive posted while its message already
// waits must not copy it there and then: the peer may be waiting for the send that follows, and
// the copy would come first. The message is read by the next poll instead.
TEST(ShmRing, AReceivePostedOnAWaitingMessageLeavesTheCopyToThePoll) {
  TransportOptions o;
  o.secret = secret("shm transport test secret 0123456789");
  Link link;
  ASSERT_TRUE(make_link("shm", o, o, link).is_ok());
  std::vector<unsigned char> out(4096), in(4096, 0);
  fill(out, 9);
  ASSERT_TRUE(link.cb->post_send(out.data(), out.size(), 1).is_ok());
  ASSERT_TRUE(link.ca->post_recv(in.data(), in.size(), 2).is_ok());
  EXPECT_TRUE(std::all_of(in.begin(), in.end(), [](unsigned char b) { return b == 0; }))
      << "post_recv copied the waiting message before returning";
  ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 1 && link.done_b.size() == 1; }));
  ASSERT_TRUE(link.done_a[0].status.is_ok()) << link.done_a[0].status.message();
  EXPECT_TRUE(check(in.data(), in.size(), 9));
}

// ... and the poll after it takes that message even when it also has a finished send to return
// (a small send completes as it is posted): both completions come from one poll, so an
// operation that posted its receive and then its send learns of both in one pass.
TEST(ShmRing, OnePollReturnsAFinishedSendAndAMessageThatArrived) {
  TransportOptions o;
  o.secret = secret("shm transport test secret 0123456789");
  Link link;
  ASSERT_TRUE(make_link("shm", o, o, link).is_ok());
  std::vector<unsigned char> to_a(4096), to_b(4096), in(4096, 0);
  fill(to_a, 4);
  ASSERT_TRUE(link.cb->post_send(to_a.data(), to_a.size(), 1).is_ok());  // waits in a's ring
  ASSERT_TRUE(link.ca->post_recv(in.data(), in.size(), 2).is_ok());
  ASSERT_TRUE(link.ca->post_send(to_b.data(), to_b.size(), 3).is_ok());  // finished as posted
  std::vector<Completion> got;
  ASSERT_TRUE(link.a->poll(got, 0us).is_ok());
  ASSERT_EQ(got.size(), 2u) << "the poll returned the send's completion without taking the message";
  for (const Completion& c : got) EXPECT_TRUE(c.status.is_ok()) << c.status.message();
  EXPECT_TRUE(check(in.data(), in.size(), 4));
}

// A header in front of data goes as one message without a copy to join them
// (post_send_parts, collectives/header_framing.h): the receiver gets both parts as one message,
// byte for byte and in order with plain ones, also where a record runs over the ring's end
// (many messages in flight at once make the records walk the ring). A message above
// max_parts_bytes is refused, naming the limit.
TEST(ShmRing, ATwoPartMessageArrivesAsOneMessageInOrderWithPlainOnes) {
  TransportOptions o;
  o.secret = secret("shm transport test secret 0123456789");
  Link link;
  ASSERT_TRUE(make_link("shm", o, o, link).is_ok());
  const size_t max = link.cb->capabilities().max_parts_bytes;
  ASSERT_GT(max, 4096u) << "shm takes no two-part messages";
  struct Message {
    size_t head, data;  // data without a head: a plain post_send
    bool parts;
  };
  const std::vector<Message> round = {{64, 4096, true}, {0, 100, true},   {7, 0, true},       {0, 3000, false},
                                      {1, 3, true},     {64, max - 64, true}, {0, 0, false}, {33, 5, true}};
  const size_t rounds = 20;  // all in flight at once: more than the ring holds
  std::vector<std::vector<unsigned char>> whole(rounds * round.size()), in(whole.size());
  for (size_t k = 0; k < whole.size(); ++k) {
    const Message& m = round[k % round.size()];
    whole[k].resize(m.head + m.data);
    fill(whole[k], k);
    in[k].assign(whole[k].size() + 8, 0);
    ASSERT_TRUE(link.ca->post_recv(in[k].data(), in[k].size(), 1000 + k).is_ok());
    const unsigned char* p = whole[k].data();
    Status posted = m.parts ? link.cb->post_send_parts(p, m.head, p + m.head, m.data, 9000 + k)
                            : link.cb->post_send(p, m.data, 9000 + k);
    ASSERT_TRUE(posted.is_ok()) << posted.message();
  }
  ASSERT_TRUE(link.drive([&] { return link.done_a.size() == whole.size() && link.done_b.size() == whole.size(); }));
  for (size_t k = 0; k < whole.size(); ++k) {
    const Completion& got = link.done_a[k];
    ASSERT_TRUE(got.status.is_ok()) << got.status.message();
    EXPECT_EQ(got.cookie, 1000 + k) << "receives complete in order";
    EXPECT_EQ(got.bytes, whole[k].size()) << "message " << k;
    EXPECT_TRUE(check(in[k].data(), whole[k].size(), k)) << "message " << k << " differs";
    EXPECT_EQ(link.done_b[k].cookie, 9000 + k) << "sends complete in order";
    EXPECT_EQ(link.done_b[k].bytes, whole[k].size()) << "a two-part send completes with both parts' bytes";
  }
  std::vector<unsigned char> big(max + 1);
  Status refused = link.cb->post_send_parts(big.data(), 1, big.data() + 1, max, 1);
  EXPECT_EQ(refused.code(), ErrorCode::invalid_argument);
  EXPECT_NE(refused.message().find(std::to_string(max)), std::string::npos) << refused.message();
}

// Pins the calling thread to `cpu` for the scope's lifetime.
class PinnedTo {
 public:
  explicit PinnedTo(int cpu) {
    sched_getaffinity(0, sizeof saved_, &saved_);
    cpu_set_t one;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ok_ = sched_setaffinity(0, sizeof one, &one) == 0;
  }
  ~PinnedTo() { sched_setaffinity(0, sizeof saved_, &saved_); }
  bool ok() const { return ok_; }

 private:
  cpu_set_t saved_{};
  bool ok_ = false;
};

// Ranks free to share CPUs may be stacked on one. A waiter whose peer last polled on its own
// CPU must not keep spinning there (the peer is queued behind it and cannot answer): it steps
// off to another CPU it may use, or, confined to that one, sleeps; a waiter whose peer runs
// elsewhere spins its whole budget. Both ends live here; each polls from a thread
// pinned where the case needs it, with a spin budget far above the poll's timeout.
TEST(ShmWait, AWaiterStopsSpinningWhenItsPeerLastRanOnItsCpu) {
  std::vector<int> cpus = {braid::testing::usable_cpu(0)};
  ASSERT_GE(cpus[0], 0);
  if (braid::testing::usable_cpu(1) >= 0) cpus.push_back(braid::testing::usable_cpu(1));
  TransportOptions o;
  o.secret = secret("shm transport test secret 0123456789");
  o.env.spin_us = 10'000'000;
  Link link;
  ASSERT_TRUE(make_link("shm", o, o, link).is_ok());
  auto* a = dynamic_cast<shm::ShmTransport*>(link.a.get());
  auto* b = dynamic_cast<shm::ShmTransport*>(link.b.get());
  ASSERT_TRUE(a != nullptr && b != nullptr);
  std::vector<Completion> out;
  auto poll_on = [&](shm::ShmTransport* t, int cpu, std::chrono::microseconds timeout) {
    std::thread th([&] {
      PinnedTo pin(cpu);
      ASSERT_TRUE(pin.ok()) << "cannot pin to CPU " << cpu;
      ASSERT_TRUE(t->poll(out, timeout).is_ok());
    });
    th.join();
  };
  // b polls on the first CPU (and publishes it); a, on the same CPU, stops at once.
  poll_on(b, cpus[0], std::chrono::microseconds(2000));
  EXPECT_EQ(b->stacked_stops(), 0u) << "a had not polled yet: nothing to see";
  poll_on(a, cpus[0], std::chrono::microseconds(20000));
  EXPECT_EQ(a->stacked_stops(), 1u) << "a spun while its peer was queued on its CPU";
  EXPECT_EQ(a->stacked_moves(), 0u) << "confined to one CPU, a has nowhere to step to";
  if (cpus.size() < 2) GTEST_SKIP() << "one usable CPU: no peer on another CPU to compare";
  // b moves to another CPU: a spins its whole poll.
  poll_on(b, cpus[1], std::chrono::microseconds(2000));
  poll_on(a, cpus[0], std::chrono::microseconds(20000));
  EXPECT_EQ(a->stacked_stops(), 1u) << "a stopped spinning though its peer last ran on another CPU";
  // b on the first CPU again; a free to use both but running on the first: it steps off to the
  // second and spins there, its mask as it was. Widening the mask lets the scheduler move the
  // thread before the poll looks (a busy machine): then nothing is stacked, and it tries again.
  poll_on(b, cpus[0], std::chrono::microseconds(2000));
  for (int attempt = 0; attempt < 20 && a->stacked_moves() == 0; ++attempt) {
    std::thread th([&] {
      PinnedTo pin(cpus[0]);
      ASSERT_TRUE(pin.ok());
      cpu_set_t two;
      CPU_ZERO(&two);
      CPU_SET(cpus[0], &two);
      CPU_SET(cpus[1], &two);
      ASSERT_EQ(sched_setaffinity(0, sizeof two, &two), 0);
      ASSERT_TRUE(a->poll(out, std::chrono::microseconds(20000)).is_ok());
      cpu_set_t now;
      ASSERT_EQ(sched_getaffinity(0, sizeof now, &now), 0);
      EXPECT_TRUE(CPU_EQUAL(&now, &two)) << "a's mask was not restored";
    });
    th.join();
  }
  // The scheduler may also bring it back within the poll's 20 ms: it then stops spinning, as it
  // steps off once per wait.
  EXPECT_GE(a->stacked_stops(), 2u);
  EXPECT_EQ(a->stacked_moves(), 1u) << "a did not step off its peer's CPU";
  EXPECT_TRUE(out.empty());
}

// The configured ring is the first size tried: where it does not fit, the halving still works.
TEST(ShmRingBytes, TooLittleMemoryForTheConfiguredRingHalvesIt) {
  TransportOptions o;
  o.secret = secret("shm transport test secret 0123456789");
  o.env.shm_ring_bytes = size_t{16} << 20;
  Link link;
  {
    FileSizeLimit limit(shm::segment_bytes(size_t{2} << 20));
    ASSERT_TRUE(make_link("shm", o, o, link).is_ok());
  }
  EXPECT_NE(link.b->describe().find("rings of 2048 KiB per direction"), std::string::npos) << link.b->describe();
  send_each(link, {(5u << 20) + 1});
}

}  // namespace
}  // namespace braid::transport::testing
