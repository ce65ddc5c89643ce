// collectives/collective.cc - names of kinds and algorithms.
#include "collectives/collective.h"

namespace braid::collectives {

const char* to_string(Kind k) noexcept {
  switch (k) {
    case Kind::all_reduce: return "all_reduce";
    case Kind::broadcast: return "broadcast";
    case Kind::reduce: return "reduce";
    case Kind::all_gather: return "all_gather";
    case Kind::reduce_scatter: return "reduce_scatter";
    case Kind::gather: return "gather";
    case Kind::scatter: return "scatter";
    case Kind::all_to_all: return "all_to_all";
    case Kind::barrier: return "barrier";
    case Kind::send: return "send";
    case Kind::recv: return "recv";
  }
  return "?";
}

const char* to_string(Algo a) noexcept {
  switch (a) {
    case Algo::automatic: return "auto";
    case Algo::ring: return "ring";
    case Algo::tree: return "tree";
    case Algo::rd: return "rd";
    case Algo::chain: return "chain";
    case Algo::pairwise: return "pairwise";
    case Algo::direct: return "direct";
  }
  return "?";
}

Result<Algo> parse_algo(const std::string& name) {
  for (Algo a : {Algo::automatic, Algo::ring, Algo::tree, Algo::rd, Algo::chain, Algo::pairwise, Algo::direct}) {
    if (name == to_string(a)) return a;
  }
  return invalid_argument("unknown algorithm '" + name + "'; use one of auto, ring, tree, rd, chain, pairwise, direct");
}

}  // namespace braid::collectives
