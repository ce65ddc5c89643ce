// tools/braidrun/rank_env.h - the environment each rank starts with, torchrun's variables.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace braid::braidrun {

struct RankIdentity {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int local_world_size = 1;
  int node_rank = 0;
  int nnodes = 1;
  std::string master_addr;
  uint16_t master_port = 0;
  std::string run_id;
};

// `base` ("NAME=value" strings, usually braidrun's own environ) with torchrun's variables for
// this rank set over it, plus BRAID_AGENT_STORE=1: braidrun serves the store at
// MASTER_ADDR:MASTER_PORT, so no rank may serve it itself.
std::vector<std::string> build_rank_env(const std::vector<std::string>& base, const RankIdentity& id);

// The process's environ as strings.
std::vector<std::string> current_environ();

}  // namespace braid::braidrun
