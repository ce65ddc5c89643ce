#include "collectives/ring_order.h"

#include <algorithm>
#include <unordered_map>

namespace braid::collectives {

std::vector<int> ring_order(const std::vector<std::string>& hosts) {
  // Hosts numbered by their lowest rank; then ranks grouped by that number, stable.
  std::unordered_map<std::string, size_t> host_index;
  std::vector<size_t> group(hosts.size());
  for (size_t r = 0; r < hosts.size(); ++r) group[r] = host_index.emplace(hosts[r], host_index.size()).first->second;
  std::vector<int> order(hosts.size());
  for (size_t r = 0; r < order.size(); ++r) order[r] = static_cast<int>(r);
  std::stable_sort(order.begin(), order.end(),
                   [&](int a, int b) { return group[static_cast<size_t>(a)] < group[static_cast<size_t>(b)]; });
  return order;
}

bool is_identity(const std::vector<int>& order) {
  for (size_t v = 0; v < order.size(); ++v) {
    if (order[v] != static_cast<int>(v)) return false;
  }
  return true;
}

std::string describe_ring(const std::vector<int>& order, const std::vector<std::string>& hosts) {
  std::string s;
  for (size_t v = 0; v < order.size(); ++v) {
    const auto r = static_cast<size_t>(order[v]);
    if (v > 0) s += r < hosts.size() && hosts[r] != hosts[static_cast<size_t>(order[v - 1])] ? " | " : " ";
    s += std::to_string(order[v]);
  }
  return s;
}

}  // namespace braid::collectives
