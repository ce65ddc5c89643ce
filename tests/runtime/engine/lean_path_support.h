// tests/runtime/engine/lean_path_support.h - what the lean-path tests (lone_run_test.cc,
// lean_group_test.cc) share: the in-process job's settings, a bounded wait for another rank, and
// a call's error as a value.
#pragma once

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <utility>

#include "braid/error.h"
#include "tests/support/in_process_job.h"

namespace braid::lean_path {

using namespace std::chrono_literals;

inline constexpr int kRanks = 2;
inline constexpr auto kBound = 20s;  // every wait for another rank ends within this, or the case fails

// Two ranks whose callers keep their operations (a hand-off tick and a wait-at-once span far
// longer than any case), with `timeout_s` as BRAID_TIMEOUT_S.
inline testing::JobSettings settings(double timeout_s = 20) {
  testing::JobSettings s;
  s.ranks = kRanks;
  s.hand_off_tick = 2s;
  s.waits_at_once = 2s;
  s.timeout_s = timeout_s;
  return s;
}

// Spins until `flag` is set, or the bound passed.
inline bool wait_for(const std::atomic<bool>& flag) {
  const auto until = std::chrono::steady_clock::now() + kBound;
  while (!flag.load() && std::chrono::steady_clock::now() < until) std::this_thread::sleep_for(1ms);
  return flag.load();
}

// What `body` throws, as (code, message); (ok, "") when it throws nothing.
template <class F>
std::pair<ErrorCode, std::string> error_of(F&& body) {
  try {
    body();
  } catch (const Error& e) {
    return {e.code(), e.what()};
  }
  return {ErrorCode::ok, ""};
}

}  // namespace braid::lean_path
