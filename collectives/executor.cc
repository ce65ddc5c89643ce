#include "collectives/executor.h"

#include <algorithm>
#include <cstring>
#include <set>
#include <sstream>
#include <utility>

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

// The helpers of progress() below are `inline`: defined and used in this file only, they may
// then be inlined or called directly. (libbraid is built position-independent, where a plain
// member function is called through the PLT and never inlined, in case another library
// replaces it.)

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

inline std::byte* Executor::at(const Range& r) const {
  switch (r.buf) {
    case Buf::send: return const_cast<std::byte*>(send_) + r.offset;
    case Buf::recv: return recv_ + r.offset;
    case Buf::scratch: return scratch_.get() + r.offset;
  }
  return nullptr;
}

// Would writing `r` now disturb an earlier step that still reads or writes it?
inline bool Executor::write_blocked(size_t i, const Range& r) const {
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
inline bool Executor::read_blocked(size_t i, const Range& r) const {
  for (size_t j = head_; j < i; ++j) {
    const Step& e = steps_[j];
    const Phase ph = phase_[j];
    const bool computing = ph == Phase::idle || ph == Phase::receiving || ph == Phase::received;
    if (computing && writes_dst(e) && overlaps(r, e.dst)) return true;
  }
  return false;
}

inline Executor::Went Executor::try_start(size_t i) {
  const Step& st = steps_[i];
  if (!st.has_recv()) {
    phase_[i] = Phase::received;
    return Went::yes;
  }
  std::byte* land;
  if (direct_recv(st)) {
    if (write_blocked(i, st.dst)) return Went::no;
    land = at(st.dst);
  } else {
    land = slots_.get() + (i % window_) * slot_bytes_;
  }
  Status s;
  if (framed() && framing_->is_first_recv(st.recv_peer, i)) {
    // A reducing step only reads what it received: inline data is reduced from where it arrived.
    s = framing_->post_first_recv(*peers_[static_cast<size_t>(st.recv_peer)], st.recv_peer, land, st.dst.bytes,
                                  make_cookie(options_.op_id, i, false),
                                  make_cookie(options_.op_id, steps_.size() + static_cast<size_t>(st.recv_peer), false),
                                  outstanding_, /*may_keep=*/!direct_recv(st));
  } else {
    s = peers_[static_cast<size_t>(st.recv_peer)]->post_recv(land, st.dst.bytes, make_cookie(options_.op_id, i, false));
    if (s.is_ok()) ++outstanding_;
  }
  if (!s.is_ok()) return failed(s);
  phase_[i] = Phase::receiving;
  return Went::yes;
}

inline void Executor::compute(const Step& st, size_t i) {
  const size_t esize = dtype_size(options_.dtype);
  switch (st.kind) {
    case StepKind::recv_reduce:
    case StepKind::recv_reduce_send: {
      std::byte* dst = at(st.dst);
      const std::byte* slot = framed() && framing_->keeps_data(st.recv_peer, i) ? framing_->kept_data(st.recv_peer)
                                                                                  : slots_.get() + (i % window_) * slot_bytes_;
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

// Takes step i as far as it may go now: received -> computed -> sending. True when it moved.
inline Executor::Went Executor::advance(size_t i) {
  const Step& st = steps_[i];
  Went moved = Went::no;
  if (phase_[i] == Phase::received) {
    const bool local_write = writes_dst(st) && !direct_recv(st);
    if (local_write && write_blocked(i, st.dst)) return Went::no;
    if (reads_src(st) && read_blocked(i, st.src)) return Went::no;
    compute(st, i);
    moved = Went::yes;
    if (!st.has_send()) {
      phase_[i] = Phase::done;
      return Went::yes;
    }
    phase_[i] = Phase::ready_send;
  }
  if (phase_[i] != Phase::ready_send) return moved;
  const Went sent = post_send(i);
  return sent == Went::no ? moved : sent;
}

// Step i is ready to send: posts its send unless an earlier send to the same peer has not left.
inline Executor::Went Executor::post_send(size_t i) {
  const Step& st = steps_[i];
  for (size_t j = head_; j < i; ++j) {  // sends to one peer leave in program order
    if (steps_[j].has_send() && steps_[j].send_peer == st.send_peer && phase_[j] < Phase::sending) return Went::no;
  }
  const Range& r = st.sent();
  Status s;
  if (framed() && framing_->is_first_send(st.send_peer, i)) {
    s = framing_->post_first_send(*peers_[static_cast<size_t>(st.send_peer)], st.send_peer, at(r), r.bytes,
                                  make_cookie(options_.op_id, i, true),
                                  make_cookie(options_.op_id, steps_.size() + static_cast<size_t>(st.send_peer), true),
                                  outstanding_);
  } else {
    s = peers_[static_cast<size_t>(st.send_peer)]->post_send(at(r), r.bytes, make_cookie(options_.op_id, i, true));
    if (s.is_ok()) ++outstanding_;
  }
  if (!s.is_ok()) return failed(s);
  phase_[i] = Phase::sending;
  return Went::yes;
}

Executor::Went Executor::failed(const Status& s) {
  failure_ = s.with_context(where());
  return Went::failed;
}

// What may go now is found in sweeps from the oldest unfinished step: first every step the
// window lets start is started (so an operation posts its receives before its sends), then each
// started step is taken as far as it goes (received -> computed -> sending). Whether a step may
// go depends only on the steps before it, so a step swept after those is settled, and the next
// sweep (after the retired steps opened the window) only looks at the steps it started. Once
// nothing moves, nothing changes until a completion comes in: calls in between (a drive loop
// polling for its peer) return at once.
Status Executor::progress_now() {
  if (straight_) return progress_straight();
  if (framed() && framing_->reverse_pending()) {
    auto cookie = [this](size_t peer, bool is_send) { return make_cookie(options_.op_id, steps_.size() + peer, is_send); };
    Status s = framing_->post_reverse(peers_, cookie, outstanding_);
    if (!s.is_ok()) return s.with_context(where());
  }
  size_t from = head_;
  for (;;) {
    // Retire finished steps first: that is what opens the window for the next ones.
    while (head_ < started_ && phase_[head_] == Phase::done) ++head_;
    while (started_ < steps_.size() && started_ < head_ + window_) {
      const Went w = try_start(started_);
      if (w == Went::failed) return std::exchange(failure_, Status::ok());
      if (w == Went::no) break;
      ++started_;
    }
    bool moved = false;
    for (size_t i = std::max(from, head_); i < started_; ++i) {
      ++visits_;
      const Went w = advance(i);
      if (w == Went::failed) return std::exchange(failure_, Status::ok());
      moved = moved || w == Went::yes;
    }
    if (!moved) break;
    from = started_;
  }
  settled_ = true;
  return Status::ok();
}

// The sweeps above for a schedule of one send (step 0) and one receive (step 0 alone, or step 1
// after the send), the runtime's small operations of two ranks, written out: the receive is posted
// before the send (unless it would land where the send still reads), the send goes at once (no
// step is before it), and what arrived is computed once no earlier step still reads or writes its
// range. The phases, the order of the posts and the helpers are the sweeps', so done(),
// all_posted() and waiting_for() read a straight run as any other.
inline Status Executor::progress_straight() {
  if (started_ == 0 && send_step_ == 0) {  // a send receives nothing: ready at once
    phase_[0] = Phase::received;
    started_ = 1;
  }
  if (recv_step_ >= 0 && started_ == static_cast<size_t>(recv_step_)) {
    const Went w = try_start(started_);
    if (w == Went::failed) return std::exchange(failure_, Status::ok());
    if (w == Went::yes) ++started_;
  }
  if (send_step_ == 0 && phase_[0] == Phase::received) {
    phase_[0] = Phase::ready_send;  // a send computes nothing, and no step is before it
    if (post_send(0) == Went::failed) return std::exchange(failure_, Status::ok());
  }
  if (recv_step_ >= 0 && phase_[static_cast<size_t>(recv_step_)] == Phase::received) {
    const auto i = static_cast<size_t>(recv_step_);
    const Step& st = steps_[i];
    if (!(st.reduces() && write_blocked(i, st.dst)) && !(reads_src(st) && read_blocked(i, st.src))) {
      compute(st, i);
      phase_[i] = Phase::done;
    }
  }
  while (head_ < started_ && phase_[head_] == Phase::done) ++head_;
  settled_ = true;
  return Status::ok();
}

bool Executor::all_posted() const {
  // A started step has its receive posted. Without headers this stays false (as it always has):
  // only the runtime, which always sets them, asks.
  if (started_ < steps_.size() || !framing_ || framing_->reverse_pending()) return false;
  for (size_t i = head_; i < steps_.size(); ++i) {
    if (steps_[i].has_send() && phase_[i] < Phase::sending) return false;
  }
  return true;
}

Status Executor::fail(const std::string& what) const {
  return protocol_error(where() + what);
}

std::string Executor::where() const { return error_prefix(options_); }

Status Executor::take(const transport::Completion& c, bool* ours) {
  const size_t index = static_cast<size_t>((c.cookie & 0xffffffffu) >> 1);
  const size_t header_ops = framed() ? peers_.size() : 0;
  const bool mine = (c.cookie >> 32) == (options_.op_id & 0xffffffffu) && index < steps_.size() + header_ops;
  if (ours != nullptr) *ours = mine;
  if (!mine) return Status::ok();
  settled_ = false;
  const bool is_send = (c.cookie & 1u) != 0;
  if (index >= steps_.size()) {
    bool unexpected = false;
    auto context = [this] { return where(); };
    Status s = framing_->on_header_completion(c, index - steps_.size(), is_send, &unexpected, outstanding_, context);
    return unexpected ? fail("unexpected header completion") : s;
  }
  if (!is_send && framed() && framing_->inline_recv(steps_[index].recv_peer, index)) {
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

void Executor::set_headers(size_t header_bytes, const HeaderSource& source, bool reverse) {
  std::vector<size_t> first_send(peers_.size(), HeaderFraming::kNone), first_recv(peers_.size(), HeaderFraming::kNone);
  for (size_t i = 0; i < steps_.size(); ++i) {
    const Step& st = steps_[i];
    if (st.has_send() && first_send[static_cast<size_t>(st.send_peer)] == HeaderFraming::kNone) {
      first_send[static_cast<size_t>(st.send_peer)] = i;
    }
    if (st.has_recv() && first_recv[static_cast<size_t>(st.recv_peer)] == HeaderFraming::kNone) {
      first_recv[static_cast<size_t>(st.recv_peer)] = i;
    }
  }
  settled_ = false;
  framing_.emplace(header_bytes, source, reverse, std::move(first_send), std::move(first_recv));
  framed_ = header_bytes != 0;
  // The straight path (progress_straight): one send, one receive (straight into dst, or reduced
  // from where it arrived) or a send and then a receive, each the first with its peer, and no
  // header-only reply to post. Anything else takes the sweeps.
  auto receives = [](const Step& st) { return st.kind == StepKind::recv || st.kind == StepKind::recv_reduce; };
  send_step_ = recv_step_ = -1;
  if (steps_.size() == 1) {
    if (steps_[0].kind == StepKind::send) send_step_ = 0;
    if (receives(steps_[0])) recv_step_ = 0;
  } else if (steps_.size() == 2 && steps_[0].kind == StepKind::send && receives(steps_[1])) {
    send_step_ = 0;
    recv_step_ = 1;
  }
  straight_ = framed_ && !framing_->reverse_pending() && (send_step_ >= 0 || recv_step_ >= 0);
}

Status Executor::rebind(const void* send, void* recv, uint64_t op_id) {
  if (!done() || outstanding_ != 0) return internal_error(where() + "rebind while the previous run is unfinished");
  send_ = static_cast<const std::byte*>(send);
  recv_ = static_cast<std::byte*>(recv);
  options_.op_id = op_id;
  if (straight_) {  // one or two steps: spares a call to memset
    phase_.front() = Phase::idle;
    phase_.back() = Phase::idle;
  } else {
    std::fill(phase_.begin(), phase_.end(), Phase::idle);
  }
  head_ = started_ = outstanding_ = 0;
  settled_ = false;
  if (framing_) framing_->restart();  // the first messages follow the steps, which are the same
  return Status::ok();
}

// The first message from a peer, header inline: check the header, then land the data.
inline Status Executor::finish_first_recv(size_t index, const transport::Completion& c) {
  const Step& st = steps_[index];
  size_t got = HeaderFraming::kNone;
  auto context = [this] { return where(); };
  RETURN_IF_ERROR(framing_->finish_inline_recv(st.recv_peer, c, st.dst.bytes, &got, context));
  if (got != HeaderFraming::kNone) {
    return Status(ErrorCode::mismatch, where() + "expected " + std::to_string(st.dst.bytes) + " bytes from " +
                                           peer_name(st.recv_peer) + ", got " + std::to_string(got) +
                                           " - do all ranks call the same collective with the same counts?");
  }
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
