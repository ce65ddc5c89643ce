#include "runtime/links/transport_choice.h"

#include <algorithm>

#include "runtime/links/spin_policy.h"

namespace braid {
namespace {

// 2: the cpus line (a card without one comes from a build that cannot take part in the spin rule).
constexpr const char* kCardTag = "braid-links 2";

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  size_t at = 0;
  for (;;) {
    const size_t comma = s.find(',', at);
    out.push_back(s.substr(at, comma == std::string::npos ? std::string::npos : comma - at));
    if (comma == std::string::npos) return out;
    at = comma + 1;
  }
}

bool is_auto(const PublishedLinks& l) { return l.setting == "auto" || l.setting.empty(); }

// The families an explicit setting names, in order: what two explicit settings must agree on.
std::string family_list(const std::string& setting) {
  std::string out;
  for (const std::string& name : split_list(setting)) {
    if (!out.empty()) out += ',';
    out += transport_family(name);
  }
  return out;
}

// Shared memory and threads of one process reach only inside one host.
bool needs_same_host(const std::string& family) { return family == "shm" || family == "inproc"; }

const PublishedAddress* find_family(const PublishedLinks& l, const std::string& family) {
  for (const auto& a : l.addresses) {
    if (a.family == family) return &a;
  }
  return nullptr;
}

std::string brought_up(const PublishedLinks& l) {
  std::string s;
  for (const auto& a : l.addresses) {
    if (!s.empty()) s += ", ";
    s += a.family;
  }
  return (s.empty() ? "nothing" : s) + " (BRAID_TRANSPORT='" + l.setting + "')";
}

}  // namespace

std::string transport_family(const std::string& name) { return name == "tcp-poll" ? "tcp" : name; }

Result<std::vector<TransportPick>> preference_list(const Env& env) {
  std::vector<TransportPick> out;
  if (env.transport == "auto" || env.transport.empty()) {
    out = {{"shm", "shm"}, {"ib", "ib"}, {"tcp", "auto"}};
  } else {
    for (const std::string& name : split_list(env.transport)) out.push_back({transport_family(name), name});
  }
  if (env.shm_disable) {
    out.erase(std::remove_if(out.begin(), out.end(), [](const TransportPick& p) { return p.family == "shm"; }),
              out.end());
  }
  if (out.empty()) {
    return invalid_argument("BRAID_TRANSPORT='" + env.transport +
                            "' with BRAID_SHM_DISABLE=1 leaves no transport; add one (BRAID_TRANSPORT=shm,tcp) or "
                            "unset BRAID_SHM_DISABLE");
  }
  return out;
}

std::string links_card(const PublishedLinks& links) {
  std::string s = std::string(kCardTag) + "\nhost\t" + links.host + "\ncpus\t" + cpu_mask_text(links.cpus) +
                  "\nsetting\t" + links.setting + "\n";
  for (const auto& a : links.addresses) {
    s += "addr\t" + a.family + "\t" + (a.host_local ? "1" : "0") + "\t" + a.address + "\n";
  }
  if (!links.failed.empty()) {
    std::string why = links.failed;
    std::replace(why.begin(), why.end(), '\n', ' ');
    s += "failed\t" + why + "\n";
  }
  return s;
}

Result<PublishedLinks> parse_links_card(const std::string& text, int rank) {
  auto bad = [&](const std::string& why) {
    return invalid_argument("rank " + std::to_string(rank) + " published transport addresses this build cannot read (" +
                            why + "); run the same braid build on every rank");
  };
  PublishedLinks l;
  size_t at = 0;
  bool tagged = false, has_cpus = false;
  while (at < text.size()) {
    size_t end = text.find('\n', at);
    if (end == std::string::npos) return bad("a line without its end");
    const std::string line = text.substr(at, end - at);
    at = end + 1;
    if (!tagged) {
      if (line != kCardTag) return bad("no '" + std::string(kCardTag) + "' line");
      tagged = true;
      continue;
    }
    const size_t t1 = line.find('\t');
    const std::string key = line.substr(0, t1);
    const std::string rest = t1 == std::string::npos ? "" : line.substr(t1 + 1);
    if (key == "host") {
      l.host = rest;
    } else if (key == "cpus") {
      auto cpus = parse_cpu_mask(rest);
      if (!cpus || has_cpus) return bad(has_cpus ? "two cpus lines" : "a cpus line of " + std::to_string(line.size()) + " bytes");
      l.cpus = *cpus;
      has_cpus = true;
    } else if (key == "setting") {
      l.setting = rest;
    } else if (key == "failed") {
      l.failed = rest;
    } else if (key == "addr") {
      const size_t t2 = rest.find('\t'), t3 = t2 == std::string::npos ? t2 : rest.find('\t', t2 + 1);
      if (t3 == std::string::npos) return bad("an address line of " + std::to_string(line.size()) + " bytes");
      l.addresses.push_back({rest.substr(0, t2), rest.substr(t3 + 1), rest.substr(t2 + 1, t3 - t2 - 1) == "1"});
    } else {
      return bad("a line '" + key + "'");
    }
  }
  if (!tagged) return bad("an empty card");
  if (!has_cpus) return bad("no cpus line");
  return l;
}

Result<std::string> choose_transport(const std::vector<PublishedLinks>& all, int a, int b) {
  const int lo = std::min(a, b), hi = std::max(a, b);
  const PublishedLinks& low = all[static_cast<size_t>(lo)];
  const PublishedLinks& high = all[static_cast<size_t>(hi)];
  const std::string pair = "rank " + std::to_string(lo) + " and rank " + std::to_string(hi);
  for (int r : {a, b}) {
    const PublishedLinks& l = all[static_cast<size_t>(r)];
    if (!l.failed.empty()) {
      return invalid_argument("rank " + std::to_string(r) + " brought up no transport of BRAID_TRANSPORT='" +
                              l.setting + "' and gave up: " + l.failed);
    }
  }
  if (!is_auto(low) && !is_auto(high) && family_list(low.setting) != family_list(high.setting)) {
    return Status(ErrorCode::mismatch, "BRAID_TRANSPORT differs between " + pair + ": rank " + std::to_string(lo) +
                                           " has '" + low.setting + "', rank " + std::to_string(hi) + " has '" +
                                           high.setting + "'; set the same list on every rank (or auto)");
  }
  const bool same_host = low.host == high.host;
  for (const auto& mine : low.addresses) {
    if (find_family(high, mine.family) == nullptr) continue;
    if (needs_same_host(mine.family) && !same_host) continue;
    return mine.family;
  }
  return Status(ErrorCode::mismatch,
                pair + " have no transport in common that reaches from one to the other" +
                    (same_host ? "" : " (they are on different hosts)") + ": rank " + std::to_string(lo) +
                    " brought up " + brought_up(low) + ", rank " + std::to_string(hi) + " brought up " +
                    brought_up(high) + "; list a transport both can use in BRAID_TRANSPORT (tcp reaches any host)");
}

Result<std::vector<std::string>> choose_transports(const std::vector<PublishedLinks>& all, int rank) {
  std::vector<std::string> out(all.size());
  for (int peer = 0; peer < static_cast<int>(all.size()); ++peer) {
    if (peer == rank) continue;
    ASSIGN_OR_RETURN(out[static_cast<size_t>(peer)], choose_transport(all, rank, peer));
  }
  return out;
}

bool every_link_host_local(const std::vector<PublishedLinks>& all) {
  for (int a = 0; a < static_cast<int>(all.size()); ++a) {
    for (int b = a + 1; b < static_cast<int>(all.size()); ++b) {
      auto family = choose_transport(all, a, b);
      if (!family.is_ok()) return false;
      const PublishedAddress* x = find_family(all[static_cast<size_t>(a)], family.value());
      const PublishedAddress* y = find_family(all[static_cast<size_t>(b)], family.value());
      if (x == nullptr || y == nullptr || !x->host_local || !y->host_local) return false;
    }
  }
  return true;
}

}  // namespace braid
