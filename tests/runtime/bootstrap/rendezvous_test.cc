#include "runtime/bootstrap/rendezvous.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace braid {
namespace {

EnvLookup vars(std::map<std::string, std::string> m) {
  auto shared = std::make_shared<std::map<std::string, std::string>>(std::move(m));
  return [shared](const char* name) -> const char* {
    auto it = shared->find(name);
    return it == shared->end() ? nullptr : it->second.c_str();
  };
}

std::string error_of(const Result<JobInfo>& r) { return r.is_ok() ? "" : r.status().message(); }

TEST(Rendezvous, TorchrunVariables) {
  auto job = resolve_env(vars({{"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"}, {"RANK", "3"},
                               {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "2"}}));
  ASSERT_TRUE(job.is_ok()) << error_of(job);
  EXPECT_EQ(job->master_addr, "10.0.0.1");
  EXPECT_EQ(job->master_port, 29500);
  EXPECT_EQ(job->rank, 3);
  EXPECT_EQ(job->size, 8);
  EXPECT_EQ(job->local_rank, 1);
  EXPECT_EQ(job->local_size, 2);
  EXPECT_FALSE(job->agent_store);
}

TEST(Rendezvous, LocalVariablesAreOptional) {
  auto job = resolve_env(vars({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"RANK", "0"}, {"WORLD_SIZE", "1"}}));
  ASSERT_TRUE(job.is_ok()) << error_of(job);
  EXPECT_EQ(job->local_rank, 0);
  EXPECT_EQ(job->local_size, 1);
}

TEST(Rendezvous, AllMissingVariablesAreListed) {
  auto job = resolve_env(vars({{"MASTER_PORT", "29500"}}));
  ASSERT_FALSE(job.is_ok());
  EXPECT_EQ(job.status().code(), ErrorCode::invalid_argument);
  for (const char* name : {"MASTER_ADDR", "RANK", "WORLD_SIZE"}) {
    EXPECT_NE(error_of(job).find(name), std::string::npos) << error_of(job);
  }
  EXPECT_EQ(error_of(job).find("MASTER_PORT,"), std::string::npos) << "MASTER_PORT is set: " << error_of(job);
}

TEST(Rendezvous, BadNumbersNameTheVariable) {
  auto base = std::map<std::string, std::string>{{"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}, {"RANK", "0"},
                                                 {"WORLD_SIZE", "2"}};
  struct Case { const char* var; const char* value; const char* expect; };
  for (Case c : {Case{"RANK", "one", "RANK='one'"}, Case{"RANK", "-1", "RANK='-1'"},
                 Case{"WORLD_SIZE", "0", "WORLD_SIZE='0'"}, Case{"MASTER_PORT", "70000", "MASTER_PORT='70000'"},
                 Case{"LOCAL_RANK", "x", "LOCAL_RANK='x'"}}) {
    auto m = base;
    m[c.var] = c.value;
    auto job = resolve_env(vars(m));
    ASSERT_FALSE(job.is_ok()) << c.var;
    EXPECT_NE(error_of(job).find(c.expect), std::string::npos) << error_of(job);
  }
}

TEST(Rendezvous, RankNotBelowWorldSize) {
  auto job = resolve_env(vars({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"RANK", "4"}, {"WORLD_SIZE", "4"}}));
  ASSERT_FALSE(job.is_ok());
  EXPECT_NE(error_of(job).find("RANK=4"), std::string::npos) << error_of(job);
  EXPECT_NE(error_of(job).find("WORLD_SIZE=4"), std::string::npos) << error_of(job);
}

TEST(Rendezvous, SlurmFallbackWithNodelist) {
  auto job = resolve_env(vars({{"SLURM_PROCID", "5"}, {"SLURM_NTASKS", "8"}, {"SLURM_LOCALID", "1"},
                               {"SLURM_JOB_NODELIST", "gpu[07-10,12],login1"}, {"MASTER_PORT", "29400"}}));
  ASSERT_TRUE(job.is_ok()) << error_of(job);
  EXPECT_EQ(job->master_addr, "gpu07");
  EXPECT_EQ(job->rank, 5);
  EXPECT_EQ(job->size, 8);
  EXPECT_EQ(job->local_rank, 1);
  EXPECT_EQ(job->source, "Slurm");
}

TEST(Rendezvous, OpenMpiFallback) {
  auto job = resolve_env(vars({{"OMPI_COMM_WORLD_RANK", "2"}, {"OMPI_COMM_WORLD_SIZE", "4"},
                               {"OMPI_COMM_WORLD_LOCAL_RANK", "0"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                               {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "29500"}}));
  ASSERT_TRUE(job.is_ok()) << error_of(job);
  EXPECT_EQ(job->rank, 2);
  EXPECT_EQ(job->size, 4);
  EXPECT_EQ(job->local_size, 2);
  EXPECT_EQ(job->source, "Open MPI");
}

TEST(Rendezvous, AgentStoreFlag) {
  auto job = resolve_env(vars({{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"RANK", "0"}, {"WORLD_SIZE", "1"},
                               {"BRAID_AGENT_STORE", "1"}}));
  ASSERT_TRUE(job.is_ok());
  EXPECT_TRUE(job->agent_store);
}

TEST(Rendezvous, UnderTorchrunTheStoreMovesToTheNextPort) {
  auto base = std::map<std::string, std::string>{{"MASTER_ADDR", "h"}, {"MASTER_PORT", "29500"}, {"RANK", "0"},
                                                 {"WORLD_SIZE", "2"}};
  EXPECT_EQ(resolve_env(vars(base)).value().store_port, 29500);
  base["TORCHELASTIC_USE_AGENT_STORE"] = "True";
  EXPECT_EQ(resolve_env(vars(base)).value().store_port, 29501);
  base["BRAID_STORE_PORT"] = "31000";
  EXPECT_EQ(resolve_env(vars(base)).value().store_port, 31000);
  base["BRAID_AGENT_STORE"] = "1";  // braidrun serves braid's store: MASTER_PORT or BRAID_STORE_PORT
  base.erase("BRAID_STORE_PORT");
  EXPECT_EQ(resolve_env(vars(base)).value().store_port, 29500);
}

TEST(Rendezvous, Nodelists) {
  EXPECT_EQ(first_host_of_nodelist("node[01-04,07]").value(), "node01");
  EXPECT_EQ(first_host_of_nodelist("a1,b2").value(), "a1");
  EXPECT_EQ(first_host_of_nodelist("rack[3]-n[5-6]").value(), "rack3-n5");
  EXPECT_FALSE(first_host_of_nodelist("node[01-04").is_ok());
  EXPECT_FALSE(first_host_of_nodelist("").is_ok());
}

TEST(Rendezvous, TcpUrls) {
  auto job = resolve_tcp_url("tcp://10.1.2.3:23456", 1, 4);
  ASSERT_TRUE(job.is_ok()) << error_of(job);
  EXPECT_EQ(job->master_addr, "10.1.2.3");
  EXPECT_EQ(job->master_port, 23456);
  EXPECT_EQ(job->rank, 1);
  auto v6 = resolve_tcp_url("tcp://[::1]:80?rank=0&world_size=2", -1, -1);
  ASSERT_TRUE(v6.is_ok()) << error_of(v6);
  EXPECT_EQ(v6->master_addr, "::1");
  EXPECT_EQ(v6->size, 2);
  EXPECT_FALSE(resolve_tcp_url("tcp://host", 0, 1).is_ok());
  EXPECT_FALSE(resolve_tcp_url("tcp://host:1", -1, -1).is_ok());
  EXPECT_FALSE(resolve_tcp_url("tcp://host:1", 2, 2).is_ok());
}

TEST(Rendezvous, JobIdComesFromBraidThenTheLauncher) {
  std::map<std::string, std::string> base = {{"MASTER_ADDR", "h"}, {"MASTER_PORT", "1"}, {"RANK", "0"},
                                             {"WORLD_SIZE", "1"}};
  auto with = [&](std::map<std::string, std::string> extra) {
    auto m = base;
    m.insert(extra.begin(), extra.end());
    auto job = resolve_env(vars(m));
    EXPECT_TRUE(job.is_ok()) << error_of(job);
    return job.is_ok() ? job->job_id : "?";
  };
  EXPECT_EQ(with({}), "");
  EXPECT_EQ(with({{"SLURM_JOB_ID", "4242"}}), "4242");
  EXPECT_EQ(with({{"SLURM_JOB_ID", "4242"}, {"TORCHELASTIC_RUN_ID", "run-1"}}), "run-1");
  // torchrun's default run id is the same for every job: it tells nothing apart.
  EXPECT_EQ(with({{"TORCHELASTIC_RUN_ID", "none"}}), "");
  EXPECT_EQ(with({{"TORCHELASTIC_RUN_ID", "run-1"}, {"BRAID_JOB_ID", "mine"}}), "mine");
}

}  // namespace
}  // namespace braid
