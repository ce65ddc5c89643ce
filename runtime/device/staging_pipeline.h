// runtime/device/staging_pipeline.h - large collectives on CUDA buffers, pipelined through a bounded
// set of pinned chunks.
//
// Collectives on device buffers (all but send/recv and the uneven forms: covers()) run as a
// sequence of ordinary host collectives, one per chunk (the slot's layout: device_layout.cc), each on a pinned slot of the communicator's StagingPool. The
// communicator queues the chunks one after another like any operations, so its progress engine
// already overlaps them (the next starts once the previous posted everything). Around each chunk:
//   input   once the GPU passed the work queued on the caller's stream before the call (an event,
//           polled on the host: braid's streams never wait for the caller's, which our host
//           function holds), the chunk is copied device -> slot on braid's lane 0, after the
//           slot's previous result copy (a GPU-side event wait), and an event is recorded;
//   run     the chunk's collective starts only when that event is done;
//   result  after it succeeded, the slot is copied slot -> device on lane 1 and an event
//           recorded, which frees the slot for the chunk that takes it next.
// So with S slots the device->host copy of chunk i+1, the network on chunk i and the
// host->device copy of chunk i-1 run at once, and pinned memory stays at the bound whatever the
// message size. The caller's stream still sees one step (DeviceStaging::hold_stream).
// Where results land: with one chunk, in the caller's buffer once the chunk succeeded; with
// more, in a device scratch buffer, copied (device to device, on lane 1) into the caller's buffer
// only after every chunk succeeded. A failure at any chunk leaves the caller's buffer untouched;
// the remaining chunks still run (the other ranks need this rank's part), their results
// discarded, and the operation reports the failure once they all ran.
// Every rank must split the same way: BRAID_CUDA_STAGING_BYTES must be the same on every rank.
// Reductions on the device (BRAID_CUDA_REDUCE, chosen per operation by reduce_on_device()):
// an all_reduce chunk runs as a host all_gather and a reduce chunk as a host gather to the root,
// so that each rank that needs the result holds every rank's part of the chunk in its slot; the
// result step then copies the parts to the GPU (its own part straight into the result, the
// others into the slot's device landing buffer) and reduces them there with CUDA kernels, all on
// lane 1, so each reduction runs after the copies it reads and the slot's "free" event (recorded
// on lane 1 after them) orders the next user of the slot and of its landing buffer. No reduced
// chunk is sent: each rank reduces the gathered parts itself, in rank order, so every rank
// gets the same bits.
// Threading: every entry point takes the pool's mutex; DeviceApi calls are made under it.
#pragma once

#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "collectives/collective.h"
#include "common/deadline.h"
#include "common/status.h"
#include "runtime/device/device_api.h"

namespace braid {

namespace detail {
struct WorkState;
}

class StagingPipeline;

// Deliberately broken orderings, for the tests that prove they would be caught.
struct StagingFaultsForTesting {
  std::atomic<bool> skip_input_wait{false};    // a chunk runs before its input copy is done
  std::atomic<bool> skip_slot_wait{false};     // a slot is refilled before its result copy read it
  std::atomic<bool> early_result_copy{false};  // a chunk's result is copied before its collective ran
  std::atomic<bool> skip_result_wait{false};   // the caller's result is not ordered after the chunks'
  std::atomic<bool> reduce_off_lane{false};    // a device reduction is queued on lane 0, unordered
                                               // with the copies of the parts it reads
};
StagingFaultsForTesting& staging_faults_for_testing();

// One communicator's pinned slots: kSlots of bytes/kSlots each, made on first use and kept.
// The chunks of the communicator's operations take the slots in turn, in the order the
// operations were queued (the n-th chunk the slot n % kSlots, after the (n - kSlots)-th gave
// it back), so a chunk never waits for a slot held by one queued after it.
class StagingPool {
 public:
  static constexpr size_t kSlots = 4;
  // `reduce`: BRAID_CUDA_REDUCE (auto | device | host).
  explicit StagingPool(size_t bytes, std::string reduce = "auto")
      : slot_bytes_(bytes / kSlots), reduce_(std::move(reduce)) {
    for (size_t k = 0; k < kSlots; ++k) slots_[k].next_user = k;
  }
  ~StagingPool();
  StagingPool(const StagingPool&) = delete;
  StagingPool& operator=(const StagingPool&) = delete;
  size_t slot_bytes() const { return slot_bytes_; }
  const std::string& reduce_mode() const { return reduce_; }

 private:
  friend class StagingPipeline;
  struct Slot {
    char* data = nullptr;
    DeviceApi* api = nullptr;
    int device = -1;
    uint64_t next_user = 0;               // the chunk (pool-wide number) that may fill it next
    std::vector<uint64_t> gave_up;        // later users that ended without using it
    DeviceApi::Event free_after = nullptr;  // the last copy that reads it (nullptr: none pending)
    char* landing = nullptr;  // device memory of slot_bytes: the other ranks' parts, to reduce on the GPU
  };
  // Queues the copies that can go now, for every live pipeline; under mu_.
  void pump_locked();

  // Device scratch buffers, kept for the communicator's life: cudaFree waits for the whole
  // device, including a caller's stream that braid itself holds until an operation ends.
  struct Scratch {
    char* data;
    size_t bytes;
    DeviceApi* api;
    int device;
  };
  Result<char*> take_scratch_locked(DeviceApi* api, int device, size_t bytes);
  void give_scratch_locked(char* data);

  const size_t slot_bytes_;
  const std::string reduce_;
  std::mutex mu_;
  std::vector<Scratch> scratch_;       // every one made
  std::vector<char*> scratch_free_;
  Slot slots_[kSlots];
  uint64_t next_chunk_ = 0;
  std::vector<StagingPipeline*> live_;  // every pipeline that may have copies to queue
};

// One operation's chunks. Made by DeviceStaging::stage, shared by its chunks' stagings.
class StagingPipeline {
 public:
  // Whether `args` (whose buffers are all on `device`) can be pipelined with `pool`; then the
  // pipeline, with the caller's stream marked (an event recorded after its work so far).
  static Result<std::shared_ptr<StagingPipeline>> make(DeviceApi* api, std::shared_ptr<StagingPool> pool,
                                                       const collectives::CollectiveArgs& args, int rank, int size,
                                                       int device, void* stream);
  static bool covers(const collectives::CollectiveArgs& args);
  // Whether `args`' reduction runs on the GPU under BRAID_CUDA_REDUCE=`mode` (device_reduce.cc):
  // a function of what every rank knows alike, so that all ranks split the same way.
  static bool reduce_on_device(const std::string& mode, const collectives::CollectiveArgs& args, int size);
  ~StagingPipeline();

  size_t chunks() const { return nchunks_; }
  bool reduces_on_device() const { return device_reduce_; }
  // Numbers the chunks in the pool's order and makes the slots they use; `work` is completed
  // at the end. Called in the order the operations are queued (under the communicator's lock).
  Status start(std::shared_ptr<detail::WorkState> work);
  // The host collective of chunk `i`, on its slot (after start()).
  collectives::CollectiveArgs chunk_args(size_t i) const;

  // Whether chunk i's input is on its slot; queues what can be queued first.
  Result<bool> input_ready(size_t i);
  // After chunk i's collective succeeded: queues its result copy; the last also copies the
  // result into the caller's buffer and completes the operation.
  Status finish(size_t i, const Deadline& deadline);
  // Chunk i's staging ends: frees what it holds; when it did not finish, the operation fails
  // with `why` (its own Work's status).
  void drop(size_t i, const Status& why);

 private:
  friend class StagingPool;
  StagingPipeline() = default;
  struct Chunk {
    uint64_t number = 0;  // in the pool's order: its slot is number % kSlots
    bool issued = false;   // input copies queued, `in` recorded
    bool results_queued = false;
    bool finished = false;
    bool dropped = false;
    DeviceApi::Event in = nullptr;
  };
  // The slot's layout per collective (device_layout.cc): parts of n elements a slot holds for a
  // chunk of n, and the bytes chunk i's input (or result) copies move.
  static size_t slot_units(const collectives::CollectiveArgs& args, int size, bool device_reduce);
  struct Piece {
    size_t caller;  // byte offset in the caller's send (input) or receive (result) buffer
    size_t slot;    // byte offset in the slot
    size_t bytes;
  };
  std::vector<Piece> pieces(size_t i, bool input) const;
  Status issue_locked(size_t i);
  Status queue_results_locked(size_t i);
  // The result step of a chunk reduced on the GPU (device_reduce.cc).
  Status queue_device_reduction_locked(size_t i, char* dest);
  void release_slot_locked(size_t i, DeviceApi::Event free_after);
  void fail_locked(const Status& why);
  void end_if_failed_locked();
  StagingPool::Slot& slot(size_t i) const { return pool_->slots_[chunk_[i].number % StagingPool::kSlots]; }

  DeviceApi* api_ = nullptr;
  std::shared_ptr<StagingPool> pool_;
  collectives::CollectiveArgs args_;  // the caller's, on device memory
  int rank_ = 0, size_ = 1, device_ = -1;
  size_t esize_ = 1, chunk_elems_ = 0, nchunks_ = 0, out_bytes_ = 0;
  bool device_reduce_ = false;  // chunks gathered on the host, reduced on the GPU
  void* lane_in_ = nullptr;   // device -> host
  void* lane_out_ = nullptr;  // host -> device
  DeviceApi::Event ready_ = nullptr;  // the caller's stream at the call
  bool ready_seen_ = false;
  char* scratch_ = nullptr;  // results until every chunk succeeded (more than one chunk)
  std::vector<Chunk> chunk_;
  size_t next_issue_ = 0;  // the first chunk whose input is not queued yet
  Status error_;  // the first failure of a copy this pipeline queued
  size_t finished_ = 0;   // chunks whose result was copied
  size_t settled_ = 0;    // chunks finished or dropped
  Status first_error_;
  bool failed_ = false;
  bool ended_ = false;  // work_ completed
  std::shared_ptr<detail::WorkState> work_;
};

}  // namespace braid
