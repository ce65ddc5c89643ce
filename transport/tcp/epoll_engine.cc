#include "transport/tcp/epoll_engine.h"

#include <sched.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <optional>

#include "common/spin.h"
#include "transport/tcp/shared_cpu_path.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/tcp_stream.h"

namespace braid::transport::tcp {

namespace {
constexpr uint64_t kWakeKey = ~uint64_t{0};
constexpr int kMaxEvents = 64;
constexpr std::chrono::microseconds kRetryAfter{1000};  // a send that met ENOBUFS

// epoll_pwait2 (Linux 5.11) takes its timeout in nanoseconds; where the kernel or valgrind does
// not know it (ENOSYS), epoll_pwait's milliseconds serve. One probe per process, on a descriptor
// that cannot be an epoll one: a kernel that has the call says EBADF, and no event is taken.
bool probe_epoll_pwait2() {
  epoll_event ev;
  timespec zero{0, 0};
  return !(epoll_pwait2(-1, &ev, 1, &zero, nullptr) < 0 && errno == ENOSYS);
}

}  // namespace

bool epoll_pwait2_available() {
  static const bool available = probe_epoll_pwait2();
  return available;
}

Result<std::unique_ptr<Engine>> EpollEngine::create(const Env& env) {
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (ep < 0) return system_error("epoll_create1", errno);
  int wfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wfd < 0) {
    int err = errno;
    ::close(ep);
    return system_error("eventfd", err);
  }
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kWakeKey;
  if (epoll_ctl(ep, EPOLL_CTL_ADD, wfd, &ev) != 0) {
    int err = errno;
    ::close(ep);
    ::close(wfd);
    return system_error("epoll_ctl", err);
  }
  return std::unique_ptr<Engine>(new EpollEngine(ep, wfd, env.spin_us));
}

EpollEngine::EpollEngine(int epoll_fd, int wake_fd, int spin_us)
    : epoll_fd_(epoll_fd),
      wake_fd_(wake_fd),
      spin_us_(spin_us),
      have_pwait2_(epoll_pwait2_available()),
      direct_(wake_fd) {}

EpollEngine::~EpollEngine() {
  ::close(epoll_fd_);
  ::close(wake_fd_);
}

Status EpollEngine::add(TcpStream* s) {
  s->slot = slots_.add(s);
  if (direct_.active()) {  // two streams: the engine drives them all again
    TcpStream* old = direct_.stream();
    direct_.leave();
    RETURN_IF_ERROR(watch(old));
    dirty_.push_back(old->slot);
  }
  return watch(s);
}

Status EpollEngine::watch(TcpStream* s) {
  epoll_event ev{};
  // Edge-triggered (see the header); errors and hang-ups are reported once as well, so a dead
  // socket nobody uses is not reported on every pass. A socket that is ready when added is
  // reported at once, so no edge is lost while the shared-CPU path had it.
  ev.events = EPOLLIN | EPOLLOUT | EPOLLRDHUP | EPOLLET;
  ev.data.u64 = s->slot;
  if (epoll_ctl(epoll_fd_, EPOLL_CTL_ADD, s->fd(), &ev) != 0) return system_error("epoll_ctl(ADD)", errno);
  return Status::ok();
}

void EpollEngine::remove(TcpStream* s, Deadline) {
  // Plain system calls hold no buffer after they return: nothing to wait for.
  if (direct_.stream() == s) direct_.leave();  // not watched by epoll then: the DEL fails, harmlessly
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s->fd(), nullptr);
  slots_.remove(s->slot);
}

void EpollEngine::kick(TcpStream* s) {
  if (direct_.stream() == s) return direct_.kick();
  dirty_.push_back(s->slot);
}

// Hands the only stream to the shared-CPU path when its peer shares our CPU (shared_cpu_path.h).
bool EpollEngine::take_shared_cpu_path() {
  TcpStream* s = direct_.candidate(slots_);
  if (s == nullptr || !direct_.enter(s)) return false;
  dirty_.clear();  // the path sends what was queued and receives what is wanted
  retry_.clear();
  // Nor does epoll watch it meanwhile: every segment that arrives would also run epoll's
  // callback for nobody (a small but measurable cost: docs/code_figures.md).
  epoll_ctl(epoll_fd_, EPOLL_CTL_DEL, s->fd(), nullptr);
  return true;
}

// With edge-triggered events a socket must be driven until it would block, or until there is
// nothing to do: then the next kick (new work) or edge (new bytes, new space) drives it again.
void EpollEngine::drive(TcpStream* s) {
  if (send_queued(s) == IoState::no_memory) retry_.push_back(s->slot);
  (void)receive_available(s, MSG_DONTWAIT, s->recv_target());
  s->connection()->after_io();
}

void EpollEngine::drive_dirty() {
  // drive() may make other streams dirty (a completed receive lets a parked socket go on).
  // The two lists trade places, so neither is reallocated once grown (a fresh list per pass cost
  // an allocation per message).
  while (!dirty_.empty()) {
    batch_.swap(dirty_);
    for (uint32_t slot : batch_) {
      if (TcpStream* s = slots_.at(slot)) drive(s);
    }
    batch_.clear();
  }
}

Status EpollEngine::wait(std::chrono::microseconds timeout) {
  epoll_event events[kMaxEvents];
  int n;
  if (have_pwait2_) {
    timespec ts{static_cast<time_t>(timeout.count() / 1000000), static_cast<long>(timeout.count() % 1000000) * 1000};
    n = epoll_pwait2(epoll_fd_, events, kMaxEvents, &ts, nullptr);
  } else {
    // Rounded up: a wait shorter than a millisecond must not become a busy loop of zero waits.
    const auto ms = std::chrono::ceil<std::chrono::milliseconds>(timeout).count();
    n = epoll_pwait(epoll_fd_, events, kMaxEvents, static_cast<int>(std::min<int64_t>(ms, 1 << 30)), nullptr);
  }
  if (n < 0 && errno != EINTR) return system_error(have_pwait2_ ? "epoll_pwait2" : "epoll_pwait", errno);
  for (int i = 0; i < n; ++i) {
    if (events[i].data.u64 == kWakeKey) {
      uint64_t v;
      ssize_t r = ::read(wake_fd_, &v, sizeof v);
      (void)r;
      woken_ = true;
      continue;
    }
    auto slot = static_cast<uint32_t>(events[i].data.u64);
    if (TcpStream* s = slots_.at(slot)) {
      if ((events[i].events & (EPOLLRDHUP | EPOLLHUP | EPOLLERR)) != 0) s->hung_up = true;
      dirty_.push_back(slot);
    }
  }
  return Status::ok();
}

Status EpollEngine::run(std::chrono::microseconds timeout, const std::vector<Completion>& ready) {
  woken_ = false;
  if (direct_.active() || take_shared_cpu_path()) {
    return direct_.run(timeout, ready);
  }
  timeout = std::min<std::chrono::microseconds>(timeout, std::chrono::hours(24));
  auto start = Clock::now();
  auto end = start + timeout;
  const auto spin = std::chrono::microseconds(spin_allowed() ? spin_us_ : 0);  // common/spin.h
  auto spin_end = start + std::min<std::chrono::microseconds>(timeout, spin);
  std::optional<SpinScope> spinning;  // counted as a spinner while it spins
  if (start < spin_end) spinning.emplace();
  for (;;) {
    drive_dirty();
    if (!ready.empty() || woken_) return Status::ok();
    auto now = Clock::now();
    bool last = now >= end;  // even a 0 timeout looks at the sockets once
    auto left = last || now < spin_end ? std::chrono::microseconds(0)
                                       : std::chrono::duration_cast<std::chrono::microseconds>(end - now);
    if (!last && now < spin_end) {
      spinning->pause();  // yields only to other spinners (common/spin.h)
    } else {
      spinning.reset();
    }
    if (!retry_.empty()) left = std::min(left, kRetryAfter);
    RETURN_IF_ERROR(wait(left));
    dirty_.insert(dirty_.end(), retry_.begin(), retry_.end());
    retry_.clear();
    if (last) {
      drive_dirty();
      return Status::ok();
    }
  }
}

EngineStats EpollEngine::stats() const {
  EngineStats st;
  st.shared_cpu_receives = direct_.blocking_receives();
  return st;
}

void EpollEngine::wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_, &one, sizeof one);
  (void)n;
}

}  // namespace braid::transport::tcp

