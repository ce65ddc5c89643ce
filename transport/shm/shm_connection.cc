#include "transport/shm/shm_connection.h"

#include <poll.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <new>

namespace braid::transport::shm {

namespace {

int open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  return static_cast<int>(::syscall(SYS_pidfd_open, pid, 0));
#else
  (void)pid;
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

// The helpers of the send and poll paths are `inline`: private and used in this file only, they
// may then be inlined or called directly, not through the PLT of position-independent code.

ShmConnection::ShmConnection(ShmConnectionSetup setup) : s_(std::move(setup)) {
  auto* base = static_cast<unsigned char*>(s_.segment.base());
  header_ = reinterpret_cast<SegmentHeader*>(base);
  peer_end_ = &header_->ends[1 - s_.self_end];
  ring_ = header_->ring_bytes;
  const size_t out = static_cast<size_t>(s_.self_end), in = 1 - out;
  out_ctl_ = reinterpret_cast<RingControl*>(base + kHeaderBytes + out * kControlBytes);
  in_ctl_ = reinterpret_cast<RingControl*>(base + kHeaderBytes + in * kControlBytes);
  out_data_ = base + kDataOffset + out * ring_;
  in_data_ = base + kDataOffset + in * ring_;
  pidfd_ = UniqueFd(open_pidfd(s_.peer_pid));
  liveness_fd_ = pidfd_.get() >= 0 ? pidfd_.get() : s_.socket.get();
}

ShmConnection::~ShmConnection() {
  close();
  if (s_.forget) s_.forget(this);
}

std::string ShmConnection::who() const {
  return "rank " + std::to_string(s_.peer_rank) + " (pid " + std::to_string(s_.peer_pid) + ", " + s_.peer_address + ")";
}

bool ShmConnection::peer_reads_us() const {
  return peer_end_->cma_readable.load(std::memory_order_acquire) == kCmaYes;
}

int ShmConnection::peer_probe_errno() const {
  return static_cast<int>(peer_end_->probe_errno);
}

bool ShmConnection::single_copy(const void* data, size_t bytes) {
  if (s_.cma == CmaPolicy::off || bytes < kCmaMinBytes || !peer_reads_us()) return false;
  if (s_.cma == CmaPolicy::always) return true;
  if (bytes <= ring_ || s_.pages == nullptr) return false;
  if (s_.collapse != nullptr) return s_.collapse->make_huge(data, bytes);
  return worth_single_copy(s_.pages->small_bytes(data, bytes), bytes);
}

Status ShmConnection::queue_send(const Send& send, bool may_copy_once) {
  if (closed_) return invalid_argument("post_send on a closed shm connection to " + who());
  if (!broken_.is_ok()) {
    complete(true, send.cookie, 0, broken_);
    return Status::ok();
  }
  if (sends_.size() + acks_.size() >= kMaxInFlight) {
    return invalid_argument("more than " + std::to_string(kMaxInFlight) + " sends outstanding to " + who());
  }
  Send s = send;
  if (may_copy_once) s.cma = single_copy(s.data, s.len);
  if (sends_.empty() && !s.cma && write_whole(s.head, s.head_len, s.data, s.len, s.cookie)) {
    notify_peer();
    return Status::ok();
  }
  sends_.push_back(s);
  if (sends_.size() == 1 && write_sends()) notify_peer();  // a small message leaves at once
  return Status::ok();
}

// The usual small message (below the single-copy size) goes straight into the ring when it fits
// there now (may_write_at_once, write_whole): no Send is made or queued. Otherwise queue_send
// takes it. post_send and post_send_parts hand it over as their last act, so that their own
// part costs a few instructions and a jump.
Status ShmConnection::send_small(const unsigned char* head, size_t head_len, const unsigned char* data, size_t len,
                                 uint64_t cookie) {
  if (may_write_at_once(len) && write_whole(head, head_len, data, len, cookie)) {
    notify_peer();
    return Status::ok();
  }
  Send s{data, len, cookie, /*cma=*/false};
  s.head = head;
  s.head_len = head_len;
  return queue_send(s, false);
}

Status ShmConnection::post_send(const void* data, size_t bytes, uint64_t cookie) {
  const auto* bytes_at = static_cast<const unsigned char*>(data);
  if (bytes < kCmaMinBytes) return send_small(nullptr, 0, bytes_at, bytes, cookie);
  return queue_send(Send{bytes_at, bytes, cookie, /*cma=*/false}, true);
}

// Out of line, so that building the message costs post_send_parts' usual path nothing.
Status ShmConnection::parts_too_large(size_t len) const {
  return invalid_argument("a two-part message of " + std::to_string(len) + " bytes to " + who() + " is above the " +
                          std::to_string(kMaxPartsBytes) + " bytes shm takes in two parts");
}

Status ShmConnection::post_send_parts(const void* head, size_t head_bytes, const void* data, size_t bytes,
                                      uint64_t cookie) {
  const size_t len = head_bytes + bytes;
  if (len > kMaxPartsBytes) return parts_too_large(len);
  return send_small(static_cast<const unsigned char*>(head), head_bytes, static_cast<const unsigned char*>(data), len,
                    cookie);
}

// A message already waiting is read by the next poll, not here: an operation posts its receives
// before its sends, and a peer waiting for our send should not wait for this copy.
Status ShmConnection::post_recv(void* data, size_t capacity, uint64_t cookie) {
  if (closed_ || !broken_.is_ok() || recvs_.size() >= kMaxInFlight || recvs_.full()) {
    return post_recv_rarely(data, capacity, cookie);  // the usual path then calls nothing
  }
  recvs_.push_back(Recv{static_cast<unsigned char*>(data), capacity, cookie});
  return Status::ok();
}

// A receive refused, failed at once on a broken connection, or queued where the queue grows.
Status ShmConnection::post_recv_rarely(void* data, size_t capacity, uint64_t cookie) {
  if (closed_) return invalid_argument("post_recv on a closed shm connection to " + who());
  if (!broken_.is_ok()) {
    complete(false, cookie, 0, broken_);
    return Status::ok();
  }
  if (recvs_.size() >= kMaxInFlight) {
    return invalid_argument("more than " + std::to_string(kMaxInFlight) + " receives outstanding from " + who());
  }
  recvs_.push_back(Recv{static_cast<unsigned char*>(data), capacity, cookie});
  return Status::ok();
}

inline void ShmConnection::copy_in(uint64_t pos, const void* src, size_t n) {
  const size_t at = pos % ring_;
  const size_t first = std::min<size_t>(n, ring_ - at);
  std::memcpy(out_data_ + at, src, first);
  if (first < n) std::memcpy(out_data_, static_cast<const unsigned char*>(src) + first, n - first);
}

void ShmConnection::copy_message(uint64_t pos, const Send& s, size_t from, size_t n) {
  if (from < s.head_len) {
    const size_t first = std::min(n, s.head_len - from);
    copy_in(pos, s.head + from, first);
    pos += first;
    from += first;
    n -= first;
  }
  if (n > 0) copy_in(pos, s.data + (from - s.head_len), n);
}

inline void ShmConnection::copy_out(uint64_t pos, void* dst, size_t n) const {
  const size_t at = pos % ring_;
  const size_t first = std::min<size_t>(n, ring_ - at);
  std::memcpy(dst, in_data_ + at, first);
  if (first < n) std::memcpy(static_cast<unsigned char*>(dst) + first, in_data_, n - first);
}

void ShmConnection::complete(bool is_send, uint64_t cookie, size_t bytes, Status st) {
  if (s_.completions == nullptr) return;  // detached: nobody polls any more
  s_.completions->push_back(Completion{this, cookie, is_send, bytes, std::move(st)});
}

inline bool ShmConnection::write_sends() {
  bool changed = false;
  uint64_t head = out_ctl_->head.load(std::memory_order_acquire);
  uint64_t published = tail_;
  auto publish = [&] {
    if (tail_ != published) {
      out_ctl_->tail.store(tail_, std::memory_order_release);
      published = tail_;
      changed = true;
    }
  };
  while (!sends_.empty()) {
    Send& s = sends_.front();
    const uint64_t total = s.cma ? kRecordAlign : record_bytes(s.len);
    const uint64_t payload_end = s.cma ? kRecordHeaderBytes : kRecordHeaderBytes + s.len;
    while (s.written < total) {
      const uint64_t need = s.written == 0 ? kRecordHeaderBytes : 1;
      uint64_t room = ring_ - (tail_ - head);
      if (room < need) {
        publish();
        head = out_ctl_->head.load(std::memory_order_acquire);
        room = ring_ - (tail_ - head);
        if (room < need) return changed;  // the ring is full: the peer has not read yet
      }
      if (s.written == 0) {
        if (head == tail_ && wrap_fits(total)) continue;  // the record now starts the next lap
        RecordHeader h;
        h.len = s.len;
        h.kind = s.cma ? RecordKind::cma : RecordKind::inline_data;
        h.addr = s.cma ? reinterpret_cast<uint64_t>(s.data) : 0;
        h.seq = send_seq_;
        copy_in(tail_, &h, sizeof h);
        tail_ += sizeof h;
        s.written = sizeof h;
      } else if (s.written < payload_end) {
        const size_t n = std::min<uint64_t>({room, payload_end - s.written, kChunkBytes});
        copy_message(tail_, s, s.written - kRecordHeaderBytes, n);
        tail_ += n;
        s.written += n;
        if (n == kChunkBytes) publish();
      } else {
        const uint64_t n = std::min<uint64_t>(room, total - s.written);  // padding to the next line
        tail_ += n;
        s.written += n;
      }
    }
    ++send_seq_;
    // Sends complete in the order they were posted: an inline send behind a cma send that is
    // still being read waits for it.
    if (s.cma) s.cma_index = ++cma_sent_;
    if (s.cma || !acks_.empty()) {
      acks_.push_back(s);
    } else {
      complete_ok(true, s.cookie, s.len);
    }
    sends_.pop_front();
    changed = true;
  }
  publish();
  return changed;
}

// The usual small send, with nothing queued ahead of it: its whole record fits in the ring now,
// in one piece (sent to the next lap by a wrap record where it would run over the ring's end),
// so it is written at once, without a queue entry or the piecewise walk of write_sends (whose
// records it writes byte for byte alike). false: nothing was written, write_sends takes it.
// Always inline: send_small's frame holds it, and queue_send, which also tries it, is rare.
[[gnu::always_inline]] inline bool ShmConnection::write_whole(const unsigned char* head, size_t head_len,
                                                               const unsigned char* data, size_t len, uint64_t cookie) {
  if (len > kChunkBytes) return false;  // larger ones are published piece by piece
  const uint64_t total = record_bytes(len);
  const uint64_t peer_head = out_ctl_->head.load(std::memory_order_acquire);
  uint64_t at = tail_ % ring_;
  if (peer_head == tail_ && at != 0 && 2 * total <= at) {  // as wrap_fits
    write_wrap(at);
    at = 0;
  }
  const uint64_t room = ring_ - (tail_ - peer_head);
  if (room < total) return false;
  if (at + total > ring_) {
    // It would run over the ring's end: a wrap record sends the reader to the next lap, where
    // the record starts whole, when the room allows both (shm_layout.h).
    if (room < ring_ - at + total) return false;
    write_wrap(at);
    at = 0;
  }
  unsigned char* record = out_data_ + at;
  new (record) RecordHeader{.len = len, .kind = RecordKind::inline_data, .seq = send_seq_};  // stored in place
  copy_bytes(record + kRecordHeaderBytes, head, head_len);
  copy_bytes(record + kRecordHeaderBytes + head_len, data, len - head_len);
  tail_ += total;
  ++send_seq_;
  ++whole_written_;
  out_ctl_->tail.store(tail_, std::memory_order_release);
  if (acks_.empty()) {
    complete_ok(true, cookie, len);
  } else {  // behind a single-copy send still being read
    Send s{data, len, cookie, /*cma=*/false};
    s.written = total;
    s.head = head;
    s.head_len = head_len;
    acks_.push_back(s);
  }
  return true;
}

// With the ring empty, a record of `total` bytes that fits twice in the part of this lap already
// read goes to the start of the next one (shm_layout.h): a wrap record here says so to the
// reader. Twice: until the reader passes the wrap record, what follows has only the rest of that
// part, and a message sent right behind this one should find room there.
inline bool ShmConnection::wrap_fits(uint64_t total) {
  const uint64_t into_lap = tail_ % ring_;
  if (into_lap == 0 || 2 * total > into_lap) return false;
  write_wrap(into_lap);
  return true;
}

// A wrap record at the tail, `at` (tail_ % ring_, not 0) into its lap, and the tail to the next
// lap. A record starts on a kRecordAlign boundary of a ring that is a multiple of it, so the
// wrap record's header fits before the ring's end.
inline void ShmConnection::write_wrap(uint64_t at) {
  new (out_data_ + at) RecordHeader{.len = 0, .kind = RecordKind::wrap, .seq = send_seq_};
  tail_ += ring_ - at;
}

inline bool ShmConnection::collect_acks() {
  if (acks_.empty()) return false;
  const uint64_t done = out_ctl_->cma_done.load(std::memory_order_acquire);
  bool changed = false;
  while (!acks_.empty() && (!acks_.front().cma || acks_.front().cma_index <= done)) {
    complete_ok(true, acks_.front().cookie, acks_.front().len);
    acks_.pop_front();
    changed = true;
  }
  return changed;
}

inline bool ShmConnection::read_records() {
  bool changed = false;
  uint64_t tail = in_ctl_->tail.load(std::memory_order_acquire);
  uint64_t published = head_;
  auto publish = [&] {
    if (head_ != published) {
      in_ctl_->head.store(head_, std::memory_order_release);
      published = head_;
      changed = true;
    }
  };
  for (;;) {
    if (in_record_ && cur_.kind == RecordKind::cma && !recv_done_) {
      changed = true;
      if (!read_cma_piece()) break;  // more to read: the other peers' turn first
      if (!broken_.is_ok()) return true;
      continue;  // its padding is read below
    }
    uint64_t avail = tail - head_;
    // A receive whose payload is all read (a 0-byte message) completes without more bytes.
    const bool payload_read = in_record_ && cur_.kind == RecordKind::inline_data &&
                              cur_read_ >= kRecordHeaderBytes + cur_.len;
    const uint64_t need = !in_record_ ? kRecordHeaderBytes : (payload_read && !recv_done_ ? 0 : 1);
    if (avail < need) {
      publish();
      tail = in_ctl_->tail.load(std::memory_order_acquire);
      avail = tail - head_;
      if (avail < need) break;
    }
    if (!in_record_) {
      if (recvs_.empty()) break;  // the record waits for its receive
      // A record starts on a kRecordAlign boundary of a ring that is a multiple of it, so its
      // header never wraps.
      const uint64_t at = head_ % ring_;
      std::memcpy(&cur_, in_data_ + at, sizeof cur_);
      const bool kind_ok = cur_.kind == RecordKind::inline_data || cur_.kind == RecordKind::cma ||
                           (cur_.kind == RecordKind::wrap && at != 0);
      if (cur_.seq != recv_seq_ || !kind_ok) {
        fail_all(protocol_error("shm connection from " + who() + ": a record with number " +
                                std::to_string(cur_.seq) + " and kind " +
                                std::to_string(static_cast<uint32_t>(cur_.kind)) + " where message " +
                                std::to_string(recv_seq_) + " was due: the shared ring is corrupt"));
        return true;
      }
      if (cur_.kind == RecordKind::wrap) {  // the next record starts the next lap
        head_ = next_lap(head_, ring_);
        changed = true;
        continue;
      }
      if (cur_.kind == RecordKind::inline_data && take_whole(at, avail)) {
        changed = true;
        continue;
      }
      head_ += sizeof cur_;
      cur_read_ = sizeof cur_;
      in_record_ = true;
      recv_done_ = false;
      ++recv_seq_;
      changed = true;
      cma_copied_ = 0;
      continue;  // a cma record is read at the top of the loop
    }
    const uint64_t total = cur_.kind == RecordKind::cma ? kRecordAlign : record_bytes(cur_.len);
    const uint64_t payload_end = cur_.kind == RecordKind::cma ? kRecordHeaderBytes : kRecordHeaderBytes + cur_.len;
    if (cur_read_ < payload_end) {
      const size_t n = std::min<uint64_t>({avail, payload_end - cur_read_, kChunkBytes});
      const Recv& r = recvs_.front();
      if (cur_.len <= r.capacity) copy_out(head_, r.data + (cur_read_ - kRecordHeaderBytes), n);
      head_ += n;
      cur_read_ += n;
      if (n == kChunkBytes) publish();
    }
    if (!recv_done_ && cur_read_ >= payload_end) {
      const Recv r = recvs_.front();
      recvs_.pop_front();
      recv_done_ = true;
      if (cur_.len > r.capacity) {
        complete(false, r.cookie, 0,
                 protocol_error("shm receive from " + who() + ": a message of " + std::to_string(cur_.len) +
                                " bytes arrived for a buffer of " + std::to_string(r.capacity) +
                                " (the two ranks disagree on a size)"));
      } else {
        complete_ok(false, r.cookie, cur_.len);
      }
      changed = true;
    }
    if (cur_read_ >= payload_end) {
      const uint64_t n = std::min<uint64_t>(tail - head_, total - cur_read_);
      head_ += n;
      cur_read_ += n;
      if (cur_read_ == total) in_record_ = false;
    }
  }
  publish();
  return changed;
}

// The usual small message (cur_, its header just read at head_): when its whole record has
// arrived, in one piece before the ring's end, and fits the receive, its payload goes to the
// receive in one copy and the record is consumed, without the piecewise walk of read_records.
// false: nothing changed.
inline bool ShmConnection::take_whole(uint64_t at, uint64_t avail) {
  const uint64_t total = record_bytes(cur_.len);
  const Recv r = recvs_.front();
  if (cur_.len > kChunkBytes || avail < total || at + total > ring_ || cur_.len > r.capacity) return false;
  copy_bytes(r.data, in_data_ + at + kRecordHeaderBytes, cur_.len);
  head_ += total;
  ++recv_seq_;
  ++whole_read_;
  recvs_.pop_front();
  complete_ok(false, r.cookie, cur_.len);
  return true;
}

// Reads the next piece of the cma record being read; true once the message is done (its
// receive completed, successfully or not). The peer's send completes when it sees cma_done.
bool ShmConnection::read_cma_piece() {
  const Recv& r = recvs_.front();
  Status st;
  if (cur_.len > r.capacity) {
    st = protocol_error("shm receive from " + who() + ": a message of " + std::to_string(cur_.len) +
                        " bytes arrived for a buffer of " + std::to_string(r.capacity) +
                        " (the two ranks disagree on a size)");
  } else {
    const uint64_t end = std::min<uint64_t>(cur_.len, cma_copied_ + kCmaPieceBytes);
    while (cma_copied_ < end) {
      iovec local{r.data + cma_copied_, end - cma_copied_};
      iovec remote{reinterpret_cast<void*>(cur_.addr + cma_copied_), end - cma_copied_};
      const ssize_t n = ::process_vm_readv(s_.peer_pid, &local, 1, &remote, 1, 0);
      if (n > 0) {
        cma_copied_ += static_cast<uint64_t>(n);
      } else if (n < 0 && errno == EINTR) {
        continue;
      } else {
        st = cma_read_error(n < 0 ? errno : EIO);
        break;
      }
    }
    if (st.is_ok() && cma_copied_ < cur_.len) return false;
  }
  recv_done_ = true;
  if (!st.is_ok() && peer_gone_) {
    fail_all(st);  // nothing more comes from a dead peer: this receive and all that wait fail
    return true;
  }
  const uint64_t cookie = r.cookie;
  recvs_.pop_front();
  in_ctl_->cma_done.fetch_add(1, std::memory_order_release);
  complete(false, cookie, st.is_ok() ? cur_.len : 0, std::move(st));
  return true;
}

// Why a process_vm_readv of the peer's buffer failed: the peer died (its memory is gone with
// it), or something else, named with the call and errno.
Status ShmConnection::cma_read_error(int err) {
  bool exited = err == ESRCH;
  if (!exited && pidfd_.get() >= 0) {
    pollfd p{pidfd_.get(), POLLIN, 0};
    exited = ::poll(&p, 1, 0) == 1;
  }
  if (exited) {
    peer_gone_ = true;
    return lost_status("shm receive");
  }
  return system_error("shm receive on rank " + std::to_string(s_.self_rank) + " of a " + std::to_string(cur_.len) +
                          "-byte message from " + who() + " (single copy, process_vm_readv at byte " +
                          std::to_string(cma_copied_) + ")",
                      err);
}

// progress() past its first look and the whole-record path: the general walk, which writes
// what is queued, reads records piecewise, collects single-copy acknowledgements and notices a
// peer that closed.
bool ShmConnection::walk() {
  ++walks_;
  bool changed = write_sends();
  changed = read_records() || changed;
  changed = collect_acks() || changed;
  if (changed) notify_peer();
  if (!peer_gone_ && peer_end_->closed.load(std::memory_order_acquire) != 0) {
    peer_gone_ = true;
    read_records();  // what it wrote before it closed is still delivered
  }
  if (peer_gone_ && broken_.is_ok() && (!idle() || in_record_)) {
    fail_all(lost_status(sends_.empty() && acks_.empty() ? "shm receive" : "shm send"));
    changed = true;
  }
  return changed;
}

void ShmConnection::peer_exited() {
  if (peer_gone_) return;
  peer_gone_ = true;
  read_records();
}

Status ShmConnection::lost_status(const char* op) const {
  const bool closed = peer_end_->closed.load(std::memory_order_acquire) != 0;
  return peer_lost(std::string(op) + " on rank " + std::to_string(s_.self_rank) + " with " + who() + ": " +
                   (closed ? "the peer closed its connection (its communicator was destroyed or aborted)"
                           : "the peer process exited (killed or crashed)") +
                   " while operations were outstanding; check rank " + std::to_string(s_.peer_rank) +
                   "'s output and exit status (and the kernel log for the OOM killer)");
}

void ShmConnection::fail_all(const Status& st) {
  if (broken_.is_ok()) broken_ = st;
  for (size_t i = 0; i < sends_.size(); ++i) complete(true, sends_[i].cookie, 0, broken_);
  for (size_t i = 0; i < acks_.size(); ++i) complete(true, acks_[i].cookie, 0, broken_);
  for (size_t i = 0; i < recvs_.size(); ++i) complete(false, recvs_[i].cookie, 0, broken_);
  sends_.clear();
  acks_.clear();
  recvs_.clear();
}

void ShmConnection::wake_peer() {
  const uint64_t one = 1;
  ssize_t n = ::write(s_.peer_eventfd.get(), &one, sizeof one);
  (void)n;  // EAGAIN: the counter is already huge, so the peer is awake anyway
}

void ShmConnection::set_sleeping(bool on) {
  header_->ends[s_.self_end].sleeping.store(on ? 1 : 0, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_seq_cst);
}

void ShmConnection::close() {
  if (closed_) return;
  fail_all(Status(ErrorCode::aborted, "shm connection to " + who() + " was closed by this rank"));
  closed_ = true;
  header_->ends[s_.self_end].closed.store(1, std::memory_order_release);
  std::atomic_thread_fence(std::memory_order_seq_cst);
  const uint64_t one = 1;
  ssize_t n = ::write(s_.peer_eventfd.get(), &one, sizeof one);  // whether it sleeps or not
  (void)n;
}

// The peer's closed flag, or its liveness descriptor readable: its process exited (pidfd), or
// the setup's socket reached EOF (the kernel closed it with the process). peer_gone_ is the
// owner's, read only before close(), after which other threads may ask.
bool ShmConnection::peer_ended() const {
  if (!closed_ && peer_gone_) return true;
  if (peer_end_->closed.load(std::memory_order_acquire) != 0) return true;
  pollfd p{liveness_fd_, POLLIN, 0};
  return liveness_fd_ >= 0 && ::poll(&p, 1, 0) == 1;
}

std::string ShmConnection::stall_hint() const {
  if (peer_gone_) return "the shm peer " + who() + " is gone";
  if (!sends_.empty()) return "the shm ring to " + who() + " is full: that rank is not receiving";
  return {};
}

}  // namespace braid::transport::shm
