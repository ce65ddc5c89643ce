// braid/communicator.h - a group of ranks and the collectives they run together.
//
// Every rank of the group makes the same calls in the same order (like NCCL and MPI): the n-th
// collective of one rank meets the n-th collective of every other. Blocking calls return when
// this rank's part is done; *_async calls return a Work at once and run in the background, in
// issue order. Buffers are the caller's: they must stay valid until the call (or its Work) is
// complete. Counts are in elements of `dtype`. A blocking call, or Work::wait(), on a
// communicator with nothing else queued runs the operation on the calling thread rather than
// waking the background one (BRAID_CALLER_PROGRESS=0 turns that off).
//
// Threading: a Communicator may be used from one thread at a time per call sequence; different
// Communicators may be used concurrently from different threads. Move-only.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/store.h"
#include "braid/types.h"
#include "braid/work.h"

namespace braid {

class CommunicatorImpl;

// How Communicator::from_store bounds its rendezvous (every rank joining, settings and
// addresses exchanged, links up).
struct StoreJoinOptions {
  // The bound, unless BRAID_RENDEZVOUS_TIMEOUT_S is set (that wins). Zero: the variable's
  // default. torch's backend passes the group's timeout (init_process_group(timeout=)).
  std::chrono::milliseconds rendezvous_timeout{0};
  // What set rendezvous_timeout, for error messages ("torch's timeout="); empty: "the
  // rendezvous timeout given to from_store".
  std::string timeout_origin{};
};

// Where a communicator stands. After a failure every later operation fails at once with the
// original reason (error_code(), error_message()); make a new communicator to go on.
enum class CommState : uint8_t {
  ok,       // usable
  aborted,  // abort() was called on this rank
  failed,   // an operation failed here or on another rank (mismatch, timeout, lost peer, abort)
};
const char* to_string(CommState s) noexcept;

class Communicator {
 public:
  // env:// rendezvous as torchrun sets it (MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE, optional
  // LOCAL_RANK, LOCAL_WORLD_SIZE), with Slurm and Open MPI variables as fallbacks. Returns once
  // every rank has joined; throws braid::Error naming what is wrong otherwise.
  static Communicator from_env();
  // "env://", "tcp://host:port" or "file:///path"; rank and size are needed unless the
  // environment has them (-1: take them from the environment).
  static Communicator from_url(const std::string& init_method, int rank = -1, int size = -1);
  // For programs that bootstrap over their own channel: any Store, this rank and the size.
  static Communicator from_store(std::shared_ptr<Store> store, int rank, int size, StoreJoinOptions options = {});

  Communicator(Communicator&&) noexcept;
  Communicator& operator=(Communicator&&) noexcept;
  ~Communicator();  // waits (bounded) for pending operations, joins threads, closes sockets

  int rank() const;
  int size() const;
  int local_rank() const;
  int local_size() const;

  // ---- collectives (blocking). In-place forms first, out-of-place forms take `send`. ----
  void all_reduce(void* buf, size_t count, DType dtype, Op op);
  void all_reduce(const void* send, void* recv, size_t count, DType dtype, Op op);
  void broadcast(void* buf, size_t count, DType dtype, int root);
  void broadcast(const void* send, void* recv, size_t count, DType dtype, int root);
  // recv (count elements) is written on root only; may be nullptr elsewhere.
  void reduce(const void* send, void* recv, size_t count, DType dtype, Op op, int root);
  // recv holds size() * count elements, rank r's at r * count.
  void all_gather(const void* send, void* recv, size_t count, DType dtype);
  // counts[r] elements from rank r, packed in rank order in recv.
  void all_gatherv(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype);
  // send holds size() * count elements; rank r gets the reduction of block r.
  void reduce_scatter(const void* send, void* recv, size_t count, DType dtype, Op op);
  void reduce_scatterv(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype, Op op);
  // root's recv holds size() * count elements.
  void gather(const void* send, void* recv, size_t count, DType dtype, int root);
  // root's send holds size() * count elements.
  void scatter(const void* send, void* recv, size_t count, DType dtype, int root);
  // send and recv hold size() * count elements; block r goes to / comes from rank r.
  void all_to_all(const void* send, void* recv, size_t count, DType dtype);
  void all_to_allv(const void* send, const std::vector<size_t>& send_counts, void* recv,
                   const std::vector<size_t>& recv_counts, DType dtype);
  void barrier();
  // Point to point. Messages from one rank to another are matched in order: the k-th send from
  // A to B meets B's k-th receive from A. The tag is checked, not searched for: a receive whose
  // tag (or count or dtype) differs from the arriving send's fails both sides with mismatch.
  void send(const void* buf, size_t count, DType dtype, int peer, uint64_t tag = 0);
  void recv(void* buf, size_t count, DType dtype, int peer, uint64_t tag = 0);

  // ---- the same, asynchronous ----
  Work all_reduce_async(void* buf, size_t count, DType dtype, Op op);
  Work all_reduce_async(const void* send, void* recv, size_t count, DType dtype, Op op);
  Work broadcast_async(void* buf, size_t count, DType dtype, int root);
  Work broadcast_async(const void* send, void* recv, size_t count, DType dtype, int root);
  Work reduce_async(const void* send, void* recv, size_t count, DType dtype, Op op, int root);
  Work all_gather_async(const void* send, void* recv, size_t count, DType dtype);
  Work all_gatherv_async(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype);
  Work reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype, Op op);
  Work reduce_scatterv_async(const void* send, void* recv, const std::vector<size_t>& counts, DType dtype, Op op);
  Work gather_async(const void* send, void* recv, size_t count, DType dtype, int root);
  Work scatter_async(const void* send, void* recv, size_t count, DType dtype, int root);
  Work all_to_all_async(const void* send, void* recv, size_t count, DType dtype);
  Work all_to_allv_async(const void* send, const std::vector<size_t>& send_counts, void* recv,
                         const std::vector<size_t>& recv_counts, DType dtype);
  Work barrier_async();
  Work send_async(const void* buf, size_t count, DType dtype, int peer, uint64_t tag = 0);
  Work recv_async(void* buf, size_t count, DType dtype, int peer, uint64_t tag = 0);

  // ---- group calls ----
  // The *_async calls made between group_start() and group_end() run as one unit:
  //   - only send/recv: all at once, so a rank may send to one peer while it receives from
  //     another (batch_isend_irecv); two with the same peer and direction keep their order;
  //   - only all_reduce with one dtype and op: coalesced into a single all_reduce;
  //   - any other mix: one after the other.
  // group_end() returns a Work for the whole group; each call's own Work completes with it.
  // Waiting on a call's Work before group_end() throws invalid_argument (it could not start),
  // so blocking calls cannot be used inside a group. Groups nest; the outermost end runs them.
  void group_start();
  Work group_end();

  // ---- CUDA device buffers (in builds with the `cuda` feature) ----
  // Any buffer may be CUDA device (or managed) memory. Such an operation is ordered on this
  // stream, a cudaStream_t (nullptr, the default: the legacy default stream): it reads its input
  // after the work queued on the stream before the call, and the stream's later work waits until
  // it is done. Work::wait() returning means the result is in the device buffer; a failed
  // operation leaves the device buffer as it was. The bytes travel through pinned host buffers
  // and are reduced on the host. Not yet inside group_start()/group_end().
  // An operation holds its stream until every rank has joined it. Several ranks in one process
  // on one GPU therefore need care, as with NCCL: give them non-blocking streams
  // (cudaStreamNonBlocking: a held legacy default stream holds every blocking stream), and
  // allocate or free device memory only while no operation is pending (cudaMalloc and cudaFree
  // may wait for the whole GPU, including the stream another rank's operation holds until this
  // rank joins it). The first follows from CUDA's stream rules; the second is our explanation
  // of a test that hung inside CUDA on an H100 until it allocated up front.
  // Copies to or from pageable host memory queued on the stream behind an operation: use pinned
  // memory there (cudaMallocHost). A pageable copy waiting behind the operation stalls other GPU
  // copies of the process, the one that brings the operation's result back included, so the
  // operation ends in its timeout (seen on an H100 with CUDA 13).
  void set_stream(void* cuda_stream);
  void* stream() const;

  // ---- failure handling ----
  CommState state() const;
  // The failure that ended the communicator (ErrorCode::ok and "" while state() == ok).
  ErrorCode error_code() const;
  std::string error_message() const;
  // Ends every pending operation of this rank with ErrorCode::aborted, closes the connections
  // and tells the other ranks, whose pending and later operations then fail too (within
  // seconds). Any thread may call it, also while another thread waits on a Work. Returns once
  // this rank's pending operations have ended (bounded).
  void abort(const std::string& reason = "abort() called");

  // ---- groups ----
  // Every rank of this communicator calls split(); ranks passing the same color form a new
  // communicator, ranked by (key, rank here). color kNoColor returns a non-member handle
  // (is_member() false). The new communicator has its own connections, sequence numbers and
  // progress thread: it may be used from another thread at the same time as this one.
  static constexpr int kNoColor = -1;
  Communicator split(int color, int key);
  // Every rank calls it with the same list; the listed ranks get a communicator ranked in list
  // order, the others a non-member handle.
  Communicator new_group(const std::vector<int>& ranks);
  // Going on without some ranks, as ULFM's MPIX_Comm_shrink and NCCL's ncclCommShrink:
  // returns a new communicator of this one's ranks but the failed or excluded ones, renumbered
  // in their old order (old ranks 0, 2, 3 become 0, 1, 2), with its own connections.
  //   - It first ends this communicator on this rank as abort() does (pending operations end with
  //     an error; the other ranks' operations on it fail within a second or so), whatever its
  //     state: a planned shrink ends a healthy communicator too.
  //   - After a failure, every survivor calls shrink(): they agree through the job's store on who
  //     is alive. The rank the failure named as dead or silent is not waited for; any other rank
  //     is waited for up to BRAID_SHRINK_TIMEOUT_S (default 5 s) after this rank's call. A rank
  //     that calls it later than that (stopped, busy) gets ErrorCode::aborted and can never join.
  //   - shrink(exclude) leaves the listed ranks out as well (a planned exclusion): as with
  //     ncclCommShrink, the ranks not listed call it with the same list; a listed rank need not
  //     call it, and if it does, it gets a non-member handle at once (its communicator ended too).
  // Throws invalid_argument for a bad list (a rank out of range or listed twice, or the rank that
  // serves the store in-process, without which the others could not meet), peer_lost when the
  // store is gone (rank 0 served it and died with it: serve it outside the ranks, as a launcher
  // does, or give from_store one), aborted when this rank came too late and was left out, and
  // what making the new communicator throws (a member that died after it agreed: call shrink()
  // again). Call it from the thread that makes this communicator's calls, as split().
  // docs/fault_tolerance.md walks through it.
  Communicator shrink(const std::vector<int>& exclude = {});
  // False for a non-member handle (and a moved-from communicator): every other call throws.
  bool is_member() const { return impl_ != nullptr; }

  // The algorithm the last completed collective used ("ring", "tree", ...), for tools.
  std::string last_algorithm() const;
  // The transport this rank's connection to each peer uses, indexed by rank, as the transport
  // names itself ("tcp (io_uring)", "tcp (epoll)", ...); "self" at this rank's own index. Fixed
  // once the communicator exists. Other ranks may see their peers differently (e.g. one host's
  // ranks reach each other in a way they cannot reach a remote rank): each rank reports its own.
  std::vector<std::string> peer_transports() const;
  // The store this communicator met through (shared with the caller, e.g. for a barrier of its own).
  std::shared_ptr<Store> store() const;

 private:
  friend class CommunicatorImpl;

  explicit Communicator(std::unique_ptr<CommunicatorImpl> impl);
  CommunicatorImpl& impl() const;  // throws invalid_argument on a non-member handle

 public:
  // For braid's own runtime: wraps a communicator it built. Not for programs.
  static Communicator from_impl_(std::unique_ptr<CommunicatorImpl> impl);

 private:
  std::unique_ptr<CommunicatorImpl> impl_;
};

}  // namespace braid
