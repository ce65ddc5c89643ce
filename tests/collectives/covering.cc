#include "tests/collectives/covering.h"

#include <random>
#include <set>
#include <tuple>

namespace braid::collectives::testing {

namespace {
using Pair = std::tuple<size_t, size_t, size_t, size_t>;  // (p, value, q, value), p < q

size_t gain(const std::vector<size_t>& c, const std::set<Pair>& open) {
  size_t g = 0;
  for (size_t p = 0; p < c.size(); ++p) {
    for (size_t q = p + 1; q < c.size(); ++q) g += open.count({p, c[p], q, c[q]});
  }
  return g;
}
}  // namespace

std::vector<std::vector<size_t>> covering_design(const std::vector<size_t>& domains,
                                                 const std::function<bool(const std::vector<size_t>&)>& valid,
                                                 unsigned seed) {
  std::mt19937 rng(seed);
  auto random_case = [&](std::vector<size_t> c, const std::vector<bool>& fixed) {
    for (int attempt = 0; attempt < 1000; ++attempt) {
      for (size_t p = 0; p < domains.size(); ++p) {
        if (!fixed[p]) c[p] = rng() % domains[p];
      }
      if (valid(c)) return c;
    }
    return std::vector<size_t>{};
  };
  // The pairs to cover: those some valid case can hold.
  std::set<Pair> open;
  const std::vector<bool> none(domains.size(), false);
  for (size_t p = 0; p < domains.size(); ++p) {
    for (size_t q = p + 1; q < domains.size(); ++q) {
      for (size_t a = 0; a < domains[p]; ++a) {
        for (size_t b = 0; b < domains[q]; ++b) {
          std::vector<size_t> c(domains.size(), 0);
          std::vector<bool> fixed = none;
          c[p] = a, c[q] = b, fixed[p] = fixed[q] = true;
          if (!random_case(c, fixed).empty()) open.insert({p, a, q, b});
        }
      }
    }
  }
  std::vector<std::vector<size_t>> out;
  while (!open.empty()) {
    std::vector<size_t> best;
    size_t best_gain = 0;
    for (int k = 0; k < 40; ++k) {
      auto c = random_case(std::vector<size_t>(domains.size(), 0), none);
      if (c.empty()) continue;
      const size_t g = gain(c, open);
      if (g > best_gain) best = c, best_gain = g;
    }
    if (best_gain == 0) {  // force the first open pair in
      const auto [p, a, q, b] = *open.begin();
      std::vector<size_t> c(domains.size(), 0);
      std::vector<bool> fixed = none;
      c[p] = a, c[q] = b, fixed[p] = fixed[q] = true;
      best = random_case(c, fixed);
    }
    for (size_t p = 0; p < best.size(); ++p) {
      for (size_t q = p + 1; q < best.size(); ++q) open.erase({p, best[p], q, best[q]});
    }
    out.push_back(best);
  }
  return out;
}

}  // namespace braid::collectives::testing
