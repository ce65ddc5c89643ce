#include "transport/tcp/shared_cpu_path.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "common/log.h"
#include "common/spin.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/tcp_stream.h"

namespace braid::transport::tcp {

namespace {
constexpr std::chrono::microseconds kNoMemoryRetry{1000};  // a send that met ENOBUFS
ssize_t send_prepared(TcpStream* s, size_t bytes) {
  if (bytes > kGatherBytes) return ::sendmsg(s->fd(), s->send_msg(), MSG_NOSIGNAL | MSG_DONTWAIT);
  char buf[kGatherBytes];
  size_t at = 0;
  const msghdr* m = s->send_msg();
  for (size_t i = 0; i < m->msg_iovlen; ++i) {
    std::memcpy(buf + at, m->msg_iov[i].iov_base, m->msg_iov[i].iov_len);
    at += m->msg_iov[i].iov_len;
  }
  return ::send(s->fd(), buf, at, MSG_NOSIGNAL | MSG_DONTWAIT);
}

bool read_eventfd(int fd) {
  uint64_t v;
  return ::read(fd, &v, sizeof v) == static_cast<ssize_t>(sizeof v);
}
}  // namespace

// Not send_prepared: that gathers a stream's prepared iovecs in a loop; a frame of known shape is
// copied directly, which keeps ~25 instructions off every small message of a ping-pong
// (bench/lat_instructions.sh).
size_t send_frame_now(TcpStream* s, const FrameHeader& header, const char* payload) {
  char buf[kGatherBytes];
  const size_t bytes = kFrameHeaderBytes + header.slice_len;
  std::memcpy(buf, &header, kFrameHeaderBytes);
  std::memcpy(buf + kFrameHeaderBytes, payload, header.slice_len);
  for (;;) {
    ssize_t n = ::send(s->fd(), buf, bytes, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n >= 0) return static_cast<size_t>(n);
    if (errno == EAGAIN || errno == ENOBUFS) return 0;  // queued; the path sends it when it can
    if (errno != EINTR) {
      s->on_error(errno, true);
      return 0;
    }
  }
}

IoState send_queued(TcpStream* s) {
  for (;;) {
    bool zero_copy = false;
    uint64_t seq = 0;
    const size_t bytes = s->prepare_send(0, &zero_copy, &seq);
    if (bytes == 0) return IoState::idle;
    ssize_t n = send_prepared(s, bytes);
    if (n > 0) {
      s->on_sent(static_cast<size_t>(n));
    } else if (n == 0 || errno == EAGAIN) {
      return IoState::would_block;
    } else if (errno == ENOBUFS) {  // short of memory, not of buffer space: no edge will come
      return IoState::no_memory;
    } else if (errno != EINTR) {
      s->on_error(errno, true);
      return IoState::failed;
    }
  }
}

IoState receive_available(TcpStream* s, int flags, std::span<char> target) {
  for (;; target = s->recv_target()) {
    if (target.empty()) return IoState::idle;
    ssize_t n = ::recv(s->fd(), target.data(), target.size(), flags);
    if (n > 0) {
      s->on_received(static_cast<size_t>(n));
      // Fewer bytes than asked for: the socket is drained, and asking again would only return
      // EAGAIN (one recv per ping-pong message saved); bytes that come later raise a new edge
      // (epoll) or are read by the next receive. Not so after a hang-up: the EOF (or error)
      // behind these bytes raised its edge already, and only reading on finds it.
      if (static_cast<size_t>(n) < target.size() && !s->hung_up) return IoState::idle;
      flags |= MSG_DONTWAIT;  // only the first receive may sleep
    } else if (n == 0) {
      s->on_eof();
      return IoState::failed;
    } else if (errno == EAGAIN) {
      return IoState::would_block;  // empty, or a blocking receive's SO_RCVTIMEO ran out
    } else if (errno != EINTR) {
      s->on_error(errno, false);
      return IoState::failed;
    }
  }
}

bool SharedCpuPath::wants(const TcpStream& s, size_t streams) const {
  const TcpConnection* c = s.connection();
  return usable_ && streams == 1 && c->peer_shares_cpu() && !c->failed();
}

TcpStream* SharedCpuPath::candidate(const StreamSlots& slots) const {
  if (slots.count() != 1 || cpu_sharing_peers() == 0) return nullptr;
  for (TcpStream* s : slots.all()) {
    if (s != nullptr) return wants(*s, 1) && !s->in_flight() ? s : nullptr;
  }
  return nullptr;
}

bool SharedCpuPath::enter(TcpStream* s) {
  if (!usable_) return false;
  const int fd = s->fd();
  int flags = fcntl(fd, F_GETFL);
  Status st;
  if (flags < 0 || fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    st = system_error("fcntl(~O_NONBLOCK)", errno);
  } else {
    timeval tv{0, static_cast<suseconds_t>(std::chrono::microseconds(kSlice).count())};
    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv) != 0) {
      st = system_error("setsockopt(SO_RCVTIMEO)", errno);
      (void)fcntl(fd, F_SETFL, flags);
    }
  }
  if (!st.is_ok()) {
    usable_ = false;
    BRAID_LOG(warn) << "cannot drive the socket to " << s->connection()->peer_address()
                    << " with blocking calls (" << st.message() << "); the engine keeps polling it";
    return false;
  }
  stream_ = s;
  s->on_shared_cpu_path = true;
  dirty_ = true;
  return true;
}

void SharedCpuPath::leave() {
  if (stream_ == nullptr) return;
  const int fd = stream_->fd();
  int flags = fcntl(fd, F_GETFL);
  if (flags >= 0) (void)fcntl(fd, F_SETFL, flags | O_NONBLOCK);
  stream_->on_shared_cpu_path = false;
  stream_ = nullptr;
}

bool SharedCpuPath::take_wake() { return read_eventfd(wake_fd_) || engine_woken(); }

Status SharedCpuPath::wait_poll(std::chrono::microseconds left, bool for_send, bool for_recv, bool* woken) {
  pollfd fds[2] = {{wake_fd_, POLLIN, 0}, {stream_->fd(), 0, 0}};
  if (for_send) fds[1].events |= POLLOUT;
  if (for_recv) fds[1].events |= POLLIN;
  // A socket nobody waits on stays out: poll() reports errors and hang-ups even unasked, and
  // with nothing pending there is nothing to fail (the next operation finds the error).
  const nfds_t n = fds[1].events != 0 ? 2 : 1;
  timespec ts{static_cast<time_t>(left.count() / 1000000), static_cast<long>(left.count() % 1000000) * 1000};
  if (ppoll(fds, n, &ts, nullptr) < 0 && errno != EINTR) return system_error("ppoll", errno);
  if ((fds[0].revents & POLLIN) && read_eventfd(wake_fd_)) *woken = true;
  return Status::ok();
}

Status SharedCpuPath::run(std::chrono::microseconds timeout, const std::vector<Completion>& ready) {
  TcpStream* s = stream_;
  TcpConnection* conn = s->connection();
  // What is left of the timeout. A blocking receive is charged a whole slice (its bound), so
  // the common case - a receive that returns the awaited message - reads no clock at all.
  std::chrono::microseconds left = timeout;
  IoState send_state = IoState::idle;
  if (s->has_send()) dirty_ = true;  // a send an earlier run left waiting for buffer space
  for (;;) {
    if (dirty_) {  // kicked: a frame queued, a receive posted, the connection failed
      dirty_ = false;
      if (s->has_send()) send_state = send_queued(s);
      conn->after_io();
    }
    if (!ready.empty()) return Status::ok();
    const std::span<char> target = s->recv_target();
    const bool want_recv = !target.empty();
    if (left <= std::chrono::microseconds(0)) {
      if (want_recv) {
        (void)receive_available(s, MSG_DONTWAIT, target);
        conn->after_io();
      }
      return Status::ok();
    }
    const bool send_blocked = send_state == IoState::would_block || send_state == IoState::no_memory;
    // Only a receive with SO_RCVLOWAT at 1 (a header, a small message) sleeps in recv(): one
    // that sleeps with a higher watermark after copying part of it waits for that many bytes
    // more, which may never come before the slice ends. A large payload waits in poll() and is
    // read without waiting, its watermark re-tuned after each part (tcp_stream.h).
    if (want_recv && !send_blocked && left >= kSlice && s->low_watermark() <= 1) {
      left -= kSlice;
      ++blocking_receives_;
      IoState got = receive_available(s, 0, target);  // sleeps until bytes come, at most kSlice
      conn->after_io();
      // The slice ran out: a wake-up that came meanwhile ends the wait.
      if (got == IoState::would_block && take_wake()) return Status::ok();
      continue;
    }
    auto wait = left;
    if (send_state == IoState::no_memory) wait = std::min(wait, kNoMemoryRetry);
    bool woke = false;
    const auto before = Clock::now();
    RETURN_IF_ERROR(wait_poll(wait, send_state == IoState::would_block, want_recv, &woke));
    left -= std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - before);
    if (woke || engine_woken()) return Status::ok();
    if (send_blocked) dirty_ = true;
    if (want_recv) {
      (void)receive_available(s, MSG_DONTWAIT, s->recv_target());
      conn->after_io();
    }
  }
}

}  // namespace braid::transport::tcp
