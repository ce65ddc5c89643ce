// The agreement of shrink.h: alive posts, one compare_set of the member list, adoption.
#include "runtime/bootstrap/shrink.h"

#include <algorithm>
#include <cstdlib>
#include <string>
#include <thread>

#include "common/deadline.h"
#include "runtime/bootstrap/split.h"

namespace braid {
namespace {

// How often a survivor looks at the store while it waits: often enough that the agreement costs
// little beyond the last survivor's arrival, seldom enough that many ranks polling one store
// leave it room for anything else.
constexpr auto kFirstPoll = std::chrono::milliseconds(1);
constexpr auto kMaxPoll = std::chrono::milliseconds(10);

std::string key(uint64_t attempt, const std::string& rest) { return "shrink" + std::to_string(attempt) + "/" + rest; }
std::string alive_key(uint64_t attempt, int r) { return key(attempt, "alive/" + std::to_string(r)); }

std::string join(const std::vector<int>& ranks) {
  std::string s;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) s.push_back(',');
    s.append(std::to_string(ranks[i]));
  }
  return s;
}

// "0,2,3" -> {0, 2, 3}; empty when malformed (ranks out of range, unsorted or repeated).
std::vector<int> parse_members(const std::string& v, int size) {
  std::vector<int> out;
  size_t at = 0;
  while (at < v.size()) {
    size_t end = v.find(',', at);
    if (end == std::string::npos) end = v.size();
    const std::string word = v.substr(at, end - at);
    if (word.empty() || word.size() > 9 || word.find_first_not_of("0123456789") != std::string::npos) return {};
    const int r = std::stoi(word);
    if (r >= size || (!out.empty() && r <= out.back())) return {};
    out.push_back(r);
    at = end + 1;
  }
  return out;
}

// Whether every rank this survivor waits for (neither excluded nor suspected) has posted.
bool all_awaited_posted(Store& ns, const ShrinkRound& round, const std::vector<bool>& suspected) {
  std::vector<std::string> keys;
  for (int r = 0; r < round.size; ++r) {
    const auto i = static_cast<size_t>(r);
    if (!round.excluded[i] && !suspected[i]) keys.push_back(alive_key(round.attempt, r));
  }
  return ns.check(keys);
}

// The ranks (not excluded) that have posted by now: this survivor's proposal.
std::vector<int> posted(Store& ns, const ShrinkRound& round) {
  std::vector<int> out;
  for (int r = 0; r < round.size; ++r) {
    if (!round.excluded[static_cast<size_t>(r)] && ns.check({alive_key(round.attempt, r)})) out.push_back(r);
  }
  return out;
}

Status left_out(const ShrinkRound& round, const std::string& list) {
  return Status(ErrorCode::aborted,
                "shrink on rank " + std::to_string(round.rank) + " (attempt " + std::to_string(round.attempt) +
                    "): the other ranks agreed on a new communicator of old ranks " + list +
                    " without this rank: it called shrink() after they decided (they wait at most "
                    "BRAID_SHRINK_TIMEOUT_S from the first call, less once every rank not suspected had called "
                    "it); was this process stopped or busy elsewhere? It cannot join that communicator: end this "
                    "process (a launcher may start the job again)");
}

}  // namespace

Result<ShrinkMembers> agree_on_members(Store& ns, const ShrinkRound& round) {
  ns.set(alive_key(round.attempt, round.rank), std::to_string(host_hash()));
  const std::string members_key = key(round.attempt, "members");
  const Deadline window = Deadline::after(round.window);
  auto poll = kFirstPoll;
  std::string list;
  std::vector<bool> suspected = round.suspected;
  for (;;) {
    if (ns.check({members_key})) {
      list = ns.get(members_key);
      break;
    }
    if (round.gone) {
      for (int r : round.gone()) {
        if (r >= 0 && r < round.size && r != round.rank) suspected[static_cast<size_t>(r)] = true;
      }
    }
    if (window.expired() || all_awaited_posted(ns, round, suspected)) {
      list = ns.compare_set(members_key, "", join(posted(ns, round)));
      break;
    }
    std::this_thread::sleep_for(poll);
    poll = std::min(poll * 2, kMaxPoll);
  }
  ShrinkMembers out;
  out.members = parse_members(list, round.size);
  if (out.members.empty()) {
    return Status(ErrorCode::protocol, "shrink on rank " + std::to_string(round.rank) + ": the store holds '" + list +
                                           "' as the member list, which is not a list of ranks below " +
                                           std::to_string(round.size));
  }
  if (std::find(out.members.begin(), out.members.end(), round.rank) == out.members.end()) return left_out(round, list);
  for (int m : out.members) out.hosts.push_back(std::strtoll(ns.get(alive_key(round.attempt, m)).c_str(), nullptr, 10));
  return out;
}

CommunicatorConfig shrink_config(const CommunicatorConfig& parent, uint64_t attempt, const ShrinkMembers& m) {
  CommunicatorConfig cfg = child_config(parent, "shrink" + std::to_string(attempt), m.members, m.hosts);
  return cfg;
}

}  // namespace braid
