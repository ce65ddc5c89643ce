// tools/examples/train_setup.h - what the Fashion-MNIST examples share: their flags, how they
// find the dataset, the communicator they train on, and the DDP hook a flag names.
#pragma once

#include <braid/braid.h>
#include <braid/ddp.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "tools/examples/train_progress.h"

namespace braid::examples {

struct TrainFlags {
  int epochs = 3;
  size_t batch = 64;  // global: split evenly over the ranks
  double lr = 0.1;
  size_t limit = 0;  // 0: every training image
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string hook = "avg";  // avg | f16 | bf16
  uint64_t seed = 1;
  std::string checkpoint;  // empty: none (train_checkpoint.h)
};

// Parses --epochs --batch --lr --limit --data --hook --seed --checkpoint; on a bad flag prints why and the
// usage line (naming `program`) and exits with 2. --help prints `about` (what the program
// does), the flags and the environment it reads; --version prints braid's version and
// features; both exit with 0.
TrainFlags parse_train_flags(const char* program, const char* about, int argc, char** argv);

// The four IDX files under flags.data (train images, train labels, test images, test labels).
struct DatasetFiles {
  std::string train_images, train_labels, test_images, test_labels;
};
// The files, or (when one is missing) a line saying which and how to get it, and false.
bool find_dataset(const char* program, const TrainFlags& flags, DatasetFiles* files);

// From the environment under braidrun or torchrun; a world of one (with a store of its own,
// kept alive in `server`) when the program was started alone.
Communicator make_communicator(std::unique_ptr<TcpStoreServer>& server);

// The images each rank runs per step: --batch split evenly over the ranks. 0 when it does not
// split, after rank 0 said so on stderr (naming `program`).
size_t split_batch(const char* program, const Communicator& comm, const TrainFlags& flags);

// The DDP communication hook --hook names.
std::shared_ptr<ddp::CommHook> make_hook(const std::string& name);

// Progress on stdout for rank 0 (a bar within each epoch when stdout is a terminal); null on
// the other ranks, which print nothing.
std::unique_ptr<TrainProgress> make_progress(const Communicator& comm, const TrainFlags& flags);

// Ends an epoch: sums this rank's {loss * images, correct, images} over all ranks and, on rank
// 0 (`progress` set), prints the epoch line (test loss and accuracy already summed over ranks)
// with the time so far and an estimate of the time left. Collective.
void finish_epoch(Communicator& comm, TrainProgress* progress, int epoch, double train_sums[3], double test_loss,
                  double test_acc, size_t steps, std::chrono::steady_clock::time_point start);

// main() of an example: parses the flags, runs `run`, and turns an exception into one line
// naming the program and exit code 1.
int train_main(const char* program, const char* about, int argc, char** argv, int (*run)(const TrainFlags&));

}  // namespace braid::examples
