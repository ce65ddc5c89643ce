#include "collectives/header_framing.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace braid::collectives {

HeaderFraming::HeaderFraming(size_t header_bytes, const HeaderSource& source, bool reverse,
                             std::vector<size_t> first_send, std::vector<size_t> first_recv)
    : header_bytes_(header_bytes),
      reverse_(reverse),
      reverse_posted_(!reverse),  // as if already posted: none will be
      source_(&source),
      peers_(first_send.size()) {
  bool one_way = false;
  for (size_t p = 0; p < peers_.size(); ++p) {
    peers_[p].first_send = first_send[p];
    peers_[p].first_recv = first_recv[p];
    one_way = one_way || (first_send[p] == kNone) != (first_recv[p] == kNone);
  }
  // Where every peer is both sent to and received from, there is no reply to post (post_reverse).
  reverse_ = reverse_ && one_way;
  reverse_posted_ = !reverse_;
}

Status HeaderFraming::post_first_send_staged(transport::Connection& conn, int peer, const std::byte* data, size_t bytes,
                                             uint64_t data_cookie, uint64_t header_cookie, size_t& outstanding) {
  PeerHeader& h = peers_[static_cast<size_t>(peer)];
  const auto* header = reinterpret_cast<const std::byte*>(source_->header_for(peer));
  h.out.reserve(header_bytes_ + (bytes <= kInlineHeaderMax ? bytes : 0));  // one allocation, not two
  h.out.assign(header, header + header_bytes_);
  if (bytes <= kInlineHeaderMax) {
    h.out.insert(h.out.end(), data, data + bytes);
    RETURN_IF_ERROR(conn.post_send(h.out.data(), h.out.size(), data_cookie));
    ++outstanding;
    return Status::ok();
  }
  RETURN_IF_ERROR(conn.post_send(h.out.data(), header_bytes_, header_cookie));
  ++outstanding;
  ++ops_;
  RETURN_IF_ERROR(conn.post_send(data, bytes, data_cookie));
  ++outstanding;
  return Status::ok();
}

// Peers this rank only receives from get a header-only message; peers it only sends to are
// expected to send one. Both sides see the same schedule shape, so both agree who sends.
Status HeaderFraming::post_reverse(const std::vector<transport::Connection*>& peers, CookieFor cookie,
                                   size_t& outstanding) {
  if (reverse_posted_) return Status::ok();  // posted once per run, and never without `reverse`
  reverse_posted_ = true;
  for (size_t p = 0; p < peers_.size(); ++p) {
    PeerHeader& h = peers_[p];
    const bool sends = h.first_send != kNone, receives = h.first_recv != kNone;
    if (sends == receives) continue;
    if (receives) {
      const auto* header = reinterpret_cast<const std::byte*>(source_->header_for(static_cast<int>(p)));
      h.out.assign(header, header + header_bytes_);
      RETURN_IF_ERROR(peers[p]->post_send(h.out.data(), header_bytes_, cookie(p, true)));
    } else {
      if (h.in == nullptr) h.in = take_bytes(header_bytes_ + kInlineHeaderMax);
      RETURN_IF_ERROR(peers[p]->post_recv(h.in.get(), header_bytes_ + kInlineHeaderMax, cookie(p, false)));
    }
    ++outstanding;
    ++ops_;
  }
  return Status::ok();
}

// A header sent or received as a message of its own (first messages above kInlineHeaderMax,
// and the header-only replies).
Status HeaderFraming::on_header_completion(const transport::Completion& c, size_t peer, bool is_send, bool* unexpected,
                                           size_t& outstanding, FunctionRef<std::string()> where) {
  PeerHeader& h = peers_[peer];
  *unexpected = is_send ? h.out.empty() : (h.in == nullptr || h.header_recv_done);
  if (*unexpected) return Status::ok();
  --outstanding;
  --ops_;
  if (is_send) return c.status.is_ok() ? Status::ok() : c.status.with_context(where());
  h.header_recv_done = true;
  // A message too large for the header is the peer's data: let check() say what it means.
  if (!c.status.is_ok() && c.status.code() != ErrorCode::protocol) return c.status.with_context(where());
  const auto* data = reinterpret_cast<const unsigned char*>(h.in.get());
  return source_->check(static_cast<int>(peer), c.status.is_ok() ? data : nullptr, c.status.is_ok() ? c.bytes : 0, c.status);
}

}  // namespace braid::collectives
