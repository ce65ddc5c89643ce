// transport/shm/shm_setup.h - what a shm connection needs before its first message: which host
// we are on, the address, the unix socket that carries the handshake and the file descriptors,
// and the shared segment itself.
//
// Same host (the address says it, so a peer elsewhere is told apart from the text alone): the
// same kernel boot id, the same network namespace (the abstract unix socket lives in it) and the
// same /dev/shm mount (device number), as issue 20 defines it. The project's multi-host tests
// put ranks in network namespaces of one kernel; those never count as one host.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "common/deadline.h"
#include "common/status.h"
#include "transport/common/socket_setup.h"

namespace braid::transport::shm {


struct ShmHost {
  std::string boot_id;  // as the kernel prints it, without the newline; empty: unknown
  uint64_t netns = 0;   // inode of the network namespace (transport/common/host_identity.h)
  uint64_t shm_dev = 0; // st_dev of /dev/shm (0 when it is missing)
  bool operator==(const ShmHost&) const = default;
  std::string to_string() const;  // "<boot id>/<netns>/<dev>"
};
ShmHost local_shm_host();

// "shm:<socket name>/<boot id>/<netns>/<dev>": the abstract socket name and the host it is on.
struct ShmAddress {
  std::string socket_name;  // abstract namespace, without the leading NUL
  ShmHost host;
  std::string to_string() const;
  static Result<ShmAddress> parse(const std::string& text);
};
inline constexpr const char* kAddressPrefix = "shm:";

// A listening abstract unix socket under a fresh random name (returned in `name`).
Result<UniqueFd> listen_abstract(std::string& name);
// Connects to the abstract socket `name`, retrying while nobody listens there yet.
Result<UniqueFd> connect_abstract(const std::string& name, Deadline deadline);
// The pid of the process at the other end of a unix socket, as the kernel recorded it.
Result<pid_t> peer_pid(int fd);

// One small message plus up to 4 descriptors over a unix socket, whole, by the deadline.
Status send_with_fds(int fd, const void* data, size_t bytes, const std::vector<int>& fds, Deadline deadline);
// Receives exactly `bytes` and the descriptors that came with them.
Status recv_with_fds(int fd, void* data, size_t bytes, std::vector<UniqueFd>& fds, Deadline deadline);

// A mapped shared segment; unmapped on destruction.
class Mapping {
 public:
  Mapping() = default;
  Mapping(void* base, size_t bytes) : base_(base), bytes_(bytes) {}
  ~Mapping();
  Mapping(Mapping&& o) noexcept : base_(o.base_), bytes_(o.bytes_) { o.base_ = nullptr; }
  Mapping& operator=(Mapping&& o) noexcept;
  void* base() const { return base_; }
  size_t bytes() const { return bytes_; }

 private:
  void* base_ = nullptr;
  size_t bytes_ = 0;
};

// Creates an anonymous memfd for rings of `ring_bytes` each, with its pages reserved now (so a
// full tmpfs or memory limit is an error here, not a SIGBUS later). When that fails, halves the
// ring down to kMinRingBytes; `ring_bytes` is updated to what was made. The error names the size.
inline constexpr size_t kMinRingBytes = 64 * 1024;
Result<UniqueFd> create_segment(size_t& ring_bytes);
// Maps a segment of `bytes` shared, read-write.
Result<Mapping> map_segment(int fd, size_t bytes);

}  // namespace braid::transport::shm
