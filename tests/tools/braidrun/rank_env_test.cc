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

// torchrun's variables of a restarted rank (torch/distributed/elastic/agent/server/
// local_elastic_agent.py: _start_workers).
TEST(RankEnv, RestartedRanksGetTorchrunsVariables) {
  RankIdentity id{.rank = 5, .local_rank = 1, .world_size = 8, .local_world_size = 4, .node_rank = 1, .nnodes = 2,
                  .master_addr = "10.0.0.1", .master_port = 4242, .store_port = 4243, .run_id = "job", .restart_count = 2,
                  .max_restarts = 3, .job_id = "job/round2"};
  auto env = build_rank_env({"TORCHELASTIC_RESTART_COUNT=9", "PATH=/bin"}, id);
  for (const char* kv : {"RANK=5", "LOCAL_RANK=1", "WORLD_SIZE=8", "LOCAL_WORLD_SIZE=4", "GROUP_RANK=1",
                         "GROUP_WORLD_SIZE=2", "ROLE_NAME=default", "ROLE_RANK=5", "ROLE_WORLD_SIZE=8",
                         "MASTER_ADDR=10.0.0.1", "MASTER_PORT=4242", "TORCHELASTIC_RUN_ID=job",
                         "TORCHELASTIC_RESTART_COUNT=2", "TORCHELASTIC_MAX_RESTARTS=3", "BRAID_JOB_ID=job/round2",
                         // torch's env:// serves its own store on MASTER_PORT; braid's is elsewhere
                         "TORCHELASTIC_USE_AGENT_STORE=False", "BRAID_AGENT_STORE=1", "BRAID_STORE_PORT=4243"}) {
    EXPECT_TRUE(has(env, kv)) << kv;
  }
  EXPECT_FALSE(has(env, "TORCHELASTIC_RESTART_COUNT=9"));
}

}  // namespace
}  // namespace braid::braidrun
