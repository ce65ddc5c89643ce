// train_fashion_mnist - data-parallel training of a 784-128-10 MLP on Fashion-MNIST with braid.
//
//   braidrun --standalone --nproc-per-node 4 train_fashion_mnist --epochs 3 --batch 64 --lr 0.1
//
// Every rank holds the whole model. A global batch of --batch images is split evenly: each rank
// takes its DistributedSampler shard of the epoch and runs --batch / world_size images per step;
// the Reducer averages the gradients (bucketed, overlapped with the backward pass), so all
// ranks take the same SGD step, the one a single process would take on the whole batch.
// Without braidrun (no WORLD_SIZE in the environment) it trains alone. With --checkpoint PATH,
// rank 0 saves the run after every step and a run started again (braidrun --max-restarts N)
// goes on from there, to the parameters an uninterrupted run ends with.
//
// Data: the IDX files of Debian's dataset-fashion-mnist package (apt-get install
// dataset-fashion-mnist), in /usr/share/datasets/fashion-mnist unless --data says otherwise.
// When they are missing it says so and exits with 77 (meson's "skipped").
#include <braid/braid.h>
#include <braid/ddp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/examples/idx_reader.h"
#include "tools/examples/train_checkpoint.h"
#include "tools/examples/train_setup.h"
#include "tools/examples/mlp.h"

namespace {

using braid::examples::Images;
using braid::examples::Mlp;
using braid::examples::TrainFlags;

// Loss and accuracy over this rank's stride of the test set, summed over all ranks.
void evaluate(braid::Communicator& comm, const Mlp& mlp, const Images& img, const std::vector<int32_t>& labels,
              double* loss, double* acc) {
  const size_t d = img.rows * img.cols;
  double sums[3] = {0, 0, 0};
  for (size_t i = static_cast<size_t>(comm.rank()); i < img.count; i += static_cast<size_t>(comm.size())) {
    auto s = mlp.evaluate(img.pixels.data() + i * d, &labels[i], 1);
    sums[0] += s.loss_sum;
    sums[1] += static_cast<double>(s.correct);
    sums[2] += 1;
  }
  comm.all_reduce(sums, 3, braid::DType::f64, braid::Op::sum);
  *loss = sums[0] / sums[2];
  *acc = sums[1] / sums[2];
}

int run(const TrainFlags& flags) {
  braid::examples::DatasetFiles files;
  if (!braid::examples::find_dataset("train_fashion_mnist", flags, &files)) return 77;
  std::unique_ptr<braid::TcpStoreServer> server;
  braid::Communicator comm = braid::examples::make_communicator(server);
  const auto rank = static_cast<size_t>(comm.rank());
  const auto world = static_cast<size_t>(comm.size());
  const size_t local_batch = braid::examples::split_batch("train_fashion_mnist", comm, flags);
  if (local_batch == 0) return 2;

  Images train = braid::examples::read_idx_images(files.train_images);
  std::vector<int32_t> train_labels = braid::examples::read_idx_labels(files.train_labels);
  Images test = braid::examples::read_idx_images(files.test_images);
  std::vector<int32_t> test_labels = braid::examples::read_idx_labels(files.test_labels);
  const size_t d = train.rows * train.cols;
  const size_t n_train = flags.limit ? std::min(flags.limit, train.count) : train.count;
  if (rank == 0) {
    std::printf(
        "fashion-mnist: %zu training images (of %zu), %zu test, %zux%zu; %zu ranks x %zu = batch %zu, lr %g, hook %s\n",
        n_train, train.count, test.count, train.rows, train.cols, world, local_batch, flags.batch,
        static_cast<double>(flags.lr), flags.hook.c_str());
    std::fflush(stdout);
  }

  Mlp mlp(braid::examples::MlpShape{.inputs = d, .hidden = 128, .classes = 10}, flags.seed);
  std::vector<braid::ddp::Parameter> params;
  for (size_t i = 0; i < Mlp::kNumParams; ++i) params.push_back({mlp.param(i), nullptr, mlp.param_count(i)});
  braid::ddp::Reducer reducer(comm, params, braid::ddp::ReducerOptions{.hook = braid::examples::make_hook(flags.hook)});

  braid::ddp::DistributedSampler sampler(
      n_train, braid::ddp::SamplerOptions{.num_replicas = world, .rank = rank, .shuffle = true, .seed = flags.seed});
  std::vector<float> x(local_batch * d);
  std::vector<int32_t> y(local_batch);
  const std::unique_ptr<braid::examples::TrainProgress> progress = braid::examples::make_progress(comm, flags);
  // With --checkpoint, a run started again (braidrun --max-restarts) goes on from the last step
  // rank 0 saved: the parameters, the epoch and step, and the epoch's sums so far (summed over
  // the ranks, held by rank 0 after a resume). The sampler's order depends only on the epoch.
  braid::examples::TrainPosition pos;
  if (!flags.checkpoint.empty() && braid::examples::resume_from_checkpoint(comm, flags.checkpoint, mlp, pos) && rank == 0) {
    std::printf("resuming from %s: epoch %llu, step %llu\n", flags.checkpoint.c_str(),
                static_cast<unsigned long long>(pos.epoch), static_cast<unsigned long long>(pos.step));
    std::fflush(stdout);
  }
  for (int epoch = static_cast<int>(pos.epoch); epoch < flags.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    sampler.set_epoch(static_cast<uint64_t>(epoch));
    const std::vector<size_t> mine = sampler.indices();
    const size_t steps = mine.size() / local_batch;
    double sums[3] = {0, 0, 0};  // loss, correct, images
    const size_t first = static_cast<uint64_t>(epoch) == pos.epoch ? pos.step : 0;
    if (first > 0 && rank == 0) std::copy(pos.sums, pos.sums + 3, sums);
    for (size_t s = first; s < steps; ++s) {
      for (size_t j = 0; j < local_batch; ++j) {
        const size_t idx = mine[s * local_batch + j];
        std::memcpy(&x[j * d], &train.pixels[idx * d], d * sizeof(float));
        y[j] = train_labels[idx];
      }
      reducer.zero_grad();
      float* grads[Mlp::kNumParams];
      for (size_t i = 0; i < Mlp::kNumParams; ++i) grads[i] = reducer.grad(i);
      auto stats = mlp.train_batch(x.data(), y.data(), local_batch, 1.0f / static_cast<float>(local_batch), grads,
                                   [&](size_t i) { reducer.mark_ready(i); });
      reducer.finalize();
      for (size_t i = 0; i < Mlp::kNumParams; ++i) grads[i] = reducer.grad(i);  // a rebuild may move them
      mlp.sgd_step(grads, flags.lr);
      sums[0] += stats.loss_sum;
      sums[1] += static_cast<double>(stats.correct);
      sums[2] += static_cast<double>(local_batch);
      if (progress) progress->step(epoch, s + 1, steps, std::chrono::steady_clock::now());
      if (!flags.checkpoint.empty()) {
        pos.steps_done += 1;
        pos.epoch = static_cast<uint64_t>(epoch) + (s + 1 == steps ? 1 : 0);
        pos.step = s + 1 == steps ? 0 : s + 1;
        std::copy(sums, sums + 3, pos.sums);
        comm.all_reduce(pos.sums, 3, braid::DType::f64, braid::Op::sum);
        if (pos.step == 0) std::fill(pos.sums, pos.sums + 3, 0.0);
        if (rank == 0) braid::examples::save_checkpoint(flags.checkpoint, mlp, pos);
      }
    }
    double test_loss = 0, test_acc = 0;
    evaluate(comm, mlp, test, test_labels, &test_loss, &test_acc);
    braid::examples::finish_epoch(comm, progress.get(), epoch, sums, test_loss, test_acc, steps, start);
  }
  if (!flags.checkpoint.empty() && rank == 0) {
    std::printf("parameters fnv1a64 %016llx\n",
                static_cast<unsigned long long>(braid::examples::parameters_digest(mlp)));
  }
  return 0;
}

constexpr const char* kAbout =
    "Trains a 784-128-10 MLP on Fashion-MNIST with data-parallel SGD: every rank holds the whole\n"
    "model, braid's DDP Reducer averages the gradients. Start it alone or under braidrun, e.g.\n"
    "  braidrun --standalone --nproc-per-node 4 train_fashion_mnist --epochs 3";

}  // namespace

int main(int argc, char** argv) { return braid::examples::train_main("train_fashion_mnist", kAbout, argc, argv, run); }
