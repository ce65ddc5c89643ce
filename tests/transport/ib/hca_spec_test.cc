// BRAID_IB_HCA's syntax (NCCL_IB_HCA's): every form, and the errors for what it is not.
#include "transport/ib/hca_spec.h"

#include <gtest/gtest.h>

namespace braid::transport::ib {
namespace {

HcaSpec parse_ok(std::string_view text) {
  auto r = parse_hca_spec(text);
  EXPECT_TRUE(r.is_ok()) << text << ": " << r.status().message();
  return r.is_ok() ? r.value() : HcaSpec{};
}

TEST(HcaSpec, EmptyAllowsEveryDeviceAndPort) {
  for (std::string_view text : {"", "  "}) {
    HcaSpec s = parse_ok(text);
    EXPECT_TRUE(s.entries.empty());
    EXPECT_TRUE(hca_spec_allows(s, "mlx5_0", 1));
    EXPECT_TRUE(hca_spec_allows(s, "rxe1", 2));
  }
}

TEST(HcaSpec, ListWithAndWithoutPorts) {
  HcaSpec s = parse_ok("mlx5_0:1,mlx5_1");
  ASSERT_EQ(s.entries.size(), 2u);
  EXPECT_EQ(s.entries[0].device, "mlx5_0");
  EXPECT_EQ(s.entries[0].port, 1);
  EXPECT_EQ(s.entries[1].device, "mlx5_1");
  EXPECT_EQ(s.entries[1].port, -1);
  EXPECT_FALSE(s.exclude);
  EXPECT_FALSE(s.exact);
  EXPECT_TRUE(hca_spec_allows(s, "mlx5_0", 1));
  EXPECT_FALSE(hca_spec_allows(s, "mlx5_0", 2)) << "only port 1 of mlx5_0 is listed";
  EXPECT_TRUE(hca_spec_allows(s, "mlx5_1", 1));
  EXPECT_TRUE(hca_spec_allows(s, "mlx5_1", 2));
  EXPECT_FALSE(hca_spec_allows(s, "mlx5_2", 1));
  EXPECT_FALSE(hca_spec_allows(s, "rxe0", 1));
}

TEST(HcaSpec, NamesArePrefixesUnlessExact) {
  HcaSpec prefix = parse_ok("mlx5_1");
  EXPECT_TRUE(hca_spec_allows(prefix, "mlx5_1", 1));
  EXPECT_TRUE(hca_spec_allows(prefix, "mlx5_10", 1)) << "NCCL_IB_HCA matches names as prefixes";
  EXPECT_FALSE(hca_spec_allows(prefix, "mlx5_", 1));

  HcaSpec exact = parse_ok("=mlx5_1");
  EXPECT_TRUE(exact.exact);
  EXPECT_TRUE(hca_spec_allows(exact, "mlx5_1", 1));
  EXPECT_FALSE(hca_spec_allows(exact, "mlx5_10", 1));

  HcaSpec family = parse_ok("mlx5");
  EXPECT_TRUE(hca_spec_allows(family, "mlx5_3", 1));
  EXPECT_FALSE(hca_spec_allows(family, "rxe0", 1));
}

TEST(HcaSpec, CaretExcludes) {
  HcaSpec s = parse_ok("^mlx5_2");
  EXPECT_TRUE(s.exclude);
  EXPECT_FALSE(hca_spec_allows(s, "mlx5_2", 1));
  EXPECT_FALSE(hca_spec_allows(s, "mlx5_20", 1)) << "a prefix excludes every device it starts";
  EXPECT_TRUE(hca_spec_allows(s, "mlx5_0", 1));

  HcaSpec port = parse_ok("^mlx5_0:2");
  EXPECT_TRUE(hca_spec_allows(port, "mlx5_0", 1));
  EXPECT_FALSE(hca_spec_allows(port, "mlx5_0", 2));

  HcaSpec exact = parse_ok("^=rxe0");
  EXPECT_TRUE(exact.exclude);
  EXPECT_TRUE(exact.exact);
  EXPECT_FALSE(hca_spec_allows(exact, "rxe0", 1));
  EXPECT_TRUE(hca_spec_allows(exact, "rxe01", 1));
  EXPECT_TRUE(hca_spec_allows(exact, "rxe1", 1));
}

TEST(HcaSpec, SpacesAroundEntriesAreIgnoredAndTheTextKept) {
  HcaSpec s = parse_ok(" rxe0 , rxe1:1 ");
  ASSERT_EQ(s.entries.size(), 2u);
  EXPECT_EQ(s.entries[0].device, "rxe0");
  EXPECT_EQ(s.entries[1].device, "rxe1");
  EXPECT_EQ(s.entries[1].port, 1);
  EXPECT_EQ(s.text, " rxe0 , rxe1:1 ");
}

struct Bad {
  const char* text;
  const char* says;  // a piece of the message naming what is wrong
};

class HcaSpecRejects : public ::testing::TestWithParam<Bad> {};

TEST_P(HcaSpecRejects, NamingTheVariableTheTextAndWhatIsAllowed) {
  const Bad& b = GetParam();
  auto r = parse_hca_spec(b.text);
  ASSERT_FALSE(r.is_ok()) << b.text;
  EXPECT_EQ(r.status().code(), ErrorCode::invalid_argument);
  const std::string& m = r.status().message();
  EXPECT_NE(m.find(std::string("BRAID_IB_HCA='") + b.text + "'"), std::string::npos) << m;
  EXPECT_NE(m.find(b.says), std::string::npos) << m;
  EXPECT_NE(m.find("allowed: comma-separated DEVICE or DEVICE:PORT"), std::string::npos) << m;
  EXPECT_NE(m.find("'^'"), std::string::npos) << m;
  EXPECT_NE(m.find("'='"), std::string::npos) << m;
}

INSTANTIATE_TEST_SUITE_P(
    EveryMistake, HcaSpecRejects,
    ::testing::Values(Bad{"^", "no device named after '^'"}, Bad{"=", "no device named after '='"},
                      Bad{"^=", "no device named after '^'"}, Bad{"mlx5_0,,mlx5_1", "an empty entry"},
                      Bad{"mlx5_0,", "an empty entry"}, Bad{",", "an empty entry"},
                      Bad{"mlx5_0:", "port '' of mlx5_0"}, Bad{"mlx5_0:0", "port '0' of mlx5_0 is not a number in [1, 255]"},
                      Bad{"mlx5_0:256", "port '256'"}, Bad{"mlx5_0:x", "port 'x'"}, Bad{"mlx5_0:1:2", "port '1:2'"},
                      Bad{":1", "'' is not a device name"}, Bad{"mlx 5", "'mlx 5' is not a device name"},
                      Bad{"=^mlx5_0", "'^mlx5_0' is not a device name"}));

}  // namespace
}  // namespace braid::transport::ib
