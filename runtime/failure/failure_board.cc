#include "runtime/failure/failure_board.h"

#include <chrono>
#include <cstdlib>
#include <thread>

namespace braid {
namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(50);

std::string encode(const Failure& f) {
  return std::to_string(static_cast<int>(f.code)) + "\n" + std::to_string(f.rank) + "\n" + std::to_string(f.culprit) +
         "\n" + f.message;
}

std::optional<Failure> decode(const std::string& v) {
  const size_t a = v.find('\n');
  const size_t b = a == std::string::npos ? a : v.find('\n', a + 1);
  const size_t c = b == std::string::npos ? b : v.find('\n', b + 1);
  if (c == std::string::npos) return std::nullopt;
  Failure f;
  try {
    f.code = static_cast<ErrorCode>(std::stoi(v.substr(0, a)));
    f.rank = std::stoi(v.substr(a + 1, b - a - 1));
    f.culprit = std::stoi(v.substr(b + 1, c - b - 1));
  } catch (const std::exception&) {
    return std::nullopt;
  }
  f.message = v.substr(c + 1);
  return f;
}

std::optional<Progress> decode_progress(const std::string& v) {
  Progress p;
  const size_t nl = v.find('\n');
  if (nl == std::string::npos) return std::nullopt;
  char* end = nullptr;
  p.in_seq = std::strtoull(v.c_str(), &end, 10);
  p.done_seq = std::strtoull(end, &end, 10);
  while (end != nullptr && *end == ' ') ++end;
  while (end != nullptr && *end >= '0' && *end <= '9') {
    const int peer = static_cast<int>(std::strtol(end, &end, 10));
    if (*end != ':') break;
    p.retransmits.emplace_back(peer, std::strtoull(end + 1, &end, 10));
    if (*end == ',') ++end;
  }
  p.text = v.substr(nl + 1);
  return p;
}

}  // namespace

LossyLink find_lossy_link(const std::vector<std::optional<Progress>>& all) {
  std::map<std::pair<int, int>, uint64_t> per_link;  // both directions together
  uint64_t busiest = 0;
  for (size_t r = 0; r < all.size(); ++r) {
    if (!all[r]) continue;
    for (const auto& [peer, count] : all[r]->retransmits) {
      if (peer < 0 || static_cast<size_t>(peer) >= all.size() || static_cast<size_t>(peer) == r) continue;
      const int me = static_cast<int>(r);
      uint64_t& n = per_link[{std::min(me, peer), std::max(me, peer)}];
      n += count;
      busiest = std::max(busiest, n);
    }
  }
  constexpr uint64_t kFloor = 3;
  LossyLink out;
  if (busiest < kFloor) return out;
  const uint64_t bar = std::max(kFloor, busiest / 4);
  std::vector<std::pair<int, int>> lossy;
  for (const auto& [link, n] : per_link) {
    if (n >= bar) lossy.push_back(link);
  }
  if (lossy.size() == 1) {
    out.a = lossy[0].first;
    out.b = lossy[0].second;
    return out;
  }
  std::vector<int> on_all = {lossy[0].first, lossy[0].second};
  for (const auto& link : lossy) std::erase_if(on_all, [&](int x) { return x != link.first && x != link.second; });
  if (on_all.size() == 1) {
    out.rank = on_all[0];
    return out;
  }
  // A busy link between two healthy ranks (a stalled ring pushes retransmissions around it)
  // can hide the lossy rank from the rule above; its own links still carry clearly the most.
  std::map<int, uint64_t> per_rank;
  for (const auto& [link, n] : per_link) {
    per_rank[link.first] += n;
    per_rank[link.second] += n;
  }
  int top = -1;
  uint64_t first = 0, second = 0;
  for (const auto& [r, n] : per_rank) {
    if (n > first) {
      second = first;
      first = n;
      top = r;
    } else {
      second = std::max(second, n);
    }
  }
  if (2 * first >= 3 * second) out.rank = top;
  return out;
}

FailureBoard::FailureBoard(std::shared_ptr<Store> store, int rank, int size)
    : store_(std::move(store)), rank_(rank), size_(size) {}

// Store calls throw; here an unreachable store only makes the messages poorer. The first
// problem is kept: later ones only say that the connection was given up.
template <typename F>
bool FailureBoard::guarded(F&& f) {
  if (!store_ || unreachable_) return false;
  try {
    f();
    return true;
  } catch (const Error& e) {
    if (store_problem_.empty()) store_problem_ = e.what();
    if (e.code() == ErrorCode::timeout || e.code() == ErrorCode::peer_lost) {
      unreachable_ = true;
      silent_ = e.code() == ErrorCode::timeout;
    }
    return false;
  }
}

std::string FailureBoard::store_address() const { return store_ ? store_->address() : "(none)"; }
std::chrono::milliseconds FailureBoard::store_timeout() const {
  return store_ ? store_->timeout() : std::chrono::milliseconds(0);
}

// A rank number from the store is only used when it names a rank of this communicator.
int FailureBoard::rank_or_none(int r) const { return r >= 0 && r < size_ ? r : -1; }

Failure FailureBoard::publish(const Failure& f) {
  std::string now;
  if (!guarded([&] { now = store_->compare_set("abort", "", encode(f)); })) return f;
  auto on_board = decode(now);
  if (!on_board) return f;
  on_board->culprit = rank_or_none(on_board->culprit);
  return *on_board;
}

std::optional<Failure> FailureBoard::read() {
  std::optional<Failure> out;
  guarded([&] {
    if (store_->check({"abort"})) out = decode(store_->get("abort"));
  });
  if (out) out->culprit = rank_or_none(out->culprit);
  return out;
}

void FailureBoard::write_progress(const Progress& p) {
  std::string v = std::to_string(p.in_seq);
  v.append(" ").append(std::to_string(p.done_seq)).append(" ");
  if (p.retransmits.empty()) v.append("-");
  for (size_t i = 0; i < p.retransmits.size(); ++i) {
    v.append(i == 0 ? "" : ",").append(std::to_string(p.retransmits[i].first)).append(":");
    v.append(std::to_string(p.retransmits[i].second));
  }
  v.append("\n").append(p.text);
  guarded([&] { store_->set("progress/" + std::to_string(rank_), v); });
}

std::vector<std::optional<Progress>> FailureBoard::collect_progress(Deadline bound) {
  std::vector<std::optional<Progress>> out(static_cast<size_t>(size_));
  for (;;) {
    bool missing = false;
    for (int r = 0; r < size_; ++r) {
      auto& slot = out[static_cast<size_t>(r)];
      if (slot) continue;
      const std::string key = "progress/" + std::to_string(r);
      bool reachable = guarded([&] {
        if (store_->check({key})) slot = decode_progress(store_->get(key));
      });
      if (!reachable) return out;
      missing = missing || !slot;
    }
    if (!missing || bound.expired()) return out;
    std::this_thread::sleep_for(kPollInterval);
  }
}

void FailureBoard::write_report(const TimeoutReport& report) {
  std::string head = std::to_string(report.culprit);
  for (size_t i = 0; i < report.silent.size(); ++i) head.append(i == 0 ? " " : ",").append(std::to_string(report.silent[i]));
  if (report.silent.empty()) head.append(" -");
  guarded([&] { store_->set("report", head + "\n" + report.text); });
}

void FailureBoard::mark_closing() {
  guarded([&] { store_->set("closing/" + std::to_string(rank_), ""); });
}

std::vector<int> FailureBoard::without_closing_mark(const std::vector<int>& ranks) {
  std::vector<int> out;
  for (int r : ranks) {
    bool marked = false;
    if (!guarded([&] { marked = store_->check({"closing/" + std::to_string(r)}); })) return ranks;
    if (!marked) out.push_back(r);
  }
  return out;
}

std::optional<TimeoutReport> FailureBoard::wait_report(Deadline bound) {
  for (;;) {
    std::optional<std::string> raw;
    if (!guarded([&] {
          if (store_->check({"report"})) raw = store_->get("report");
        })) {
      return std::nullopt;
    }
    if (raw) {
      TimeoutReport out;
      const size_t nl = raw->find('\n');
      char* at = nullptr;
      out.culprit = rank_or_none(static_cast<int>(std::strtol(raw->c_str(), &at, 10)));
      while (*at == ' ' || *at == ',') {
        char* end = nullptr;
        const long r = std::strtol(at + 1, &end, 10);
        if (end == at + 1) break;
        if (rank_or_none(static_cast<int>(r)) >= 0) out.silent.push_back(static_cast<int>(r));
        at = end;
      }
      out.text = nl == std::string::npos ? *raw : raw->substr(nl + 1);
      return out;
    }
    if (bound.expired()) return std::nullopt;
    std::this_thread::sleep_for(kPollInterval);
  }
}

}  // namespace braid
