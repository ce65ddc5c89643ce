#include "collectives/algorithms.h"

#include "collectives/double_binary_tree.h"
#include "collectives/exchange.h"
#include "collectives/recursive_doubling.h"
#include "collectives/ring.h"
#include "collectives/tree.h"

namespace braid::collectives {

namespace {

// Collectives with one way of running: a forced algorithm (BRAID_ALGO is process-wide and
// meant for the data-moving collectives) does not apply to them and is not an error.
bool single_algorithm(Kind kind) { return kind == Kind::barrier || kind == Kind::send || kind == Kind::recv; }

}  // namespace

bool supports(Kind kind, Algo algo) {
  if (algo == Algo::automatic || single_algorithm(kind)) return true;
  switch (kind) {
    case Kind::all_reduce: return algo == Algo::ring || algo == Algo::rd || algo == Algo::tree;
    case Kind::broadcast:
    case Kind::reduce: return algo == Algo::ring || algo == Algo::chain || algo == Algo::tree;
    case Kind::all_gather:
    case Kind::reduce_scatter: return algo == Algo::ring;
    case Kind::gather:
    case Kind::scatter: return algo == Algo::tree || algo == Algo::direct;
    case Kind::all_to_all: return algo == Algo::pairwise;
    default: return false;
  }
}

std::string supported_algorithms(Kind kind) {
  std::string out;
  for (Algo a : {Algo::ring, Algo::tree, Algo::rd, Algo::chain, Algo::pairwise, Algo::direct}) {
    if (!supports(kind, a)) continue;
    if (!out.empty()) out += ", ";
    out += to_string(a);
  }
  return out;
}

std::string operation_name(Kind kind, Algo algo) {
  if (kind == Kind::barrier) return "barrier (dissemination)";
  if (kind == Kind::send || kind == Kind::recv) return to_string(kind);
  if ((kind == Kind::broadcast || kind == Kind::reduce) && algo == Algo::ring) algo = Algo::chain;
  return std::string(to_string(kind)) + " (" + to_string(algo) + ")";
}

Plan make_plan(const CollectiveArgs& args, int rank, int size, size_t segment_bytes, size_t ring_depth) {
  Plan p;
  p.rank = rank;
  p.size = size;
  p.root = args.root;
  p.peer = args.peer;
  p.elem_size = dtype_size(args.dtype);
  p.count = args.count;
  p.counts = args.counts;
  p.send_counts = args.send_counts;
  p.recv_counts = args.recv_counts;
  p.segment_bytes = segment_bytes != 0 ? segment_bytes : kDefaultSegmentBytes;
  p.ring_depth = std::max<size_t>(1, ring_depth);
  p.average = args.op == Op::avg;
  const bool same = args.send != nullptr && args.send == args.recv;
  p.in_place = same && (args.kind == Kind::all_reduce || args.kind == Kind::reduce ||
                        args.kind == Kind::all_to_all);
  return p;
}

Result<Schedule> build_schedule(const CollectiveArgs& args, Algo algo, const Plan& p) {
  switch (args.kind) {
    case Kind::all_reduce:
      if (algo == Algo::ring) return ring_all_reduce(p);
      if (algo == Algo::rd) return rd_all_reduce(p);
      if (algo == Algo::tree) return dbt_all_reduce(p);
      break;
    case Kind::broadcast: {
      if (algo != Algo::ring && algo != Algo::chain && algo != Algo::tree) break;
      Schedule s = algo == Algo::tree ? binomial_broadcast(p) : chain_broadcast(p);
      // Out of place at the root (send given and not recv): the source is copied into recv
      // first; the sends read recv, so they wait for the copy.
      if (p.rank == p.root && args.send != nullptr && args.send != args.recv && p.count != 0) {
        const Range whole{Buf::recv, 0, p.count * p.elem_size};
        s.steps.insert(s.steps.begin(), make_step(StepKind::copy, -1, -1, whole, Range{Buf::send, 0, whole.bytes}));
      }
      return s;
    }
    case Kind::reduce:
      if (algo == Algo::ring || algo == Algo::chain) return chain_reduce(p);
      if (algo == Algo::tree) return binomial_reduce(p);
      break;
    case Kind::all_gather:
      if (algo == Algo::ring) return ring_all_gather(p);
      break;
    case Kind::reduce_scatter:
      if (algo == Algo::ring) return ring_reduce_scatter(p);
      break;
    case Kind::gather:
      if (algo == Algo::tree) return binomial_gather(p);
      if (algo == Algo::direct) return direct_gather(p);
      break;
    case Kind::scatter:
      if (algo == Algo::tree) return binomial_scatter(p);
      if (algo == Algo::direct) return direct_scatter(p);
      break;
    case Kind::all_to_all:
      if (algo == Algo::pairwise) return pairwise_all_to_all(p);
      break;
    case Kind::barrier: return dissemination_barrier(p);
    case Kind::send: return p2p_send(p);
    case Kind::recv: return p2p_recv(p);
  }
  return invalid_argument(std::string(to_string(args.kind)) + " has no " + to_string(algo) +
                          " algorithm; it has: " + supported_algorithms(args.kind));
}

}  // namespace braid::collectives
