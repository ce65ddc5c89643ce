// transport/transport.h - the seam every transport implements (tcp, ib, shm, inproc).
//
// A transport moves framed messages between two endpoints and says when they arrived. It knows
// nothing of collectives or communicators: ranks appear only as the numbers in the handshake and
// in error messages. Addresses are opaque strings the runtime exchanges through the Store.
//
// Threading: a Transport and its Connections are driven by one thread at a time (the owner:
// the communicator's progress thread, or a caller running its own blocking operation between
// two of the progress thread's). post_*, poll and close are called only by the owner;
// wake() may be called from any thread. An io_uring engine may therefore use SINGLE_ISSUER: its
// ring belongs to the first thread that posts or polls, and another thread may take over only
// while nothing is in flight (otherwise post/poll fail with ErrorCode::internal saying so).
//
// Messages: each post_send is one message. Messages on a connection arrive in the order they
// were posted; each post_recv takes the next message. A message larger than the receive
// buffer completes that receive with ErrorCode::protocol (never overruns it). Many sends and
// receives may be outstanding (up to Capabilities::max_in_flight per direction); buffers must
// stay valid and unmodified until their completion is reported.
//
// Several transports at once: a communicator may hold connections of several transports (shm
// to peers on its host, ib or tcp to the others; runtime/links/peer_links.h), all driven by its one
// owner thread. It polls each with timeout 0 and then sleeps on all of them together through
// their wait_fd()s, so no transport needs to know of another.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"

namespace braid::transport {

enum class MemoryKind : uint8_t { host, cuda };

// What a transport can do, so callers never switch on its type.
struct Capabilities {
  bool host_memory = true;
  bool cuda_memory = false;     // can post CUDA device pointers directly
  bool dmabuf = false;          // registers CUDA memory through dmabuf (GPUDirect RDMA)
  bool zero_copy_send = false;  // large sends avoid a copy into the kernel
  bool needs_registration = false;  // post_* require memory from register_memory
  size_t max_in_flight = 256;   // outstanding operations per connection and direction
  // Its waits see where each peer last ran and stop spinning while a peer is queued on the
  // waiter's own CPU (shm), so ranks free to share CPUs may spin over it (spin_policy.h).
  bool watches_peer_cpu = false;
  // Connection::post_send_parts takes messages of up to this many bytes (both parts); 0: none.
  size_t max_parts_bytes = 0;
};

// A registered byte range; handle is transport-specific (an ib MR key; 0 for tcp).
struct MemoryRegion {
  void* base = nullptr;
  size_t bytes = 0;
  MemoryKind kind = MemoryKind::host;
  uint64_t handle = 0;
};

// Who is connecting to whom; carried in the connection handshake and checked by the acceptor.
struct PeerIdentity {
  uint64_t comm_id = 0;  // a communicator's id: connections of other jobs/communicators are refused
  int self_rank = 0;
  int peer_rank = 0;
};

class Connection;

// One finished send or receive.
struct Completion {
  Connection* connection = nullptr;
  uint64_t cookie = 0;  // what the caller passed to post_*
  bool is_send = false;
  size_t bytes = 0;     // bytes received (the message's length) or sent
  Status status;        // non-OK: the operation failed; the message names the peer and address
};

class Connection {
 public:
  virtual ~Connection() = default;
  Connection() = default;
  Connection(const Connection&) = delete;
  Connection& operator=(const Connection&) = delete;

  [[nodiscard]] virtual Status post_send(const void* data, size_t bytes, uint64_t cookie) = 0;
  [[nodiscard]] virtual Status post_recv(void* data, size_t capacity, uint64_t cookie) = 0;
  // One message of two parts, received as if `head` and `data` were one buffer: a header in
  // front of data without a copy to join them. Only for messages of at most
  // capabilities().max_parts_bytes; both buffers stay valid until the completion (bytes: both
  // parts), as post_send's.
  [[nodiscard]] virtual Status post_send_parts(const void* head, size_t head_bytes, const void* data, size_t bytes,
                                               uint64_t cookie) {
    (void)head, (void)head_bytes, (void)data, (void)bytes, (void)cookie;
    return internal_error("this connection sends no two-part messages (capabilities().max_parts_bytes is 0)");
  }
  // Fails every outstanding operation (their completions report ErrorCode::aborted) and closes.
  virtual void close() = 0;

  virtual int peer_rank() const = 0;
  virtual const std::string& peer_address() const = 0;  // "10.0.0.2:41234", for messages
  // Why an operation waiting on this connection may be stuck, when the transport knows a reason
  // beyond "the peer has not sent"; empty otherwise. For timeout reports.
  virtual std::string stall_hint() const { return {}; }
  // Packets this connection had to send again (TCP's retransmissions; 0 where there is no
  // such count). Lets a timeout report tell a lossy link from a slow rank.
  virtual uint64_t retransmissions() const { return 0; }
  // Whether the peer's end is gone, as far as this end can tell at once, without waiting: its
  // process exited, or its side of the connection ended (EOF, reset, a goodbye, a peer_lost
  // failure). False while the peer may still be there, only slow or stopped. It cannot tell a
  // peer that died from one that closed on purpose and lives on; and after this end's close(),
  // an end may be the peer's answer to that close (tcp, ib), so the caller weighs it less. For
  // failure reports and shrink. tcp, shm and ib answer after close() as well (tcp and ib keep
  // one socket, shut down, until the connection is destroyed); a transport that cannot tell
  // says false. After close(), any thread may ask (the owner no longer drives
  // the connection).
  virtual bool peer_ended() const { return false; }
  // What this connection can do. A communicator's connections may come from different
  // transports (runtime/links/peer_links.h), so the caller asks the connection, not a transport.
  // The default says nothing beyond host memory; every transport overrides it.
  virtual Capabilities capabilities() const { return {}; }
};

class Transport {
 public:
  virtual ~Transport() = default;
  Transport() = default;
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  virtual const char* name() const = 0;  // "tcp (io_uring)", "tcp (epoll)", "inproc"
  // One line for BRAID_DEBUG=INFO once connections are up: the engine, where it listens, how
  // many sockets each peer gets.
  virtual std::string describe() const { return name(); }
  virtual Capabilities capabilities() const = 0;
  // Whether `address` (as some rank's listen() returned it) is reachable only inside its own
  // host, where bytes move by a CPU copy (TCP loopback, inproc) rather than over a link. Decided
  // from the text alone, so every rank gives the same answer for the same address. Narrower
  // than "same host": two ranks of one machine talking over its eth0 address are not
  // host-local here (the runtime then picks the ring depth for a link), though tcp gives them
  // one socket each as it does any peer on a local interface.
  virtual bool is_host_local(const std::string& address) const {
    (void)address;
    return false;
  }

  // Starts listening; returns the opaque address to publish through the Store.
  [[nodiscard]] virtual Result<std::string> listen() = 0;
  // Connects to the endpoint that published `address`; bounded by `deadline`, retrying with
  // backoff while the peer is not listening yet. The error names the address it could not reach.
  [[nodiscard]] virtual Result<std::unique_ptr<Connection>> connect(const std::string& address,
                                                                    const PeerIdentity& who,
                                                                    Deadline deadline) = 0;
  // Waits for the connection from `who.peer_rank` (connections from other peers that arrive
  // meanwhile are kept for their own accept call; strangers are refused and logged).
  [[nodiscard]] virtual Result<std::unique_ptr<Connection>> accept(const PeerIdentity& who, Deadline deadline) = 0;

  [[nodiscard]] virtual Result<MemoryRegion> register_memory(void* base, size_t bytes, MemoryKind kind) {
    return MemoryRegion{base, bytes, kind, 0};
  }
  virtual void deregister_memory(const MemoryRegion&) {}

  // Drives I/O of every connection and appends finished operations to `out`. Returns as soon
  // as at least one completion is ready, or after `timeout` (0: never blocks), or when wake()
  // is called. Spinning before sleeping is the transport's business (BRAID_SPIN_US).
  [[nodiscard]] virtual Status poll(std::vector<Completion>& out, std::chrono::microseconds timeout) = 0;
  // Makes a poll() blocked on another thread return. Any thread.
  virtual void wake() = 0;
  // A descriptor that polls readable (POLLIN) whenever poll() may have something new to hand
  // back, a completion or a wake(), that it did not have at the end of the last poll(): the
  // owner, driving several transports, sleeps on all their descriptors at once after polling
  // each with timeout 0. Owned by the transport; valid while it lives. -1: the transport has
  // none, and the owner polls it in short slices instead (a longer wake-up for the others).
  virtual int wait_fd() const { return -1; }
  // Called by the owner right before it sleeps on wait_fd(), after a poll() found nothing:
  // until the next poll(), news must make the descriptor readable (shm asks its peers to signal
  // it, which it otherwise saves them). false: news came in meanwhile; poll() instead of
  // sleeping. Default: the descriptor is always armed.
  virtual bool arm_wait() { return true; }
  // How long poll() spins from now on before it sleeps, replacing TransportOptions' env.spin_us:
  // the runtime decides it only after the addresses are exchanged (runtime/links/spin_policy.h).
  // Called by the owner thread. Default: the transport does not spin.
  virtual void set_spin_us(int us) { (void)us; }
};

}  // namespace braid::transport
