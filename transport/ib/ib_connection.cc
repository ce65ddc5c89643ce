#include "transport/ib/ib_connection.h"

#include <arpa/inet.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "transport/ib/stripe_plan.h"
#include "transport/ib/wc_error.h"
#include "transport/ib/wc_failure_context.h"

namespace braid::transport::ib {

namespace {

// wr_id: the kind in the top byte, then the message's seq (sends) or the QP index (receives).
enum class WrKind : uint64_t { send = 1, cts = 2, recv = 3, rts = 4 };
constexpr uint64_t wr_id(WrKind k, uint64_t v) { return (static_cast<uint64_t>(k) << 56) | (v & ((1ull << 56) - 1)); }
WrKind wr_kind(uint64_t id) { return static_cast<WrKind>(id >> 56); }
uint64_t wr_value(uint64_t id) { return id & ((1ull << 56) - 1); }

}  // namespace

Status IbConnection::post_recv_wrs(uint32_t qp, uint32_t n) {
  ibv_recv_wr wrs[kRecvRepostBatch];
  while (n > 0) {
    const uint32_t k = std::min(n, kRecvRepostBatch);
    for (uint32_t i = 0; i < k; ++i) {
      wrs[i] = ibv_recv_wr{};
      wrs[i].wr_id = wr_id(WrKind::recv, qp);
      wrs[i].num_sge = 0;  // writes with immediate land where the sender says; the receive only counts
      wrs[i].next = i + 1 < k ? &wrs[i + 1] : nullptr;
    }
    ibv_recv_wr* bad = nullptr;
    const int rc = ibv_post_recv(qps_[qp].get(), wrs, &bad);
    if (rc != 0) return system_error(op_prefix(false) + "posting receive work requests", rc);
    n -= k;
  }
  return Status::ok();
}

Status IbConnection::post_write(uint32_t qp, uint64_t id, const void* local, uint64_t bytes, uint32_t lkey,
                                uint64_t remote, uint32_t rkey, uint32_t imm, bool inline_ok) {
  ibv_sge sge{};
  sge.addr = reinterpret_cast<uint64_t>(local);
  sge.length = static_cast<uint32_t>(bytes);
  sge.lkey = lkey;
  ibv_send_wr wr{};
  wr.wr_id = id;
  wr.sg_list = bytes > 0 ? &sge : nullptr;
  wr.num_sge = bytes > 0 ? 1 : 0;
  wr.opcode = IBV_WR_RDMA_WRITE_WITH_IMM;  // every write is announced (stripe_plan.h says why)
  wr.send_flags = IBV_SEND_SIGNALED;
  if (inline_ok && bytes > 0 && bytes <= max_inline_) wr.send_flags |= IBV_SEND_INLINE;
  wr.imm_data = htonl(imm);
  // A zero-byte write still names a region: the eager ring is one the peer surely registered.
  wr.wr.rdma.remote_addr = bytes > 0 ? remote : peer_.eager_addr;
  wr.wr.rdma.rkey = bytes > 0 ? rkey : peer_.eager_rkey;
  batch_.add(qp, wr);  // posted at the end of this pass
  ++sq_used_[qp];
  return Status::ok();
}

Status IbConnection::post_send(const void* data, size_t bytes, uint64_t cookie) {
  if (!failure_.is_ok()) {
    report(Completion{this, cookie, true, 0, Status(failure_.code(), op_prefix(true) + failure_.message())});
    return Status::ok();
  }
  Send s;
  s.data = data;
  s.bytes = bytes;
  s.cookie = cookie;
  s.seq = sends_.empty() ? send_ledger_.next_seq() : sends_.back().seq + 1;
  sends_.push_back(s);
  settled_ = false;
  progress();
  return Status::ok();
}

Status IbConnection::post_recv(void* data, size_t capacity, uint64_t cookie) {
  // A peer that said goodbye may have sent messages this end had not asked for yet: they wait
  // in the eager slots, and their receives complete from there, as they would have before.
  if (!failure_.is_ok() && peer_said_bye_ && recv_.next_arrived()) {
    recv_.post(data, capacity, cookie);
    deliver();
    return Status::ok();
  }
  if (!failure_.is_ok()) {
    report(Completion{this, cookie, false, 0, Status(failure_.code(), op_prefix(false) + failure_.message())});
    return Status::ok();
  }
  // The buffer is registered when its CTS is written (advertise()), not here: a receive whose
  // message comes eagerly never hands its address to the peer and needs no registration.
  recv_.post(data, capacity, cookie);
  settled_ = false;
  // A receive whose message can come eagerly is advertised in the transport's next pass (its
  // poll), not now: whatever CTS it needs then leaves after a send posted just after this
  // receive, as the executor posts them, instead of ahead of it. Its message may already be
  // here: it completes now, as it always did (a peer that closes next counts it as received).
  if (capacity > kEagerSlotBytes) {
    progress();
  } else if (started_) {
    deliver();
  }
  return Status::ok();
}

Status IbConnection::advertise(RecvLedger::Receive& r) {
  const uint32_t qp = static_cast<uint32_t>(r.seq % qps_.size());
  if (sq_used_[qp] >= kSendDepth) return Status::ok();
  const size_t slot = r.seq % kCtsEntries;
  CtsEntry e;
  auto mr = recv_mrs_.find(r.seq);
  if (r.capacity > 0 && mr == recv_mrs_.end()) {
    // The peer may write into the buffer once it reads this entry: registered before it goes.
    Result<Mr> got = shared_.memory->acquire(r.data, r.capacity);
    if (!got.is_ok()) {
      return got.status().with_context("registering the " + std::to_string(r.capacity) + "-byte receive buffer: ");
    }
    mr = recv_mrs_.emplace(r.seq, got.value()).first;
  }
  e.addr = reinterpret_cast<uint64_t>(r.data);
  e.size = r.capacity;
  e.rkey = mr == recv_mrs_.end() ? 0 : mr->second.rkey;
  e.seq = static_cast<uint32_t>(r.seq);
  e.eager_consumed = recv_.eager_consumed();
  cts_consumed_reported_ = e.eager_consumed;
  unsigned char* at = cts_staging_.data() + slot * kCtsEntryBytes;
  encode(e, at);
  RETURN_IF_ERROR(post_write(qp, wr_id(WrKind::cts, r.seq), at, kCtsEntryBytes, cts_staging_.lkey(),
                             peer_.cts_addr + slot * kCtsEntryBytes, peer_.cts_rkey,
                             encode_imm(ImmKind::cts, kImmAuxCts, r.seq), true));
  recv_.advertised(r);
  if (shared_.stats != nullptr) {
    ++shared_.stats->cts_written;
    shared_.stats->cts_overdue += hold_.overdue();
  }
  return Status::ok();
}

Status IbConnection::ask_for_cts(const Send& s) {
  const uint32_t qp = static_cast<uint32_t>(s.seq % qps_.size());
  if (s.seq < asked_upto_ || sq_used_[qp] >= kSendDepth) return Status::ok();
  RETURN_IF_ERROR(post_write(qp, wr_id(WrKind::rts, s.seq), nullptr, 0, 0, 0, 0,
                             encode_imm(ImmKind::cts, kImmAuxRts, s.seq), false));
  asked_upto_ = s.seq + 1;
  if (shared_.stats != nullptr) ++shared_.stats->cts_requests;
  return Status::ok();
}

Status IbConnection::start_send(Send& s) {
  const SendLedger::Decision d = send_ledger_.decide(s.bytes, true);
  const uint32_t nqps = static_cast<uint32_t>(qps_.size());
  if (d.way == SendLedger::Way::wait) {
    // Ask for the CTS where the receiver may be holding it back (cts_hold.h): it does so when
    // it expects an eager message, as after eager ones; a rendezvous message after rendezvous
    // ones finds its CTS on the way, and asks only if it must sleep for it (ask_before_sleep).
    const bool ask = d.needs_cts && (s.bytes <= kEagerSlotBytes || last_send_eager_ || asking_);
    return ask ? ask_for_cts(s) : Status::ok();
  }
  last_send_eager_ = d.way == SendLedger::Way::eager;
  if (d.way == SendLedger::Way::eager || d.way == SendLedger::Way::too_large) {
    const uint32_t qp = static_cast<uint32_t>(s.seq % nqps);
    if (sq_used_[qp] >= kSendDepth) return Status::ok();
    if (d.way == SendLedger::Way::too_large) {
      RETURN_IF_ERROR(post_write(qp, wr_id(WrKind::send, s.seq), nullptr, 0, 0, 0, 0,
                                 encode_imm(ImmKind::too_large, 0, s.seq), false));
    } else {
      const void* from = s.data;
      uint32_t lkey = 0;
      const bool inline_it = s.bytes <= max_inline_;
      if (!inline_it) {
        unsigned char* staging = eager_staging_.data() + size_t{d.eager_slot} * kEagerSlotBytes;
        std::memcpy(staging, s.data, s.bytes);
        from = staging;
        lkey = eager_staging_.lkey();
      }
      RETURN_IF_ERROR(post_write(qp, wr_id(WrKind::send, s.seq), from, s.bytes, lkey,
                                 peer_.eager_addr + uint64_t{d.eager_slot} * kEagerSlotBytes, peer_.eager_rkey,
                                 encode_imm(ImmKind::eager, d.eager_slot, s.seq), inline_it));
      s.eager_slot = static_cast<int>(d.eager_slot);
    }
    s.wrs_left = 1;
    s.started = true;
    ++sends_started_;
    if (shared_.stats != nullptr) ++shared_.stats->messages;
    send_ledger_.sent(d);
    return Status::ok();
  }
  const StripePlan plan = plan_stripes(s.seq, s.bytes, nqps, kMinStripeBytes, shared_.device->max_msg_bytes());
  if (plan.pieces.size() > kMaxPieces) {
    return invalid_argument("a " + std::to_string(s.bytes) + "-byte message needs more than " +
                            std::to_string(kMaxPieces) + " writes of this port's largest message (" +
                            std::to_string(shared_.device->max_msg_bytes()) + " bytes): send it in parts");
  }
  std::vector<uint32_t> need(nqps, 0);
  for (const Piece& p : plan.pieces) ++need[p.qp];
  for (uint32_t q = 0; q < nqps; ++q) {
    if (sq_used_[q] + need[q] > kSendDepth) return Status::ok();
  }
  if (s.bytes > 0) {
    Result<Mr> mr = shared_.memory->acquire(const_cast<void*>(s.data), s.bytes);
    if (!mr.is_ok()) return mr.status().with_context("registering the " + std::to_string(s.bytes) + "-byte send buffer: ");
    s.mr = mr.value();
    s.has_mr = true;
  }
  const uint32_t imm = encode_imm(ImmKind::data, static_cast<uint32_t>(plan.pieces.size() - 1), s.seq);
  for (const Piece& p : plan.pieces) {
    RETURN_IF_ERROR(post_write(p.qp, wr_id(WrKind::send, s.seq), static_cast<const char*>(s.data) + p.offset, p.bytes,
                               s.mr.lkey, d.cts.addr + p.offset, d.cts.rkey, imm, false));
  }
  s.wrs_left = static_cast<uint32_t>(plan.pieces.size());
  s.started = true;
  ++sends_started_;
  if (shared_.stats != nullptr) ++shared_.stats->messages;
  send_ledger_.sent(d);
  return Status::ok();
}

void IbConnection::progress(Clock::time_point now) {
  if (!started_ || !failure_.is_ok()) return;
  if (settled_) {
    // The last pass changed nothing and nothing arrived or was posted since: this one would
    // change nothing either, unless a held-back CTS fell due meanwhile.
    const std::optional<Clock::time_point> due = hold_.due();
    if (!due || (now == Clock::time_point{} ? Clock::now() : now) < *due) return;
  }
  const uint64_t reported = reports_;
  if (shared_.stats != nullptr) ++shared_.stats->passes;
  advance(now);
  if (!failure_.is_ok()) return batch_.clear();  // the QPs are in the error state
  settled_ = batch_.empty() && reports_ == reported;
  IbPostStats* stats = shared_.stats;
  Status st = batch_.flush(qps_, stats != nullptr ? &stats->doorbells : nullptr,
                           stats != nullptr ? &stats->work_requests : nullptr);
  if (!st.is_ok()) fail(st.code(), op_prefix(true) + st.message());
}

void IbConnection::advance(Clock::time_point now) {
  deliver();
  // Sends first: their data is what a peer waits for; a CTS is needed only by a rendezvous
  // message or a sender short of eager credits. They start in order, so the started ones are
  // those below the ledger's next seq.
  const size_t started = sends_.empty() ? 0 : send_ledger_.next_seq() - sends_.front().seq;
  for (size_t i = started; i < sends_.size(); ++i) {
    Send& s = sends_[i];
    Status st = start_send(s);
    if (!st.is_ok()) return fail(st.code(), st.message());
    if (!s.started) break;  // in order: the next waits for this one
  }
  hold_.pass_begins();
  while (RecvLedger::Receive* r = recv_.next_to_advertise()) {
    const CtsHold::Receive ask{r->seq, r->capacity, recv_.posted().back().seq == r->seq,
                               recv_.eager_consumed() - cts_consumed_reported_};
    // Only the newest receive can be held: the clock is read for it alone (passes are frequent).
    if (ask.newest && now == Clock::time_point{}) now = Clock::now();
    if (hold_.hold(ask, ask.newest ? now : Clock::time_point{})) break;  // cts_hold.h
    Status st = advertise(*r);
    if (!st.is_ok()) return fail(st.code(), st.message());
    if (!r->advertised) break;  // the send queue is full: later
  }
  // Nothing after the deliver() above makes an operation complete (starting sends and writing
  // CTS entries do not), so there is nothing more to report here.
}

void IbConnection::ask_before_sleep() {
  // Asking changes what start_send() does, for a send not yet started: only then is a pass due.
  if (sends_.empty() || send_ledger_.next_seq() - sends_.front().seq == sends_.size()) return;
  settled_ = false;
  asking_ = true;
  progress();
  asking_ = false;
}

std::optional<Clock::time_point> IbConnection::cts_due() const {
  if (!failure_.is_ok()) return std::nullopt;
  return hold_.due();
}

int IbConnection::poll_cq() {
  if (!cq_) return 0;
  ibv_wc wcs[32];
  int total = 0;
  for (;;) {
    const int n = ibv_poll_cq(cq_.get(), 32, wcs);
    if (n < 0) {
      fail(ErrorCode::system, "ibv_poll_cq failed (the device is gone?)");
      return total;
    }
    for (int i = 0; i < n; ++i) on_wc(wcs[i]);
    if (n > 0) settled_ = false;
    total += n;
    if (n < 32) return total;
  }
}

void IbConnection::on_wc(const ibv_wc& wc) {
  const WrKind kind = wr_kind(wc.wr_id);
  uint32_t qp = 0;
  while (qp < self_qps_.size() && self_qps_[qp].qpn != wc.qp_num) ++qp;
  if (kind != WrKind::recv && qp < sq_used_.size() && sq_used_[qp] > 0) --sq_used_[qp];
  if (wc.status != IBV_WC_SUCCESS) {
    if (failure_.is_ok()) {
      ErrorCode code = wc_error_code(wc.status);
      std::string cause = describe_wc_failure(wc, kind == WrKind::recv ? "receiving" : "writing", shared_.qp);
      explain_wc_failure(socket_.get(), *shared_.device, peer_rank_, code, cause);  // a dead peer, a down port
      fail(code, cause);
    }
    return;
  }
  if (!failure_.is_ok()) return;
  if (kind == WrKind::recv) {
    // Consumed receive work requests go back in chains of kRecvRepostBatch: one provider call
    // (a lock and a doorbell record) per chain instead of per message.
    Status st;
    if (++recv_owed_[qp] == kRecvRepostBatch) {
      recv_owed_[qp] = 0;
      st = post_recv_wrs(qp, kRecvRepostBatch);
    }
    const Imm imm = decode_imm(ntohl(wc.imm_data));
    if (st.is_ok() && imm.kind == ImmKind::cts && imm.aux == kImmAuxRts) {
      hold_.requested(widen_seq(imm.seq, recv_.completed()));  // progress() advertises it
    } else if (st.is_ok() && imm.kind == ImmKind::cts) {
      send_ledger_.on_cts(decode_cts(cts_ring_.data() + (imm.seq % kCtsEntries) * kCtsEntryBytes), imm.seq);
    } else if (st.is_ok()) {
      st = recv_.on_imm(imm, wc.byte_len);
    }
    if (!st.is_ok()) fail(st.code(), "from the peer: " + st.message());
    return;
  }
  if (kind == WrKind::send && !sends_.empty()) {
    const uint64_t seq = wr_value(wc.wr_id);
    if (seq < sends_.front().seq || seq - sends_.front().seq >= sends_.size()) return;
    Send& s = sends_[seq - sends_.front().seq];
    if (s.wrs_left > 0) --s.wrs_left;
    if (s.wrs_left == 0 && s.eager_slot >= 0) send_ledger_.staging_free(static_cast<uint32_t>(s.eager_slot));
  }
}

void IbConnection::release(Mr& mr, bool& has) {
  if (has) shared_.memory->release(mr);
  has = false;
}

void IbConnection::deliver() {
  while (RecvLedger::Receive* r = recv_.front_ready()) {
    Completion c{this, r->cookie, false, r->bytes, Status::ok()};
    if (r->too_large) {
      c.status = protocol_error(op_prefix(false) + "its message is larger than the " + std::to_string(r->capacity) +
                                "-byte receive buffer (the ranks disagree on a size: a bug above the transport)");
      c.bytes = 0;
    } else if (r->eager_slot >= 0) {
      if (r->bytes > r->capacity) {
        c.status = protocol_error(op_prefix(false) + "its " + std::to_string(r->bytes) +
                                  "-byte message is larger than the " + std::to_string(r->capacity) +
                                  "-byte receive buffer (the ranks disagree on a size: a bug above the transport)");
        c.bytes = 0;
      } else if (r->bytes > 0) {
        std::memcpy(r->data, eager_ring_.data() + size_t(r->eager_slot) * kEagerSlotBytes, r->bytes);
      }
    }
    if (!r->too_large) hold_.landed(r->capacity, r->eager_slot >= 0);
    // Only receives whose CTS was written were registered (advertise()): most small ones not.
    auto mr = recv_mrs_.empty() ? recv_mrs_.end() : recv_mrs_.find(r->seq);
    if (shared_.flush != nullptr && c.status.is_ok() && mr != recv_mrs_.end()) {  // gdr_flush.h
      Status st = shared_.flush->before_delivery(mr->second, r->data, r->bytes, r->eager_slot < 0);
      if (!st.is_ok()) return fail(st.code(), st.message());
    }
    if (mr != recv_mrs_.end()) {
      shared_.memory->release(mr->second);
      recv_mrs_.erase(mr);
    }
    recv_.pop_front();
    if (c.status.is_ok()) {
      report_ok(c.cookie, false, c.bytes);
    } else {
      report(std::move(c));
    }
  }
  while (!sends_.empty() && sends_.front().started && sends_.front().wrs_left == 0) {
    Send& s = sends_.front();
    release(s.mr, s.has_mr);
    report_ok(s.cookie, true, s.bytes);
    sends_.pop_front();
  }
}

Status IbConnection::arm() {
  if (!cq_) return Status::ok();
  if (ibv_req_notify_cq(cq_.get(), 0) != 0) return system_error(op_prefix(false) + "ibv_req_notify_cq", errno);
  return Status::ok();
}

std::string IbConnection::op_prefix(bool is_send) const {
  return std::string("ib ") + (is_send ? "send from rank " : "receive on rank ") + std::to_string(self_rank_) +
         (is_send ? " to rank " : " from rank ") + std::to_string(peer_rank_) + " at " + peer_address_ + " via " +
         shared_.device->where() + ": ";
}

void IbConnection::report(Completion c) {
  ++reports_;
  if (reporting_) shared_.ready->push_back(std::move(c));
}

void IbConnection::report_ok(uint64_t cookie, bool is_send, size_t bytes) {
  ++reports_;
  if (reporting_) shared_.ready->emplace_back(this, cookie, is_send, bytes);  // built in place
}

void IbConnection::fail(ErrorCode code, const std::string& cause, bool warn) {
  if (!failure_.is_ok()) return;
  failure_ = Status(code, cause);  // prefixed per operation (a send or a receive) when reported
  // Said here, once: the runtime may be waiting on another peer when this one fails, and the
  // peer sees only that this end closed.
  if (warn && code != ErrorCode::aborted) {
    BRAID_LOG(warn) << "ib connection of rank " << self_rank_ << " to rank " << peer_rank_ << " at " << peer_address_
                    << " via " << shared_.device->where() << " failed: " << cause;
  }
  // The NIC must not touch a buffer after its operation was reported: the error state flushes
  // every posted work request.
  for (auto& qp : qps_) {
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_ERR;
    (void)ibv_modify_qp(qp.get(), &a, IBV_QP_STATE);
  }
  for (Send& s : sends_) {
    release(s.mr, s.has_mr);
    report(Completion{this, s.cookie, true, 0, Status(code, op_prefix(true) + cause)});
  }
  sends_.clear();
  while (!recv_.posted().empty()) {
    const RecvLedger::Receive& r = recv_.posted().front();
    report(Completion{this, r.cookie, false, 0, Status(code, op_prefix(false) + cause)});
    recv_.posted().pop_front();
  }
  for (auto& [seq, mr] : recv_mrs_) shared_.memory->release(mr);
  recv_mrs_.clear();
  // The peer learns of it at once (its liveness socket reads EOF) rather than at its timeout.
  if (socket_.get() >= 0 && shared_.unwatch) shared_.unwatch(socket_.get());
  socket_.reset();
}

std::string IbConnection::stall_hint() const {
  if (!failure_.is_ok()) {
    return "ib connection to rank " + std::to_string(peer_rank_) + " at " + peer_address_ + " failed: " + failure_.message();
  }
  // A port that went down may leave a message neither delivered nor failed: the NIC reports
  // nothing until its retries run out, and Soft-RoCE has been seen not to report at all.
  if (shared_.device != nullptr) {
    if (std::string port = port_not_active_note(*shared_.device); !port.empty()) {
      return "ib: " + port;  // the report names the peer and its address already
    }
  }
  for (const Send& s : sends_) {
    if (!s.started) {
      return "ib: message " + std::to_string(s.seq) + " to rank " + std::to_string(peer_rank_) +
             " waits for the peer to post its receive (no clear-to-send yet)";
    }
  }
  return {};
}

}  // namespace braid::transport::ib
