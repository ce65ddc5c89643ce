// tests/collectives/covering.h - a pairwise covering design: a short list of test cases in which
// every pair of values of any two parameters appears at least once (all-pairs testing).
//
// Greedy, in the AETG manner: each new case is the best of a few random valid candidates by
// the number of still-uncovered pairs it covers; a pair no candidate hits is forced into one.
// Deterministic (fixed seed), so a failure names a case that reproduces.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace braid::collectives::testing {

// domains[p] = number of values of parameter p. valid(case) rejects forbidden combinations;
// it must be decidable on pairs (a case is valid iff all its pairs are).
std::vector<std::vector<size_t>> covering_design(const std::vector<size_t>& domains,
                                                 const std::function<bool(const std::vector<size_t>&)>& valid,
                                                 unsigned seed = 1);

}  // namespace braid::collectives::testing
