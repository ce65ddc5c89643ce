// A rank process for the DDP tests: trains the small MLP on synthetic data under a Reducer and
// writes its final parameters to --out. Rendezvous through the environment (MASTER_ADDR,
// MASTER_PORT, RANK, WORLD_SIZE).
//
// Optimizer step s, micro-step m (of --micro) covers global samples [(s*micro + m) * batch, +batch);
// rank r trains on its batch/world slice of it. Every micro-step but the last runs under no_sync.
#include <braid/braid.h>
#include <braid/ddp.h>
#include <signal.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "tests/ddp/synthetic.h"
#include "tests/support/rank_flags.h"
#include "tools/examples/mlp.h"

namespace {

using braid::examples::Mlp;
namespace dt = braid::ddp::testing;

struct Flags {
  size_t steps = 6;
  size_t batch = 12;
  size_t micro = 1;
  float lr = 0.5f;
  size_t bucket_bytes = 0;  // 0: the defaults (1 MiB, 25 MiB)
  std::string hook = "avg";
  std::string out;
  bool caller_grads = false;
  bool unused = false;
  bool reverse_ready_on_odd = false;
  int kill_rank = -1;
  size_t kill_step = 0;
  size_t hidden_on_rank1 = 0;
};

Flags parse(int argc, char** argv) {
  Flags f;
  braid::testing::RankFlags("ddp_rank")
      .value("--steps", &f.steps)
      .value("--batch", &f.batch)
      .value("--micro", &f.micro)
      .value("--lr", &f.lr)
      .value("--bucket-bytes", &f.bucket_bytes)
      .value("--hook", &f.hook)
      .value("--out", &f.out)
      .toggle("--caller-grads", &f.caller_grads)
      .toggle("--unused", &f.unused)
      .toggle("--reverse-ready-on-odd", &f.reverse_ready_on_odd)
      .value("--kill-rank", &f.kill_rank)
      .value("--kill-step", &f.kill_step)
      .value("--hidden-on-rank1", &f.hidden_on_rank1)
      .parse(argc, argv);
  return f;
}

std::shared_ptr<braid::ddp::CommHook> hook_named(const std::string& name) {
  using braid::ddp::CompressedReduce;
  if (name == "f16") return braid::ddp::compress_hook(braid::DType::f16);
  if (name == "bf16") return braid::ddp::compress_hook(braid::DType::bf16);
  if (name == "f16sum") return braid::ddp::compress_hook(braid::DType::f16, CompressedReduce::sum_then_scale);
  if (name == "bf16sum") return braid::ddp::compress_hook(braid::DType::bf16, CompressedReduce::sum_then_scale);
  return braid::ddp::average_hook();
}

int train(const Flags& f, braid::Communicator& comm, Mlp& mlp, std::vector<float>& aux,
          const std::vector<braid::ddp::Parameter>& params, const braid::ddp::ReducerOptions& options);

int run(const Flags& f) {
  braid::Communicator comm = braid::Communicator::from_env();
  const auto rank = static_cast<size_t>(comm.rank());

  const size_t hidden = rank == 1 && f.hidden_on_rank1 ? f.hidden_on_rank1 : 16;
  // Every rank but 0 starts from a different model: the Reducer's broadcast must fix that.
  Mlp mlp(dt::small_shape(hidden), dt::kModelSeed + rank);
  std::vector<float> aux(dt::kAuxCount, rank == 0 ? dt::kAuxInit : -5.0f);

  constexpr size_t kAux = Mlp::kNumParams;
  std::vector<std::vector<float>> own(kAux + 1);
  std::vector<braid::ddp::Parameter> params;
  for (size_t i = 0; i <= kAux; ++i) {
    float* data = i == kAux ? aux.data() : mlp.param(i);
    const size_t count = i == kAux ? aux.size() : mlp.param_count(i);
    if (f.caller_grads) own[i].assign(count, 0.0f);
    params.push_back({data, f.caller_grads ? own[i].data() : nullptr, count});
  }
  // A buffer (think running statistics) that drifts apart on every rank but 0 each step;
  // broadcast_buffers() must bring rank 0's values back everywhere.
  std::vector<double> stats = {static_cast<double>(rank) + 1, 2, 3};
  braid::ddp::ReducerOptions options{.buffers = {braid::ddp::TensorRef{stats.data(), stats.size(), braid::DType::f64}},
                                     .hook = hook_named(f.hook)};
  if (f.bucket_bytes) options.buckets = {.first_bucket_bytes = f.bucket_bytes, .bucket_bytes = f.bucket_bytes};
  // Errors are reported here, while the communicator still exists: its destructor may wait
  // (bounded) for the other ranks to leave the store, and the message should not wait with it.
  try {
    return train(f, comm, mlp, aux, params, options);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "ddp_rank: %s [%s]\n", e.what(), braid::to_string(e.code()));
    std::fflush(stderr);
    return 1;
  }
}

int train(const Flags& f, braid::Communicator& comm, Mlp& mlp, std::vector<float>& aux,
          const std::vector<braid::ddp::Parameter>& params, const braid::ddp::ReducerOptions& options) {
  const auto rank = static_cast<size_t>(comm.rank());
  const auto world = static_cast<size_t>(comm.size());
  const size_t local = f.batch / world;
  constexpr size_t kAux = Mlp::kNumParams;
  braid::ddp::Reducer reducer(comm, params, options);
  const size_t initial_buckets = reducer.plan().buckets.size();
  double* stats = static_cast<double*>(options.buffers[0].data);
  auto check_stats = [&](const char* when) {
    if (stats[0] != 1 || stats[1] != 2 || stats[2] != 3) {
      std::fprintf(stderr, "ddp_rank: rank %zu: buffer is {%g, %g, %g} %s, want rank 0's {1, 2, 3}\n", rank, stats[0],
                   stats[1], stats[2], when);
      std::exit(4);
    }
  };
  check_stats("after the Reducer was built");

  for (size_t s = 0; s < f.steps; ++s) {
    reducer.zero_grad();
    if (s > 0) {
      reducer.broadcast_buffers();
      check_stats("after broadcast_buffers");
    }
    stats[0] += static_cast<double>(rank);
    for (size_t m = 0; m < f.micro; ++m) {
      const bool last = m + 1 == f.micro;
      reducer.set_no_sync(!last);
      float* grads[kAux + 1];
      for (size_t i = 0; i <= kAux; ++i) grads[i] = reducer.grad(i);
      const size_t first = (s * f.micro + m) * f.batch + rank * local;
      dt::Samples data = dt::make_samples(first, local, mlp.shape());
      std::vector<size_t> marks;
      const bool reverse = f.reverse_ready_on_odd && rank % 2 == 1;
      mlp.train_batch(data.x.data(), data.y.data(), local, 1.0f / static_cast<float>(local * f.micro), grads,
                      [&](size_t i) {
                        if (reverse)
                          marks.push_back(i);
                        else
                          reducer.mark_ready(i);
                      });
      for (auto it = marks.rbegin(); it != marks.rend(); ++it) reducer.mark_ready(*it);
      bool used = false;
      const float g = dt::aux_gradient(s, rank, &used);
      if (f.unused && used && m == 0) {
        for (size_t k = 0; k < aux.size(); ++k) grads[kAux][k] += g;
        reducer.mark_ready(kAux);
      }
      if (static_cast<int>(rank) == f.kill_rank && s == f.kill_step && last) {
        std::printf("rank %zu: killing myself in step %zu with buckets in flight\n", rank, s);
        std::fflush(stdout);
        raise(SIGKILL);
      }
      reducer.finalize();
    }
    float* grads[kAux + 1];
    for (size_t i = 0; i <= kAux; ++i) grads[i] = reducer.grad(i);
    mlp.sgd_step(grads, f.lr);
    for (size_t k = 0; k < aux.size(); ++k) aux[k] -= f.lr * grads[kAux][k];
  }
  std::printf("rank %zu of %zu: %zu steps done; buckets %zu -> %zu, rebuilds=%zu, hook %s\n", rank, world, f.steps,
              initial_buckets, reducer.plan().buckets.size(), reducer.num_rebuilds(), f.hook.c_str());
  if (!f.out.empty()) {
    std::ofstream out(f.out, std::ios::binary);
    for (size_t i = 0; i <= kAux; ++i) {
      const float* data = i == kAux ? aux.data() : mlp.param(i);
      const size_t count = i == kAux ? aux.size() : mlp.param_count(i);
      out.write(reinterpret_cast<const char*>(data), static_cast<std::streamsize>(count * sizeof(float)));
    }
    if (!out) {
      std::fprintf(stderr, "ddp_rank: cannot write %s\n", f.out.c_str());
      return 3;
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  try {
    return run(f);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "ddp_rank: %s [%s]\n", e.what(), braid::to_string(e.code()));
    return 1;
  }
}
