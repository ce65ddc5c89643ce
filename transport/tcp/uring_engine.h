// transport/tcp/uring_engine.h - the io_uring engine: one ring per transport.
//
// Each socket has at most one send and one receive in flight (two sends in flight on one TCP
// socket could reach the wire out of order when the first one has to wait for buffer space).
// Submissions are prepared as work appears and handed to the kernel in one io_uring_enter per
// poll pass; completions are reaped in batches. The owner thread sleeps inside the ring, and
// wake() writes an eventfd that has a read pending on the ring, so the sleep ends. Exception: a
// ring whose only socket leads to a peer confined to our single CPU leaves that socket to plain
// blocking calls (shared_cpu_path.h), which cost fewer system calls per message there.
#pragma once

#include <sys/types.h>

#include <memory>
#include <vector>

#include "common/env.h"
#include "transport/tcp/engine.h"
#include "transport/tcp/shared_cpu_path.h"

struct io_uring;
struct io_uring_cqe;
struct io_uring_sqe;

namespace braid::transport::tcp {

class UringEngine final : public Engine {
 public:
  // Fails (ErrorCode::system, with the kernel's reason) when io_uring cannot be set up here.
  // The ring belongs to the first thread that posts or polls; another thread may take over
  // while no I/O is in flight (the ring is then replaced: SINGLE_ISSUER rings cannot move).
  static Result<std::unique_ptr<Engine>> create(const Env& env);
  ~UringEngine() override;

  const char* name() const override { return "tcp (io_uring)"; }
  bool zero_copy() const override { return zero_copy_bytes_ != 0 && zero_copy_ok_; }
  Status check_owner() override;
  Status add(TcpStream* stream) override;
  void remove(TcpStream* stream, Deadline deadline) override;
  void kick(TcpStream* stream) override;
  Status run(std::chrono::microseconds timeout, const std::vector<Completion>& ready) override;
  void wake() override;
  // An eventfd registered with the ring (made on first call): the kernel counts into it when
  // a completion or, with DEFER_TASKRUN, task work arrives, and run() empties it. The ring's
  // own descriptor would not do: with DEFER_TASKRUN new task work wakes only a thread waiting
  // in io_uring_enter, never a poll on the ring.
  int wait_fd() const override;
  EngineStats stats() const override;
  void set_spin_us(int us) override { spin_us_ = us; }

 private:
  UringEngine(const Env& env, std::unique_ptr<io_uring> ring, bool single_issuer, int wake_fd);
  io_uring_sqe* get_sqe();
  void arm_wake();
  Status leave_single_issuer();  // see add()
  void handle(const io_uring_cqe* cqe);
  void reap();
  Status submit_and_wait(std::chrono::nanoseconds timeout);
  bool take_shared_cpu_path();

  std::unique_ptr<io_uring> ring_;
  bool single_issuer_;
  bool enabled_ = false;
  pid_t owner_ = 0;  // the thread (gettid) the ring is enabled for
  int wake_fd_;
  uint64_t wake_buf_ = 0;
  bool woken_ = false;
  size_t zero_copy_bytes_;
  bool zero_copy_ok_ = true;
  int spin_us_;
  StreamSlots slots_;
  // Drives the only stream when its peer shares our CPU. Its look at our wake signal besides the
  // eventfd: the eventfd read stays armed on the ring; without DEFER_TASKRUN it may complete on
  // its own and take the eventfd's count, so a completion waiting in the ring counts too.
  SharedCpuPath direct_;
  bool ring_woke();
  void register_notify() const;
  mutable int notify_fd_ = -1;  // wait_fd(): -1 until asked for
  EngineStats stats_;
};

}  // namespace braid::transport::tcp
