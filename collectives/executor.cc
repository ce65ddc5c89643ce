#include "collectives/executor.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>

#include "collectives/kernels/reduce.h"

namespace braid::collectives {

namespace {

bool overlaps(const Range& a, const Range& b) {
  return a.bytes != 0 && b.bytes != 0 && a.buf == b.buf && a.offset < b.offset + b.bytes &&
         b.offset < a.offset + a.bytes;
}

// Receives that land straight in dst; the reducing kinds land in a slot and write dst later.
bool direct_recv(const Step& st) { return st.kind == StepKind::recv || st.kind == StepKind::recv_copy_send; }
bool writes_dst(const Step& st) { return st.kind != StepKind::send; }
// A range the step reads while computing (operand, copy source, send source).
bool reads_src(const Step& st) { return st.src.bytes != 0; }

// "<name> on rank R: ", the start of every error of an operation; built only for one.
std::string error_prefix(const ExecutorOptions& o) { return o.name + " on rank " + std::to_string(o.rank) + ": "; }

}  // namespace

Result<std::unique_ptr<Executor>> Executor::create(Schedule schedule, const void* send, void* recv,
                                                   const std::vector<transport::Connection*>& peers,
                                                   ExecutorOptions options) {
  for (const Step& st : schedule.steps) {
    for (int peer : {st.has_recv() ? st.recv_peer : -1, st.has_send() ? st.send_peer : -1}) {
      if (peer < 0) continue;
      if (static_cast<size_t>(peer) >= peers.size() || peers[static_cast<size_t>(peer)] == nullptr) {
        return invalid_argument(error_prefix(options) + "missing connection between rank " + std::to_string(options.rank) +
                                " (this process) and rank " + std::to_string(peer));
      }
    }
    for (const Range* r : {&st.dst, &st.src}) {
      if (r->bytes == 0) continue;
      if ((r->buf == Buf::send && send == nullptr) || (r->buf == Buf::recv && recv == nullptr)) {
        return invalid_argument(error_prefix(options) + std::string(r->buf == Buf::send ? "send" : "recv") +
                                " buffer is null but the operation has data for it");
      }
    }
  }
  return std::unique_ptr<Executor>(new Executor(std::move(schedule), send, recv, peers, std::move(options)));
}

Executor::Executor(Schedule&& schedule, const void* send, void* recv,
                   const std::vector<transport::Connection*>& peers, ExecutorOptions options)
    : steps_(std::move(schedule.steps)),
      phase_(steps_.size(), Phase::idle),
      send_(static_cast<const std::byte*>(send)),
      recv_(static_cast<std::byte*>(recv)),
      peers_(peers),
      options_(std::move(options)) {
  window_ = std::max<size_t>(std::max<size_t>(2, schedule.min_window), options_.window != 0 ? options_.window : schedule.window);
  window_ = std::min(window_, std::max<size_t>(2, steps_.size()));  // no more slots than steps
  if (schedule.scratch_bytes != 0) {
    scratch_ = take_bytes(schedule.scratch_bytes);
    if (schedule.zero_scratch) std::memset(scratch_.get(), 0, schedule.scratch_bytes);
  }
  for (const Step& st : steps_) {
    if (st.reduces()) slot_bytes_ = std::max(slot_bytes_, st.dst.bytes);
  }
  // One landing slot per window position: step i uses slot i % window, and no two steps
  // within one window share a residue.
  if (slot_bytes_ != 0) slots_ = take_bytes(slot_bytes_ * window_);
}

std::byte* Executor::at(const Range& r) const {
  switch (r.buf) {
    case Buf::send: return const_cast<std::byte*>(send_) + r.offset;
    case Buf::recv: return recv_ + r.offset;
    case Buf::scratch: return scratch_.get() + r.offset;
  }
  return nullptr;
}

// Would writing `r` now disturb an earlier step that still reads or writes it?
bool Executor::write_blocked(size_t i, const Range& r) const {
  for (size_t j = head_; j < i; ++j) {
    const Step& e = steps_[j];
    const Phase ph = phase_[j];
    if (ph == Phase::done) continue;
    const bool computing = ph == Phase::idle || ph == Phase::receiving || ph == Phase::received;
    if (computing && writes_dst(e) && overlaps(r, e.dst)) return true;
    if (computing && reads_src(e) && overlaps(r, e.src)) return true;
    if (e.has_send() && overlaps(r, e.sent())) return true;
  }
  return false;
}

// Would reading `r` now see a range an earlier step has not finished writing?
bool Executor::read_blocked(size_t i, const Range& r) const {
  for (size_t j = head_; j < i; ++j) {
    const Step& e = steps_[j];
    const Phase ph = phase_[j];
    const bool computing = ph == Phase::idle || ph == Phase::receiving || ph == Phase::received;
    if (computing && writes_dst(e) && overlaps(r, e.dst)) return true;
  }
  return false;
}

Result<bool> Executor::try_start(size_t i) {
  const Step& st = steps_[i];
  if (!st.has_recv()) {
    phase_[i] = Phase::received;
    return true;
  }
  std::byte* land;
  if (direct_recv(st)) {
    if (write_blocked(i, st.dst)) return false;
    land = at(st.dst);
  } else {
    land = slots_.get() + (i % window_) * slot_bytes_;
  }
  Status s;
  if (header_bytes_ != 0 && headers_[static_cast<size_t>(st.recv_peer)].first_recv == i) {
    s = post_first_recv(i, st.recv_peer, land, st.dst.bytes);
  } else {
    s = peers_[static_cast<size_t>(st.recv_peer)]->post_recv(land, st.dst.bytes, make_cookie(options_.op_id, i, false));
    if (s.is_ok()) ++outstanding_;
  }
  if (!s.is_ok()) return s.with_context(where());
  phase_[i] = Phase::receiving;
  return true;
}

void Executor::compute(const Step& st, size_t i) {
  const size_t esize = dtype_size(options_.dtype);
  switch (st.kind) {
    case StepKind::recv_reduce:
    case StepKind::recv_reduce_send: {
      std::byte* dst = at(st.dst);
      const std::byte* slot = slots_.get() + (i % window_) * slot_bytes_;
      const size_t n = st.dst.bytes / esize;
      if (st.src.bytes != 0 && at(st.src) != dst) {
        reduce_to(dst, at(st.src), slot, n, options_.dtype, options_.op);
      } else {
        reduce_into(dst, slot, n, options_.dtype, options_.op);
      }
      if (st.factor != 1.0) scale(dst, n, options_.dtype, st.factor);
      break;
    }
    case StepKind::copy:
      if (at(st.dst) != at(st.src)) std::memmove(at(st.dst), at(st.src), st.dst.bytes);
      break;
    case StepKind::scale:
      scale(at(st.dst), st.dst.bytes / esize, options_.dtype, st.factor);
      break;
    default:
      break;
  }
}

Result<bool> Executor::advance(size_t i) {
  const Step& st = steps_[i];
  switch (phase_[i]) {
    case Phase::received: {
      const bool local_write = writes_dst(st) && !direct_recv(st);
      if (local_write && write_blocked(i, st.dst)) return false;
      if (reads_src(st) && read_blocked(i, st.src)) return false;
      compute(st, i);
      phase_[i] = st.has_send() ? Phase::ready_send : Phase::done;
      return true;
    }
    case Phase::ready_send: {
      for (size_t j = head_; j < i; ++j) {  // sends to one peer leave in program order
        if (steps_[j].has_send() && steps_[j].send_peer == st.send_peer && phase_[j] < Phase::sending) return false;
      }
      const Range& r = st.sent();
      Status s;
      if (header_bytes_ != 0 && headers_[static_cast<size_t>(st.send_peer)].first_send == i) {
        s = post_first_send(i, st.send_peer, at(r), r.bytes);
      } else {
        s = peers_[static_cast<size_t>(st.send_peer)]->post_send(at(r), r.bytes, make_cookie(options_.op_id, i, true));
        if (s.is_ok()) ++outstanding_;
      }
      if (!s.is_ok()) return s.with_context(where());
      phase_[i] = Phase::sending;
      return true;
    }
    default:
      return false;
  }
}

Status Executor::progress() {
  if (header_bytes_ != 0 && !reverse_posted_) RETURN_IF_ERROR(post_reverse_headers());
  for (;;) {
    bool moved = false;
    for (size_t i = head_; i < started_; ++i) {
      ASSIGN_OR_RETURN(bool m, advance(i));
      moved = moved || m;
    }
    // Retire finished steps first: that is what opens the window for the next ones.
    while (head_ < started_ && phase_[head_] == Phase::done) ++head_;
    while (started_ < steps_.size() && started_ < head_ + window_) {
      ASSIGN_OR_RETURN(bool ok, try_start(started_));
      if (!ok) break;
      ++started_;
      moved = true;
    }
    if (!moved) return Status::ok();
  }
}

bool Executor::all_posted() const {
  if (started_ < steps_.size() || !reverse_posted_) return false;  // a started step has its receive posted
  for (size_t i = head_; i < steps_.size(); ++i) {
    if (steps_[i].has_send() && phase_[i] < Phase::sending) return false;
  }
  return true;
}

Status Executor::fail(const std::string& what) const {
  return protocol_error(where() + what);
}

std::string Executor::where() const { return error_prefix(options_); }

Status Executor::on_completion(const transport::Completion& c, bool* ours) {
  const size_t index = static_cast<size_t>((c.cookie & 0xffffffffu) >> 1);
  const size_t header_ops = header_bytes_ != 0 ? peers_.size() : 0;
  const bool mine = (c.cookie >> 32) == (options_.op_id & 0xffffffffu) && index < steps_.size() + header_ops;
  if (ours != nullptr) *ours = mine;
  if (!mine) return Status::ok();
  const bool is_send = (c.cookie & 1u) != 0;
  if (index >= steps_.size()) return on_header_completion(c, index - steps_.size(), is_send);
  if (!is_send && header_bytes_ != 0 && headers_[static_cast<size_t>(steps_[index].recv_peer)].first_recv == index &&
      headers_[static_cast<size_t>(steps_[index].recv_peer)].land != nullptr) {
    if (phase_[index] != Phase::receiving) return fail("unexpected completion for step " + std::to_string(index));
    --outstanding_;
    return finish_first_recv(index, c);
  }
  const Step& st = steps_[index];
  const Phase expected = is_send ? Phase::sending : Phase::receiving;
  if (phase_[index] != expected) return fail("unexpected completion for step " + std::to_string(index));
  --outstanding_;
  if (!c.status.is_ok()) {
    return c.status.with_context(where());
  }
  if (is_send) {
    phase_[index] = Phase::done;
    return Status::ok();
  }
  if (c.bytes != st.dst.bytes) {
    return Status(ErrorCode::mismatch,
                  where() + "expected " +
                      std::to_string(st.dst.bytes) + " bytes from " + peer_name(st.recv_peer) + ", got " +
                      std::to_string(c.bytes) + " - do all ranks call the same collective with the same counts?");
  }
  phase_[index] = Phase::received;
  return Status::ok();
}

void Executor::set_headers(size_t header_bytes, HeaderFor header_for, HeaderCheck check, bool reverse) {
  header_bytes_ = header_bytes;
  reverse_ = reverse;
  reverse_posted_ = !reverse;  // as if already posted: none will be
  header_for_ = std::move(header_for);
  check_header_ = std::move(check);
  headers_.clear();
  headers_.resize(peers_.size());
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& st = steps_[i];
    if (st.has_send()) {
      auto& h = headers_[static_cast<size_t>(st.send_peer)];
      if (h.first_send == SIZE_MAX) h.first_send = i;
    }
    if (st.has_recv()) {
      auto& h = headers_[static_cast<size_t>(st.recv_peer)];
      if (h.first_recv == SIZE_MAX) h.first_recv = i;
    }
  }
}

Status Executor::rebind(const void* send, void* recv, uint64_t op_id) {
  if (!done() || outstanding_ != 0) return internal_error(where() + "rebind while the previous run is unfinished");
  send_ = static_cast<const std::byte*>(send);
  recv_ = static_cast<std::byte*>(recv);
  options_.op_id = op_id;
  std::fill(phase_.begin(), phase_.end(), Phase::idle);
  head_ = started_ = outstanding_ = header_ops_ = 0;
  reverse_posted_ = !reverse_;
  for (PeerHeader& h : headers_) {  // first_send/first_recv follow the steps, which are the same
    h.land = nullptr;
    h.header_recv_done = false;
  }
  return Status::ok();
}

Status Executor::post_first_send(size_t i, int peer, const std::byte* data, size_t bytes) {
  PeerHeader& h = headers_[static_cast<size_t>(peer)];
  transport::Connection* conn = peers_[static_cast<size_t>(peer)];
  const auto* header = reinterpret_cast<const std::byte*>(header_for_(peer));
  h.out.reserve(header_bytes_ + (bytes <= kInlineHeaderMax ? bytes : 0));  // one allocation, not two
  h.out.assign(header, header + header_bytes_);
  if (bytes <= kInlineHeaderMax) {
    h.out.insert(h.out.end(), data, data + bytes);
    RETURN_IF_ERROR(conn->post_send(h.out.data(), h.out.size(), make_cookie(options_.op_id, i, true)));
    ++outstanding_;
    return Status::ok();
  }
  RETURN_IF_ERROR(conn->post_send(h.out.data(), header_bytes_,
                                  make_cookie(options_.op_id, steps_.size() + static_cast<size_t>(peer), true)));
  ++outstanding_;
  ++header_ops_;
  RETURN_IF_ERROR(conn->post_send(data, bytes, make_cookie(options_.op_id, i, true)));
  ++outstanding_;
  return Status::ok();
}

Status Executor::post_first_recv(size_t i, int peer, std::byte* land, size_t bytes) {
  PeerHeader& h = headers_[static_cast<size_t>(peer)];
  transport::Connection* conn = peers_[static_cast<size_t>(peer)];
  const size_t capacity = header_bytes_ + kInlineHeaderMax;
  if (h.in == nullptr) h.in = take_bytes(capacity);  // not zeroed: only received bytes are read
  if (bytes <= kInlineHeaderMax) {
    h.land = land;
    RETURN_IF_ERROR(conn->post_recv(h.in.get(), capacity, make_cookie(options_.op_id, i, false)));
    ++outstanding_;
    return Status::ok();
  }
  RETURN_IF_ERROR(conn->post_recv(h.in.get(), capacity,
                                  make_cookie(options_.op_id, steps_.size() + static_cast<size_t>(peer), false)));
  ++outstanding_;
  ++header_ops_;
  RETURN_IF_ERROR(conn->post_recv(land, bytes, make_cookie(options_.op_id, i, false)));
  ++outstanding_;
  return Status::ok();
}

// A header sent or received as a message of its own (first messages above kInlineHeaderMax).
Status Executor::on_header_completion(const transport::Completion& c, size_t peer, bool is_send) {
  PeerHeader& h = headers_[peer];
  if (is_send ? h.out.empty() : (h.in == nullptr || h.header_recv_done)) return fail("unexpected header completion");
  --outstanding_;
  --header_ops_;
  if (is_send) return c.status.is_ok() ? Status::ok() : c.status.with_context(where());
  h.header_recv_done = true;
  // A message too large for the header is the peer's data: let check() say what it means.
  if (!c.status.is_ok() && c.status.code() != ErrorCode::protocol) return c.status.with_context(where());
  const auto* data = reinterpret_cast<const unsigned char*>(h.in.get());
  return check_header_(static_cast<int>(peer), c.status.is_ok() ? data : nullptr, c.status.is_ok() ? c.bytes : 0,
                       c.status);
}

// Peers this rank only receives from get a header-only message; peers it only sends to are
// expected to send one. Both sides see the same schedule shape, so both agree who sends.
Status Executor::post_reverse_headers() {
  reverse_posted_ = true;
  for (size_t p = 0; p < headers_.size(); ++p) {
    PeerHeader& h = headers_[p];
    const bool sends = h.first_send != SIZE_MAX, receives = h.first_recv != SIZE_MAX;
    if (sends == receives) continue;
    const uint64_t cookie_index = steps_.size() + p;
    Status s;
    if (receives) {
      const auto* header = reinterpret_cast<const std::byte*>(header_for_(static_cast<int>(p)));
      h.out.assign(header, header + header_bytes_);
      s = peers_[p]->post_send(h.out.data(), header_bytes_, make_cookie(options_.op_id, cookie_index, true));
    } else {
      if (h.in == nullptr) h.in = take_bytes(header_bytes_ + kInlineHeaderMax);
      s = peers_[p]->post_recv(h.in.get(), header_bytes_ + kInlineHeaderMax,
                               make_cookie(options_.op_id, cookie_index, false));
    }
    if (!s.is_ok()) return s.with_context(where());
    ++outstanding_;
    ++header_ops_;
  }
  return Status::ok();
}

// The first message from a peer, header inline: check the header, then land the data.
Status Executor::finish_first_recv(size_t index, const transport::Completion& c) {
  const Step& st = steps_[index];
  PeerHeader& h = headers_[static_cast<size_t>(st.recv_peer)];
  h.header_recv_done = true;
  if (!c.status.is_ok() && c.status.code() != ErrorCode::protocol) return c.status.with_context(where());
  const auto* data = reinterpret_cast<const unsigned char*>(h.in.get());
  const bool arrived = c.status.is_ok();
  RETURN_IF_ERROR(check_header_(st.recv_peer, arrived ? data : nullptr, arrived ? c.bytes : 0, c.status));
  if (c.bytes != header_bytes_ + st.dst.bytes) {
    return Status(ErrorCode::mismatch, where() + "expected " + std::to_string(st.dst.bytes) + " bytes from " +
                                           peer_name(st.recv_peer) + ", got " +
                                           std::to_string(c.bytes - std::min(c.bytes, header_bytes_)) +
                                           " - do all ranks call the same collective with the same counts?");
  }
  if (st.dst.bytes != 0) std::memcpy(h.land, h.in.get() + header_bytes_, st.dst.bytes);
  phase_[index] = Phase::received;
  return Status::ok();
}

std::string Executor::peer_name(int peer) const {
  std::string s = "rank " + std::to_string(peer);
  if (peer >= 0 && static_cast<size_t>(peer) < peers_.size() && peers_[static_cast<size_t>(peer)] != nullptr) {
    s += " (" + peers_[static_cast<size_t>(peer)]->peer_address() + ")";
  }
  return s;
}

std::vector<int> Executor::busy_peers() const {
  std::set<int> out;
  for (size_t i = head_; i < started_; ++i) {
    if (phase_[i] == Phase::receiving) out.insert(steps_[i].recv_peer);
    if (phase_[i] == Phase::sending) out.insert(steps_[i].send_peer);
  }
  return {out.begin(), out.end()};
}

std::string Executor::waiting_for() const {
  std::ostringstream o;
  const char* sep = "";
  std::set<std::pair<int, bool>> seen;
  for (size_t i = head_; i < started_; ++i) {
    if (phase_[i] != Phase::receiving && phase_[i] != Phase::sending) continue;
    const bool is_send = phase_[i] == Phase::sending;
    const int peer = is_send ? steps_[i].send_peer : steps_[i].recv_peer;
    if (!seen.insert({peer, is_send}).second) continue;
    o << sep << peer_name(peer) << (is_send ? " to take our data" : " to send");
    const transport::Connection* c = peers_[static_cast<size_t>(peer)];  // create() checked every peer has one
    if (const std::string hint = c->stall_hint(); !hint.empty()) o << " (" << hint << ")";
    sep = ", ";
  }
  if (seen.empty()) o << "no peer (step " << head_ << " of " << steps_.size() << " is blocked locally)";
  return o.str();
}

}  // namespace braid::collectives
