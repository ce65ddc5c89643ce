#include "transport/tcp/uring_engine.h"

#include <liburing.h>
#include <sched.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <sys/types.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstring>
#include <optional>

#include "common/log.h"
#include "common/spin.h"
#include "transport/tcp/tcp_connection.h"
#include "transport/tcp/tcp_stream.h"

// liburing 2.3's headers predate these (kernel 6.2); the values are the kernel ABI.
#ifndef IORING_SEND_ZC_REPORT_USAGE
#define IORING_SEND_ZC_REPORT_USAGE (1U << 3)
#endif
#ifndef IORING_NOTIF_USAGE_ZC_COPIED
#define IORING_NOTIF_USAGE_ZC_COPIED (1U << 31)
#endif

namespace braid::transport::tcp {

namespace {

enum class OpKind : uint8_t { wake = 1, send, send_zero_copy, recv, cancel };

// What a completion refers to, packed into the 64-bit user_data.
struct UserData {
  uint32_t slot;      // index into slots_
  OpKind kind;
  uint8_t reserved;
  uint16_t seq_low;   // low bits of the message a zero-copy send belongs to
};
static_assert(sizeof(UserData) == sizeof(uint64_t));

constexpr unsigned kSqEntries = 256;
// Every socket has up to two operations and a notification in flight; a large CQ keeps the
// kernel off its overflow list when many connections complete at once.
constexpr unsigned kCqEntries = 8192;

constexpr int kCopiedStreakLimit = 8;

bool retryable(int err) { return err == EAGAIN || err == ENOBUFS || err == EINTR; }

// gettid() is a system call every time, and check_owner runs on every post and poll: a
// ping-pong paid four per round trip. A thread's id does not change.
pid_t this_thread_id() {
  thread_local const pid_t tid = gettid();
  return tid;
}

}  // namespace

namespace {

// SINGLE_ISSUER: one thread submits (transport.h's owner), so the kernel can skip locking.
// DEFER_TASKRUN: completion work runs only when the owner enters the ring to reap, instead of
// interrupting it with task work at random points - fewer context switches, batched reaping.
// R_DISABLED: SINGLE_ISSUER binds the ring to the thread that enables it; enabling it on
// first use (check_owner) makes that the owner thread instead of whoever created the transport.
// CQSIZE: see kCqEntries.
constexpr unsigned kPreferredFlags =
    IORING_SETUP_CQSIZE | IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN | IORING_SETUP_R_DISABLED;
// Kernels older than 6.1 lack the first two: a plain ring behaves the same, a little slower.
constexpr unsigned kFallbackFlags = IORING_SETUP_CQSIZE;

int setup_ring(io_uring* ring, unsigned flags, unsigned* features) {
  io_uring_params p{};
  p.flags = flags;
  p.cq_entries = kCqEntries;
  int rc = io_uring_queue_init_params(kSqEntries, ring, &p);
  *features = p.features;
  return rc;
}

}  // namespace

Result<std::unique_ptr<Engine>> UringEngine::create(const Env& env) {
  auto ring = std::make_unique<io_uring>();
  unsigned features = 0;
  int rc = setup_ring(ring.get(), kPreferredFlags, &features);
  bool single_issuer = rc == 0;
  if (rc == -EINVAL) rc = setup_ring(ring.get(), kFallbackFlags, &features);
  if (rc < 0) return system_error("io_uring_setup", -rc);
  if (!(features & IORING_FEAT_EXT_ARG)) {
    io_uring_queue_exit(ring.get());
    return Status(ErrorCode::system, "io_uring lacks IORING_FEAT_EXT_ARG (kernel older than 5.11)");
  }
  int wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (wake_fd < 0) {
    int err = errno;
    io_uring_queue_exit(ring.get());
    return system_error("eventfd", err);
  }
  return std::unique_ptr<Engine>(new UringEngine(env, std::move(ring), single_issuer, wake_fd));
}

UringEngine::UringEngine(const Env& env, std::unique_ptr<io_uring> ring, bool single_issuer, int wake_fd)
    : ring_(std::move(ring)),
      single_issuer_(single_issuer),
      wake_fd_(wake_fd),
      zero_copy_bytes_(env.zcopy_bytes),
      spin_us_(env.spin_us),
      direct_(wake_fd, [this] { return ring_woke(); }) {}

UringEngine::~UringEngine() {
  io_uring_queue_exit(ring_.get());
  ::close(wake_fd_);
  if (notify_fd_ >= 0) ::close(notify_fd_);
}

Status UringEngine::check_owner() {
  pid_t self = this_thread_id();
  if (enabled_ && (!single_issuer_ || owner_ == self)) return Status::ok();
  if (enabled_) {
    // Another thread takes over ("one thread at a time", transport.h). A SINGLE_ISSUER ring
    // cannot change hands, so a quiet one is replaced; one with I/O in flight cannot be.
    for (TcpStream* s : slots_.all()) {
      if (s != nullptr && s->in_flight()) {
        return internal_error("the tcp transport's io_uring is driven by thread " + std::to_string(owner_) +
                              " and has I/O in flight; thread " + std::to_string(self) +
                              " may take over only once that I/O completed (IORING_SETUP_SINGLE_ISSUER)");
      }
    }
    io_uring_queue_exit(ring_.get());  // cancels the pending eventfd read; the counter is kept
    unsigned features = 0;
    int rc = setup_ring(ring_.get(), kPreferredFlags, &features);
    if (rc < 0) return system_error("io_uring_setup (new owner thread)", -rc);
    enabled_ = false;
    if (notify_fd_ >= 0) register_notify();  // the new ring counts into the same descriptor
  }
  if (single_issuer_) {
    // liburing 2.3 declares io_uring_enable_rings but its library does not export it.
    long rc = syscall(__NR_io_uring_register, ring_->ring_fd, IORING_REGISTER_ENABLE_RINGS, nullptr, 0);
    if (rc < 0) return system_error("io_uring_register(ENABLE_RINGS)", errno);
  }
  // A registered ring fd saves a file lookup per enter, but is valid only in the thread that
  // registered it: worth it only where the ring has one thread for its lifetime.
  if (single_issuer_) (void)io_uring_register_ring_fd(ring_.get());
  owner_ = self;
  enabled_ = true;
  arm_wake();
  return Status::ok();
}

// Several sockets to one peer leave receives armed on the sockets the next message did not
// take (tcp_connection.cc: any of them may carry it), so a ring driving them is never quiet
// between operations, and a SINGLE_ISSUER ring could then not follow the operations from the
// progress thread to a caller and back. A plain ring may be entered by any thread.
Status UringEngine::leave_single_issuer() {
  for (TcpStream* s : slots_.all()) {
    if (s != nullptr && s->in_flight()) return Status::ok();  // cannot be replaced now; stays as it is
  }
  io_uring_queue_exit(ring_.get());
  unsigned features = 0;
  int rc = setup_ring(ring_.get(), kFallbackFlags, &features);
  if (rc < 0) return system_error("io_uring_setup (several sockets per peer)", -rc);
  single_issuer_ = false;
  enabled_ = false;  // check_owner arms the wake-up read on the new ring
  if (notify_fd_ >= 0) register_notify();
  BRAID_LOG(info) << "io_uring without SINGLE_ISSUER: several sockets per peer, driven by whichever thread runs";
  return Status::ok();
}

Status UringEngine::add(TcpStream* stream) {
  if (single_issuer_ && stream->connection()->socket_count() > 1) RETURN_IF_ERROR(leave_single_issuer());
  stream->slot = slots_.add(stream);
  if (direct_.active()) {  // two streams: the ring drives them all again
    TcpStream* old = direct_.stream();
    direct_.leave();
    kick(old);
  }
  return Status::ok();
}

void UringEngine::remove(TcpStream* stream, Deadline deadline) {
  if (direct_.stream() == stream) direct_.leave();
  if (stream->in_flight() && check_owner().is_ok()) {
    // A receive armed for a message that will not come now (the connection closes) ends only
    // when cancelled; its buffer is the stream's own, so nothing is lost.
    if (stream->recv_in_flight) {
      io_uring_sqe* sqe = get_sqe();
      io_uring_prep_cancel64(sqe, std::bit_cast<uint64_t>(UserData{stream->slot, OpKind::recv, 0, 0}), 0);
      io_uring_sqe_set_data64(sqe, std::bit_cast<uint64_t>(UserData{stream->slot, OpKind::cancel, 0, 0}));
    }
    while (stream->in_flight() && !deadline.expired()) {
      (void)submit_and_wait(std::min<std::chrono::nanoseconds>(deadline.remaining(), std::chrono::milliseconds(10)));
      reap();
    }
  }
  if (stream->in_flight()) return;  // the connection keeps the memory; the slot stays taken
  slots_.remove(stream->slot);
}

io_uring_sqe* UringEngine::get_sqe() {
  io_uring_sqe* sqe = io_uring_get_sqe(ring_.get());
  while (sqe == nullptr) {  // SQ full: hand what we have to the kernel, then there is room
    io_uring_submit(ring_.get());
    sqe = io_uring_get_sqe(ring_.get());
  }
  return sqe;
}

int UringEngine::wait_fd() const {
  if (notify_fd_ < 0) {
    notify_fd_ = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (notify_fd_ >= 0) register_notify();
  }
  return notify_fd_;
}

void UringEngine::register_notify() const {
  if (io_uring_register_eventfd(ring_.get(), notify_fd_) != 0) {
    ::close(notify_fd_);  // no descriptor: the caller polls this transport in slices instead
    notify_fd_ = -1;
  }
}

void UringEngine::arm_wake() {
  io_uring_sqe* sqe = get_sqe();
  io_uring_prep_read(sqe, wake_fd_, &wake_buf_, sizeof wake_buf_, 0);
  io_uring_sqe_set_data64(sqe, std::bit_cast<uint64_t>(UserData{0, OpKind::wake, 0, 0}));
}

// Hands the only stream to the shared-CPU path (shared_cpu_path.h) once the ring holds nothing
// of it; kick() arms nothing new for it meanwhile.
bool UringEngine::take_shared_cpu_path() {
  TcpStream* s = direct_.candidate(slots_);
  if (s == nullptr) return false;
  if (direct_.enter(s)) return true;
  kick(s);  // held back for the path until now: the ring takes it after all
  return false;
}

bool UringEngine::ring_woke() {
  if (io_uring_cq_ready(ring_.get()) > 0) reap();
  return woken_;
}

void UringEngine::kick(TcpStream* s) {
  if (direct_.stream() == s) return direct_.kick();
  if (!enabled_) return;  // nothing posted yet: check_owner enables the ring on first post
  if (direct_.wants(*s, slots_.count())) return;  // the shared-CPU path takes it next
  if (!s->send_in_flight) {
    bool zero_copy = false;
    uint64_t seq = 0;
    size_t bytes = s->prepare_send(zero_copy_ok_ && !s->zero_copy_off ? zero_copy_bytes_ : 0, &zero_copy, &seq);
    if (bytes > 0) {
      io_uring_sqe* sqe = get_sqe();
      // MSG_WAITALL: the kernel retries a short send itself, so a large frame costs one completion.
      if (zero_copy) {
        io_uring_prep_sendmsg_zc(sqe, s->fd(), s->send_msg(), MSG_NOSIGNAL | MSG_WAITALL);
        sqe->ioprio |= IORING_SEND_ZC_REPORT_USAGE;
      } else {
        io_uring_prep_sendmsg(sqe, s->fd(), s->send_msg(), MSG_NOSIGNAL | MSG_WAITALL);
      }
      UserData ud{s->slot, zero_copy ? OpKind::send_zero_copy : OpKind::send, 0, static_cast<uint16_t>(seq)};
      io_uring_sqe_set_data64(sqe, std::bit_cast<uint64_t>(ud));
      s->send_in_flight = true;
    }
  }
  if (!s->recv_in_flight) {
    std::span<char> target = s->recv_target();
    if (!target.empty()) {
      io_uring_sqe* sqe = get_sqe();
      // No MSG_WAITALL here: each partial receive is handed back and re-armed at once, which is
      // faster on loopback than letting the kernel retry the remainder (docs/code_figures.md).
      io_uring_prep_recv(sqe, s->fd(), target.data(), target.size(), 0);
      io_uring_sqe_set_data64(sqe, std::bit_cast<uint64_t>(UserData{s->slot, OpKind::recv, 0, 0}));
      s->recv_in_flight = true;
    }
  }
}

void UringEngine::handle(const io_uring_cqe* cqe) {
  auto ud = std::bit_cast<UserData>(cqe->user_data);
  if (ud.kind == OpKind::wake) {
    woken_ = true;
    arm_wake();
    return;
  }
  if (ud.kind == OpKind::cancel) return;  // the cancelled operation reports itself
  TcpStream* s = slots_.at(ud.slot);
  if (s == nullptr) return;
  TcpConnection* conn = s->connection();
  int res = cqe->res;
  if (cqe->flags & IORING_CQE_F_NOTIF) {  // the kernel let go of a zero-copy buffer
    --s->zero_copy_pending;
    ++stats_.zero_copy_sends;
    if (static_cast<uint32_t>(res) & IORING_NOTIF_USAGE_ZC_COPIED) {
      ++stats_.zero_copy_copied;
      // The route copies anyway (loopback, a device without scatter-gather): zero-copy then only
      // adds the notification round, so it is dropped for this socket.
      if (++s->zero_copy_copied_streak >= kCopiedStreakLimit && !s->zero_copy_off) {
        s->zero_copy_off = true;
        BRAID_LOG(info) << "zero-copy sends to " << conn->peer_address() << " are copied by the kernel; sending normally";
      }
    } else {
      s->zero_copy_copied_streak = 0;
    }
    conn->on_zero_copy_done(ud.seq_low);
  } else if (ud.kind == OpKind::recv) {
    s->recv_in_flight = false;
    if (res < 0) {
      if (!retryable(-res) && res != -ECANCELED) s->on_error(-res, false);
    } else if (res == 0) {
      s->on_eof();
    } else {
      s->on_received(static_cast<size_t>(res));
    }
  } else {
    s->send_in_flight = false;
    if (cqe->flags & IORING_CQE_F_MORE) {  // a notification will follow this completion
      ++s->zero_copy_pending;
      conn->on_zero_copy_queued(ud.seq_low);
    }
    if (res < 0) {
      if (ud.kind == OpKind::send_zero_copy && (res == -EINVAL || res == -EOPNOTSUPP)) {
        zero_copy_ok_ = false;  // retried below as a plain send
        BRAID_LOG(info) << "io_uring SEND_ZC not supported here (" << std::strerror(-res) << "); copying instead";
      } else if (!retryable(-res)) {
        s->on_error(-res, true);
      }
    } else {
      s->on_sent(static_cast<size_t>(res));
    }
  }
  kick(s);
  conn->after_io();
}

void UringEngine::reap() {
  unsigned head;
  unsigned seen = 0;
  io_uring_cqe* cqe;
  io_uring_for_each_cqe(ring_.get(), head, cqe) {
    handle(cqe);
    ++seen;
  }
  io_uring_cq_advance(ring_.get(), seen);
}

Status UringEngine::submit_and_wait(std::chrono::nanoseconds timeout) {
  __kernel_timespec ts{};
  ts.tv_sec = timeout.count() / 1000000000;
  ts.tv_nsec = timeout.count() % 1000000000;
  io_uring_cqe* cqe = nullptr;
  int rc = io_uring_submit_and_wait_timeout(ring_.get(), &cqe, 1, &ts, nullptr);
  if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN) {
    return system_error("io_uring_submit_and_wait_timeout", -rc);
  }
  return Status::ok();
}

Status UringEngine::run(std::chrono::microseconds timeout, const std::vector<Completion>& ready) {
  // What the kernel counted into wait_fd() is taken by this pass, emptied before it looks at
  // the ring: news after that point counts again, so a completion that lands while this pass
  // runs may cost one needless wake-up, but none is slept through (emptied at the end, the
  // count of work that came after the last look would be lost).
  if (notify_fd_ >= 0) {
    uint64_t count = 0;
    (void)!::read(notify_fd_, &count, sizeof count);
  }
  RETURN_IF_ERROR(check_owner());
  woken_ = false;
  if (direct_.active() || take_shared_cpu_path()) return direct_.run(timeout, ready);
  timeout = std::min<std::chrono::microseconds>(timeout, std::chrono::hours(24));
  auto start = Clock::now();
  auto end = start + timeout;
  const auto spin = std::chrono::microseconds(spin_allowed() ? spin_us_ : 0);  // common/spin.h
  auto spin_end = start + std::min<std::chrono::microseconds>(timeout, spin);
  std::optional<SpinScope> spinning;  // counted as a spinner while it spins
  if (start < spin_end) spinning.emplace();
  for (auto now = start;; now = Clock::now()) {
    if (now < spin_end || now >= end) {
      // A pass that does not sleep: while spinning, and the one pass a 0 timeout makes.
      int rc = io_uring_submit_and_get_events(ring_.get());
      if (rc < 0 && rc != -EINTR && rc != -EBUSY && rc != -EAGAIN) return system_error("io_uring_enter", -rc);
    } else {
      // Submitting and sleeping in one io_uring_enter: with no spin (a peer sharing our CPU,
      // BRAID_SPIN_US=0) a non-blocking pass first would only add a system call per wait.
      spinning.reset();
      RETURN_IF_ERROR(submit_and_wait(end - now));
    }
    reap();
    if (!ready.empty() || woken_) return Status::ok();
    now = Clock::now();
    if (now >= end) return Status::ok();
    if (take_shared_cpu_path()) {  // what was in flight for the stream is done
      return direct_.run(std::chrono::duration_cast<std::chrono::microseconds>(end - now), ready);
    }
    if (now < spin_end) spinning->pause();  // yields only to other spinners (common/spin.h)
  }
}

EngineStats UringEngine::stats() const {
  EngineStats st = stats_;
  st.shared_cpu_receives = direct_.blocking_receives();
  return st;
}

void UringEngine::wake() {
  uint64_t one = 1;
  ssize_t n = ::write(wake_fd_, &one, sizeof one);
  (void)n;  // EAGAIN: the counter is already non-zero, a wake-up is pending anyway
}

}  // namespace braid::transport::tcp
