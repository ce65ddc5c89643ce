// Every collective between real processes, over TCP (collectives_tcp) and over shm
// (collectives_shm: the same cases with BRAID_TRANSPORT=shm in the environment, which every rank
// inherits and which fails rather than fall back): braid-perf with -c 1 under braidrun checks
// each result against its exact expected value and that all ranks hold the same bytes. A
// covering slice (world sizes, dtypes, ops, roots, forced algorithms) keeps it short.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace braid {
namespace {

using testing::Subprocess;

struct PerfCase {
  std::string op;
  int ranks;
  std::string dtype;
  std::string redop;
  int root;
  std::string algo;  // "" = auto
  std::string bytes; // one size; odd sizes round down as nccl-tests does
};

std::string describe(const PerfCase& c) {
  return c.op + " n=" + std::to_string(c.ranks) + " " + c.dtype + " " + c.redop + " root " + std::to_string(c.root) +
         " algo " + (c.algo.empty() ? "auto" : c.algo) + " bytes " + c.bytes;
}

std::string run_perf(const PerfCase& c, int* rc) {
  std::vector<std::string> argv = {testing::binary_from_env("BRAIDRUN"), "--standalone", "--nproc-per-node",
                                   std::to_string(c.ranks), testing::binary_from_env("BRAID_PERF"), "--op", c.op,
                                   "-b", c.bytes, "-e", c.bytes, "-n", "2", "-w", "1", "-c", "1", "-d", c.dtype,
                                   "--redop", c.redop, "--root", std::to_string(c.root)};
  if (!c.algo.empty()) {
    argv.push_back("--algo");
    argv.push_back(c.algo);
  }
  Subprocess p(argv, {{"BRAID_TIMEOUT_S", "60"}});
  *rc = p.wait(std::chrono::seconds(120));
  return p.output();
}

class PerfOverTcp : public ::testing::TestWithParam<PerfCase> {};

TEST_P(PerfOverTcp, ResultsAreExactOnEveryRank) {
  int rc = 0;
  std::string out = run_perf(GetParam(), &rc);
  EXPECT_EQ(rc, 0) << describe(GetParam()) << "\n" << out;
  EXPECT_NE(out.find("Out of bounds values : 0 OK"), std::string::npos) << describe(GetParam()) << "\n" << out;
}

// Every op appears with several world sizes, dtypes and algorithms; every dtype and reduction
// op appears at least once; sizes include odd ones that do not divide by the world size.
INSTANTIATE_TEST_SUITE_P(
    Slice, PerfOverTcp,
    ::testing::Values(
        PerfCase{"all_reduce", 2, "f32", "sum", 0, "", "4K"}, PerfCase{"all_reduce", 3, "bf16", "avg", 0, "ring", "1M"},
        PerfCase{"all_reduce", 4, "i32", "bxor", 0, "tree", "100003"},
        PerfCase{"all_reduce", 5, "f16", "max", 0, "rd", "7"}, PerfCase{"all_reduce", 3, "i64", "prod", 0, "", "8M"},
        PerfCase{"all_reduce", 2, "u8", "band", 0, "rd", "1001"}, PerfCase{"all_reduce", 4, "f64", "min", 0, "ring", "12345"},
        PerfCase{"all_reduce", 3, "i8", "bor", 0, "tree", "999"},
        PerfCase{"broadcast", 3, "f32", "sum", 2, "", "1M"}, PerfCase{"broadcast", 4, "u8", "sum", 1, "tree", "333"},
        PerfCase{"broadcast", 2, "f64", "sum", 1, "chain", "4M"},
        PerfCase{"reduce", 3, "f32", "sum", 1, "", "64K"}, PerfCase{"reduce", 4, "i32", "max", 3, "tree", "4099"},
        PerfCase{"reduce", 2, "bf16", "sum", 0, "chain", "2M"},
        PerfCase{"all_gather", 3, "f32", "sum", 0, "", "3M"}, PerfCase{"all_gather", 4, "i8", "sum", 0, "ring", "1000"},
        PerfCase{"reduce_scatter", 3, "f32", "sum", 0, "", "3M"},
        PerfCase{"reduce_scatter", 4, "i64", "min", 0, "ring", "8200"},
        PerfCase{"gather", 3, "f16", "sum", 2, "", "30000"}, PerfCase{"scatter", 4, "i32", "sum", 1, "", "40000"},
        PerfCase{"all_to_all", 3, "f32", "sum", 0, "", "3M"}, PerfCase{"all_to_all", 4, "u8", "sum", 0, "", "1001"},
        PerfCase{"barrier", 5, "f32", "sum", 0, "", "0"}, PerfCase{"sendrecv", 3, "f32", "sum", 0, "", "1M"},
        PerfCase{"all_reduce", 1, "f32", "sum", 0, "", "1M"}, PerfCase{"all_reduce", 2, "f32", "sum", 0, "", "0"},
        PerfCase{"all_reduce", 2, "f32", "sum", 0, "", "64M"}, PerfCase{"sendrecv", 2, "u8", "sum", 0, "", "64M"}));

}  // namespace
}  // namespace braid
