// python/braid/src/comm_holder.h - the braid::Communicator behind a braid.Communicator, shared
// with its Works, so that close() on one thread cannot destroy it under another thread that is
// waiting (without the GIL) on one of its operations or aborting it.
#pragma once

#include <condition_variable>
#include <memory>
#include <mutex>

#include "braid/communicator.h"

namespace braid::python {

class CommHolder {
 public:
  explicit CommHolder(Communicator comm) : comm_(std::make_unique<Communicator>(std::move(comm))) {}

  // The communicator while open, else nullptr. Callers hold the GIL, which close() holds when
  // it marks the holder closed, so the pointer stays valid until they release the GIL.
  Communicator* get() {
    std::lock_guard<std::mutex> lock(mu_);
    return closing_ ? nullptr : comm_.get();
  }

  // Keeps the communicator alive across a wait without the GIL; comm() is nullptr once closed.
  class Use {
   public:
    explicit Use(CommHolder& h) : h_(h) {
      std::lock_guard<std::mutex> lock(h_.mu_);
      comm_ = h_.comm_.get();
      ++h_.users_;
    }
    ~Use() {
      std::lock_guard<std::mutex> lock(h_.mu_);
      if (--h_.users_ == 0) h_.idle_.notify_all();
    }
    Use(const Use&) = delete;
    Use& operator=(const Use&) = delete;
    Communicator* comm() const { return comm_; }

   private:
    CommHolder& h_;
    Communicator* comm_;
  };

  // Marks it closed: later get() calls return nullptr. With the GIL held; false if it was.
  bool begin_close() {
    std::lock_guard<std::mutex> lock(mu_);
    bool was_open = !closing_;
    closing_ = true;
    return was_open;
  }
  // Waits until no other thread uses it, then destroys it (which waits, bounded, for pending
  // operations). Without the GIL: the users may need it to finish.
  void finish_close() {
    std::unique_ptr<Communicator> comm;
    {
      std::unique_lock<std::mutex> lock(mu_);
      idle_.wait(lock, [this] { return users_ == 0; });
      comm = std::move(comm_);
    }
  }

 private:
  std::mutex mu_;
  std::condition_variable idle_;
  int users_ = 0;
  bool closing_ = false;
  std::unique_ptr<Communicator> comm_;
};

}  // namespace braid::python
