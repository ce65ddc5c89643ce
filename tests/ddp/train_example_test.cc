// The Fashion-MNIST example end to end: alone, and under braidrun with 2 and 4 ranks, it
// prints the same losses, up to rounding (DDP takes the same SGD steps as one process on the whole batch).
#include <gtest/gtest.h>

#include <cstdlib>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "tests/ddp/epoch_lines.h"
#include "tests/ddp/example_run.h"
#include "tests/support/subprocess.h"

namespace braid::ddp {
namespace {

using braid::testing::Subprocess;
constexpr auto kBound = std::chrono::seconds(120);

TEST(TrainExample, SameLossesAloneAndUnderBraidrun) {
  const std::string exe = braid::testing::binary_from_env("TRAIN_FASHION_MNIST");
  const std::vector<std::string> args = {"--epochs", "2", "--limit", "1536", "--batch", "64"};
  const ExampleRun alone = run_alone(exe, args, kBound);
  if (alone.rc == kExampleSkipped) GTEST_SKIP() << alone.output;
  ASSERT_EQ(alone.rc, 0) << alone.output;
  const std::vector<Epoch>& want = alone.epochs;
  ASSERT_EQ(want.size(), 2u) << alone.output;
  EXPECT_LT(want[1].train_loss, want[0].train_loss) << alone.output;  // it learns

  const char* braidrun = std::getenv("BRAIDRUN");
  if (!braidrun) GTEST_SKIP() << "BRAIDRUN not set (braidrun not built)";
  for (int n : {2, 4}) {
    const ExampleRun run = run_under_braidrun(braidrun, n, exe, args, 30, kBound);
    ASSERT_EQ(run.rc, 0) << run.output;
    expect_close(run.epochs, want, std::to_string(n) + " ranks:\n" + run.output + "\nalone:\n" + alone.output);
  }
}

TEST(TrainExample, HelpAndVersionExitZero) {
  const std::string exe = braid::testing::binary_from_env("TRAIN_FASHION_MNIST");
  Subprocess help({exe, "--help"});
  ASSERT_EQ(help.wait(kBound), 0) << help.output();
  for (const char* want : {"usage: train_fashion_mnist", "Fashion-MNIST", "--epochs N", "--hook", "WORLD_SIZE", "BRAID_"})
    EXPECT_NE(help.output().find(want), std::string::npos) << want << " in:\n" << help.output();
  Subprocess version({exe, "--version", "--epochs", "bad"});  // --version wins over what follows
  ASSERT_EQ(version.wait(kBound), 0) << version.output();
  EXPECT_TRUE(std::regex_search(version.output(), std::regex(R"(^train_fashion_mnist \(braid \d+\.\d+\.\d+\)\n)"
                                                             R"(features: io_uring (yes|no), ib (yes|no), )"
                                                             R"(cuda (yes|no), torch (yes|no)\n$)")))
      << version.output();
}

// Under braidrun the output is a pipe: rank 0 prints exactly one line per epoch, with the time
// so far and an estimate of the time left (no bar, no carriage returns), and the others nothing.
TEST(TrainExample, UnderBraidrunOneProgressLinePerEpoch) {
  const std::string exe = braid::testing::binary_from_env("TRAIN_FASHION_MNIST");
  const char* braidrun = std::getenv("BRAIDRUN");
  if (!braidrun) GTEST_SKIP() << "BRAIDRUN not set (braidrun not built)";
  const ExampleRun run = run_under_braidrun(braidrun, 2, exe, {"--epochs", "3", "--limit", "640"}, 30, kBound);
  if (run.rc == kExampleSkipped) GTEST_SKIP() << run.output;
  ASSERT_EQ(run.rc, 0) << run.output;
  EXPECT_EQ(run.output.find('\r'), std::string::npos) << run.output;
  std::vector<std::string> epoch_lines;
  std::istringstream in(run.output);
  for (std::string line; std::getline(in, line);) {
    if (line.find("epoch ") != std::string::npos) epoch_lines.push_back(line);
  }
  const std::string num = R"(\d+\.\d s|\d+ min \d\d s)";
  const std::string results = R"(train loss [\d.]+ acc [\d.]+% \| test loss [\d.]+ acc [\d.]+% \| 10 steps, [\d.]+ s)";
  ASSERT_EQ(epoch_lines.size(), 3u) << run.output;
  for (int e = 1; e <= 3; ++e) {
    const std::string tail = e < 3 ? "about (" + num + ") left" : "done";
    EXPECT_TRUE(std::regex_match(epoch_lines[e - 1], std::regex(R"(\[rank 0\] epoch )" + std::to_string(e) + "/3: " +
                                                                results + R"( \| elapsed ()" + num + "), " + tail)))
        << epoch_lines[e - 1];
  }
}

}  // namespace
}  // namespace braid::ddp
