#include "tools/examples/idx_reader.h"

#include <zlib.h>

#include <memory>
#include <stdexcept>

namespace braid::examples {
namespace {

// gzread reads plain files too, so the same code handles .gz and uncompressed IDX.
class GzFile {
 public:
  explicit GzFile(const std::string& path) : path_(path), f_(gzopen(path.c_str(), "rb")) {
    if (!f_) throw std::runtime_error(path + ": cannot open");
  }
  ~GzFile() { gzclose(f_); }
  GzFile(const GzFile&) = delete;
  GzFile& operator=(const GzFile&) = delete;

  void read(void* buf, size_t n) {
    auto* out = static_cast<unsigned char*>(buf);
    while (n > 0) {
      const unsigned chunk = n > (1u << 30) ? (1u << 30) : static_cast<unsigned>(n);
      const int got = gzread(f_, out, chunk);
      if (got <= 0)
        throw std::runtime_error(path_ + ": truncated or corrupt (gzread returned " + std::to_string(got) + ")");
      out += got;
      n -= static_cast<size_t>(got);
    }
  }
  uint32_t read_be32() {
    unsigned char b[4];
    read(b, 4);
    return (uint32_t{b[0]} << 24) | (uint32_t{b[1]} << 16) | (uint32_t{b[2]} << 8) | b[3];
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  gzFile f_;
};

void expect_magic(GzFile& f, uint32_t want) {
  const uint32_t magic = f.read_be32();
  if (magic != want) {
    throw std::runtime_error(f.path() + ": IDX magic " + std::to_string(magic) + ", expected " + std::to_string(want));
  }
}

}  // namespace

Images read_idx_images(const std::string& path) {
  GzFile f(path);
  expect_magic(f, 0x00000803);
  Images img;
  img.count = f.read_be32();
  img.rows = f.read_be32();
  img.cols = f.read_be32();
  std::vector<unsigned char> raw(img.count * img.rows * img.cols);
  f.read(raw.data(), raw.size());
  img.pixels.resize(raw.size());
  for (size_t i = 0; i < raw.size(); ++i) img.pixels[i] = static_cast<float>(raw[i]) * (1.0f / 255.0f);
  return img;
}

std::vector<int32_t> read_idx_labels(const std::string& path) {
  GzFile f(path);
  expect_magic(f, 0x00000801);
  std::vector<unsigned char> raw(f.read_be32());
  f.read(raw.data(), raw.size());
  return std::vector<int32_t>(raw.begin(), raw.end());
}

}  // namespace braid::examples
