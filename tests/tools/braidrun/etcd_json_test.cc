// The JSON, base64 and endpoint-list parsing EtcdStore relies on (no etcd needed).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "tests/tools/braidrun/etcd_reply_fuzz.h"

#include "tools/braidrun/etcd_http.h"
#include "tools/braidrun/etcd_json.h"

namespace braid::braidrun::etcd {
namespace {

TEST(EtcdJson, ReadsAnEtcdReply) {
  auto v = parse_json(R"( {"header":{"revision":"12","raft_term":"2"},"succeeded":true,
      "responses":[{"response_range":{"kvs":[{"key":"Zm9v","mod_revision":"7","value":"YmFy"}],"count":"1"}}],
      "code":14,"message":"etcdserver: no leader \"x\"\u00e9\ud83d\ude00","none":null,"f":false} )");
  ASSERT_TRUE(v.is_ok()) << v.status().message();
  EXPECT_EQ(v->find("header")->int_of("revision"), 12);
  EXPECT_TRUE(v->bool_of("succeeded"));
  EXPECT_FALSE(v->bool_of("f"));
  EXPECT_FALSE(v->bool_of("absent"));
  EXPECT_EQ(v->int_of("code"), 14);
  EXPECT_EQ(v->text_of("message"), "etcdserver: no leader \"x\"\xc3\xa9\xf0\x9f\x98\x80");
  const JsonValue& range = *v->find("responses")->items.at(0).find("response_range");
  EXPECT_EQ(range.int_of("count"), 1);
  EXPECT_EQ(range.find("kvs")->items.at(0).text_of("value"), "YmFy");
  EXPECT_EQ(v->find("none")->kind, JsonValue::Kind::null);
}

TEST(EtcdJson, RefusesMalformedTextAndDeepNesting) {
  for (const char* bad : {"", "{", "{\"a\"}", "{\"a\":1,}", "[1 2]", "\"open", "{\"a\":tru}", "{} x", "\"\\q\""}) {
    auto v = parse_json(bad);
    EXPECT_FALSE(v.is_ok()) << bad;
    if (!v.is_ok()) {
      EXPECT_EQ(v.status().code(), ErrorCode::protocol) << bad;
    }
  }
  EXPECT_FALSE(parse_json(std::string(100000, '[') + std::string(100000, ']')).is_ok());
  EXPECT_TRUE(parse_json(std::string(50, '[') + std::string(50, ']')).is_ok());
}

TEST(EtcdJson, QuotesWhatItWrites) {
  EXPECT_EQ(json_quote("a\"b\\c\n\x01"), "\"a\\\"b\\\\c\\u000a\\u0001\"");
  auto back = parse_json(json_quote(std::string("x\0y\x1f\"", 5)));
  ASSERT_TRUE(back.is_ok());
  EXPECT_EQ(back->text, std::string("x\0y\x1f\"", 5));
}

TEST(EtcdBase64, RoundTripsEveryLength) {
  EXPECT_EQ(base64_encode("foo"), "Zm9v");
  EXPECT_EQ(base64_encode("fo"), "Zm8=");
  EXPECT_EQ(base64_encode("f"), "Zg==");
  EXPECT_EQ(base64_encode(""), "");
  std::string bytes;
  for (int i = 0; i < 300; ++i) {
    auto back = base64_decode(base64_encode(bytes));
    ASSERT_TRUE(back.is_ok());
    EXPECT_EQ(*back, bytes);
    bytes += static_cast<char>(i * 37);
  }
  EXPECT_FALSE(base64_decode("Zm9v!").is_ok());
  EXPECT_FALSE(base64_decode("Zg==Zg").is_ok());
}

TEST(EtcdEndpoints, ParsesTheListTorchrunUsersWrite) {
  auto eps = parse_endpoints("h1:2379,http://10.0.0.2:23790,[::1]:4001,h4");
  ASSERT_TRUE(eps.is_ok()) << eps.status().message();
  ASSERT_EQ(eps->size(), 4u);
  EXPECT_EQ((*eps)[0].text(), "h1:2379");
  EXPECT_EQ((*eps)[1].text(), "10.0.0.2:23790");
  EXPECT_EQ((*eps)[2].host, "::1");
  EXPECT_EQ((*eps)[2].text(), "[::1]:4001");
  EXPECT_EQ((*eps)[3].port, kDefaultEtcdPort);
  EXPECT_EQ(endpoints_text(*eps), "h1:2379,10.0.0.2:23790,[::1]:4001,h4:2379");
  for (const char* bad : {"", "h1:2379,", ":2379", "h:0", "h:99999", "h:x", "[::1", "https://h:2379"}) {
    auto r = parse_endpoints(bad);
    EXPECT_FALSE(r.is_ok()) << bad;
    if (!r.is_ok()) {
      EXPECT_EQ(r.status().code(), ErrorCode::invalid_argument) << bad;
    }
  }
}

TEST(EtcdHttp, ParsesRepliesWithLengthChunkedOrToClose) {
  const Endpoint from{"m", 2379};
  auto r = parse_http_reply("HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}junk", from);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->status, 200);
  EXPECT_EQ(r->body, "{}");
  r = parse_http_reply("HTTP/1.1 503 Service Unavailable\r\nTransfer-Encoding: chunked\r\n\r\n3\r\n{\"a\r\n"
                       "4\r\n\":1}\r\n0\r\n\r\n", from);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->status, 503);
  EXPECT_EQ(r->body, "{\"a\":1}");
  r = parse_http_reply("HTTP/1.0 200 OK\r\n\r\nall of it", from);
  ASSERT_TRUE(r.is_ok());
  EXPECT_EQ(r->body, "all of it");
  for (const char* bad : {"", "SSH-2.0-OpenSSH\r\n", "HTTP/1.1 200 OK\r\nContent-Length: 9\r\n\r\n{}",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
                          "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\nab"}) {
    auto b = parse_http_reply(bad, from);
    EXPECT_FALSE(b.is_ok()) << bad;
    if (!b.is_ok()) {
      EXPECT_EQ(b.status().code(), ErrorCode::protocol) << bad;
      EXPECT_NE(b.status().message().find("m:2379"), std::string::npos) << b.status().message();
    }
  }
}

// Random bytes and mutations of a real reply through every parser EtcdStore uses
// (etcd_reply_fuzz.h; scripts/fuzz.sh runs the same function for longer).
TEST(EtcdFuzz, RepliesOfAnyShapeFailCleanly) {
  const std::string valid =
      "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 150\r\n\r\n"
      "{\"header\":{\"revision\":\"3\"},\"succeeded\":true,\"responses\":[{\"response_range\":{\"kvs\":"
      "[{\"key\":\"Zm9v\",\"mod_revision\":\"3\",\"value\":\"YmF6\"}],\"count\":\"1\"}}],\"x\":[null,-1.5e3]}";
  std::mt19937 rng(33);
  for (int i = 0; i < 20000; ++i) {
    std::string bytes;
    if (i % 3 == 0) {
      bytes.resize(rng() % 200);
      for (char& c : bytes) c = static_cast<char>(rng());
    } else {
      bytes = valid;
      for (int flips = 1 + static_cast<int>(rng() % 4); flips > 0; --flips) {
        const std::string_view json_bytes = "{}[]\",:\\u0\r\n";
        bytes[rng() % bytes.size()] = static_cast<char>(i % 2 ? json_bytes[rng() % json_bytes.size()] : rng());
      }
      if (rng() % 8 == 0) bytes.resize(rng() % bytes.size());
    }
    fuzz_etcd_reply(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
}

}  // namespace
}  // namespace braid::braidrun::etcd
