// train_fashion_mnist_torch - the Fashion-MNIST example again, with the model, autograd and
// optimizer from libtorch, and braid's TorchDdp averaging the gradients.
//
//   braidrun --standalone --nproc-per-node 4 train_fashion_mnist_torch --epochs 3 --batch 64 --lr 0.1
//
// Same flags and output format as train_fashion_mnist: a 784-128-10 MLP (torch::nn::Linear,
// ReLU, cross-entropy), a global batch of --batch images split evenly over the ranks through
// DistributedSampler, plain SGD. Adding DDP to the libtorch loop takes the two lines marked
// "DDP" below: every rank starts from rank 0's weights, and after backward every gradient is
// the average over ranks, so all ranks take the step one process would take on the whole
// batch. Without braidrun (no WORLD_SIZE in the environment) it trains alone.
//
// Data: the IDX files of Debian's dataset-fashion-mnist package, in
// /usr/share/datasets/fashion-mnist unless --data says otherwise. When they are missing it
// says so and exits with 77 (meson's "skipped").
#include <braid/braid.h>
#include <braid/ddp.h>
#include <braid/ddp/torch.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "tools/examples/idx_reader.h"
#include "tools/examples/train_setup.h"

namespace {

using braid::examples::Images;

using braid::examples::TrainFlags;

struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t inputs, int64_t hidden, int64_t classes)
      : fc1(register_module("fc1", torch::nn::Linear(inputs, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, classes))) {}
  torch::Tensor forward(const torch::Tensor& x) { return fc2(torch::relu(fc1(x))); }

  torch::nn::Linear fc1;
  torch::nn::Linear fc2;
};
TORCH_MODULE(Mlp);

// A [rows, 784] tensor over the pixels of `img` (no copy) and the matching int64 labels.
torch::Tensor all_pixels(Images& img) {
  return torch::from_blob(
      img.pixels.data(), {static_cast<int64_t>(img.count), static_cast<int64_t>(img.rows * img.cols)}, torch::kFloat32);
}
torch::Tensor all_labels(const std::vector<int32_t>& labels) {
  return torch::tensor(std::vector<int64_t>(labels.begin(), labels.end()), torch::kInt64);
}

// Loss and accuracy over this rank's contiguous share of the test set, summed over all ranks.
void evaluate(braid::Communicator& comm, Mlp& model, const torch::Tensor& x, const torch::Tensor& y, double* loss,
              double* acc) {
  torch::NoGradGuard no_grad;
  const int64_t n = x.size(0);
  const int64_t world = comm.size();
  const int64_t begin = n * comm.rank() / world;
  const int64_t end = n * (comm.rank() + 1) / world;
  double sums[3] = {0, 0, static_cast<double>(end - begin)};
  if (end > begin) {
    const torch::Tensor logits = model->forward(x.slice(0, begin, end));
    const torch::Tensor labels = y.slice(0, begin, end);
    sums[0] = torch::nn::functional::cross_entropy(
                  logits, labels, torch::nn::functional::CrossEntropyFuncOptions().reduction(torch::kSum))
                  .item<double>();
    sums[1] = logits.argmax(1).eq(labels).sum().item<double>();
  }
  comm.all_reduce(sums, 3, braid::DType::f64, braid::Op::sum);
  *loss = sums[0] / sums[2];
  *acc = sums[1] / sums[2];
}

int run(const TrainFlags& flags) {
  if (!flags.checkpoint.empty()) {
    std::fprintf(stderr, "train_fashion_mnist_torch: --checkpoint is train_fashion_mnist's only (use torch.save here)\n");
    return 2;
  }
  braid::examples::DatasetFiles files;
  if (!braid::examples::find_dataset("train_fashion_mnist_torch", flags, &files)) return 77;
  std::unique_ptr<braid::TcpStoreServer> server;
  braid::Communicator comm = braid::examples::make_communicator(server);
  const auto rank = static_cast<size_t>(comm.rank());
  const auto world = static_cast<size_t>(comm.size());
  const size_t local_batch = braid::examples::split_batch("train_fashion_mnist_torch", comm, flags);
  if (local_batch == 0) return 2;

  Images train = braid::examples::read_idx_images(files.train_images);
  const torch::Tensor train_y = all_labels(braid::examples::read_idx_labels(files.train_labels));
  Images test = braid::examples::read_idx_images(files.test_images);
  const torch::Tensor test_y = all_labels(braid::examples::read_idx_labels(files.test_labels));
  const torch::Tensor train_x = all_pixels(train);
  const torch::Tensor test_x = all_pixels(test);
  const size_t n_train = flags.limit ? std::min(flags.limit, train.count) : train.count;
  if (rank == 0) {
    std::printf(
        "fashion-mnist (libtorch): %zu training images (of %zu), %zu test, %zux%zu; %zu ranks x %zu = batch %zu, "
        "lr %g, hook %s\n",
        n_train, train.count, test.count, train.rows, train.cols, world, local_batch, flags.batch, flags.lr,
        flags.hook.c_str());
    std::fflush(stdout);
  }

  torch::manual_seed(flags.seed);
  Mlp model(static_cast<int64_t>(train.rows * train.cols), 128, 10);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(flags.lr));
  // DDP, line 1: rank 0's weights everywhere; autograd reports each gradient to braid.
  braid::ddp::TorchDdp ddp(comm, *model, braid::ddp::ReducerOptions{.hook = braid::examples::make_hook(flags.hook)});

  braid::ddp::DistributedSampler sampler(
      n_train, braid::ddp::SamplerOptions{.num_replicas = world, .rank = rank, .shuffle = true, .seed = flags.seed});
  const std::unique_ptr<braid::examples::TrainProgress> progress = braid::examples::make_progress(comm, flags);
  for (int epoch = 0; epoch < flags.epochs; ++epoch) {
    const auto start = std::chrono::steady_clock::now();
    sampler.set_epoch(static_cast<uint64_t>(epoch));
    const std::vector<size_t> mine = sampler.indices();
    const size_t steps = mine.size() / local_batch;
    const torch::Tensor order = torch::tensor(
        std::vector<int64_t>(mine.begin(), mine.begin() + static_cast<std::ptrdiff_t>(steps * local_batch)),
        torch::kInt64);
    double sums[3] = {0, 0, 0};  // loss, correct, images
    for (size_t s = 0; s < steps; ++s) {
      const torch::Tensor idx =
          order.slice(0, static_cast<int64_t>(s * local_batch), static_cast<int64_t>((s + 1) * local_batch));
      const torch::Tensor x = train_x.index_select(0, idx);
      const torch::Tensor y = train_y.index_select(0, idx);
      optimizer.zero_grad();
      const torch::Tensor logits = model->forward(x);
      const torch::Tensor loss = torch::nn::functional::cross_entropy(logits, y);
      loss.backward();
      ddp.synchronize();  // DDP, line 2: every parameter's grad() is now the average over ranks
      optimizer.step();
      sums[0] += loss.item<double>() * static_cast<double>(local_batch);
      sums[1] += logits.argmax(1).eq(y).sum().item<double>();
      sums[2] += static_cast<double>(local_batch);
      if (progress) progress->step(epoch, s + 1, steps, std::chrono::steady_clock::now());
    }
    double test_loss = 0, test_acc = 0;
    evaluate(comm, model, test_x, test_y, &test_loss, &test_acc);
    braid::examples::finish_epoch(comm, progress.get(), epoch, sums, test_loss, test_acc, steps, start);
  }
  return 0;
}

constexpr const char* kAbout =
    "Trains a 784-128-10 MLP on Fashion-MNIST with libtorch's model, autograd and SGD, and braid's\n"
    "TorchDdp averaging the gradients over the ranks. Start it alone or under braidrun, e.g.\n"
    "  braidrun --standalone --nproc-per-node 4 train_fashion_mnist_torch --epochs 3";

}  // namespace

int main(int argc, char** argv) { return braid::examples::train_main("train_fashion_mnist_torch", kAbout, argc, argv, run); }
