// The JSON, base64 and endpoint-list parsing EtcdStore relies on (no etcd needed).
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace braid::braidrun::etcd
