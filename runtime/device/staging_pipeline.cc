#include "runtime/device/staging_pipeline.h"

#include <algorithm>
#include <chrono>
#include <string>
#include <thread>

#include "collectives/validate.h"
#include "runtime/device/event_pool.h"
#include "runtime/work_state.h"

namespace braid {

using collectives::CollectiveArgs;
using collectives::Kind;

StagingFaultsForTesting& staging_faults_for_testing() {
  static StagingFaultsForTesting faults;
  return faults;
}

namespace {

StagingFaultsForTesting& faults() { return staging_faults_for_testing(); }

// Polls `event` until the GPU passed it or `deadline` passed.
Status wait_done(DeviceApi* api, DeviceApi::Event event, const Deadline& deadline, const std::string& what) {
  for (int pass = 0;; ++pass) {
    ASSIGN_OR_RETURN(bool done, api->done(event));
    if (done) return Status::ok();
    if (deadline.expired()) return timeout_error(what + " did not finish in time (BRAID_TIMEOUT_S)");
    if (pass < 64) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
  }
}

// At teardown: whether the copies before `event` ended, waiting a little (a slot or scratch
// buffer still read by a copy is leaked rather than freed under it).
bool settled(DeviceApi* api, DeviceApi::Event event) {
  return event == nullptr || wait_done(api, event, Deadline::after_seconds(10), "").is_ok();
}

}  // namespace

StagingPool::~StagingPool() {
  for (const Scratch& s : scratch_) {  // those still lent were leaked by their pipeline
    if (std::find(scratch_free_.begin(), scratch_free_.end(), s.data) != scratch_free_.end()) {
      s.api->free_device(s.data, s.device);
    }
  }
  for (Slot& s : slots_) {
    if (s.data == nullptr) continue;
    if (!settled(s.api, s.free_after)) continue;
    if (s.landing != nullptr) s.api->free_device(s.landing, s.device);
    s.api->free_pinned(s.data);
    EventPool::get().give(s.api, s.device, s.free_after);
  }
}

Result<char*> StagingPool::take_scratch_locked(DeviceApi* api, int device, size_t bytes) {
  auto best = scratch_free_.end();
  size_t best_bytes = 0;
  for (auto it = scratch_free_.begin(); it != scratch_free_.end(); ++it) {
    for (const Scratch& s : scratch_) {
      if (s.data == *it && s.api == api && s.device == device && s.bytes >= bytes &&
          (best == scratch_free_.end() || s.bytes < best_bytes)) {
        best = it;
        best_bytes = s.bytes;
      }
    }
  }
  if (best != scratch_free_.end()) {
    char* data = *best;
    scratch_free_.erase(best);
    return data;
  }
  ASSIGN_OR_RETURN(void* data, api->alloc_device(bytes, device));
  scratch_.push_back(Scratch{static_cast<char*>(data), bytes, api, device});
  return static_cast<char*>(data);
}

void StagingPool::give_scratch_locked(char* data) { scratch_free_.push_back(data); }

void StagingPool::pump_locked() {
  for (StagingPipeline* p : live_) {
    if (!p->error_.is_ok()) continue;
    if (!p->ready_seen_) {
      Result<bool> ready = p->api_->done(p->ready_);
      if (!ready.is_ok()) {
        p->error_ = ready.status();
        continue;
      }
      if (!ready.value()) continue;
      p->ready_seen_ = true;
    }
    // In order: a chunk goes once its slot's previous user gave it back.
    for (; p->next_issue_ < p->nchunks_; ++p->next_issue_) {
      StagingPipeline::Chunk& c = p->chunk_[p->next_issue_];
      if (c.dropped) continue;
      if (p->slot(p->next_issue_).next_user != c.number) break;
      Status issued = p->issue_locked(p->next_issue_);
      if (!issued.is_ok()) {
        p->error_ = issued;
        break;
      }
    }
  }
}

bool StagingPipeline::covers(const CollectiveArgs& a) {
  // send/recv stay whole: a send's later chunks would take their slots only once the peer took
  // the earlier ones, which a program may order after its own later receive (docs/cuda.md). The
  // uneven forms stay whole too (their chunks would need a size per block).
  return a.kind != Kind::send && a.kind != Kind::recv && a.kind != Kind::barrier && a.counts.empty() &&
         a.send_counts.empty() && a.recv_counts.empty() && a.count > 0;
}

Result<std::shared_ptr<StagingPipeline>> StagingPipeline::make(DeviceApi* api, std::shared_ptr<StagingPool> pool,
                                                               const CollectiveArgs& args, int rank, int size,
                                                               int device, void* stream) {
  std::shared_ptr<StagingPipeline> p(new StagingPipeline);
  p->esize_ = dtype_size(args.dtype);
  p->device_reduce_ = reduce_on_device(pool->reduce_mode(), args, size);
  const size_t unit = p->esize_ * slot_units(args, size, p->device_reduce_);
  p->chunk_elems_ = pool->slot_bytes() / unit;
  if (!covers(args) || p->chunk_elems_ == 0) return std::shared_ptr<StagingPipeline>();
  p->api_ = api;
  p->pool_ = std::move(pool);
  p->args_ = args;
  p->rank_ = rank;
  p->size_ = size;
  p->device_ = device;
  p->nchunks_ = (args.count + p->chunk_elems_ - 1) / p->chunk_elems_;
  p->out_bytes_ = collectives::buffer_extents(args, rank, size).recv * p->esize_;
  ASSIGN_OR_RETURN(p->lane_in_, api->own_stream(device, 0));
  ASSIGN_OR_RETURN(p->lane_out_, api->own_stream(device, 1));
  ASSIGN_OR_RETURN(p->ready_, EventPool::get().take(api, device));
  Status recorded = api->record(p->ready_, device, stream);
  if (!recorded.is_ok()) {
    EventPool::get().give(api, device, p->ready_);
    p->ready_ = nullptr;
    return recorded;
  }
  return p;
}

Status StagingPipeline::start(std::shared_ptr<detail::WorkState> work) {
  work_ = std::move(work);
  // Made before any chunk takes a number: a chunk that is numbered always runs or gives its turn up.
  std::lock_guard<std::mutex> lock(pool_->mu_);
  if (nchunks_ > 1 && out_bytes_ > 0) {
    ASSIGN_OR_RETURN(scratch_, pool_->take_scratch_locked(api_, device_, out_bytes_));
  }
  for (size_t k = 0; k < std::min(nchunks_, StagingPool::kSlots); ++k) {
    StagingPool::Slot& s = pool_->slots_[(pool_->next_chunk_ + k) % StagingPool::kSlots];
    if (s.data == nullptr) {
      ASSIGN_OR_RETURN(void* data, api_->alloc_pinned(pool_->slot_bytes()));
      s.data = static_cast<char*>(data);
      s.api = api_;
    }
    if (device_reduce_ && out_bytes_ > 0 && s.landing == nullptr) {
      // Kept with the slot: written and read only on lane 1, before the slot's free event.
      ASSIGN_OR_RETURN(void* landing, api_->alloc_device(pool_->slot_bytes(), device_));
      s.landing = static_cast<char*>(landing);
      s.device = device_;
    }
  }
  chunk_.resize(nchunks_);
  for (Chunk& c : chunk_) c.number = pool_->next_chunk_++;
  pool_->live_.push_back(this);
  return Status::ok();
}

Status StagingPipeline::issue_locked(size_t i) {
  Chunk& c = chunk_[i];
  StagingPool::Slot& s = slot(i);
  if (s.free_after != nullptr) {  // the slot's previous result copy must have read it
    if (!faults().skip_slot_wait) RETURN_IF_ERROR(api_->wait_event(device_, lane_in_, s.free_after));
    EventPool::get().give(s.api, s.device, s.free_after);
    s.free_after = nullptr;
  }
  const auto* send = static_cast<const char*>(args_.send);
  for (const Piece& p : pieces(i, /*input=*/true)) {
    RETURN_IF_ERROR(api_->copy_async(s.data + p.slot, send + p.caller, p.bytes, DeviceApi::Copy::to_host, device_, lane_in_));
  }
  ASSIGN_OR_RETURN(c.in, EventPool::get().take(api_, device_));
  RETURN_IF_ERROR(api_->record(c.in, device_, lane_in_));
  c.issued = true;
  return Status::ok();
}

Result<bool> StagingPipeline::input_ready(size_t i) {
  std::lock_guard<std::mutex> lock(pool_->mu_);
  pool_->pump_locked();
  if (!error_.is_ok()) return error_;
  Chunk& c = chunk_[i];
  if (!c.issued) return false;
  bool done = true;
  if (!faults().skip_input_wait) {
    ASSIGN_OR_RETURN(done, api_->done(c.in));
  }
  if (done && faults().early_result_copy && !c.results_queued) RETURN_IF_ERROR(queue_results_locked(i));
  return done;
}

Status StagingPipeline::queue_results_locked(size_t i) {
  Chunk& c = chunk_[i];
  c.results_queued = true;  // from here the slot may be read on lane 1 (drop() orders after it)
  if (out_bytes_ == 0) return Status::ok();  // reduce, not the root
  char* dest = scratch_ != nullptr ? scratch_ : static_cast<char*>(args_.recv);
  if (device_reduce_) return queue_device_reduction_locked(i, dest);
  const char* s = slot(i).data;
  for (const Piece& p : pieces(i, /*input=*/false)) {
    RETURN_IF_ERROR(api_->copy_async(dest + p.caller, s + p.slot, p.bytes, DeviceApi::Copy::to_device, device_, lane_out_));
  }
  return Status::ok();
}

void StagingPipeline::release_slot_locked(size_t i, DeviceApi::Event free_after) {
  StagingPool::Slot& s = slot(i);
  const uint64_t number = chunk_[i].number;
  if (s.next_user != number) {  // its turn had not come: it gives it up
    s.gave_up.push_back(number);
    return;
  }
  if (free_after != nullptr) {
    s.free_after = free_after;
    s.device = device_;
  }
  s.next_user += StagingPool::kSlots;
  for (auto it = std::find(s.gave_up.begin(), s.gave_up.end(), s.next_user); it != s.gave_up.end();
       it = std::find(s.gave_up.begin(), s.gave_up.end(), s.next_user)) {
    s.gave_up.erase(it);
    s.next_user += StagingPool::kSlots;
  }
}

// An event after everything queued for chunk i on both lanes (nullptr when nothing was).
static Result<DeviceApi::Event> mark_both_lanes(DeviceApi* api, int device, void* lane_out, DeviceApi::Event in) {
  if (in != nullptr) RETURN_IF_ERROR(api->wait_event(device, lane_out, in));
  ASSIGN_OR_RETURN(DeviceApi::Event e, EventPool::get().take(api, device));
  Status recorded = api->record(e, device, lane_out);
  if (!recorded.is_ok()) {
    EventPool::get().give(api, device, e);
    return recorded;
  }
  return e;
}

Status StagingPipeline::finish(size_t i, const Deadline& deadline) {
  std::unique_lock<std::mutex> lock(pool_->mu_);
  Chunk& c = chunk_[i];
  if (failed_) {  // an earlier chunk failed: this one ran only to keep in step with the other ranks
    c.finished = true;
    auto marked = mark_both_lanes(api_, device_, lane_out_, c.in);
    release_slot_locked(i, marked.is_ok() ? marked.value() : nullptr);
    EventPool::get().give(api_, device_, c.in);
    c.in = nullptr;
    ++settled_;
    end_if_failed_locked();
    pool_->pump_locked();
    return Status::ok();
  }
  if (!c.results_queued) RETURN_IF_ERROR(queue_results_locked(i));
  ASSIGN_OR_RETURN(DeviceApi::Event freed, mark_both_lanes(api_, device_, lane_out_, c.in));
  EventPool::get().give(api_, device_, c.in);
  c.in = nullptr;
  release_slot_locked(i, freed);
  c.finished = true;
  ++finished_;
  ++settled_;
  pool_->pump_locked();
  if (finished_ < nchunks_) return Status::ok();

  // The last chunk: the caller's buffer gets the result, after every chunk's copy (lane 1 runs
  // them in order; the fault hook puts the final copy on the other lane, unordered).
  void* lane = faults().skip_result_wait ? lane_in_ : lane_out_;
  auto fail = [&](const Status& s) {  // every chunk is settled: this ends the operation
    fail_locked(s);
    return s;
  };
  if (scratch_ != nullptr) {
    Status copied = api_->copy_async(args_.recv, scratch_, out_bytes_, DeviceApi::Copy::on_device, device_, lane);
    if (!copied.is_ok()) return fail(copied);
  }
  auto done = EventPool::get().take(api_, device_);
  if (!done.is_ok()) return fail(done.status());
  Status recorded = api_->record(done.value(), device_, lane);
  if (!recorded.is_ok()) {
    EventPool::get().give(api_, device_, done.value());
    return fail(recorded);
  }
  lock.unlock();
  Status waited = wait_done(api_, done.value(), deadline, "copying the result to GPU " + std::to_string(device_));
  lock.lock();
  if (!waited.is_ok()) return fail(waited);  // the event stays out of the pool: a copy may still pass it
  EventPool::get().give(api_, device_, done.value());
  ended_ = true;
  work_->complete(Status::ok());
  return Status::ok();
}

void StagingPipeline::drop(size_t i, const Status& why) {
  std::lock_guard<std::mutex> lock(pool_->mu_);
  Chunk& c = chunk_[i];
  if (c.dropped) return;
  c.dropped = true;
  if (!c.finished) {
    DeviceApi::Event free_after = nullptr;
    if (c.issued) {  // copies into (and maybe out of) the slot may be queued still
      auto marked = mark_both_lanes(api_, device_, lane_out_, c.in);
      if (marked.is_ok()) free_after = marked.value();
      EventPool::get().give(api_, device_, c.in);
      c.in = nullptr;
    }
    release_slot_locked(i, free_after);
    ++settled_;
    fail_locked(!why.is_ok() ? why
                             : internal_error("chunk " + std::to_string(i) + " of " + std::to_string(nchunks_) +
                                              " ended without its result"));
  }
  pool_->pump_locked();
}

// The first failure is what the operation reports, once every chunk ran or was dropped: until
// then the remaining chunks read the caller's input (the other ranks need this rank's part),
// so the caller must not get the buffer back before.
void StagingPipeline::fail_locked(const Status& why) {
  if (!failed_) first_error_ = why;
  failed_ = true;
  end_if_failed_locked();
}

void StagingPipeline::end_if_failed_locked() {
  if (!failed_ || ended_ || work_ == nullptr || settled_ < nchunks_) return;
  ended_ = true;
  work_->complete(nchunks_ > 1 ? first_error_.with_context("one chunk of a staged operation of " +
                                                           std::to_string(nchunks_) +
                                                           " chunks (the device buffer is untouched): ")
                               : first_error_);
}

StagingPipeline::~StagingPipeline() {
  if (pool_ == nullptr) return;  // not pipelined after all (make() said so)
  std::lock_guard<std::mutex> lock(pool_->mu_);
  auto it = std::find(pool_->live_.begin(), pool_->live_.end(), this);
  if (it != pool_->live_.end()) pool_->live_.erase(it);
  if (!ended_ && work_ != nullptr) {
    ended_ = true;
    work_->complete(failed_ ? first_error_
                            : Status(ErrorCode::aborted, "a staged operation on GPU " + std::to_string(device_) +
                                                             " ended before all its chunks ran"));
  }
  if (scratch_ != nullptr) {
    DeviceApi::Event last = nullptr;
    auto e = EventPool::get().take(api_, device_);
    if (e.is_ok() && api_->record(e.value(), device_, lane_out_).is_ok()) last = e.value();
    if (last != nullptr && settled(api_, last)) {  // else a copy may still write it: leaked
      pool_->give_scratch_locked(scratch_);
      EventPool::get().give(api_, device_, last);
    }
  }
  EventPool::get().give(api_, device_, ready_);
}

}  // namespace braid
