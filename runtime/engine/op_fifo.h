// runtime/engine/op_fifo.h - queued operations, first in first out, in slots that are reused.
//
// The operations queued behind another (an operation queued on an idle communicator waits in
// OpQueue's engine slot instead), often one or two at a time. std::deque, with two PendingOps to its block, frees
// its block and allocates a new one every other operation; here the same slot serves again, and
// an operation is filled in its slot (push_slot) and moved out once (front() then pop_front()),
// never through a temporary. A slot that was moved out of holds an empty PendingOp (its vectors
// and pointers moved away), which is what a fresh one holds.
//
// Not thread-safe: OpQueue guards it with its lock.
#pragma once

#include <cstddef>
#include <utility>
#include <vector>

#include "runtime/engine/pending_op.h"

namespace braid {

class OpFifo {
 public:
  bool empty() const { return size_ == 0; }
  size_t size() const { return size_; }
  PendingOp& front() { return slots_[head_]; }
  const PendingOp& front() const { return slots_[head_]; }

  // A new last slot, holding an empty PendingOp, for the caller to fill; valid until the next
  // push. pop_back() gives it up again while it is still empty.
  PendingOp& push_slot() {
    if (size_ == slots_.size()) grow();
    PendingOp& slot = slots_[(head_ + size_) & (slots_.size() - 1)];
    ++size_;
    return slot;
  }
  void pop_back() { --size_; }
  void push_back(PendingOp&& op) { push_slot() = std::move(op); }
  // Drops the first slot, whose operation the caller has moved out (std::move(front())): moved
  // straight to where it runs, without a temporary in between.
  void pop_front() {
    head_ = (head_ + 1) & (slots_.size() - 1);
    --size_;
  }
  // Moves the first operation out and drops its slot.
  PendingOp take_front() {
    PendingOp op = std::move(slots_[head_]);
    pop_front();
    return op;
  }
  // Every operation, in order; the fifo is left empty.
  std::vector<PendingOp> take_all() {
    std::vector<PendingOp> all;
    all.reserve(size_);
    while (!empty()) all.push_back(take_front());
    return all;
  }

 private:
  // Twice the slots (always a power of two), the operations moved to the front in order. Out
  // of line, so that push_slot() stays small enough to inline.
  void grow();

  std::vector<PendingOp> slots_;
  size_t head_ = 0;
  size_t size_ = 0;
};

}  // namespace braid
