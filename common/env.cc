#include "common/env.h"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <mutex>
#include <utility>
#include <vector>

#include "common/env_vars.h"
#include "common/log.h"

extern char** environ;

namespace braid {

EnvLookup process_env() {
  return [](const char* name) { return std::getenv(name); };
}

Result<int64_t> parse_env_int(const char* name, const char* value, int64_t min, int64_t max) {
  std::string v = value ? value : "";
  const auto bad = [&] {
    return invalid_argument(std::string(name) + "='" + v + "' is not an integer in [" + std::to_string(min) +
                            ", " + std::to_string(max) + "]");
  };
  if (v.empty()) return bad();
  char* end = nullptr;
  errno = 0;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (errno != 0 || end == v.c_str() || *end != '\0' || x < min || x > max) return bad();
  return static_cast<int64_t>(x);
}

Result<double> parse_env_seconds(const char* name, const char* value) {
  std::string v = value ? value : "";
  char* end = nullptr;
  errno = 0;
  double x = v.empty() ? NAN : std::strtod(v.c_str(), &end);
  if (v.empty() || errno != 0 || *end != '\0' || !(x > 0) || !std::isfinite(x)) {
    return invalid_argument(std::string(name) + "='" + v + "' must be a positive number of seconds");
  }
  return x;
}

namespace {

// The row of a variable Env::parse reads; env_vars_test checks every one is there.
const EnvVar& row(const char* name) {
  const EnvVar* v = find_env_var(name);
  if (v == nullptr) std::abort();
  return *v;
}

Status one_of(const char* name, const std::string& v) {
  std::string list;
  for (std::string_view a : env_choices(row(name))) {
    if (v == a) return Status::ok();
    list += (list.empty() ? "" : ", ") + std::string(a);
  }
  return invalid_argument(std::string(name) + "='" + v + "' is not one of: " + list);
}

// "auto", one transport, or a comma-separated preference list of distinct transports.
Status transport_list(const char* name, const std::string& v) {
  if (v.find(',') == std::string::npos) return one_of(name, v);
  std::string choices;
  for (std::string_view a : env_choices(row(name))) choices += (choices.empty() ? "" : ", ") + std::string(a);
  std::vector<std::string> seen;
  size_t at = 0;
  for (;;) {
    const size_t comma = v.find(',', at);
    const std::string item = v.substr(at, comma == std::string::npos ? std::string::npos : comma - at);
    const bool known = item != "auto" && one_of(name, item).is_ok();
    if (!known) {
      return invalid_argument(std::string(name) + "='" + v + "': '" + item + "' is not one of: " + choices +
                              " (a list names transports other than auto, such as shm,tcp)");
    }
    if (std::find(seen.begin(), seen.end(), item) != seen.end()) {
      return invalid_argument(std::string(name) + "='" + v + "' names '" + item + "' twice");
    }
    seen.push_back(item);
    if (comma == std::string::npos) return Status::ok();
    at = comma + 1;
  }
}

Result<int64_t> in_range(const char* name, const char* value) {
  return parse_env_int(name, value, row(name).min, row(name).max);
}

// Sizes accept a K/M/G suffix (powers of two), as braid-perf's -b/-e do.
Result<size_t> parse_bytes(const char* name, const char* value) {
  const size_t min = static_cast<size_t>(row(name).min);
  const size_t max = row(name).max == 0 ? SIZE_MAX >> 1 : static_cast<size_t>(row(name).max);
  std::string v = value;
  size_t mult = 1;
  if (!v.empty()) {
    char s = v.back();
    if (s == 'K' || s == 'k') mult = size_t{1} << 10;
    if (s == 'M' || s == 'm') mult = size_t{1} << 20;
    if (s == 'G' || s == 'g') mult = size_t{1} << 30;
    if (mult != 1) v.pop_back();
  }
  auto n = parse_env_int(name, v.c_str(), 0, INT64_MAX / static_cast<int64_t>(mult));
  size_t bytes = n.is_ok() ? static_cast<size_t>(n.value()) * mult : 0;
  if (!n.is_ok() || (bytes != 0 && (bytes < min || bytes > max))) {
    const std::string range = row(name).max == 0 ? "of at least " + std::to_string(min) + " bytes"
                                                 : "in [" + std::to_string(min) + ", " + std::to_string(max) + "] bytes";
    return invalid_argument(std::string(name) + "='" + value + "' must be 0 or a size " + range +
                            " (K/M/G suffixes allowed)");
  }
  return bytes;
}

}  // namespace

Result<Env> Env::parse(const EnvLookup& lookup) {
  Env e;
  if (const char* v = lookup("BRAID_TRANSPORT")) {
    e.transport = v;
    RETURN_IF_ERROR(transport_list("BRAID_TRANSPORT", e.transport));
  }
  if (const char* v = lookup("BRAID_SHM_DISABLE")) {
    std::string s = v;
    RETURN_IF_ERROR(one_of("BRAID_SHM_DISABLE", s));
    e.shm_disable = s == "1";
  }
  if (const char* v = lookup("BRAID_SOCKET_IFNAME")) e.socket_ifname = v;
  if (const char* v = lookup("BRAID_NSOCKS")) {
    ASSIGN_OR_RETURN(int64_t n, in_range("BRAID_NSOCKS", v));
    e.nsocks = static_cast<int>(n);
  }
  if (const char* v = lookup("BRAID_CHUNK_BYTES")) {
    ASSIGN_OR_RETURN(e.chunk_bytes, parse_bytes("BRAID_CHUNK_BYTES", v));
  }
  if (const char* v = lookup("BRAID_RING_DEPTH")) {
    ASSIGN_OR_RETURN(int64_t n, in_range("BRAID_RING_DEPTH", v));
    e.ring_depth = static_cast<int>(n);
  }
  if (const char* v = lookup("BRAID_RING_ORDER")) {
    e.ring_order = v;
    RETURN_IF_ERROR(one_of("BRAID_RING_ORDER", e.ring_order));
  }
  if (const char* v = lookup("BRAID_ALGO")) {
    e.algo = v;
    RETURN_IF_ERROR(one_of("BRAID_ALGO", e.algo));
  }
  if (const char* v = lookup("BRAID_TIMEOUT_S")) {
    ASSIGN_OR_RETURN(e.timeout_s, parse_env_seconds("BRAID_TIMEOUT_S", v));
  }
  if (const char* v = lookup("BRAID_RENDEZVOUS_TIMEOUT_S")) {
    ASSIGN_OR_RETURN(e.rendezvous_timeout_s, parse_env_seconds("BRAID_RENDEZVOUS_TIMEOUT_S", v));
    e.rendezvous_timeout_set = true;
  }
  if (const char* v = lookup("BRAID_PEER_TIMEOUT_S")) {
    ASSIGN_OR_RETURN(e.peer_timeout_s, parse_env_seconds("BRAID_PEER_TIMEOUT_S", v));
  }
  if (const char* v = lookup("BRAID_SHRINK_TIMEOUT_S")) {
    ASSIGN_OR_RETURN(e.shrink_timeout_s, parse_env_seconds("BRAID_SHRINK_TIMEOUT_S", v));
  }
  if (const char* v = lookup("BRAID_PORT_RANGE")) {
    std::string s = v;
    size_t dash = s.find('-');
    auto lo = parse_env_int("BRAID_PORT_RANGE", s.substr(0, dash).c_str(), 1, 65535);
    auto hi = dash == std::string::npos ? lo : parse_env_int("BRAID_PORT_RANGE", s.substr(dash + 1).c_str(), 1, 65535);
    if (!lo.is_ok() || !hi.is_ok() || hi.value() < lo.value()) {
      return invalid_argument("BRAID_PORT_RANGE='" + s + "' must be 'LO-HI' with 1 <= LO <= HI <= 65535");
    }
    e.port_lo = static_cast<uint16_t>(lo.value());
    e.port_hi = static_cast<uint16_t>(hi.value());
  }
  if (const char* v = lookup("BRAID_DEBUG")) {
    std::string s = v;
    for (char& c : s) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    RETURN_IF_ERROR(one_of("BRAID_DEBUG", s));
    e.debug = s == "TRACE" ? LogLevel::trace : s == "INFO" ? LogLevel::info : LogLevel::warn;
  }
  if (const char* v = lookup("BRAID_ZCOPY_BYTES")) {
    ASSIGN_OR_RETURN(e.zcopy_bytes, parse_bytes("BRAID_ZCOPY_BYTES", v));
  }
  if (const char* v = lookup("BRAID_SPIN_US")) {
    ASSIGN_OR_RETURN(int64_t n, in_range("BRAID_SPIN_US", v));
    e.spin_us = static_cast<int>(n);
    e.spin_us_set = true;
  }
  if (const char* v = lookup("BRAID_SHM_CMA")) {
    std::string s = v;
    RETURN_IF_ERROR(one_of("BRAID_SHM_CMA", s));
    e.shm_cma = s == "1";
    e.shm_cma_auto = s == "auto";
  }
  if (const char* v = lookup("BRAID_SHM_RING_BYTES")) {
    ASSIGN_OR_RETURN(e.shm_ring_bytes, parse_bytes("BRAID_SHM_RING_BYTES", v));
    if (e.shm_ring_bytes == 0) e.shm_ring_bytes = Env().shm_ring_bytes;
    if (e.shm_ring_bytes % 4096 != 0) {
      return invalid_argument(std::string("BRAID_SHM_RING_BYTES='") + v + "' must be a multiple of 4 KiB (4096 bytes)");
    }
  }
  if (const char* v = lookup("BRAID_CALLER_PROGRESS")) {
    std::string s = v;
    RETURN_IF_ERROR(one_of("BRAID_CALLER_PROGRESS", s));
    e.caller_progress = s == "1";
  }
  for (auto [name, field] : {std::pair{"BRAID_LOOPBACK_CC", &e.loopback_cc}, std::pair{"BRAID_NETWORK_CC", &e.network_cc}}) {
    const char* v = lookup(name);
    if (v == nullptr) continue;
    *field = v;
    bool ok = !field->empty() && field->size() < 16;  // TCP_CA_NAME_MAX
    for (char c : *field) ok = ok && (std::islower(static_cast<unsigned char>(c)) || std::isdigit(static_cast<unsigned char>(c)) || c == '_');
    if (!ok) {
      return invalid_argument(std::string(name) + "='" + *field +
                              "' must name a TCP congestion control (reno, cubic, ...) or be 'system'");
    }
  }
  if (const char* v = lookup("BRAID_IB_HCA")) e.ib_hca = v;
  if (const char* v = lookup("BRAID_GDR")) {
    e.gdr = v;
    RETURN_IF_ERROR(one_of("BRAID_GDR", e.gdr));
  }
  // The ib transport's queue pairs.
  const std::pair<const char*, int*> ib_ints[] = {
      {"BRAID_IB_GID_INDEX", &e.ib_gid_index}, {"BRAID_IB_TIMEOUT", &e.ib_timeout},
      {"BRAID_IB_RETRY_CNT", &e.ib_retry_cnt}, {"BRAID_IB_QPS_PER_CONNECTION", &e.ib_qps_per_connection},
      {"BRAID_IB_SL", &e.ib_sl},               {"BRAID_IB_TC", &e.ib_tc},
  };
  for (const auto& [name, field] : ib_ints) {
    if (const char* v = lookup(name)) {
      ASSIGN_OR_RETURN(int64_t n, in_range(name, v));
      *field = static_cast<int>(n);
    }
  }
  if (const char* v = lookup("BRAID_SECRET")) {
    e.secret = v;
    // The value itself never appears in a message.
    if (e.secret.size() < 16) {
      return invalid_argument("BRAID_SECRET is set but holds " + std::to_string(e.secret.size()) +
                              " characters: a job's secret needs at least 16 (e.g. from `openssl rand -hex 32`)");
    }
  }
  if (const char* v = lookup("BRAID_SECRET_FILE")) {
    e.secret_file = v;
    if (e.secret_file.empty()) return invalid_argument("BRAID_SECRET_FILE is set but empty: name a file, or unset it");
    if (!e.secret.empty()) {
      return invalid_argument("both BRAID_SECRET and BRAID_SECRET_FILE are set: set one of them");
    }
  }
  if (const char* v = lookup("BRAID_JOB_ID")) e.job_id = v;
  if (const char* v = lookup("BRAID_STORE_BIND")) {
    e.store_bind = v;
    if (e.store_bind.empty()) return invalid_argument("BRAID_STORE_BIND is set but empty: name an address, or unset it");
  }
  if (const char* v = lookup("BRAID_CUDA_STAGING_BYTES")) {
    ASSIGN_OR_RETURN(e.cuda_staging_bytes, parse_bytes("BRAID_CUDA_STAGING_BYTES", v));
    if (e.cuda_staging_bytes == 0) e.cuda_staging_bytes = size_t{64} << 20;
  }
  if (const char* v = lookup("BRAID_CUDA_REDUCE")) {
    e.cuda_reduce = v;
    RETURN_IF_ERROR(one_of("BRAID_CUDA_REDUCE", e.cuda_reduce));
  }
  if (const char* v = lookup("BRAID_STORE_MAX_FRAME_BYTES")) {
    ASSIGN_OR_RETURN(e.store_max_frame_bytes,
                     parse_bytes("BRAID_STORE_MAX_FRAME_BYTES", v));
    if (e.store_max_frame_bytes == 0) e.store_max_frame_bytes = size_t{4} << 20;
  }
  if (const char* v = lookup("BRAID_STORE_MAX_CLIENTS")) {
    ASSIGN_OR_RETURN(int64_t n, in_range("BRAID_STORE_MAX_CLIENTS", v));
    e.store_max_clients = static_cast<size_t>(n);
  }
  if (const char* v = lookup("BRAID_STORE_MAX_PENDING")) {
    ASSIGN_OR_RETURN(int64_t n, in_range("BRAID_STORE_MAX_PENDING", v));
    e.store_max_pending = static_cast<size_t>(n);
  }
  return e;
}

const Result<Env>& global_env() {
  static std::once_flag once;
  static Result<Env>* parsed = nullptr;
  std::call_once(once, [] {
    parsed = new Result<Env>(Env::parse(process_env()));
    // log_line, not BRAID_LOG: the level filter would call back into global_env.
    for (const std::string& w : unknown_env_warnings(environ)) log_line(LogLevel::warn, w);
  });
  return *parsed;
}

}  // namespace braid
