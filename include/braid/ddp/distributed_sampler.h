// braid/ddp/distributed_sampler.h - each rank's share of a dataset, like torch's DistributedSampler.
//
// Every rank builds the same global index list (shuffled with seed + epoch when asked), pads it
// by wrapping around to a multiple of the number of replicas (or drops the tail with
// drop_last), and takes every num_replicas-th index starting at its rank. Shards are disjoint
// apart from the wrapped padding, equally long, and identical on every rank for the same
// (seed, epoch): no communication is needed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace braid::ddp {

struct SamplerOptions {
  size_t num_replicas = 1;  // usually comm.size()
  size_t rank = 0;          // usually comm.rank()
  bool shuffle = true;
  uint64_t seed = 0;       // must be the same on every rank
  bool drop_last = false;  // drop the tail instead of padding it with wrapped-around indices
};

class DistributedSampler {
 public:
  // Throws braid::Error(invalid_argument) when num_replicas is 0 or rank >= num_replicas.
  DistributedSampler(size_t dataset_size, SamplerOptions options);

  // A new epoch reshuffles (deterministically: the permutation depends on seed + epoch only).
  void set_epoch(uint64_t epoch) { epoch_ = epoch; }
  uint64_t epoch() const { return epoch_; }

  // This rank's indices for the current epoch, num_samples() of them.
  std::vector<size_t> indices() const;
  size_t num_samples() const { return num_samples_; }
  // num_samples() * num_replicas: the padded (or truncated) global length.
  size_t total_size() const { return num_samples_ * options_.num_replicas; }

 private:
  size_t dataset_size_;
  SamplerOptions options_;
  uint64_t epoch_ = 0;
  size_t num_samples_ = 0;
};

// A permutation of 0..n-1 that depends only on n and seed (the same on every platform, unlike
// std::shuffle whose algorithm the standard leaves open).
std::vector<size_t> seeded_permutation(size_t n, uint64_t seed);

}  // namespace braid::ddp
