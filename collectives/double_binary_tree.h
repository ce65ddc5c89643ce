// collectives/double_binary_tree.h - all_reduce over two complementary binary trees.
//
// A single tree all_reduce leaves the leaves' uplinks idle half the time and makes inner nodes
// move the data twice; with two trees in which every inner node of one is a leaf of the other,
// each carrying half of the buffer, every rank sends and receives about the buffer's size once
// each way, in O(log n) latency: NCCL's choice between ring (bandwidth) and tree (latency).
#pragma once

#include <vector>

#include "collectives/schedule.h"

namespace braid::collectives {

// A rank's place in one binary tree of `size` ranks: parent (-1 at the root) and children.
struct TreeLinks {
  int parent = -1;
  std::vector<int> children;
};
// tree 0 or 1 of the pair, as seen from `rank`.
TreeLinks double_tree_links(int tree, int rank, int size);

Schedule dbt_all_reduce(const Plan& p);

}  // namespace braid::collectives
