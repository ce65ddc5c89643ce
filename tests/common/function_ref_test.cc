// FunctionRef (common/function_ref.h): calls what it refers to, with the caller's state, and an
// empty one says so.
#include "common/function_ref.h"

#include <gtest/gtest.h>

#include <string>

namespace braid {
namespace {

int apply(FunctionRef<int(int)> f, int x) { return f ? f(x) : -1; }

TEST(FunctionRefTest, CallsTheLambdaWithItsCapturesAndArguments) {
  const int offset = 40;
  auto add = [&](int x) { return x + offset; };
  EXPECT_EQ(apply(add, 2), 42);
  EXPECT_EQ(apply(add, 3), 43);
}

TEST(FunctionRefTest, RefersToTheCallableItselfNotACopy) {
  auto counter = [n = 0]() mutable { return ++n; };
  FunctionRef<int()> f = counter;
  EXPECT_EQ(f(), 1);
  EXPECT_EQ(f(), 2);
  EXPECT_EQ(counter(), 3);  // a copy would have left counter's own count at 0
}

TEST(FunctionRefTest, EmptyIsFalse) {
  EXPECT_EQ(apply({}, 2), -1);
  FunctionRef<void()> none;
  EXPECT_FALSE(none);
}

TEST(FunctionRefTest, ArgumentsPassByReference) {
  std::string s = "a";
  auto append = [](std::string& t) { t += "b"; };
  FunctionRef<void(std::string&)> f = append;
  f(s);
  f(s);
  EXPECT_EQ(s, "abb");
}

}  // namespace
}  // namespace braid
