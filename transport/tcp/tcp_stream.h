// transport/tcp/tcp_stream.h - one socket of a connection: its outgoing frame queue and its
// incoming frame parser.
//
// Send side: a FIFO of frames (header + slice of a user buffer); an engine asks for the unsent
// bytes as an iovec list and reports how many the kernel took (short sends simply leave the rest
// queued). Receive side (the handshake is over before a stream exists): per frame, a 32-byte header, after which the
// connection says where its slice goes (a posted buffer, or nowhere yet), and the payload. When
// the next posted receive is small, the header is read into an inbox together with whatever
// follows it, up to kInboxBytes, so a small message (header and payload) costs one receive, not
// two, and a run of them shares one; their payloads are copied from there. Otherwise only the
// header is read, and the payload straight into its buffer: a large message is not copied twice.
// Bytes are read only while the connection wants to receive, so a connection that only sends has
// no receive in flight.
#pragma once

#include <sys/socket.h>
#include <sys/uio.h>

#include <cstdint>
#include <deque>
#include <memory>
#include <span>

#include "transport/common/socket_setup.h"
#include "transport/tcp/wire_format.h"

namespace braid::transport::tcp {

class TcpConnection;

class TcpStream {
 public:
  static constexpr int kMaxIov = 64;
  // Two pages: a message of a page (and its header) arrives whole.
  static constexpr size_t kInboxBytes = 8192;

  TcpStream(TcpConnection* connection, int index, UniqueFd fd);
  TcpStream(const TcpStream&) = delete;
  TcpStream& operator=(const TcpStream&) = delete;

  int fd() const { return fd_.get(); }
  int index() const { return index_; }
  TcpConnection* connection() const { return connection_; }
  void shutdown();  // wakes every pending kernel operation on the socket

  // --- send side
  // `sent`: bytes of the frame (header first) the kernel took already (TcpConnection::send_now).
  void queue_frame(const FrameHeader& header, const char* data, size_t sent = 0);
  bool has_send() const { return !frames_.empty(); }
  // Fills iov_/msg_ with unsent bytes. When the first frame's payload is at least
  // `zero_copy_bytes` (0: never), only that frame is returned and *zero_copy_seq is its message.
  // Returns the number of bytes described (0: nothing to send).
  size_t prepare_send(size_t zero_copy_bytes, bool* zero_copy, uint64_t* zero_copy_seq);
  void on_sent(size_t bytes);
  msghdr* send_msg() { return &msg_; }

  // --- receive side
  // Where the next received bytes belong; empty when nothing is to be read now.
  std::span<char> recv_target();
  void on_received(size_t bytes);  // bytes > 0
  // Asks the connection where the payload of the header just read goes, and acts on it.
  void dispatch_header();
  // Called by the connection in answer to on_frame_header.
  void land_payload(char* dest) { state_ = RecvState::payload, dest_ = dest; }
  void drain_payload() { state_ = RecvState::drain; }
  void park() { state_ = RecvState::parked; }
  bool parked() const { return state_ == RecvState::parked; }
  const FrameHeader& header() const { return header_; }
  // SO_RCVLOWAT as set on the socket now: above 1 while a large payload is being read.
  int low_watermark() const { return low_watermark_; }

  // --- failures, reported by engines: EOF, or a socket error (errno) while sending/receiving
  void on_eof();
  // EOF came between two frames: everything the peer sent on this socket has been read, and
  // nothing more is read from it (recv_target is empty from then on).
  bool ended() const { return ended_; }
  bool between_frames() const { return state_ == RecvState::header && inbox_begin_ == inbox_end_; }
  void end() { ended_ = true; }
  void on_error(int err, bool sending);

  // Engine bookkeeping: kernel operations in flight and the engine's handle for the stream.
  bool send_in_flight = false;
  bool recv_in_flight = false;
  int zero_copy_pending = 0;  // SEND_ZC notifications still due
  int zero_copy_copied_streak = 0;  // notifications in a row saying the kernel copied anyway
  bool zero_copy_off = false;       // ...so many that zero-copy is given up on this socket
  uint32_t slot = 0;
  bool on_shared_cpu_path = false;  // driven by SharedCpuPath (set by enter, cleared by leave)
  // epoll reported that the peer hung up (or the socket failed): what is left to read ends in
  // EOF or an error, which no later edge will announce (receive_available reads up to it).
  bool hung_up = false;
  bool in_flight() const { return send_in_flight || recv_in_flight || zero_copy_pending > 0; }

 private:
  void tune_low_watermark();

  enum class RecvState : uint8_t { header, parked, payload, drain };
  struct OutFrame {
    FrameHeader header;
    const char* data;
    size_t sent = 0;  // of header + payload
    size_t total() const { return kFrameHeaderBytes + header.slice_len; }
  };

  void slice_finished();
  void process_inbox();
  std::span<char> inbox_space();

  TcpConnection* connection_;
  int index_;
  UniqueFd fd_;

  std::deque<OutFrame> frames_;
  iovec iov_[kMaxIov];
  msghdr msg_{};

  RecvState state_ = RecvState::header;
  bool ended_ = false;
  FrameHeader header_;
  bool seen_frame_ = false;
  uint64_t last_seq_ = 0;  // of the last frame header read, once seen_frame_
  unsigned char inbox_[kInboxBytes];
  size_t inbox_begin_ = 0, inbox_end_ = 0;  // bytes received and not yet parsed or delivered
  int low_watermark_ = 1;  // SO_RCVLOWAT now set on the socket
  char* dest_ = nullptr;
  size_t payload_got_ = 0;
  std::unique_ptr<char[]> drain_buf_;
};

}  // namespace braid::transport::tcp
