// ddp_step_bench - what DDP adds to a training step: the same MLP step timed with no
// communication at all, then with the Reducer (each hook, small and single buckets).
//
//   braidrun --standalone --nproc-per-node 2 ddp_step_bench --hidden 512 --batch 64 --steps 30
//
// Rank 0 prints, per configuration, the median step time and the overhead over the local step.
// On a machine with fewer cores than ranks x threads, communication competes with compute for
// CPU, which is why the overhead is reported next to the all_reduce time of the whole gradient.
#include <braid/braid.h>
#include <braid/ddp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "tools/examples/mlp.h"

namespace {

using braid::examples::Mlp;
using Clock = std::chrono::steady_clock;

struct Flags {
  size_t hidden = 512;
  size_t batch = 64;  // global
  size_t steps = 30;
};

double median_ms(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

std::vector<float> make_inputs(size_t n, size_t d) {
  std::vector<float> x(n * d);
  uint64_t s = 1;
  for (float& v : x) v = static_cast<float>((s = s * 6364136223846793005ULL + 1) >> 40) * 0x1p-24f;
  return x;
}

struct Config {
  std::string name;
  std::shared_ptr<braid::ddp::CommHook> hook;  // null: no communication at all
  braid::ddp::BucketOptions buckets;
};

double time_config(braid::Communicator& comm, const Flags& f, const Config& c, size_t* nbuckets) {
  const size_t local = f.batch / static_cast<size_t>(comm.size());
  Mlp mlp(braid::examples::MlpShape{.inputs = 784, .hidden = f.hidden, .classes = 10}, 1);
  const std::vector<float> x = make_inputs(local, 784);
  const std::vector<int32_t> y(local, 3);
  std::vector<double> times;
  if (!c.hook) {
    std::vector<std::vector<float>> g(Mlp::kNumParams);
    for (size_t s = 0; s < f.steps; ++s) {
      const auto t0 = Clock::now();
      float* grads[Mlp::kNumParams];
      for (size_t i = 0; i < Mlp::kNumParams; ++i) {
        g[i].assign(mlp.param_count(i), 0.0f);
        grads[i] = g[i].data();
      }
      mlp.train_batch(x.data(), y.data(), local, 1.0f / static_cast<float>(local), grads, [](size_t) {});
      mlp.sgd_step(grads, 0.01f);
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
    }
    *nbuckets = 0;
    return median_ms(times);
  }
  std::vector<braid::ddp::Parameter> params;
  for (size_t i = 0; i < Mlp::kNumParams; ++i) params.push_back({mlp.param(i), nullptr, mlp.param_count(i)});
  braid::ddp::Reducer reducer(comm, params, braid::ddp::ReducerOptions{.buckets = c.buckets, .hook = c.hook});
  for (size_t s = 0; s < f.steps + 1; ++s) {  // step 0 rebuilds buckets: not timed
    const auto t0 = Clock::now();
    reducer.zero_grad();
    float* grads[Mlp::kNumParams];
    for (size_t i = 0; i < Mlp::kNumParams; ++i) grads[i] = reducer.grad(i);
    mlp.train_batch(x.data(), y.data(), local, 1.0f / static_cast<float>(local), grads,
                    [&](size_t i) { reducer.mark_ready(i); });
    reducer.finalize();
    for (size_t i = 0; i < Mlp::kNumParams; ++i) grads[i] = reducer.grad(i);
    mlp.sgd_step(grads, 0.01f);
    if (s > 0) times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
  }
  *nbuckets = reducer.plan().buckets.size();
  return median_ms(times);
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string a = argv[i];
    const size_t v = std::strtoull(argv[i + 1], nullptr, 10);
    if (a == "--hidden")
      f.hidden = v;
    else if (a == "--batch")
      f.batch = v;
    else if (a == "--steps")
      f.steps = v;
    else {
      std::fprintf(stderr, "usage: ddp_step_bench [--hidden H] [--batch GLOBAL] [--steps S]\n");
      return 2;
    }
  }
  try {
    braid::Communicator comm = braid::Communicator::from_env();
    const bool root = comm.rank() == 0;
    using braid::ddp::CompressedReduce;
    const braid::ddp::BucketOptions small{.first_bucket_bytes = 64 << 10, .bucket_bytes = 256 << 10};
    const braid::ddp::BucketOptions one{.first_bucket_bytes = size_t{1} << 40, .bucket_bytes = size_t{1} << 40};
    const std::vector<Config> configs = {
        {"local step, no communication", nullptr, {}},
        {"ddp avg, default buckets (1/25 MiB)", braid::ddp::average_hook(), {}},
        {"ddp avg, small buckets (64/256 KiB)", braid::ddp::average_hook(), small},
        {"ddp avg, one bucket (no overlap)", braid::ddp::average_hook(), one},
        {"ddp f16 compression", braid::ddp::compress_hook(braid::DType::f16), {}},
        {"ddp bf16 compression", braid::ddp::compress_hook(braid::DType::bf16), {}},
    };
    // The whole gradient, all_reduced alone: the communication a step must hide or pay.
    Mlp probe(braid::examples::MlpShape{.inputs = 784, .hidden = f.hidden, .classes = 10}, 1);
    size_t total = 0;
    for (size_t i = 0; i < Mlp::kNumParams; ++i) total += probe.param_count(i);
    std::vector<float> grad(total, 1.0f);
    auto time_all_reduce = [&](braid::DType dtype) {
      std::vector<double> ar;
      for (size_t s = 0; s < f.steps; ++s) {
        comm.barrier();
        const auto t0 = Clock::now();
        comm.all_reduce(grad.data(), total, dtype, braid::Op::avg);  // 16-bit types use the first half
        ar.push_back(std::chrono::duration<double, std::milli>(Clock::now() - t0).count());
      }
      return median_ms(ar);
    };
    std::fill(grad.begin(), grad.end(), 0.0f);  // zeros are valid f32, f16 and bf16 alike
    const double ar32 = time_all_reduce(braid::DType::f32);
    const double ar16 = time_all_reduce(braid::DType::f16);
    const double arb16 = time_all_reduce(braid::DType::bf16);
    if (root) {
      std::printf("%d ranks, MLP 784-%zu-10 (%zu f32 gradients = %.2f MiB), global batch %zu, median of %zu steps\n",
                  comm.size(), f.hidden, total, static_cast<double>(total) * 4 / (1 << 20), f.batch, f.steps);
      std::printf("  %-40s %8.2f ms\n", "all_reduce(avg) of the gradient, f32", ar32);
      std::printf("  %-40s %8.2f ms\n", "all_reduce(avg) of the gradient, f16", ar16);
      std::printf("  %-40s %8.2f ms\n", "all_reduce(avg) of the gradient, bf16", arb16);
    }
    double local_ms = 0;
    for (const Config& c : configs) {
      comm.barrier();
      size_t nb = 0;
      const double ms = time_config(comm, f, c, &nb);
      if (!c.hook) local_ms = ms;
      if (root) {
        std::printf("  %-40s %8.2f ms  (+%.2f ms, %zu buckets)\n", c.name.c_str(), ms, ms - local_ms, nb);
        std::fflush(stdout);
      }
    }
    return 0;
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "ddp_step_bench: %s\n", e.what());
    return 1;
  }
}
