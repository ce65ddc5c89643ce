// tools/examples/train_setup.h - what the Fashion-MNIST examples share: their flags, how they
// find the dataset, the communicator they train on, and the DDP hook a flag names.
#pragma once

#include <braid/braid.h>
#include <braid/ddp.h>

#include <cstdint>
#include <memory>
#include <string>

namespace braid::examples {

struct TrainFlags {
  int epochs = 3;
  size_t batch = 64;  // global: split evenly over the ranks
  double lr = 0.1;
  size_t limit = 0;  // 0: every training image
  std::string data = "/usr/share/datasets/fashion-mnist";
  std::string hook = "avg";  // avg | f16 | bf16
  uint64_t seed = 1;
};

// Parses --epochs --batch --lr --limit --data --hook --seed; on a bad flag prints why and the
// usage line (naming `program`) and exits with 2.
TrainFlags parse_train_flags(const char* program, int argc, char** argv);

// The four IDX files under flags.data (train images, train labels, test images, test labels).
struct DatasetFiles {
  std::string train_images, train_labels, test_images, test_labels;
};
// The files, or (when one is missing) a line saying which and how to get it, and false.
bool find_dataset(const char* program, const TrainFlags& flags, DatasetFiles* files);

// From the environment under braidrun or torchrun; a world of one (with a store of its own,
// kept alive in `server`) when the program was started alone.
Communicator make_communicator(std::unique_ptr<TcpStoreServer>& server);

// The DDP communication hook --hook names.
std::shared_ptr<ddp::CommHook> make_hook(const std::string& name);

}  // namespace braid::examples
