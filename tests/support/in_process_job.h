// tests/support/in_process_job.h - the ranks of one job as threads of the test process.
//
// A store served in this process, an inproc fabric (for the inproc transport) and the settings
// every rank shares. make(rank) builds that rank's communicator from a CommunicatorConfig rather
// than Communicator::from_store: several ranks of one process must meet in one store namespace,
// and inproc needs a Fabric that only the config can carry. It returns once every rank of the
// job has built its own, so each rank calls it on its own thread (run_ranks).
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "braid/store.h"
#include "runtime/communicator_impl.h"
#include "transport/inproc/inproc_transport.h"

namespace braid::testing {

struct JobSettings {
  std::string transport = "inproc";  // or tcp, tcp-poll, auto
  int ranks = 3;
  double timeout_s = 20;       // BRAID_TIMEOUT_S
  double peer_timeout_s = 10;  // BRAID_PEER_TIMEOUT_S
  uint64_t comm_id = 0x11fe71e;
  bool caller_progress = true;                   // BRAID_CALLER_PROGRESS
  std::chrono::microseconds hand_off_tick{1000};  // CommunicatorConfig::hand_off_tick
  std::chrono::microseconds waits_at_once{100};   // CommunicatorConfig::waits_at_once
  size_t cuda_staging_bytes = 0;  // BRAID_CUDA_STAGING_BYTES; 0: the default
  std::string cuda_reduce{};       // BRAID_CUDA_REDUCE; empty: the default
  std::function<void()> after_progress_op{};  // CommunicatorConfig::after_progress_op
  std::function<void()> before_held_complete{};  // CommunicatorConfig::before_held_complete
  std::function<void()> after_wake{};            // CommunicatorConfig::after_wake
};

class InProcessJob {
 public:
  explicit InProcessJob(JobSettings settings)
      : settings_(std::move(settings)), server_(TcpStoreServer::start("127.0.0.1", 0)) {}

  // Rank `rank` of the job (or of a job of `size` ranks on the same store, e.g. 1). `impl`, when
  // given, gets the communicator's CommunicatorImpl, for tests that look inside.
  Communicator make(int rank, int size = 0, CommunicatorImpl** impl = nullptr) {
    if (size == 0) size = settings_.ranks;
    TcpStoreOptions options;
    options.timeout = std::chrono::seconds(30);
    CommunicatorConfig cfg;
    cfg.rank = rank;
    cfg.size = size;
    cfg.local_rank = rank;
    cfg.local_size = size;
    cfg.comm_id = settings_.comm_id;
    cfg.store = std::shared_ptr<Store>(TcpStore::connect("127.0.0.1", server_->port(), options).release());
    cfg.master_addr = "127.0.0.1";
    cfg.env.transport = settings_.transport;
    cfg.env.timeout_s = settings_.timeout_s;
    cfg.env.rendezvous_timeout_s = 20;
    cfg.env.peer_timeout_s = settings_.peer_timeout_s;
    cfg.env.caller_progress = settings_.caller_progress;
    cfg.hand_off_tick = settings_.hand_off_tick;
    cfg.waits_at_once = settings_.waits_at_once;
    if (settings_.cuda_staging_bytes != 0) cfg.env.cuda_staging_bytes = settings_.cuda_staging_bytes;
    if (!settings_.cuda_reduce.empty()) cfg.env.cuda_reduce = settings_.cuda_reduce;
    cfg.inproc_fabric = &fabric_;
    cfg.after_progress_op = settings_.after_progress_op;
    cfg.before_held_complete = settings_.before_held_complete;
    cfg.after_wake = settings_.after_wake;
    std::unique_ptr<CommunicatorImpl> made = value_or_raise(make_communicator_impl(std::move(cfg)));
    if (impl != nullptr) *impl = made.get();
    return Communicator::from_impl_(std::move(made));
  }

  int ranks() const { return settings_.ranks; }
  transport::inproc::Fabric& fabric() { return fabric_; }

 private:
  JobSettings settings_;
  std::unique_ptr<TcpStoreServer> server_;
  transport::inproc::Fabric fabric_;
};

// Runs body(rank) for ranks 0..n-1, one thread each; a braid::Error escaping a body fails the case.
inline void run_ranks(int n, const std::function<void(int)>& body) {
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      try {
        body(r);
      } catch (const Error& e) {
        ADD_FAILURE() << "rank " << r << ": " << to_string(e.code()) << ": " << e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
}

}  // namespace braid::testing
