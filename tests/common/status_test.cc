#include "common/status.h"

#include <gtest/gtest.h>

namespace braid {
namespace {

Status fails() { return timeout_error("waited 3 s"); }

Status propagates() {
  RETURN_IF_ERROR(fails());
  return internal_error("not reached");
}

Result<int> half(int x) {
  if (x % 2) return invalid_argument("odd");
  return x / 2;
}

Status use_half(int x, int* out) {
  ASSIGN_OR_RETURN(*out, half(x));
  return Status::ok();
}

TEST(Status, OkIsCheapAndEmpty) {
  Status s;
  EXPECT_TRUE(s.is_ok());
  EXPECT_EQ(s.code(), ErrorCode::ok);
  EXPECT_EQ(s.message(), "");
}

TEST(Status, MacrosPropagateTheFirstFailure) {
  Status s = propagates();
  EXPECT_EQ(s.code(), ErrorCode::timeout);
  EXPECT_EQ(s.message(), "waited 3 s");
  int v = 0;
  EXPECT_TRUE(use_half(8, &v).is_ok());
  EXPECT_EQ(v, 4);
  EXPECT_EQ(use_half(7, &v).code(), ErrorCode::invalid_argument);
}

TEST(Status, ContextGoesInFront) {
  EXPECT_EQ(fails().with_context("all_reduce #3: ").message(), "all_reduce #3: waited 3 s");
  EXPECT_TRUE(Status::ok().with_context("x").is_ok());
}

TEST(Status, RaiseThrowsErrorWithCode) {
  try {
    raise_if_error(peer_lost("rank 2 at 10.0.0.2:5000 closed the connection"));
    FAIL() << "no throw";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::peer_lost);
    EXPECT_STREQ(e.what(), "rank 2 at 10.0.0.2:5000 closed the connection");
  }
  EXPECT_NO_THROW(raise_if_error(Status::ok()));
}

}  // namespace
}  // namespace braid
