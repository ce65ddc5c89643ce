#include "tests/tools/braidrun/etcd_reply_fuzz.h"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tools/braidrun/etcd_http.h"
#include "tools/braidrun/etcd_json.h"

namespace braid::braidrun::etcd {
namespace {

[[noreturn]] void defect(const char* what, const std::string& detail) {
  std::fprintf(stderr, "fuzz defect: %s: %s\n", what, detail.c_str());
  std::abort();
}

template <typename T>
void expect_clean(const Result<T>& r, const char* what) {
  if (!r.is_ok() && (r.status().code() != ErrorCode::protocol || r.status().message().empty())) {
    defect(what, r.status().message());
  }
}

void walk(const JsonValue& v, int depth) {
  if (depth > 200) defect("parse_json nested deeper than its bound", "");
  if (v.kind == JsonValue::Kind::string) expect_clean(base64_decode(v.text), "base64_decode");
  for (const JsonValue& item : v.items) walk(item, depth + 1);
  for (const auto& [name, member] : v.members) {
    (void)v.int_of(name);
    (void)v.bool_of(name);
    walk(member, depth + 1);
  }
}

}  // namespace

void fuzz_etcd_reply(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  Result<HttpReply> reply = parse_http_reply(bytes, Endpoint{"fuzz", 2379});
  expect_clean(reply, "parse_http_reply");
  Result<JsonValue> json = parse_json(reply.is_ok() ? reply.value().body : bytes);
  expect_clean(json, "parse_json");
  if (json.is_ok()) walk(json.value(), 0);
  Result<JsonValue> quoted = parse_json(json_quote(bytes));
  if (!quoted.is_ok() || quoted.value().text != bytes) defect("json_quote does not round-trip", quoted.status().message());
  Result<std::string> back = base64_decode(base64_encode(bytes));
  if (!back.is_ok() || back.value() != bytes) defect("base64 does not round-trip", "");
}

}  // namespace braid::braidrun::etcd
