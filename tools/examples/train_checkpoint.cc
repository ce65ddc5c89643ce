#include "tools/examples/train_checkpoint.h"

#include <cstdio>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <vector>

namespace braid::examples {
namespace {

constexpr char kMagic[8] = {'B', 'R', 'C', 'K', 'P', 'T', '0', '1'};

template <typename T>
void put(std::ofstream& out, const T& v) {
  out.write(reinterpret_cast<const char*>(&v), sizeof v);
}

template <typename T>
T take(std::ifstream& in, const std::string& path) {
  T v{};
  if (!in.read(reinterpret_cast<char*>(&v), sizeof v)) throw std::runtime_error(path + ": checkpoint cut short");
  return v;
}

}  // namespace

void save_checkpoint(const std::string& path, const Mlp& mlp, const TrainPosition& pos) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out.write(kMagic, sizeof kMagic);
    put(out, pos.steps_done);
    put(out, pos.epoch);
    put(out, pos.step);
    for (double s : pos.sums) put(out, s);
    put(out, static_cast<uint64_t>(Mlp::kNumParams));
    for (size_t i = 0; i < Mlp::kNumParams; ++i) {
      put(out, static_cast<uint64_t>(mlp.param_count(i)));
      out.write(reinterpret_cast<const char*>(mlp.param(i)), static_cast<std::streamsize>(mlp.param_count(i) * sizeof(float)));
    }
    out.flush();
    if (!out) throw std::runtime_error("cannot write the checkpoint " + tmp);
  }
  // The rename replaces the old checkpoint at once: a kill at any moment leaves a whole one.
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw std::runtime_error("cannot rename " + tmp + " to " + path);
}

bool resume_from_checkpoint(Communicator& comm, const std::string& path, Mlp& mlp, TrainPosition& pos) {
  // header: found, steps_done, epoch, step (as doubles, exact below 2^53), then the sums
  double header[7] = {0, 0, 0, 0, 0, 0, 0};
  if (comm.rank() == 0) {
    std::ifstream in(path, std::ios::binary);
    if (in) {
      char magic[sizeof kMagic];
      if (!in.read(magic, sizeof magic) || std::memcmp(magic, kMagic, sizeof kMagic) != 0) {
        throw std::runtime_error(path + " is not a checkpoint of this program");
      }
      TrainPosition p;
      p.steps_done = take<uint64_t>(in, path);
      p.epoch = take<uint64_t>(in, path);
      p.step = take<uint64_t>(in, path);
      for (double& s : p.sums) s = take<double>(in, path);
      if (take<uint64_t>(in, path) != Mlp::kNumParams) throw std::runtime_error(path + ": another model's checkpoint");
      for (size_t i = 0; i < Mlp::kNumParams; ++i) {
        if (take<uint64_t>(in, path) != mlp.param_count(i)) throw std::runtime_error(path + ": another model's checkpoint");
        if (!in.read(reinterpret_cast<char*>(mlp.param(i)), static_cast<std::streamsize>(mlp.param_count(i) * sizeof(float)))) {
          throw std::runtime_error(path + ": checkpoint cut short");
        }
      }
      header[0] = 1;
      header[1] = static_cast<double>(p.steps_done);
      header[2] = static_cast<double>(p.epoch);
      header[3] = static_cast<double>(p.step);
      std::memcpy(&header[4], p.sums, sizeof p.sums);
    }
  }
  comm.broadcast(header, 7, DType::f64, 0);
  if (header[0] == 0) return false;
  pos.steps_done = static_cast<uint64_t>(header[1]);
  pos.epoch = static_cast<uint64_t>(header[2]);
  pos.step = static_cast<uint64_t>(header[3]);
  std::memcpy(pos.sums, &header[4], sizeof pos.sums);
  for (size_t i = 0; i < Mlp::kNumParams; ++i) comm.broadcast(mlp.param(i), mlp.param_count(i), DType::f32, 0);
  return true;
}

uint64_t parameters_digest(const Mlp& mlp) {
  uint64_t h = 1469598103934665603ull;
  for (size_t i = 0; i < Mlp::kNumParams; ++i) {
    const auto* p = reinterpret_cast<const unsigned char*>(mlp.param(i));
    for (size_t b = 0; b < mlp.param_count(i) * sizeof(float); ++b) h = (h ^ p[b]) * 1099511628211ull;
  }
  return h;
}

}  // namespace braid::examples
