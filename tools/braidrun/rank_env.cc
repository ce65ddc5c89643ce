#include "tools/braidrun/rank_env.h"

#include <utility>

extern char** environ;

namespace braid::braidrun {

std::vector<std::string> build_rank_env(const std::vector<std::string>& base, const RankIdentity& id) {
  const std::pair<const char*, std::string> vars[] = {
      {"RANK", std::to_string(id.rank)},
      {"LOCAL_RANK", std::to_string(id.local_rank)},
      {"WORLD_SIZE", std::to_string(id.world_size)},
      {"LOCAL_WORLD_SIZE", std::to_string(id.local_world_size)},
      {"GROUP_RANK", std::to_string(id.node_rank)},
      {"GROUP_WORLD_SIZE", std::to_string(id.nnodes)},
      // One role ("default"), so role ranks are the global ones, as torchrun's single role.
      {"ROLE_NAME", "default"},
      {"ROLE_RANK", std::to_string(id.rank)},
      {"ROLE_WORLD_SIZE", std::to_string(id.world_size)},
      {"MASTER_ADDR", id.master_addr},
      {"MASTER_PORT", std::to_string(id.master_port)},
      {"TORCHELASTIC_RUN_ID", id.run_id},
      {"TORCHELASTIC_RESTART_COUNT", "0"},
      {"TORCHELASTIC_MAX_RESTARTS", "0"},
      {"BRAID_AGENT_STORE", "1"},
  };
  std::vector<std::string> out;
  out.reserve(base.size() + std::size(vars));
  for (const std::string& kv : base) {
    bool overridden = false;
    for (const auto& [name, value] : vars) {
      std::string key = std::string(name) + "=";
      if (kv.compare(0, key.size(), key) == 0) {
        overridden = true;
        break;
      }
    }
    if (!overridden) out.push_back(kv);
  }
  for (const auto& [name, value] : vars) out.push_back(std::string(name) + "=" + value);
  return out;
}

std::vector<std::string> current_environ() {
  std::vector<std::string> out;
  for (char** e = environ; e && *e; ++e) out.emplace_back(*e);
  return out;
}

}  // namespace braid::braidrun
