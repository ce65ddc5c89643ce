#include "transport/tcp/tcp_stream.h"

#include <algorithm>
#include <cstring>

#include "transport/tcp/tcp_connection.h"

namespace braid::transport::tcp {

namespace {
constexpr size_t kDrainBytes = 64 << 10;
constexpr size_t kMaxSendBytes = size_t{1} << 30;
}

TcpStream::TcpStream(TcpConnection* connection, int index, UniqueFd fd)
    : connection_(connection), index_(index), fd_(std::move(fd)) {}

void TcpStream::shutdown() {
  if (fd_.get() >= 0) ::shutdown(fd_.get(), SHUT_RDWR);
}

void TcpStream::queue_frame(const FrameHeader& header, const char* data) {
  frames_.push_back(OutFrame{header, data});
}

size_t TcpStream::prepare_send(size_t zero_copy_bytes, bool* zero_copy, uint64_t* zero_copy_seq) {
  *zero_copy = false;
  msg_ = msghdr{};
  if (connection_->failed()) return 0;
  int n = 0;
  size_t bytes = 0;
  for (OutFrame& f : frames_) {
    if (n + 2 > kMaxIov) break;
    bool big = zero_copy_bytes != 0 && f.header.slice_len >= zero_copy_bytes;
    if (big && n > 0) break;  // a zero-copy frame travels alone so its notification names one message
    if (big && f.sent < kFrameHeaderBytes) {
      // The header lives in frames_, which drops the frame when the send completes - before the
      // zero-copy notification, while the kernel may still read the pages. So the header goes
      // by a plain (copying) send of its own, and only the caller's payload by zero-copy.
      iov_[n++] = {reinterpret_cast<unsigned char*>(&f.header) + f.sent, kFrameHeaderBytes - f.sent};
      bytes += kFrameHeaderBytes - f.sent;
      break;
    }
    // One sendmsg moves at most ~2 GiB (MAX_RW_COUNT); frames are at most 1 GiB.
    if (n > 0 && bytes + (f.total() - f.sent) > kMaxSendBytes) break;
    if (f.sent < kFrameHeaderBytes) {
      iov_[n++] = {reinterpret_cast<unsigned char*>(&f.header) + f.sent, kFrameHeaderBytes - f.sent};
    }
    size_t payload_done = f.sent > kFrameHeaderBytes ? f.sent - kFrameHeaderBytes : 0;
    if (f.header.slice_len > payload_done) {
      iov_[n++] = {const_cast<char*>(f.data) + payload_done, f.header.slice_len - payload_done};
    }
    bytes += f.total() - f.sent;
    if (big) {
      *zero_copy = true;
      *zero_copy_seq = f.header.seq;
      break;
    }
  }
  msg_ = msghdr{};
  msg_.msg_iov = iov_;
  msg_.msg_iovlen = static_cast<size_t>(n);
  return bytes;
}

void TcpStream::on_sent(size_t bytes) {
  while (bytes > 0 && !frames_.empty()) {
    OutFrame& f = frames_.front();
    size_t take = std::min(bytes, f.total() - f.sent);
    f.sent += take;
    bytes -= take;
    if (f.sent == f.total()) {
      uint64_t seq = f.header.seq;
      frames_.pop_front();
      connection_->on_frame_sent(seq);
    }
  }
}

std::span<char> TcpStream::recv_target() {
  if (connection_->failed()) return {};
  switch (state_) {
    case RecvState::header:
      if (!connection_->recv_wanted()) return {};
      return {reinterpret_cast<char*>(header_buf_) + header_got_, kFrameHeaderBytes - header_got_};
    case RecvState::parked:
      return {};
    case RecvState::payload:
      return {dest_ + payload_got_, header_.slice_len - payload_got_};
    case RecvState::drain:
      if (!drain_buf_) drain_buf_ = std::make_unique<char[]>(kDrainBytes);
      return {drain_buf_.get(), std::min(kDrainBytes, header_.slice_len - payload_got_)};
  }
  return {};
}

void TcpStream::on_received(size_t bytes) {
  if (state_ == RecvState::header) {
    header_got_ += bytes;
    if (header_got_ < kFrameHeaderBytes) return;
    header_got_ = 0;
    header_ = decode_frame(header_buf_);
    payload_got_ = 0;
    if (header_.magic != kFrameMagic || header_.type != FrameType::data) {
      connection_->on_stream_failed(this, protocol_error("received bytes that are not a braid frame"));
      return;
    }
    dispatch_header();
    return;
  }
  payload_got_ += bytes;
  if (payload_got_ == header_.slice_len) {
    slice_finished();
  } else if (state_ == RecvState::payload) {
    tune_low_watermark();
  }
}

// A large payload arrives in many small pieces on a fast link; waking the receiver for each
// costs ~40 us on these VMs (a halted vCPU), which capped a 1 MiB message at ~0.3 GB/s. So while
// a big payload is expected, the socket reports readable only once a good part of the rest is
// there (SO_RCVLOWAT, never more than the bytes the sender is bound to send: EOF and errors
// still wake at once).
void TcpStream::tune_low_watermark() {
  constexpr size_t kMinBytes = 32 << 10;
  constexpr size_t kMaxBytes = 256 << 10;
  size_t rest = state_ == RecvState::payload ? header_.slice_len - payload_got_ : 0;
  int want = rest >= kMinBytes ? static_cast<int>(std::min(rest, kMaxBytes)) : 1;
  if (want == low_watermark_ || fd_.get() < 0) return;
  if (setsockopt(fd_.get(), SOL_SOCKET, SO_RCVLOWAT, &want, sizeof want) == 0) low_watermark_ = want;
}

void TcpStream::dispatch_header() {
  connection_->on_frame_header(this);  // lands, drains or parks us
  if ((state_ == RecvState::payload || state_ == RecvState::drain) && header_.slice_len == 0) slice_finished();
}

void TcpStream::slice_finished() {
  state_ = RecvState::header;
  tune_low_watermark();
  connection_->on_slice_received(header_.seq, header_.slice_len);
}

void TcpStream::on_eof() { connection_->on_stream_lost(this, 0, false); }

void TcpStream::on_error(int err, bool sending) { connection_->on_stream_lost(this, err, sending); }

}  // namespace braid::transport::tcp
