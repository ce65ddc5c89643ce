#include "transport/tcp/tcp_connection.h"

#include <netinet/in.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>
#include <sstream>

#include "common/log.h"
#include "transport/tcp/shared_cpu_path.h"

namespace braid::transport::tcp {

namespace {
// slice_len is 32 bits on the wire; bigger slices go as several frames on the same socket.
constexpr size_t kMaxFrameBytes = size_t{1} << 30;
}  // namespace

TcpConnection::TcpConnection(ConnectionSetup setup)
    : engine_(setup.engine),
      completions_(setup.completions),
      comm_id_(setup.comm_id),
      self_rank_(setup.self_rank),
      peer_rank_(setup.peer_rank),
      peer_address_(std::move(setup.peer_address)),
      peer_timeout_s_(setup.peer_timeout_s),
      self_host_(setup.self_host) {
  for (size_t i = 0; i < setup.sockets.size(); ++i) {
    streams_.push_back(std::make_unique<TcpStream>(this, static_cast<int>(i), std::move(setup.sockets[i])));
  }
  learn_peer_host(setup.peer_host);
}

TcpConnection::~TcpConnection() { close(); }

Status TcpConnection::start() {
  for (auto& s : streams_) RETURN_IF_ERROR(engine_->add(s.get()));
  return Status::ok();
}

uint64_t TcpConnection::retransmissions() const {
  uint64_t n = 0;
  for (const auto& s : streams_) {
    tcp_info info{};
    socklen_t len = sizeof info;
    if (s->fd() >= 0 && getsockopt(s->fd(), IPPROTO_TCP, TCP_INFO, &info, &len) == 0) n += info.tcpi_total_retrans;
  }
  return n;
}

namespace {

// Whether the TCP state of `fd` says the peer's end is gone: its FIN or reset arrived. While it
// lives the socket is ESTABLISHED, or FIN_WAIT1/2 once this end shut its side down (close()).
bool peer_end_arrived(int fd) {
  tcp_info info{};
  socklen_t len = sizeof info;
  if (fd < 0 || getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len) != 0) return false;
  return info.tcpi_state != TCP_ESTABLISHED && info.tcpi_state != TCP_FIN_WAIT1 && info.tcpi_state != TCP_FIN_WAIT2;
}

}  // namespace

// Once this end shut its sockets down (close(), or a failure of its own), an end arriving from
// the peer may be its transport's answer to that, as well as its death: after close() it is
// reported (the caller knows it closed), after a failure of another kind it is not.
bool TcpConnection::peer_ended() const {
  if (failed_.code() == ErrorCode::peer_lost) return true;
  if (closed_) return peer_end_arrived(liveness_fd_.get());
  if (failed()) return false;
  for (const auto& s : streams_) {
    if (s != nullptr && (s->ended() || peer_end_arrived(s->fd()))) return true;
  }
  return false;
}

std::string TcpConnection::describe_peer() const {
  return "rank " + std::to_string(peer_rank_) + " (" + peer_address_ + ")";
}

Status TcpConnection::post_send(const void* data, size_t bytes, uint64_t cookie) {
  RETURN_IF_ERROR(engine_->check_owner());
  if (closed_) return invalid_argument("post_send on a closed connection to " + describe_peer());
  const char* p = static_cast<const char*>(data);
  if (sends_.empty() && bytes <= kGatherBytes - kFrameHeaderBytes && streams_.size() == 1 &&
      streams_[0]->on_shared_cpu_path && !failed()) {
    return send_now(p, bytes, cookie);
  }
  if (sends_.size() >= kMaxInFlight) {
    return invalid_argument("more than " + std::to_string(kMaxInFlight) + " sends outstanding to " + describe_peer());
  }
  uint64_t seq = first_send_seq_ + sends_.size();
  size_t n = streams_.size();
  size_t slices = (bytes < kStripeMinBytes || n == 1) ? 1 : n;
  int frames = 0;
  for (size_t k = 0; k < slices; ++k) {
    // One slice on one socket is the common case; it skips the divisions (~40-90 cycles each).
    size_t begin = slices == 1 ? 0 : bytes * k / slices;
    size_t end = slices == 1 ? bytes : bytes * (k + 1) / slices;
    TcpStream* stream = streams_[n == 1 ? 0 : (seq + k) % n].get();
    do {  // at least one frame, so a 0-byte message still travels
      size_t len = std::min(end - begin, kMaxFrameBytes);
      FrameHeader h;
      h.slice_len = static_cast<uint32_t>(len);
      h.seq = seq;
      h.total_len = bytes;
      h.offset = begin;
      if (!failed()) stream->queue_frame(h, p + begin);
      ++frames;
      begin += len;
    } while (begin < end);
    if (!failed()) engine_->kick(stream);
  }
  sends_.push_back(SendOp{cookie, bytes, failed() ? 0 : frames});
  if (failed()) after_io();
  return Status::ok();
}

// On one CPU every layer a message passes between the two system calls of a ping-pong costs
// its time (shared_cpu_path.h): a small message with nothing queued before it goes to the kernel
// here, and completes at once when the kernel took it whole, without queueing, a kick or a pass
// of the engine. What the kernel did not take is queued as usual.
Status TcpConnection::send_now(const char* data, size_t bytes, uint64_t cookie) {
  TcpStream* stream = streams_[0].get();
  FrameHeader h;
  h.slice_len = static_cast<uint32_t>(bytes);
  h.seq = first_send_seq_;
  h.total_len = bytes;
  const size_t sent = send_frame_now(stream, h, data);
  if (sent == kFrameHeaderBytes + bytes) {
    completions_->push_back(Completion{this, cookie, true, bytes, Status::ok()});
    ++first_send_seq_;
    return Status::ok();
  }
  if (!failed()) {
    stream->queue_frame(h, data, sent);
    engine_->kick(stream);
  }
  sends_.push_back(SendOp{cookie, bytes, failed() ? 0 : 1});
  if (failed()) after_io();
  return Status::ok();
}

Status TcpConnection::post_recv(void* data, size_t capacity, uint64_t cookie) {
  RETURN_IF_ERROR(engine_->check_owner());
  if (closed_) return invalid_argument("post_recv on a closed connection to " + describe_peer());
  if (recvs_.size() >= kMaxInFlight) {
    return invalid_argument("more than " + std::to_string(kMaxInFlight) + " receives outstanding from " +
                            describe_peer());
  }
  uint64_t seq = first_recv_seq_ + recvs_.size();
  RecvOp op;
  op.data = static_cast<char*>(data);
  op.capacity = capacity;
  op.cookie = cookie;
  recvs_.push_back(std::move(op));
  if (failed()) {
    after_io();
    return Status::ok();
  }
  for (auto& s : streams_) {
    if (s->parked() && s->header().seq == seq) s->dispatch_header();
    // The shared-CPU path asks its stream what it wants to receive on every pass: no kick.
    if (!s->on_shared_cpu_path) engine_->kick(s.get());
  }
  return Status::ok();
}

void TcpConnection::learn_peer_host(const HostIdentity& peer) {
  if (!shares_single_cpu(self_host_, peer)) return;
  shared_cpu_.emplace();
  BRAID_LOG(info) << "rank " << self_rank_ << " and " << describe_peer() << " both run on CPU "
                  << describe_cpus(self_host_.cpus) << " only: waits sleep at once instead of spinning";
}

void TcpConnection::on_frame_header(TcpStream* stream) {
  const FrameHeader& h = stream->header();
  if (failed()) return stream->park();
  if (h.seq < first_recv_seq_) {
    return on_stream_failed(stream, protocol_error("frame of message " + std::to_string(h.seq) + " arrived after it was complete"));
  }
  if (h.seq >= first_recv_seq_ + recvs_.size()) return stream->park();  // its receive is not posted yet
  RecvOp& op = recvs_[h.seq - first_recv_seq_];
  if (!op.header_seen) {
    op.header_seen = true;
    op.total = h.total_len;
    if (op.total > op.capacity) {
      op.status = protocol_error("message " + std::to_string(h.seq) + " from " + describe_peer() + " has " +
                                 std::to_string(op.total) + " bytes but the posted receive holds only " +
                                 std::to_string(op.capacity) + " (do both ranks agree on the sizes?)");
    }
  }
  if (h.total_len != op.total || h.offset > op.total || h.slice_len > op.total - h.offset) {
    return on_stream_failed(stream, protocol_error("inconsistent frame header (offset " + std::to_string(h.offset) +
                                                   ", slice " + std::to_string(h.slice_len) + ", total " +
                                                   std::to_string(h.total_len) + ")"));
  }
  if (op.status.is_ok()) {
    stream->land_payload(op.data + h.offset);
  } else {
    stream->drain_payload();  // keep the byte stream in step; the next message is still good
  }
}

bool TcpConnection::deliver_whole(const FrameHeader& h, const char* payload) {
  if (recvs_.empty() || h.seq != first_recv_seq_ || h.offset != 0 || h.slice_len != h.total_len || failed()) {
    return false;
  }
  RecvOp& op = recvs_.front();
  if (op.header_seen || h.total_len > op.capacity) return false;
  std::memcpy(op.data, payload, h.slice_len);
  completions_->push_back(Completion{this, op.cookie, false, h.total_len, Status::ok()});
  recvs_.pop_front();
  ++first_recv_seq_;
  return true;
}

void TcpConnection::on_slice_received(uint64_t seq, size_t bytes) {
  if (seq < first_recv_seq_ || seq >= first_recv_seq_ + recvs_.size()) return;
  recvs_[seq - first_recv_seq_].received += bytes;
  complete_recvs();
}

void TcpConnection::complete_recvs() {
  if (failed()) return;  // after_io delivers them, failed
  while (!recvs_.empty() && recvs_.front().header_seen && recvs_.front().received == recvs_.front().total) {
    RecvOp& op = recvs_.front();
    completions_->push_back(Completion{this, op.cookie, false, op.total, op.status});
    recvs_.pop_front();
    ++first_recv_seq_;
  }
}

void TcpConnection::on_frame_sent(uint64_t seq) {
  if (seq < first_send_seq_ || seq >= first_send_seq_ + sends_.size()) return;
  --sends_[seq - first_send_seq_].frames_left;
  complete_sends();
}

void TcpConnection::on_zero_copy_queued(uint64_t seq) {
  if (seq < first_send_seq_ || seq >= first_send_seq_ + sends_.size()) return;
  ++sends_[seq - first_send_seq_].notifications_left;
}

void TcpConnection::on_zero_copy_done(uint16_t seq_low) {
  // At most kMaxInFlight (< 2^16) sends are outstanding, so the low 16 bits name one of them.
  for (size_t i = 0; i < sends_.size(); ++i) {
    if (static_cast<uint16_t>(first_send_seq_ + i) == seq_low && sends_[i].notifications_left > 0) {
      --sends_[i].notifications_left;
      break;
    }
  }
  complete_sends();
}

void TcpConnection::complete_sends() {
  if (failed()) return;
  while (!sends_.empty() && sends_.front().frames_left == 0 && sends_.front().notifications_left == 0) {
    completions_->push_back(Completion{this, sends_.front().cookie, true, sends_.front().bytes, Status::ok()});
    sends_.pop_front();
    ++first_send_seq_;
  }
}

void TcpConnection::on_stream_failed(TcpStream* stream, Status status) {
  BRAID_LOG(warn) << "connection to " << describe_peer() << " socket " << stream->index() << ": " << status.message();
  fail(Status(status.code(), "connection to " + describe_peer() + ": " + status.message()));
}

void TcpConnection::on_stream_lost(TcpStream* stream, int err, bool sending) {
  if (err == 0 && !sending && stream->between_frames()) {
    // A clean end of one socket: the peer closed after its last message, whose frames (or a
    // later message's) other sockets may still hold. The peer is gone only once every socket
    // ended, or one ended in the middle of a frame.
    stream->end();
    bool all_ended = true;
    for (const auto& s : streams_) all_ended = all_ended && s->ended();
    if (!all_ended) return;
  }
  std::ostringstream m;
  m << describe_peer() << " ";
  if (err == 0 || err == EPIPE) {
    m << "closed the connection";
  } else if (err == ECONNRESET) {
    m << "reset the connection";
  } else if (err == ETIMEDOUT) {
    m << "went silent for " << peer_timeout_s_ << " s (BRAID_PEER_TIMEOUT_S)";
  } else {
    m << "failed (" << std::strerror(err) << ")";
  }
  m << " during a " << (sending ? "send" : "receive") << " on socket " << stream->index();
  if (err == ETIMEDOUT) {
    m << "; the host or the network path to it is probably down";
  } else {
    m << "; it probably exited or crashed - check its output";
  }
  fail(peer_lost(m.str()));
}

void TcpConnection::fail(Status status) {
  if (failed()) return;
  failed_ = std::move(status);
  for (auto& s : streams_) s->shutdown();
  after_io();
}

void TcpConnection::after_io() {
  if (!failed() || (sends_.empty() && recvs_.empty())) return;
  for (auto& s : streams_) {
    if (s->in_flight()) return;  // the kernel may still write into (or read from) a buffer
  }
  flush_failures();
}

void TcpConnection::flush_failures() {
  for (auto& op : sends_) completions_->push_back(Completion{this, op.cookie, true, 0, failed_});
  for (auto& op : recvs_) completions_->push_back(Completion{this, op.cookie, false, 0, failed_});
  first_send_seq_ += sends_.size();
  first_recv_seq_ += recvs_.size();
  sends_.clear();
  recvs_.clear();
}

void TcpConnection::close() {
  if (closed_) return;
  closed_ = true;
  fail(Status(ErrorCode::aborted, "connection to " + describe_peer() + " was closed by this rank"));
  Deadline deadline = Deadline::after(std::chrono::seconds(2));
  for (auto& s : streams_) {
    engine_->remove(s.get(), deadline);
    if (s->in_flight()) {
      // The kernel still holds buffers of this stream: keeping its memory is the safe choice.
      BRAID_LOG(warn) << "socket " << s->index() << " to " << describe_peer() << " did not quiesce; leaking it";
      (void)s.release();
    }
  }
  flush_failures();
  // fail() shut every socket down, which told the peer; one socket is kept open (a duplicate)
  // so that peer_ended() still answers after close(), as shrink() asks.
  for (const auto& s : streams_) {
    if (s != nullptr && s->fd() >= 0 && liveness_fd_.get() < 0) liveness_fd_ = UniqueFd(::fcntl(s->fd(), F_DUPFD_CLOEXEC, 0));
  }
  streams_.clear();
  shared_cpu_.reset();
}

}  // namespace braid::transport::tcp
