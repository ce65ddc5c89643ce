// TcpStore: the client side of the store protocol (runtime/store/store_protocol.h).
//
// One non-blocking socket; each call sends one request and reads its one reply, under a mutex so
// threads take turns. Every socket wait is a poll() bounded by the call's deadline. Errors:
// - the first connect is retried with capped exponential backoff until the store's timeout,
//   because ranks routinely start before the store does;
// - once connected, a lost connection fails the call at once (peer_lost): the store lives in
//   rank 0 or braidrun, and if it is gone there is nothing to wait for;
// - a call with no reply by its deadline closes the connection, since a late reply would be
//   taken for the answer to the next request. get and wait avoid this by carrying their timeout
//   to the server, which answers `timed_out` itself; the client waits a grace period longer.
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <mutex>
#include <thread>

#include "braid/store.h"
#include "common/deadline.h"
#include "common/job_secret.h"
#include "common/log.h"
#include "common/status.h"
#include "runtime/store/socket_util.h"
#include "runtime/store/store_handshake.h"
#include "runtime/store/store_protocol.h"

namespace braid {

using store::FrameReader;
using store::FrameWriter;
using store::Opcode;
using store::ReplyKind;

namespace {

constexpr auto kFirstBackoff = std::chrono::milliseconds(10);
constexpr auto kMaxBackoff = std::chrono::seconds(1);
// How much longer than a get/wait's own timeout the client waits for the server's answer.
constexpr auto kReplyGrace = std::chrono::seconds(2);
constexpr size_t kReadChunk = 64 << 10;
// One attempt's bound on the handshake; a server that is slower (overloaded) is tried again.
constexpr auto kHandshakeAttempt = std::chrono::seconds(5);
// Longer bounds are taken as "a day": the server caps waits there too, and deadline arithmetic
// on milliseconds::max() would overflow.
constexpr std::chrono::milliseconds kMaxTimeout = std::chrono::hours(24);

std::string ms_text(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

// The first line of what a stranger on the store's port said, for a message ("HTTP/1.1 400 ...").
std::string first_words(const std::string& said) {
  constexpr size_t kShown = 60;
  std::string out;
  for (size_t i = 0; i < said.size() && out.size() < kShown; ++i) {
    const unsigned char c = static_cast<unsigned char>(said[i]);
    if ((c == '\r' || c == '\n') && !out.empty()) break;
    if (c >= 0x20 && c < 0x7f) {
      out += static_cast<char>(c);
    } else {
      static const char kHex[] = "0123456789abcdef";
      out += std::string("\\x") + kHex[c >> 4] + kHex[c & 15];
    }
  }
  return out;
}

// Any bytes before a complete hello mean another program: a braid store sends its hello in one
// small frame, at once. Retrying would only wait out the timeout to say less.
Status not_a_braid_store(const std::string& address, const std::string& said) {
  return protocol_error("the program at " + address + " is not a braid store: it answered \"" + first_words(said) +
                        "\" where a braid store greets with its handshake. Is MASTER_PORT taken by another "
                        "program (a web server, another service)? Give the job a free MASTER_PORT");
}

}  // namespace

struct TcpStore::Impl {
  std::string host;
  uint16_t port = 0;
  std::string address;
  std::atomic<int64_t> timeout_ms{0};
  auth::JobSecret secret;
  std::string job_id;

  std::mutex mu;  // guards everything below: one request in flight
  UniqueFd fd;
  std::string broken;  // why the connection is unusable; empty while it works
  std::string rbuf;

  std::chrono::milliseconds timeout() const {
    return std::min(std::chrono::milliseconds(timeout_ms.load()), kMaxTimeout);
  }

  Status connect_with_backoff();
  Result<UniqueFd> try_connect(const Deadline& deadline);
  // Proves this process belongs to the job, and checks that the server does (store_protocol.h).
  // `*fatal` is set when trying again cannot help (refused, another job, not a braid store).
  Status handshake(const Deadline& deadline, bool* fatal);
  // Sends `frame` and returns the reply body with its kind byte checked: an `error` reply
  // becomes its Status. `what` names the call in messages ("get('k')").
  Result<std::string> call(const std::string& what, std::string frame, Deadline deadline);
  Status send_all(const std::string& frame, const Deadline& deadline, const std::string& what);
  Result<std::string> read_frame(const Deadline& deadline, const std::string& what,
                                 size_t max_len = store::kMaxFrameBytes);
  Status wait_fd(short events, const Deadline& deadline, const std::string& what);
  Status lost(const std::string& what, const std::string& why);
  Status timed_out_waiting(const std::string& what, std::chrono::milliseconds timeout, FrameReader& r);
};

Status TcpStore::Impl::connect_with_backoff() {
  auto deadline = Deadline::after(timeout());
  auto backoff = std::chrono::duration_cast<std::chrono::nanoseconds>(kFirstBackoff);
  std::string last_error;
  int attempts = 0;
  bool warned_silent = false;
  for (;;) {
    ++attempts;
    Result<UniqueFd> r = try_connect(deadline);
    Status st = r.status();
    if (r.is_ok()) {
      fd = std::move(r).value();
      store::set_no_delay(fd.get());
      bool fatal = false;
      st = handshake(deadline, &fatal);
      if (st.is_ok()) return st;
      fd.reset();
      rbuf.clear();
      if (fatal) return Status(st.code(), "store connect: " + st.message());
      if (st.code() == ErrorCode::timeout && !warned_silent) {
        warned_silent = true;
        BRAID_LOG(warn) << "store connect: " << st.message() << ". Trying again for up to "
                        << ms_text(std::chrono::duration_cast<std::chrono::milliseconds>(deadline.remaining()))
                        << " (BRAID_RENDEZVOUS_TIMEOUT_S)";
      }
    }
    last_error = st.message();
    if (deadline.expired()) break;
    std::this_thread::sleep_for(std::min(backoff, deadline.remaining()));
    backoff = std::min<std::chrono::nanoseconds>(backoff * 2, kMaxBackoff);
  }
  return timeout_error("could not reach the braid store at " + address + " within " + ms_text(timeout()) + " (" +
                       std::to_string(attempts) + " attempts; last error: " + last_error +
                       "). Are MASTER_ADDR/MASTER_PORT right, and is rank 0 (or braidrun) up? "
                       "BRAID_RENDEZVOUS_TIMEOUT_S sets how long to keep trying.");
}

Result<UniqueFd> TcpStore::Impl::try_connect(const Deadline& deadline) {
  ASSIGN_OR_RETURN(store::AddrInfoPtr addrs, store::resolve(host, port, /*passive=*/false));
  Status last = Status(ErrorCode::system, "no address");
  for (addrinfo* a = addrs.get(); a != nullptr; a = a->ai_next) {
    UniqueFd s(::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol));
    if (!s.valid()) {
      last = system_error("socket", errno);
      continue;
    }
    if (::connect(s.get(), a->ai_addr, a->ai_addrlen) == 0) return s;
    if (errno != EINPROGRESS) {
      last = system_error("connect", errno);
      continue;
    }
    pollfd p{s.get(), POLLOUT, 0};
    int rc;
    do {
      rc = ::poll(&p, 1, deadline.remaining_ms());
    } while (rc < 0 && errno == EINTR);
    if (rc == 0) {
      last = timeout_error("connect did not complete");
      continue;
    }
    int err = 0;
    socklen_t len = sizeof(err);
    if (getsockopt(s.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0) err = errno;
    if (err == 0) return s;
    last = system_error("connect", err);
  }
  return last;
}

Status TcpStore::Impl::handshake(const Deadline& deadline, bool* fatal) {
  const auto attempt_length = std::min<std::chrono::nanoseconds>(deadline.remaining(), kHandshakeAttempt);
  const Deadline attempt = Deadline::after(attempt_length);
  store::ClientHandshake hs(secret, job_id, address, port);
  const std::string what = "handshake";
  Result<std::string> hello = read_frame(attempt, what, store::kMaxHandshakeBytes);
  if (!hello.is_ok() && !rbuf.empty()) {
    *fatal = true;
    return not_a_braid_store(address, rbuf);
  }
  if (!hello.is_ok() && hello.status().code() == ErrorCode::timeout) {
    // A braid store that is only overloaded is tried again; the caller warns meanwhile.
    return timeout_error("the program at " + address + " accepted the connection but sent nothing for " +
                         ms_text(std::chrono::duration_cast<std::chrono::milliseconds>(attempt_length)) +
                         ", where a braid store greets at once: either it is not a braid store (is MASTER_PORT "
                         "taken by another program?) or the store's host is overloaded");
  }
  RETURN_IF_ERROR(hello.status());
  Result<std::string> answer = hs.on_hello(hello.value());
  *fatal = !answer.is_ok();
  if (!answer.is_ok()) return answer.status();
  RETURN_IF_ERROR(send_all(answer.value(), attempt, what));
  Result<std::string> verdict = read_frame(attempt, what, store::kMaxHandshakeBytes);
  if (!verdict.is_ok() && !hs.refusal().is_ok()) {
    *fatal = true;  // another job's store: what it answers changes nothing
    return hs.refusal();
  }
  if (!verdict.is_ok()) return verdict.status();
  Status st = hs.on_verdict(verdict.value());
  *fatal = !st.is_ok();
  return st;
}

Status TcpStore::Impl::lost(const std::string& what, const std::string& why) {
  broken = why;
  fd.reset();
  return peer_lost("store " + what + ": lost the connection to the braid store at " + address + " (" + why +
                   "). The store is served by rank 0 or braidrun: did it exit or crash?");
}

Status TcpStore::Impl::wait_fd(short events, const Deadline& deadline, const std::string& what) {
  pollfd p{fd.get(), events, 0};
  for (;;) {
    int rc = ::poll(&p, 1, deadline.remaining_ms());
    if (rc > 0) return Status::ok();  // readiness, or an error the next send/recv reports
    if (rc < 0 && errno == EINTR) continue;
    if (rc < 0) return lost(what, std::string("poll failed, errno ") + std::to_string(errno));
    broken = "an earlier call got no reply in time";
    fd.reset();
    return timeout_error("store " + what + ": no reply from the braid store at " + address +
                         " in time; closed the connection, since a late reply would be mistaken for the next "
                         "one. Is the store's host overloaded? BRAID_RENDEZVOUS_TIMEOUT_S raises the bound.");
  }
}

Status TcpStore::Impl::send_all(const std::string& frame, const Deadline& deadline, const std::string& what) {
  size_t off = 0;
  while (off < frame.size()) {
    ssize_t w = ::send(fd.get(), frame.data() + off, frame.size() - off, MSG_NOSIGNAL);
    if (w >= 0) {
      off += static_cast<size_t>(w);
      continue;
    }
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return lost(what, system_error("send", errno).message());
    RETURN_IF_ERROR(wait_fd(POLLOUT, deadline, what));
  }
  return Status::ok();
}

Result<std::string> TcpStore::Impl::read_frame(const Deadline& deadline, const std::string& what, size_t max_len) {
  for (;;) {
    if (rbuf.size() >= store::kFrameHeaderBytes) {
      uint32_t len = store::decode_u32(rbuf.data());
      if (len > max_len) {
        return lost(what, "the reply claims " + std::to_string(len) +
                              " bytes, over the protocol's limit: is that port really a braid store?");
      }
      if (rbuf.size() >= store::kFrameHeaderBytes + len) {
        std::string body = rbuf.substr(store::kFrameHeaderBytes, len);
        rbuf.erase(0, store::kFrameHeaderBytes + len);
        return body;
      }
    }
    size_t old = rbuf.size();
    size_t want = kReadChunk;
    if (old >= store::kFrameHeaderBytes) {
      want = std::max(want, store::kFrameHeaderBytes + store::decode_u32(rbuf.data()) - old);
    }
    rbuf.resize(old + want);
    ssize_t r = ::recv(fd.get(), rbuf.data() + old, want, 0);
    rbuf.resize(old + (r > 0 ? static_cast<size_t>(r) : 0));
    if (r == 0) return lost(what, "the server closed the connection");
    if (r < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) return lost(what, system_error("recv", errno).message());
      RETURN_IF_ERROR(wait_fd(POLLIN, deadline, what));
    }
  }
}

Result<std::string> TcpStore::Impl::call(const std::string& what, std::string frame, Deadline deadline) {
  std::lock_guard<std::mutex> lock(mu);
  if (!fd.valid()) {
    return peer_lost("store " + what + ": the connection to the braid store at " + address +
                     " is unusable: " + broken + ". Create a new TcpStore to reconnect.");
  }
  RETURN_IF_ERROR(send_all(frame, deadline, what));
  ASSIGN_OR_RETURN(std::string body, read_frame(deadline, what));
  if (body.empty()) return lost(what, "the server sent an empty reply");
  if (static_cast<ReplyKind>(body[0]) == ReplyKind::error) {
    FrameReader r(std::string_view(body).substr(1));
    auto code = static_cast<ErrorCode>(r.u8());
    std::string message = r.bytes();
    if (!r.ok() || code == ErrorCode::ok || code > ErrorCode::unauthenticated) code = ErrorCode::protocol;
    return Status(code, "store " + what + " at " + address + ": the server refused it: " + message);
  }
  return body;
}

Status TcpStore::Impl::timed_out_waiting(const std::string& what, std::chrono::milliseconds timeout, FrameReader& r) {
  std::vector<std::string> missing = r.keys();
  return timeout_error("store " + what + " timed out after " + ms_text(timeout) + " at " + address +
                       "; still missing: " + store::printable_keys(missing) +
                       ". Did every rank reach this point (a crashed or slow rank)? "
                       "BRAID_RENDEZVOUS_TIMEOUT_S raises the bound.");
}

namespace {

// The reply body's kind must be `want`; returns a reader positioned after it.
Result<FrameReader> expect(const std::string& body, ReplyKind want, const std::string& what, const std::string& addr) {
  if (static_cast<ReplyKind>(body[0]) != want) {
    return protocol_error("store " + what + " at " + addr + ": unexpected reply kind " +
                          std::to_string(static_cast<int>(static_cast<uint8_t>(body[0]))));
  }
  return FrameReader(std::string_view(body).substr(1));
}

}  // namespace

// ---- public API ----

TcpStore::TcpStore(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpStore::~TcpStore() = default;

std::unique_ptr<TcpStore> TcpStore::connect(const std::string& host, uint16_t port, TcpStoreOptions options) {
  if (options.timeout.count() <= 0) {
    throw Error(ErrorCode::invalid_argument,
                "TcpStore::connect: timeout must be positive, got " + ms_text(options.timeout));
  }
  auto impl = std::make_unique<Impl>();
  impl->host = host;
  impl->port = port;
  impl->address = store::format_address(host, port);
  impl->timeout_ms = options.timeout.count();
  if (options.secret && !options.secret->empty()) {
    impl->secret = value_or_raise(auth::JobSecret::from_text(*options.secret, "TcpStoreOptions::secret"));
  } else if (!options.secret) {
    const Result<auth::JobSecret>& secret = auth::process_secret();
    raise_if_error(secret.status());
    impl->secret = secret.value();
  }
  if (options.job_id) {
    impl->job_id = *options.job_id;
  } else if (const Result<Env>& env = global_env(); env.is_ok()) {
    impl->job_id = env.value().job_id;
  }
  if (impl->job_id.size() > store::kMaxJobIdBytes) {
    throw Error(ErrorCode::invalid_argument, "TcpStore::connect: the job id has " +
                                                 std::to_string(impl->job_id.size()) + " bytes; at most " +
                                                 std::to_string(store::kMaxJobIdBytes) + " are allowed");
  }
  if (!impl->secret.present()) auth::warn_unauthenticated_once("store client of " + impl->address);
  raise_if_error(impl->connect_with_backoff());
  return std::unique_ptr<TcpStore>(new TcpStore(std::move(impl)));
}

void TcpStore::set(const std::string& key, const std::string& value) {
  std::string what = "set(" + store::printable_key(key) + ")";
  auto frame = FrameWriter().u8(static_cast<uint8_t>(Opcode::set)).bytes(key).bytes(value).finish();
  std::string body = value_or_raise(impl_->call(what, std::move(frame), Deadline::after(timeout())));
  value_or_raise(expect(body, ReplyKind::ok, what, address()));
}

std::string TcpStore::get(const std::string& key) {
  std::string what = "get(" + store::printable_key(key) + ")";
  auto t = timeout();
  auto frame = FrameWriter().u8(static_cast<uint8_t>(Opcode::get)).bytes(key).i64(t.count()).finish();
  std::string body = value_or_raise(impl_->call(what, std::move(frame), Deadline::after(t + kReplyGrace)));
  if (static_cast<ReplyKind>(body[0]) == ReplyKind::timed_out) {
    FrameReader r(std::string_view(body).substr(1));
    raise_if_error(impl_->timed_out_waiting(what, t, r));
  }
  FrameReader r = value_or_raise(expect(body, ReplyKind::value, what, address()));
  std::string value = r.bytes();
  if (!r.ok()) raise_if_error(protocol_error("store " + what + " at " + address() + ": truncated reply"));
  return value;
}

int64_t TcpStore::add(const std::string& key, int64_t delta) {
  std::string what = "add(" + store::printable_key(key) + ")";
  auto frame = FrameWriter().u8(static_cast<uint8_t>(Opcode::add)).bytes(key).i64(delta).finish();
  std::string body = value_or_raise(impl_->call(what, std::move(frame), Deadline::after(timeout())));
  FrameReader r = value_or_raise(expect(body, ReplyKind::integer, what, address()));
  int64_t v = r.i64();
  if (!r.ok()) raise_if_error(protocol_error("store " + what + " at " + address() + ": truncated reply"));
  return v;
}

std::string TcpStore::compare_set(const std::string& key, const std::string& expected, const std::string& desired) {
  std::string what = "compare_set(" + store::printable_key(key) + ")";
  auto frame =
      FrameWriter().u8(static_cast<uint8_t>(Opcode::compare_set)).bytes(key).bytes(expected).bytes(desired).finish();
  std::string body = value_or_raise(impl_->call(what, std::move(frame), Deadline::after(timeout())));
  FrameReader r = value_or_raise(expect(body, ReplyKind::value, what, address()));
  std::string value = r.bytes();
  if (!r.ok()) raise_if_error(protocol_error("store " + what + " at " + address() + ": truncated reply"));
  return value;
}

void TcpStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  std::string what = "wait(" + store::printable_keys(keys, 4) + ")";
  if (timeout.count() < 0) raise_if_error(invalid_argument("store " + what + ": negative timeout"));
  timeout = std::min(timeout, kMaxTimeout);
  auto frame = FrameWriter().u8(static_cast<uint8_t>(Opcode::wait)).keys(keys).i64(timeout.count()).finish();
  std::string body = value_or_raise(impl_->call(what, std::move(frame), Deadline::after(timeout + kReplyGrace)));
  if (static_cast<ReplyKind>(body[0]) == ReplyKind::timed_out) {
    FrameReader r(std::string_view(body).substr(1));
    raise_if_error(impl_->timed_out_waiting(what, timeout, r));
  }
  value_or_raise(expect(body, ReplyKind::ok, what, address()));
}

bool TcpStore::check(const std::vector<std::string>& keys) {
  std::string what = "check(" + store::printable_keys(keys, 4) + ")";
  auto frame = FrameWriter().u8(static_cast<uint8_t>(Opcode::check)).keys(keys).finish();
  std::string body = value_or_raise(impl_->call(what, std::move(frame), Deadline::after(timeout())));
  FrameReader r = value_or_raise(expect(body, ReplyKind::boolean, what, address()));
  return r.u8() != 0;
}

bool TcpStore::delete_key(const std::string& key) {
  std::string what = "delete_key(" + store::printable_key(key) + ")";
  auto frame = FrameWriter().u8(static_cast<uint8_t>(Opcode::delete_key)).bytes(key).finish();
  std::string body = value_or_raise(impl_->call(what, std::move(frame), Deadline::after(timeout())));
  FrameReader r = value_or_raise(expect(body, ReplyKind::boolean, what, address()));
  return r.u8() != 0;
}

int64_t TcpStore::num_keys() {
  std::string what = "num_keys()";
  auto frame = FrameWriter().u8(static_cast<uint8_t>(Opcode::num_keys)).finish();
  std::string body = value_or_raise(impl_->call(what, std::move(frame), Deadline::after(timeout())));
  FrameReader r = value_or_raise(expect(body, ReplyKind::integer, what, address()));
  return r.i64();
}

std::chrono::milliseconds TcpStore::timeout() const { return impl_->timeout(); }
void TcpStore::set_timeout(std::chrono::milliseconds timeout) {
  if (timeout.count() <= 0) {
    throw Error(ErrorCode::invalid_argument, "TcpStore::set_timeout: must be positive, got " + ms_text(timeout));
  }
  impl_->timeout_ms = timeout.count();
}
std::string TcpStore::address() const { return impl_->address; }

}  // namespace braid
