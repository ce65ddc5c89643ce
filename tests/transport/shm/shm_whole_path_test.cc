// The shm connection's short paths for a small message (transport/shm/shm_connection.h): a send
// with nothing queued ahead goes straight into the ring, a record that has wholly arrived goes
// to its receive from the poll's first look, and the queue both paths skip. Each test names what
// it would catch: a short path taken where it must not be (order), or not taken where it should.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "common/job_secret.h"
#include "tests/transport/transport_link.h"
#include "transport/shm/fifo.h"
#include "transport/shm/shm_connection.h"
#include "transport/shm/shm_layout.h"

namespace braid::transport::testing {
namespace {

// Both ends in this process, rings of `ring_bytes`, large messages always through the ring.
void join(Link& link, size_t ring_bytes) {
  TransportOptions o;
  auto secret = auth::JobSecret::from_text("shm whole path test secret 0123456789", "test");
  ASSERT_TRUE(secret.is_ok()) << secret.status().message();
  o.secret = secret.value();
  o.env.shm_ring_bytes = ring_bytes;
  o.env.shm_cma = false;
  o.env.shm_cma_auto = false;
  ASSERT_TRUE(make_link("shm", o, o, link).is_ok());
}

shm::ShmConnection& shm_end(const std::unique_ptr<Connection>& c) { return dynamic_cast<shm::ShmConnection&>(*c); }

// A send queued behind a full ring is ahead of any later one: a small send posted while it waits
// must not go straight into the room the reader has just freed (it would land inside the queued
// message's record), but behind it, and both arrive whole and in order.
TEST(ShmWholePath, ASmallSendBehindAQueuedOneWaitsItsTurn) {
  Link link;
  const size_t ring = size_t{64} << 10;
  join(link, ring);
  shm::ShmConnection& sender = shm_end(link.cb);
  std::vector<unsigned char> big(ring + ring / 2), small(8), in_big(big.size(), 0), in_small(small.size(), 0);
  fill(big, 1);
  fill(small, 2);
  ASSERT_TRUE(link.cb->post_send(big.data(), big.size(), 1).is_ok());  // fills the ring, the rest waits
  ASSERT_TRUE(link.ca->post_recv(in_big.data(), in_big.size(), 10).is_ok());
  ASSERT_TRUE(link.ca->post_recv(in_small.data(), in_small.size(), 11).is_ok());
  ASSERT_TRUE(link.a->poll(link.done_a, std::chrono::microseconds(0)).is_ok());  // frees the ring
  ASSERT_TRUE(link.done_a.empty()) << "the large message arrived before its sender wrote all of it";
  const uint64_t whole = sender.whole_written();
  ASSERT_TRUE(link.cb->post_send(small.data(), small.size(), 2).is_ok());
  EXPECT_EQ(sender.whole_written(), whole) << "the small send went into the ring ahead of a queued one";
  ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 2 && link.done_b.size() == 2; }));
  ASSERT_TRUE(link.done_a[0].status.is_ok()) << link.done_a[0].status.message();
  ASSERT_TRUE(link.done_a[1].status.is_ok()) << link.done_a[1].status.message();
  EXPECT_EQ(link.done_a[0].cookie, 10u);
  EXPECT_EQ(link.done_a[0].bytes, big.size());
  EXPECT_TRUE(check(in_big.data(), big.size(), 1)) << "the queued message was overwritten";
  EXPECT_EQ(link.done_a[1].cookie, 11u);
  EXPECT_EQ(link.done_a[1].bytes, small.size());
  EXPECT_TRUE(check(in_small.data(), small.size(), 2));
  EXPECT_EQ(link.done_b[0].cookie, 1u) << "sends complete in order";
  EXPECT_EQ(link.done_b[1].cookie, 2u) << "sends complete in order";
}

// One small message at a time, the usual case, also after the wrap record that sends the reader
// back to the start of the ring before almost every one (shm_layout.h): the receiving end takes
// each from the poll's first look, never through the general walk.
TEST(ShmWholePath, OneMessageAtATimeIsTakenWithoutTheGeneralWalk) {
  Link link;
  const size_t ring = size_t{64} << 10;
  join(link, ring);
  shm::ShmConnection& receiver = shm_end(link.ca);
  const uint64_t walks = receiver.walks(), whole = receiver.whole_read();
  const size_t msgs = 3 * ring / 4096;  // past the ring's end three times, were they not wrapped
  std::vector<unsigned char> head(64), in(64 + 4096);
  fill(head, 9);
  for (size_t i = 0; i < msgs; ++i) {
    std::vector<unsigned char> data(i % 3 == 0 ? 8 : i % 3 == 1 ? 4096 : 0);
    fill(data, i);
    ASSERT_TRUE(link.ca->post_recv(in.data(), in.size(), i).is_ok());
    const Status posted = i % 2 == 0 ? link.cb->post_send_parts(head.data(), head.size(), data.data(), data.size(), i)
                                     : link.cb->post_send(data.data(), data.size(), i);
    ASSERT_TRUE(posted.is_ok()) << posted.message();
    ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 1 && link.done_b.size() == 1; }));
    ASSERT_TRUE(link.done_a[0].status.is_ok()) << link.done_a[0].status.message();
    const size_t at = i % 2 == 0 ? head.size() : 0;
    EXPECT_EQ(link.done_a[0].bytes, at + data.size());
    EXPECT_TRUE(check(in.data() + at, data.size(), i)) << "message " << i << " differs";
    link.done_a.clear();
    link.done_b.clear();
  }
  EXPECT_EQ(receiver.whole_read(), whole + msgs);
  EXPECT_EQ(receiver.walks(), walks) << "messages one at a time went through the general walk";
}

// Two small messages sent one right behind the other, after the reader emptied the ring: the
// first may go back to the start of the ring (a wrap record), and must leave room there for the
// second, which the reader has not made yet (it has not passed the wrap record). Both go whole,
// none is queued, and both arrive in order.
TEST(ShmWholePath, TwoSmallMessagesInARowBothGoWholeAfterTheRingEmptied) {
  Link link;
  join(link, size_t{64} << 10);
  shm::ShmConnection& sender = shm_end(link.cb);
  std::vector<unsigned char> one(100), two(8), in_one(one.size()), in_two(two.size());
  for (size_t round = 0; round < 20; ++round) {
    fill(one, 2 * round);
    fill(two, 2 * round + 1);
    ASSERT_TRUE(link.ca->post_recv(in_one.data(), in_one.size(), 1).is_ok());
    ASSERT_TRUE(link.cb->post_send(one.data(), one.size(), 1).is_ok());  // read at once: the ring empties
    ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 1; }));
    link.done_a.clear();
    const uint64_t whole = sender.whole_written();
    ASSERT_TRUE(link.cb->post_send(one.data(), one.size(), 2).is_ok());
    ASSERT_TRUE(link.cb->post_send(two.data(), two.size(), 3).is_ok());
    EXPECT_EQ(sender.whole_written(), whole + 2) << "round " << round << ": the second message was queued";
    ASSERT_TRUE(link.ca->post_recv(in_one.data(), in_one.size(), 4).is_ok());
    ASSERT_TRUE(link.ca->post_recv(in_two.data(), in_two.size(), 5).is_ok());
    ASSERT_TRUE(link.drive([&] { return link.done_a.size() == 2 && link.done_b.size() == 3; }));
    EXPECT_EQ(link.done_a[0].cookie, 4u);
    EXPECT_EQ(link.done_a[1].cookie, 5u);
    EXPECT_TRUE(check(in_one.data(), one.size(), 2 * round));
    EXPECT_TRUE(check(in_two.data(), two.size(), 2 * round + 1));
    link.done_a.clear();
    link.done_b.clear();
  }
}

// Small messages that find the ring not empty walk through it (the reader here stays one message
// behind). One whose record would run over the ring's end goes whole to the start of the next
// lap, behind a wrap record, so that both ends move every one in one piece; all arrive in order.
TEST(ShmWholePath, ARecordThatWouldRunOverTheRingsEndStartsTheNextLapWhole) {
  Link link;
  const size_t ring = size_t{64} << 10;
  join(link, ring);
  shm::ShmConnection& sender = shm_end(link.cb);
  shm::ShmConnection& receiver = shm_end(link.ca);
  const size_t size = 3000, msgs = 3 * ring / shm::record_bytes(size) + 2;
  ASSERT_NE(ring % shm::record_bytes(size), 0u) << "the records must not meet the ring's end exactly";
  std::vector<std::vector<unsigned char>> out(msgs, std::vector<unsigned char>(size)), in(msgs);
  for (size_t i = 0; i < msgs; ++i) {
    fill(out[i], i);
    in[i].assign(size, 0);
  }
  ASSERT_TRUE(link.cb->post_send(out[0].data(), size, 0).is_ok());
  for (size_t i = 0; i < msgs; ++i) {
    if (i + 1 < msgs) {
      ASSERT_TRUE(link.cb->post_send(out[i + 1].data(), size, i + 1).is_ok());
    }
    ASSERT_TRUE(link.ca->post_recv(in[i].data(), size, i).is_ok());
    ASSERT_TRUE(link.drive([&] { return link.done_a.size() == i + 1; }));
  }
  ASSERT_TRUE(link.drive([&] { return link.done_b.size() == msgs; }));
  for (size_t i = 0; i < msgs; ++i) {
    ASSERT_TRUE(link.done_a[i].status.is_ok()) << link.done_a[i].status.message();
    EXPECT_EQ(link.done_a[i].cookie, i) << "receives complete in order";
    EXPECT_TRUE(check(in[i].data(), size, i)) << "message " << i << " differs";
    EXPECT_EQ(link.done_b[i].cookie, i) << "sends complete in order";
  }
  EXPECT_EQ(sender.whole_written(), msgs) << "a record ran over the ring's end in two pieces";
  EXPECT_EQ(receiver.whole_read(), msgs);
}

// The queue keeps its order through growth while its entries wrap around its array, and reports
// its size throughout.
TEST(ShmFifo, KeepsOrderThroughGrowthAndWrap) {
  shm::Fifo<uint64_t> q(4);
  uint64_t next_in = 0, next_out = 0;
  for (int round = 0; round < 50; ++round) {
    for (int k = 0; k < round % 7 + 1; ++k) q.push_back(next_in++);
    for (int k = 0; k < round % 5 && !q.empty(); ++k) {
      ASSERT_EQ(q.front(), next_out) << "round " << round;
      q.pop_front();
      ++next_out;
    }
    ASSERT_EQ(q.size(), next_in - next_out);
    for (size_t i = 0; i < q.size(); ++i) ASSERT_EQ(q[i], next_out + i);
  }
  while (!q.empty()) {
    ASSERT_EQ(q.front(), next_out++);
    q.pop_front();
  }
  EXPECT_EQ(next_out, next_in);
  q.push_back(7);
  q.clear();
  EXPECT_TRUE(q.empty());
}

}  // namespace
}  // namespace braid::transport::testing
