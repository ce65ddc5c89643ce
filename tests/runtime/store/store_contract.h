// What every braid::Store must do, whatever carries it (a server over TCP, a shared file): the
// TcpStore and FileStore tests both run these on a fresh, empty store, then check what is
// particular to their medium.
#pragma once

#include <gtest/gtest.h>

#include <climits>
#include <string>

#include "braid/error.h"
#include "braid/store.h"

namespace braid::store_test {

inline void expect_set_get_overwrite(Store& s) {
  s.set("a", "1");
  EXPECT_EQ(s.get("a"), "1");
  s.set("a", "two");
  EXPECT_EQ(s.get("a"), "two");
  s.set("empty", "");
  EXPECT_EQ(s.get("empty"), "");
  EXPECT_EQ(s.num_keys(), 2);
}

// Keys and values are bytes: NULs and high bytes survive, and a 1 MiB value comes back whole.
inline void expect_binary_round_trip(Store& s) {
  const std::string key("k\0ey\xff", 5);
  const std::string value("\0\1\2\0\xfe", 5);
  s.set(key, value);
  EXPECT_EQ(s.get(key), value);
  EXPECT_FALSE(s.check({std::string("k")}));  // the NUL byte is part of the key, not its end
  std::string big(1 << 20, '\0');
  for (size_t i = 0; i < big.size(); ++i) big[i] = static_cast<char>(i * 7);
  s.set("big", big);
  EXPECT_EQ(s.get("big"), big);
}

// add() keeps counters as decimal text; a value that is not one, or would overflow, is refused
// and changes nothing, and the store stays usable.
inline void expect_add_counts_as_decimal_text(Store& s) {
  EXPECT_EQ(s.add("n", 5), 5);
  EXPECT_EQ(s.add("n", -2), 3);
  EXPECT_EQ(s.get("n"), "3");
  s.set("m", "40");
  EXPECT_EQ(s.add("m", 2), 42);
  s.set("text", "abc");
  s.set("max", std::to_string(LLONG_MAX));
  for (const char* key : {"text", "max"}) {
    try {
      s.add(key, 1);
      ADD_FAILURE() << "add on '" << key << "' must fail";
    } catch (const Error& e) {
      EXPECT_EQ(e.code(), ErrorCode::invalid_argument) << e.what();
      if (std::string(key) == "text") {
        EXPECT_NE(std::string(e.what()).find("not a decimal integer"), std::string::npos) << e.what();
      }
    }
  }
  EXPECT_EQ(s.get("text"), "abc");
  EXPECT_EQ(s.add("n", 1), 4);
}

inline void expect_compare_set(Store& s) {
  EXPECT_EQ(s.compare_set("k", "x", "y"), "");  // absent and expected non-empty: unchanged
  EXPECT_FALSE(s.check({"k"}));
  EXPECT_EQ(s.compare_set("k", "", "first"), "first");  // absent and expected empty: set
  EXPECT_EQ(s.compare_set("k", "wrong", "second"), "first");
  EXPECT_EQ(s.get("k"), "first");
  EXPECT_EQ(s.compare_set("k", "first", "second"), "second");
  EXPECT_EQ(s.get("k"), "second");
}

inline void expect_check_delete_num_keys(Store& s) {
  EXPECT_EQ(s.num_keys(), 0);
  EXPECT_TRUE(s.check({}));
  EXPECT_FALSE(s.delete_key("a"));
  s.set("a", "1");
  s.set("b", "2");
  EXPECT_TRUE(s.check({"a", "b"}));
  EXPECT_FALSE(s.check({"a", "c"}));
  EXPECT_EQ(s.num_keys(), 2);
  EXPECT_TRUE(s.delete_key("a"));
  EXPECT_FALSE(s.delete_key("a"));
  EXPECT_FALSE(s.check({"a"}));
  EXPECT_EQ(s.num_keys(), 1);
}

}  // namespace braid::store_test
