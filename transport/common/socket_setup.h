// transport/common/socket_setup.h - connection setup: listening, connecting with retries, the
// handshake, and the options every data socket gets.
//
// Setup uses blocking-with-poll I/O on non-blocking sockets so every step has a deadline;
// data transfer afterwards is driven by an engine (io_uring or epoll), never blocking.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "common/deadline.h"
#include "common/env.h"
#include "common/status.h"
#include "common/unique_fd.h"
#include "transport/common/handshake_format.h"
#include "transport/common/socket_address.h"

namespace braid::transport {

// A listening socket on `bind_to` with a port from [port_lo, port_hi] (0/0: any port).
Result<UniqueFd> listen_on(const SocketAddress& bind_to, uint16_t port_lo, uint16_t port_hi);

// Connects to `to`, retrying with backoff while nobody listens there yet, until `deadline`.
Result<UniqueFd> connect_with_retry(const SocketAddress& to, Deadline deadline);

// Waits up to `timeout_ms` for a connection on `listen_fd`; an empty UniqueFd on timeout.
Result<UniqueFd> accept_one(int listen_fd, int timeout_ms);

Status write_exact(int fd, const void* data, size_t bytes, Deadline deadline);
// Fails with ErrorCode::timeout when the deadline passes, peer_lost on EOF.
Status read_exact(int fd, void* data, size_t bytes, Deadline deadline);

// Reads a handshake from `fd`: magic and version first (kHandshakePrefixBytes), so a stranger or
// another protocol version is refused with the reason before waiting for a body whose size it
// does not know; then the rest. Fails with ErrorCode::protocol, timeout or peer_lost.
Result<Handshake> read_handshake(int fd, Deadline deadline);

// Whether the first kHandshakePrefixBytes are a braid handshake of this build's version.
Status check_magic_and_version(const Handshake& h);
// Checks a received handshake (or the acceptor's answer to ours) against what this end expects:
// the communicator, this rank, a sender that is another rank; the message says why not.
Status check_handshake(const Handshake& h, uint64_t comm_id, int self_rank);

// Options of a data socket: non-blocking, TCP_NODELAY, the congestion control (env.loopback_cc
// for a loopback socket, env.network_cc for any other), socket buffers, and keepalive + TCP_USER_TIMEOUT so a silent peer
// is declared lost after env.peer_timeout_s.
Status tune_data_socket(int fd, const Env& env);
// Sets the congestion control of a connected socket: env.loopback_cc when its peer is at a
// loopback address (told by our own end's address), else env.network_cc; "system" sets none. A
// name the kernel refuses is an invalid_argument error naming the variable and what the kernel
// allows.
Status set_congestion_control(int fd, const Env& env);

}  // namespace braid::transport
