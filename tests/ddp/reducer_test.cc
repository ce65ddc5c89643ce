// The Reducer's bookkeeping in a world of one process: when buckets start, where gradients
// live, what no_sync, unused parameters and rebuilding do, and how failures stick.
#include "braid/ddp/reducer.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "braid/braid.h"

namespace braid::ddp {
namespace {

class SoloWorld {
 public:
  SoloWorld()
      : server_(TcpStoreServer::start("127.0.0.1", 0)),
        comm_(Communicator::from_store(std::shared_ptr<Store>(TcpStore::connect("127.0.0.1", server_->port())), 0, 1)) {
  }
  Communicator& comm() { return comm_; }

 private:
  std::unique_ptr<TcpStoreServer> server_;
  Communicator comm_;
};

// Averages like the default hook, and remembers which buckets started and finished, in order.
class RecordingHook : public CommHook {
 public:
  std::string name() const override { return "recording"; }
  Work start(Communicator& comm, const BucketView& b) override {
    if (fail_next) throw Error(ErrorCode::peer_lost, "injected failure");
    started.push_back(b.index);
    return inner_->start(comm, b);
  }
  void finish(Communicator& comm, const BucketView& b) override {
    finished.push_back(b.index);
    inner_->finish(comm, b);
  }
  std::vector<size_t> started, finished;
  bool fail_next = false;

 private:
  std::shared_ptr<CommHook> inner_ = average_hook();
};

struct Model {
  std::vector<std::vector<float>> weights;
  std::vector<Parameter> params;
  explicit Model(const std::vector<size_t>& counts) {
    for (size_t c : counts) weights.emplace_back(c, 1.0f);
    for (auto& w : weights) params.push_back({w.data(), nullptr, w.size()});
  }
};

ReducerOptions one_param_per_bucket(std::shared_ptr<CommHook> hook, bool rebuild = true) {
  return ReducerOptions{
      .buckets = {.first_bucket_bytes = 4, .bucket_bytes = 4}, .rebuild_buckets = rebuild, .hook = std::move(hook)};
}

TEST(Reducer, BucketsStartInOrderAsSoonAsTheyAreReady) {
  SoloWorld w;
  Model m({3, 3, 3});
  auto hook = std::make_shared<RecordingHook>();
  Reducer r(w.comm(), m.params, one_param_per_bucket(hook));
  ASSERT_EQ(r.plan().buckets.size(), 3u);  // reverse registration: bucket 0 holds parameter 2
  r.mark_ready(1);                         // bucket 1 is ready but bucket 0 has not started
  EXPECT_TRUE(hook->started.empty());
  r.mark_ready(2);  // bucket 0 ready: 0 and 1 both start
  EXPECT_EQ(hook->started, (std::vector<size_t>{0, 1}));
  r.mark_ready(0);
  EXPECT_EQ(hook->started, (std::vector<size_t>{0, 1, 2}));
  EXPECT_TRUE(hook->finished.empty());
  r.finalize();
  EXPECT_EQ(hook->finished, (std::vector<size_t>{0, 1, 2}));
  EXPECT_EQ(r.steps(), 1u);
}

TEST(Reducer, OwnedGradientsAreViewsIntoOneBucket) {
  SoloWorld w;
  Model m({4, 5, 6});
  Reducer r(w.comm(), m.params);
  ASSERT_EQ(r.plan().buckets.size(), 1u);
  // Reverse registration order, contiguous: parameter 2 first, then 1, then 0.
  EXPECT_EQ(r.grad(1), r.grad(2) + 6);
  EXPECT_EQ(r.grad(0), r.grad(1) + 5);
  for (size_t i = 0; i < 3; ++i) {
    for (size_t k = 0; k < m.params[i].count; ++k) r.grad(i)[k] = static_cast<float>(10 * i + k);
    r.mark_ready(i);
  }
  r.finalize();
  EXPECT_EQ(r.grad(1)[2], 12.0f);  // a world of one: the average is the value itself
  r.zero_grad();
  EXPECT_EQ(r.grad(0)[3], 0.0f);
  EXPECT_THROW(r.grad(3), Error);
}

TEST(Reducer, UnmarkedParametersBecomeZero) {
  SoloWorld w;
  Model m({2, 2});
  Reducer r(w.comm(), m.params);
  r.grad(0)[0] = 5.0f;  // stale, never marked: must not survive the step
  r.grad(1)[0] = 3.0f;
  r.mark_ready(1);
  r.finalize();
  EXPECT_EQ(r.grad(0)[0], 0.0f);
  EXPECT_EQ(r.grad(1)[0], 3.0f);
}

TEST(Reducer, NoSyncDoesNotCommunicateAndKeepsAccumulating) {
  SoloWorld w;
  Model m({2, 2});
  auto hook = std::make_shared<RecordingHook>();
  Reducer r(w.comm(), m.params, ReducerOptions{.hook = hook});
  {
    auto guard = r.no_sync_scope();
    r.grad(0)[0] += 1.0f;
    r.mark_ready(0);  // parameter 1 gets nothing in this micro-step
    r.finalize();
    EXPECT_TRUE(hook->started.empty());
  }
  EXPECT_FALSE(r.no_sync());
  r.grad(0)[0] += 2.0f;
  r.grad(1)[1] += 4.0f;
  r.mark_ready(1);  // parameter 0 accumulated in no_sync only: kept, not zeroed
  r.finalize();
  EXPECT_EQ(hook->started.size(), 1u);
  EXPECT_EQ(r.grad(0)[0], 3.0f);
  EXPECT_EQ(r.grad(1)[1], 4.0f);
}

TEST(Reducer, RebuildFollowsTheFirstStepsReadyOrderAndKeepsValues) {
  SoloWorld w;
  Model m({1, 2, 3});
  Reducer r(w.comm(), m.params, one_param_per_bucket(average_hook()));
  EXPECT_EQ(r.plan().buckets[0].slots[0].param, 2u);
  for (size_t i : {0, 1, 2}) {
    r.grad(i)[0] = static_cast<float>(i + 1);
    r.mark_ready(i);
  }
  r.finalize();
  EXPECT_EQ(r.num_rebuilds(), 1u);
  ASSERT_EQ(r.plan().buckets.size(), 3u);
  EXPECT_EQ(r.plan().buckets[0].slots[0].param, 0u);
  EXPECT_EQ(r.plan().buckets[2].slots[0].param, 2u);
  for (size_t i : {0, 1, 2}) EXPECT_EQ(r.grad(i)[0], static_cast<float>(i + 1));  // moved, values kept
  for (size_t i : {2, 1, 0}) r.mark_ready(i);
  r.finalize();
  EXPECT_EQ(r.num_rebuilds(), 1u);  // only once
}

TEST(Reducer, NoRebuildWhenTheOrderAlreadyFits) {
  SoloWorld w;
  Model m({1, 2, 3});
  Reducer r(w.comm(), m.params, one_param_per_bucket(average_hook()));
  float* before = r.grad(1);
  for (size_t i : {2, 1, 0}) r.mark_ready(i);
  r.finalize();
  EXPECT_EQ(r.num_rebuilds(), 0u);
  EXPECT_EQ(r.grad(1), before);
}

TEST(Reducer, EmptyParametersAndEmptyBuckets) {
  SoloWorld w;
  Model m({0, 3, 0});
  Reducer r(w.comm(), m.params, one_param_per_bucket(average_hook()));
  r.grad(1)[2] = 7.0f;
  r.mark_ready(1);
  r.finalize();  // the buckets of the empty parameters reduce zero elements
  EXPECT_EQ(r.grad(1)[2], 7.0f);
  Reducer nothing(w.comm(), {});
  nothing.finalize();
  EXPECT_EQ(nothing.steps(), 1u);
}

TEST(Reducer, CallerOwnedGradientsStayWhereTheyAre) {
  SoloWorld w;
  std::vector<float> weights(4, 0.0f), grads = {1, 2, 3, 4};
  Reducer r(w.comm(), {Parameter{weights.data(), grads.data(), 4}});
  EXPECT_EQ(r.grad(0), grads.data());
  r.mark_ready(0);
  r.finalize();
  EXPECT_EQ(grads, (std::vector<float>{1, 2, 3, 4}));
}

TEST(Reducer, MisuseIsReported) {
  SoloWorld w;
  Model m({2, 2});
  Reducer r(w.comm(), m.params);
  r.mark_ready(0);
  EXPECT_THROW(r.mark_ready(0), Error);
  EXPECT_THROW(r.mark_ready(9), Error);
  EXPECT_THROW(r.set_no_sync(true), Error);  // mid-step
  r.finalize();
  r.set_no_sync(true);
  EXPECT_THROW(compress_hook(DType::i32), Error);
  std::vector<Parameter> bad = {Parameter{nullptr, nullptr, 3}};
  EXPECT_THROW(Reducer(w.comm(), bad), Error);
}

TEST(Reducer, AFailureSticks) {
  SoloWorld w;
  Model m({2});
  auto hook = std::make_shared<RecordingHook>();
  Reducer r(w.comm(), m.params, ReducerOptions{.hook = hook});
  hook->fail_next = true;
  try {
    r.mark_ready(0);
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::peer_lost);
    EXPECT_NE(std::string(e.what()).find("could not start all_reduce of gradient bucket 0"), std::string::npos)
        << e.what();
  }
  try {
    r.finalize();
    FAIL() << "no exception";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::aborted);
    EXPECT_NE(std::string(e.what()).find("injected failure"), std::string::npos) << e.what();
  }
}

TEST(Reducer, CompressionHooksRoundTripInAWorldOfOne) {
  SoloWorld w;
  for (DType wire : {DType::f16, DType::bf16}) {
    for (CompressedReduce how : {CompressedReduce::avg, CompressedReduce::sum_then_scale}) {
      Model m({5});
      Reducer r(w.comm(), m.params, ReducerOptions{.hook = compress_hook(wire, how)});
      for (size_t k = 0; k < 5; ++k) r.grad(0)[k] = 0.25f * static_cast<float>(k) + 1.0f / 3.0f;
      r.mark_ready(0);
      r.finalize();
      for (size_t k = 0; k < 5; ++k) {
        const float want = 0.25f * static_cast<float>(k) + 1.0f / 3.0f;
        EXPECT_NEAR(r.grad(0)[k], want, wire == DType::f16 ? 1e-3 : 1e-2) << to_string(wire);
        EXPECT_NE(r.grad(0)[k], want) << "1/3 is not exact in 16 bits: the hook did not round";
      }
    }
  }
}

TEST(Reducer, BroadcastsBuffersAndChecksLayout) {
  SoloWorld w;
  Model m({3});
  std::vector<double> stats = {1.5, 2.5};
  Reducer r(w.comm(), m.params, ReducerOptions{.buffers = {TensorRef{stats.data(), 2, DType::f64}}});
  r.broadcast_buffers();
  EXPECT_EQ(stats[1], 2.5);
}

}  // namespace
}  // namespace braid::ddp
