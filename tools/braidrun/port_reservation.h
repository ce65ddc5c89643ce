// tools/braidrun/port_reservation.h - a port kept free for rank 0's torch store.
//
// torch.distributed's env:// makes rank 0 serve a TCPStore on MASTER_PORT, so braidrun must
// hand the ranks a port nobody else holds: not the job's store (braid's own protocol, on its own
// port), and not one the kernel gives away meanwhile. torchrun picks a free port and closes it
// again, hoping nobody takes it before rank 0 binds it. braidrun keeps holding it instead: a
// socket bound with SO_REUSEADDR but never listening keeps the kernel from handing the port to
// anyone binding port 0 (or a plain bind), while another socket with SO_REUSEADDR, as torch's
// TCPStore server sets, may still bind it and listen (Linux refuses such a bind only next to a
// listening socket). Connecting before rank 0 listens is refused, which torch's clients retry.
#pragma once

#include <cstdint>
#include <memory>

#include "common/status.h"

namespace braid::braidrun {

class PortReservation {
 public:
  // A port of every local address (IPv6 and IPv4 where the host has IPv6, else IPv4).
  static Result<std::unique_ptr<PortReservation>> any_free();
  ~PortReservation();
  PortReservation(const PortReservation&) = delete;
  PortReservation& operator=(const PortReservation&) = delete;
  uint16_t port() const { return port_; }

 private:
  PortReservation(int fd, uint16_t port) : fd_(fd), port_(port) {}
  int fd_;
  uint16_t port_;
};

}  // namespace braid::braidrun
