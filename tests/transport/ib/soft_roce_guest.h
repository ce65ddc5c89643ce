// tests/transport/ib/soft_roce_guest.h - whether a test runs inside scripts/rdma_guest.sh: both
// of its Soft-RoCE devices (rxe0, rxe1) found ACTIVE. Elsewhere the guest tests skip.
#pragma once

#include "transport/ib/ib_devices.h"

namespace braid::transport::ib {

inline bool in_soft_roce_guest() {
  auto ports = enumerate_ports();
  if (!ports.is_ok()) return false;
  int found = 0;
  for (const PortInfo& p : ports.value()) found += (p.device == "rxe0" || p.device == "rxe1") && p.active;
  return found == 2;
}

}  // namespace braid::transport::ib

#define SKIP_OUTSIDE_GUEST()                                                                                     \
  if (!::braid::transport::ib::in_soft_roce_guest())                                                             \
  GTEST_SKIP() << "no active Soft-RoCE devices rxe0 and rxe1: runs inside scripts/rdma_guest.sh"
