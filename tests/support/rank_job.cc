#include "tests/support/rank_job.h"

namespace braid::testing {

EnvMap rank_env(int port, int rank, int size, const EnvMap& extra, const std::string& master_addr) {
  EnvMap env = {{"MASTER_ADDR", master_addr},
                {"MASTER_PORT", std::to_string(port)},
                {"RANK", std::to_string(rank)},
                {"WORLD_SIZE", std::to_string(size)}};
  for (const auto& [k, v] : extra) env[k] = v;
  return env;
}

std::vector<std::unique_ptr<Subprocess>> start_ranks(int size, const RankJob& job) {
  const int port = job.port != 0 ? job.port : free_port();
  std::vector<std::unique_ptr<Subprocess>> ranks;
  for (int r = 0; r < size; ++r) {
    EnvMap env = rank_env(port, r, size, job.env, job.master_addr);
    std::vector<std::string> argv = job.argv;
    if (job.per_rank) job.per_rank(r, env, argv);
    ranks.push_back(std::make_unique<Subprocess>(argv, env));
  }
  return ranks;
}

}  // namespace braid::testing
