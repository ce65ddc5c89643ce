// The public Communicator: rendezvous, then thin forwarding to CommunicatorImpl.
#include "braid/communicator.h"

#include <map>
#include <mutex>

#include "common/log.h"
#include "runtime/communicator_impl.h"
#include "runtime/rendezvous.h"
#include "runtime/store_join.h"

namespace braid {
namespace {

using collectives::CollectiveArgs;
using collectives::Kind;

Env env_or_raise() { return value_or_raise(global_env()); }

// Every rank counts the communicators it made on one store in the same order, so the n-th
// of each rank meets the n-th of the others (store_join.h).
int next_generation(const std::string& store_address) {
  static std::mutex mu;
  static std::map<std::string, int> counts;
  std::lock_guard<std::mutex> lock(mu);
  return ++counts[store_address];
}

std::string bind_host_for(const std::string& master_addr) {
  return master_addr.find(':') != std::string::npos ? "::" : "0.0.0.0";
}

// Connects to (or, on rank 0 without a launcher, serves) the job's store at job.master_*.
std::shared_ptr<Store> open_job_store(const JobInfo& job, const Env& env, std::unique_ptr<TcpStoreServer>* server) {
  TcpStoreOptions options;
  options.timeout = std::chrono::milliseconds(static_cast<int64_t>(env.rendezvous_timeout_s * 1000));
  if (job.rank == 0 && !job.agent_store) {
    try {
      *server = TcpStoreServer::start(bind_host_for(job.master_addr), job.master_port);
    } catch (const Error& e) {
      throw Error(e.code(), "rank 0 cannot serve the rendezvous store on MASTER_PORT=" +
                                std::to_string(job.master_port) + ": " + e.what() +
                                ". Is another job using that port? Pick another MASTER_PORT, or start under "
                                "braidrun --standalone");
    }
  }
  return std::shared_ptr<Store>(TcpStore::connect(job.master_addr, job.master_port, options).release());
}

Communicator make(std::shared_ptr<Store> store, std::unique_ptr<TcpStoreServer> server, const JobInfo& job,
                  const Env& env) {
  set_log_rank(job.rank);
  auto timeout = std::chrono::milliseconds(static_cast<int64_t>(env.rendezvous_timeout_s * 1000));
  auto joined = value_or_raise(join_through_store(store, job.rank, job.size, next_generation(store->address()), timeout));
  CommunicatorConfig cfg;
  cfg.rank = job.rank;
  cfg.size = job.size;
  cfg.local_rank = job.local_rank;
  cfg.local_size = job.local_size;
  cfg.comm_id = joined.comm_id;
  cfg.store = joined.store;
  cfg.server = std::move(server);
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
  return make(std::move(store), nullptr, job, env_or_raise());
}

int Communicator::rank() const { return impl_->rank(); }
int Communicator::size() const { return impl_->size(); }
int Communicator::local_rank() const { return impl_->local_rank(); }
int Communicator::local_size() const { return impl_->local_size(); }
std::string Communicator::last_algorithm() const { return impl_->last_algorithm(); }
std::shared_ptr<Store> Communicator::store() const { return impl_->store(); }

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

}  // namespace

Work Communicator::all_reduce_async(const void* send, void* recv, size_t count, DType dtype, Op op) {
  return impl_->enqueue(args_of(Kind::all_reduce, send, recv, count, dtype, op));
}
Work Communicator::all_reduce_async(void* buf, size_t count, DType dtype, Op op) {
  return all_reduce_async(buf, buf, count, dtype, op);
}
Work Communicator::broadcast_async(void* buf, size_t count, DType dtype, int root) {
  return impl_->enqueue(args_of(Kind::broadcast, buf, buf, count, dtype, Op::sum, root));
}
Work Communicator::reduce_async(const void* send, void* recv, size_t count, DType dtype, Op op, int root) {
  return impl_->enqueue(args_of(Kind::reduce, send, recv, count, dtype, op, root));
}
Work Communicator::all_gather_async(const void* send, void* recv, size_t count, DType dtype) {
  return impl_->enqueue(args_of(Kind::all_gather, send, recv, count, dtype));
}
Work Communicator::reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype, Op op) {
  return impl_->enqueue(args_of(Kind::reduce_scatter, send, recv, count, dtype, op));
}
Work Communicator::all_to_all_async(const void* send, void* recv, size_t count, DType dtype) {
  return impl_->enqueue(args_of(Kind::all_to_all, send, recv, count, dtype));
}
Work Communicator::barrier_async() { return impl_->enqueue(args_of(Kind::barrier, nullptr, nullptr, 0, DType::u8)); }
Work Communicator::send_async(const void* buf, size_t count, DType dtype, int peer) {
  auto a = args_of(Kind::send, buf, nullptr, count, dtype);
  a.peer = peer;
  return impl_->enqueue(std::move(a));
}
Work Communicator::recv_async(void* buf, size_t count, DType dtype, int peer) {
  auto a = args_of(Kind::recv, nullptr, buf, count, dtype);
  a.peer = peer;
  return impl_->enqueue(std::move(a));
}

void Communicator::all_reduce(void* buf, size_t count, DType dtype, Op op) { all_reduce_async(buf, count, dtype, op).wait(); }
void Communicator::all_reduce(const void* send, void* recv, size_t count, DType dtype, Op op) {
  all_reduce_async(send, recv, count, dtype, op).wait();
}
void Communicator::broadcast(void* buf, size_t count, DType dtype, int root) { broadcast_async(buf, count, dtype, root).wait(); }
void Communicator::broadcast(const void* send, void* recv, size_t count, DType dtype, int root) {
  impl_->enqueue(args_of(Kind::broadcast, send, recv, count, dtype, Op::sum, root)).wait();
}
void Communicator::reduce(const void* send, void* recv, size_t count, DType dtype, Op op, int root) {
  reduce_async(send, recv, count, dtype, op, root).wait();
}
void Communicator::all_gather(const void* send, void* recv, size_t count, DType dtype) {
  all_gather_async(send, recv, count, dtype).wait();
}
void Communicator::all_gatherv(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype) {
  auto a = args_of(Kind::all_gather, send, recv, 0, dtype);
  a.counts = counts;
  impl_->enqueue(std::move(a)).wait();
}
void Communicator::reduce_scatter(const void* send, void* recv, size_t count, DType dtype, Op op) {
  reduce_scatter_async(send, recv, count, dtype, op).wait();
}
void Communicator::reduce_scatterv(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype, Op op) {
  auto a = args_of(Kind::reduce_scatter, send, recv, 0, dtype, op);
  a.counts = counts;
  impl_->enqueue(std::move(a)).wait();
}
void Communicator::gather(const void* send, void* recv, size_t count, DType dtype, int root) {
  impl_->enqueue(args_of(Kind::gather, send, recv, count, dtype, Op::sum, root)).wait();
}
void Communicator::scatter(const void* send, void* recv, size_t count, DType dtype, int root) {
  impl_->enqueue(args_of(Kind::scatter, send, recv, count, dtype, Op::sum, root)).wait();
}
void Communicator::all_to_all(const void* send, void* recv, size_t count, DType dtype) {
  all_to_all_async(send, recv, count, dtype).wait();
}
void Communicator::all_to_allv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                               const std::vector<size_t>& recv_counts, DType dtype) {
  auto a = args_of(Kind::all_to_all, send, recv, 0, dtype);
  a.send_counts = send_counts;
  a.recv_counts = recv_counts;
  impl_->enqueue(std::move(a)).wait();
}
void Communicator::barrier() { barrier_async().wait(); }
void Communicator::send(const void* buf, size_t count, DType dtype, int peer) { send_async(buf, count, dtype, peer).wait(); }
void Communicator::recv(void* buf, size_t count, DType dtype, int peer) { recv_async(buf, count, dtype, peer).wait(); }

}  // namespace braid
