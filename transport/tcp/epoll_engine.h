// transport/tcp/epoll_engine.h - the fallback engine: non-blocking sockets and epoll.
//
// Used where io_uring cannot be set up (seccomp profiles of container runtimes,
// kernel.io_uring_disabled, old kernels). Sockets with new work are tried directly until they
// would block; epoll then says when that changed. Every socket is registered once, edge-triggered
// for both directions: a level-triggered registration would have to follow what each socket waits
// for with an epoll_ctl per change (two per small message in a ping-pong), or report a socket
// with unread bytes and no receive posted on every pass. An edge comes only when bytes or buffer
// space arrive, so an idle connection costs nothing. wake() writes an eventfd that epoll watches.
// It waits in epoll_pwait2 (a timeout in nanoseconds) where the kernel has it, and in
// epoll_pwait otherwise: before Linux 5.11 and under valgrind, exactly where a fallback runs.
// An engine whose only socket leads to a peer confined to our single CPU drives it with blocking
// calls instead (shared_cpu_path.h).
#pragma once

#include <memory>
#include <vector>

#include "common/env.h"
#include "transport/tcp/engine.h"
#include "transport/tcp/shared_cpu_path.h"

namespace braid::transport::tcp {

// Whether this kernel has epoll_pwait2 (probed once per process).
bool epoll_pwait2_available();

class EpollEngine final : public Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const Env& env);
  ~EpollEngine() override;

  const char* name() const override { return "tcp (epoll)"; }
  Status check_owner() override { return Status::ok(); }
  Status add(TcpStream* stream) override;
  void remove(TcpStream* stream, Deadline deadline) override;
  void kick(TcpStream* stream) override;
  Status run(std::chrono::microseconds timeout, const std::vector<Completion>& ready) override;
  void wake() override;
  int wait_fd() const override { return epoll_fd_; }  // readable while an event waits for run()
  EngineStats stats() const override;
  void set_spin_us(int us) override { spin_us_ = us; }

 private:
  EpollEngine(int epoll_fd, int wake_fd, int spin_us);
  void drive(TcpStream* s);   // sends and receives until the socket would block
  void drive_dirty();
  Status wait(std::chrono::microseconds timeout);
  bool take_shared_cpu_path();
  Status watch(TcpStream* s);  // registers the socket with epoll

  int epoll_fd_;
  int wake_fd_;
  int spin_us_;
  bool have_pwait2_;
  bool woken_ = false;
  StreamSlots slots_;
  std::vector<uint32_t> dirty_;  // slots with new work since the last pass
  std::vector<uint32_t> batch_;  // the slots drive_dirty() works through now
  std::vector<uint32_t> retry_;  // slots whose send met ENOBUFS: tried again after kRetryAfter
  SharedCpuPath direct_;         // drives the only stream when its peer shares our CPU
};

}  // namespace braid::transport::tcp
