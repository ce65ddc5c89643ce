// transport/tcp/epoll_engine.h - the fallback engine: non-blocking sockets and epoll.
//
// Used where io_uring cannot be set up (seccomp profiles of container runtimes,
// kernel.io_uring_disabled, old kernels). Sockets with new work are tried directly; only a socket
// that answered EAGAIN is watched by epoll, for exactly the direction it is blocked in, so idle
// connections cost nothing. wake() writes an eventfd that epoll watches.
#pragma once

#include <memory>
#include <vector>

#include "common/env.h"
#include "transport/tcp/engine.h"

namespace braid::transport::tcp {

class EpollEngine final : public Engine {
 public:
  static Result<std::unique_ptr<Engine>> create(const Env& env);
  ~EpollEngine() override;

  const char* name() const override { return "tcp (epoll)"; }
  Status check_owner() override { return Status::ok(); }
  Status add(TcpStream* stream) override;
  void remove(TcpStream* stream, Deadline deadline) override;
  void kick(TcpStream* stream) override;
  Status run(std::chrono::microseconds timeout, const std::function<bool()>& ready) override;
  void wake() override;

 private:
  EpollEngine(int epoll_fd, int wake_fd, int spin_us);
  void drive(TcpStream* s);   // sends and receives until the socket would block
  void watch(TcpStream* s, uint32_t events);
  void drive_dirty();
  Status wait(std::chrono::microseconds timeout);

  int epoll_fd_;
  int wake_fd_;
  int spin_us_;
  bool woken_ = false;
  std::vector<TcpStream*> slots_;
  std::vector<uint32_t> free_slots_;
  std::vector<uint32_t> dirty_;  // slots with new work since the last pass
};

}  // namespace braid::transport::tcp
