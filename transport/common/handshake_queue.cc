#include "transport/common/handshake_queue.h"

#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <chrono>
#include <thread>

namespace braid::transport {

Status HandshakeQueue::serve(int listen_fd, const std::string& address, const AcceptorExpect& expect,
                             const auth::JobSecret& secret, Deadline deadline,
                             FunctionRef<std::string(int)> name_peer, FunctionRef<void(AcceptorHandshake&)> ended) {
  // Sockets that answer nothing cost a file descriptor each until their kHandshakeTimeout; past
  // this many at once, the oldest is given up (a rank's exchange takes one round trip).
  constexpr size_t kMaxHandshakes = 256;
  constexpr int kMaxAcceptsPerPass = 64;
  auto give_up_oldest = [&](Status why) {
    (void)handshaking_.front().refuse(std::move(why));
    ended(handshaking_.front());
    handshaking_.erase(handshaking_.begin());
  };
  Deadline wait_until = deadline;
  std::vector<pollfd> fds;
  fds.reserve(handshaking_.size() + 1);
  fds.push_back(pollfd{listen_fd, POLLIN, 0});
  for (const auto& h : handshaking_) {
    fds.push_back(pollfd{h.fd(), POLLIN, 0});
    if (h.deadline().at() < wait_until.at()) wait_until = h.deadline();
  }
  const int n = ::poll(fds.data(), fds.size(), wait_until.remaining_ms(100));
  if (n < 0 && errno != EINTR) return system_error("poll", errno);
  if (n > 0 && (fds[0].revents & POLLIN) != 0) {
    for (int i = 0; i < kMaxAcceptsPerPass; ++i) {
      UniqueFd fd(accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
      if (fd.get() < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == ECONNABORTED || errno == EINTR) break;
        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
          // Out of descriptors (a flood of strangers?): the oldest unfinished handshake makes
          // room; with none, the listener stays readable, so wait a little rather than spin.
          if (handshaking_.empty()) {
            std::this_thread::sleep_for(std::chrono::milliseconds(10));
          } else {
            give_up_oldest(system_error("given up to make room: out of file descriptors", errno));
          }
          break;
        }
        return system_error("accept on " + address, errno);
      }
      if (handshaking_.size() >= kMaxHandshakes) {
        give_up_oldest(timeout_error("given up to make room: " + std::to_string(kMaxHandshakes) +
                                     " connections were in their handshake at once"));
      }
      std::string from = name_peer(fd.get());
      handshaking_.emplace_back(std::move(fd), std::move(from), Deadline::after(kHandshakeTimeout));
    }
  }
  // Every socket is tried (a recv that would block is cheap), the new ones included: a hello
  // usually arrives with the connection.
  size_t kept = 0;
  for (size_t i = 0; i < handshaking_.size(); ++i) {
    AcceptorHandshake& h = handshaking_[i];
    AcceptorHandshake::Step step = h.advance(expect, secret);
    if (step == AcceptorHandshake::Step::more && h.deadline().expired()) step = h.expire();
    if (step == AcceptorHandshake::Step::more) {
      if (kept != i) handshaking_[kept] = std::move(h);
      ++kept;
      continue;
    }
    ended(h);
  }
  handshaking_.erase(handshaking_.begin() + static_cast<std::ptrdiff_t>(kept), handshaking_.end());
  return Status::ok();
}

}  // namespace braid::transport
