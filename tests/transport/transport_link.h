// tests/transport/transport_link.h - two transports of one process joined by a connection,
// both driven from the test's thread.
#pragma once

#include <gtest/gtest.h>
#include <pthread.h>
#include <sched.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "transport/registry.h"
#include "transport/transport.h"
#if BRAID_HAVE_INPROC
#include "transport/inproc/inproc_transport.h"
#endif

namespace braid::transport::testing {

inline TransportOptions loopback_options() {
  TransportOptions o;
  o.listen_host = "127.0.0.1";
  return o;
}

struct Link {
  std::unique_ptr<Transport> a, b;       // a listened and accepted; b connected
  std::unique_ptr<Connection> ca, cb;    // a's end, b's end
  std::vector<Completion> done_a, done_b;
  Status error;                          // first failure of a poll

  // Polls both transports until pred() holds; false after `limit`.
  bool drive(const std::function<bool()>& pred, std::chrono::seconds limit = std::chrono::seconds(60)) {
    auto end = std::chrono::steady_clock::now() + limit;
    while (!pred()) {
      if (std::chrono::steady_clock::now() > end) return false;
      Status s1 = a->poll(done_a, std::chrono::microseconds(0));
      Status s2 = b->poll(done_b, std::chrono::microseconds(0));
      if (!s1.is_ok() && error.is_ok()) error = s1;
      if (!s2.is_ok() && error.is_ok()) error = s2;
    }
    return true;
  }
};

// Runs `body` on a thread allowed on `cpu` only, as `taskset -c cpu` would run a process.
inline void on_cpu(int cpu, const std::function<void()>& body) {
  std::thread t([&] {
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    if (pthread_setaffinity_np(pthread_self(), sizeof set, &set) != 0) {
      ADD_FAILURE() << "cannot pin a thread to CPU " << cpu;
      return;
    }
    body();
  });
  t.join();
}

inline int usable_cpu_count() {
  cpu_set_t set;
  CPU_ZERO(&set);
  return sched_getaffinity(0, sizeof set, &set) == 0 ? CPU_COUNT(&set) : 1;
}

// Creates a and b, joins them; `fabric` only for inproc. Fails the calling test on error. With
// CPUs given, the accepting and the connecting thread are pinned as two `taskset`-started ranks
// would be: the handshake carries each end's CPUs, which decides whether the peer shares our
// only CPU (transport/common/host_identity.h).
inline Status make_link(const std::string& name, const TransportOptions& oa, const TransportOptions& ob, Link& link,
                        uint64_t comm_id = 7, int accept_cpu = -1, int connect_cpu = -1) {
  auto ta = create_transport(name, oa);
  if (!ta.is_ok()) return ta.status();
  auto tb = create_transport(name, ob);
  if (!tb.is_ok()) return tb.status();
  link.a = std::move(ta).value();
  link.b = std::move(tb).value();
  auto addr = link.a->listen();
  if (!addr.is_ok()) return addr.status();
  constexpr auto kJoinTimeout = std::chrono::seconds(20);
  auto pinned = [](int cpu, const std::function<void()>& body) { cpu >= 0 ? on_cpu(cpu, body) : body(); };
  Result<std::unique_ptr<Connection>> connected = Status(ErrorCode::internal, "connect did not run");
  std::thread connector([&] {
    pinned(connect_cpu, [&] {
      connected = link.b->connect(addr.value(), PeerIdentity{comm_id, 1, 0}, Deadline::after(kJoinTimeout));
    });
  });
  Result<std::unique_ptr<Connection>> accepted = Status(ErrorCode::internal, "accept did not run");
  pinned(accept_cpu, [&] { accepted = link.a->accept(PeerIdentity{comm_id, 0, 1}, Deadline::after(kJoinTimeout)); });
  connector.join();
  if (!accepted.is_ok()) return accepted.status();
  if (!connected.is_ok()) return connected.status();
  link.ca = std::move(accepted).value();
  link.cb = std::move(connected).value();
  return Status::ok();
}

inline Status make_pinned_link(const std::string& name, int accept_cpu, int connect_cpu, Link& link) {
  return make_link(name, loopback_options(), loopback_options(), link, 7, accept_cpu, connect_cpu);
}

// Deterministic bytes: message `seq`, byte `i`.
inline unsigned char pattern(uint64_t seq, size_t i) { return static_cast<unsigned char>((seq * 131 + i * 7 + (i >> 12)) & 0xff); }

inline void fill(std::vector<unsigned char>& v, uint64_t seq) {
  for (size_t i = 0; i < v.size(); ++i) v[i] = pattern(seq, i);
}

inline bool check(const unsigned char* p, size_t n, uint64_t seq) {
  for (size_t i = 0; i < n; ++i) {
    if (p[i] != pattern(seq, i)) return false;
  }
  return true;
}

}  // namespace braid::transport::testing
