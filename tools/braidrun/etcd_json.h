// tools/braidrun/etcd_json.h - the little JSON and base64 that etcd's HTTP gateway speaks.
//
// etcd v3 answers HTTP/1.1 POSTs with JSON (grpc-gateway): keys and values travel in base64,
// 64-bit integers as quoted decimal strings ("revision":"12"), and fields holding a default
// (false, 0, empty) are left out. So a reader needs objects, arrays, strings, numbers, true,
// false and null, and nothing of floating point: numbers are kept as their text. Nesting is
// bounded, so no reply can exhaust the stack.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/status.h"

namespace braid::braidrun::etcd {

struct JsonValue {
  enum class Kind { null, boolean, number, string, array, object };
  Kind kind = Kind::null;
  std::string text;  // a string's contents, a number's digits, "true" or "false"
  std::vector<JsonValue> items;                             // array
  struct Member;
  std::vector<Member> members;  // object, in order

  // The member `name` of an object; nullptr when absent (or this is no object).
  const JsonValue* find(std::string_view name) const;
  // The member `name` as a string (a quoted or bare number reads as its digits); "" when absent.
  std::string text_of(std::string_view name) const;
  // The member `name` as an integer (etcd quotes int64s; small ones may be bare); 0 when absent
  // or not a number.
  int64_t int_of(std::string_view name) const;
  // The member `name` as a boolean; false when absent.
  bool bool_of(std::string_view name) const;
};

struct JsonValue::Member {
  std::string name;
  JsonValue value;
};

// Parses one JSON document (surrounding whitespace allowed); protocol errors say where it broke.
Result<JsonValue> parse_json(std::string_view text);

// `s` as a JSON string literal, quotes included.
std::string json_quote(std::string_view s);

std::string base64_encode(std::string_view bytes);
Result<std::string> base64_decode(std::string_view text);

}  // namespace braid::braidrun::etcd
