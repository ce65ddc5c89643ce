// transport/tcp/tcp_connection.h - a connection to one peer over one or more sockets.
//
// Messages: post_send turns a message into frames (one for a small message, one per socket for a
// large one: contiguous slices, see wire_format.h) and queues them on the sockets' streams; the
// receiving side matches each incoming frame to the posted receive with the same seq and lands
// its slice in place. Sends and receives complete in the order they were posted.
//
// Failure: the first socket that fails (reset, keepalive/user timeout, garbage, EOF in the middle
// of a frame) fails the whole connection: every pending and later operation completes with that
// Status. An EOF between frames ends only its socket: a peer that closed after sending still has
// its frames on the other sockets received; the connection fails once every socket ended. Completions
// of failed operations are held back until the kernel has let go of every buffer (no send or
// receive in flight), so a caller may free a buffer as soon as its completion arrives.
//
// Shared CPU: when the peer runs on this host confined to the same single CPU as this process
// (host_identity.h), the connection holds a SharedCpuPeer (common/spin.h) so that waits sleep
// at once, giving the peer the CPU it needs to answer, instead of spinning on it; an engine whose
// only connection this is drives its socket with blocking calls (shared_cpu_path.h), and then
// post_send hands a small message with nothing queued before it to the kernel at once and
// completes it there (send_now), and a receive completes as soon as its frame is parsed
// (deliver_whole, used on every socket). Both ends know the peer's host from the handshake
// (wire_format.h), which is complete before the connection exists.
//
// Lifetime: owned by the caller; must be destroyed before the TcpTransport that made it.
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/spin.h"
#include "common/unique_fd.h"
#include "transport/common/host_identity.h"
#include "transport/tcp/engine.h"
#include "transport/tcp/tcp_stream.h"
#include "transport/transport.h"

namespace braid::transport::tcp {

struct ConnectionSetup {
  Engine* engine = nullptr;
  std::vector<Completion>* completions = nullptr;  // the transport's ready list
  uint64_t comm_id = 0;
  int self_rank = 0;
  int peer_rank = 0;
  std::string peer_address;
  HostIdentity self_host;  // as sent in our handshake (or answer)
  HostIdentity peer_host;  // as received in the peer's
  double peer_timeout_s = 30;
  std::vector<UniqueFd> sockets;  // index = socket_index of the handshake
};

class TcpConnection final : public Connection {
 public:
  static constexpr size_t kMaxInFlight = 4096;
  // Messages below this go whole on one socket: striping them would cost a header per socket.
  static constexpr size_t kStripeMinBytes = 256 << 10;

  explicit TcpConnection(ConnectionSetup setup);
  ~TcpConnection() override;
  Status start();  // registers the sockets with the engine

  Status post_send(const void* data, size_t bytes, uint64_t cookie) override;
  Status post_recv(void* data, size_t capacity, uint64_t cookie) override;
  void close() override;
  int peer_rank() const override { return peer_rank_; }
  const std::string& peer_address() const override { return peer_address_; }
  uint64_t retransmissions() const override;
  bool peer_ended() const override;
  Capabilities capabilities() const override {
    Capabilities c;
    c.zero_copy_send = engine_->zero_copy();
    c.max_in_flight = kMaxInFlight;
    return c;
  }
  size_t socket_count() const { return streams_.size(); }
  // Whether the peer competes with us for one CPU (see above).
  bool peer_shares_cpu() const { return shared_cpu_.has_value(); }

  // --- called by streams and engines
  bool failed() const { return !failed_.is_ok(); }
  bool recv_wanted() const { return failed_.is_ok() && !recvs_.empty(); }
  // The next message is expected to be small (its receive holds at most `bytes`): a stream then
  // reads the frame header together with what follows it (TcpStream's inbox).
  bool small_recv_next(size_t bytes) const { return !recvs_.empty() && recvs_.front().capacity <= bytes; }
  void on_frame_header(TcpStream* stream);
  // A message that arrived whole, in one frame, with its payload behind the header in the
  // stream's inbox: when it is for the receive posted first, it is copied there and completed
  // (what on_frame_header, landing the payload and on_slice_received do, in one step); false
  // leaves it to those.
  bool deliver_whole(const FrameHeader& h, const char* payload);
  void on_slice_received(uint64_t seq, size_t bytes);
  void on_frame_sent(uint64_t seq);
  void on_zero_copy_queued(uint64_t seq);
  void on_zero_copy_done(uint16_t seq_low);
  void on_stream_failed(TcpStream* stream, Status status);
  void on_stream_lost(TcpStream* stream, int err, bool sending);
  // After the engine finished an operation of one of our streams: delivers held-back failures.
  void after_io();

 private:
  struct SendOp {
    uint64_t cookie;
    size_t bytes;
    int frames_left;
    int notifications_left = 0;
  };
  struct RecvOp {
    char* data = nullptr;
    size_t capacity = 0;
    uint64_t cookie = 0;
    bool header_seen = false;
    size_t total = 0;
    size_t received = 0;
    Status status;
  };

  std::string describe_peer() const;
  Status send_now(const char* data, size_t bytes, uint64_t cookie);
  void fail(Status status);
  void flush_failures();
  void complete_sends();
  void complete_recvs();
  void learn_peer_host(const HostIdentity& peer);

  Engine* engine_;
  std::vector<Completion>* completions_;
  uint64_t comm_id_;
  int self_rank_;
  int peer_rank_;
  std::string peer_address_;
  double peer_timeout_s_;
  std::vector<std::unique_ptr<TcpStream>> streams_;
  HostIdentity self_host_;
  std::optional<SharedCpuPeer> shared_cpu_;

  std::deque<SendOp> sends_;  // sends_[i] is message first_send_seq_ + i
  uint64_t first_send_seq_ = 0;
  std::deque<RecvOp> recvs_;
  uint64_t first_recv_seq_ = 0;
  Status failed_;
  bool closed_ = false;
  UniqueFd liveness_fd_;  // after close(): one socket, shut down, for peer_ended()
};

}  // namespace braid::transport::tcp
