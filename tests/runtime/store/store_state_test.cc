// StoreState without sockets: requests in, reply frames out.
#include "runtime/store/store_state.h"

#include <gtest/gtest.h>

#include "braid/error.h"
#include "runtime/store/store_protocol.h"

namespace braid::store {
namespace {

using namespace std::chrono_literals;

// The body of a reply frame, checked to be whole.
std::string body_of(const std::string& frame) {
  EXPECT_GE(frame.size(), kFrameHeaderBytes);
  EXPECT_EQ(decode_u32(frame.data()), frame.size() - kFrameHeaderBytes);
  return frame.substr(kFrameHeaderBytes);
}

std::string request_body(FrameWriter w) { return body_of(w.finish()); }

ReplyKind kind_of(const StoreState::Reply& r) { return static_cast<ReplyKind>(body_of(r.frame)[0]); }

class StoreStateTest : public ::testing::Test {
 protected:
  std::vector<StoreState::Reply> send(uint64_t conn, FrameWriter w) {
    std::vector<StoreState::Reply> out;
    state_.handle(conn, request_body(std::move(w)), now_, out);
    return out;
  }
  static FrameWriter op(Opcode o) {
    FrameWriter w;
    w.u8(static_cast<uint8_t>(o));
    return w;
  }
  StoreState state_;
  Clock::time_point now_ = Clock::now();
};

TEST_F(StoreStateTest, WaitParksUntilEveryKeyExists) {
  auto w = op(Opcode::wait);
  w.keys({"a", "b"}).i64(1000);
  EXPECT_TRUE(send(7, std::move(w)).empty());
  EXPECT_TRUE(state_.waiting(7));
  auto s = op(Opcode::set);
  s.bytes("b").bytes("1");
  auto replies = send(8, std::move(s));
  ASSERT_EQ(replies.size(), 1u);  // only the setter's ok: "a" is still missing
  EXPECT_EQ(replies[0].conn, 8u);
  auto s2 = op(Opcode::set);
  s2.bytes("a").bytes("1");
  replies = send(8, std::move(s2));
  ASSERT_EQ(replies.size(), 2u);
  EXPECT_EQ(replies[1].conn, 7u);
  EXPECT_EQ(kind_of(replies[1]), ReplyKind::ok);
  EXPECT_FALSE(state_.waiting(7));
  EXPECT_FALSE(state_.next_deadline().has_value());
}

TEST_F(StoreStateTest, ExpiryAnswersTimedOutWithMissingKeys) {
  auto w = op(Opcode::wait);
  w.keys({"present", "absent"}).i64(500);
  auto s = op(Opcode::set);
  s.bytes("present").bytes("");
  (void)send(1, std::move(s));
  EXPECT_TRUE(send(2, std::move(w)).empty());
  ASSERT_TRUE(state_.next_deadline().has_value());
  std::vector<StoreState::Reply> out;
  state_.expire(now_ + 499ms, out);
  EXPECT_TRUE(out.empty());
  state_.expire(now_ + 500ms, out);
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(kind_of(out[0]), ReplyKind::timed_out);
  std::string body = body_of(out[0].frame);
  FrameReader r(std::string_view(body).substr(1));
  EXPECT_EQ(r.keys(), std::vector<std::string>{"absent"});
  EXPECT_FALSE(state_.waiting(2));
}

TEST_F(StoreStateTest, DroppedWaiterIsForgotten) {
  auto g = op(Opcode::get);
  g.bytes("k").i64(1000);
  EXPECT_TRUE(send(3, std::move(g)).empty());
  state_.drop(3);
  auto s = op(Opcode::set);
  s.bytes("k").bytes("v");
  EXPECT_EQ(send(4, std::move(s)).size(), 1u);
  EXPECT_FALSE(state_.next_deadline().has_value());
}

TEST_F(StoreStateTest, MalformedRequestsGetProtocolErrors) {
  std::vector<std::string> bodies = {
      std::string(),                                // empty
      std::string(1, '\x63'),                       // unknown opcode
      std::string("\x01\x05\x00\x00\x00" "ab", 7),  // set: key says 5 bytes, has 2
      std::string("\x08\x00", 2),                   // num_keys with a trailing byte
      std::string("\x05\xff\xff\xff\xff", 5),       // wait: 4 billion keys
  };
  for (const auto& b : bodies) {
    std::vector<StoreState::Reply> out;
    state_.handle(9, b, now_, out);
    ASSERT_EQ(out.size(), 1u);
    std::string body = body_of(out[0].frame);
    EXPECT_EQ(static_cast<ReplyKind>(body[0]), ReplyKind::error);
    EXPECT_EQ(static_cast<ErrorCode>(body[1]), ErrorCode::protocol);
  }
  EXPECT_EQ(state_.num_keys(), 0u);
}

TEST_F(StoreStateTest, AddOverflowIsAnError) {
  auto a = op(Opcode::add);
  a.bytes("n").i64(INT64_MAX);
  EXPECT_EQ(kind_of(send(1, std::move(a))[0]), ReplyKind::integer);
  auto b = op(Opcode::add);
  b.bytes("n").i64(1);
  EXPECT_EQ(kind_of(send(1, std::move(b))[0]), ReplyKind::error);
}

}  // namespace
}  // namespace braid::store
