// valgrind memcheck over a 2-rank run of every operation (every_op_rank): no uninitialised byte
// reaches a system call (a send) or decides a branch, no definite leak. On the epoll engine
// (BRAID_TRANSPORT=tcp-poll): memcheck cannot see what io_uring's kernel side writes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/rank_job.h"
#include "tests/support/subprocess.h"

namespace braid {
namespace {

using testing::Subprocess;

constexpr int kValgrindError = 99;  // --error-exitcode: memcheck found something

// Under each algorithm preference (BRAID_ALGO: collectives without that algorithm keep theirs).
class Valgrind : public ::testing::TestWithParam<std::string> {};

TEST_P(Valgrind, EveryOperationIsClean) {
  const char* valgrind = std::getenv("VALGRIND");
  if (valgrind == nullptr || *valgrind == '\0') GTEST_SKIP() << "valgrind is not installed (scripts/setup.sh installs it)";
  testing::RankJob job{.argv = {valgrind, "--error-exitcode=" + std::to_string(kValgrindError), "--leak-check=full",
                                 "--errors-for-leak-kinds=definite", "--track-origins=yes",
                                 testing::binary_from_env("EVERY_OP_RANK")},
                       .env = {{"BRAID_TRANSPORT", "tcp-poll"},
                               {"BRAID_ALGO", GetParam()},
                               {"BRAID_SPIN_US", "0"},  // threads share one CPU under valgrind
                               {"BRAID_TIMEOUT_S", "120"},
                               {"BRAID_RENDEZVOUS_TIMEOUT_S", "120"}}};
  auto ranks = testing::start_ranks(2, job);
  for (auto& p : ranks) {
    const int rc = p->wait(std::chrono::seconds(240));
    EXPECT_NE(rc, -1) << "hung: " << p->output();
    EXPECT_EQ(rc, 0) << (rc == kValgrindError ? "memcheck found errors:\n" : "") << p->output();
    EXPECT_NE(p->output().find("every operation done, 0 wrong"), std::string::npos) << p->output();
    EXPECT_NE(p->output().find("ERROR SUMMARY: 0 errors"), std::string::npos) << "not run by memcheck? " << p->output();
  }
}

INSTANTIATE_TEST_SUITE_P(Algorithms, Valgrind, ::testing::Values("auto", "ring", "tree", "rd"));

}  // namespace
}  // namespace braid
