// The Fashion-MNIST example end to end: alone, and under braidrun with 2 and 4 ranks, it
// prints the same losses, up to rounding (DDP takes the same SGD steps as one process on the whole batch).
#include <gtest/gtest.h>

#include <signal.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <regex>
#include <thread>
#include <sstream>
#include <string>
#include <vector>

#include "tests/ddp/epoch_lines.h"
#include "tests/ddp/example_run.h"
#include "tests/support/subprocess.h"
#include "tests/support/temp_dir.h"

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

// The steps-done counter of a checkpoint (tools/examples/train_checkpoint.h: bytes 8..15);
// 0 while there is none.
uint64_t steps_done(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char head[16] = {};
  if (!in.read(head, sizeof head)) return 0;
  uint64_t n = 0;
  std::memcpy(&n, head + 8, sizeof n);
  return n;
}

// The rank processes braidrun (`pid`) started: its children, in the order it started them.
std::vector<pid_t> children_of(pid_t pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/task/" + std::to_string(pid) + "/children");
  std::vector<pid_t> out;
  for (pid_t c; in >> c;) out.push_back(c);
  return out;
}

std::string digest_of(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex(R"(parameters fnv1a64 ([0-9a-f]{16}))")) ? m[1].str() : "";
}

// kill -9 of a rank at a random step, under braidrun --max-restarts 1: every rank starts again,
// resumes from rank 0's last checkpoint, and ends with the very parameters of a run that was
// never interrupted.
TEST(TrainExample, AKilledRankResumesFromTheCheckpointToTheCleanRunsParameters) {
  const std::string exe = braid::testing::binary_from_env("TRAIN_FASHION_MNIST");
  const char* braidrun = std::getenv("BRAIDRUN");
  if (!braidrun) GTEST_SKIP() << "BRAIDRUN not set (braidrun not built)";
  braid::testing::TempDir dir;
  const std::vector<std::string> args = {"--epochs", "2", "--limit", "3072", "--batch", "64"};  // 2 x 48 steps
  std::vector<std::string> clean_args = args;
  clean_args.insert(clean_args.end(), {"--checkpoint", dir.path() + "/clean"});
  const ExampleRun clean = run_under_braidrun(braidrun, 2, exe, clean_args, 30, kBound);
  if (clean.rc == kExampleSkipped) GTEST_SKIP() << clean.output;
  ASSERT_EQ(clean.rc, 0) << clean.output;
  const std::string want = digest_of(clean.output);
  ASSERT_FALSE(want.empty()) << clean.output;

  std::mt19937 rng(std::random_device{}());
  const uint64_t kill_after = std::uniform_int_distribution<uint64_t>(2, 80)(rng);
  const size_t victim = std::uniform_int_distribution<size_t>(0, 1)(rng);
  SCOPED_TRACE("rank " + std::to_string(victim) + " killed once " + std::to_string(kill_after) + " steps were saved");
  const std::string checkpoint = dir.path() + "/killed";
  std::vector<std::string> argv = {braidrun, "--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                                   "--grace-s", "2", exe};
  argv.insert(argv.end(), args.begin(), args.end());
  argv.insert(argv.end(), {"--checkpoint", checkpoint});
  braid::testing::Subprocess run(argv, {{"BRAID_RENDEZVOUS_TIMEOUT_S", "30"}});
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (steps_done(checkpoint) < kill_after && std::chrono::steady_clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  const std::vector<pid_t> ranks = children_of(run.pid());
  ASSERT_EQ(ranks.size(), 2u) << "steps saved: " << steps_done(checkpoint) << "\n" << run.output();
  ASSERT_EQ(kill(ranks[victim], SIGKILL), 0);
  ASSERT_EQ(run.wait(kBound), 0) << run.output();
  EXPECT_NE(run.output().find("round 0 failed; starting every rank again"), std::string::npos) << run.output();
  EXPECT_NE(run.output().find("resuming from " + checkpoint + ": epoch "), std::string::npos) << run.output();
  EXPECT_EQ(digest_of(run.output()), want) << run.output();
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
