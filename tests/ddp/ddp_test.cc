// DDP across real processes: N ranks training with the Reducer end with the parameters one
// process gets training on the whole batch, whatever the world size, bucketing, ready order,
// gradient ownership, accumulation or hook; and a rank that dies makes the others fail loudly.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "tests/ddp/rank_world.h"
#include "tests/ddp/synthetic.h"
#include "tests/support/temp_dir.h"
#include "tests/support/subprocess.h"
#include "tools/examples/mlp.h"

namespace braid::ddp {
namespace {

using braid::examples::Mlp;
using braid::testing::Subprocess;
using std::chrono::seconds;
namespace dt = braid::ddp::testing;

constexpr auto kBound = seconds(90);  // no test here may take anywhere near this long

struct Recipe {
  size_t steps = 6;
  size_t batch = 12;
  size_t micro = 1;
  float lr = 0.5f;
  bool unused = false;
};

// The reference: one process, the whole batch, no communication. Returns every parameter
// (the MLP's four, then aux) flattened.
std::vector<float> reference(const Recipe& r, size_t world) {
  Mlp mlp(dt::small_shape(), dt::kModelSeed);
  std::vector<float> aux(dt::kAuxCount, dt::kAuxInit);
  std::vector<std::vector<float>> g(Mlp::kNumParams);
  for (size_t s = 0; s < r.steps; ++s) {
    float* grads[Mlp::kNumParams];
    for (size_t i = 0; i < Mlp::kNumParams; ++i) {
      g[i].assign(mlp.param_count(i), 0.0f);
      grads[i] = g[i].data();
    }
    for (size_t m = 0; m < r.micro; ++m) {
      dt::Samples data = dt::make_samples((s * r.micro + m) * r.batch, r.batch, mlp.shape());
      mlp.train_batch(data.x.data(), data.y.data(), r.batch, 1.0f / static_cast<float>(r.batch * r.micro), grads,
                      [](size_t) {});
    }
    mlp.sgd_step(grads, r.lr);
    if (r.unused) {
      float sum = 0;
      for (size_t q = 0; q < world; ++q) {
        bool used = false;
        sum += dt::aux_gradient(s, q, &used);
      }
      for (float& a : aux) a -= r.lr * sum / static_cast<float>(world);
    }
  }
  std::vector<float> all;
  for (size_t i = 0; i < Mlp::kNumParams; ++i) all.insert(all.end(), mlp.param(i), mlp.param(i) + mlp.param_count(i));
  all.insert(all.end(), aux.begin(), aux.end());
  return all;
}

using dt::read_floats;
using dt::World;
using braid::testing::TempDir;

World start_world(size_t n, const std::vector<std::string>& args, const std::string& out_dir,
                  const std::map<std::string, std::string>& extra_env = {}) {
  return dt::start_world({.binary_env = "DDP_RANK", .timeout_s = 30, .extra_env = extra_env}, n, args, out_dir);
}

void wait_world(World& w) { dt::wait_world(w, kBound); }

World run_world(size_t n, const std::vector<std::string>& args, const std::string& out_dir) {
  World w = start_world(n, args, out_dir);
  wait_world(w);
  return w;
}

// Runs `n` ranks and compares every rank's final parameters with the reference.
void expect_matches_reference(size_t n, const Recipe& recipe, std::vector<std::string> args, float tolerance) {
  TempDir dir;
  args.insert(args.end(), {"--steps", std::to_string(recipe.steps), "--batch", std::to_string(recipe.batch), "--micro",
                           std::to_string(recipe.micro), "--lr", std::to_string(recipe.lr)});
  if (recipe.unused) args.push_back("--unused");
  World w = run_world(n, args, dir.path());
  for (size_t r = 0; r < n; ++r) ASSERT_EQ(w.exit_codes[r], 0) << w.outputs;
  const std::vector<float> want = reference(recipe, n);
  // The training must have moved the model, or matching it would prove little.
  const std::vector<float> start = reference(Recipe{.steps = 0}, n);
  double moved = 0;
  for (size_t i = 0; i < want.size(); ++i) moved = std::max(moved, static_cast<double>(std::fabs(want[i] - start[i])));
  EXPECT_GT(moved, 10 * tolerance);

  std::vector<float> rank0;
  for (size_t r = 0; r < n; ++r) {
    const std::vector<float> got = read_floats(dir.path() + "/rank" + std::to_string(r) + ".bin");
    ASSERT_EQ(got.size(), want.size()) << "rank " << r << "\n" << w.outputs;
    size_t bad = 0;
    for (size_t i = 0; i < want.size(); ++i) {
      if (!(std::fabs(got[i] - want[i]) <= tolerance)) {
        if (++bad <= 5)
          ADD_FAILURE() << "rank " << r << " parameter element " << i << ": " << got[i] << ", want " << want[i];
      }
    }
    EXPECT_EQ(bad, 0u) << "rank " << r << " of " << n;
    // Every rank applies the same averaged gradients, so the replicas agree exactly.
    if (r == 0)
      rank0 = got;
    else
      EXPECT_EQ(got, rank0) << "rank " << r << " differs from rank 0";
  }
}

class DdpWorld : public ::testing::TestWithParam<size_t> {};

TEST_P(DdpWorld, MatchesOneProcessOnTheFullBatch) {
  // Buckets of 256 bytes: several buckets per step, launched while "backward" still runs.
  expect_matches_reference(GetParam(), Recipe{}, {"--bucket-bytes", "256"}, 1e-4f);
}

TEST_P(DdpWorld, DefaultBucketCapsOneBucket) { expect_matches_reference(GetParam(), Recipe{}, {}, 1e-4f); }

INSTANTIATE_TEST_SUITE_P(WorldSizes, DdpWorld, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return std::string("N").append(std::to_string(info.param)); });

TEST(Ddp, CallerOwnedGradientsAreCopiedInAndOut) {
  expect_matches_reference(3, Recipe{}, {"--caller-grads", "--bucket-bytes", "256"}, 1e-4f);
}

TEST(Ddp, LocalReadyOrderMayDifferBetweenRanks) {
  // Odd ranks mark their gradients ready in the opposite order: buckets still start in the
  // same order everywhere, so the collectives match.
  expect_matches_reference(3, Recipe{}, {"--reverse-ready-on-odd", "--bucket-bytes", "64"}, 1e-4f);
}

TEST(Ddp, BucketsAreRebuiltInReadyOrderAfterTheFirstStep) {
  TempDir dir;
  // With a bucket per parameter, reverse registration order (aux, b2, w2, b1, w1) differs from
  // the order backward marks them (w2, b2, w1, b1, then aux unused): one rebuild.
  World w = run_world(2, {"--bucket-bytes", "4"}, dir.path());
  for (int rc : w.exit_codes) ASSERT_EQ(rc, 0) << w.outputs;
  EXPECT_NE(w.ranks[0]->output().find("buckets 5 -> 5, rebuilds=1"), std::string::npos) << w.outputs;
  EXPECT_NE(w.ranks[1]->output().find("rebuilds=1"), std::string::npos) << w.outputs;
  expect_matches_reference(2, Recipe{}, {"--bucket-bytes", "4"}, 1e-4f);
}

TEST(Ddp, NoSyncAccumulatesMicroBatchesThenReduces) {
  expect_matches_reference(2, Recipe{.micro = 3}, {"--bucket-bytes", "256"}, 1e-4f);
  expect_matches_reference(3, Recipe{.micro = 2}, {"--caller-grads"}, 1e-4f);
}

TEST(Ddp, UnusedParametersCountAsZeroGradients) {
  expect_matches_reference(3, Recipe{.unused = true}, {"--bucket-bytes", "128"}, 1e-4f);
  expect_matches_reference(2, Recipe{.micro = 2, .unused = true}, {}, 1e-4f);
}

TEST(Ddp, CompressionHooks) {
  // Gradients rounded to 11 (f16) or 8 (bf16) significant bits: close to the f32 run, not equal.
  expect_matches_reference(2, Recipe{}, {"--hook", "f16", "--bucket-bytes", "256"}, 2e-3f);
  expect_matches_reference(4, Recipe{}, {"--hook", "f16sum"}, 2e-3f);
  expect_matches_reference(3, Recipe{}, {"--hook", "bf16", "--bucket-bytes", "256"}, 2e-2f);
  expect_matches_reference(2, Recipe{}, {"--hook", "bf16sum"}, 2e-2f);
}

TEST(Ddp, DifferentModelsAreRejectedOnEveryRank) {
  World w = run_world(2, {"--hidden-on-rank1", "17"}, "");
  for (size_t r = 0; r < 2; ++r) {
    EXPECT_EQ(w.exit_codes[r], 1) << w.outputs;
    EXPECT_NE(w.ranks[r]->output().find("every rank must build the same model"), std::string::npos) << w.outputs;
  }
}

TEST(Ddp, KilledRankMakesTheOthersFailClearly) {
  // Rank 1 dies in step 2 with its first buckets in flight. The survivors must report it
  // (which step and bucket, which peer) promptly, then exit; nothing may wait for the 20 s
  // operation timeout. Rank 0 serves the store and may linger up to the rendezvous timeout
  // for the dead rank to sign off before exiting.
  World w = start_world(3, {"--steps", "50", "--bucket-bytes", "256", "--kill-rank", "1", "--kill-step", "2"}, "",
                        {{"BRAID_TIMEOUT_S", "20"}, {"BRAID_RENDEZVOUS_TIMEOUT_S", "10"}});
  ASSERT_EQ(w.ranks[1]->wait(kBound), 128 + SIGKILL) << w.ranks[1]->output();
  const auto died = std::chrono::steady_clock::now();
  auto reported = [&](size_t r) { return w.ranks[r]->output().find("ddp_rank: ddp: step 2") != std::string::npos; };
  while (!(reported(0) && reported(2)) && std::chrono::steady_clock::now() - died < seconds(15)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_LT(std::chrono::steady_clock::now() - died, seconds(5)) << "the survivors took too long to notice";
  wait_world(w);
  for (size_t r : {0u, 2u}) {
    EXPECT_EQ(w.exit_codes[r], 1) << "rank " << r << "\n" << w.outputs;
    const std::string out = w.ranks[r]->output();
    EXPECT_NE(out.find("gradient bucket"), std::string::npos) << w.outputs;
    EXPECT_NE(out.find("failed on rank " + std::to_string(r) + " of 3"), std::string::npos) << w.outputs;
    EXPECT_NE(out.find("[peer lost]"), std::string::npos) << w.outputs;
  }
}

}  // namespace
}  // namespace braid::ddp
