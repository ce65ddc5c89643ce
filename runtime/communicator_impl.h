// runtime/communicator_impl.h - what stands behind a braid::Communicator.
//
// One progress thread per communicator owns the transport: it builds the connections (so an
// io_uring engine is created, submitted to and reaped by that one thread) and then runs queued
// operations in issue order. Callers enqueue and get a Work; blocking calls wait on it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "braid/store.h"
#include "braid/work.h"
#include "collectives/collective.h"
#include "common/env.h"
#include "runtime/work_state.h"
#include "transport/transport.h"

namespace braid {

struct CommunicatorConfig {
  int rank = 0;
  int size = 1;
  int local_rank = 0;
  int local_size = 1;
  uint64_t comm_id = 0;
  std::shared_ptr<Store> store;              // the communicator's namespace
  std::unique_ptr<TcpStoreServer> server;    // when this rank serves the job's store
  std::string master_addr;
  Env env;
  void* inproc_fabric = nullptr;             // tests: BRAID_TRANSPORT=inproc
};

class CommunicatorImpl {
 public:
  // Starts the progress thread and builds every connection; returns once all are up.
  static Result<std::unique_ptr<CommunicatorImpl>> create(CommunicatorConfig config);
  ~CommunicatorImpl();
  CommunicatorImpl(const CommunicatorImpl&) = delete;
  CommunicatorImpl& operator=(const CommunicatorImpl&) = delete;

  int rank() const { return cfg_.rank; }
  int size() const { return cfg_.size; }
  int local_rank() const { return cfg_.local_rank; }
  int local_size() const { return cfg_.local_size; }
  const std::shared_ptr<Store>& store() const { return cfg_.store; }
  std::string last_algorithm() const;

  // Validates `args` (throwing braid::Error before anything is sent) and queues it.
  Work enqueue(collectives::CollectiveArgs args);

 private:
  explicit CommunicatorImpl(CommunicatorConfig config);

  struct Pending {
    collectives::CollectiveArgs args;
    std::shared_ptr<detail::WorkState> work;
    uint64_t seq = 0;
  };

  void progress_main();
  Status connect_all();
  void run_one(Pending& op);
  void finish_job_store();

  CommunicatorConfig cfg_;
  collectives::Algo forced_algo_ = collectives::Algo::automatic;

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool stopping_ = false;
  uint64_t next_seq_ = 0;
  std::atomic<uint64_t> enqueued_{0};  // lets the progress thread spin on new work without the lock

  // Owned and touched by the progress thread only (after setup).
  std::unique_ptr<transport::Transport> transport_;
  std::vector<std::unique_ptr<transport::Connection>> connections_;
  std::vector<transport::Connection*> peers_;
  Status failed_;  // once an operation failed, the communicator is unusable

  std::atomic<int> last_algo_{0};
  std::mutex setup_mu_;
  std::condition_variable setup_cv_;
  bool setup_done_ = false;
  Status setup_status_;
  std::thread thread_;
};

}  // namespace braid
