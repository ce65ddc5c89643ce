// tests/runtime/device/fake_device.h - a DeviceApi without a GPU, for the staging logic's tests.
//
// "Device memory" is host memory this fake handed out (alloc), tagged with a GPU number.
// A FakeStream is a worker thread running queued tasks in order, as a CUDA stream runs its
// work: copies to the host, event records, host functions and the tests' own "kernels"
// (functions that read or write device memory) all queue on it, so the ordering the runtime
// relies on (input read after earlier kernels, later kernels held until the operation is done)
// is really exercised. braid's own two streams (own_stream) are worker threads too, so copies
// on them race with the runtime exactly as far as the events braid records allow; the blocking
// copy_to_device of the whole-buffer path happens at once.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <algorithm>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "collectives/kernels/reduce.h"
#include "runtime/device/device_api.h"

namespace braid::testing {

class FakeStream {
 public:
  FakeStream() : worker_([this] { loop(); }) {}
  ~FakeStream() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void push(std::function<void()> task) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      tasks_.push_back(std::move(task));
    }
    cv_.notify_all();
  }
  // Waits until everything queued so far has run (false after `bound`).
  bool synchronize(std::chrono::milliseconds bound) {
    auto done = std::make_shared<std::promise<void>>();
    auto f = done->get_future();
    push([done] { done->set_value(); });
    return f.wait_for(bound) == std::future_status::ready;
  }

 private:
  void loop() {
    for (;;) {
      std::function<void()> task;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return stop_ || !tasks_.empty(); });
        if (tasks_.empty()) return;
        task = std::move(tasks_.front());
        tasks_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  std::thread worker_;
};

class FakeDevice final : public DeviceApi {
 public:
  ~FakeDevice() override {
    for (auto& [p, b] : blocks_) std::free(p);
  }
  const char* name() const override { return "fake"; }

  // Device memory on GPU `device`.
  void* alloc(size_t bytes, int device = 0) {
    void* p = std::calloc(bytes == 0 ? 1 : bytes, 1);
    std::lock_guard<std::mutex> lock(mu_);
    blocks_[static_cast<char*>(p)] = Block{bytes, device};
    return p;
  }

  DevicePointer classify(const void* p) override {
    std::lock_guard<std::mutex> lock(mu_);
    auto* c = static_cast<const char*>(p);
    auto it = blocks_.upper_bound(const_cast<char*>(c));
    if (it == blocks_.begin()) return {};
    --it;
    if (c >= it->first + std::max<size_t>(it->second.bytes, 1)) return {};
    return {true, it->second.device};
  }

  Result<void*> alloc_pinned(size_t bytes) override {
    pinned_allocs.fetch_add(1);
    pinned_live.fetch_add(1);
    void* p = std::malloc(bytes);
    std::lock_guard<std::mutex> lock(mu_);
    pinned_sizes_[p] = bytes;
    pinned_bytes += bytes;
    pinned_bytes_peak = std::max(pinned_bytes_peak.load(), pinned_bytes.load());
    return p;
  }
  PinnedUse pinned_use() override { return {pinned_bytes.load(), pinned_bytes_peak.load()}; }
  void free_pinned(void* p) override {
    pinned_live.fetch_sub(1);
    {
      std::lock_guard<std::mutex> lock(mu_);
      pinned_bytes -= pinned_sizes_[p];
      pinned_sizes_.erase(p);
    }
    std::free(p);
  }

  // A copy on a stream reads its source when it starts, spoils its destination, and writes it
  // only after copy_delay_us (to the host) or copy_back_delay_us (to the device): a reader that
  // does not wait for the copy's event sees the spoiled bytes, and a writer that does not wait
  // for a copy reading its buffer changes what the copy delivers only if it starts first.
  Status copy_async(void* dst, const void* src, size_t bytes, Copy kind, int, void* stream) override {
    if (kind == Copy::to_device && fail_to_device_at.load() > 0 && fail_to_device_at.fetch_sub(1) == 1) {
      return Status(ErrorCode::internal, "fake device: copy to the device refused (test)");
    }
    if (kind != Copy::to_host) copies_back.fetch_add(1);
    if (kind == Copy::on_device) {  // GPU memory to GPU memory: fast, no window worth modelling
      on(stream).push([=] { std::memmove(dst, src, bytes); });
      return Status::ok();
    }
    const int delay = kind == Copy::to_host ? copy_delay_us.load() : copy_back_delay_us.load();
    const uint64_t ticket = kind == Copy::to_device ? in_flight(dst, bytes) : 0;
    on(stream).push([=, this] {
      std::vector<char> data(static_cast<const char*>(src), static_cast<const char*>(src) + bytes);
      std::memset(dst, 0xA5, bytes);
      if (delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
      std::memcpy(dst, data.data(), bytes);
      if (ticket != 0) landed(ticket);
    });
    return Status::ok();
  }
  Status copy_to_device(void* dst, const void* src, size_t bytes, int, const Deadline&) override {
    copies_back.fetch_add(1);
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }
  // The host kernels, on the stream: the result is computed when the task starts, the
  // destination spoiled, and the result written after reduce_delay_us (so a reader that does not
  // wait for the reduction sees spoiled bytes). A reduction that starts while a copy to the device
  // queued before it still writes what it reads is counted in reduced_before_copy.
  Status reduce_async(void* dst, const void* src, size_t count, DType dtype, Op op, int device, void* stream) override {
    if (op == Op::avg) return Status(ErrorCode::internal, "fake device: avg passed to a reduction kernel");
    if (!loaded(device)) reduced_before_load.fetch_add(1);
    const size_t bytes = count * dtype_size(dtype);
    const uint64_t ticket = next_ticket_.fetch_add(1) + 1;
    on(stream).push([=, this] {
      device_reductions.fetch_add(1);
      if (overlaps_unlanded(ticket, dst, bytes) || overlaps_unlanded(ticket, src, bytes)) reduced_before_copy.fetch_add(1);
      std::vector<char> result(static_cast<const char*>(dst), static_cast<const char*>(dst) + bytes);
      collectives::reduce_into(result.data(), src, count, dtype, op);
      std::memset(dst, 0xA5, bytes);
      if (const int delay = reduce_delay_us.load(); delay > 0) std::this_thread::sleep_for(std::chrono::microseconds(delay));
      std::memcpy(dst, result.data(), bytes);
    });
    return Status::ok();
  }

  Result<void*> own_stream(int, int lane) override { return static_cast<void*>(&own_[lane == 0 ? 0 : 1]); }

  Result<void*> alloc_device(size_t bytes, int device) override {
    device_allocs.fetch_add(1);
    return alloc(bytes, device);
  }
  void free_device(void* p, int) override {
    std::lock_guard<std::mutex> lock(mu_);
    blocks_.erase(static_cast<char*>(p));
    std::free(p);
  }

  // An event numbers its records; done() once the stream ran the latest, and a wait queued on
  // a stream holds it until the record current at the time of the wait ran (CUDA's rule), even
  // when the event was recorded again on another stream since.
  struct FakeEvent {
    std::mutex mu;
    uint64_t recorded = 0;
    std::set<uint64_t> pending;
    bool reached(uint64_t ticket) {
      std::lock_guard<std::mutex> lock(mu);
      return pending.count(ticket) == 0;
    }
  };
  Result<Event> create_event(int) override {
    events_created.fetch_add(1);
    events_live.fetch_add(1);
    return static_cast<Event>(new FakeEvent);
  }
  void destroy_event(Event e) override {
    events_live.fetch_sub(1);
    delete static_cast<FakeEvent*>(e);
  }
  Status record(Event e, int, void* stream) override {
    auto* ev = static_cast<FakeEvent*>(e);
    uint64_t ticket = 0;
    {
      std::lock_guard<std::mutex> lock(ev->mu);
      ticket = ++ev->recorded;
      ev->pending.insert(ticket);
    }
    on(stream).push([ev, ticket] {
      std::lock_guard<std::mutex> lock(ev->mu);
      ev->pending.erase(ticket);
    });
    return Status::ok();
  }
  Result<bool> done(Event e) override {
    auto* ev = static_cast<FakeEvent*>(e);
    std::lock_guard<std::mutex> lock(ev->mu);
    return ev->pending.count(ev->recorded) == 0;
  }
  Status wait_event(int, void* stream, Event e) override {
    auto* ev = static_cast<FakeEvent*>(e);
    uint64_t ticket = 0;
    {
      std::lock_guard<std::mutex> lock(ev->mu);
      ticket = ev->recorded;
    }
    on(stream).push([ev, ticket] {
      // Bounded: a test that breaks the ordering must fail, not hang.
      for (int i = 0; i < 300000 && !ev->reached(ticket); ++i) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
    return Status::ok();
  }

  // The held stream waits on the gate's word, as a CUDA stream does on a stream memory operation:
  // only that stream stops.
  Result<Gate> hold(int device, void* stream, double bound_s) override {
    if (!loaded(device)) held_before_load.fetch_add(1);
    auto word = std::make_shared<uint32_t>(0);
    {
      std::lock_guard<std::mutex> lock(mu_);
      words_.push_back(word);
    }
    holds.fetch_add(1);
    const Gate gate{word.get(), 1};
    on(stream).push([gate, word, bound_s] {
      const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(bound_s);
      while (__atomic_load_n(gate.word, __ATOMIC_ACQUIRE) < gate.value && std::chrono::steady_clock::now() < until) {
        std::this_thread::sleep_for(std::chrono::microseconds(100));
      }
    });
    return gate;
  }
  void release(const Gate& gate) override {
    releases.fetch_add(1);
    __atomic_store_n(gate.word, gate.value, __ATOMIC_RELEASE);
  }

  // CUDA's lazy loading, as a rule: the kernels of a GPU must be loaded before any stream is held
  // and before any reduction is queued there (device_api.h says why).
  Status load_kernels(int device) override {
    if (fail_load.load()) return Status(ErrorCode::internal, "fake device: loading the kernels failed (test)");
    std::lock_guard<std::mutex> lock(mu_);
    loaded_.insert(device);
    return Status::ok();
  }
  bool loaded(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    return loaded_.count(device) != 0;
  }

  // Waits until braid's own streams ran what was queued so far.
  bool sync_own(std::chrono::milliseconds bound) { return own_[0].synchronize(bound) && own_[1].synchronize(bound); }

  std::atomic<int> holds{0};     // streams held (hold())
  std::atomic<int> releases{0};  // and released
  std::atomic<int> pinned_allocs{0};
  std::atomic<int> pinned_live{0};
  std::atomic<int> copies_back{0};
  std::atomic<int> events_created{0};
  std::atomic<int> events_live{0};
  std::atomic<int> device_allocs{0};
  std::atomic<size_t> pinned_bytes{0};
  std::atomic<size_t> pinned_bytes_peak{0};
  std::atomic<int> copy_delay_us{0};
  std::atomic<int> copy_back_delay_us{0};
  std::atomic<int> fail_to_device_at{0};  // > 0: the n-th asynchronous copy to the device from now fails
  std::atomic<int> reduce_delay_us{0};
  std::atomic<int> device_reductions{0};     // reductions run on a stream
  std::atomic<int> reduced_before_copy{0};   // of those, started before a copy they read or write landed
  std::atomic<int> held_before_load{0};      // streams held before load_kernels on their GPU
  std::atomic<int> reduced_before_load{0};   // reductions queued before load_kernels on their GPU
  std::atomic<bool> fail_load{false};        // load_kernels fails

 private:
  struct Block {
    size_t bytes;
    int device;
  };
  // Copies to the device not yet landed, by ticket (tickets number copies and reductions in the
  // order they were queued).
  uint64_t in_flight(const void* dst, size_t bytes) {
    const uint64_t ticket = next_ticket_.fetch_add(1) + 1;
    std::lock_guard<std::mutex> lock(flight_mu_);
    flight_[ticket] = {static_cast<const char*>(dst), bytes};
    return ticket;
  }
  void landed(uint64_t ticket) {
    std::lock_guard<std::mutex> lock(flight_mu_);
    flight_.erase(ticket);
  }
  bool overlaps_unlanded(uint64_t before, const void* p, size_t bytes) {
    const auto* c = static_cast<const char*>(p);
    std::lock_guard<std::mutex> lock(flight_mu_);
    for (const auto& [ticket, range] : flight_) {
      if (ticket < before && c < range.first + range.second && range.first < c + bytes) return true;
    }
    return false;
  }
  std::atomic<uint64_t> next_ticket_{0};
  std::mutex flight_mu_;
  std::map<uint64_t, std::pair<const char*, size_t>> flight_;

  FakeStream& on(void* stream) { return stream == nullptr ? default_stream_ : *static_cast<FakeStream*>(stream); }

  std::mutex mu_;
  std::map<char*, Block> blocks_;
  std::map<void*, size_t> pinned_sizes_;
  std::vector<std::shared_ptr<uint32_t>> words_;  // every gate's word, alive as long as the device
  std::set<int> loaded_;
  FakeStream default_stream_;
  FakeStream own_[2];
};

}  // namespace braid::testing
