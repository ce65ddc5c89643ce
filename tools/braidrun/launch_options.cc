#include "tools/braidrun/launch_options.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <thread>

#include "tools/braidrun/etcd_http.h"

namespace braid::braidrun {
namespace {

// torchrun's default port for a c10d endpoint given without one.
constexpr uint16_t kDefaultRdzvPort = 29400;
constexpr int64_t kMaxProcsPerNode = 4096;
constexpr int64_t kMaxNodes = 1 << 20;
constexpr int64_t kMaxRestarts = 1 << 20;

Status bad(const std::string& message) { return invalid_argument(message + " (see braidrun --help)"); }

Result<int64_t> parse_int(const std::string& flag, const std::string& v, int64_t min, int64_t max) {
  char* end = nullptr;
  errno = 0;
  long long x = v.empty() ? 0 : std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || errno != 0 || *end != '\0' || x < min || x > max) {
    return bad("--" + flag + " '" + v + "' must be an integer in [" + std::to_string(min) + ", " +
               std::to_string(max) + "]");
  }
  return static_cast<int64_t>(x);
}

Result<double> parse_seconds(const std::string& flag, const std::string& v, bool zero_ok) {
  char* end = nullptr;
  errno = 0;
  double x = v.empty() ? NAN : std::strtod(v.c_str(), &end);
  if (v.empty() || errno != 0 || *end != '\0' || !std::isfinite(x) || x < 0 || (!zero_ok && x == 0)) {
    return bad("--" + flag + " '" + v + "' must be a " + (zero_ok ? "non-negative" : "positive") +
               " number of seconds");
  }
  return x;
}

// "N" or "MIN:MAX" into o.min_nnodes and o.nnodes.
Status parse_nnodes(const std::string& v, LaunchOptions& o) {
  auto colon = v.find(':');
  if (colon == std::string::npos) {
    ASSIGN_OR_RETURN(int64_t n, parse_int("nnodes", v, 1, kMaxNodes));
    o.min_nnodes = o.nnodes = static_cast<int>(n);
    return Status::ok();
  }
  ASSIGN_OR_RETURN(int64_t lo, parse_int("nnodes", v.substr(0, colon), 1, kMaxNodes));
  ASSIGN_OR_RETURN(int64_t hi, parse_int("nnodes", v.substr(colon + 1), 1, kMaxNodes));
  if (lo > hi) return bad("--nnodes " + v + ": MIN is larger than MAX (expected MIN:MAX, e.g. 1:4)");
  o.min_nnodes = static_cast<int>(lo);
  o.nnodes = static_cast<int>(hi);
  return Status::ok();
}

// --rdzv-conf "key=value,key=value", as torchrun takes it. The keys braidrun acts on must hold
// numbers; other keys (torchrun's timeout, read_timeout, is_host, ...) are accepted and ignored,
// so pasted torchrun lines work.
Status parse_rdzv_conf(const std::string& v, LaunchOptions& o) {
  for (size_t from = 0; from <= v.size();) {
    size_t comma = v.find(',', from);
    if (comma == std::string::npos) comma = v.size();
    const std::string item = v.substr(from, comma - from);
    from = comma + 1;
    if (item.empty()) continue;
    const size_t eq = item.find('=');
    if (eq == std::string::npos) return bad("--rdzv-conf '" + v + "': '" + item + "' is not key=value");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    if (key == "last_call_timeout") {
      ASSIGN_OR_RETURN(o.last_call_s, parse_seconds("rdzv-conf last_call_timeout", value, /*zero_ok=*/true));
    } else if (key == "keep_alive_interval") {
      ASSIGN_OR_RETURN(o.keep_alive_interval_s, parse_seconds("rdzv-conf keep_alive_interval", value, /*zero_ok=*/false));
    } else if (key == "keep_alive_max_attempt") {
      ASSIGN_OR_RETURN(int64_t n, parse_int("rdzv-conf keep_alive_max_attempt", value, 1, 1000));
      o.keep_alive_max_attempt = static_cast<int>(n);
    } else if (key == "join_timeout") {
      ASSIGN_OR_RETURN(o.join_timeout_s, parse_seconds("rdzv-conf join_timeout", value, /*zero_ok=*/false));
    }
  }
  return Status::ok();
}

Result<int> parse_nproc(const std::string& v) {
  if (v == "auto" || v == "cpu") {
    unsigned n = std::thread::hardware_concurrency();
    return static_cast<int>(n == 0 ? 1 : n);
  }
  if (v == "gpu") return bad("--nproc-per-node gpu is not supported: give the number of processes");
  ASSIGN_OR_RETURN(int64_t n, parse_int("nproc-per-node", v, 1, kMaxProcsPerNode));
  return static_cast<int>(n);
}

// "host:port", "[v6addr]:port" or "host" (port 29400, as torchrun).
Status parse_endpoint(const std::string& v, LaunchOptions& o) {
  std::string host = v, port;
  if (!v.empty() && v.front() == '[') {
    auto close = v.find(']');
    if (close == std::string::npos) return bad("--rdzv-endpoint '" + v + "': missing ']'");
    host = v.substr(1, close - 1);
    if (close + 1 < v.size()) {
      if (v[close + 1] != ':') return bad("--rdzv-endpoint '" + v + "': expected ':' after ']'");
      port = v.substr(close + 2);
    }
  } else if (auto colon = v.rfind(':'); colon != std::string::npos) {
    host = v.substr(0, colon);
    port = v.substr(colon + 1);
  }
  if (host.empty()) return bad("--rdzv-endpoint '" + v + "' has no host; expected host:port");
  o.endpoint_host = host;
  o.endpoint_port = kDefaultRdzvPort;
  if (!port.empty()) {
    ASSIGN_OR_RETURN(int64_t p, parse_int("rdzv-endpoint port", port, 1, 65535));
    o.endpoint_port = static_cast<uint16_t>(p);
  }
  return Status::ok();
}

enum class Arity { none, one };

struct FlagSpec {
  const char* name;  // canonical spelling, dashes
  Arity arity;
};

constexpr FlagSpec kFlags[] = {
    {"nproc-per-node", Arity::one}, {"nnodes", Arity::one},         {"node-rank", Arity::one},
    {"master-addr", Arity::one},    {"master-port", Arity::one},    {"standalone", Arity::none},
    {"rdzv-endpoint", Arity::one},  {"rdzv-id", Arity::one},        {"rdzv-backend", Arity::one},
    {"rdzv-conf", Arity::one},      {"max-restarts", Arity::one},   {"monitor-interval", Arity::one},
    {"role", Arity::one},           {"no-python", Arity::none},     {"module", Arity::none},
    {"run-path", Arity::none},      {"no-prefix", Arity::none},     {"log-dir", Arity::one},
    {"grace-s", Arity::one},        {"rdzv-timeout-s", Arity::one}, {"help", Arity::none},
    {"cpu-bind", Arity::one},       {"version", Arity::none},
};

const FlagSpec* find_flag(const std::string& name) {
  for (const FlagSpec& f : kFlags) {
    if (name == f.name) return &f;
  }
  return nullptr;
}

struct Seen {
  bool nnodes = false;
  std::optional<std::string> rdzv_endpoint;
  bool rdzv_timeout = false;
  std::optional<std::string> master_addr;
  std::optional<uint16_t> master_port;
};

Status apply(const std::string& flag, const std::string& v, LaunchOptions& o, Seen& seen) {
  if (flag == "nproc-per-node") {
    ASSIGN_OR_RETURN(o.nproc_per_node, parse_nproc(v));
  } else if (flag == "nnodes") {
    RETURN_IF_ERROR(parse_nnodes(v, o));
    seen.nnodes = true;
  } else if (flag == "node-rank") {
    ASSIGN_OR_RETURN(int64_t r, parse_int(flag, v, 0, kMaxNodes - 1));
    o.node_rank = static_cast<int>(r);
  } else if (flag == "master-addr") {
    if (v.empty()) return bad("--master-addr is empty");
    seen.master_addr = v;
  } else if (flag == "master-port") {
    ASSIGN_OR_RETURN(int64_t p, parse_int(flag, v, 1, 65535));
    seen.master_port = static_cast<uint16_t>(p);
  } else if (flag == "standalone") {
    o.standalone = true;
  } else if (flag == "rdzv-endpoint") {
    seen.rdzv_endpoint = v;  // read once the backend is known: etcd takes a list
  } else if (flag == "rdzv-id") {
    if (v.empty()) return bad("--rdzv-id is empty");
    o.run_id = v;
  } else if (flag == "rdzv-backend") {
    // torchrun's "etcd-v2" is its etcd v3 backend too.
    if (v == "etcd" || v == "etcd-v2") {
      o.rdzv_backend = LaunchOptions::RdzvBackend::etcd;
    } else if (v == "c10d") {
      o.rdzv_backend = LaunchOptions::RdzvBackend::c10d;
    } else {
      return bad("--rdzv-backend '" + v + "' is not supported: use c10d (a braidrun serves the job's store) or " +
                 "etcd (the nodes meet in an etcd v3 cluster)");
    }
  } else if (flag == "max-restarts") {
    ASSIGN_OR_RETURN(int64_t n, parse_int(flag, v, 0, kMaxRestarts));
    o.max_restarts = static_cast<int>(n);
  } else if (flag == "monitor-interval") {
    ASSIGN_OR_RETURN(o.monitor_interval_s, parse_seconds(flag, v, /*zero_ok=*/false));
  } else if (flag == "module" || flag == "run-path") {
    return bad("--" + flag + " is Python-specific: braidrun runs any program, e.g. `braidrun ... python -m pkg.mod`");
  } else if (flag == "no-prefix") {
    o.prefix_output = false;
  } else if (flag == "log-dir") {
    if (v.empty()) return bad("--log-dir is empty");
    o.log_dir = v;
  } else if (flag == "cpu-bind") {
    if (v != "auto" && v != "none") return bad("--cpu-bind must be auto or none, not '" + v + "'");
    o.cpu_bind = v == "auto";
  } else if (flag == "grace-s") {
    ASSIGN_OR_RETURN(o.grace_s, parse_seconds(flag, v, /*zero_ok=*/true));
  } else if (flag == "rdzv-timeout-s") {
    ASSIGN_OR_RETURN(o.rdzv_timeout_s, parse_seconds(flag, v, /*zero_ok=*/false));
    seen.rdzv_timeout = true;
  } else if (flag == "rdzv-conf") {
    RETURN_IF_ERROR(parse_rdzv_conf(v, o));
  } else if (flag == "help") {
    o.help = true;
  } else if (flag == "version") {
    o.version = true;
  }
  // role, no-python: accepted so pasted torchrun lines work; they change nothing
  // here (braidrun never implies Python and has one role).
  return Status::ok();
}

}  // namespace

Result<LaunchOptions> parse_launch_options(const std::vector<std::string>& args, double default_rdzv_timeout_s) {
  LaunchOptions o;
  o.rdzv_timeout_s = default_rdzv_timeout_s;
  Seen seen;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") {
      ++i;
      break;
    }
    if (a == "-h") {
      o.help = true;
      continue;
    }
    if (a == "-m") return bad("-m is Python-specific: braidrun runs any program, e.g. `braidrun ... python -m pkg.mod`");
    if (a.size() < 3 || a.compare(0, 2, "--") != 0) break;  // the program starts here
    std::string name = a.substr(2), value;
    bool has_inline = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_inline = true;
    }
    for (char& c : name) c = c == '_' ? '-' : c;
    const FlagSpec* spec = find_flag(name);
    if (!spec) return bad("unknown flag '" + a + "'");
    if (spec->arity == Arity::none) {
      if (has_inline) return bad("--" + name + " takes no value");
    } else if (!has_inline) {
      if (i + 1 >= args.size()) return bad("--" + name + " needs a value");
      value = args[++i];
    }
    RETURN_IF_ERROR(apply(name, value, o, seen));
  }
  o.program.assign(args.begin() + static_cast<std::ptrdiff_t>(i), args.end());
  if (o.help || o.version) return o;

  if (o.rdzv_backend == LaunchOptions::RdzvBackend::etcd) {
    if (o.standalone) return bad("--standalone serves its own store; drop it or --rdzv-backend etcd");
    if (!seen.rdzv_endpoint) {
      return bad("--rdzv-backend etcd needs --rdzv-endpoint listing the etcd members' client addresses " +
                 std::string("(h1:2379,h2:2379,h3:2379)"));
    }
    auto members = etcd::parse_endpoints(*seen.rdzv_endpoint);
    if (!members.is_ok()) return bad("--rdzv-endpoint: " + members.status().message());
    o.etcd_endpoints = *seen.rdzv_endpoint;
    o.endpoint_host = (*members)[0].host;
    o.endpoint_port = (*members)[0].port;
  } else if (seen.rdzv_endpoint) {
    RETURN_IF_ERROR(parse_endpoint(*seen.rdzv_endpoint, o));
  }
  if (!seen.rdzv_endpoint) {
    o.endpoint_host = seen.master_addr.value_or("127.0.0.1");
    o.endpoint_port = seen.master_port.value_or(29500);
  }
  if (o.standalone) {
    if (seen.nnodes && o.nnodes != 1) return bad("--standalone runs one node, but --nnodes is " + std::to_string(o.nnodes));
    if (seen.rdzv_endpoint) return bad("--standalone picks its own endpoint; drop --rdzv-endpoint");
    o.nnodes = 1;
    o.endpoint_host = "127.0.0.1";
    o.endpoint_port = 0;
  }
  // torchrun's join_timeout, unless --rdzv-timeout-s says otherwise.
  if (o.join_timeout_s && !seen.rdzv_timeout) o.rdzv_timeout_s = *o.join_timeout_s;
  if (o.elastic() && o.node_rank) {
    return bad("--node-rank with --nnodes " + std::to_string(o.min_nnodes) + ":" + std::to_string(o.nnodes) +
               ": with a range of node counts, nodes are numbered anew each round (the node serving the store " +
               "is 0, the others in order of arrival), as under torchrun's c10d rendezvous; drop --node-rank");
  }
  if (o.node_rank && *o.node_rank >= o.nnodes) {
    return bad("--node-rank " + std::to_string(*o.node_rank) + " is out of range for --nnodes " +
               std::to_string(o.nnodes) + " (valid: 0.." + std::to_string(o.nnodes - 1) + ")");
  }
  if (o.program.empty()) return bad("no program to run: braidrun [flags] [--] PROGRAM [ARGS...]");
  return o;
}

std::string launch_usage() {
  return R"(usage: braidrun [flags] [--] PROGRAM [ARGS...]

Starts PROGRAM once per local rank with torchrun's environment (RANK, LOCAL_RANK, WORLD_SIZE,
LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_NAME, ROLE_RANK, ROLE_WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RUN_ID, TORCHELASTIC_RESTART_COUNT,
TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_USE_AGENT_STORE=False) and serves braid's store at
MASTER_ADDR:BRAID_STORE_PORT (BRAID_AGENT_STORE=1 tells ranks so). MASTER_PORT is a free port
of node 0 kept for rank 0's torch store, as torchrun's c10d rendezvous does: torch scripts with
init_process_group("braid" or "gloo") over env:// run unchanged. Any program: no Python is
implied.

torchrun flags (--a-b and --a_b, "--flag value" and "--flag=value"):
  --nproc-per-node N     ranks on this node (also auto|cpu = number of CPUs). Default 1
  --nnodes N|MIN:MAX     nodes in the job. Default 1. With a range, each round starts with
                         MIN..MAX nodes (see "Elastic node counts" below)
  --node-rank R          this node's rank; omitted: the node that can bind the endpoint is 0,
                         the others are numbered in arrival order
  --master-addr HOST     store host when no --rdzv-endpoint. Default 127.0.0.1
  --master-port PORT     braid's store port when no --rdzv-endpoint. Default 29500
  --rdzv-endpoint H:P    store endpoint for the job (port defaults to 29400); with etcd, the
                         members' client addresses, comma-separated (port defaults to 2379)
  --rdzv-id ID           job id, exported as TORCHELASTIC_RUN_ID. Default none
  --rdzv-backend B       c10d (default): a braidrun serves the job's store, and losing its node
                         ends the job. etcd: the nodes meet in an etcd v3 cluster that outlives
                         any node; --rdzv-endpoint lists its members, h1:2379,h2:2379,h3:2379
  --standalone           one node, store on a free port of 127.0.0.1
  --max-restarts N       when a rank fails, stop every rank of every node and start them all
                         again, up to N times (see below). Default 0
  --monitor-interval S   how often braidrun asks the job's store whether another node failed
                         (its own ranks' exits it sees at once). Default 0.25
  --rdzv-conf K=V,...    last_call_timeout (s, default 30), join_timeout (s: --rdzv-timeout-s),
                         keep_alive_interval (s, default 5), keep_alive_max_attempt (default 3);
                         other keys are accepted and ignored
  --role, --no-python    accepted and ignored

braidrun flags:
  --no-prefix            do not put "[rank N] " in front of each output line
  --log-dir DIR          also write each rank's output to DIR/rank<N>.log (after a restart:
                         DIR/rank<N>.round<R>.log)
  --grace-s S            seconds between SIGTERM and SIGKILL when stopping ranks. Default 5
  --cpu-bind auto|none   auto: when there is at least one CPU per local rank, bind each rank to
                         its own share of the CPUs (stable timings on small machines). Default auto
  --rdzv-timeout-s S     how long nodes wait for each other. Default BRAID_RENDEZVOUS_TIMEOUT_S or 300
  --version              print braid's version and the features built in, and exit
  -h, --help             this text

Environment braidrun reads (every other variable reaches the ranks unchanged):
  BRAID_RENDEZVOUS_TIMEOUT_S   default for --rdzv-timeout-s
  BRAID_SECRET, BRAID_SECRET_FILE   the job's secret; unset on one node: braidrun makes one per
                         job and hands it to the ranks as a file only they can read
  BRAID_JOB_ID           the job's id for authentication. Default --rdzv-id
  PATH                   where PROGRAM is looked up when it has no '/'

When a rank fails, braidrun stops the others, names the rank and how it failed, prints its last
lines and exits with its exit code (128+signal when it was killed).

Restarts (--max-restarts N): a failed rank on any node ends the round on every node (SIGTERM,
SIGKILL after --grace-s); the nodes meet again through the job's store and start every rank
again with TORCHELASTIC_RESTART_COUNT one higher. Each round's ranks get a store of their own
(a free port on the store's host, as BRAID_STORE_PORT, and BRAID_JOB_ID "<job>/round<R>") and
a new MASTER_PORT, so no
process of an earlier round can join or disturb a later one. Once N restarts are spent, braidrun
exits with the last failed rank's code and lists every failure: round, rank, node, exit code or
signal. SIGINT/SIGTERM to braidrun end the job without a restart.

Rendezvous in etcd (--rdzv-backend etcd --rdzv-endpoint h1:2379,h2:2379,h3:2379): the nodes meet
in an etcd v3 cluster, which outlives any node and any one member, instead of in node 0's
braidrun (with c10d, losing that node ends the job). With --node-rank (a fixed --nnodes N), node
0 serves each round's store for the ranks at its address towards etcd. Without it, rounds form
as with --nnodes MIN:MAX (a fixed N as N:N, so a braidrun started again for a lost node joins
the next round), and each round has a leader, the lowest node id among its members (GROUP_RANK
0): it serves that round's store for the ranks and keeps its MASTER_PORT, at its own address
(MASTER_ADDR), so losing any node, node 0 included, leaves the others a next round while MIN
remain. Give each job its own --rdzv-id: a job that did not end cleanly leaves its keys in etcd.
Elastic node counts (--nnodes MIN:MAX), as torchrun's c10d rendezvous: the node serving the
store opens each round (with etcd, the first node to look); once MIN nodes joined it, the round
waits last_call_timeout for more and starts at once when MAX joined. Node and global ranks are
renumbered contiguously each round (GROUP_RANK by order of arrival in the job; WORLD_SIZE and
GROUP_WORLD_SIZE follow). A node whose heartbeat stood still for keep_alive_interval x
keep_alive_max_attempt is lost: the round ends (counted as a failure, like a failed rank) and
the next one starts without it while MIN nodes remain. A node that arrives while a round runs
with fewer than MAX nodes makes the running nodes stop their ranks and meet again with it; that
membership change is not counted as a restart (TORCHELASTIC_RESTART_COUNT stays). With c10d,
losing the node that serves the store ends the job; with etcd, no node's loss does.
)";
}

}  // namespace braid::braidrun
