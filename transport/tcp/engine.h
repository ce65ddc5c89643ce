// transport/tcp/engine.h - what drives the sockets of a tcp transport: io_uring or epoll.
//
// The framing and matching logic lives in TcpStream/TcpConnection and is the same for both
// engines; an engine only moves bytes between sockets and the buffers a stream names, and
// reports how many moved. Everything here runs on the transport's owner thread except wake().
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/transport.h"

namespace braid::transport::tcp {

class TcpStream;

struct EngineStats {
  uint64_t zero_copy_sends = 0;   // SEND_ZC notifications received
  uint64_t zero_copy_copied = 0;  // ...of which the kernel reported it copied anyway (loopback)
  uint64_t shared_cpu_receives = 0;  // blocking receives on the shared-CPU path (shared_cpu_path.h)
};

// The streams an engine drives, by slot: the number a stream keeps (TcpStream::slot) and its
// kernel operations carry back (epoll's event data, io_uring's user data). Freed slots are
// reused, so the table stays as large as the most streams the engine ever held at once.
class StreamSlots {
 public:
  uint32_t add(TcpStream* s) {
    if (free_.empty()) {
      free_.push_back(static_cast<uint32_t>(slots_.size()));
      slots_.push_back(nullptr);
    }
    const uint32_t slot = free_.back();
    free_.pop_back();
    slots_[slot] = s;
    return slot;
  }
  void remove(uint32_t slot) {
    slots_[slot] = nullptr;
    free_.push_back(slot);
  }
  // The stream in `slot`; nullptr for a free slot or one out of range (a stale completion).
  TcpStream* at(uint32_t slot) const { return slot < slots_.size() ? slots_[slot] : nullptr; }
  size_t count() const { return slots_.size() - free_.size(); }
  const std::vector<TcpStream*>& all() const { return slots_; }  // nullptr: free

 private:
  std::vector<TcpStream*> slots_;
  std::vector<uint32_t> free_;
};

class Engine {
 public:
  virtual ~Engine() = default;
  Engine() = default;
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  virtual const char* name() const = 0;  // "tcp (io_uring)", "tcp (epoll)"
  virtual bool zero_copy() const { return false; }

  // Fails when called from a thread other than the one that owns the engine (io_uring with
  // SINGLE_ISSUER accepts submissions from one thread only).
  virtual Status check_owner() = 0;
  virtual Status add(TcpStream* stream) = 0;
  // Blocks (bounded by `deadline`) until the kernel holds no reference to the stream's buffers,
  // then forgets it. The stream's socket must have been shut down first.
  virtual void remove(TcpStream* stream, Deadline deadline) = 0;
  // The stream has new work (a frame queued, a receive posted, its connection failed).
  virtual void kick(TcpStream* stream) = 0;
  // Moves bytes until `ready` (the transport's list of finished operations, which the streams'
  // connections append to) holds one, `timeout` passed, or wake() was called; spins for spin_us
  // before sleeping. timeout 0 makes one non-blocking pass.
  virtual Status run(std::chrono::microseconds timeout, const std::vector<Completion>& ready) = 0;
  virtual void wake() = 0;
  // Transport::wait_fd(): readable when run() has new work (an event or a wake()).
  virtual int wait_fd() const { return -1; }
  virtual EngineStats stats() const { return {}; }
  // Transport::set_spin_us().
  virtual void set_spin_us(int us) = 0;
};

}  // namespace braid::transport::tcp
