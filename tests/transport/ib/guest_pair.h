// tests/transport/ib/guest_pair.h - two ib transports of one test process, one on each of the
// Soft-RoCE guest's devices (rxe0 on 10.99.0.1, rxe1 on 10.99.0.2), connected to each other
// through the seam as the runtime connects them.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>
#include <vector>

#include "common/deadline.h"
#include "transport/registry.h"
#include "transport/transport.h"

namespace braid::transport::ib::guest {

// Polls `t` (as the runtime does: spinning, then sleeping) until `n` operations finished, each
// without error, or `bound` passed.
inline ::testing::AssertionResult await_completions(Transport& t, int n, std::chrono::seconds bound) {
  const Deadline deadline = Deadline::after(bound);
  std::vector<Completion> got;
  while (n > 0 && !deadline.expired()) {
    got.clear();
    const Status st = t.poll(got, std::chrono::seconds(1));
    if (!st.is_ok()) return ::testing::AssertionFailure() << st.message();
    for (const Completion& c : got) {
      if (!c.status.is_ok()) return ::testing::AssertionFailure() << c.status.message();
      --n;
    }
  }
  if (n > 0) return ::testing::AssertionFailure() << n << " operations did not finish within the bound";
  return ::testing::AssertionSuccess();
}

struct Pair {
  std::unique_ptr<Transport> t0, t1;
  std::unique_ptr<Connection> c0, c1;  // rank 0's connection to rank 1, and rank 1's to rank 0
};

// Makes both transports (with BRAID_SPIN_US = spin_us when it is not negative) and connects
// rank 0 (rxe0) to rank 1 (rxe1); false, with the reason as a test failure, when that fails.
inline bool connect_pair(Pair* p, uint64_t comm, std::chrono::seconds bound, int spin_us = -1) {
  const auto make = [spin_us](const char* host) -> std::unique_ptr<Transport> {
    TransportOptions o;
    o.listen_host = host;
    if (spin_us >= 0) o.env.spin_us = spin_us;
    auto t = create_transport("ib", o);
    EXPECT_TRUE(t.is_ok()) << t.status().message();
    return t.is_ok() ? std::move(t).value() : nullptr;
  };
  p->t0 = make("10.99.0.1");
  p->t1 = make("10.99.0.2");
  if (!p->t0 || !p->t1) return false;
  auto address = p->t1->listen();
  EXPECT_TRUE(address.is_ok() && p->t0->listen().is_ok());
  if (!address.is_ok()) return false;
  Result<std::unique_ptr<Connection>> accepted = Status(ErrorCode::internal, "not run");
  std::thread acceptor([&] { accepted = p->t1->accept(PeerIdentity{comm, 1, 0}, Deadline::after(bound)); });
  auto connected = p->t0->connect(address.value(), PeerIdentity{comm, 0, 1}, Deadline::after(bound));
  acceptor.join();
  EXPECT_TRUE(connected.is_ok()) << connected.status().message();
  EXPECT_TRUE(accepted.is_ok()) << accepted.status().message();
  if (!connected.is_ok() || !accepted.is_ok()) return false;
  p->c0 = std::move(connected).value();
  p->c1 = std::move(accepted).value();
  return true;
}

}  // namespace braid::transport::ib::guest
