// braid/communicator.h - a group of ranks and the collectives they run together.
//
// Every rank of the group makes the same calls in the same order (like NCCL and MPI): the n-th
// collective of one rank meets the n-th collective of every other. Blocking calls return when
// this rank's part is done; *_async calls return a Work at once and run in the background, in
// issue order. Buffers are the caller's: they must stay valid until the call (or its Work) is
// complete. Counts are in elements of `dtype`.
//
// Threading: a Communicator may be used from one thread at a time per call sequence; different
// Communicators may be used concurrently from different threads. Move-only.
#pragma once

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
  static Communicator from_store(std::shared_ptr<Store> store, int rank, int size);

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
  // Point to point. Messages between two ranks are matched in order.
  void send(const void* buf, size_t count, DType dtype, int peer);
  void recv(void* buf, size_t count, DType dtype, int peer);

  // ---- the same, asynchronous ----
  Work all_reduce_async(void* buf, size_t count, DType dtype, Op op);
  Work all_reduce_async(const void* send, void* recv, size_t count, DType dtype, Op op);
  Work broadcast_async(void* buf, size_t count, DType dtype, int root);
  Work reduce_async(const void* send, void* recv, size_t count, DType dtype, Op op, int root);
  Work all_gather_async(const void* send, void* recv, size_t count, DType dtype);
  Work reduce_scatter_async(const void* send, void* recv, size_t count, DType dtype, Op op);
  Work all_to_all_async(const void* send, void* recv, size_t count, DType dtype);
  Work barrier_async();
  Work send_async(const void* buf, size_t count, DType dtype, int peer);
  Work recv_async(void* buf, size_t count, DType dtype, int peer);

  // The algorithm the last completed collective used ("ring", "tree", ...), for tools.
  std::string last_algorithm() const;
  // The store this communicator met through (shared with the caller, e.g. for a barrier of its own).
  std::shared_ptr<Store> store() const;

 private:
  friend class CommunicatorImpl;
  explicit Communicator(std::unique_ptr<CommunicatorImpl> impl);

 public:
  // For braid's own runtime: wraps a communicator it built. Not for programs.
  static Communicator from_impl_(std::unique_ptr<CommunicatorImpl> impl);

 private:
  std::unique_ptr<CommunicatorImpl> impl_;
};

}  // namespace braid
