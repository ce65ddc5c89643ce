// tests/runtime/engine/lean_path_support.h - what the lean-path tests (lone_run_test.cc,
// lean_group_test.cc) share: the in-process job's settings, a bounded wait for another rank, and
// a call's error as a value.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "braid/communicator.h"
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

// One group of two messages of 4 ints each way with `peer` (step `i` of rank `r`): the receives
// interleaved with the sends, or both sends first. Returns the last int of each message received,
// in order: peer * 100 + i, then peer * 100 + 50 + i when both arrived in order.
inline std::pair<int32_t, int32_t> two_message_group(Communicator& comm, int r, int peer, int i, bool sends_first) {
  std::vector<int32_t> first(4, r * 100 + i), second(4, r * 100 + 50 + i), got_first(4, -1), got_second(4, -1);
  comm.group_start();
  if (sends_first) {
    comm.send_async(first.data(), first.size(), DType::i32, peer);
    comm.send_async(second.data(), second.size(), DType::i32, peer);
    comm.recv_async(got_first.data(), got_first.size(), DType::i32, peer);
    comm.recv_async(got_second.data(), got_second.size(), DType::i32, peer);
  } else {
    comm.recv_async(got_first.data(), got_first.size(), DType::i32, peer);
    comm.send_async(first.data(), first.size(), DType::i32, peer);
    comm.recv_async(got_second.data(), got_second.size(), DType::i32, peer);
    comm.send_async(second.data(), second.size(), DType::i32, peer);
  }
  comm.group_end().wait();
  return {got_first[3], got_second[3]};
}

}  // namespace braid::lean_path
