// transport/tcp/shared_cpu_path.h - plain system calls on a stream's socket, and the blocking
// path an engine takes when its only peer shares this process's single CPU.
//
// send_queued/receive_available are how the epoll engine moves bytes on every socket.
//
// send_frame_now is how a connection sends a small message at once, from post_send, while its
// only stream is on the shared-CPU path (below) and nothing is queued before it: on one CPU,
// every layer a message passes costs the ping-pong its time (see tcp_connection.cc).
//
// SharedCpuPath: when both ends of a connection are confined to the same single CPU
// (host_identity.h), every message is a switch from one process to the other, and the cheapest
// way through the kernel is what a blocking socket does: send, then sleep inside recv() until
// the answer is copied in (the scheduler runs the peer meanwhile, whose send wakes us). An
// engine's general wait costs more per message: epoll_pwait2 then a recv, or two io_uring_enter
// (the send completes inline, the receive needs a second); docs/code_figures.md has what each
// costs a ping-pong on one CPU. So when an
// engine has exactly one stream and its peer shares our CPU, it hands the stream to this path:
// sends by sendmsg(MSG_DONTWAIT), the awaited receive by a blocking recv(), poll() where a send
// waits for buffer space. The socket is made blocking while here (the engines' own calls all
// say MSG_DONTWAIT or go through io_uring, which never blocks the caller) and non-blocking
// again when the engine takes it back (leave()), e.g. when a second connection is added.
//
// Bounds: a blocking recv() cannot be interrupted by wake(), so it is bounded by SO_RCVTIMEO
// (kSlice): after each slice the path looks at the wake eventfd, the caller's deadline and the
// engine's own wake signal. wake() therefore takes effect within kSlice here (the runtime wakes
// a transport only to abort an operation). A wait shorter than kSlice uses poll() on the socket
// and the eventfd instead, so no poll() overruns its timeout. A peer that stays silent costs one
// wake-up per slice while this path waits for it.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/tcp/engine.h"
#include "transport/tcp/wire_format.h"
#include "transport/transport.h"

namespace braid::transport::tcp {

class TcpStream;

enum class IoState {
  idle,         // nothing (more) to do now
  would_block,  // the socket buffer is full (send) or empty (receive)
  no_memory,    // ENOBUFS: no edge will come; try again later
  failed,       // the stream was told (on_error/on_eof)
};

// Sends queued frames until the socket would block or nothing is left.
IoState send_queued(TcpStream* s);
// Receives into the stream's targets until the socket is drained (a short read) or no receive is
// wanted. `flags`: MSG_DONTWAIT, or 0 on a blocking socket for one receive that may sleep.
// `target`: s->recv_target(), as the caller just asked it.
IoState receive_available(TcpStream* s, int flags, std::span<char> target);

// Frames up to this size (header and payload) are copied into one buffer and sent with send():
// the kernel's per-segment work for a two-part sendmsg costs more than the copy.
inline constexpr size_t kGatherBytes = 256;
// Sends one frame of at most kGatherBytes whose stream has nothing queued, without waiting.
// Returns the bytes the kernel took: all, part, or none (a full socket buffer, or an error, which
// the stream was told of by on_error).
size_t send_frame_now(TcpStream* s, const FrameHeader& header, const char* payload);

class SharedCpuPath {
 public:
  static constexpr std::chrono::milliseconds kSlice{2};

  // The engine's wake-up signals, fixed for its life: `wake_fd`, the eventfd wake() writes (read
  // here), and `woken`, the engine's own look at it where that can be taken elsewhere (e.g. an
  // io_uring completion of its eventfd read); none when empty.
  SharedCpuPath(int wake_fd, std::function<bool()> woken = {}) : wake_fd_(wake_fd), woken_(std::move(woken)) {}

  bool active() const { return stream_ != nullptr; }
  TcpStream* stream() const { return stream_; }
  // Whether `s`, one of the `streams` an engine drives, belongs here: it is the only one, its
  // connection is up (the peer's host known, not failed), the peer is confined to the same
  // single CPU as this process, and enter() never failed. An engine starts no new kernel
  // operation of its own for such a stream.
  bool wants(const TcpStream& s, size_t streams) const;
  // The stream to enter() now, or nullptr: the only one of the engine's `slots`, when wants()
  // says it belongs here and it has no kernel operation of the engine in flight. Looks at the
  // slots only while this process holds a SharedCpuPeer (common/spin.h), so other processes
  // never do.
  TcpStream* candidate(const StreamSlots& slots) const;
  // Makes the socket blocking with a receive timeout of kSlice and takes the stream; false (and
  // logged, once) when the socket cannot be set up so. The engine must hold no kernel operation
  // on it (io_uring: nothing in flight).
  bool enter(TcpStream* s);
  // Gives the socket back, non-blocking again, and with work to drive (the engine drives it).
  void leave();
  void kick() { dirty_ = true; }
  uint64_t blocking_receives() const { return blocking_receives_; }

  // Moves bytes until `ready` holds a completion, `timeout` passed, or a wake-up (either signal,
  // asked after each wait that did not end in a completion). timeout 0 makes one non-blocking pass.
  Status run(std::chrono::microseconds timeout, const std::vector<Completion>& ready);

 private:
  Status wait_poll(std::chrono::microseconds left, bool for_send, bool for_recv, bool* woken);
  bool take_wake();  // a wake() since the last look: the eventfd's count, or the engine's signal
  bool engine_woken() const { return woken_ && woken_(); }  // the engine's own signal, if it has one

  const int wake_fd_;
  const std::function<bool()> woken_;
  TcpStream* stream_ = nullptr;
  bool usable_ = true;
  bool dirty_ = true;
  uint64_t blocking_receives_ = 0;
};

}  // namespace braid::transport::tcp
