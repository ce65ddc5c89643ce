#include "braid/ddp/distributed_sampler.h"

#include <numeric>
#include <string>

#include "braid/error.h"

namespace braid::ddp {
namespace {

// splitmix64: a tiny, well-mixed generator whose sequence is fixed by its definition.
uint64_t next_random(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Uniform in [0, bound) without modulo bias: reject the draws of the incomplete last range.
uint64_t uniform_below(uint64_t& state, uint64_t bound) {
  const uint64_t limit = UINT64_MAX - UINT64_MAX % bound;
  uint64_t x;
  do {
    x = next_random(state);
  } while (x >= limit);
  return x % bound;
}

}  // namespace

std::vector<size_t> seeded_permutation(size_t n, uint64_t seed) {
  std::vector<size_t> p(n);
  std::iota(p.begin(), p.end(), size_t{0});
  uint64_t state = seed;
  for (size_t i = n; i > 1; --i) {  // Fisher-Yates, from the back
    const size_t j = uniform_below(state, i);
    std::swap(p[i - 1], p[j]);
  }
  return p;
}

DistributedSampler::DistributedSampler(size_t dataset_size, SamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  if (options_.num_replicas == 0 || options_.rank >= options_.num_replicas) {
    throw Error(ErrorCode::invalid_argument,
                "DistributedSampler: rank " + std::to_string(options_.rank) +
                    " is not in [0, num_replicas=" + std::to_string(options_.num_replicas) + ")");
  }
  const size_t n = options_.num_replicas;
  // drop_last keeps only whole rounds; otherwise the last round is completed by wrapping.
  num_samples_ = options_.drop_last ? dataset_size_ / n : (dataset_size_ + n - 1) / n;
}

std::vector<size_t> DistributedSampler::indices() const {
  std::vector<size_t> global;
  if (options_.shuffle) {
    global = seeded_permutation(dataset_size_, options_.seed + epoch_);
  } else {
    global.resize(dataset_size_);
    std::iota(global.begin(), global.end(), size_t{0});
  }
  const size_t total = total_size();
  if (global.size() < total) {
    // Wrap around as many times as needed (a tiny dataset may be shorter than the padding).
    const size_t original = global.size();
    for (size_t i = 0; global.size() < total; ++i) global.push_back(global[i % original]);
  }
  global.resize(total);

  std::vector<size_t> mine;
  mine.reserve(num_samples_);
  for (size_t i = options_.rank; i < total; i += options_.num_replicas) mine.push_back(global[i]);
  return mine;
}

}  // namespace braid::ddp
