// The list of BRAID_* variables (common/env_vars.h) against what Env::parse does with them, and
// the warning for names that are not on it.
#include "common/env_vars.h"
#include "common/version.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <map>
#include <set>
#include <string>

#include "braid_config.h"
#include "common/env.h"

namespace braid {
namespace {

// Variables on the list that another layer reads through its own lookup.
const std::set<std::string> kReadElsewhere = {"BRAID_STORE_PORT"};  // runtime/bootstrap/rendezvous.cc

Result<Env> parse(const std::map<std::string, std::string>& vars, std::set<std::string>* asked = nullptr) {
  return Env::parse([&](const char* name) -> const char* {
    if (asked != nullptr) asked->insert(name);
    auto it = vars.find(name);
    return it == vars.end() ? nullptr : it->second.c_str();
  });
}

std::set<std::string> names_env_reads() {
  std::set<std::string> asked;
  EXPECT_TRUE(parse({}, &asked).is_ok());
  return asked;
}

TEST(EnvVars, EveryVariableEnvReadsIsListedAsAUserSetting) {
  for (const std::string& name : names_env_reads()) {
    const EnvVar* v = find_env_var(name);
    ASSERT_NE(v, nullptr) << name << " is read by Env::parse but missing from common/env_vars.cc";
    EXPECT_EQ(v->scope, EnvScope::user) << name;
  }
}

TEST(EnvVars, EveryListedUserSettingIsRead) {
  const std::set<std::string> read = names_env_reads();
  for (const EnvVar& v : env_vars()) {
    if (v.scope != EnvScope::user) continue;
    const std::string name(v.name);
    EXPECT_TRUE(read.count(name) == 1 || kReadElsewhere.count(name) == 1)
        << name << " is listed in common/env_vars.cc but nothing reads it";
  }
}

TEST(EnvVars, EveryRowHasAMeaningAndUniqueName) {
  std::set<std::string_view> names;
  for (const EnvVar& v : env_vars()) {
    EXPECT_TRUE(v.name.starts_with("BRAID_")) << v.name;
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " is listed twice";
    EXPECT_FALSE(v.meaning.empty()) << v.name;
    if (v.kind == EnvKind::choice || v.kind == EnvKind::text) {
      EXPECT_FALSE(v.allowed.empty()) << v.name;
    }
  }
}

// The default the page shows is the one the code uses: setting it changes nothing.
TEST(EnvVars, DocumentedDefaultsAreTheCodesDefaults) {
  const std::set<std::string> read = names_env_reads();
  auto defaults = parse({});
  ASSERT_TRUE(defaults.is_ok());
  for (const EnvVar& v : env_vars()) {
    if (v.default_value.empty() || read.count(std::string(v.name)) == 0) continue;
    auto e = parse({{std::string(v.name), std::string(v.default_value)}});
    ASSERT_TRUE(e.is_ok()) << v.name << "=" << v.default_value << ": " << e.status().message();
    EXPECT_TRUE(e.value() == defaults.value()) << v.name << "=" << v.default_value << " is not the default";
  }
}

TEST(EnvVars, EveryListedChoiceIsAccepted) {
  const std::set<std::string> read = names_env_reads();
  for (const EnvVar& v : env_vars()) {
    if (v.kind != EnvKind::choice || read.count(std::string(v.name)) == 0) continue;
    for (std::string_view c : env_choices(v)) {
      auto e = parse({{std::string(v.name), std::string(c)}});
      EXPECT_TRUE(e.is_ok()) << v.name << "=" << c << ": " << e.status().message();
    }
  }
}

// Each variable's error path: the message names the variable, the value (except the secret,
// which is never printed) and what is allowed.
struct Rejected {
  const char* name;
  const char* value;
  const char* allowed;  // a piece of the message that says what would do
};

const Rejected kRejected[] = {
    {"BRAID_TRANSPORT", "carrier-pigeon", "auto, tcp, tcp-poll, ib, shm, inproc"},
    {"BRAID_NSOCKS", "65", "[0, 64]"},
    {"BRAID_PORT_RANGE", "9000-8000", "1 <= LO <= HI <= 65535"},
    {"BRAID_GDR", "yes", "0, 1, auto"},
    {"BRAID_ALGO", "fastest", "auto, ring, tree, rd, chain, pairwise"},
    {"BRAID_CHUNK_BYTES", "12", "[4096, 67108864] bytes"},
    {"BRAID_RING_DEPTH", "17", "[0, 16]"},
    {"BRAID_RING_ORDER", "hosts", "host, rank"},
    {"BRAID_TIMEOUT_S", "10s", "positive number of seconds"},
    {"BRAID_RENDEZVOUS_TIMEOUT_S", "0", "positive number of seconds"},
    {"BRAID_PEER_TIMEOUT_S", "-3", "positive number of seconds"},
    {"BRAID_SHRINK_TIMEOUT_S", "0", "positive number of seconds"},
    {"BRAID_DEBUG", "LOUD", "WARN, INFO, TRACE"},
    {"BRAID_CALLER_PROGRESS", "yes", "0, 1"},
    {"BRAID_SHM_DISABLE", "yes", "0, 1"},
    {"BRAID_TRANSPORT", "shm,pigeon", "auto, tcp, tcp-poll, ib, shm, inproc"},
    {"BRAID_SPIN_US", "100001", "[0, 100000]"},
    {"BRAID_SHM_CMA", "on", "0, 1"},
    {"BRAID_SHM_RING_BYTES", "32K", "[65536, 1073741824] bytes"},
    {"BRAID_SHM_RING_BYTES", "100000", "multiple of 4 KiB"},
    {"BRAID_ZCOPY_BYTES", "lots", "of at least 1 bytes"},
    {"BRAID_CUDA_STAGING_BYTES", "4K", "of at least 65536 bytes"},
    {"BRAID_CUDA_REDUCE", "gpu", "auto, device, host"},
    {"BRAID_LOOPBACK_CC", "Reno; rm", "reno, cubic"},
    {"BRAID_NETWORK_CC", "BBR", "reno, cubic"},
    {"BRAID_SECRET", "short", "at least 16"},
    {"BRAID_SECRET_FILE", "", "name a file"},
    {"BRAID_STORE_BIND", "", "name an address"},
    {"BRAID_STORE_MAX_FRAME_BYTES", "128M", "[4096, 67108864] bytes"},
    {"BRAID_STORE_MAX_CLIENTS", "3", "[16, 1000000]"},
    {"BRAID_STORE_MAX_PENDING", "0", "[1, 100000]"},
    {"BRAID_IB_GID_INDEX", "-1", "[0, 65535]"},
    {"BRAID_IB_TIMEOUT", "0", "[1, 31]"},
    {"BRAID_IB_RETRY_CNT", "8", "[0, 7]"},
    {"BRAID_IB_QPS_PER_CONNECTION", "0", "[1, 64]"},
    {"BRAID_IB_SL", "16", "[0, 15]"},
    {"BRAID_IB_TC", "tc", "[0, 255]"},
};
// Free text Env takes as it is (the transport checks BRAID_SOCKET_IFNAME against the interfaces).
const std::set<std::string> kAnyValue = {"BRAID_SOCKET_IFNAME", "BRAID_IB_HCA", "BRAID_JOB_ID"};

class EnvRejects : public ::testing::TestWithParam<Rejected> {};

TEST_P(EnvRejects, NamingVariableValueAndWhatIsAllowed) {
  const Rejected& r = GetParam();
  auto e = parse({{r.name, r.value}});
  ASSERT_FALSE(e.is_ok()) << r.name << "=" << r.value;
  EXPECT_EQ(e.status().code(), ErrorCode::invalid_argument);
  const std::string& m = e.status().message();
  EXPECT_NE(m.find(r.name), std::string::npos) << m;
  if (std::string(r.name) == "BRAID_SECRET") {
    EXPECT_EQ(m.find(r.value), std::string::npos) << "the secret must never be printed: " << m;
  } else if (*r.value != '\0') {
    EXPECT_NE(m.find(std::string("'") + r.value + "'"), std::string::npos) << m;
  }
  EXPECT_NE(m.find(r.allowed), std::string::npos) << m;
}

INSTANTIATE_TEST_SUITE_P(EveryVariable, EnvRejects, ::testing::ValuesIn(kRejected));

TEST(EnvVars, EveryUserSettingHasAnErrorPathTested) {
  std::set<std::string> covered(kAnyValue);
  for (const Rejected& r : kRejected) covered.insert(r.name);
  for (const std::string& name : names_env_reads()) EXPECT_EQ(covered.count(name), 1u) << name << " has no row in kRejected";
}

TEST(EnvVars, EditDistance) {
  EXPECT_EQ(edit_distance("", ""), 0u);
  EXPECT_EQ(edit_distance("abc", ""), 3u);
  EXPECT_EQ(edit_distance("BRAID_TIMOUT_S", "BRAID_TIMEOUT_S"), 1u);
  EXPECT_EQ(edit_distance("kitten", "sitting"), 3u);
}

std::vector<std::string> warnings(std::vector<const char*> entries) {
  entries.push_back(nullptr);
  return unknown_env_warnings(entries.data());
}

TEST(EnvVars, UnknownNameWarnsWithTheClosestKnownOne) {
  auto w = warnings({"PATH=/bin", "BRAID_TIMOUT_S=5", "BRAID_TIMEOUT_S=5", "BRAID_ALG=ring", "BRAID_TIMOUT_S=6"});
  ASSERT_EQ(w.size(), 2u);  // one per unknown name, however often it appears
  EXPECT_EQ(w[0].rfind("BRAID_TIMOUT_S: unknown; did you mean BRAID_TIMEOUT_S?", 0), 0u) << w[0];
  EXPECT_EQ(w[1].rfind("BRAID_ALG: unknown; did you mean BRAID_ALGO?", 0), 0u) << w[1];
  EXPECT_NE(w[0].find("docs/configuration.md"), std::string::npos) << w[0];
}

TEST(EnvVars, UnknownNameFarFromEveryKnownOneGetsNoGuess) {
  auto w = warnings({"BRAID_HOME=/opt/braid", "BRAID_=1"});
  ASSERT_EQ(w.size(), 2u);
  EXPECT_EQ(w[0].rfind("BRAID_HOME: unknown", 0), 0u) << w[0];
  EXPECT_EQ(w[0].find("did you mean"), std::string::npos) << w[0];
  EXPECT_EQ(w[1].find("did you mean"), std::string::npos) << w[1];
}

// braidrun's and the tests' own variables, and every listed one, are not unknown.
TEST(EnvVars, ListedNamesNeverWarn) {
  std::vector<std::string> entries;
  for (const EnvVar& v : env_vars()) entries.push_back(std::string(v.name) + "=1");
  std::vector<const char*> ptrs;
  for (const std::string& s : entries) ptrs.push_back(s.c_str());
  ptrs.push_back("BRAIDRUN=/usr/bin/braidrun");  // not BRAID_
  EXPECT_TRUE(warnings(ptrs).empty());
}

// Matches a stderr holding `line` exactly once.
class ExactlyOnce : public ::testing::MatcherInterface<const std::string&> {
 public:
  explicit ExactlyOnce(std::string line) : line_(std::move(line)) {}
  bool MatchAndExplain(const std::string& err, ::testing::MatchResultListener*) const override {
    size_t first = err.find(line_);
    return first != std::string::npos && err.find(line_, first + 1) == std::string::npos;
  }
  void DescribeTo(std::ostream* os) const override { *os << "holds \"" << line_ << "\" exactly once"; }

 private:
  std::string line_;
};

// The first global_env() in a process warns once per unknown name, on stderr.
TEST(EnvVarsDeathTest, GlobalEnvWarnsOncePerProcess) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  auto once = ::testing::MakeMatcher(new ExactlyOnce("BRAID_TIMOUT_S: unknown; did you mean BRAID_TIMEOUT_S?"));
  EXPECT_EXIT(
      {
        setenv("BRAID_TIMOUT_S", "5", 1);
        (void)global_env();
        (void)global_env();
        std::exit(global_env().is_ok() ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), once);
}

TEST(EnvVars, BuildSummaryNamesVersionAndEveryFeature) {
  const std::string s = build_summary();
  EXPECT_EQ(s.rfind(std::string("braid ") + BRAID_VERSION + " (", 0), 0u) << s;
  for (const char* f : {"io_uring", "ib", "cuda", "torch"}) {
    EXPECT_TRUE(s.find(std::string(f) + " yes") != std::string::npos || s.find(std::string(f) + " no") != std::string::npos)
        << f << ": " << s;
  }
  EXPECT_NE(s.find(BRAID_HAVE_LIBURING ? "io_uring yes" : "io_uring no"), std::string::npos) << s;
}

}  // namespace
}  // namespace braid
