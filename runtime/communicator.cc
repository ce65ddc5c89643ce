// The public Communicator: rendezvous, then thin forwarding to CommunicatorImpl.
#include "braid/communicator.h"

#include <arpa/inet.h>
#include <netinet/in.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <thread>

#include "common/log.h"
#include "runtime/bootstrap/rendezvous.h"
#include "runtime/bootstrap/store_join.h"
#include "runtime/communicator_impl.h"
#include "runtime/store/socket_util.h"

namespace braid {
namespace {

using collectives::CollectiveArgs;
using collectives::Kind;

Env env_or_raise() {
  Result<Env> env = global_env();
  return value_or_raise(std::move(env));
}

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

Communicator make(std::shared_ptr<Store> store, std::unique_ptr<TcpStoreServer> server, const JobInfo& job,
                  const Env& env) {
  set_log_rank(job.rank);
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(env.rendezvous_timeout_s * 1000));
  const int generation = next_generation(store->address());
  auto join = join_through_store(store, job.rank, job.size, generation, timeout);
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
  cfg.server = std::move(server);
  cfg.foreign_store = job.foreign_store;
  cfg.master_addr = job.master_addr;
  cfg.env = env;
  return Communicator::from_impl_(value_or_raise(CommunicatorImpl::create(std::move(cfg))));
}

}  // namespace

Communicator Communicator::from_impl_(std::unique_ptr<CommunicatorImpl> impl) { return Communicator(std::move(impl)); }

Communicator::Communicator(std::unique_ptr<CommunicatorImpl> impl) : impl_(std::move(impl)) {}
Communicator::Communicator(Communicator&&) noexcept = default;
Communicator& Communicator::operator=(Communicator&&) noexcept = default;
Communicator::~Communicator() = default;

Communicator Communicator::from_env() {
  Env env = env_or_raise();
  JobInfo job = value_or_raise(resolve_env(process_env()));
  std::unique_ptr<TcpStoreServer> server;
  auto store = open_job_store(job, env, &server);
  return make(std::move(store), std::move(server), job, env);
}

Communicator Communicator::from_url(const std::string& init_method, int rank, int size) {
  if (init_method == "env://") return from_env();
  Env env = env_or_raise();
  if (init_method.rfind("tcp://", 0) == 0) {
    JobInfo job = value_or_raise(resolve_tcp_url(init_method, rank, size));
    job.job_id = resolve_job_id(process_env());
    std::unique_ptr<TcpStoreServer> server;
    auto store = open_job_store(job, env, &server);
    return make(std::move(store), std::move(server), job, env);
  }
  if (init_method.rfind("file://", 0) == 0) {
    // The file is the store; rank and size come from the arguments or, when -1, RANK/WORLD_SIZE.
    JobInfo job;
    job.rank = rank;
    job.size = size;
    if (rank < 0 || size < 0) {
      auto lookup = process_env();
      const char* r = lookup("RANK");
      const char* n = lookup("WORLD_SIZE");
      if ((rank < 0 && !r) || (size < 0 && !n)) {
        throw Error(ErrorCode::invalid_argument, "init method '" + init_method +
                                                     "' needs a rank and a world size: pass them, or set RANK and WORLD_SIZE");
      }
      if (rank < 0) job.rank = static_cast<int>(value_or_raise(parse_env_int("RANK", r, 0, 1 << 24)));
      if (size < 0) job.size = static_cast<int>(value_or_raise(parse_env_int("WORLD_SIZE", n, 1, 1 << 24)));
    }
    if (job.rank >= job.size) {
      throw Error(ErrorCode::invalid_argument, "rank " + std::to_string(job.rank) + " is not below world size " +
                                                   std::to_string(job.size));
    }
    auto timeout = std::chrono::milliseconds(static_cast<int64_t>(env.rendezvous_timeout_s * 1000));
    auto store = std::make_shared<FileStore>(init_method.substr(7), timeout);
    return make(std::move(store), nullptr, job, env);
  }
  throw Error(ErrorCode::invalid_argument,
              "init method '" + init_method + "' is not supported: use env://, tcp://HOST:PORT or file:///PATH");
}

Communicator Communicator::from_store(std::shared_ptr<Store> store, int rank, int size) {
  if (!store) throw Error(ErrorCode::invalid_argument, "from_store: the store is null");
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error(ErrorCode::invalid_argument, "from_store: rank " + std::to_string(rank) + " is not in [0, " +
                                                 std::to_string(size) + ")");
  }
  JobInfo job;
  job.rank = rank;
  job.size = size;
  job.foreign_store = true;
  return make(std::move(store), nullptr, job, env_or_raise());
}

CommunicatorImpl& Communicator::impl() const {
  if (!impl_) {
    throw Error(ErrorCode::invalid_argument,
                "this Communicator is not a member of any group (split with kNoColor, a rank left out of "
                "new_group, or moved from): it has no rank and runs no operation");
  }
  return *impl_;
}

int Communicator::rank() const { return impl().rank(); }
int Communicator::size() const { return impl().size(); }
int Communicator::local_rank() const { return impl().local_rank(); }
int Communicator::local_size() const { return impl().local_size(); }
std::string Communicator::last_algorithm() const { return impl().last_algorithm(); }
std::vector<std::string> Communicator::peer_transports() const { return impl().peer_transports(); }
std::shared_ptr<Store> Communicator::store() const { return impl().store(); }

CommState Communicator::state() const { return impl().state(); }
ErrorCode Communicator::error_code() const { return impl().failure().code(); }
std::string Communicator::error_message() const { return impl().failure().message(); }
void Communicator::abort(const std::string& reason) { impl().abort(reason); }
void Communicator::set_stream(void* cuda_stream) { impl().set_stream(cuda_stream); }
void* Communicator::stream() const { return impl().stream(); }
void Communicator::group_start() { impl().group_start(); }
Work Communicator::group_end() { return impl().group_end(); }

Communicator Communicator::split(int color, int key) {
  return Communicator(value_or_raise(impl().split(color, key)));
}

Communicator Communicator::new_group(const std::vector<int>& ranks) {
  CommunicatorImpl& self = impl();
  std::vector<bool> seen(static_cast<size_t>(self.size()), false);
  int position = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    const int r = ranks[i];
    if (r < 0 || r >= self.size() || seen[static_cast<size_t>(r)]) {
      throw Error(ErrorCode::invalid_argument, "new_group: rank " + std::to_string(r) +
                                                   (r < 0 || r >= self.size() ? " is not in [0, " + std::to_string(self.size()) + ")"
                                                                              : " is listed twice"));
    }
    seen[static_cast<size_t>(r)] = true;
    if (r == self.rank()) position = static_cast<int>(i);
  }
  return split(position >= 0 ? 0 : kNoColor, position);
}

namespace {

CollectiveArgs args_of(Kind kind, const void* send, void* recv, size_t count, DType dtype, Op op = Op::sum,
                       int root = 0) {
  CollectiveArgs a;
  a.kind = kind;
  a.send = send;
  a.recv = recv;
  a.count = count;
  a.dtype = dtype;
  a.op = op;
  a.root = root;
  return a;
}

CollectiveArgs all_gatherv_args(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype) {
  auto a = args_of(Kind::all_gather, send, recv, 0, dtype);
  a.counts = counts;
  return a;
}

CollectiveArgs reduce_scatterv_args(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype, Op op) {
  auto a = args_of(Kind::reduce_scatter, send, recv, 0, dtype, op);
  a.counts = counts;
  return a;
}

CollectiveArgs all_to_allv_args(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                const std::vector<size_t>& recv_counts, DType dtype) {
  auto a = args_of(Kind::all_to_all, send, recv, 0, dtype);
  a.send_counts = send_counts;
  a.recv_counts = recv_counts;
  return a;
}

// send: the buffer is only read (recv stays null); recv: only written.
CollectiveArgs p2p_args(Kind kind, void* buf, size_t count, DType dtype, int peer, uint64_t tag) {
  auto a = kind == Kind::send ? args_of(kind, buf, nullptr, count, dtype) : args_of(kind, nullptr, buf, count, dtype);
  a.peer = peer;
  a.tag = tag;
  return a;
}

}  // namespace

Work Communicator::all_reduce_async(const void* send, void* recv, size_t count, DType dtype, Op op) {
  return impl().enqueue(args_of(Kind::all_reduce, send, recv, count, dtype, op));
}
Work Communicator::all_reduce_async(void* buf, size_t count, DType dtype, Op op) {
  return all_reduce_async(buf, buf, count, dtype, op);
}
Work Communicator::broadcast_async(void* buf, size_t count, DType dtype, int root) {
  return impl().enqueue(args_of(Kind::broadcast, buf, buf, count, dtype, Op::sum, root));
}
Work Communicator::reduce_async(const void* send, void* recv, size_t count, DType dtype, Op op, int root) {
  return impl().enqueue(args_of(Kind::reduce, send, recv, count, dtype, op, root));
}
Work Communicator::all_gather_async(const void* send, void* recv, size_t count, DType dtype) {
  return impl().enqueue(args_of(Kind::all_gather, send, recv, count, dtype));
}
Work Communicator::reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype, Op op) {
  return impl().enqueue(args_of(Kind::reduce_scatter, send, recv, count, dtype, op));
}
Work Communicator::all_to_all_async(const void* send, void* recv, size_t count, DType dtype) {
  return impl().enqueue(args_of(Kind::all_to_all, send, recv, count, dtype));
}
Work Communicator::barrier_async() { return impl().enqueue(args_of(Kind::barrier, nullptr, nullptr, 0, DType::u8)); }
Work Communicator::send_async(const void* buf, size_t count, DType dtype, int peer, uint64_t tag) {
  return impl().enqueue(p2p_args(Kind::send, const_cast<void*>(buf), count, dtype, peer, tag));
}
Work Communicator::recv_async(void* buf, size_t count, DType dtype, int peer, uint64_t tag) {
  return impl().enqueue(p2p_args(Kind::recv, buf, count, dtype, peer, tag));
}
Work Communicator::broadcast_async(const void* send, void* recv, size_t count, DType dtype, int root) {
  return impl().enqueue(args_of(Kind::broadcast, send, recv, count, dtype, Op::sum, root));
}
Work Communicator::all_gatherv_async(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype) {
  return impl().enqueue(all_gatherv_args(send, recv, counts, dtype));
}
Work Communicator::reduce_scatterv_async(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype,
                                         Op op) {
  return impl().enqueue(reduce_scatterv_args(send, recv, counts, dtype, op));
}
Work Communicator::gather_async(const void* send, void* recv, size_t count, DType dtype, int root) {
  return impl().enqueue(args_of(Kind::gather, send, recv, count, dtype, Op::sum, root));
}
Work Communicator::scatter_async(const void* send, void* recv, size_t count, DType dtype, int root) {
  return impl().enqueue(args_of(Kind::scatter, send, recv, count, dtype, Op::sum, root));
}
Work Communicator::all_to_allv_async(const void* send, const std::vector<size_t>& send_counts, void* recv,
                                     const std::vector<size_t>& recv_counts, DType dtype) {
  return impl().enqueue(all_to_allv_args(send, send_counts, recv, recv_counts, dtype));
}

// The blocking forms run on the calling thread when nothing else is queued (engine/op_queue.h).
void Communicator::all_reduce(void* buf, size_t count, DType dtype, Op op) {
  impl().run(args_of(Kind::all_reduce, buf, buf, count, dtype, op));
}
void Communicator::all_reduce(const void* send, void* recv, size_t count, DType dtype, Op op) {
  impl().run(args_of(Kind::all_reduce, send, recv, count, dtype, op));
}
void Communicator::broadcast(void* buf, size_t count, DType dtype, int root) {
  impl().run(args_of(Kind::broadcast, buf, buf, count, dtype, Op::sum, root));
}
void Communicator::broadcast(const void* send, void* recv, size_t count, DType dtype, int root) {
  impl().run(args_of(Kind::broadcast, send, recv, count, dtype, Op::sum, root));
}
void Communicator::reduce(const void* send, void* recv, size_t count, DType dtype, Op op, int root) {
  impl().run(args_of(Kind::reduce, send, recv, count, dtype, op, root));
}
void Communicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  impl().run(args_of(Kind::all_gather, send, recv, count, dtype));
}
void Communicator::all_gatherv(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype) {
  impl().run(all_gatherv_args(send, recv, counts, dtype));
}
void Communicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype, Op op) {
  impl().run(args_of(Kind::reduce_scatter, send, recv, count, dtype, op));
}
void Communicator::reduce_scatterv(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype, Op op) {
  impl().run(reduce_scatterv_args(send, recv, counts, dtype, op));
}
void Communicator::gather(const void* send, void* recv, size_t count, DType dtype, int root) {
  impl().run(args_of(Kind::gather, send, recv, count, dtype, Op::sum, root));
}
void Communicator::scatter(const void* send, void* recv, size_t count, DType dtype, int root) {
  impl().run(args_of(Kind::scatter, send, recv, count, dtype, Op::sum, root));
}
void Communicator::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  impl().run(args_of(Kind::all_to_all, send, recv, count, dtype));
}
void Communicator::all_to_allv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                               const std::vector<size_t>& recv_counts, DType dtype) {
  impl().run(all_to_allv_args(send, send_counts, recv, recv_counts, dtype));
}
void Communicator::barrier() { impl().run(args_of(Kind::barrier, nullptr, nullptr, 0, DType::u8)); }
void Communicator::send(const void* buf, size_t count, DType dtype, int peer, uint64_t tag) {
  impl().run(p2p_args(Kind::send, const_cast<void*>(buf), count, dtype, peer, tag));
}
void Communicator::recv(void* buf, size_t count, DType dtype, int peer, uint64_t tag) {
  impl().run(p2p_args(Kind::recv, buf, count, dtype, peer, tag));
}

}  // namespace braid
