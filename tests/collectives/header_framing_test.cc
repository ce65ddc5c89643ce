// HeaderFraming on a real inproc link: two ranks of one process, rank 0 sending its first message
// to rank 1. Each rank's completions are handed back to its framing as the executor does
// (collectives/executor.cc): a header-only message's to on_header_completion, an inline first
// receive's to finish_inline_recv.
#include "collectives/header_framing.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/job_secret.h"
#include "tests/transport/transport_link.h"
#include "transport/inproc/inproc_transport.h"

namespace braid::collectives {
namespace {

using transport::Completion;
using transport::testing::Link;

constexpr size_t kHeaderBytes = 24;
constexpr size_t kNone = HeaderFraming::kNone;
// The schedule of every case has one step, step 0: rank 0 sends it, rank 1 receives it.
constexpr size_t kStep = 0;
constexpr uint64_t kDataCookie = 100;  // step 0's
constexpr uint64_t kHeaderCookie = 200;  // a header-only message's, either way

using Header = std::array<unsigned char, kHeaderBytes>;

Header header(unsigned char seed) {
  Header h;
  for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<unsigned char>(seed + 3 * i);
  return h;
}

// What one call of the check saw.
struct CheckCall {
  int peer;
  std::vector<unsigned char> header;  // the first kHeaderBytes that arrived (fewer if fewer came)
  size_t bytes;
};

// One rank: its end of the link, its framing, and the executor's bookkeeping around it.
struct Rank {
  int rank = 0;
  transport::Connection* conn = nullptr;
  std::vector<Completion>* done = nullptr;  // the link's list for this rank's transport
  size_t taken = 0;                         // completions of `done` handed to the framing
  size_t outstanding = 0;
  Header sends{};    // what header_for() returns
  Header expects{};  // what the check accepts from the peer
  std::vector<CheckCall> checks;
  std::vector<Status> results;  // of each completion, as the framing returned it
  std::optional<HeaderFraming> framing;
  size_t expected = 0;  // bytes of the first receive

  int peer() const { return 1 - rank; }

  // The schedule's shape: rank 0 only sends to rank 1, rank 1 only receives from rank 0.
  void frame(bool reverse) {
    std::vector<size_t> first_send(2, kNone), first_recv(2, kNone);
    (rank == 0 ? first_send : first_recv)[static_cast<size_t>(peer())] = kStep;
    source.r = this;
    framing.emplace(kHeaderBytes, source, reverse, first_send, first_recv);
  }
  // Sends `sends`, accepts `expects` and records every check.
  struct Source final : HeaderSource {
    const unsigned char* header_for(int) const override { return r->sends.data(); }
    Status check(int from, const unsigned char* data, size_t bytes, const Status& status) const override {
      if (!status.is_ok()) return status;
      const size_t n = std::min(bytes, kHeaderBytes);
      r->checks.push_back({from, std::vector<unsigned char>(data, data + n), bytes});
      if (bytes < kHeaderBytes || std::memcmp(data, r->expects.data(), kHeaderBytes) != 0) {
        return Status(ErrorCode::mismatch, "rank " + std::to_string(r->rank) + ": header from rank " +
                                               std::to_string(from) + " differs");
      }
      return Status::ok();
    }
    Rank* r = nullptr;  // set by frame()
  } source;

  // Posts the header-only replies where the executor would: once, before anything else.
  void post_reverse_if_pending() {
    if (!framing->reverse_pending()) return;
    std::vector<transport::Connection*> peers(2, nullptr);
    peers[static_cast<size_t>(peer())] = conn;
    auto cookie = [](size_t, bool) { return kHeaderCookie; };
    ASSERT_TRUE(framing->post_reverse(peers, cookie, outstanding).is_ok());
  }

  // Hands the completions not yet taken to the framing, as Executor::on_completion does.
  void take() {
    auto where = [this] { return "rank " + std::to_string(rank) + ": "; };
    for (; taken < done->size(); ++taken) {
      const Completion& c = (*done)[taken];
      if (c.cookie == kHeaderCookie) {
        bool unexpected = false;
        results.push_back(framing->on_header_completion(c, static_cast<size_t>(peer()), c.is_send, &unexpected,
                                                        outstanding, where));
        EXPECT_FALSE(unexpected) << "rank " << rank << ": a header completion the framing did not post";
      } else if (!c.is_send && framing->inline_recv(peer(), kStep)) {
        --outstanding;
        size_t wrong_size = kNone;
        results.push_back(framing->finish_inline_recv(peer(), c, expected, &wrong_size, where));
        EXPECT_EQ(wrong_size, kNone) << "rank " << rank;
      } else {
        --outstanding;
        results.push_back(c.status);
        if (!c.is_send) {
          EXPECT_EQ(c.bytes, expected) << "rank " << rank;
        }
      }
    }
  }
};

class HeaderFramingTest : public ::testing::Test {
 protected:
  // A fresh link of `transport` and two fresh ranks, both sending and expecting header(7).
  void start(const char* transport = "inproc") {
    link_.reset();  // its connections go before its transports, and both before the fabric
    fabric_ = std::make_unique<transport::inproc::Fabric>();
    link_ = std::make_unique<Link>();
    transport::TransportOptions o = transport::testing::loopback_options();
    o.inproc_fabric = fabric_.get();
    auto secret = auth::JobSecret::from_text("header framing test secret 0123456789", "test");
    ASSERT_TRUE(secret.is_ok()) << secret.status().message();
    o.secret = secret.value();
    Status s = transport::testing::make_link(transport, o, o, *link_);
    ASSERT_TRUE(s.is_ok()) << s.message();
    sender_ = Rank{};
    sender_.rank = 0;  // the accepting end is rank 0
    sender_.conn = link_->ca.get();
    sender_.done = &link_->done_a;
    receiver_ = Rank{};
    receiver_.rank = 1;
    receiver_.conn = link_->cb.get();
    receiver_.done = &link_->done_b;
    sender_.sends = sender_.expects = receiver_.sends = receiver_.expects = header(7);
  }

  void frame(bool reverse) {
    sender_.frame(reverse);
    receiver_.frame(reverse);
  }

  // Posts rank 0's first message (`out`) and rank 1's receive of it into `land` (out.size()
  // bytes), with the header-only replies first where they are pending. may_keep: as a reducing
  // step posts it (inline data may stay where it arrived).
  void post(const std::vector<unsigned char>& out, std::byte* land, bool may_keep = false) {
    ASSERT_NO_FATAL_FAILURE(sender_.post_reverse_if_pending());
    ASSERT_NO_FATAL_FAILURE(receiver_.post_reverse_if_pending());
    receiver_.expected = out.size();
    ASSERT_TRUE(receiver_.framing
                    ->post_first_recv(*receiver_.conn, sender_.rank, land, out.size(), kDataCookie, kHeaderCookie,
                                      receiver_.outstanding, may_keep)
                    .is_ok());
    ASSERT_TRUE(sender_.framing
                    ->post_first_send(*sender_.conn, receiver_.rank, reinterpret_cast<const std::byte*>(out.data()),
                                      out.size(), kDataCookie, kHeaderCookie, sender_.outstanding)
                    .is_ok());
  }

  // Polls both ends, handing completions to the framings, until neither has one outstanding.
  void finish() {
    bool quiet = link_->drive(
        [&] {
          sender_.take();
          receiver_.take();
          return sender_.outstanding == 0 && receiver_.outstanding == 0;
        },
        std::chrono::seconds(20));
    ASSERT_TRUE(quiet) << "still outstanding: rank 0 " << sender_.outstanding << ", rank 1 " << receiver_.outstanding
                       << "; " << link_->error.message();
    ASSERT_TRUE(link_->error.is_ok()) << link_->error.message();
    EXPECT_EQ(sender_.framing->ops(), 0u);
    EXPECT_EQ(receiver_.framing->ops(), 0u);
  }

  // Sends one plain message from rank 1 to rank 0 and says whether rank 0 got exactly it: nothing
  // else was left on the way (a header-only message would be taken first).
  bool next_message_is_plain() {
    const std::array<unsigned char, 5> probe{'p', 'r', 'o', 'b', 'e'};
    std::vector<unsigned char> in(kHeaderBytes + 64, 0);
    const size_t a = link_->done_a.size(), b = link_->done_b.size();
    EXPECT_TRUE(sender_.conn->post_recv(in.data(), in.size(), 900).is_ok());
    EXPECT_TRUE(receiver_.conn->post_send(probe.data(), probe.size(), 901).is_ok());
    if (!link_->drive([&] { return link_->done_a.size() == a + 1 && link_->done_b.size() == b + 1; },
                     std::chrono::seconds(20))) {
      ADD_FAILURE() << "the probe did not arrive";
      return false;
    }
    const Completion& c = link_->done_a.back();
    sender_.taken = link_->done_a.size();
    receiver_.taken = link_->done_b.size();
    return c.status.is_ok() && c.bytes == probe.size() && std::memcmp(in.data(), probe.data(), probe.size()) == 0;
  }

  std::unique_ptr<transport::inproc::Fabric> fabric_;
  std::unique_ptr<Link> link_;
  Rank sender_, receiver_;
};

std::vector<unsigned char> message(size_t bytes, uint64_t seq) {
  std::vector<unsigned char> v(bytes);
  transport::testing::fill(v, seq);
  return v;
}

// Where a first receive lands: the message's bytes with guard bytes either side, so a write
// past `land` or short of it shows.
struct Landing {
  static constexpr size_t kGuard = 64;
  static constexpr unsigned char kUntouched = 0xee;
  explicit Landing(size_t bytes) : buf(bytes + 2 * kGuard, kUntouched), bytes(bytes) {}
  std::byte* land() { return reinterpret_cast<std::byte*>(buf.data() + kGuard); }
  bool holds(const std::vector<unsigned char>& out) const {
    return std::memcmp(buf.data() + kGuard, out.data(), bytes) == 0;
  }
  bool guards_untouched() const {
    for (size_t i = 0; i < kGuard; ++i) {
      if (buf[i] != kUntouched || buf[kGuard + bytes + i] != kUntouched) return false;
    }
    return true;
  }
  bool untouched() const {
    for (unsigned char b : buf) {
      if (b != kUntouched) return false;
    }
    return true;
  }
  std::vector<unsigned char> buf;
  size_t bytes;
};

std::vector<unsigned char> bytes_of(const Header& h) { return {h.begin(), h.end()}; }

// A receive whose data is only read (a reducing step) leaves inline data where it arrived:
// the landing area stays untouched and kept_data() holds the message, with no copy between the
// two. Data too large to come inline still lands where the receive asked.
TEST_F(HeaderFramingTest, AReceiveThatOnlyReadsItsDataKeepsInlineDataWhereItArrived) {
  for (size_t bytes : {size_t{1}, size_t{4096}, HeaderFraming::kInlineHeaderMax, HeaderFraming::kInlineHeaderMax + 1}) {
    SCOPED_TRACE("bytes " + std::to_string(bytes));
    ASSERT_NO_FATAL_FAILURE(start());
    frame(/*reverse=*/false);
    const std::vector<unsigned char> out = message(bytes, 5);
    Landing in(bytes);
    ASSERT_NO_FATAL_FAILURE(post(out, in.land(), /*may_keep=*/true));
    ASSERT_NO_FATAL_FAILURE(finish());
    for (const Status& s : receiver_.results) EXPECT_TRUE(s.is_ok()) << s.message();
    if (bytes <= HeaderFraming::kInlineHeaderMax) {
      EXPECT_TRUE(receiver_.framing->keeps_data(sender_.rank, kStep));
      EXPECT_TRUE(in.untouched()) << "the data was copied to the landing area";
      EXPECT_EQ(std::memcmp(receiver_.framing->kept_data(sender_.rank), out.data(), bytes), 0);
    } else {
      EXPECT_FALSE(receiver_.framing->keeps_data(sender_.rank, kStep));
      EXPECT_TRUE(in.holds(out));
      EXPECT_TRUE(in.guards_untouched());
    }
  }
}

// Up to kInlineHeaderMax: the header travels in front of the data in the one message.
TEST_F(HeaderFramingTest, SmallFirstMessageCarriesItsHeaderInline) {
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{1000}, HeaderFraming::kInlineHeaderMax}) {
    SCOPED_TRACE("bytes " + std::to_string(bytes));
    ASSERT_NO_FATAL_FAILURE(start());
    sender_.sends = receiver_.expects = header(40);
    frame(/*reverse=*/false);
    const std::vector<unsigned char> out = message(bytes, 1);
    Landing in(bytes);
    ASSERT_NO_FATAL_FAILURE(post(out, in.land()));
    EXPECT_EQ(sender_.outstanding, 1u);  // one send, no header-only message
    EXPECT_EQ(receiver_.outstanding, 1u);
    EXPECT_EQ(sender_.framing->ops(), 0u);
    EXPECT_EQ(receiver_.framing->ops(), 0u);
    EXPECT_TRUE(receiver_.framing->inline_recv(sender_.rank, kStep));
    ASSERT_NO_FATAL_FAILURE(finish());

    ASSERT_EQ(link_->done_a.size(), 1u);
    EXPECT_TRUE(link_->done_a[0].is_send);
    EXPECT_EQ(link_->done_a[0].cookie, kDataCookie);
    EXPECT_EQ(link_->done_a[0].bytes, kHeaderBytes + bytes);
    ASSERT_EQ(link_->done_b.size(), 1u);
    EXPECT_EQ(link_->done_b[0].cookie, kDataCookie);
    EXPECT_EQ(link_->done_b[0].bytes, kHeaderBytes + bytes);

    ASSERT_EQ(receiver_.checks.size(), 1u);
    EXPECT_EQ(receiver_.checks[0].peer, sender_.rank);
    EXPECT_EQ(receiver_.checks[0].header, bytes_of(header(40)));
    EXPECT_EQ(receiver_.checks[0].bytes, kHeaderBytes + bytes);
    EXPECT_TRUE(sender_.checks.empty());
    for (const Status& s : receiver_.results) EXPECT_TRUE(s.is_ok()) << s.message();
    EXPECT_TRUE(in.holds(out));
    EXPECT_TRUE(in.guards_untouched());
  }
}

// Over shm a small first message goes as one two-part message (the header, then the data where
// it is: Connection::post_send_parts) rather than staged through a copy: the same one message
// arrives, its header is checked, its data lands, and a differing header still fails the check
// before any data lands. Sizes around shm's largest two-part message take either way.
TEST_F(HeaderFramingTest, OverShmASmallFirstMessageStillCarriesItsHeaderInline) {
  ASSERT_NO_FATAL_FAILURE(start("shm"));
  const size_t parts = link_->ca->capabilities().max_parts_bytes;
  ASSERT_GT(parts, kHeaderBytes + 4096) << "shm takes no two-part messages";
  for (size_t bytes : {size_t{0}, size_t{1}, size_t{4096}, parts - kHeaderBytes, parts - kHeaderBytes + 1,
                       HeaderFraming::kInlineHeaderMax}) {
    for (bool differs : {false, true}) {
      SCOPED_TRACE("bytes " + std::to_string(bytes) + (differs ? ", header differs" : ""));
      ASSERT_NO_FATAL_FAILURE(start("shm"));
      sender_.sends = receiver_.expects = header(40);
      if (differs) sender_.sends[0] ^= 0x80;
      frame(/*reverse=*/false);
      const std::vector<unsigned char> out = message(bytes, 2);
      Landing in(bytes);
      ASSERT_NO_FATAL_FAILURE(post(out, in.land()));
      EXPECT_EQ(sender_.outstanding, 1u);  // one send, no header-only message
      ASSERT_NO_FATAL_FAILURE(finish());
      ASSERT_EQ(link_->done_b.size(), 1u);
      EXPECT_EQ(link_->done_b[0].bytes, kHeaderBytes + bytes);
      ASSERT_EQ(receiver_.checks.size(), 1u);
      EXPECT_EQ(receiver_.checks[0].header, bytes_of(sender_.sends));
      ASSERT_EQ(receiver_.results.size(), 1u);
      if (differs) {
        EXPECT_EQ(receiver_.results[0].code(), ErrorCode::mismatch);
        EXPECT_TRUE(in.untouched()) << "data landed although its header failed the check";
      } else {
        EXPECT_TRUE(receiver_.results[0].is_ok()) << receiver_.results[0].message();
        EXPECT_TRUE(in.holds(out));
        EXPECT_TRUE(in.guards_untouched());
      }
    }
  }
}

// Above kInlineHeaderMax: a header-only message goes just before the data, which lands directly.
TEST_F(HeaderFramingTest, LargeFirstMessageGetsItsHeaderAsAMessageBefore) {
  for (size_t bytes : {HeaderFraming::kInlineHeaderMax + 1, size_t{1} << 20}) {
    SCOPED_TRACE("bytes " + std::to_string(bytes));
    ASSERT_NO_FATAL_FAILURE(start());
    sender_.sends = receiver_.expects = header(90);
    frame(/*reverse=*/false);
    const std::vector<unsigned char> out = message(bytes, 2);
    Landing in(bytes);
    ASSERT_NO_FATAL_FAILURE(post(out, in.land()));
    EXPECT_EQ(sender_.outstanding, 2u);  // the header, then the data
    EXPECT_EQ(receiver_.outstanding, 2u);
    EXPECT_EQ(sender_.framing->ops(), 1u);
    EXPECT_EQ(receiver_.framing->ops(), 1u);
    EXPECT_FALSE(receiver_.framing->inline_recv(sender_.rank, kStep));
    ASSERT_NO_FATAL_FAILURE(finish());

    ASSERT_EQ(link_->done_b.size(), 2u);
    EXPECT_EQ(link_->done_b[0].cookie, kHeaderCookie);
    EXPECT_EQ(link_->done_b[0].bytes, kHeaderBytes);
    EXPECT_EQ(link_->done_b[1].cookie, kDataCookie);
    EXPECT_EQ(link_->done_b[1].bytes, bytes);
    ASSERT_EQ(link_->done_a.size(), 2u);
    EXPECT_EQ(link_->done_a[0].cookie, kHeaderCookie);
    EXPECT_EQ(link_->done_a[0].bytes, kHeaderBytes);
    EXPECT_EQ(link_->done_a[1].cookie, kDataCookie);
    EXPECT_EQ(link_->done_a[1].bytes, bytes);

    ASSERT_EQ(receiver_.checks.size(), 1u);
    EXPECT_EQ(receiver_.checks[0].peer, sender_.rank);
    EXPECT_EQ(receiver_.checks[0].header, bytes_of(header(90)));
    EXPECT_EQ(receiver_.checks[0].bytes, kHeaderBytes);
    EXPECT_TRUE(sender_.checks.empty());
    for (const Status& s : receiver_.results) EXPECT_TRUE(s.is_ok()) << s.message();
    EXPECT_TRUE(in.holds(out));
    EXPECT_TRUE(in.guards_untouched());
  }
}

// A sender whose header differs: the receiver's check fails, and its error comes back as it
// was made (the framing adds no context to the check's own errors).
TEST_F(HeaderFramingTest, DifferingHeaderReturnsTheChecksError) {
  const std::string expected_error = "rank 1: header from rank 0 differs";
  for (size_t bytes : {size_t{16}, HeaderFraming::kInlineHeaderMax, HeaderFraming::kInlineHeaderMax + 1}) {
    SCOPED_TRACE("bytes " + std::to_string(bytes));
    ASSERT_NO_FATAL_FAILURE(start());
    sender_.sends = header(7);
    sender_.sends[kHeaderBytes - 1] ^= 1;  // one bit of the last byte
    frame(/*reverse=*/false);
    const std::vector<unsigned char> out = message(bytes, 3);
    Landing in(bytes);
    ASSERT_NO_FATAL_FAILURE(post(out, in.land()));
    ASSERT_NO_FATAL_FAILURE(finish());

    ASSERT_EQ(receiver_.checks.size(), 1u);
    EXPECT_EQ(receiver_.checks[0].header, bytes_of(sender_.sends));
    ASSERT_FALSE(receiver_.results.empty());
    const Status& first = receiver_.results[0];  // the inline receive's, or the header's
    EXPECT_EQ(first.code(), ErrorCode::mismatch);
    EXPECT_EQ(first.message(), expected_error);
    if (bytes <= HeaderFraming::kInlineHeaderMax) {
      EXPECT_TRUE(in.untouched()) << "data landed although its header failed the check";
    }
  }
}

// A rank that only sends gets a header back, so it can check too (reverse = true); with
// reverse = false nothing comes back.
TEST_F(HeaderFramingTest, ReverseSendsAHeaderBackToASendOnlyRank) {
  for (size_t bytes : {size_t{8}, HeaderFraming::kInlineHeaderMax + 1}) {
    SCOPED_TRACE("bytes " + std::to_string(bytes));
    ASSERT_NO_FATAL_FAILURE(start());
    receiver_.sends = sender_.expects = header(60);
    frame(/*reverse=*/true);
    EXPECT_TRUE(sender_.framing->reverse_pending());
    EXPECT_TRUE(receiver_.framing->reverse_pending());
    const std::vector<unsigned char> out = message(bytes, 4);
    Landing in(bytes);
    ASSERT_NO_FATAL_FAILURE(post(out, in.land()));
    EXPECT_FALSE(sender_.framing->reverse_pending());
    EXPECT_FALSE(receiver_.framing->reverse_pending());
    const size_t large = bytes > HeaderFraming::kInlineHeaderMax ? 1 : 0;
    EXPECT_EQ(sender_.outstanding, 2u + large);  // the reply's receive, (the header,) the data
    EXPECT_EQ(receiver_.outstanding, 2u + large);
    EXPECT_EQ(sender_.framing->ops(), 1u + large);
    ASSERT_NO_FATAL_FAILURE(finish());

    ASSERT_EQ(sender_.checks.size(), 1u);  // the reply, checked by the rank that only sends
    EXPECT_EQ(sender_.checks[0].peer, receiver_.rank);
    EXPECT_EQ(sender_.checks[0].header, bytes_of(header(60)));
    EXPECT_EQ(sender_.checks[0].bytes, kHeaderBytes);
    ASSERT_EQ(receiver_.checks.size(), 1u);
    for (const Status& s : sender_.results) EXPECT_TRUE(s.is_ok()) << s.message();
    for (const Status& s : receiver_.results) EXPECT_TRUE(s.is_ok()) << s.message();
    EXPECT_TRUE(in.holds(out));
    EXPECT_TRUE(next_message_is_plain());

    // The reply's header differs: the sending rank's check says so.
    ASSERT_NO_FATAL_FAILURE(start());
    receiver_.sends = header(61);
    sender_.expects = header(60);
    frame(/*reverse=*/true);
    ASSERT_NO_FATAL_FAILURE(post(out, in.land()));
    ASSERT_NO_FATAL_FAILURE(finish());
    ASSERT_EQ(sender_.checks.size(), 1u);
    const Status* failed = nullptr;
    for (const Status& s : sender_.results) failed = !s.is_ok() && failed == nullptr ? &s : failed;
    ASSERT_NE(failed, nullptr) << "the sending rank never saw the reply's header differ";
    EXPECT_EQ(failed->message(), "rank 0: header from rank 1 differs");

    ASSERT_NO_FATAL_FAILURE(start());
    frame(/*reverse=*/false);
    EXPECT_FALSE(sender_.framing->reverse_pending());
    EXPECT_FALSE(receiver_.framing->reverse_pending());
    ASSERT_NO_FATAL_FAILURE(post(out, in.land()));
    EXPECT_EQ(sender_.outstanding, 1u + large);
    EXPECT_EQ(receiver_.outstanding, 1u + large);
    ASSERT_NO_FATAL_FAILURE(finish());
    EXPECT_EQ(link_->done_a.size(), 1u + large);  // its own sends only
    EXPECT_TRUE(sender_.checks.empty());
    EXPECT_TRUE(next_message_is_plain()) << "a header came back with reverse = false";
  }
}

// After restart() the same framing sends and checks every header again: the inline one or the
// header-only one in front of the data, and the reply.
TEST_F(HeaderFramingTest, RestartSendsTheHeadersAgain) {
  for (size_t bytes : {size_t{100}, HeaderFraming::kInlineHeaderMax + 1}) {
    SCOPED_TRACE("bytes " + std::to_string(bytes));
    ASSERT_NO_FATAL_FAILURE(start());
    frame(/*reverse=*/true);
    for (uint64_t run = 0; run < 2; ++run) {
      SCOPED_TRACE("run " + std::to_string(run));
      if (run == 1) {
        sender_.framing->restart();
        receiver_.framing->restart();
        EXPECT_TRUE(sender_.framing->reverse_pending());
        EXPECT_TRUE(receiver_.framing->reverse_pending());
        EXPECT_EQ(sender_.framing->ops(), 0u);
      }
      const std::vector<unsigned char> out = message(bytes, 10 + run);
      Landing in(bytes);
      ASSERT_NO_FATAL_FAILURE(post(out, in.land()));
      EXPECT_EQ(receiver_.framing->inline_recv(sender_.rank, kStep), bytes <= HeaderFraming::kInlineHeaderMax);
      ASSERT_NO_FATAL_FAILURE(finish());
      EXPECT_EQ(receiver_.checks.size(), run + 1);
      EXPECT_EQ(sender_.checks.size(), run + 1);
      for (const Status& s : receiver_.results) EXPECT_TRUE(s.is_ok()) << s.message();
      for (const Status& s : sender_.results) EXPECT_TRUE(s.is_ok()) << s.message();
      EXPECT_TRUE(in.holds(out));
      EXPECT_TRUE(in.guards_untouched());
    }
    EXPECT_TRUE(next_message_is_plain());
  }
}

}  // namespace
}  // namespace braid::collectives
