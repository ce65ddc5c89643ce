// What braidrun hands each rank about the job's secret and id (tools/braidrun/rank_env.h).
#include "tools/braidrun/rank_env.h"

#include <sys/stat.h>

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <iterator>

namespace braid::braidrun {
namespace {

bool has(const std::vector<std::string>& env, const std::string& kv) {
  return std::find(env.begin(), env.end(), kv) != env.end();
}

bool has_name(const std::vector<std::string>& env, const std::string& name) {
  return std::any_of(env.begin(), env.end(), [&](const std::string& kv) { return kv.rfind(name + "=", 0) == 0; });
}

TEST(RankEnv, TheSecretTravelsAsAFileNameAndReplacesAnInheritedSecret) {
  RankIdentity id{.master_addr = "127.0.0.1", .master_port = 1, .run_id = "r", .job_id = "job-7",
                  .secret_file = "/tmp/braidrun-secret-x/secret"};
  auto env = build_rank_env({"PATH=/bin", "BRAID_SECRET=inherited-secret-value", "BRAID_SECRET_FILE=/old"}, id);
  EXPECT_TRUE(has(env, "BRAID_SECRET_FILE=/tmp/braidrun-secret-x/secret"));
  EXPECT_FALSE(has_name(env, "BRAID_SECRET"));
  EXPECT_FALSE(has(env, "BRAID_SECRET_FILE=/old"));
  EXPECT_TRUE(has(env, "BRAID_JOB_ID=job-7"));
  EXPECT_TRUE(has(env, "PATH=/bin"));
}

TEST(RankEnv, WithoutItsOwnSecretBraidrunPassesTheUsersOn) {
  RankIdentity id{.master_addr = "h", .master_port = 1, .run_id = "r"};
  auto env = build_rank_env({"BRAID_SECRET=the-users-secret-value"}, id);
  EXPECT_TRUE(has(env, "BRAID_SECRET=the-users-secret-value"));
  EXPECT_FALSE(has_name(env, "BRAID_SECRET_FILE"));
  EXPECT_FALSE(has_name(env, "BRAID_JOB_ID"));
}

TEST(RankEnv, SecretFileIsPrivateAndRemoved) {
  std::string path, dir;
  {
    auto f = SecretFile::create("0123456789abcdef0123456789abcdef");
    ASSERT_TRUE(f.is_ok()) << f.status().message();
    path = (*f)->path();
    dir = path.substr(0, path.rfind('/'));
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0600u);
    ASSERT_EQ(::stat(dir.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0700u);
    std::ifstream in(path);
    EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "0123456789abcdef0123456789abcdef");
  }
  struct stat st {};
  EXPECT_NE(::stat(path.c_str(), &st), 0);
  EXPECT_NE(::stat(dir.c_str(), &st), 0);
}

}  // namespace
}  // namespace braid::braidrun
