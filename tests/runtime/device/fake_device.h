// tests/runtime/device/fake_device.h - a DeviceApi without a GPU, for the staging logic's tests.
//
// "Device memory" is host memory this fake handed out (alloc), tagged with a GPU number.
// A FakeStream is a worker thread running queued tasks in order, as a CUDA stream runs its
// work: copies to the host, event records, host functions and the tests' own "kernels"
// (functions that read or write device memory) all queue on it, so the ordering the runtime
// relies on (input read after earlier kernels, later kernels held until the operation is done)
// is really exercised. Copies back to the device happen at once, as on braid's own stream.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "runtime/device_api.h"

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
    return std::malloc(bytes);
  }
  void free_pinned(void* p) override {
    pinned_live.fetch_sub(1);
    std::free(p);
  }

  Status copy_to_host_async(void* dst, const void* src, size_t bytes, int, void* stream) override {
    on(stream).push([=] { std::memcpy(dst, src, bytes); });
    return Status::ok();
  }
  Status copy_to_device(void* dst, const void* src, size_t bytes, int, const Deadline&) override {
    copies_back.fetch_add(1);
    std::memcpy(dst, src, bytes);
    return Status::ok();
  }

  Result<Event> record(int, void* stream) override {
    auto* flag = new std::atomic<bool>(false);
    on(stream).push([flag] { flag->store(true); });
    return static_cast<Event>(flag);
  }
  Result<bool> done(Event e) override { return static_cast<std::atomic<bool>*>(e)->load(); }
  void destroy(Event e) override { delete static_cast<std::atomic<bool>*>(e); }

  Status enqueue_host_function(int, void* stream, std::function<void()> fn) override {
    on(stream).push(std::move(fn));
    return Status::ok();
  }

  std::atomic<int> pinned_allocs{0};
  std::atomic<int> pinned_live{0};
  std::atomic<int> copies_back{0};

 private:
  struct Block {
    size_t bytes;
    int device;
  };
  FakeStream& on(void* stream) { return stream == nullptr ? default_stream_ : *static_cast<FakeStream*>(stream); }

  std::mutex mu_;
  std::map<char*, Block> blocks_;
  FakeStream default_stream_;
};

}  // namespace braid::testing
