// What braidrun itself says (--version, --help) and how soon it passes on what a rank says.
#include <signal.h>

#include <gtest/gtest.h>

#include <chrono>
#include <regex>
#include <string>
#include <thread>

#include "tests/tools/braidrun/braidrun_runner.h"

namespace braid::braidrun::testing {
namespace {

bool contains(const std::string& haystack, const std::string& needle) {
  return haystack.find(needle) != std::string::npos;
}

TEST(BraidrunCli, VersionNamesTheVersionAndTheFeatures) {
  RunResult r = run_braidrun({"--version"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  EXPECT_TRUE(std::regex_match(r.out, std::regex(R"(braidrun \(braid \d+\.\d+\.\d+\)\n)"
                                                 R"(features: io_uring (yes|no), ib (yes|no), cuda (yes|no), )"
                                                 R"(torch (yes|no)\n)")))
      << r.out;
  EXPECT_EQ(r.err, "");
}

TEST(BraidrunCli, HelpSaysWhatItDoesItsFlagsAndTheEnvironmentItReads) {
  RunResult r = run_braidrun({"-h"});
  EXPECT_EQ(r.exit_code, 0) << r.err;
  for (const char* want : {"usage: braidrun", "Starts PROGRAM once per local rank", "--nproc-per-node", "--version",
                           "BRAID_RENDEZVOUS_TIMEOUT_S", "BRAID_SECRET_FILE", "PATH"}) {
    EXPECT_TRUE(contains(r.out, want)) << want << " in:\n" << r.out;
  }
}

// A bad BRAID_* value is braidrun's error for a job, but must not hide its help or version.
TEST(BraidrunCli, HelpAndVersionDespiteABadBraidVariable) {
  setenv("BRAID_TIMEOUT_S", "soon", 1);
  RunResult help = run_braidrun({"--help"});
  RunResult version = run_braidrun({"--version"});
  RunResult job = run_braidrun({"--standalone", rank_helper_path()});
  unsetenv("BRAID_TIMEOUT_S");
  EXPECT_EQ(help.exit_code, 0) << help.err;
  EXPECT_TRUE(contains(help.out, "usage: braidrun")) << help.out;
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_EQ(job.exit_code, 1);
  EXPECT_TRUE(contains(job.err, "BRAID_TIMEOUT_S")) << job.err;
}

// A rank prints a header, flushes and then works (sleeps) for a long time: braidrun shows the
// header while the rank still runs, not when its next line or its exit comes.
TEST(BraidrunOutput, AFlushedLineAppearsWhileTheRankStillRuns) {
  TempDir dir;
  BraidrunProcess job({"--standalone", rank_helper_path(), "pidfile", dir.path(), "print", "header of a long run",
                       "sleep", "60"});
  std::vector<pid_t> pids = read_pidfiles(dir.path(), 1, 30);
  ASSERT_EQ(pids.size(), 1u);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  std::string out;
  while (!contains(out = job.out_so_far(), "[rank 0] header of a long run\n") &&
         std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(contains(out, "[rank 0] header of a long run\n")) << out;
  EXPECT_TRUE(pid_alive(pids[0])) << "the rank ended before its header was seen; the test proves nothing";
  kill(job.pid(), SIGTERM);
  RunResult r = job.wait(30);
  EXPECT_FALSE(r.timed_out);
  EXPECT_TRUE(wait_pids_gone(pids, 30).empty());
}

}  // namespace
}  // namespace braid::braidrun::testing
