#include "transport/common/host_identity.h"

#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <fstream>
#include <initializer_list>
#include <iterator>

namespace braid::transport {

namespace {

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool is_unknown(const BootId& id) { return id == BootId{}; }

const BootId& this_boot_id() {
  static const BootId id = [] {
    std::ifstream f("/proc/sys/kernel/random/boot_id");
    std::string text((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
    return parse_boot_id(text).value_or(BootId{});
  }();
  return id;
}

// The calling thread's CPUs. A fixed cpu_set_t holds CPU_SETSIZE (1024) CPUs; the kernel refuses
// it (EINVAL) on a machine configured for more, so a larger set is tried before giving up.
CpuMask this_thread_cpus() {
  CpuMask mask{};
  for (size_t n = CPU_SETSIZE; n <= (size_t{1} << 17); n *= 2) {
    cpu_set_t* set = CPU_ALLOC(n);
    if (set == nullptr) return CpuMask{};
    const size_t bytes = CPU_ALLOC_SIZE(n);
    CPU_ZERO_S(bytes, set);
    if (sched_getaffinity(0, bytes, set) != 0) {
      CPU_FREE(set);
      if (errno == EINVAL) continue;
      return CpuMask{};
    }
    bool beyond = false;
    for (size_t c = 0; c < n; ++c) {
      if (!CPU_ISSET_S(c, bytes, set)) continue;
      if (c >= kMaxCpus) {
        beyond = true;
        break;
      }
      mask[c / 64] |= uint64_t{1} << (c % 64);
    }
    CPU_FREE(set);
    return beyond ? CpuMask{} : mask;
  }
  return CpuMask{};
}

}  // namespace

std::optional<BootId> parse_boot_id(std::string_view text) {
  while (!text.empty() && (text.back() == '\n' || text.back() == ' ')) text.remove_suffix(1);
  // 8-4-4-4-12 hex digits.
  if (text.size() != 36) return std::nullopt;
  BootId id{};
  size_t nibble = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    if (i == 8 || i == 13 || i == 18 || i == 23) {
      if (text[i] != '-') return std::nullopt;
      continue;
    }
    int d = hex_digit(text[i]);
    if (d < 0) return std::nullopt;
    id[nibble / 2] = static_cast<uint8_t>(id[nibble / 2] | (nibble % 2 == 0 ? d << 4 : d));
    ++nibble;
  }
  return id;
}

HostIdentity local_host_identity() { return HostIdentity{this_boot_id(), this_thread_cpus()}; }

HostKey local_host_key() {
  HostKey key;
  key.boot_id = this_boot_id();
  struct stat st{};
  // thread-self: a thread may have entered a namespace of its own (setns, unshare).
  if (::stat("/proc/thread-self/ns/net", &st) == 0 || ::stat("/proc/self/ns/net", &st) == 0) {
    key.net_ns = static_cast<uint64_t>(st.st_ino);
  }
  if (::stat("/dev/shm", &st) == 0) key.shm_device = static_cast<uint64_t>(st.st_dev);
  return key;
}

std::string boot_id_text(const BootId& id) {
  if (is_unknown(id)) return {};
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < id.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    s += kHex[id[i] >> 4];
    s += kHex[id[i] & 15];
  }
  return s;
}

std::string host_label(const HostKey& key) {
  if (is_unknown(key.boot_id) || key.net_ns == 0 || key.shm_device == 0) {
    return "unknown/pid:" + std::to_string(::getpid()) + "/net:" + std::to_string(key.net_ns);
  }
  return boot_id_text(key.boot_id) + "/net:" + std::to_string(key.net_ns) + "/shm:" + std::to_string(key.shm_device);
}

std::string local_host_label() { return host_label(local_host_key()); }

size_t cpu_count(const CpuMask& mask) {
  size_t n = 0;
  for (uint64_t w : mask) n += static_cast<size_t>(std::popcount(w));
  return n;
}

CpuMask cpu_mask_of(std::initializer_list<size_t> cpus) {
  CpuMask mask{};
  for (size_t c : cpus) {
    if (c < kMaxCpus) mask[c / 64] |= uint64_t{1} << (c % 64);
  }
  return mask;
}

std::string describe_cpus(const CpuMask& mask) {
  auto has = [&](size_t c) { return c < kMaxCpus && (mask[c / 64] >> (c % 64) & 1) != 0; };
  std::string s;
  for (size_t c = 0; c < kMaxCpus; ++c) {
    if (!has(c)) continue;
    size_t last = c;
    while (has(last + 1)) ++last;
    if (!s.empty()) s += ',';
    s += std::to_string(c);
    if (last > c) {
      s += '-';
      s += std::to_string(last);
    }
    c = last;
  }
  return s.empty() ? "unknown" : s;
}

bool shares_single_cpu(const HostIdentity& self, const HostIdentity& peer) {
  if (is_unknown(self.boot_id) || self.boot_id != peer.boot_id) return false;
  if (cpu_count(self.cpus) == 0 || cpu_count(peer.cpus) == 0) return false;
  CpuMask both{};
  for (size_t i = 0; i < both.size(); ++i) both[i] = self.cpus[i] | peer.cpus[i];
  return cpu_count(both) < 2;
}

}  // namespace braid::transport
