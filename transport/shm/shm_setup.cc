#include "transport/shm/shm_setup.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <random>
#include <thread>

#include "common/job_secret.h"
#include "transport/common/host_identity.h"
#include "transport/shm/shm_layout.h"

namespace braid::transport::shm {

namespace {

sockaddr_un abstract_address(const std::string& name, socklen_t& len) {
  sockaddr_un a{};
  a.sun_family = AF_UNIX;
  const size_t n = std::min(name.size(), sizeof a.sun_path - 1);
  std::memcpy(a.sun_path + 1, name.data(), n);  // sun_path[0] == 0: the abstract namespace
  len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + 1 + n);
  return a;
}

Status wait_fd(int fd, short events, Deadline deadline, const char* what) {
  for (;;) {
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, deadline.remaining_ms(1000));
    if (n > 0) return Status::ok();
    if (n < 0 && errno != EINTR) return system_error("poll", errno);
    if (deadline.expired()) return timeout_error(std::string("no ") + what + " by the deadline");
  }
}

}  // namespace

std::string ShmHost::to_string() const {
  return (boot_id.empty() ? "unknown" : boot_id) + "/" + std::to_string(netns) + "/" + std::to_string(shm_dev);
}

// What a host is, transport/common/host_identity.h decides (the runtime's per-peer choice uses the
// same key); the address carries its parts.
ShmHost local_shm_host() {
  const HostKey key = local_host_key();
  ShmHost h;
  h.boot_id = boot_id_text(key.boot_id);
  h.netns = key.net_ns;
  h.shm_dev = key.shm_device;
  return h;
}

std::string ShmAddress::to_string() const { return kAddressPrefix + socket_name + "/" + host.to_string(); }

Result<ShmAddress> ShmAddress::parse(const std::string& text) {
  const std::string prefix = kAddressPrefix;
  auto bad = [&](const std::string& why) {
    return invalid_argument("'" + text + "' is not a shm address (" + why + "; expected shm:<name>/<boot id>/<netns>/<dev>)");
  };
  if (text.rfind(prefix, 0) != 0) return bad("no shm: prefix");
  std::vector<std::string> parts;
  size_t from = prefix.size();
  for (;;) {
    size_t slash = text.find('/', from);
    parts.push_back(text.substr(from, slash == std::string::npos ? std::string::npos : slash - from));
    if (slash == std::string::npos) break;
    from = slash + 1;
  }
  if (parts.size() != 4 || parts[0].empty()) return bad("not four fields");
  ShmAddress a;
  a.socket_name = parts[0];
  a.host.boot_id = parts[1] == "unknown" ? "" : parts[1];
  char* end = nullptr;
  a.host.netns = std::strtoull(parts[2].c_str(), &end, 10);
  if (parts[2].empty() || *end != 0) return bad("netns is not a number");
  a.host.shm_dev = std::strtoull(parts[3].c_str(), &end, 10);
  if (parts[3].empty() || *end != 0) return bad("device is not a number");
  return a;
}

Result<UniqueFd> listen_abstract(std::string& name) {
  for (int attempt = 0; attempt < 8; ++attempt) {
    const auth::Nonce r = auth::fresh_nonce();
    char hex[33] = {};
    for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", r[static_cast<size_t>(i)]);
    std::string candidate = std::string("braid-shm-") + hex;
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0));
    if (fd.get() < 0) return system_error("socket(AF_UNIX)", errno);
    socklen_t len = 0;
    sockaddr_un a = abstract_address(candidate, len);
    if (::bind(fd.get(), reinterpret_cast<sockaddr*>(&a), len) == 0 && ::listen(fd.get(), 512) == 0) {
      name = candidate;
      return fd;
    }
    if (errno != EADDRINUSE) return system_error("binding the abstract unix socket @" + candidate, errno);
  }
  return system_error("binding an abstract unix socket", EADDRINUSE);
}

Result<UniqueFd> connect_abstract(const std::string& name, Deadline deadline) {
  auto backoff = std::chrono::milliseconds(1);
  for (;;) {
    UniqueFd fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    if (fd.get() < 0) return system_error("socket(AF_UNIX)", errno);
    socklen_t len = 0;
    sockaddr_un a = abstract_address(name, len);
    if (::connect(fd.get(), reinterpret_cast<sockaddr*>(&a), len) == 0) {
      int flags = fcntl(fd.get(), F_GETFL);
      if (flags < 0 || fcntl(fd.get(), F_SETFL, flags | O_NONBLOCK) != 0) return system_error("fcntl", errno);
      return fd;
    }
    const int err = errno;
    // Nobody listens yet (ECONNREFUSED), or its backlog is full (EAGAIN): try again.
    if (err != ECONNREFUSED && err != EAGAIN && err != ENOENT && err != EINTR) {
      return system_error("connecting to the abstract unix socket @" + name, err);
    }
    if (deadline.expired()) {
      return timeout_error("nobody listened on the abstract unix socket @" + name +
                           " by the deadline (did the peer start? is it in another network namespace?)");
    }
    std::this_thread::sleep_for(std::min<std::chrono::nanoseconds>(backoff, deadline.remaining()));
    backoff = std::min(backoff * 2, std::chrono::milliseconds(50));
  }
}

Result<pid_t> peer_pid(int fd) {
  ucred cred{};
  socklen_t len = sizeof cred;
  if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) return system_error("SO_PEERCRED", errno);
  if (cred.pid <= 0) return protocol_error("the kernel knows no pid for the peer of this unix socket");
  return cred.pid;
}

Status send_with_fds(int fd, const void* data, size_t bytes, const std::vector<int>& fds, Deadline deadline) {
  alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
  if (fds.size() > 4) return internal_error("send_with_fds: more than 4 descriptors");
  iovec iov{const_cast<void*>(data), bytes};
  msghdr m{};
  m.msg_iov = &iov;
  m.msg_iovlen = 1;
  if (!fds.empty()) {
    m.msg_control = control;
    m.msg_controllen = CMSG_SPACE(fds.size() * sizeof(int));
    cmsghdr* c = CMSG_FIRSTHDR(&m);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(fds.size() * sizeof(int));
    std::memcpy(CMSG_DATA(c), fds.data(), fds.size() * sizeof(int));
  }
  for (;;) {
    ssize_t n = ::sendmsg(fd, &m, MSG_NOSIGNAL);
    if (n == static_cast<ssize_t>(bytes)) return Status::ok();
    if (n >= 0) return protocol_error("a setup message went out in part");  // a few dozen bytes: never
    if (errno == EINTR) continue;
    if (errno == EPIPE || errno == ECONNRESET) return peer_lost("it closed the unix socket during setup");
    if (errno != EAGAIN) return system_error("sendmsg", errno);
    RETURN_IF_ERROR(wait_fd(fd, POLLOUT, deadline, "room in the unix socket"));
  }
}

Status recv_with_fds(int fd, void* data, size_t bytes, std::vector<UniqueFd>& fds, Deadline deadline) {
  size_t got = 0;
  while (got < bytes) {
    alignas(cmsghdr) char control[CMSG_SPACE(4 * sizeof(int))] = {};
    iovec iov{static_cast<char*>(data) + got, bytes - got};
    msghdr m{};
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
    ssize_t n = ::recvmsg(fd, &m, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (n > 0) {
      for (cmsghdr* c = CMSG_FIRSTHDR(&m); c != nullptr; c = CMSG_NXTHDR(&m, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
        const size_t count = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < count; ++i) {
          int f = -1;
          std::memcpy(&f, CMSG_DATA(c) + i * sizeof(int), sizeof f);
          fds.emplace_back(f);
        }
      }
      if ((m.msg_flags & MSG_CTRUNC) != 0) return protocol_error("more descriptors than expected during setup");
      got += static_cast<size_t>(n);
      continue;
    }
    if (n == 0) return peer_lost("it closed the unix socket during setup");
    if (errno == EINTR) continue;
    if (errno != EAGAIN) return system_error("recvmsg", errno);
    RETURN_IF_ERROR(wait_fd(fd, POLLIN, deadline, "setup message"));
  }
  return Status::ok();
}

Mapping::~Mapping() {
  if (base_ != nullptr) ::munmap(base_, bytes_);
}

Mapping& Mapping::operator=(Mapping&& o) noexcept {
  if (this != &o) {
    if (base_ != nullptr) ::munmap(base_, bytes_);
    base_ = o.base_;
    bytes_ = o.bytes_;
    o.base_ = nullptr;
  }
  return *this;
}

Result<UniqueFd> create_segment(size_t& ring_bytes) {
  const size_t wanted = ring_bytes;
  int last_err = 0;
  for (size_t ring = wanted; ring >= kMinRingBytes; ring /= 2) {
    UniqueFd fd(::memfd_create("braid-shm", MFD_CLOEXEC));
    if (fd.get() < 0) return system_error("memfd_create", errno);
    const auto bytes = static_cast<off_t>(segment_bytes(ring));
    // fallocate reserves the pages now: a tmpfs or memory cgroup too small fails here.
    if (::ftruncate(fd.get(), bytes) != 0) {
      last_err = errno;
      continue;
    }
    const int rc = ::posix_fallocate(fd.get(), 0, bytes);  // returns the error, leaves errno alone
    if (rc == 0) {
      ring_bytes = ring;
      return fd;
    }
    last_err = rc;
  }
  return Status(ErrorCode::system, "cannot reserve shared memory for shm rings: " + std::to_string(segment_bytes(wanted)) +
                                       " bytes per connection, nor less down to " +
                                       std::to_string(segment_bytes(kMinRingBytes)) + " (" + std::strerror(last_err) +
                                       "); raise the memory limit, or use BRAID_TRANSPORT=tcp");
}

Result<Mapping> map_segment(int fd, size_t bytes) {
  // MAP_POPULATE maps every page now (writable: a shared tmpfs mapping needs no write notice),
  // so the first lap of messages through the rings takes no page fault per page on each side.
  void* p = ::mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, fd, 0);
  if (p == MAP_FAILED) return system_error("mmap of " + std::to_string(bytes) + " bytes of shared memory", errno);
  return Mapping(p, bytes);
}

}  // namespace braid::transport::shm
