// valgrind memcheck over a 2-rank run of every operation (every_op_rank): no uninitialised byte
// reaches a system call (a send) or decides a branch, no definite leak. On the epoll engine
// (BRAID_TRANSPORT=tcp-poll): memcheck cannot see what io_uring's kernel side writes.
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

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
  const int port = testing::free_port();
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < 2; ++r) {
    ranks.push_back(std::make_unique<Subprocess>(
        std::vector<std::string>{valgrind, "--error-exitcode=" + std::to_string(kValgrindError), "--leak-check=full",
                                 "--errors-for-leak-kinds=definite", "--track-origins=yes",
                                 testing::binary_from_env("EVERY_OP_RANK")},
        std::map<std::string, std::string>{{"MASTER_ADDR", "127.0.0.1"},
                                           {"MASTER_PORT", std::to_string(port)},
                                           {"RANK", std::to_string(r)},
                                           {"WORLD_SIZE", "2"},
                                           {"BRAID_TRANSPORT", "tcp-poll"},
                                           {"BRAID_ALGO", GetParam()},
                                           {"BRAID_SPIN_US", "0"},  // threads share one CPU under valgrind
                                           {"BRAID_TIMEOUT_S", "120"},
                                           {"BRAID_RENDEZVOUS_TIMEOUT_S", "120"}}));
  }
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
