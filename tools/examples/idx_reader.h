// tools/examples/idx_reader.h - MNIST-style IDX files (optionally gzipped), as Fashion-MNIST
// ships them: a big-endian header (magic 0x00000803 for u8 images, 0x00000801 for u8 labels,
// then one u32 per dimension) followed by the raw bytes.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace braid::examples {

struct Images {
  size_t count = 0;
  size_t rows = 0;
  size_t cols = 0;
  std::vector<float> pixels;  // count * rows * cols, scaled to [0, 1]
};

// Throw std::runtime_error naming the file and what is wrong with it.
Images read_idx_images(const std::string& path);
std::vector<int32_t> read_idx_labels(const std::string& path);

}  // namespace braid::examples
