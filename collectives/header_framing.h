// collectives/header_framing.h - a small header in front of the first message to each peer, and
// the check of the one in front of each peer's first message (the runtime's mismatch detection,
// runtime/engine/op_header.h).
//
// A first message of at most kInlineHeaderMax bytes carries the header inline: still one
// message, so a small operation pays no extra send or receive. It goes as a two-part send
// (header, then the data where it is) where the connection takes one of its size
// (Capabilities::max_parts_bytes), else staged through a copy. A larger one gets the header as a
// message of its own just before it. Both sides decide alike from the message's size.
// The data of an inline first message is copied to where the receive asked once the header
// passed, or, for a receive whose data is only read (reduced from), left where it arrived
// (kept_data) so that a small reduction reads it without a copy first.
// Where a schedule only receives from a peer (it only sends to us), a header-only message goes
// back to it, so a rank that only sends (a broadcast root) still learns of a mismatch.
//
// The framing never sees the schedule or the executor: it is told, per peer, which step sends
// and which receives the first message, and it is given the connection and the cookies to post
// under. Every post it makes returns how many transport operations it added, so its owner's
// count of outstanding operations stays true.
// Threading: one thread at a time (its executor's).
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "collectives/buffer_pool.h"
#include "common/function_ref.h"
#include "common/status.h"
#include "transport/transport.h"

namespace braid::collectives {

// Where the headers come from and who checks them: the framing's owner (the runtime's OpRun),
// which outlives it. Plain virtual calls, one per first message.
class HeaderSource {
 public:
  // The header for `peer`; it stays where it is, unchanged, until the sends of the run complete
  // (a two-part send reads it from there).
  virtual const unsigned char* header_for(int peer) const = 0;
  // data/bytes is what arrived from `peer` (null/0 when the receive failed: status says why).
  virtual Status check(int peer, const unsigned char* data, size_t bytes, const Status& status) const = 0;

 protected:
  ~HeaderSource() = default;
};

class HeaderFraming {
 public:
  static constexpr size_t kInlineHeaderMax = 64 << 10;
  static constexpr size_t kNone = SIZE_MAX;
  // The cookie of a header-only message with `peer`.
  using CookieFor = FunctionRef<uint64_t(size_t peer, bool is_send)>;

  // first_send[p] / first_recv[p]: the step that sends to / receives from peer p first, or
  // kNone. reverse = false skips the header-only replies: point-to-point sends and receives
  // grouped both ways on one connection (a sendrecv) would otherwise take each other's messages.
  HeaderFraming(size_t header_bytes, const HeaderSource& source, bool reverse, std::vector<size_t> first_send,
                std::vector<size_t> first_recv);

  size_t header_bytes() const { return header_bytes_; }
  bool is_first_send(int peer, size_t step) const { return of(peer).first_send == step; }
  bool is_first_recv(int peer, size_t step) const { return of(peer).first_recv == step; }
  // `step` is `peer`'s first receive and was posted with its header inline.
  bool inline_recv(int peer, size_t step) const { return of(peer).first_recv == step && of(peer).inline_recv; }
  // `step` is `peer`'s first receive, its data inline and left where it arrived: after
  // finish_inline_recv, kept_data(peer) holds it until restart().
  bool keeps_data(int peer, size_t step) const { return inline_recv(peer, step) && of(peer).land == nullptr; }
  const std::byte* kept_data(int peer) const { return of(peer).in.get() + header_bytes_; }
  // Header-only messages posted and not completed.
  size_t ops() const { return ops_; }
  // The header-only replies are still to be posted (post_reverse).
  bool reverse_pending() const { return !reverse_posted_; }

  // Posts `peer`'s first message (`bytes` at `data`) with its header. `data_cookie` is the
  // step's; `header_cookie` a header-only message's. Failures come back as the transport said.
  Status post_first_send(transport::Connection& conn, int peer, const std::byte* data, size_t bytes,
                         uint64_t data_cookie, uint64_t header_cookie, size_t& outstanding);
  // Posts the receive of `peer`'s first message, whose data lands at `land` (`bytes`). With
  // `may_keep`, data that comes inline stays where it arrived instead (keeps_data).
  Status post_first_recv(transport::Connection& conn, int peer, std::byte* land, size_t bytes, uint64_t data_cookie,
                         uint64_t header_cookie, size_t& outstanding, bool may_keep = false);
  // Posts the header-only replies (see the top), once per run; nothing when built without them.
  Status post_reverse(const std::vector<transport::Connection*>& peers, CookieFor cookie, size_t& outstanding);

  // A header-only message completed. *unexpected: it was not one posted (nothing changed, not
  // even `outstanding`). Transport errors get `where()` in front; the check's own do not.
  Status on_header_completion(const transport::Completion& c, size_t peer, bool is_send, bool* unexpected,
                              size_t& outstanding, FunctionRef<std::string()> where);
  // `peer`'s first message, header inline, arrived: checks the header, then lands its data
  // (`expected` bytes). *wrong_size, when the header passed but the data did not fit: the bytes
  // that came instead (kNone otherwise).
  Status finish_inline_recv(int peer, const transport::Completion& c, size_t expected, size_t* wrong_size,
                            FunctionRef<std::string()> where);

  // For a run of the same schedule again (Executor::rebind).
  void restart() {
    ops_ = 0;
    reverse_posted_ = !reverse_;
    for (PeerHeader& h : peers_) {  // first_send/first_recv follow the steps, which are the same
      h.inline_recv = false;
      h.land = nullptr;
      h.header_recv_done = false;
    }
  }

 private:
  struct PeerHeader {
    size_t first_send = kNone;
    size_t first_recv = kNone;
    std::vector<std::byte> out;  // header + data (inline) or the header alone
    // A first receive takes up to header + kInlineHeaderMax bytes whatever it expects, so the
    // header of any first (or stale) message a disagreeing peer sends can still be read.
    PooledBytes in;
    bool inline_recv = false;   // the first receive takes the header inline
    std::byte* land = nullptr;  // where its data goes once checked; null: it stays in `in`
    bool header_recv_done = false;
    size_t max_parts_bytes = kNone;  // the connection's capabilities().max_parts_bytes, once asked
  };
  const PeerHeader& of(int peer) const { return peers_[static_cast<size_t>(peer)]; }
  // post_first_send() where the connection takes no two-part message of this size: the header
  // staged with small data, or sent before large data.
  Status post_first_send_staged(transport::Connection& conn, int peer, const std::byte* data, size_t bytes,
                                uint64_t data_cookie, uint64_t header_cookie, size_t& outstanding);

  size_t header_bytes_;
  size_t ops_ = 0;
  bool reverse_;  // replies are asked for, and some peer is only sent to or only received from
  bool reverse_posted_;
  const HeaderSource* source_;
  std::vector<PeerHeader> peers_;
};

// The paths of every small operation, inline so that the executor's calls may be.
inline Status HeaderFraming::post_first_send(transport::Connection& conn, int peer, const std::byte* data, size_t bytes,
                                             uint64_t data_cookie, uint64_t header_cookie, size_t& outstanding) {
  PeerHeader& h = peers_[static_cast<size_t>(peer)];
  if (h.max_parts_bytes == kNone) h.max_parts_bytes = conn.capabilities().max_parts_bytes;  // once per peer
  if (bytes > kInlineHeaderMax || header_bytes_ + bytes > h.max_parts_bytes) {
    return post_first_send_staged(conn, peer, data, bytes, data_cookie, header_cookie, outstanding);
  }
  const auto* header = reinterpret_cast<const std::byte*>(source_->header_for(peer));
  RETURN_IF_ERROR(conn.post_send_parts(header, header_bytes_, data, bytes, data_cookie));  // no staging copy
  ++outstanding;
  return Status::ok();
}

inline Status HeaderFraming::post_first_recv(transport::Connection& conn, int peer, std::byte* land, size_t bytes,
                                             uint64_t data_cookie, uint64_t header_cookie, size_t& outstanding,
                                             bool may_keep) {
  PeerHeader& h = peers_[static_cast<size_t>(peer)];
  const size_t capacity = header_bytes_ + kInlineHeaderMax;
  if (h.in == nullptr) h.in = take_bytes(capacity);  // not zeroed: only received bytes are read
  if (bytes <= kInlineHeaderMax) {
    h.inline_recv = true;
    h.land = may_keep ? nullptr : land;
    RETURN_IF_ERROR(conn.post_recv(h.in.get(), capacity, data_cookie));
    ++outstanding;
    return Status::ok();
  }
  RETURN_IF_ERROR(conn.post_recv(h.in.get(), capacity, header_cookie));
  ++outstanding;
  ++ops_;
  RETURN_IF_ERROR(conn.post_recv(land, bytes, data_cookie));
  ++outstanding;
  return Status::ok();
}

inline Status HeaderFraming::finish_inline_recv(int peer, const transport::Completion& c, size_t expected,
                                                size_t* wrong_size, FunctionRef<std::string()> where) {
  PeerHeader& h = peers_[static_cast<size_t>(peer)];
  h.header_recv_done = true;
  *wrong_size = kNone;
  if (!c.status.is_ok() && c.status.code() != ErrorCode::protocol) return c.status.with_context(where());
  const auto* data = reinterpret_cast<const unsigned char*>(h.in.get());
  const bool arrived = c.status.is_ok();
  RETURN_IF_ERROR(source_->check(peer, arrived ? data : nullptr, arrived ? c.bytes : 0, c.status));
  if (c.bytes != header_bytes_ + expected) {
    *wrong_size = c.bytes - std::min(c.bytes, header_bytes_);
    return Status::ok();
  }
  if (expected != 0 && h.land != nullptr) std::memcpy(h.land, h.in.get() + header_bytes_, expected);
  return Status::ok();
}

}  // namespace braid::collectives
