// The libtorch Fashion-MNIST example end to end, on a subset for one epoch: alone, and under
// braidrun with 2 ranks, it learns (loss below chance's ln 10) and prints the same losses, up
// to rounding (TorchDdp takes the step one process takes on the whole batch).
#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <vector>

#include "tests/ddp/epoch_lines.h"
#include "tests/ddp/example_run.h"
#include "tests/support/subprocess.h"

namespace braid::ddp {
namespace {

using braid::testing::Subprocess;
constexpr auto kBound = std::chrono::seconds(150);

TEST(TorchTrainExample, OneEpochAloneAndOnTwoRanks) {
  const std::string exe = braid::testing::binary_from_env("TRAIN_FASHION_MNIST_TORCH");
  const std::vector<std::string> args = {"--epochs", "1", "--limit", "2048", "--batch", "32", "--lr", "0.1"};
  const ExampleRun alone = run_alone(exe, args, kBound);
  if (alone.rc == kExampleSkipped) GTEST_SKIP() << alone.output;
  ASSERT_EQ(alone.rc, 0) << alone.output;
  const std::vector<Epoch>& want = alone.epochs;
  ASSERT_EQ(want.size(), 1u) << alone.output;
  EXPECT_LT(want[0].train_loss, 2.0) << "no better than chance (ln 10 = 2.30)\n" << alone.output;
  EXPECT_GT(want[0].test_acc, 50.0) << alone.output;

  const ExampleRun run = run_under_braidrun(braid::testing::binary_from_env("BRAIDRUN"), 2, exe, args, 60, kBound);
  ASSERT_EQ(run.rc, 0) << run.output;
  const std::vector<Epoch>& got = run.epochs;
  ASSERT_EQ(got.size(), 1u) << run.output;
  EXPECT_NE(run.output.find("2 ranks x 16 = batch 32"), std::string::npos) << run.output;
  expect_close(got, want, "2 ranks:\n" + run.output + "\nalone:\n" + alone.output);
}

TEST(TorchTrainExample, HelpAndVersionExitZero) {
  const std::string exe = braid::testing::binary_from_env("TRAIN_FASHION_MNIST_TORCH");
  Subprocess help({exe, "--help"});
  ASSERT_EQ(help.wait(kBound), 0) << help.output();
  for (const char* want : {"usage: train_fashion_mnist_torch", "libtorch", "--epochs N", "WORLD_SIZE"})
    EXPECT_NE(help.output().find(want), std::string::npos) << want << " in:\n" << help.output();
  Subprocess version({exe, "--version"});
  ASSERT_EQ(version.wait(kBound), 0) << version.output();
  EXPECT_TRUE(std::regex_search(version.output(), std::regex(R"(^train_fashion_mnist_torch \(braid [\d.]+\)\n)"
                                                             R"(features: .*torch yes\n$)")))
      << version.output();
}

}  // namespace
}  // namespace braid::ddp
