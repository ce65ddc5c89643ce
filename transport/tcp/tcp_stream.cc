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

void TcpStream::queue_frame(const FrameHeader& header, const char* data, size_t sent) {
  frames_.push_back(OutFrame{header, data, sent});
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
  if (connection_->failed() || ended_) return {};
  switch (state_) {
    case RecvState::header:
      return connection_->recv_wanted() ? inbox_space() : std::span<char>();
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

// Room after the bytes the inbox holds (less than a header: process_inbox parses every whole
// one): the rest of a header, and behind it as much as the inbox takes when the next message
// is expected to be small.
std::span<char> TcpStream::inbox_space() {
  if (inbox_begin_ > 0) {
    std::memmove(inbox_, inbox_ + inbox_begin_, inbox_end_ - inbox_begin_);
    inbox_end_ -= inbox_begin_;
    inbox_begin_ = 0;
  }
  const bool small = connection_->small_recv_next(kInboxBytes - kFrameHeaderBytes);
  return {reinterpret_cast<char*>(inbox_) + inbox_end_, (small ? kInboxBytes : kFrameHeaderBytes) - inbox_end_};
}

void TcpStream::on_received(size_t bytes) {
  if (state_ == RecvState::header) {
    inbox_end_ += bytes;
  } else {  // payload or drain: bytes went straight to their place
    payload_got_ += bytes;
    if (payload_got_ == header_.slice_len) slice_finished();
  }
  process_inbox();
}

// Parses the headers the inbox holds and hands the payload bytes that came with them to their
// buffers, until the inbox is empty, holds less than a header, or its frame waits for a receive
// to be posted (parked). The rest of a payload is then read directly (recv_target).
void TcpStream::process_inbox() {
  while (!connection_->failed()) {
    const size_t held = inbox_end_ - inbox_begin_;
    if (state_ == RecvState::header) {
      if (held < kFrameHeaderBytes) break;
      header_ = decode_frame(inbox_ + inbox_begin_);
      inbox_begin_ += kFrameHeaderBytes;
      payload_got_ = 0;
      if (header_.magic != kFrameMagic || header_.type != FrameType::data) {
        connection_->on_stream_failed(this, protocol_error("received bytes that are not a braid frame"));
        return;
      }
      // A socket carries messages in order, and at most every nsocks-th one (wire_format.h):
      // a frame out of that order is garbage, and would otherwise wait for a receive that
      // never comes, with the socket unread behind it.
      const uint64_t step = connection_->socket_count();
      if ((seen_frame_ && header_.seq < last_seq_) || header_.seq > (seen_frame_ ? last_seq_ + step : step - 1)) {
        connection_->on_stream_failed(
            this, protocol_error("frame of message " + std::to_string(header_.seq) + " out of order on this socket (" +
                                 (seen_frame_ ? "after message " + std::to_string(last_seq_) : "its first frame") +
                                 ", " + std::to_string(step) + " socket(s))"));
        return;
      }
      seen_frame_ = true;
      last_seq_ = header_.seq;
      if (held - kFrameHeaderBytes >= header_.slice_len &&
          connection_->deliver_whole(header_, reinterpret_cast<const char*>(inbox_) + inbox_begin_)) {
        inbox_begin_ += header_.slice_len;
        continue;
      }
      connection_->on_frame_header(this);  // lands, drains or parks us
    } else if (state_ == RecvState::payload || state_ == RecvState::drain) {
      const size_t take = std::min(held, header_.slice_len - payload_got_);
      if (state_ == RecvState::payload && take > 0) std::memcpy(dest_ + payload_got_, inbox_ + inbox_begin_, take);
      inbox_begin_ += take;
      payload_got_ += take;
      if (payload_got_ < header_.slice_len) break;  // the inbox is empty; the rest comes directly
      slice_finished();
    } else {
      break;  // parked: the bytes wait
    }
  }
  if (inbox_begin_ == inbox_end_) inbox_begin_ = inbox_end_ = 0;
  // Only now: the watermark must not ask for more than is still to come on the socket.
  if (state_ == RecvState::payload) tune_low_watermark();
}

// A large payload arrives in many small pieces on a fast link; waking the receiver for each
// (a halted vCPU on a virtual machine) capped a large message far below the link's rate
// (docs/code_figures.md, "Receive low watermark"). So while
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
  process_inbox();                     // payload bytes that arrived with the header, and more
}

void TcpStream::slice_finished() {
  state_ = RecvState::header;
  tune_low_watermark();
  connection_->on_slice_received(header_.seq, header_.slice_len);
}

void TcpStream::on_eof() { connection_->on_stream_lost(this, 0, false); }

void TcpStream::on_error(int err, bool sending) { connection_->on_stream_lost(this, err, sending); }

}  // namespace braid::transport::tcp
