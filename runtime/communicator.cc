// The public Communicator: rendezvous and the job's store (bootstrap/), then thin forwarding to
// what stands behind it (communicator_impl.h).
#include "braid/communicator.h"

#include <algorithm>

#include "common/log.h"
#include "runtime/bootstrap/job_store.h"
#include "runtime/bootstrap/rendezvous.h"
#include "runtime/communicator_impl.h"

namespace braid {
namespace {

using collectives::CollectiveArgs;
using collectives::Kind;

Env env_or_raise() {
  Result<Env> env = global_env();
  return value_or_raise(std::move(env));
}

// `limit` names what set env.rendezvous_timeout_s, for the join's messages.
Communicator make(std::shared_ptr<Store> store, std::unique_ptr<TcpStoreServer> server, const JobInfo& job,
                  const Env& env, const std::string& limit = "BRAID_RENDEZVOUS_TIMEOUT_S") {
  CommunicatorConfig cfg = job_config(std::move(store), std::move(server), job, env, limit);
  return Communicator::from_impl_(value_or_raise(make_communicator_impl(std::move(cfg))));
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

Communicator Communicator::from_store(std::shared_ptr<Store> store, int rank, int size, StoreJoinOptions options) {
  if (!store) throw Error(ErrorCode::invalid_argument, "from_store: the store is null");
  if (size < 1 || rank < 0 || rank >= size) {
    throw Error(ErrorCode::invalid_argument, "from_store: rank " + std::to_string(rank) + " is not in [0, " +
                                                 std::to_string(size) + ")");
  }
  JobInfo job;
  job.rank = rank;
  job.size = size;
  job.foreign_store = true;
  Env env = env_or_raise();
  if (options.rendezvous_timeout.count() <= 0 || env.rendezvous_timeout_set) return make(std::move(store), nullptr, job, env);
  // The program's bound for this communicator's rendezvous: the join, and the links' setup,
  // which read it from the Env the communicator keeps.
  env.rendezvous_timeout_s = static_cast<double>(options.rendezvous_timeout.count()) / 1000;
  return make(std::move(store), nullptr, job, env,
              options.timeout_origin.empty() ? "the rendezvous timeout given to from_store" : options.timeout_origin);
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

Communicator Communicator::shrink(const std::vector<int>& exclude) {
  return Communicator(value_or_raise(impl().shrink(exclude)));
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
