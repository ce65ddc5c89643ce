#include "runtime/bootstrap/rendezvous.h"

#include <cstdlib>
#include <vector>

namespace braid {
namespace {

constexpr int64_t kMaxRanks = 1 << 24;

// Which variable names a launcher uses for each field.
struct Scheme {
  const char* source;
  const char* rank;
  const char* size;
  const char* local_rank;
  const char* local_size;
};

constexpr Scheme kTorchrun{"torchrun-style environment", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"};
constexpr Scheme kSlurm{"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_NTASKS_PER_NODE"};
constexpr Scheme kOpenMpi{"Open MPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
                          "OMPI_COMM_WORLD_LOCAL_SIZE"};

const Scheme* pick_scheme(const EnvLookup& lookup) {
  for (const Scheme* s : {&kTorchrun, &kSlurm, &kOpenMpi}) {
    if (lookup(s->rank) || lookup(s->size)) return s;
  }
  return &kTorchrun;  // nothing set: report the torchrun names as missing
}

}  // namespace

std::string resolve_job_id(const EnvLookup& lookup) {
  for (const char* name : {"BRAID_JOB_ID", "TORCHELASTIC_RUN_ID", "SLURM_JOB_ID"}) {
    const char* v = lookup(name);
    if (v == nullptr || *v == '\0') continue;
    if (std::string(name) == "TORCHELASTIC_RUN_ID" && std::string(v) == "none") continue;
    return v;
  }
  return "";
}

namespace {

Status check_rank_and_size(const JobInfo& job, const char* rank_name, const char* size_name) {
  if (job.rank >= job.size) {
    return invalid_argument(std::string(rank_name) + "=" + std::to_string(job.rank) + " is not below " + size_name +
                            "=" + std::to_string(job.size) + ": ranks are numbered 0.." +
                            std::to_string(job.size - 1));
  }
  return Status::ok();
}

Result<uint16_t> parse_port(const char* name, const char* value) {
  ASSIGN_OR_RETURN(int64_t port, parse_env_int(name, value, 1, 65535));
  return static_cast<uint16_t>(port);
}

}  // namespace

Result<std::string> first_host_of_nodelist(const std::string& nodelist) {
  // Hosts are separated by commas outside brackets; a bracket holds ranges and single numbers,
  // and the first one gives the first host (zero padding kept: "[01-04]" -> "01").
  std::string first;
  size_t i = 0;
  for (; i < nodelist.size() && nodelist[i] != ','; ++i) {
    if (nodelist[i] != '[') {
      first += nodelist[i];
      continue;
    }
    size_t close = nodelist.find(']', i);
    if (close == std::string::npos) return invalid_argument("SLURM_JOB_NODELIST='" + nodelist + "': '[' without ']'");
    std::string inside = nodelist.substr(i + 1, close - i - 1);
    size_t stop = inside.find_first_of(",-");
    std::string lo = inside.substr(0, stop);
    if (lo.empty() || lo.find_first_not_of("0123456789") != std::string::npos) {
      return invalid_argument("SLURM_JOB_NODELIST='" + nodelist + "': cannot read the range '[" + inside + "]'");
    }
    first += lo;
    i = close;
  }
  if (first.empty()) return invalid_argument("SLURM_JOB_NODELIST='" + nodelist + "' names no host");
  return first;
}

Result<JobInfo> resolve_env(const EnvLookup& lookup) {
  const Scheme& s = *pick_scheme(lookup);
  JobInfo job;
  job.source = s.source;
  job.job_id = resolve_job_id(lookup);

  const char* master_addr = lookup("MASTER_ADDR");
  if (!master_addr && &s == &kSlurm && lookup("SLURM_JOB_NODELIST")) {
    ASSIGN_OR_RETURN(std::string host, first_host_of_nodelist(lookup("SLURM_JOB_NODELIST")));
    job.master_addr = host;
  } else if (master_addr) {
    job.master_addr = master_addr;
  }

  std::vector<std::string> missing;
  if (job.master_addr.empty()) missing.push_back(&s == &kSlurm ? "MASTER_ADDR (or SLURM_JOB_NODELIST)" : "MASTER_ADDR");
  if (!lookup("MASTER_PORT")) missing.push_back("MASTER_PORT");
  if (!lookup(s.rank)) missing.push_back(s.rank);
  if (!lookup(s.size)) missing.push_back(s.size);
  if (!missing.empty()) {
    std::string list;
    for (const auto& m : missing) list += (list.empty() ? "" : ", ") + m;
    return invalid_argument("env:// rendezvous (" + std::string(s.source) + "): missing environment variable" +
                            (missing.size() > 1 ? "s " : " ") + list +
                            ". Start the program with braidrun, torchrun, srun or mpirun, or set them yourself "
                            "(e.g. MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 RANK=0 WORLD_SIZE=1)");
  }

  ASSIGN_OR_RETURN(job.master_port, parse_port("MASTER_PORT", lookup("MASTER_PORT")));
  ASSIGN_OR_RETURN(int64_t size, parse_env_int(s.size, lookup(s.size), 1, kMaxRanks));
  ASSIGN_OR_RETURN(int64_t rank, parse_env_int(s.rank, lookup(s.rank), 0, kMaxRanks));
  job.size = static_cast<int>(size);
  job.rank = static_cast<int>(rank);
  RETURN_IF_ERROR(check_rank_and_size(job, s.rank, s.size));

  if (const char* v = lookup(s.local_size)) {
    // Slurm writes SLURM_NTASKS_PER_NODE as "4" or "4(x2)"; only the plain form is used.
    std::string value = v;
    if (&s != &kSlurm || value.find('(') == std::string::npos) {
      ASSIGN_OR_RETURN(int64_t ls, parse_env_int(s.local_size, v, 1, kMaxRanks));
      job.local_size = static_cast<int>(ls);
    }
  }
  if (const char* v = lookup(s.local_rank)) {
    ASSIGN_OR_RETURN(int64_t lr, parse_env_int(s.local_rank, v, 0, kMaxRanks));
    job.local_rank = static_cast<int>(lr);
    if (job.local_rank >= job.local_size && lookup(s.local_size)) {
      return invalid_argument(std::string(s.local_rank) + "=" + std::to_string(job.local_rank) + " is not below " +
                              s.local_size + "=" + std::to_string(job.local_size));
    }
    if (!lookup(s.local_size)) job.local_size = job.local_rank + 1;  // at least that many here
  }
  if (const char* v = lookup("BRAID_AGENT_STORE")) job.agent_store = std::string(v) == "1";
  job.store_port = job.master_port;
  const char* torch_agent = lookup("TORCHELASTIC_USE_AGENT_STORE");
  if (!job.agent_store && torch_agent && (std::string(torch_agent) == "True" || std::string(torch_agent) == "1")) {
    if (job.master_port == 65535) return invalid_argument("MASTER_PORT=65535 leaves no port for braid's store under torchrun");
    job.store_port = static_cast<uint16_t>(job.master_port + 1);
  }
  if (const char* v = lookup("BRAID_STORE_PORT")) {
    ASSIGN_OR_RETURN(job.store_port, parse_port("BRAID_STORE_PORT", v));
  }
  return job;
}

Result<JobInfo> resolve_tcp_url(const std::string& url, int rank, int size) {
  const std::string kScheme = "tcp://";
  if (url.compare(0, kScheme.size(), kScheme) != 0) return invalid_argument("'" + url + "' is not a tcp:// URL");
  std::string rest = url.substr(kScheme.size());
  std::string query;
  if (size_t q = rest.find('?'); q != std::string::npos) {
    query = rest.substr(q + 1);
    rest = rest.substr(0, q);
  }
  size_t colon = rest.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return invalid_argument("init method '" + url + "' must be tcp://HOST:PORT");
  }
  JobInfo job;
  job.source = "tcp:// init method";
  job.master_addr = rest.substr(0, colon);
  if (job.master_addr.size() > 2 && job.master_addr.front() == '[' && job.master_addr.back() == ']') {
    job.master_addr = job.master_addr.substr(1, job.master_addr.size() - 2);  // [::1]
  }
  ASSIGN_OR_RETURN(job.master_port, parse_port("port of the tcp:// URL", rest.substr(colon + 1).c_str()));
  job.store_port = job.master_port;
  // query: rank=R&world_size=N
  size_t pos = 0;
  while (pos < query.size()) {
    size_t amp = query.find('&', pos);
    std::string kv = query.substr(pos, amp == std::string::npos ? std::string::npos : amp - pos);
    pos = amp == std::string::npos ? query.size() : amp + 1;
    size_t eq = kv.find('=');
    std::string k = kv.substr(0, eq), v = eq == std::string::npos ? "" : kv.substr(eq + 1);
    if (k == "rank" && rank < 0) {
      ASSIGN_OR_RETURN(int64_t r, parse_env_int("rank", v.c_str(), 0, kMaxRanks));
      rank = static_cast<int>(r);
    } else if (k == "world_size" && size < 0) {
      ASSIGN_OR_RETURN(int64_t n, parse_env_int("world_size", v.c_str(), 1, kMaxRanks));
      size = static_cast<int>(n);
    }
  }
  if (rank < 0 || size < 1) {
    return invalid_argument("init method '" + url + "' needs a rank and a world size (arguments or ?rank=R&world_size=N)");
  }
  job.rank = rank;
  job.size = size;
  job.local_size = 1;
  RETURN_IF_ERROR(check_rank_and_size(job, "rank", "world_size"));
  return job;
}

}  // namespace braid
