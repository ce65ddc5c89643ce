#include "tools/examples/train_setup.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <exception>

namespace braid::examples {
namespace {

[[noreturn]] void usage(const char* program, const std::string& why) {
  std::fprintf(stderr,
               "%s: %s\n"
               "usage: %s [--epochs N] [--batch GLOBAL_BATCH] [--lr LR] [--limit N_IMAGES]\n"
               "       [--data DIR] [--hook avg|f16|bf16] [--seed S]\n",
               program, why.c_str(), program);
  std::exit(2);
}

bool exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

}  // namespace

TrainFlags parse_train_flags(const char* program, int argc, char** argv) {
  TrainFlags f;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
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

std::shared_ptr<ddp::CommHook> make_hook(const std::string& name) {
  if (name == "f16") return ddp::compress_hook(DType::f16);
  if (name == "bf16") return ddp::compress_hook(DType::bf16);
  return ddp::average_hook();
}

void finish_epoch(Communicator& comm, const TrainFlags& flags, int epoch, double train_sums[3], double test_loss,
                  double test_acc, size_t steps, std::chrono::steady_clock::time_point start) {
  comm.all_reduce(train_sums, 3, DType::f64, Op::sum);
  const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (comm.rank() != 0) return;
  const double n = train_sums[2];
  std::printf("epoch %d/%d: train loss %.4f acc %.2f%% | test loss %.4f acc %.2f%% | %zu steps, %.1f s\n", epoch + 1,
              flags.epochs, n ? train_sums[0] / n : 0.0, n ? 100 * train_sums[1] / n : 0.0, test_loss, 100 * test_acc,
              steps, secs);
  std::fflush(stdout);
}

int train_main(const char* program, int argc, char** argv, int (*run)(const TrainFlags&)) {
  const TrainFlags flags = parse_train_flags(program, argc, argv);
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
