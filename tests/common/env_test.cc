#include "common/env.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace braid {
namespace {

Result<Env> parse(std::map<std::string, std::string> vars) {
  return Env::parse([vars](const char* name) -> const char* {
    static thread_local std::string value;
    auto it = vars.find(name);
    if (it == vars.end()) return nullptr;
    value = it->second;
    return value.c_str();
  });
}

TEST(Env, DefaultsWhenNothingIsSet) {
  auto e = parse({});
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  EXPECT_EQ(e->transport, "auto");
  EXPECT_EQ(e->algo, "auto");
  EXPECT_EQ(e->timeout_s, 600);
  EXPECT_EQ(e->rendezvous_timeout_s, 300);
  EXPECT_EQ(e->peer_timeout_s, 30);
  EXPECT_EQ(e->debug, LogLevel::warn);
  EXPECT_EQ(e->nsocks, 0);
  EXPECT_TRUE(e->caller_progress);
  EXPECT_EQ(e->loopback_cc, "reno");
}

TEST(Env, ReadsEveryVariable) {
  auto e = parse({{"BRAID_TRANSPORT", "tcp-poll"}, {"BRAID_NSOCKS", "4"}, {"BRAID_CHUNK_BYTES", "512K"},
                  {"BRAID_ALGO", "ring"}, {"BRAID_TIMEOUT_S", "2.5"}, {"BRAID_PORT_RANGE", "40000-40100"},
                  {"BRAID_DEBUG", "info"}, {"BRAID_SOCKET_IFNAME", "^docker,eth"},
                  {"BRAID_CALLER_PROGRESS", "0"}, {"BRAID_RING_DEPTH", "3"}, {"BRAID_LOOPBACK_CC", "cubic"}});
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  EXPECT_EQ(e->transport, "tcp-poll");
  EXPECT_EQ(e->nsocks, 4);
  EXPECT_EQ(e->chunk_bytes, 512u << 10);
  EXPECT_EQ(e->algo, "ring");
  EXPECT_DOUBLE_EQ(e->timeout_s, 2.5);
  EXPECT_EQ(e->port_lo, 40000);
  EXPECT_EQ(e->port_hi, 40100);
  EXPECT_EQ(e->debug, LogLevel::info);
  EXPECT_EQ(e->socket_ifname, "^docker,eth");
  EXPECT_FALSE(e->caller_progress);
  EXPECT_EQ(e->ring_depth, 3);
  EXPECT_EQ(e->loopback_cc, "cubic");
}

struct BadValue {
  const char* name;
  const char* value;
};

class EnvBadValue : public ::testing::TestWithParam<BadValue> {};

TEST_P(EnvBadValue, IsAnErrorNamingTheVariableAndValue) {
  auto e = parse({{GetParam().name, GetParam().value}});
  ASSERT_FALSE(e.is_ok());
  EXPECT_EQ(e.status().code(), ErrorCode::invalid_argument);
  EXPECT_NE(e.status().message().find(GetParam().name), std::string::npos) << e.status().message();
  EXPECT_NE(e.status().message().find(std::string("'") + GetParam().value + "'"), std::string::npos)
      << e.status().message();
}

INSTANTIATE_TEST_SUITE_P(All, EnvBadValue,
                         ::testing::Values(BadValue{"BRAID_TRANSPORT", "carrier-pigeon"}, BadValue{"BRAID_NSOCKS", "-1"},
                                           BadValue{"BRAID_NSOCKS", "four"}, BadValue{"BRAID_NSOCKS", "65"},
                                           BadValue{"BRAID_CHUNK_BYTES", "12"}, BadValue{"BRAID_RING_DEPTH", "17"},
                                           BadValue{"BRAID_RING_DEPTH", "deep"}, BadValue{"BRAID_ALGO", "fastest"},
                                           BadValue{"BRAID_TIMEOUT_S", "0"}, BadValue{"BRAID_TIMEOUT_S", "10s"},
                                           BadValue{"BRAID_RENDEZVOUS_TIMEOUT_S", ""},
                                           BadValue{"BRAID_PEER_TIMEOUT_S", "-3"},
                                           BadValue{"BRAID_PORT_RANGE", "9000-8000"},
                                           BadValue{"BRAID_DEBUG", "LOUD"}, BadValue{"BRAID_GDR", "yes"},
                                           BadValue{"BRAID_CALLER_PROGRESS", "yes"}, BadValue{"BRAID_LOOPBACK_CC", ""},
                                           BadValue{"BRAID_LOOPBACK_CC", "Reno; rm"},
                                           BadValue{"BRAID_LOOPBACK_CC", "a_name_far_too_long"}));

TEST(Env, IntegerParserNamesRange) {
  auto r = parse_env_int("RANK", "12x", 0, 7);
  ASSERT_FALSE(r.is_ok());
  EXPECT_EQ(r.status().message(), "RANK='12x' is not an integer in [0, 7]");
}

TEST(Env, SecretSettings) {
  auto e = parse({{"BRAID_SECRET", "0123456789abcdef"}, {"BRAID_JOB_ID", "job-7"}});
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  EXPECT_EQ(e->secret, "0123456789abcdef");
  EXPECT_EQ(e->job_id, "job-7");
  auto short_secret = parse({{"BRAID_SECRET", "abc"}});
  ASSERT_FALSE(short_secret.is_ok());
  // The message names the variable but never repeats the secret.
  EXPECT_NE(short_secret.status().message().find("BRAID_SECRET"), std::string::npos);
  EXPECT_EQ(short_secret.status().message().find("'abc'"), std::string::npos);
  auto both = parse({{"BRAID_SECRET", "0123456789abcdef"}, {"BRAID_SECRET_FILE", "/tmp/x"}});
  ASSERT_FALSE(both.is_ok());
  EXPECT_NE(both.status().message().find("set one of them"), std::string::npos);
}

TEST(Env, StoreSettings) {
  auto d = parse({});
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->store_bind, "");
  EXPECT_EQ(d->store_max_frame_bytes, size_t{4} << 20);
  EXPECT_EQ(d->store_max_pending, 256u);
  auto e = parse({{"BRAID_STORE_BIND", "0.0.0.0"}, {"BRAID_STORE_MAX_FRAME_BYTES", "1M"},
                  {"BRAID_STORE_MAX_CLIENTS", "100"}, {"BRAID_STORE_MAX_PENDING", "8"}});
  ASSERT_TRUE(e.is_ok()) << e.status().message();
  EXPECT_EQ(e->store_bind, "0.0.0.0");
  EXPECT_EQ(e->store_max_frame_bytes, size_t{1} << 20);
  EXPECT_EQ(e->store_max_clients, 100u);
  EXPECT_EQ(e->store_max_pending, 8u);
  for (auto [name, value] : {std::pair{"BRAID_STORE_MAX_FRAME_BYTES", "128M"}, {"BRAID_STORE_MAX_CLIENTS", "3"},
                             {"BRAID_STORE_MAX_PENDING", "0"}, {"BRAID_STORE_BIND", ""}}) {
    auto bad = parse({{name, value}});
    ASSERT_FALSE(bad.is_ok()) << name;
    EXPECT_NE(bad.status().message().find(name), std::string::npos) << bad.status().message();
  }
}

}  // namespace
}  // namespace braid
