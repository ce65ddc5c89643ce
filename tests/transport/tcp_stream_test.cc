// How a tcp stream cuts the bytes it reads into frames (tcp_stream.h): small messages are read
// with their headers into an inbox, several at a time; a frame whose receive is not posted yet
// waits there; large payloads go straight into their buffers.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "common/job_secret.h"
#include "tests/transport/transport_link.h"
#include "transport/common/handshake.h"
#include "transport/common/socket_address.h"
#include "transport/tcp/engine.h"
#include "transport/tcp/tcp_stream.h"

namespace braid::transport::testing {
namespace {

using namespace std::chrono_literals;

class TcpStreamTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    for (const auto& e : transport_registry()) {
      if (e.name == GetParam() && !e.available) GTEST_SKIP() << e.name << " unavailable: " << e.unavailable_reason;
    }
    Status s = make_link(GetParam(), loopback_options(), loopback_options(), link_);
    ASSERT_TRUE(s.is_ok()) << s.message();
  }
  Link link_;
};

constexpr size_t kInboxPayload = tcp::TcpStream::kInboxBytes - tcp::kFrameHeaderBytes;

// Every message is sent (and has reached a's socket) before any receive is posted; receives are
// then posted one at a time, each sized to its message, so the inbox holds frames whose
// receives are not posted yet, frames cut at every place, and a large one between them.
TEST_P(TcpStreamTest, FramesWaitInTheInboxForTheirReceives) {
  const std::vector<size_t> sizes = {8, 0, 1, 100, kInboxPayload, kInboxPayload + 1, 3000, 7, (300 << 10) + 3,
                                     5,  8, 4096, 31, 32, 33, 2 * kInboxPayload, 0, 12};
  std::vector<std::vector<unsigned char>> out(sizes.size()), in(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    out[i].resize(sizes[i]);
    fill(out[i], i);
    in[i].assign(sizes[i], 0);
    ASSERT_TRUE(link_.cb->post_send(out[i].data(), sizes[i], i).is_ok());
  }
  // Let the bytes reach a's socket (all of them, where its buffer holds them) before a reads.
  link_.drive([&] { return link_.done_b.size() == sizes.size(); }, 2s);
  for (size_t i = 0; i < sizes.size(); ++i) {
    ASSERT_TRUE(link_.ca->post_recv(in[i].data(), in[i].size(), i).is_ok());
    ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == i + 1; }, 20s))
        << "message " << i << " of " << sizes[i] << " bytes never completed " << link_.error.message();
    const Completion& c = link_.done_a[i];
    ASSERT_TRUE(c.status.is_ok()) << "message " << i << ": " << c.status.message();
    EXPECT_EQ(c.cookie, i);
    EXPECT_EQ(c.bytes, sizes[i]);
    EXPECT_TRUE(check(in[i].data(), sizes[i], i)) << "message " << i << " of " << sizes[i] << " bytes differs";
  }
  ASSERT_TRUE(link_.drive([&] { return link_.done_b.size() == sizes.size(); }, 20s)) << link_.error.message();
  for (const Completion& c : link_.done_b) EXPECT_TRUE(c.status.is_ok()) << c.status.message();
}

// The peer sends a message and hangs up, both reaching a's socket between two of a's looks at
// it, while a has receives posted: the message lands, and the receive after it fails at once,
// naming the peer. (The epoll engine took a short read for a drained socket; the hang-up's edge
// had come with the data, so the EOF behind it went unread and the second receive waited for
// the keepalive, or forever.)
TEST_P(TcpStreamTest, AHangUpBehindTheLastMessageIsSeen) {
  uint64_t last = 42, got = 0, more = 0;
  ASSERT_TRUE(link_.ca->post_recv(&got, sizeof got, 1).is_ok());
  ASSERT_TRUE(link_.ca->post_recv(&more, sizeof more, 2).is_ok());
  std::vector<Completion> out;
  ASSERT_TRUE(link_.a->poll(out, 0ms).is_ok());  // a finds nothing to read yet
  ASSERT_TRUE(out.empty());
  ASSERT_TRUE(link_.cb->post_send(&last, sizeof last, 1).is_ok());
  for (auto end = std::chrono::steady_clock::now() + 20s; link_.done_b.empty() && std::chrono::steady_clock::now() < end;) {
    ASSERT_TRUE(link_.b->poll(link_.done_b, 1ms).is_ok());  // b alone: a must not look meanwhile
  }
  ASSERT_EQ(link_.done_b.size(), 1u);
  link_.cb->close();
  std::this_thread::sleep_for(100ms);  // the message and the FIN are in a's socket
  ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == 2; }, 5s))
      << "the hang-up was not noticed; completed " << link_.done_a.size() << " of 2";
  EXPECT_TRUE(link_.done_a[0].status.is_ok()) << link_.done_a[0].status.message();
  EXPECT_EQ(got, last);
  EXPECT_EQ(link_.done_a[1].status.code(), ErrorCode::peer_lost) << link_.done_a[1].status.message();
  EXPECT_NE(link_.done_a[1].status.message().find("rank 1 (127.0.0.1:"), std::string::npos)
      << link_.done_a[1].status.message();
}

// A peer whose frames skip ahead of the message order (here: message 255 first, on a
// connection of one socket) is answered with a protocol error at once. It used to park the
// frame until a receive for message 255 was posted, leaving the socket unread behind it, so
// the receives before it waited for nothing and a hang-up went unnoticed.
TEST_P(TcpStreamTest, AFrameOutOfOrderIsAProtocolError) {
  auto a = create_transport(GetParam(), loopback_options());
  ASSERT_TRUE(a.is_ok());
  auto addr = a.value()->listen();
  ASSERT_TRUE(addr.is_ok());
  auto to = transport::SocketAddress::parse(addr.value());
  ASSERT_TRUE(to.is_ok());
  auto fd = transport::connect_with_retry(to.value(), Deadline::after(20s));
  ASSERT_TRUE(fd.is_ok());
  Result<transport::HostIdentity> shook = Status(ErrorCode::internal, "not run");
  std::thread peer([&] {
    transport::Handshake hello;
    hello.comm_id = 7, hello.from_rank = 1, hello.to_rank = 0;
    shook = transport::connector_handshake(fd.value().get(), hello, auth::JobSecret(), Deadline::after(20s));
  });
  auto c = a.value()->accept(PeerIdentity{7, 0, 1}, Deadline::after(20s));
  peer.join();
  ASSERT_TRUE(shook.is_ok()) << shook.status().message();
  ASSERT_TRUE(c.is_ok()) << c.status().message();
  tcp::FrameHeader h;
  h.seq = 255, h.total_len = 8, h.slice_len = 8;
  unsigned char bytes[tcp::kFrameHeaderBytes + 8] = {};
  std::memcpy(bytes, &h, sizeof h);
  ASSERT_TRUE(transport::write_exact(fd.value().get(), bytes, sizeof bytes, Deadline::after(20s)).is_ok());
  uint64_t got = 0;
  ASSERT_TRUE(c.value()->post_recv(&got, sizeof got, 1).is_ok());
  std::vector<Completion> out;
  for (auto end = std::chrono::steady_clock::now() + 5s; out.empty() && std::chrono::steady_clock::now() < end;) {
    ASSERT_TRUE(a.value()->poll(out, 10ms).is_ok());
  }
  ASSERT_EQ(out.size(), 1u) << "the receive before the stray frame never ended";
  EXPECT_EQ(out[0].status.code(), ErrorCode::protocol) << out[0].status.message();
  EXPECT_NE(out[0].status.message().find("frame of message 255 out of order on this socket (its first frame"),
            std::string::npos)
      << out[0].status.message();
}

// A small receive posted for a message that turns out larger: that receive fails, the message
// is skipped whether its bytes sit in the inbox or still in the socket, and the next one lands.
TEST_P(TcpStreamTest, AnOversizeMessageIsSkippedFromTheInboxToo) {
  const std::vector<size_t> sizes = {20, 5000, (100 << 10) + 1, 9};
  std::vector<std::vector<unsigned char>> out(sizes.size());
  for (size_t i = 0; i < sizes.size(); ++i) {
    out[i].resize(sizes[i]);
    fill(out[i], i);
    ASSERT_TRUE(link_.cb->post_send(out[i].data(), sizes[i], i).is_ok());
  }
  std::vector<unsigned char> first(20), too_small(16), also_too_small(64), last(9);
  ASSERT_TRUE(link_.ca->post_recv(first.data(), first.size(), 0).is_ok());
  ASSERT_TRUE(link_.ca->post_recv(too_small.data(), too_small.size(), 1).is_ok());
  ASSERT_TRUE(link_.ca->post_recv(also_too_small.data(), also_too_small.size(), 2).is_ok());
  ASSERT_TRUE(link_.ca->post_recv(last.data(), last.size(), 3).is_ok());
  ASSERT_TRUE(link_.drive([&] { return link_.done_a.size() == 4; }, 20s)) << link_.error.message();
  EXPECT_TRUE(link_.done_a[0].status.is_ok());
  EXPECT_TRUE(check(first.data(), 20, 0));
  EXPECT_EQ(link_.done_a[1].status.code(), ErrorCode::protocol) << link_.done_a[1].status.message();
  EXPECT_EQ(link_.done_a[2].status.code(), ErrorCode::protocol) << link_.done_a[2].status.message();
  EXPECT_TRUE(link_.done_a[3].status.is_ok()) << link_.done_a[3].status.message();
  EXPECT_TRUE(check(last.data(), 9, 3));
}

// The engines' slot table: a freed slot is reused, and a slot a stale completion names (freed,
// or never handed out) finds no stream. The table never dereferences what it holds, so
// addresses of plain objects stand in for streams.
TEST(StreamSlotsTest, ReusesFreedSlotsAndFindsNothingInAFreeOne) {
  int a = 0, b = 0, c = 0, d = 0;
  auto* sa = reinterpret_cast<tcp::TcpStream*>(&a);
  auto* sb = reinterpret_cast<tcp::TcpStream*>(&b);
  auto* sc = reinterpret_cast<tcp::TcpStream*>(&c);
  auto* sd = reinterpret_cast<tcp::TcpStream*>(&d);
  tcp::StreamSlots slots;
  EXPECT_EQ(slots.at(0), nullptr);
  const uint32_t ia = slots.add(sa), ib = slots.add(sb), ic = slots.add(sc);
  EXPECT_NE(ia, ib);
  EXPECT_NE(ib, ic);
  EXPECT_EQ(slots.count(), 3u);
  EXPECT_EQ(slots.at(ib), sb);
  slots.remove(ib);
  EXPECT_EQ(slots.at(ib), nullptr);  // a completion that arrives for a removed stream
  EXPECT_EQ(slots.count(), 2u);
  EXPECT_EQ(slots.add(sd), ib);       // reused: the table does not grow
  EXPECT_EQ(slots.all().size(), 3u);
  EXPECT_EQ(slots.at(ib), sd);
  EXPECT_EQ(slots.at(ia), sa);
  EXPECT_EQ(slots.at(ic), sc);
  EXPECT_EQ(slots.at(1000), nullptr);
}

INSTANTIATE_TEST_SUITE_P(Engines, TcpStreamTest, ::testing::Values("tcp", "tcp-poll"), [](const auto& info) {
  return std::string(info.param == "tcp" ? "io_uring" : "epoll");
});

}  // namespace
}  // namespace braid::transport::testing
