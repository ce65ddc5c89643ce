// transport/ib/wc_failure_context.h - what else is true when a work request fails, so that the
// error names the real cause rather than the NIC's symptom.
//
// A killed peer's kernel tears down its verbs objects in no particular order: Soft-RoCE drops
// the memory registration before the QP, so the survivor's next write fails with "remote access
// error", which on its own reads as a stale registration; a real NIC's peer stops answering and
// the write fails with "retry exceeded" after the retries. Both mean the rank is gone when the
// peer's bootstrap socket (the connection's liveness channel) ends at about the same time. A
// port that went down fails every posted request with a local error that does not say so.
//
// explain_wc_failure looks at both, bounded: it waits up to `grace` for the liveness socket to
// end (the failure path only), reading nothing from it, and queries the port's state.
#pragma once

#include <chrono>
#include <string>

#include "common/status.h"
#include "transport/ib/verbs.h"

namespace braid::transport::ib {

// Whether the peer's end of `fd` was closed without a goodbye (EOF or reset) within `grace`;
// data waiting on the socket (a goodbye) counts as not ended. Nothing is consumed.
bool peer_socket_ended(int fd, std::chrono::milliseconds grace);

// "" while `dev`'s port is ACTIVE; else "rxe1 port 1 is DOWN now: ..." (what to check included).
std::string port_not_active_note(const Device& dev);

// Refines a work completion's failure: with the peer's socket ended, `code` becomes peer_lost
// and `cause` says that rank `peer_rank` exited or was killed, keeping the NIC's words after it;
// with the port not ACTIVE, `cause` says so.
void explain_wc_failure(int socket_fd, const Device& dev, int peer_rank, ErrorCode& code, std::string& cause);

}  // namespace braid::transport::ib
