// braidrun's job secret: a fresh one per job, handed to the ranks as a file only this user can
// read (never on a command line), used by braidrun's own store, and gone when the job is.
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>
#include <thread>

#include "braid/error.h"
#include "braid/store.h"
#include "tests/tools/braidrun/braidrun_runner.h"

namespace braid::braidrun {
namespace {

using namespace std::chrono_literals;
using testing::BraidrunProcess;
using testing::free_port;
using testing::rank_helper_path;
using testing::run_braidrun;

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

TEST(BraidrunSecret, RanksGetAPrivateSecretFileThatIsGoneAfterTheJob) {
  auto r = run_braidrun({"--standalone", "--nproc-per-node", "2", "--rdzv-id", "run-42", rank_helper_path(), "secret",
                         "store-set", "from", "a-rank", "store-get", "from"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  std::regex line(R"(secret_file=(\S+) file_mode=(\d+) dir_mode=(\d+) secret_env=(\w+) job_id=(\S*) secret_bytes=(\d+) cmdline_has_secret=(\w+))");
  std::set<std::string> files;
  int ranks = 0;
  for (std::sregex_iterator it(r.out.begin(), r.out.end(), line), end; it != end; ++it, ++ranks) {
    const std::smatch& m = *it;
    files.insert(m[1]);
    EXPECT_EQ(m[2], "600") << r.out;
    EXPECT_EQ(m[3], "700") << r.out;
    EXPECT_EQ(m[4], "unset") << r.out;
    EXPECT_EQ(m[5], "run-42") << r.out;
    EXPECT_GE(std::stoi(m[6]), 32) << r.out;
    EXPECT_EQ(m[7], "no") << r.out;
  }
  EXPECT_EQ(ranks, 2) << r.out << r.err;
  ASSERT_EQ(files.size(), 1u) << "both ranks get the same secret file: " << r.out;
  const std::string file = *files.begin();
  EXPECT_FALSE(exists(file)) << file << " outlived the job";
  EXPECT_FALSE(exists(file.substr(0, file.rfind('/')))) << "its directory outlived the job";
  EXPECT_NE(r.out.find("got from=a-rank"), std::string::npos) << r.out << r.err;
}

TEST(BraidrunSecret, ItsStoreRefusesAClientWithoutTheSecret) {
  int port = free_port();
  BraidrunProcess job({"--master-port", std::to_string(port), "--nproc-per-node", "1", rank_helper_path(), "sleep",
                       "3"});
  std::optional<Error> refused;
  for (int i = 0; i < 200 && !refused; ++i) {
    try {
      TcpStore::connect("127.0.0.1", static_cast<uint16_t>(port), {.timeout = 200ms, .secret = ""});
      ADD_FAILURE() << "a client without the job's secret got into braidrun's store";
      break;
    } catch (const Error& e) {
      if (e.code() != ErrorCode::timeout) refused = e;  // timeout: braidrun not up yet
    }
  }
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(refused->code(), ErrorCode::unauthenticated) << refused->what();
  auto r = job.wait(30);
  EXPECT_EQ(r.exit_code, 0) << r.out << r.err;
}

}  // namespace
}  // namespace braid::braidrun
