#include "collectives/algorithms.h"

#include "collectives/double_binary_tree.h"
#include "collectives/exchange.h"
#include "collectives/recursive_doubling.h"
#include "collectives/ring_order.h"
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

Plan make_plan(const CollectiveArgs& args, int rank, int size, size_t segment_bytes, size_t ring_depth,
               std::shared_ptr<const std::vector<int>> order) {
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
  const bool p2p = args.kind == Kind::send || args.kind == Kind::recv;
  p.segment_bytes = segment_bytes != 0 ? segment_bytes : p2p ? p2p_segment_bytes(args.count * p.elem_size) : kDefaultSegmentBytes;
  p.ring_depth = std::max<size_t>(1, ring_depth);
  p.average = args.op == Op::avg;
  // An identity order changes nothing; dropping it keeps the plain path.
  if (order && !order->empty() && !is_identity(*order)) p.order = std::move(order);
  const bool same = args.send != nullptr && args.send == args.recv;
  p.in_place = same && (args.kind == Kind::all_reduce || args.kind == Kind::reduce ||
                        args.kind == Kind::all_to_all);
  return p;
}

namespace {

Result<Schedule> build_in_order(const CollectiveArgs& args, Algo algo, const Plan& p) {
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

// Collectives whose schedule may run in ring positions instead of ranks: the ones that treat
// every rank alike but the root (which moves with its rank), and the rings over per-rank
// blocks, which look their blocks up by rank (rank_at). gather, scatter, all_to_all and
// send/recv keep rank order: their traffic goes between fixed pairs, whatever the ring.
bool follows_ring_order(Kind kind) {
  return kind == Kind::all_reduce || kind == Kind::broadcast || kind == Kind::reduce || kind == Kind::barrier ||
         kind == Kind::all_gather || kind == Kind::reduce_scatter;
}

}  // namespace

Result<Schedule> build_schedule(const CollectiveArgs& args, Algo algo, const Plan& p) {
  if (!p.order || !follows_ring_order(args.kind)) {
    if (!p.order) return build_in_order(args, algo, p);
    Plan plain = p;
    plain.order = nullptr;
    return build_in_order(args, algo, plain);
  }
  const std::vector<int>& order = *p.order;
  if (order.size() != static_cast<size_t>(p.size)) {
    return invalid_argument("the ring order names " + std::to_string(order.size()) + " ranks for a world of " +
                            std::to_string(p.size));
  }
  std::vector<int> position(order.size());
  for (size_t v = 0; v < order.size(); ++v) position[static_cast<size_t>(order[v])] = static_cast<int>(v);
  Plan q = p;
  q.rank = position[static_cast<size_t>(p.rank)];
  if (p.root >= 0 && p.root < p.size) q.root = position[static_cast<size_t>(p.root)];
  ASSIGN_OR_RETURN(Schedule s, build_in_order(args, algo, q));
  for (Step& st : s.steps) {
    if (st.recv_peer >= 0) st.recv_peer = order[static_cast<size_t>(st.recv_peer)];
    if (st.send_peer >= 0) st.send_peer = order[static_cast<size_t>(st.send_peer)];
  }
  return s;
}

}  // namespace braid::collectives
