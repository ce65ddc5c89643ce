// runtime/communicator_impl.h - what stands behind a braid::Communicator: its parts, wired.
//
// Each part owns its state and its lock (docs/design.md, "Shape of runtime/"):
//   links/comm_links.h        the transports and one connection per peer, the ring depth
//   failure/comm_failure.h    the failure state, reports and abort
//   device/comm_device.h      the CUDA stream and the staging of device buffers
//   engine/op_queue.h         queued operations, admission and who runs them (hand_off.h)
//   engine/held_completions.h completions the progress thread holds until it lets go
//   engine/run_factory.h      each operation's run: options, the run cache
//   engine/stream_runner.h    one operation and those queued behind it, overlapped
//   engine/group_runner.h     group_start() ... group_end() as one unit
//   engine/op_runner.h        runs a taken operation; what a waiting Work asks
//   engine/progress_thread.h  builds the links, then runs what no caller runs
// An operation goes: enqueue()/run() -> OpQueue -> (caller's thread or ProgressThread) ->
// OpRunner -> StreamRunner or GroupRunner -> RunFactory + PeerLinks::drive -> the Work.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/communicator.h"
#include "braid/store.h"
#include "braid/work.h"
#include "collectives/collective.h"
#include "runtime/communicator_config.h"
#include "runtime/device/comm_device.h"
#include "runtime/engine/group_runner.h"
#include "runtime/engine/held_completions.h"
#include "runtime/engine/op_queue.h"
#include "runtime/engine/op_runner.h"
#include "runtime/engine/progress_thread.h"
#include "runtime/engine/run_factory.h"
#include "runtime/engine/stream_runner.h"
#include "runtime/failure/comm_failure.h"
#include "runtime/links/comm_links.h"

namespace braid {

class CommunicatorImpl {
 public:
  ~CommunicatorImpl();
  CommunicatorImpl(const CommunicatorImpl&) = delete;
  CommunicatorImpl& operator=(const CommunicatorImpl&) = delete;

  int rank() const { return cfg_.rank; }
  int size() const { return cfg_.size; }
  int local_rank() const { return cfg_.local_rank; }
  int local_size() const { return cfg_.local_size; }
  const std::shared_ptr<Store>& store() const { return cfg_.store; }
  std::string last_algorithm() const { return runs_.last_algorithm(); }
  // Communicator::peer_transports(): set before make_communicator_impl() returns, constant after.
  const std::vector<std::string>& peer_transports() const { return links_.peer_transports(); }
  // The links, once make_communicator_impl() returned: which transport carries each peer (transport_name), the
  // ring order. Null after the progress thread ended.
  const PeerLinks* links() const { return links_.get(); }

  // Validates `args` (throwing braid::Error before anything is sent) and queues it.
  Work enqueue(collectives::CollectiveArgs args);
  // The blocking form: enqueue + wait, except that with nothing queued or running the operation
  // runs right here. Throws the operation's error.
  void run(collectives::CollectiveArgs args);

  // For tests and TRACE: operations (a group counts once) run so far on a caller's thread
  // (blocking calls, wait()) and on the progress thread.
  using HandOffCounts = OpQueue::HandOffCounts;
  HandOffCounts hand_off_counts() const { return queue_.counts(); }
  // For tests: operations that took the stream runner's lean path (a kept run, driven alone),
  // and send/recv groups that took the group runner's (their kept runs, engine/lean_group.h).
  uint64_t lean_runs() const { return stream_.lean_runs(); }
  uint64_t lean_groups() const { return group_.lean_groups(); }

  // The CUDA stream that operations on device buffers are ordered on (device_staging.h).
  void set_stream(void* stream) { device_.set_stream(stream); }
  void* stream() const { return device_.stream(); }

  CommState state() const { return failure_.state(); }
  Status failure() const { return failure_.failure(); }
  void abort(const std::string& reason);
  // Operations enqueued in between run as one unit (engine/group_runner.h).
  void group_start() { queue_.open_group(); }
  Work group_end() { return queue_.close_group(); }
  // Collective over this communicator; nullptr for color kNoColor (bootstrap/split.h).
  Result<std::unique_ptr<CommunicatorImpl>> split(int color, int key);
  // Ends this communicator, then makes one of the ranks that go on (communicator_shrink.cc,
  // bootstrap/shrink.h); nullptr for a rank in `exclude`.
  Result<std::unique_ptr<CommunicatorImpl>> shrink(const std::vector<int>& exclude);

 private:
  explicit CommunicatorImpl(CommunicatorConfig config);
  // shrink()'s error when the store cannot be reached (`what`: the store's own message).
  Status shrink_store_gone(const std::string& what) const;
  // Stages device buffers; throws as CommDevice::stage does.
  std::unique_ptr<DeviceStaging> stage_device(collectives::CollectiveArgs& args,
                                              const std::shared_ptr<detail::WorkState>& work);

  // In the order each needs the ones before it; every part keeps references to those it uses.
  CommunicatorConfig cfg_;
  CommLinks links_;
  CommFailure failure_;
  CommDevice device_;
  OpQueue queue_;
  HeldCompletions held_;
  RunFactory runs_;
  StreamRunner stream_;
  GroupRunner group_;
  OpRunner runner_;
  ProgressThread progress_;
  uint64_t split_count_ = 0;  // caller's thread: splits are collective calls
  uint64_t shrink_count_ = 0;  // caller's thread: this rank's shrink() calls (bootstrap/shrink.h)

  friend Result<std::unique_ptr<CommunicatorImpl>> make_communicator_impl(CommunicatorConfig config);
};

// Makes the communicator of `config`: starts its progress thread, which builds every connection,
// and returns once all are up.
Result<std::unique_ptr<CommunicatorImpl>> make_communicator_impl(CommunicatorConfig config);

}  // namespace braid
