#include "tools/examples/train_setup.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "common/version.h"

namespace braid::examples {
namespace {

constexpr const char* kUsage =
    "usage: %s [--epochs N] [--batch GLOBAL_BATCH] [--lr LR] [--limit N_IMAGES]\n"
    "       [--data DIR] [--hook avg|f16|bf16] [--seed S] [--checkpoint PATH]\n";

[[noreturn]] void usage(const char* program, const std::string& why) {
  std::fprintf(stderr, "%s: %s\n", program, why.c_str());
  std::fprintf(stderr, kUsage, program);
  std::exit(2);
}

[[noreturn]] void help(const char* program, const char* about) {
  std::printf(kUsage, program);
  std::printf(
      "\n%s\n\n"
      "  --epochs N         passes over the training images. Default 3\n"
      "  --batch N          global batch, split evenly over the ranks. Default 64\n"
      "  --lr LR            SGD learning rate. Default 0.1\n"
      "  --limit N          train on the first N images only (0: all). Default 0\n"
      "  --data DIR         the Fashion-MNIST IDX files (apt-get install dataset-fashion-mnist).\n"
      "                     Default /usr/share/datasets/fashion-mnist\n"
      "  --hook avg|f16|bf16  how gradients travel: as they are, or compressed to 16 bits. Default avg\n"
      "  --seed S           weights and shuffling. Default 1\n"
      "  --checkpoint PATH  rank 0 saves the run there after every step; started again (braidrun\n"
      "                     --max-restarts), the run goes on from it. Default: none\n"
      "  --version          braid's version and the features built in\n"
      "  -h, --help         this text\n\n"
      "Run alone it trains as one rank; under braidrun or torchrun it reads RANK, WORLD_SIZE,\n"
      "LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT, and braid reads its BRAID_*\n"
      "variables (BRAID_TRANSPORT, BRAID_TIMEOUT_S, BRAID_DEBUG, ...; see docs/configuration.md).\n"
      "Rank 0 prints one line per epoch with the time so far and an estimate of the time left,\n"
      "and a progress bar within the epoch when its output is a terminal. Exit status 77: the\n"
      "dataset is missing.\n",
      about);
  std::exit(0);
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

TrainFlags parse_train_flags(const char* program, const char* about, int argc, char** argv) {
  TrainFlags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "-h" || a == "--help") help(program, about);
    if (a == "--version") {
      std::fputs(version_text(program).c_str(), stdout);
      std::exit(0);
    }
    if (i + 1 >= argc) usage(program, "missing value after " + a);
    const char* v = argv[++i];
    char* end = nullptr;
    if (a == "--epochs")
      f.epochs = static_cast<int>(std::strtol(v, &end, 10));
    else if (a == "--batch")
      f.batch = std::strtoull(v, &end, 10);
    else if (a == "--lr")
      f.lr = std::strtod(v, &end);
    else if (a == "--limit")
      f.limit = std::strtoull(v, &end, 10);
    else if (a == "--seed")
      f.seed = std::strtoull(v, &end, 10);
    else if (a == "--data")
      f.data = v;
    else if (a == "--hook")
      f.hook = v;
    else if (a == "--checkpoint")
      f.checkpoint = v;
    else
      usage(program, "unknown flag " + a);
    if (end && *end) usage(program, "bad value '" + std::string(v) + "' for " + a);
  }
  if (f.epochs < 0 || f.batch == 0 || !(f.lr > 0)) usage(program, "--epochs must be >= 0, --batch and --lr > 0");
  if (f.hook != "avg" && f.hook != "f16" && f.hook != "bf16") usage(program, "unknown --hook " + f.hook);
  return f;
}

bool find_dataset(const char* program, const TrainFlags& flags, DatasetFiles* files) {
  const std::string& dir = flags.data;
  *files = {dir + "/train-images-idx3-ubyte.gz", dir + "/train-labels-idx1-ubyte.gz",
            dir + "/t10k-images-idx3-ubyte.gz", dir + "/t10k-labels-idx1-ubyte.gz"};
  for (const std::string* f : {&files->train_images, &files->train_labels, &files->test_images, &files->test_labels}) {
    if (!exists(*f)) {
      std::printf("%s: skipped: %s not found (apt-get install dataset-fashion-mnist, or --data DIR)\n", program,
                  f->c_str());
      return false;
    }
  }
  return true;
}

Communicator make_communicator(std::unique_ptr<TcpStoreServer>& server) {
  if (std::getenv("WORLD_SIZE")) return Communicator::from_env();
  server = TcpStoreServer::start("127.0.0.1", 0);
  std::shared_ptr<Store> store = TcpStore::connect("127.0.0.1", server->port());
  return Communicator::from_store(store, 0, 1);
}

size_t split_batch(const char* program, const Communicator& comm, const TrainFlags& flags) {
  const auto world = static_cast<size_t>(comm.size());
  if (flags.batch % world == 0) return flags.batch / world;
  if (comm.rank() == 0)
    std::fprintf(stderr, "%s: --batch %zu does not split over %zu ranks\n", program, flags.batch, world);
  return 0;
}

std::shared_ptr<ddp::CommHook> make_hook(const std::string& name) {
  if (name == "f16") return ddp::compress_hook(DType::f16);
  if (name == "bf16") return ddp::compress_hook(DType::bf16);
  return ddp::average_hook();
}

std::unique_ptr<TrainProgress> make_progress(const Communicator& comm, const TrainFlags& flags) {
  if (comm.rank() != 0) return nullptr;
  return std::make_unique<TrainProgress>(stdout, ::isatty(STDOUT_FILENO) == 1, flags.epochs,
                                         TrainProgress::Clock::now());
}

void finish_epoch(Communicator& comm, TrainProgress* progress, int epoch, double train_sums[3], double test_loss,
                  double test_acc, size_t steps, std::chrono::steady_clock::time_point start) {
  comm.all_reduce(train_sums, 3, DType::f64, Op::sum);
  const auto now = TrainProgress::Clock::now();
  if (!progress) return;
  const double n = train_sums[2];
  char results[160];
  std::snprintf(results, sizeof results, "train loss %.4f acc %.2f%% | test loss %.4f acc %.2f%% | %zu steps, %.1f s",
                n ? train_sums[0] / n : 0.0, n ? 100 * train_sums[1] / n : 0.0, test_loss, 100 * test_acc, steps,
                std::chrono::duration<double>(now - start).count());
  progress->end_epoch(epoch, results, now);
}

int train_main(const char* program, const char* about, int argc, char** argv, int (*run)(const TrainFlags&)) {
  const TrainFlags flags = parse_train_flags(program, about, argc, argv);
  try {
    return run(flags);
  } catch (const Error& e) {
    std::fprintf(stderr, "%s: %s (%s)\n", program, e.what(), to_string(e.code()));
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace braid::examples
