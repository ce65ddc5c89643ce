// runtime/communicator_config.h - what a communicator is made from: who this rank is, the store,
// the settings, and the hooks tests use to make an ordering certain.
//
// Filled by the bootstrap (communicator.cc from the environment or a program's store,
// bootstrap/split.h for a child) and handed to the communicator it describes, which keeps it.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "braid/store.h"
#include "common/env.h"
#include "runtime/bootstrap/job_lease.h"

namespace braid {

struct CommunicatorConfig;
// The job rank of this communicator's rank `r`.
int job_rank_of(const CommunicatorConfig& cfg, int r);

struct CommunicatorConfig {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  uint64_t comm_id = 0;
  std::shared_ptr<Store> store;              // the communicator's namespace
  std::shared_ptr<Store> board_store;        // the same namespace on a connection of its own (or null: store)
  bool board_bounded = false;                // board_store's timeout is the failure-report bound
  int store_rank = -1;                       // the rank whose process serves the store, or -1
  // When a rank serves the job's store in its process (store_rank >= 0): this rank's lease on it,
  // shared by all its communicators, children included (bootstrap/job_lease.h); else null.
  std::shared_ptr<JobLease> lease;
  std::vector<int> job_ranks;                // each rank's rank in the job (empty: the same)
  // The program handed the store in (from_store, e.g. torch's): whoever serves it may exit
  // before the other ranks leave, which is then no trouble at all.
  bool foreign_store = false;
  std::string master_addr;
  Env env;
  // The hand-off's tick (engine/hand_off.h): an operation left to its caller waits this long (or
  // up to twice) before the progress thread takes it. Tests lengthen it to make the hand-off certain.
  std::chrono::microseconds hand_off_tick{1000};
  // A wait() this soon after its *_async call counts as waiting at once. Less compute than two
  // thread wake-ups in between has nothing to overlap with: the progress thread would barely
  // have started. Tests lengthen it with the tick.
  std::chrono::microseconds waits_at_once{100};
  void* inproc_fabric = nullptr;             // tests: BRAID_TRANSPORT=inproc
  // Tests: called on the progress thread after each operation it ran, before it lets go of the
  // communicator, to make a slow release certain (engine/held_completions.h).
  std::function<void()> after_progress_op;
  // Tests: called on the progress thread after it let go of the communicator, before it
  // completes the operation it held (complete_held), to make a late completion certain.
  std::function<void()> before_held_complete;
  // Tests: called on the caller's thread after an *_async call woke the progress thread, before
  // the call returns (a wake-up that costs the caller a while, as on an emulated CPU).
  std::function<void()> after_wake;
};

}  // namespace braid
