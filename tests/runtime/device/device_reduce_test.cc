// Reductions on the device (BRAID_CUDA_REDUCE, runtime/device/device_reduce.cc) through the fake device,
// whose reduction "kernel" is the host kernel queued on a stream, spoiling its destination
// until it is done, and which counts reductions that start before a copy they read landed.
// Each staged chunk is gathered on the host and reduced on the GPU by every rank that needs the
// result, so no reduced chunk is ever sent: the orderings that matter are copy -> reduction
// (reduced_before_copy, and a fault that breaks it) and reduction -> result handed to the caller
// (a fault that skips that wait). Results are compared byte for byte with the same operation on
// host buffers, which the host path reduces, for every dtype and op on 2-4 ranks.
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "collectives/kernels/half_float.h"
#include "tests/runtime/device/device_test_support.h"

namespace braid {
namespace {

using namespace std::chrono_literals;
using testing::DeviceJob;
using testing::fake;
using testing::FakeDeviceTest;
using testing::FakeStream;
using testing::outcome;

constexpr auto kBound = testing::kDeviceBound;
constexpr size_t kStaging = 64 << 10;  // 16 KiB slots: a slot holds 16 KiB / (ranks x element) of a chunk

enum class Kind { all_reduce, reduce };
const char* name(Kind k) { return k == Kind::all_reduce ? "all_reduce" : "reduce"; }
constexpr int kRoot = 1;

// Element i of rank r's input: small values whose sums and products are exact in every dtype (so
// the host's ring order and the device's rank order give the same bits), negatives included.
void fill(void* p, DType t, size_t n, int r) {
  for (size_t i = 0; i < n; ++i) {
    const int v = static_cast<int>((i * 7 + static_cast<size_t>(r) * 3) % 11) - 3;
    const float f = static_cast<float>(v) * 0.5f;
    switch (t) {
      case DType::f32: static_cast<float*>(p)[i] = f; break;
      case DType::f64: static_cast<double*>(p)[i] = f; break;
      case DType::f16: static_cast<uint16_t*>(p)[i] = collectives::f32_to_f16(f); break;
      case DType::bf16: static_cast<uint16_t*>(p)[i] = collectives::f32_to_bf16(f); break;
      case DType::i8: static_cast<int8_t*>(p)[i] = static_cast<int8_t>(v); break;
      case DType::u8: static_cast<uint8_t*>(p)[i] = static_cast<uint8_t>(v); break;
      case DType::i32: static_cast<int32_t*>(p)[i] = v; break;
      case DType::i64: static_cast<int64_t*>(p)[i] = v; break;
    }
  }
}

Work start(Communicator& comm, Kind k, void* buf, size_t n, DType t, Op op) {
  return k == Kind::all_reduce ? comm.all_reduce_async(buf, n, t, op) : comm.reduce_async(buf, buf, n, t, op, kRoot);
}

class DeviceReduceTest : public FakeDeviceTest {};

class EveryDtypeAndOp : public DeviceReduceTest, public ::testing::WithParamInterface<std::tuple<int, Kind>> {};

// Every dtype x op, on host buffers (reduced on the host) and on device buffers with
// BRAID_CUDA_REDUCE=device: the same bytes on every rank that has a result, several chunks each.
TEST_P(EveryDtypeAndOp, GivesTheHostResult) {
  const auto [ranks, kind] = GetParam();
  constexpr size_t kCount = 3001;  // 2-9 chunks, the last one short
  const int reductions_before = fake().device_reductions.load();
  const int early_before = fake().reduced_before_copy.load();
  std::atomic<int> expected_reductions{0};
  DeviceJob job(ranks, kStaging, "device");
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream&) {
    for (int t = 0; t < kNumDTypes; ++t) {
      for (int o = 0; o < kNumOps; ++o) {
        const auto dtype = static_cast<DType>(t);
        const auto op = static_cast<Op>(o);
        if (is_bitwise(op) && is_floating(dtype)) continue;
        const size_t bytes = kCount * dtype_size(dtype);
        std::vector<unsigned char> host(bytes);
        fill(host.data(), dtype, kCount, r);
        auto* dev = testing::device_array<unsigned char>(bytes);
        std::memcpy(dev, host.data(), bytes);
        Work h = start(comm, kind, host.data(), kCount, dtype, op);
        Work d = start(comm, kind, dev, kCount, dtype, op);
        const std::string what = std::string(name(kind)) + " " + to_string(dtype) + " " + to_string(op) + " rank " +
                                 std::to_string(r) + " of " + std::to_string(ranks);
        ASSERT_EQ(outcome(h), ErrorCode::ok) << what << ": " << h.error_message();
        ASSERT_EQ(outcome(d), ErrorCode::ok) << what << ": " << d.error_message();
        if (kind == Kind::reduce && r != kRoot) {  // not the root: its buffer is not written
          std::vector<unsigned char> input(bytes);
          fill(input.data(), dtype, kCount, r);
          EXPECT_EQ(std::memcmp(dev, input.data(), bytes), 0) << what << ": a non-root's buffer changed";
          continue;
        }
        EXPECT_EQ(std::memcmp(dev, host.data(), bytes), 0) << what << ": the device result differs from the host's";
        if (op != Op::avg) expected_reductions.fetch_add(ranks - 1);  // per chunk, at least one chunk
      }
    }
  });
  // The reductions really ran on the device (avg stays on the host), each after its copies.
  EXPECT_GE(fake().device_reductions.load() - reductions_before, expected_reductions.load());
  EXPECT_EQ(fake().reduced_before_copy.load() - early_before, 0);
  EXPECT_LE(pinned_peak(), static_cast<size_t>(ranks) * kStaging);
}

INSTANTIATE_TEST_SUITE_P(DeviceReduce, EveryDtypeAndOp,
                         ::testing::Combine(::testing::Values(2, 3, 4), ::testing::Values(Kind::all_reduce, Kind::reduce)),
                         [](const auto& info) {
                           return std::string(name(std::get<1>(info.param))) + "_" +
                                  std::to_string(std::get<0>(info.param)) + "ranks";
                         });

// auto reduces on the device with 2 ranks (the same bytes cross the network) and on the host with
// more; host and device are obeyed whatever the world size.
TEST_F(DeviceReduceTest, TheChoiceFollowsBraidCudaReduce) {
  struct Case {
    const char* mode;
    int ranks;
    bool on_device;
  };
  for (const Case c : {Case{"auto", 2, true}, Case{"auto", 3, false}, Case{"host", 2, false}, Case{"device", 3, true}}) {
    const int before = fake().device_reductions.load();
    DeviceJob job(c.ranks, kStaging, c.mode);
    job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream&) {
      auto* buf = testing::device_floats(10000);
      std::fill(buf, buf + 10000, static_cast<float>(r + 1));
      comm.all_reduce(buf, 10000, DType::f32, Op::sum);
      EXPECT_EQ(buf[9999], static_cast<float>(c.ranks * (c.ranks + 1) / 2)) << c.mode << " rank " << r;
    });
    EXPECT_EQ(fake().device_reductions.load() > before, c.on_device) << "BRAID_CUDA_REDUCE=" << c.mode << ", "
                                                                    << c.ranks << " ranks";
  }
}

// The orderings a reduction on the device relies on, kept (right results, no reduction before
// its copies) with slow copies and slow reductions, and each broken on purpose (caught).
enum class Fault { none, reduce_off_lane, skip_result_wait, skip_input_wait };
const char* name(Fault f) {
  switch (f) {
    case Fault::none: return "Kept";
    case Fault::reduce_off_lane: return "ReductionBeforeItsCopy";
    case Fault::skip_result_wait: return "HandOverBeforeTheReduction";
    case Fault::skip_input_wait: return "SendBeforeTheInputCopy";
  }
  return "";
}

class ReductionOrdering : public DeviceReduceTest, public ::testing::WithParamInterface<std::tuple<Fault, Kind>> {};

TEST_P(ReductionOrdering, IsKeptOrCaught) {
  const auto [fault, kind] = GetParam();
  auto& f = staging_faults_for_testing();
  fake().copy_delay_us = fault == Fault::skip_input_wait ? 300 : 50;
  fake().copy_back_delay_us = fault == Fault::reduce_off_lane ? 1000 : 50;
  fake().reduce_delay_us = fault == Fault::skip_result_wait ? 2000 : 100;
  if (fault == Fault::reduce_off_lane) f.reduce_off_lane = true;
  if (fault == Fault::skip_result_wait) f.skip_result_wait = true;
  if (fault == Fault::skip_input_wait) f.skip_input_wait = true;
  constexpr int kRanks = 3;
  constexpr size_t kCount = 20011;  // ~15 chunks of 1365 floats
  const int early_before = fake().reduced_before_copy.load();
  std::atomic<int> wrong{0};
  DeviceJob job(kRanks, kStaging, "device");
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream& stream) {
    float* buf = testing::device_floats(kCount);
    stream.push([=] {  // a "kernel" that writes the input late: the operation must wait for it
      std::this_thread::sleep_for(20ms);
      for (size_t i = 0; i < kCount; ++i) buf[i] = static_cast<float>(r + 1 + static_cast<int>(i % 13));
    });
    Work w = start(comm, kind, buf, kCount, DType::f32, Op::sum);
    bool right = outcome(w) == ErrorCode::ok;
    const bool has_result = kind == Kind::all_reduce || r == kRoot;
    for (size_t i = 0; i < kCount && right; ++i) {
      const float base = static_cast<float>(i % 13);
      const float want = has_result ? kRanks * base + kRanks * (kRanks + 1) / 2 : base + static_cast<float>(r + 1);
      right = buf[i] == want;
    }
    if (!right) ++wrong;
    ASSERT_TRUE(stream.synchronize(kBound));
    ASSERT_TRUE(fake().sync_own(kBound));  // nothing queued on braid's lanes outlives the buffers
  });
  const int early = fake().reduced_before_copy.load() - early_before;
  if (fault == Fault::none) {
    EXPECT_EQ(wrong.load(), 0) << "a right ordering gave a wrong result";
    EXPECT_EQ(early, 0) << "a reduction started before a copy it reads landed";
  } else {
    EXPECT_GT(wrong.load() + early, 0) << name(fault) << " went unnoticed on " << name(kind);
  }
}

INSTANTIATE_TEST_SUITE_P(DeviceReduce, ReductionOrdering,
                         ::testing::Combine(::testing::Values(Fault::none, Fault::reduce_off_lane,
                                                              Fault::skip_result_wait, Fault::skip_input_wait),
                                            ::testing::Values(Kind::all_reduce, Kind::reduce)),
                         [](const auto& info) {
                           return std::string(name(std::get<0>(info.param))) + "_" + name(std::get<1>(info.param));
                         });

// A chunk's result copy refused midway with reductions on the device: the same guarantees as on
// the host path (the buffer untouched, the stream released, the ranks in step).
TEST_F(DeviceReduceTest, AFailureMidwayLeavesTheBufferUntouched) {
  constexpr int kRanks = 2;
  constexpr size_t kCount = 50000;
  fake().fail_to_device_at = 9;
  DeviceJob job(kRanks, kStaging, "device");
  EXPECT_EQ(testing::all_reduce_failing_midway(job, kCount), 1) << "exactly the rank whose copy was refused fails";
}

// CUDA loads kernels lazily, and loading one may wait for every stream of the GPU: a first
// reduction queued while an operation holds its caller's stream would wait for that very
// operation (seen on an H200: 2 ranks, every collective with BRAID_CUDA_REDUCE=device hung). The
// fake counts streams held, and reductions queued, on a GPU before load_kernels ran there. A
// GPU number no other test uses, so this test sees its first operation there.
TEST_F(DeviceReduceTest, KernelsAreLoadedBeforeAnyStreamIsHeld) {
  constexpr int kGpu = 5;
  ASSERT_FALSE(fake().loaded(kGpu));
  const int held = fake().held_before_load.load(), reduced = fake().reduced_before_load.load();
  const int reductions = fake().device_reductions.load();
  DeviceJob job(2, kStaging, "device");
  job.on_every_rank_with_stream([&](int r, Communicator& comm, FakeStream&) {
    float* buf = testing::device_floats(20000, kGpu);
    std::fill(buf, buf + 20000, 1.0f);
    comm.all_reduce(buf, 20000, DType::f32, Op::sum);
    EXPECT_EQ(std::count(buf, buf + 20000, 2.0f), 20000) << "rank " << r;
  });
  EXPECT_TRUE(fake().loaded(kGpu));
  EXPECT_GT(fake().device_reductions.load(), reductions) << "nothing was reduced on the device";
  EXPECT_EQ(fake().held_before_load.load(), held) << "a stream was held before the kernels were loaded";
  EXPECT_EQ(fake().reduced_before_load.load(), reduced) << "a reduction was queued before the kernels were loaded";
}

// Kernels that cannot be loaded (built for another GPU): the operation fails at once with
// CUDA's reason, nothing is held or copied, and the buffer is untouched.
TEST_F(DeviceReduceTest, KernelsThatDoNotLoadFailTheCall) {
  constexpr int kGpu = 6;
  fake().fail_load = true;
  const int held = fake().held_before_load.load();
  DeviceJob job(1, kStaging, "device");
  Communicator comm = job.make(0);
  FakeStream stream;
  comm.set_stream(&stream);
  float* buf = testing::device_floats(1000, kGpu);
  std::fill(buf, buf + 1000, 3.0f);
  try {
    comm.all_reduce(buf, 1000, DType::f32, Op::sum);
    ADD_FAILURE() << "an all_reduce ran on a GPU whose kernels did not load";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("loading the kernels failed"), std::string::npos) << e.what();
  }
  EXPECT_EQ(std::count(buf, buf + 1000, 3.0f), 1000);
  EXPECT_EQ(fake().held_before_load.load(), held);
  ASSERT_TRUE(stream.synchronize(kBound));
}

}  // namespace
}  // namespace braid
