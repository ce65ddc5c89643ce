// A rank process for the TorchDdp tests: trains a tiny libtorch model on synthetic data and
// writes its final parameters and buffers to --out. With --reference it is the yardstick
// instead: one process, no communicator, no adapter, plain libtorch on the whole batch.
// Otherwise it meets the other ranks through the environment (MASTER_ADDR, MASTER_PORT, RANK,
// WORLD_SIZE) and trains its share under braid::ddp::TorchDdp.
//
// Optimizer step s, micro-step m (of --micro) covers global samples [(s*micro + m) * batch,
// +batch); rank r trains on its batch/world slice of it. Every micro-step but the last runs
// under no_sync. The model is built so that every feature of the adapter matters to the
// result: see TinyNet.
#include <braid/braid.h>
#include <braid/ddp.h>
#include <braid/ddp/torch.h>
#include <torch/torch.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tests/support/rank_flags.h"

namespace {

constexpr int64_t kInputs = 6;
constexpr int64_t kHidden = 10;
constexpr int64_t kClasses = 4;
constexpr uint64_t kSeed = 7;

struct Flags {
  size_t steps = 6;
  size_t batch = 12;
  size_t micro = 1;
  double lr = 0.3;
  double momentum = 0.5;
  size_t bucket_bytes = 0;  // 0: the Reducer's defaults
  std::string hook = "avg";
  std::string zero = "zero";  // how gradients are cleared each step: zero (in place) or none
  std::string out;
  bool reference = false;
  bool skip_synchronize = false;      // misuse: a second backward without synchronize() in between
  bool extra_param_on_rank1 = false;  // misuse: rank 1 builds a different model
};

Flags parse(int argc, char** argv) {
  Flags f;
  braid::testing::RankFlags("torch_ddp_rank")
      .value("--steps", &f.steps)
      .value("--batch", &f.batch)
      .value("--micro", &f.micro)
      .value("--lr", &f.lr)
      .value("--momentum", &f.momentum)
      .value("--bucket-bytes", &f.bucket_bytes)
      .value("--hook", &f.hook)
      .value("--zero", &f.zero)
      .value("--out", &f.out)
      .toggle("--reference", &f.reference)
      .toggle("--skip-synchronize", &f.skip_synchronize)
      .toggle("--extra-param-on-rank1", &f.extra_param_on_rank1)
      .parse(argc, argv);
  return f;
}

// Linear -> * frozen -> tanh -> Linear -> * scale, plus `side` on flagged samples only.
// - fc1, fc2: ordinary trainable layers.
// - side: trainable, reached only through samples whose index is a multiple of 7, so a rank
//   whose slice has none of them produces no gradient for it in that backward pass.
// - never: trainable and never reached: no rank ever has a gradient for it.
// - frozen (a parameter without requires_grad) and scale (a buffer): broadcast from rank 0,
//   not reduced; every rank but 0 starts with other values, and ranks other than 0 let
//   `scale` drift each step, which broadcast_buffers() must undo.
// - steps (an int64 buffer): rides along, to check that non-f32 state is carried.
struct TinyNetImpl : torch::nn::Module {
  TinyNetImpl(size_t rank, bool extra) {
    torch::manual_seed(kSeed + rank);  // every rank but 0 starts elsewhere: the broadcast must fix it
    fc1 = register_module("fc1", torch::nn::Linear(kInputs, kHidden));
    fc2 = register_module("fc2", torch::nn::Linear(kHidden, kClasses));
    side = register_parameter("side", torch::randn({kClasses}));
    never = register_parameter("never", torch::randn({3}));
    if (extra) register_parameter("extra", torch::zeros({5}));
    frozen = register_parameter("frozen", torch::linspace(0.5, 1.5, kHidden) + static_cast<double>(rank),
                                /*requires_grad=*/false);
    scale = register_buffer("scale", torch::full({1}, 1.25 + static_cast<double>(rank), torch::kFloat64));
    steps = register_buffer("steps", torch::zeros({1}, torch::kInt64));
  }

  torch::Tensor forward(const torch::Tensor& x, const torch::Tensor& flagged) {
    torch::Tensor out = fc2(torch::tanh(fc1(x) * frozen)) * scale.to(torch::kFloat32);
    // Only a batch with flagged samples puts `side` into the graph at all.
    if (flagged.any().item<bool>()) out = out + flagged.unsqueeze(1) * side;
    return out;
  }

  torch::nn::Linear fc1{nullptr};
  torch::nn::Linear fc2{nullptr};
  torch::Tensor side, never, frozen, scale, steps;
};
TORCH_MODULE(TinyNet);

struct Batch {
  torch::Tensor x, y, flagged;
};

// Samples [first, first + n): the same numbers in every process.
Batch make_batch(size_t first, size_t n) {
  std::vector<float> x(n * kInputs), flagged(n);
  std::vector<int64_t> y(n);
  for (size_t j = 0; j < n; ++j) {
    const double g = static_cast<double>(first + j);
    for (int64_t k = 0; k < kInputs; ++k) {
      const double kd = static_cast<double>(k);
      x[j * kInputs + static_cast<size_t>(k)] = static_cast<float>(std::sin(0.37 * g + 1.3 * kd + 0.1 * kd * kd));
    }
    y[j] = static_cast<int64_t>((first + j) * 5 % kClasses);
    flagged[j] = (first + j) % 7 == 0 ? 1.0f : 0.0f;
  }
  const auto nn = static_cast<int64_t>(n);
  return Batch{torch::tensor(x).reshape({nn, kInputs}), torch::tensor(y), torch::tensor(flagged)};
}

std::shared_ptr<braid::ddp::CommHook> hook_named(const std::string& name) {
  if (name == "f16") return braid::ddp::compress_hook(braid::DType::f16);
  return braid::ddp::average_hook();
}

[[noreturn]] void die(const std::string& why, int code) {
  std::fprintf(stderr, "torch_ddp_rank: %s\n", why.c_str());
  std::fflush(stderr);
  std::exit(code);
}

int write_state(const std::string& path, TinyNet& model) {
  std::ofstream out(path, std::ios::binary);
  auto put = [&](const torch::Tensor& t) {
    const torch::Tensor f = t.detach().to(torch::kFloat32).contiguous();
    out.write(reinterpret_cast<const char*>(f.data_ptr<float>()), static_cast<std::streamsize>(f.numel() * 4));
  };
  for (const auto& p : model->named_parameters()) put(p.value());
  for (const auto& b : model->named_buffers()) put(b.value());
  if (!out) {
    std::fprintf(stderr, "torch_ddp_rank: cannot write %s\n", path.c_str());
    return 3;
  }
  return 0;
}

// One process, the whole batch, nothing but libtorch.
int reference(const Flags& f) {
  TinyNet model(0, false);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(f.lr).momentum(f.momentum));
  for (size_t s = 0; s < f.steps; ++s) {
    optimizer.zero_grad();
    model->steps += 1;
    for (size_t m = 0; m < f.micro; ++m) {
      const Batch b = make_batch((s * f.micro + m) * f.batch, f.batch);
      const torch::Tensor loss =
          torch::nn::functional::cross_entropy(model->forward(b.x, b.flagged), b.y) / static_cast<double>(f.micro);
      loss.backward();
    }
    optimizer.step();
  }
  return f.out.empty() ? 0 : write_state(f.out, model);
}

int train(const Flags& f, braid::Communicator& comm) {
  const auto rank = static_cast<size_t>(comm.rank());
  const auto world = static_cast<size_t>(comm.size());
  if (f.batch % world != 0) die("--batch must split evenly over the ranks", 2);
  const size_t local = f.batch / world;

  TinyNet model(rank, f.extra_param_on_rank1 && rank == 1);
  braid::ddp::ReducerOptions options{.hook = hook_named(f.hook)};
  if (f.bucket_bytes) options.buckets = {.first_bucket_bytes = f.bucket_bytes, .bucket_bytes = f.bucket_bytes};
  braid::ddp::TorchDdp ddp(comm, *model, options);
  // The optimizer is made after the adapter only for variety: it holds the parameter tensors,
  // whose memory the adapter never replaces, so either order works.
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(f.lr).momentum(f.momentum));
  const size_t initial_buckets = ddp.reducer().plan().buckets.size();
  size_t side_reached = 0, backward_passes = 0;

  for (size_t s = 0; s < f.steps; ++s) {
    if (f.zero == "none")
      model->zero_grad(/*set_to_none=*/true);
    else
      optimizer.zero_grad();
    // Non-zero ranks let the buffer drift; broadcast_buffers() must bring rank 0's back.
    if (rank != 0) model->scale.add_(0.01 * static_cast<double>(rank));
    ddp.broadcast_buffers();
    model->steps += 1;
    for (size_t m = 0; m < f.micro; ++m) {
      const Batch b = make_batch((s * f.micro + m) * f.batch + rank * local, local);
      const torch::Tensor loss =
          torch::nn::functional::cross_entropy(model->forward(b.x, b.flagged), b.y) / static_cast<double>(f.micro);
      {
        // The scope covers backward only: the step keeps no_sync, which its first gradient saw.
        std::optional<braid::ddp::TorchDdp::NoSyncScope> no_sync;
        if (m + 1 < f.micro) no_sync.emplace(ddp);
        loss.backward();
      }
      // The hooks must have reported every gradient backward reached, before synchronize().
      const bool side_used = b.flagged.any().item<bool>();
      const size_t want = 4 + (side_used ? 1 : 0);
      if (ddp.gradients_ready() != want) {
        die("rank " + std::to_string(rank) + " step " + std::to_string(s) + ": " +
                std::to_string(ddp.gradients_ready()) + " gradients reported during backward, want " +
                std::to_string(want),
            5);
      }
      side_reached += side_used ? 1 : 0;
      ++backward_passes;
      if (f.skip_synchronize && s == 1) continue;
      // Under no_sync, synchronize() must leave this rank's own accumulated gradients alone
      // (averaging them with other ranks' different data would change them); an undefined
      // gradient becomes zero.
      const bool accumulating = m + 1 < f.micro;
      const std::vector<torch::Tensor> params = model->parameters();
      std::vector<torch::Tensor> local;
      if (accumulating) {
        for (const torch::Tensor& p : params) local.push_back(p.grad().defined() ? p.grad().clone() : p.grad());
      }
      ddp.synchronize();
      for (size_t k = 0; k < local.size(); ++k) {
        const torch::Tensor& p = params[k];
        if (!p.requires_grad()) continue;
        const torch::Tensor want = local[k].defined() ? local[k] : torch::zeros_like(p);
        if (!p.grad().defined() || !torch::equal(p.grad(), want)) {
          die("rank " + std::to_string(rank) + " step " + std::to_string(s) + " micro-step " + std::to_string(m) +
                  ": a no_sync synchronize() changed the local gradients",
              6);
        }
      }
    }
    optimizer.step();
  }
  std::printf(
      "rank %zu of %zu: %zu steps done; %zu trainable parameters; buckets %zu -> %zu, rebuilds=%zu; "
      "side reached in %zu of %zu backward passes\n",
      rank, world, f.steps, ddp.num_parameters(), initial_buckets, ddp.reducer().plan().buckets.size(),
      ddp.reducer().num_rebuilds(), side_reached, backward_passes);
  std::fflush(stdout);
  return f.out.empty() ? 0 : write_state(f.out, model);
}

int run(const Flags& f) {
  if (f.reference) return reference(f);
  braid::Communicator comm = braid::Communicator::from_env();
  // Errors are reported while the communicator still exists: its destructor may wait (bounded)
  // for the other ranks, and the message should not wait with it.
  try {
    return train(f, comm);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "torch_ddp_rank: %s [%s]\n", e.what(), braid::to_string(e.code()));
    std::fflush(stderr);
    return 1;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const Flags f = parse(argc, argv);
  try {
    return run(f);
  } catch (const braid::Error& e) {
    std::fprintf(stderr, "torch_ddp_rank: %s [%s]\n", e.what(), braid::to_string(e.code()));
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "torch_ddp_rank: %s\n", e.what());
    return 1;
  }
}
