// TorchDdp across real processes over TCP: N ranks training a libtorch model through the
// adapter end with the parameters (and buffers) one plain-libtorch process gets on the whole
// batch, whatever the world size, bucketing, gradient clearing, accumulation under no_sync, or
// parameters some ranks (or all) produce no gradient for; misuse fails with a clear message.
//
// The rank binary (torch_ddp_rank) holds all the libtorch code, this driver none of it.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/ddp/rank_world.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

namespace braid::ddp {
namespace {

using braid::testing::Subprocess;
constexpr auto kBound = std::chrono::seconds(120);  // no run here may take anywhere near this long

using braid::ddp::testing::read_floats;
using braid::ddp::testing::World;
using braid::testing::TempDir;

// Starts `n` rank processes that meet through the environment, and waits for all of them.
World run_world(size_t n, const std::vector<std::string>& args, const std::string& out_dir) {
  World w = braid::ddp::testing::start_world({.binary_env = "TORCH_DDP_RANK", .timeout_s = 60}, n, args, out_dir);
  braid::ddp::testing::wait_world(w, kBound);
  return w;
}

// The yardstick: one process on the whole batch with plain libtorch (no braid at all).
std::vector<float> reference(const std::vector<std::string>& args, const std::string& path) {
  std::vector<std::string> argv = {braid::testing::binary_from_env("TORCH_DDP_RANK"), "--reference", "--out", path};
  argv.insert(argv.end(), args.begin(), args.end());
  Subprocess p(argv, {{"WORLD_SIZE", "\x01"}, {"RANK", "\x01"}});
  const int rc = p.wait(kBound);
  EXPECT_EQ(rc, 0) << p.output();
  return read_floats(path);
}

// Runs `n` ranks with `args` and compares every rank's final state with the reference's.
// Returns the world, for checks of the ranks' output.
World expect_matches_reference(size_t n, const std::vector<std::string>& args, float tolerance) {
  TempDir dir;
  World w = run_world(n, args, dir.path());
  for (size_t r = 0; r < n; ++r) EXPECT_EQ(w.exit_codes[r], 0) << w.outputs;
  if (::testing::Test::HasFailure()) return w;

  // Only options that change what is computed go to the reference; the rest are DDP's business.
  std::vector<std::string> recipe;
  for (size_t i = 0; i + 1 < args.size(); ++i) {
    if (args[i] == "--steps" || args[i] == "--batch" || args[i] == "--micro" || args[i] == "--lr") {
      recipe.insert(recipe.end(), {args[i], args[i + 1]});
    }
  }
  const std::vector<float> want = reference(recipe, dir.path() + "/reference.bin");
  std::vector<std::string> untrained = recipe;
  untrained.insert(untrained.end(), {"--steps", "0"});
  const std::vector<float> start = reference(untrained, dir.path() + "/start.bin");
  EXPECT_FALSE(want.empty());
  EXPECT_EQ(start.size(), want.size());
  // Training must have moved the model well beyond the tolerance, or matching it proves little.
  double moved = 0;
  for (size_t i = 0; i < want.size() && i < start.size(); ++i) {
    moved = std::max(moved, static_cast<double>(std::fabs(want[i] - start[i])));
  }
  EXPECT_GT(moved, 100 * tolerance);

  std::vector<float> rank0;
  for (size_t r = 0; r < n; ++r) {
    const std::vector<float> got = read_floats(dir.path() + "/rank" + std::to_string(r) + ".bin");
    EXPECT_EQ(got.size(), want.size()) << "rank " << r << "\n" << w.outputs;
    if (got.size() != want.size()) continue;
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (!(std::fabs(got[i] - want[i]) <= tolerance) && ++bad <= 5) {
        ADD_FAILURE() << "rank " << r << " of " << n << ", state element " << i << ": " << got[i] << ", want "
                      << want[i];
      }
    }
    EXPECT_EQ(bad, 0u) << "rank " << r << " of " << n << "\n" << w.outputs;
    // Every rank applies the same averaged gradients to the same weights: replicas agree exactly.
    if (r == 0)
      rank0 = got;
    else
      EXPECT_EQ(got, rank0) << "rank " << r << " differs from rank 0";
  }
  return w;
}

class TorchDdpWorld : public ::testing::TestWithParam<size_t> {};

TEST_P(TorchDdpWorld, MatchesOneProcessOnTheFullBatch) {
  // 64-byte buckets: several all_reduces per step, started from the hooks during backward
  // (each rank checks that every reached gradient was reported before synchronize()).
  expect_matches_reference(GetParam(), {"--bucket-bytes", "64"}, 2e-5f);
}

TEST_P(TorchDdpWorld, DefaultBucketCapsOneBucket) { expect_matches_reference(GetParam(), {}, 2e-5f); }

INSTANTIATE_TEST_SUITE_P(WorldSizes, TorchDdpWorld, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::string("N").append(std::to_string(info.param)); });

TEST(TorchDdp, GradientsSetToNoneAreAdoptedIntoTheBuckets) {
  // zero_grad(set_to_none) makes autograd allocate fresh gradients each step, which the adapter
  // copies into the buckets and replaces with its views again.
  expect_matches_reference(3, {"--zero", "none", "--bucket-bytes", "64"}, 2e-5f);
}

TEST(TorchDdp, NoSyncAccumulatesMicroBatchesThenReduces) {
  expect_matches_reference(2, {"--micro", "3", "--bucket-bytes", "64"}, 2e-5f);
  expect_matches_reference(3, {"--micro", "2", "--zero", "none"}, 2e-5f);
}

TEST(TorchDdp, ParametersWithoutGradientOnSomeOrAllRanks) {
  // With 4 ranks of 3 samples, `side` (reached through every 7th sample) gets no gradient on
  // some ranks in some steps, and `never` on no rank ever; both must still come out as the
  // single process has them.
  World w = expect_matches_reference(4, {"--bucket-bytes", "32"}, 2e-5f);
  size_t ranks_without = 0, ranks_with = 0;
  for (size_t r = 0; r < w.ranks.size(); ++r) {
    size_t reached = 0, passes = 0;
    const std::string out = w.output(r);
    const size_t at = out.find("side reached in ");
    ASSERT_NE(at, std::string::npos) << w.outputs;
    ASSERT_EQ(std::sscanf(out.c_str() + at, "side reached in %zu of %zu", &reached, &passes), 2) << w.outputs;
    ranks_without += reached < passes ? 1 : 0;
    ranks_with += reached > 0 ? 1 : 0;
  }
  EXPECT_GT(ranks_without, 0u) << "the test no longer exercises locally unused parameters\n" << w.outputs;
  EXPECT_GT(ranks_with, 0u) << w.outputs;
}

TEST(TorchDdp, GradientsFollowBucketsRebuiltAfterTheFirstStep) {
  // A bucket per parameter: the first synchronize() re-plans in autograd's order, moving the
  // gradients to new memory; the adapter must point every param.grad() at the new place.
  World w = expect_matches_reference(2, {"--bucket-bytes", "4"}, 2e-5f);
  EXPECT_NE(w.output(0).find("rebuilds=1"), std::string::npos) << w.outputs;
}

TEST(TorchDdp, CompressedHook) {
  // Gradients travel as f16: close to the f32 run, not equal.
  expect_matches_reference(2, {"--hook", "f16", "--bucket-bytes", "64"}, 2e-3f);
}

TEST(TorchDdp, BackwardTwiceWithoutSynchronizeIsAnError) {
  World w = run_world(2, {"--skip-synchronize"}, "");
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(w.exit_codes[r], 1) << w.outputs;
    EXPECT_NE(w.output(r).find("got a second gradient before synchronize()"), std::string::npos) << w.outputs;
  }
}

TEST(TorchDdp, DifferentModelsAreRejectedOnEveryRank) {
  World w = run_world(2, {"--extra-param-on-rank1"}, "");
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(w.exit_codes[r], 1) << w.outputs;
    EXPECT_NE(w.output(r).find("every rank must build the same model"), std::string::npos) << w.outputs;
  }
}

}  // namespace
}  // namespace braid::ddp
