// collectives/collective.h - what the runtime asks the collectives layer to run.
//
// The runtime hands over a fully validated description of one operation plus one connection
// per peer; the collectives layer picks an algorithm (or takes the forced one), builds its
// schedule and executes it on those connections. It never opens a socket itself.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "braid/types.h"
#include "common/deadline.h"
#include "common/status.h"
#include "transport/transport.h"

namespace braid::collectives {

enum class Kind : uint8_t {
  all_reduce, broadcast, reduce, all_gather, reduce_scatter, gather, scatter, all_to_all, barrier,
  send, recv,
};
const char* to_string(Kind k) noexcept;

enum class Algo : uint8_t { automatic, ring, tree, rd /*recursive doubling*/, chain, pairwise, direct };
const char* to_string(Algo a) noexcept;
// "auto", "ring", "tree", "rd", "chain", "pairwise" (BRAID_ALGO / --algo spellings).
Result<Algo> parse_algo(const std::string& name);

// One collective, as every rank calls it. Buffers are the caller's and must outlive the run.
//   all_reduce:      send[count] -> recv[count]                    (send == recv: in place)
//   broadcast:       recv[count] on every rank; root's recv is the source
//   reduce:          send[count] -> recv[count] on root only
//   all_gather:      send[count] -> recv[count * size]; counts (if non-empty) = per-rank counts (gatherv)
//   reduce_scatter:  send[count * size] -> recv[count]; counts (if non-empty) = per-rank counts
//   gather/scatter:  like all_gather/reduce_scatter's shapes, only at/from root
//   all_to_all:      send[count * size] -> recv[count * size]; or send_counts/recv_counts per peer
//   barrier:         no data
//   send/recv:       count elements to/from `peer`; the k-th send to a peer meets its k-th recv
//                    from us (the runtime checks `tag` in the operation header, it does not search)
struct CollectiveArgs {
  Kind kind = Kind::all_reduce;
  const void* send = nullptr;
  void* recv = nullptr;
  size_t count = 0;
  DType dtype = DType::f32;
  Op op = Op::sum;
  int root = 0;
  int peer = -1;
  uint64_t tag = 0;
  std::vector<size_t> counts;       // uneven forms: elements per rank
  std::vector<size_t> send_counts;  // all_to_all with split sizes
  std::vector<size_t> recv_counts;
};

struct RunOptions {
  Algo algo = Algo::automatic;  // BRAID_ALGO / --algo
  size_t chunk_bytes = 0;       // 0 = automatic (BRAID_CHUNK_BYTES)
  size_t ring_depth = 1;        // Plan::ring_depth; the same on every rank (BRAID_RING_DEPTH)
  Deadline deadline = Deadline::never();
  uint64_t op_id = 0;           // unique per operation on this transport: goes into cookies
  // Ring order by host (collectives/ring_order.h, Plan::order); null: rank order. The same on
  // every rank.
  std::shared_ptr<const std::vector<int>> order;
};

// Which algorithm `automatic` resolves to for this operation (the selection table).
Algo select_algorithm(const CollectiveArgs& args, int rank, int size, Algo forced);

}  // namespace braid::collectives
