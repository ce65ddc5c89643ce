#include "tests/runtime/faults/failure_board_fuzz.h"

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "runtime/failure/failure_board.h"

namespace braid {
namespace {

constexpr int kSize = 4;

// Keys and values in memory: the board's parsers are what is under test, not a store.
class MemoryStore : public Store {
 public:
  using Store::wait;
  void set(const std::string& k, const std::string& v) override { kv_[k] = v; }
  std::string get(const std::string& k) override { return kv_.at(k); }
  int64_t add(const std::string& k, int64_t d) override {
    const int64_t n = (kv_.count(k) ? std::stoll(kv_[k]) : 0) + d;
    kv_[k] = std::to_string(n);
    return n;
  }
  std::string compare_set(const std::string& k, const std::string& expected, const std::string& desired) override {
    auto it = kv_.find(k);
    if ((it == kv_.end() && expected.empty()) || (it != kv_.end() && it->second == expected)) kv_[k] = desired;
    return kv_[k];
  }
  void wait(const std::vector<std::string>&, std::chrono::milliseconds) override {}
  bool check(const std::vector<std::string>& keys) override {
    for (const auto& k : keys) {
      if (!kv_.count(k)) return false;
    }
    return true;
  }
  bool delete_key(const std::string& k) override { return kv_.erase(k) > 0; }
  int64_t num_keys() override { return static_cast<int64_t>(kv_.size()); }
  std::chrono::milliseconds timeout() const override { return std::chrono::milliseconds(1000); }
  void set_timeout(std::chrono::milliseconds) override {}
  std::string address() const override { return "memory"; }

 private:
  std::map<std::string, std::string> kv_;
};

bool is_rank_or_none(int r) { return r >= -1 && r < kSize; }

}  // namespace

void fuzz_failure_board(const uint8_t* data, size_t size) {
  // Pieces separated by 0xff bytes: abort, progress/0..3, report.
  std::vector<std::string> pieces(1);
  for (size_t i = 0; i < size; ++i) {
    if (data[i] == 0xff && pieces.size() < 6) {
      pieces.emplace_back();
    } else {
      pieces.back().push_back(static_cast<char>(data[i]));
    }
  }
  auto store = std::make_shared<MemoryStore>();
  if (pieces.size() > 1 || !pieces[0].empty()) store->set("abort", pieces[0]);
  for (size_t r = 1; r < pieces.size() && r <= kSize; ++r) store->set("progress/" + std::to_string(r - 1), pieces[r]);
  if (pieces.size() > 5) store->set("report", pieces[5]);

  FailureBoard board(store, 0, kSize);
  if (auto f = board.read()) {
    if (!is_rank_or_none(f->culprit)) __builtin_trap();
  }
  const auto all = board.collect_progress(Deadline::after(std::chrono::milliseconds(0)));
  if (all.size() != kSize) __builtin_trap();
  const LossyLink lossy = find_lossy_link(all);
  if (!is_rank_or_none(lossy.rank) || !is_rank_or_none(lossy.a) || !is_rank_or_none(lossy.b)) __builtin_trap();
  if (auto report = board.wait_report(Deadline::after(std::chrono::milliseconds(0)))) {
    if (!is_rank_or_none(report->culprit)) __builtin_trap();
    for (int r : report->silent) {
      if (r < 0 || !is_rank_or_none(r)) __builtin_trap();
    }
  }
  const Failure mine = board.publish({ErrorCode::timeout, 0, "fuzz", 1});
  if (!is_rank_or_none(mine.culprit)) __builtin_trap();
}

}  // namespace braid
