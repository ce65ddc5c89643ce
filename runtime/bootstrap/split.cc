// The pure part of split (split.h): cards and the child's configuration.
#include "runtime/bootstrap/split.h"

#include <unistd.h>

#include <algorithm>
#include <string>
#include <utility>

#include "braid/store.h"

namespace braid {
namespace {

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace

int job_rank_of(const CommunicatorConfig& cfg, int r) {
  return cfg.job_ranks.empty() ? r : cfg.job_ranks[static_cast<size_t>(r)];
}

int64_t host_hash() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return static_cast<int64_t>(fnv1a(host) >> 1);
}

std::vector<int64_t> split_card(int color, int key) { return {color, key, host_hash()}; }

CommunicatorConfig split_config(const CommunicatorConfig& parent, uint64_t n, int color,
                                const std::vector<int64_t>& all) {
  std::vector<std::pair<int64_t, int>> keyed;  // (key, parent rank)
  for (int r = 0; r < parent.size; ++r) {
    const size_t at = static_cast<size_t>(r) * kSplitCardWords;
    if (all[at] == color) keyed.emplace_back(all[at + 1], r);
  }
  std::sort(keyed.begin(), keyed.end());
  std::vector<int> members;
  std::vector<int64_t> hosts;
  for (const auto& [key, r] : keyed) {
    members.push_back(r);
    hosts.push_back(all[static_cast<size_t>(r) * kSplitCardWords + 2]);
  }
  return child_config(parent, "split" + std::to_string(n) + "/" + std::to_string(color), members, hosts);
}

CommunicatorConfig child_config(const CommunicatorConfig& parent, const std::string& prefix,
                                const std::vector<int>& members, const std::vector<int64_t>& hosts) {
  int64_t my_host = 0;
  for (size_t i = 0; i < members.size(); ++i) {
    if (members[i] == parent.rank) my_host = hosts[i];
  }
  CommunicatorConfig cfg;
  cfg.size = static_cast<int>(members.size());
  cfg.local_size = 0;  // counted below, this rank included (the default, 1, would count it twice)
  for (int i = 0; i < cfg.size; ++i) {
    const int r = members[static_cast<size_t>(i)];
    const bool same_host = hosts[static_cast<size_t>(i)] == my_host;
    if (r == parent.rank) cfg.rank = i;
    if (same_host && r < parent.rank) ++cfg.local_rank;
    if (same_host) ++cfg.local_size;
    if (parent.store_rank >= 0 && r == parent.store_rank) cfg.store_rank = i;  // the store's server, by its rank here
    cfg.job_ranks.push_back(job_rank_of(parent, r));
  }
  cfg.lease = parent.lease;  // the store must outlive this child too, on every rank (job_lease.h)
  cfg.comm_id = fnv1a(prefix, parent.comm_id * 1099511628211ull + 1);
  cfg.store = std::make_shared<PrefixStore>(prefix, parent.store);
  cfg.board_store = std::make_shared<PrefixStore>(prefix, parent.board_store ? parent.board_store : parent.store);
  cfg.board_bounded = parent.board_bounded;
  cfg.foreign_store = parent.foreign_store;
  cfg.master_addr = parent.master_addr;
  cfg.env = parent.env;
  cfg.inproc_fabric = parent.inproc_fabric;
  return cfg;
}

}  // namespace braid
