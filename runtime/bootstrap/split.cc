// CommunicatorImpl::split: a child communicator over some ranks of this one.
//
// Every rank all_gathers (color, key, host) over the parent, so all of them agree on who is in
// which child and in what order without any store round trip; the child then meets in its own
// store namespace ("split<n>/<color>/" inside the parent's) and builds its own transport and
// connections on its own progress thread, exactly as a top-level communicator does.
#include <unistd.h>

#include <algorithm>

#include "runtime/communicator_impl.h"

namespace braid {
namespace {

uint64_t fnv1a(const std::string& s, uint64_t h = 1469598103934665603ull) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

int64_t host_hash() {
  char host[256] = {0};
  gethostname(host, sizeof(host) - 1);
  return static_cast<int64_t>(fnv1a(host) >> 1);
}

}  // namespace

Result<std::unique_ptr<CommunicatorImpl>> CommunicatorImpl::split(int color, int key) {
  if (color < 0 && color != Communicator::kNoColor) {
    return invalid_argument("split: color " + std::to_string(color) + " is negative; use a color >= 0, or "
                            "Communicator::kNoColor to stay out of every new communicator");
  }
  const uint64_t n = ++split_count_;
  std::vector<int64_t> mine = {color, key, host_hash()};
  std::vector<int64_t> all(static_cast<size_t>(cfg_.size) * 3);
  collectives::CollectiveArgs args;
  args.kind = collectives::Kind::all_gather;
  args.send = mine.data();
  args.recv = all.data();
  args.count = 3;
  args.dtype = DType::i64;
  Work gathered = enqueue(std::move(args));
  gathered.wait();
  if (color == Communicator::kNoColor) return std::unique_ptr<CommunicatorImpl>();

  std::vector<std::pair<int64_t, int>> members;  // (key, parent rank)
  for (int r = 0; r < cfg_.size; ++r) {
    if (all[static_cast<size_t>(r) * 3] == color) members.emplace_back(all[static_cast<size_t>(r) * 3 + 1], r);
  }
  std::sort(members.begin(), members.end());
  CommunicatorConfig cfg;
  cfg.size = static_cast<int>(members.size());
  int64_t my_host = mine[2];
  for (int i = 0; i < cfg.size; ++i) {
    const int r = members[static_cast<size_t>(i)].second;
    const bool same_host = all[static_cast<size_t>(r) * 3 + 2] == my_host;
    if (r == cfg_.rank) cfg.rank = i;
    if (same_host && r < cfg_.rank) ++cfg.local_rank;
    if (same_host) ++cfg.local_size;
  }
  const std::string prefix = "split" + std::to_string(n) + "/" + std::to_string(color);
  cfg.comm_id = fnv1a(prefix, cfg_.comm_id * 1099511628211ull + 1);
  cfg.store = std::make_shared<PrefixStore>(prefix, cfg_.store);
  cfg.board_store = std::make_shared<PrefixStore>(prefix, cfg_.board_store ? cfg_.board_store : cfg_.store);
  cfg.board_bounded = cfg_.board_bounded;
  for (int i = 0; i < cfg.size; ++i) {  // the store's server, by its rank in the child
    if (cfg_.store_rank >= 0 && members[static_cast<size_t>(i)].second == cfg_.store_rank) cfg.store_rank = i;
  }
  cfg.foreign_store = cfg_.foreign_store;
  cfg.master_addr = cfg_.master_addr;
  cfg.env = cfg_.env;
  cfg.inproc_fabric = cfg_.inproc_fabric;
  return create(std::move(cfg));
}

}  // namespace braid
