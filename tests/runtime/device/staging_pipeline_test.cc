// The chunk pipeline for device buffers (runtime/device/staging_pipeline.h), on the fake device with
// its copies slowed and spoiling their destination first (fake_device.h): a chunk sent before
// its input copy finished, a result copied before its collective ran, a slot refilled before its
// result was read, or a result handed over before the chunks' copies landed each show up as
// wrong numbers. Each such ordering is also broken on purpose (StagingFaultsForTesting) to show
// these tests would see it. The bound is 64 KiB (16 KiB slots); each rank's buffers are ~12x-37x that.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "braid/communicator.h"
#include "runtime/device/staging_pipeline.h"
#include "tests/runtime/device/device_test_support.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
using testing::device_floats;
using testing::fake;
using testing::FakeStream;
using testing::outcome;

constexpr auto kBound = testing::kDeviceBound;
constexpr size_t kStaging = 64 << 10;
constexpr size_t kCount = 200003;  // floats: ~49 chunks of 4096, the last one short

// Reductions on the host here (2-rank jobs would otherwise reduce on the device under auto):
// device_reduce_test.cc runs the same orderings with reductions on the device.
class Job : public testing::DeviceJob {
 public:
  explicit Job(int ranks) : DeviceJob(ranks, kStaging, "host") {}
};

class StagingPipelineTest : public testing::FakeDeviceTest {
 protected:
  void SetUp() override {
    FakeDeviceTest::SetUp();
    fake().copy_delay_us = 100;
    fake().copy_back_delay_us = 100;
  }
};

float pattern(int r, size_t i) { return static_cast<float>(r + 1) + static_cast<float>(i % 97); }

// A "kernel" writing `p` after a pause: the operation must wait for it.
void fill_later(FakeStream& s, float* p, size_t n, int r) {
  s.push([=] {
    std::this_thread::sleep_for(20ms);
    for (size_t i = 0; i < n; ++i) p[i] = pattern(r, i);
  });
}

enum class Shape { all_reduce, reduce, broadcast, all_gather, reduce_scatter, gather, scatter, all_to_all };
const char* name(Shape s) {
  switch (s) {
    case Shape::all_reduce: return "all_reduce";
    case Shape::reduce: return "reduce";
    case Shape::broadcast: return "broadcast";
    case Shape::all_gather: return "all_gather";
    case Shape::reduce_scatter: return "reduce_scatter";
    case Shape::gather: return "gather";
    case Shape::scatter: return "scatter";
    case Shape::all_to_all: return "all_to_all";
  }
  return "";
}
const auto kEveryShape = ::testing::Values(Shape::all_reduce, Shape::reduce, Shape::broadcast, Shape::all_gather,
                                           Shape::reduce_scatter, Shape::gather, Shape::scatter, Shape::all_to_all);
constexpr int kRoot = 1;
// Whether rank r has a result (gather: the root only; reduce: see run_shape).
bool has_output(Shape s, int r) { return s != Shape::gather || r == kRoot; }

// Runs `shape` on rank r's device buffers; returns the operation's outcome and, when it
// succeeded, whether the device buffer holds the host-computed result.
struct Ran {
  ErrorCode code = ErrorCode::internal;
  bool right = false;
  std::string message;
};

// The collectives whose buffers are blocks of `c` elements, one per rank (c = kCount / 2, so
// that a rank's buffers are still ~25x and ~75x of the bound with 3 ranks).
Ran run_blocked(Communicator& comm, FakeStream& stream, Shape shape, int r, int ranks) {
  const size_t c = kCount / 2, n = static_cast<size_t>(ranks);
  const bool blocks_in = shape == Shape::reduce_scatter || shape == Shape::scatter || shape == Shape::all_to_all;
  const bool blocks_out = shape == Shape::all_gather || shape == Shape::gather || shape == Shape::all_to_all;
  const size_t nin = blocks_in ? n * c : c, nout = blocks_out ? n * c : c;
  float* in = device_floats(nin);
  float* out = device_floats(nout);
  std::fill(out, out + nout, -1.0f);
  fill_later(stream, in, nin, r);
  Work w = shape == Shape::all_gather       ? comm.all_gather_async(in, out, c, DType::f32)
           : shape == Shape::reduce_scatter ? comm.reduce_scatter_async(in, out, c, DType::f32, Op::sum)
           : shape == Shape::gather         ? comm.gather_async(in, has_output(shape, r) ? out : nullptr, c, DType::f32, kRoot)
           : shape == Shape::scatter        ? comm.scatter_async(r == kRoot ? in : nullptr, out, c, DType::f32, kRoot)
                                            : comm.all_to_all_async(in, out, c, DType::f32);
  Ran ran;
  ran.code = outcome(w);
  if (ran.code != ErrorCode::ok) ran.message = w.error_message();
  ran.right = true;
  const auto me = static_cast<size_t>(r);
  for (size_t j = 0; j < nout && ran.right; ++j) {
    const size_t q = j / c, i = j % c;
    float want = -1.0f;  // gather, not the root: never written
    switch (shape) {
      case Shape::all_gather: want = pattern(static_cast<int>(q), i); break;
      case Shape::gather: want = has_output(shape, r) ? pattern(static_cast<int>(q), i) : -1.0f; break;
      case Shape::reduce_scatter:
        want = 0;
        for (int p = 0; p < ranks; ++p) want += pattern(p, me * c + j);
        break;
      case Shape::scatter: want = pattern(kRoot, me * c + j); break;
      default: want = pattern(static_cast<int>(q), me * c + i);  // all_to_all: rank q's block for this rank
    }
    ran.right = out[j] == want;
  }
  return ran;
}

Ran run_shape(Communicator& comm, FakeStream& stream, Shape shape, int r, int ranks) {
  if (shape != Shape::all_reduce && shape != Shape::reduce && shape != Shape::broadcast) {
    return run_blocked(comm, stream, shape, r, ranks);
  }
  Ran out;
  float* buf = device_floats(kCount);
  fill_later(stream, buf, kCount, r);
  Work w = shape == Shape::all_reduce ? comm.all_reduce_async(buf, kCount, DType::f32, Op::sum)
            : shape == Shape::reduce   ? comm.reduce_async(buf, buf, kCount, DType::f32, Op::sum, kRoot)
                                       : comm.broadcast_async(buf, kCount, DType::f32, kRoot);
  out.code = outcome(w);
  if (out.code != ErrorCode::ok) out.message = w.error_message();
  out.right = true;
  for (size_t i = 0; i < kCount; ++i) {
    float want = 0;
    if (shape == Shape::broadcast) {
      want = pattern(kRoot, i);
    } else if (shape == Shape::reduce && r != kRoot) {
      want = pattern(r, i);  // not the root: its buffer is not written at all
    } else {
      for (int q = 0; q < ranks; ++q) want += pattern(q, i);
    }
    if (buf[i] != want) {
      out.right = false;
      break;
    }
  }
  return out;
}

class EveryShape : public StagingPipelineTest, public ::testing::WithParamInterface<Shape> {};

TEST_P(EveryShape, ChunkedThroughTheBoundGivesTheHostResult) {
  constexpr int kRanks = 3;
  const int scratch_before = fake().device_allocs.load();
  Job job(kRanks);
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream& stream) {
    // Each round reuses the slots and events; the second and third slow one direction of copies
    // as BrokenOrdering does, so what it sees there is the broken ordering, not the delays.
    const int delays[3][2] = {{100, 100}, {300, 20}, {50, 1000}};
    for (int round = 0; round < 3; ++round) {
      if (r == 0) {  // the lanes are the fake's, shared by the ranks: any rank may set them
        fake().copy_delay_us = delays[round][0];
        fake().copy_back_delay_us = delays[round][1];
      }
      Ran ran = run_shape(comm, stream, GetParam(), r, kRanks);
      EXPECT_EQ(ran.code, ErrorCode::ok) << "rank " << r << ": " << ran.message;
      EXPECT_TRUE(ran.right) << "rank " << r << " round " << round << ": " << name(GetParam()) << " result wrong";
    }
  });
  // Many chunks, so results went through device scratch, kept for reuse (a round may start
  // before the last one's chunks are gone, so up to two per rank); pinned memory stayed at each
  // communicator's bound although each message is ~12x to ~37x of it (blocked outputs of 3 ranks).
  const bool root_only = GetParam() == Shape::reduce || GetParam() == Shape::gather;
  EXPECT_GE(fake().device_allocs.load() - scratch_before, root_only ? 1 : kRanks);
  EXPECT_LE(fake().device_allocs.load() - scratch_before, 2 * kRanks);
  EXPECT_LE(pinned_peak(), kRanks * kStaging);
}

INSTANTIATE_TEST_SUITE_P(Staging, EveryShape, kEveryShape,
                         [](const auto& info) { return std::string(name(info.param)); });

// Operations queued back to back share the slots in order: none waits for a slot held by one
// behind it, and each gets its own result.
TEST_F(StagingPipelineTest, OperationsQueuedBackToBackShareTheSlotsInOrder) {
  constexpr int kRanks = 2;
  constexpr int kOps = 6;
  Job job(kRanks);
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream&) {
    std::vector<float*> bufs;
    std::vector<Work> works;
    for (int k = 0; k < kOps; ++k) {
      const size_t n = kCount / static_cast<size_t>(k + 1);  // different sizes, different chunk counts
      bufs.push_back(device_floats(n));
      std::fill(bufs.back(), bufs.back() + n, static_cast<float>(k + r));
      works.push_back(comm.all_reduce_async(bufs.back(), n, DType::f32, Op::sum));
    }
    for (int k = 0; k < kOps; ++k) {
      ASSERT_EQ(outcome(works[static_cast<size_t>(k)]), ErrorCode::ok) << works[static_cast<size_t>(k)].error_message();
      const size_t n = kCount / static_cast<size_t>(k + 1);
      const float want = static_cast<float>(2 * k + 1);
      EXPECT_EQ(std::count(bufs[static_cast<size_t>(k)], bufs[static_cast<size_t>(k)] + n, want), static_cast<long>(n))
          << "operation " << k;
    }
  });
  EXPECT_LE(pinned_peak(), kRanks * kStaging);
}

// A chunk fails midway (a copy to the device refused on one rank): that rank's buffer keeps its
// input, its Work reports the error, its stream is released, and the ranks stay in step: the
// remaining chunks still ran with this rank's real input (the other rank's result is right) and
// the next operation works on both.
TEST_F(StagingPipelineTest, AFailureMidwayLeavesTheBufferUntouchedAndReleasesTheStream) {
  constexpr int kRanks = 2;
  Job job(kRanks);
  fake().fail_to_device_at = 7;  // the 7th chunk result copied in the process, on one rank
  EXPECT_EQ(testing::all_reduce_failing_midway(job, kCount), 1) << "exactly the rank whose copy was refused fails";
}

// Each ordering the pipeline relies on, skipped on purpose, shows up as a wrong result on some
// rank (the copies are slowed and spoil their destination first), for every shape.
enum class Fault { skip_input_wait, skip_slot_wait, early_result_copy, skip_result_wait };
const char* name(Fault f) {
  switch (f) {
    case Fault::skip_input_wait: return "SendBeforeTheInputCopy";
    case Fault::skip_slot_wait: return "RefillBeforeTheResultCopy";
    case Fault::early_result_copy: return "ResultCopyBeforeTheCollective";
    case Fault::skip_result_wait: return "HandOverBeforeTheChunksLanded";
  }
  return "";
}

class BrokenOrdering : public StagingPipelineTest, public ::testing::WithParamInterface<std::tuple<Fault, Shape>> {};

TEST_P(BrokenOrdering, IsCaught) {
  auto& f = staging_faults_for_testing();
  const auto [fault, shape] = GetParam();
  // The copies whose start the broken ordering races with are made slow, the others quick, so
  // the race goes the wrong way every time rather than now and then.
  const bool slow_back = fault == Fault::skip_slot_wait || fault == Fault::skip_result_wait;
  fake().copy_delay_us = slow_back ? 50 : 300;
  fake().copy_back_delay_us = slow_back ? 1000 : 20;
  (fault == Fault::skip_input_wait     ? f.skip_input_wait
   : fault == Fault::skip_slot_wait    ? f.skip_slot_wait
   : fault == Fault::early_result_copy ? f.early_result_copy
                                       : f.skip_result_wait) = true;
  constexpr int kRanks = 2;
  std::atomic<int> wrong{0};
  Job job(kRanks);
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream& stream) {
    Ran ran = run_shape(comm, stream, shape, r, kRanks);
    if (ran.code != ErrorCode::ok || !ran.right) ++wrong;
    ASSERT_TRUE(stream.synchronize(kBound));
    ASSERT_TRUE(fake().sync_own(kBound));  // nothing queued on braid's lanes outlives the buffers
  });
  EXPECT_GT(wrong.load(), 0) << name(fault) << " went unnoticed on " << name(shape);
}

INSTANTIATE_TEST_SUITE_P(
    Staging, BrokenOrdering,
    ::testing::Combine(::testing::Values(Fault::skip_input_wait, Fault::skip_slot_wait, Fault::early_result_copy,
                                         Fault::skip_result_wait),
                       kEveryShape),
    [](const auto& info) {
      return std::string(name(std::get<0>(info.param))) + "_" + name(std::get<1>(info.param));
    });

}  // namespace
}  // namespace braid
