#include "runtime/bootstrap/job_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/deadline.h"
#include "common/log.h"
#include "runtime/bootstrap/store_join.h"
#include "runtime/store/socket_util.h"

namespace braid {
namespace {

// Every rank counts the communicators it made on one store in the same order, so the n-th
// of each rank meets the n-th of the others (store_join.h).
int next_generation(const std::string& store_address) {
  static std::mutex mu;
  static std::map<std::string, int> counts;
  std::lock_guard<std::mutex> lock(mu);
  return ++counts[store_address];
}

bool is_loopback(const sockaddr* a) {
  if (a->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(a)->sin_addr.s_addr) >> 24) == 127;
  }
  if (a->sa_family == AF_INET6) {
    const in6_addr& v6 = reinterpret_cast<const sockaddr_in6*>(a)->sin6_addr;
    return IN6_IS_ADDR_LOOPBACK(&v6) || (IN6_IS_ADDR_V4MAPPED(&v6) && v6.s6_addr[12] == 127);
  }
  return false;
}

// Whether this host can listen on `a` (it is one of its addresses).
bool is_local(const addrinfo* a) {
  UniqueFd fd(::socket(a->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_storage ss{};
  std::memcpy(&ss, a->ai_addr, a->ai_addrlen);
  if (ss.ss_family == AF_INET) reinterpret_cast<sockaddr_in*>(&ss)->sin_port = 0;
  if (ss.ss_family == AF_INET6) reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port = 0;
  return fd.valid() && ::bind(fd.get(), reinterpret_cast<sockaddr*>(&ss), a->ai_addrlen) == 0;
}

// Where rank 0's store listens: BRAID_STORE_BIND, else MASTER_ADDR itself, so a job told to meet
// on 127.0.0.1 cannot be reached from anywhere else. Every interface instead, said in the log,
// when MASTER_ADDR cannot work as a listening address: it is not an address of this host (NAT,
// a load balancer's name), or it is a host name (not an address) that resolves to loopback here
// while the job spans hosts (Debian maps a machine's own name to 127.0.1.1), which the other
// hosts could never reach. The secret, not the address, is what keeps strangers out.
std::string store_bind_host(const JobInfo& job, const Env& env) {
  if (!env.store_bind.empty()) return env.store_bind;
  Result<store::AddrInfoPtr> addrs = store::resolve(job.master_addr, job.store_port, /*passive=*/false);
  if (!addrs.is_ok()) return job.master_addr;  // listening reports it
  const addrinfo* first = addrs.value().get();
  const std::string any = first->ai_family == AF_INET6 ? "::" : "0.0.0.0";
  if (!is_local(first)) {
    BRAID_LOG(warn) << "rank 0: MASTER_ADDR=" << job.master_addr << " is not an address of this host (NAT, or a "
                    << "load balancer?): the store listens on " << any << "; BRAID_STORE_BIND chooses the address";
    return any;
  }
  in6_addr probe{};
  bool numeric = inet_pton(AF_INET, job.master_addr.c_str(), &probe) == 1 ||
                 inet_pton(AF_INET6, job.master_addr.c_str(), &probe) == 1;
  if (numeric || job.size <= job.local_size || !is_loopback(first->ai_addr)) return job.master_addr;
  BRAID_LOG(info) << "rank 0: MASTER_ADDR=" << job.master_addr << " resolves to a loopback address on this host, but "
                  << "the job spans hosts: the store listens on " << any << " (BRAID_STORE_BIND overrides)";
  return any;
}

TcpStoreOptions store_options(const JobInfo& job, const Env& env) {
  TcpStoreOptions options;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(env.rendezvous_timeout_s * 1000));
  options.job_id = job.job_id;
  return options;
}

// Why rank 0 could not serve on the port, when another job's store holds it: its job id.
std::string who_holds(const JobInfo& job) {
  if (job.job_id.empty()) return "";
  try {
    TcpStoreOptions probe{.timeout = std::chrono::seconds(1), .job_id = job.job_id};
    TcpStore::connect(job.master_addr, job.store_port, probe);
  } catch (const Error& e) {
    if (e.code() == ErrorCode::invalid_argument) return std::string(" (") + e.what() + ")";
  }
  return "";
}

// How long one call of the failure board may wait for the store: BRAID_TIMEOUT_S, kept within
// 5..10 s. A failure is reported within BRAID_TIMEOUT_S plus a margin even when the store itself
// is what stopped (rank 0 serving it was stopped or cut off); a healthy store answers these
// small requests at once, and one that does not only costs the report its detail.
std::chrono::milliseconds board_call_bound(const Env& env) {
  return std::chrono::milliseconds(static_cast<int64_t>(std::clamp(env.timeout_s, 5.0, 10.0) * 1000));
}

// The failure board (failure_board.h) gets a store connection of its own where it can, so its
// reads never queue behind a long get() the program makes on comm.store(), and each of its calls
// is bounded by board_call_bound (the program's connection keeps the rendezvous timeout).
std::shared_ptr<Store> open_board_store(const std::shared_ptr<Store>& store, const JobInfo& job, const Env& env,
                                        int generation) {
  if (dynamic_cast<TcpStore*>(store.get()) == nullptr || job.store_port == 0) return nullptr;
  try {
    std::shared_ptr<Store> base(TcpStore::connect(job.master_addr, job.store_port, store_options(job, env)).release());
    base->set_timeout(board_call_bound(env));
    return std::make_shared<PrefixStore>("braid/c" + std::to_string(generation), base);
  } catch (const Error& e) {
    BRAID_LOG(warn) << "rank " << job.rank << ": failure reports share the program's store connection (" << e.what()
                    << ")";
    return nullptr;
  }
}

}  // namespace

// Connects to (or, on rank 0 without a launcher, serves) the job's store at job.master_*.
std::shared_ptr<Store> open_job_store(const JobInfo& job, const Env& env, std::unique_ptr<TcpStoreServer>* server) {
  if (job.rank == 0 && !job.agent_store) {
    try {
      *server = TcpStoreServer::start(store_bind_host(job, env), job.store_port, {.job_id = job.job_id});
    } catch (const Error& e) {
      std::string port = job.store_port == job.master_port ? "MASTER_PORT=" + std::to_string(job.master_port)
                                                           : "port " + std::to_string(job.store_port) +
                                                                 " (MASTER_PORT+1 under torchrun, or BRAID_STORE_PORT)";
      throw Error(e.code(), "rank 0 cannot serve the rendezvous store on " + port + ": " + e.what() + who_holds(job) +
                                ". Is another job using that port? Pick another MASTER_PORT, or start under "
                                "braidrun --standalone (BRAID_STORE_BIND sets the address it listens on)");
    }
  }
  try {
    return std::shared_ptr<Store>(TcpStore::connect(job.master_addr, job.store_port, store_options(job, env)).release());
  } catch (const Error& e) {
    throw Error(e.code(), "rank " + std::to_string(job.rank) + ": " + e.what());
  }
}

CommunicatorConfig job_config(std::shared_ptr<Store> store, std::unique_ptr<TcpStoreServer> server, const JobInfo& job,
                              const Env& env, const std::string& limit) {
  set_log_rank(job.rank);
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(env.rendezvous_timeout_s * 1000));
  const int generation = next_generation(store->address());
  auto join = join_through_store(store, job.rank, job.size, generation, timeout, limit);
  if (!join.is_ok() && server) {
    // This rank serves the store, and the others still have to read from it why the join
    // failed: stay until they have hung up (bounded), or they would see only "connection lost".
    store.reset();
    const Deadline linger = Deadline::after(std::chrono::seconds(5));
    while (server->num_clients() > 0 && !linger.expired()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  auto joined = value_or_raise(std::move(join));
  CommunicatorConfig cfg;
  cfg.rank = job.rank;
  cfg.size = job.size;
  cfg.local_rank = job.local_rank;
  cfg.local_size = job.local_size;
  cfg.comm_id = joined.comm_id;
  cfg.store = joined.store;
  cfg.board_store = open_board_store(store, job, env, generation);
  cfg.board_bounded = cfg.board_store != nullptr;
  // Without a launcher rank 0 serves the store: when it stops answering, so did rank 0.
  if (job.store_port != 0 && !job.agent_store) cfg.store_rank = 0;
  if (cfg.store_rank >= 0) {
    const std::shared_ptr<Store>& lease_ns = cfg.board_bounded ? cfg.board_store : cfg.store;
    cfg.lease = std::make_shared<JobLease>(lease_ns, job.rank, job.size, std::move(server),
                                           std::min(env.rendezvous_timeout_s, 60.0));
  }
  cfg.foreign_store = job.foreign_store;
  cfg.master_addr = job.master_addr;
  cfg.env = env;
  return cfg;
}


}  // namespace braid
