// braidrun's job secret: a fresh one per job, handed to the ranks as a file only this user can
// read (never on a command line), used by braidrun's own store, and gone when the job is.
#include <dirent.h>
#include <sys/stat.h>

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <regex>
#include <set>
#include <string>
#include <thread>
#include <vector>

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

// The secret directories in `tmp` made by the braidrun of pid `pid` ("braidrun-secret-<pid
// namespace>-<pid>-XXXXXX").
std::vector<std::string> secret_dirs_of(const std::string& tmp, pid_t pid) {
  std::vector<std::string> out;
  DIR* d = ::opendir(tmp.c_str());
  if (d == nullptr) return out;
  const std::string mark = "-" + std::to_string(pid) + "-";
  while (const dirent* e = ::readdir(d)) {
    std::string name = e->d_name;
    if (name.starts_with("braidrun-secret-") && name.find(mark) != std::string::npos) out.push_back(tmp + "/" + name);
  }
  ::closedir(d);
  return out;
}

// TMPDIR set for the braidruns this test starts, and put back after.
class ScopedTmpdir {
 public:
  explicit ScopedTmpdir(const std::string& dir) {
    if (const char* v = std::getenv("TMPDIR")) old_ = v;
    ::setenv("TMPDIR", dir.c_str(), 1);
  }
  ~ScopedTmpdir() {
    if (old_) {
      ::setenv("TMPDIR", old_->c_str(), 1);
    } else {
      ::unsetenv("TMPDIR");
    }
  }

 private:
  std::optional<std::string> old_;
};

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

TEST(BraidrunSecret, ASecretLeftByAKilledBraidrunIsRemovedByTheNextButALiveJobsIsKept) {
  braid::testing::TempDir tmp;
  ScopedTmpdir scoped(tmp.path());
  auto started = [&](BraidrunProcess& job) {
    for (int i = 0; i < 500; ++i) {
      if (!secret_dirs_of(tmp.path(), job.pid()).empty()) return true;
      std::this_thread::sleep_for(10ms);
    }
    return false;
  };
  auto killed = std::make_unique<BraidrunProcess>(std::vector<std::string>{
      "--standalone", "--nproc-per-node", "1", rank_helper_path(), "sleep", "30"});
  BraidrunProcess live({"--standalone", "--nproc-per-node", "1", rank_helper_path(), "sleep", "30"});
  ASSERT_TRUE(started(*killed));
  ASSERT_TRUE(started(live));
  const std::string killed_dir = secret_dirs_of(tmp.path(), killed->pid()).front();
  const std::string live_dir = secret_dirs_of(tmp.path(), live.pid()).front();
  killed.reset();  // SIGKILL, reaped: its destructor never ran
  ASSERT_TRUE(exists(killed_dir + "/secret")) << "a SIGKILLed braidrun cannot remove its own secret";

  auto r = run_braidrun({"--standalone", "--nproc-per-node", "1", rank_helper_path(), "sleep", "0"});
  ASSERT_EQ(r.exit_code, 0) << r.out << r.err;
  EXPECT_FALSE(exists(killed_dir)) << "the next braidrun left a killed braidrun's secret behind";
  EXPECT_TRUE(exists(live_dir + "/secret")) << "the next braidrun removed a running job's secret";
}

}  // namespace
}  // namespace braid::braidrun
