#include "collectives/selection.h"

#include <algorithm>
#include <cmath>
#include <limits>


namespace braid::collectives {

namespace {

double log2_ceil(int n) {
  double rounds = 0;
  for (long long d = 1; d < n; d <<= 1) rounds += 1;
  return rounds;
}

double segment(size_t bytes, const CostModel& m) { return static_cast<double>(std::min(bytes, m.segment_bytes)); }
double segmented(size_t bytes, const CostModel& m) {
  const double seg = segment(bytes, m);
  return seg == 0 ? 1 : std::ceil(static_cast<double>(bytes) / seg);
}

// A pipeline of `hops` links carrying `bytes` in segments: it fills in hops-1 segment times,
// then delivers one segment per segment time.
double pipeline(double hops, size_t bytes, const CostModel& m) {
  return (hops - 1 + segmented(bytes, m)) * (m.alpha_s + segment(bytes, m) * m.beta_s_per_byte);
}

size_t total_bytes_of(const CollectiveArgs& a, int size) {
  const size_t e = dtype_size(a.dtype);
  auto sum = [&](const std::vector<size_t>& v) {
    size_t t = 0;
    for (size_t c : v) t += c;
    return t * e;
  };
  switch (a.kind) {
    case Kind::all_gather:
    case Kind::reduce_scatter:
    case Kind::gather:
    case Kind::scatter: return a.counts.empty() ? a.count * e * static_cast<size_t>(size) : sum(a.counts);
    case Kind::all_to_all: return a.send_counts.empty() ? a.count * e * static_cast<size_t>(size) : sum(a.send_counts);
    default: return a.count * e;
  }
}

}  // namespace

double estimate_seconds(Kind kind, Algo algo, size_t bytes, int size, const CostModel& m) {
  const double n = size, b = static_cast<double>(bytes), a = m.alpha_s, beta = m.beta_s_per_byte,
               gamma = m.gamma_s_per_byte;
  const double lg = log2_ceil(size);
  const bool pow2 = (size & (size - 1)) == 0;
  switch (kind) {
    case Kind::all_reduce:
      if (algo == Algo::ring) return 2 * (n - 1) * a + 2 * (n - 1) / n * b * beta;
      if (algo == Algo::rd) return (std::floor(std::log2(n)) + (pow2 ? 0 : 2)) * (a + b * (beta + gamma));
      // Two trees, each carrying half: log n latencies up and down; a rank sends ~2x the
      // buffer in all (1.5x as inner node of one tree, 0.5x as leaf of the other).
      if (algo == Algo::tree) return 2 * lg * a + 2 * b * beta;
      break;
    case Kind::broadcast:
    case Kind::reduce:
      // Binomial: the root sends every segment lg times, one after another; the last segment
      // is then lg hops from the deepest leaf, which the root's sends already cover.
      if (algo == Algo::tree) return segmented(bytes, m) * lg * (a + segment(bytes, m) * beta);
      if (algo == Algo::chain || algo == Algo::ring) return pipeline(n - 1, bytes, m);
      break;
    case Kind::gather:
    case Kind::scatter:
      // Tree: log n rounds, but data is stored and forwarded: ~2x the root's bytes on the path.
      if (algo == Algo::tree) return lg * a + 2 * (n - 1) / n * b * beta;
      if (algo == Algo::direct) return (n - 1) * a + (n - 1) / n * b * beta;
      break;
    default:
      return (n - 1) * a + (n - 1) / n * b * beta;
  }
  return std::numeric_limits<double>::infinity();
}

// The selection table: per collective, the candidates compared by the cost model; a
// collective with one algorithm has one row.
Algo select_algorithm(const CollectiveArgs& args, int rank, int size, Algo forced) {
  (void)rank;  // every rank must choose the same: the choice depends only on shared inputs
  if (forced != Algo::automatic) return forced;
  std::vector<Algo> candidates;
  switch (args.kind) {
    case Kind::all_reduce: candidates = {Algo::ring, Algo::rd, Algo::tree}; break;
    case Kind::broadcast:
    case Kind::reduce: candidates = {Algo::tree, Algo::chain}; break;
    case Kind::all_gather:
    case Kind::reduce_scatter: return Algo::ring;
    case Kind::gather:
    case Kind::scatter: candidates = {Algo::tree, Algo::direct}; break;
    case Kind::all_to_all: return Algo::pairwise;
    case Kind::barrier:
    case Kind::send:
    case Kind::recv: return Algo::direct;
  }
  const size_t bytes = total_bytes_of(args, size);
  Algo best = candidates.front();
  double best_s = std::numeric_limits<double>::infinity();
  for (Algo a : candidates) {
    const double t = estimate_seconds(args.kind, a, bytes, size);
    if (t < best_s) best = a, best_s = t;
  }
  return best;
}

namespace {

std::string size_text(size_t bytes) {
  if (bytes >= (size_t{1} << 30) && bytes % (size_t{1} << 30) == 0) return std::to_string(bytes >> 30) + "G";
  if (bytes >= (size_t{1} << 20) && bytes % (size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + "M";
  if (bytes >= 1024 && bytes % 1024 == 0) return std::to_string(bytes >> 10) + "K";
  return std::to_string(bytes);
}

}  // namespace

std::string describe_selection(int size) {
  std::string out;
  for (Kind kind : {Kind::all_reduce, Kind::broadcast, Kind::reduce, Kind::all_gather, Kind::reduce_scatter,
                    Kind::gather, Kind::scatter, Kind::all_to_all}) {
    CollectiveArgs args;
    args.kind = kind;
    args.dtype = DType::f32;
    std::string line = std::string(to_string(kind)) + " ";
    Algo last = Algo::automatic;
    for (size_t bytes = 4; bytes <= (size_t{1} << 30); bytes <<= 1) {
      args.count = bytes / 4;
      const Algo a = select_algorithm(args, 0, size, Algo::automatic);
      if (a == last) continue;
      line += last == Algo::automatic ? std::string(to_string(a))
                                      : ", " + std::string(to_string(a)) + " from " + size_text(bytes);
      last = a;
    }
    out += (out.empty() ? "" : "; ") + line;
  }
  return out;
}

}  // namespace braid::collectives
