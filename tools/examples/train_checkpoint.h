// tools/examples/train_checkpoint.h - where a training run is, saved after every step so that a
// run started again (braidrun --max-restarts, torchrun's restarts) goes on from there.
//
// The file (written by rank 0 only, whole or not at all: a temporary file renamed over it):
//
//   8 bytes  "BRCKPT01"
//   u64      steps done in all (the tests watch it)
//   u64      epoch, u64 step within it (the next step to run)
//   3 x f64  the epoch's running sums so far: loss * images, correct, images
//   u64      number of parameter tensors, then for each: u64 count | count x f32
//
// All integers and floats in this machine's byte order: a checkpoint is read back by the same
// build on the same kind of machine. On start every rank gets rank 0's copy through a
// broadcast, so only rank 0's host needs the file.
#pragma once

#include <braid/braid.h>

#include <cstdint>
#include <string>

#include "tools/examples/mlp.h"

namespace braid::examples {

struct TrainPosition {
  uint64_t steps_done = 0;
  uint64_t epoch = 0;
  uint64_t step = 0;  // within the epoch
  double sums[3] = {0, 0, 0};
};

// Rank 0: writes `mlp`'s parameters and `pos` to `path`. Throws std::runtime_error on failure.
void save_checkpoint(const std::string& path, const Mlp& mlp, const TrainPosition& pos);

// Collective: rank 0 reads `path` when it exists (a missing file: a fresh start) and every rank
// gets its parameters and position. Returns false for a fresh start (nothing changed). Throws
// std::runtime_error when the file is not a checkpoint of this model.
bool resume_from_checkpoint(Communicator& comm, const std::string& path, Mlp& mlp, TrainPosition& pos);

// FNV-1a over every parameter's bytes: equal for bit-identical models.
uint64_t parameters_digest(const Mlp& mlp);

}  // namespace braid::examples
