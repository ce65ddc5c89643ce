// A rank process for the shrink tests and bench/runtime/shrink_recovery.py: checked all_reduces
// on the job's communicator until one fails (a rank was killed or stopped) or --before of them
// ran (a planned shrink), then Communicator::shrink(--exclude), then checked all_reduces on the
// new communicator for --after-ms. --abort-after N: this rank aborts its communicator after N
// all_reduces (the others' fail); --shrink-delay-ms D: it waits D ms between the failure and
// its shrink() call (a survivor that is alive but slow). Joins through the environment (MASTER_ADDR, RANK, ...) and
// prints one line per event; t= is CLOCK_MONOTONIC in nanoseconds, comparable across processes:
//   READY rank=R                                  the first all_reduce was right
//   FAILED rank=R code=CODE t=T msg=...           the old communicator failed here
//   LEAVING rank=R                                excluded, and told not to call shrink (exit 0)
//   EXCLUDED rank=R                               shrink returned a non-member handle (exit 0)
//   SHRINK_FAILED rank=R code=CODE msg=...        shrink threw (exit 5)
//   PENDING_ENDED rank=R code=CODE msg=...        (--pending) the lonely operation ended in an error
//   PENDING_DONE rank=R                           (--pending) it completed, which it must not
//   SHRUNK rank=R new_rank=N size=S t=T           shrink returned
//   MEMBERS rank=R old=a,b,c                      the new ranks' old ranks, gathered over it
//   FIRST rank=R t=T                              the first all_reduce on it was right
//   AFTER_FAILED rank=R code=CODE msg=...         an operation on it failed (exit 6)
//   WRONG rank=R iter=I index=J got=G want=W      a wrong result, on either (exit 4)
//   DONE rank=R iters=N                           (exit 0)
#include <braid/braid.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "tests/support/rank_flags.h"

namespace {

using braid::DType;
using braid::Op;

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

std::vector<int> parse_list(const std::string& s) {
  std::vector<int> out;
  std::stringstream in(s);
  std::string word;
  while (std::getline(in, word, ',')) {
    if (!word.empty()) out.push_back(std::stoi(word));
  }
  return out;
}

// What rank `r` contributes at element `j` of iteration `i`.
int32_t value(long i, int r, size_t j) { return static_cast<int32_t>((i * 7 + r * 13 + static_cast<long>(j)) % 1000); }

// One all_reduce whose every element is checked; false (after a WRONG line) when one is wrong.
bool checked_all_reduce(braid::Communicator& comm, int old_rank, long i, std::vector<int32_t>& a) {
  const size_t n = 1 + static_cast<size_t>(i * 977) % a.size();
  for (size_t j = 0; j < n; ++j) a[j] = value(i, comm.rank(), j);
  comm.all_reduce(a.data(), n, DType::i32, Op::sum);
  for (size_t j = 0; j < n; ++j) {
    int64_t want = 0;
    for (int q = 0; q < comm.size(); ++q) want += value(i, q, j);
    if (a[j] != want) {
      say("WRONG rank=" + std::to_string(old_rank) + " iter=" + std::to_string(i) + " index=" + std::to_string(j) +
          " got=" + std::to_string(a[j]) + " want=" + std::to_string(want));
      return false;
    }
  }
  return true;
}

std::string error_line(const char* tag, int rank, const braid::Error& e, bool with_time) {
  return std::string(tag) + " rank=" + std::to_string(rank) + " code=" + braid::to_string(e.code()) +
         (with_time ? " t=" + std::to_string(now_ns()) : "") + " msg=" + e.what();
}

// The new communicator: who is in it, then checked all_reduces for `after_ms`. Exit status.
int go_on(braid::Communicator& next, int old_rank, int after_ms, std::vector<int32_t>& a) {
  say("SHRUNK rank=" + std::to_string(old_rank) + " new_rank=" + std::to_string(next.rank()) +
      " size=" + std::to_string(next.size()) + " t=" + std::to_string(now_ns()));
  long i = 0;
  try {
    if (!checked_all_reduce(next, old_rank, i++, a)) return 4;
    say("FIRST rank=" + std::to_string(old_rank) + " t=" + std::to_string(now_ns()));
    std::vector<int32_t> olds(static_cast<size_t>(next.size()), -1);
    const int32_t mine = old_rank;
    next.all_gather(&mine, olds.data(), 1, DType::i32);
    std::string list;
    for (int32_t o : olds) {
      if (!list.empty()) list.push_back(',');
      list.append(std::to_string(o));
    }
    say("MEMBERS rank=" + std::to_string(old_rank) + " old=" + list);
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(after_ms);
    // The ranks stop together: each iteration ends in an all_reduce of whose time is up.
    for (int32_t up = 0; !up;) {
      if (!checked_all_reduce(next, old_rank, i++, a)) return 4;
      up = std::chrono::steady_clock::now() >= until ? 1 : 0;
      next.all_reduce(&up, 1, DType::i32, Op::max);
    }
  } catch (const braid::Error& e) {
    say(error_line("AFTER_FAILED", old_rank, e, false));
    return 6;
  }
  say("DONE rank=" + std::to_string(old_rank) + " iters=" + std::to_string(i));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  int before = 1 << 30;  // all_reduces before a planned shrink; a failure ends them sooner
  int after_ms = 500;
  std::string exclude_text;
  bool excluded_calls = false;
  bool drop_old = false;  // destroy the old communicator as soon as shrink returned (comm = comm.shrink())
  bool pending = false;   // start an all_reduce_async that no other rank joins, just before shrink
  int abort_after = -1;
  int shrink_delay_ms = 0;
  braid::testing::RankFlags("shrink_rank")
      .value("--before", &before)
      .value("--after-ms", &after_ms)
      .value("--exclude", &exclude_text)
      .toggle("--excluded-call-shrink", &excluded_calls)
      .toggle("--drop-old", &drop_old)
      .toggle("--pending", &pending)
      .value("--abort-after", &abort_after)
      .value("--shrink-delay-ms", &shrink_delay_ms)
      .parse(argc, argv);
  const std::vector<int> exclude = parse_list(exclude_text);
  std::vector<int32_t> a(1 << 14);
  int rank = -1;
  try {
    braid::Communicator comm = braid::Communicator::from_env();
    rank = comm.rank();
    try {
      for (long i = 0; i < before; ++i) {
        if (i == abort_after) comm.abort("--abort-after " + std::to_string(abort_after));
        if (!checked_all_reduce(comm, rank, i, a)) return 4;
        if (i == 0) say("READY rank=" + std::to_string(rank));
      }
    } catch (const braid::Error& e) {
      say(error_line("FAILED", rank, e, true));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(shrink_delay_ms));
    bool listed = false;
    for (int r : exclude) listed = listed || r == rank;
    if (listed && !excluded_calls) {
      say("LEAVING rank=" + std::to_string(rank));
      return 0;
    }
    int32_t lonely = 1;
    std::optional<braid::Work> outstanding;
    if (pending) outstanding.emplace(comm.all_reduce_async(&lonely, 1, DType::i32, Op::sum));
    std::optional<braid::Communicator> next;
    try {
      next.emplace(comm.shrink(exclude));
    } catch (const braid::Error& e) {
      say(error_line("SHRINK_FAILED", rank, e, false));
      return 5;
    }
    if (outstanding) {
      try {
        outstanding->wait();
        say("PENDING_DONE rank=" + std::to_string(rank));
      } catch (const braid::Error& e) {
        say(error_line("PENDING_ENDED", rank, e, false));
      }
    }
    if (drop_old) braid::Communicator(std::move(comm));
    if (!next->is_member()) {
      say("EXCLUDED rank=" + std::to_string(rank));
      return 0;
    }
    return go_on(*next, rank, after_ms, a);
  } catch (const braid::Error& e) {
    say(error_line("SETUP_FAILED", rank, e, false));
    return 3;
  }
}
