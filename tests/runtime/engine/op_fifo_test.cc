// OpFifo (runtime/engine/op_fifo.h): operations leave in the order they came, across the wrap
// of its slots and its growth, and a slot given back or moved out of is empty for the next.
#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/engine/op_fifo.h"

namespace braid {
namespace {

PendingOp op_numbered(uint64_t seq) {
  PendingOp op;
  op.seq = seq;
  op.args.counts = {static_cast<size_t>(seq)};  // a vector that must travel with it
  op.work = std::make_shared<detail::WorkState>();
  return op;
}

TEST(OpFifo, OperationsLeaveInOrderAcrossTheWrapAndGrowth) {
  OpFifo fifo;
  uint64_t next_in = 1, next_out = 1;
  // Queue lengths 1, 2, ..., 9 and back, so the head walks past the end of the slots and the
  // slots grow while the head is not at their start.
  for (size_t len : {1, 2, 3, 1, 5, 2, 9, 1, 7, 3}) {
    for (size_t i = 0; i < len; ++i) fifo.push_back(op_numbered(next_in++));
    while (fifo.size() > len / 2) {
      PendingOp out = fifo.take_front();
      ASSERT_EQ(out.seq, next_out);
      ASSERT_EQ(out.args.counts, std::vector<size_t>{static_cast<size_t>(next_out)});
      ASSERT_NE(out.work, nullptr);
      ++next_out;
    }
  }
  std::vector<PendingOp> rest = fifo.take_all();
  EXPECT_TRUE(fifo.empty());
  for (const PendingOp& op : rest) EXPECT_EQ(op.seq, next_out++);
  EXPECT_EQ(next_out, next_in);
}

TEST(OpFifo, ASlotIsEmptyWhenItIsHandedOutAgain) {
  OpFifo fifo;
  for (int round = 0; round < 12; ++round) {  // past the first slots' count, so slots come round
    PendingOp& slot = fifo.push_slot();
    EXPECT_EQ(slot.work, nullptr);
    EXPECT_TRUE(slot.args.counts.empty());
    EXPECT_TRUE(slot.group.empty());
    EXPECT_EQ(slot.device, nullptr);
    if (round % 3 == 2) {  // given back unfilled
      fifo.pop_back();
      continue;
    }
    slot = op_numbered(static_cast<uint64_t>(round));
    PendingOp out = std::move(fifo.front());
    fifo.pop_front();
    EXPECT_EQ(out.seq, static_cast<uint64_t>(round));
    EXPECT_TRUE(fifo.empty());
  }
}

}  // namespace
}  // namespace braid
