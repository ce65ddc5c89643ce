// tests/support/rank_job.h - N rank processes of one job, meeting through env:// on one port.
//
// Multi-process tests start every rank alike: the torchrun-style variables (MASTER_ADDR,
// MASTER_PORT, RANK, WORLD_SIZE) plus what the test sets for all of them, then a few that differ
// per rank (a transport, a CPU to pin to, a wrapper program). Those differences go in per_rank.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/subprocess.h"

namespace braid::testing {

using EnvMap = std::map<std::string, std::string>;

// What rank `rank` of `size` needs to find the store at master_addr:port, plus `extra`, whose
// values win (a value of "\x01" removes the variable, as Subprocess says).
EnvMap rank_env(int port, int rank, int size, const EnvMap& extra = {}, const std::string& master_addr = "127.0.0.1");

struct RankJob {
  std::vector<std::string> argv = {};  // every rank's program and arguments
  EnvMap env = {};                     // for every rank, over rank_env's variables
  std::string master_addr = "127.0.0.1";
  int port = 0;  // 0: a free one (free_port)
  // Called for each rank before it starts; may change that rank's environment and argv.
  std::function<void(int rank, EnvMap& env, std::vector<std::string>& argv)> per_rank = nullptr;
};

// Starts ranks 0..size-1 of `job`, in rank order.
std::vector<std::unique_ptr<Subprocess>> start_ranks(int size, const RankJob& job);

}  // namespace braid::testing
