// The DDP tests' rank processes: n copies of a rank program that meet through the environment
// (MASTER_ADDR/PORT, RANK, WORLD_SIZE on a free loopback port), each writing its final state to
// <out_dir>/rank<r>.bin when out_dir is given.
#pragma once

#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/support/rank_job.h"
#include "tests/support/subprocess.h"

namespace braid::ddp::testing {

using braid::testing::Subprocess;

inline std::vector<float> read_floats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<float> out(bytes.size() / sizeof(float));
  if (!out.empty()) std::memcpy(out.data(), bytes.data(), out.size() * sizeof(float));
  return out;
}

struct World {
  std::vector<std::unique_ptr<Subprocess>> ranks;
  std::vector<int> exit_codes;
  std::string outputs;  // every rank's output, labeled
  std::string output(size_t r) const { return ranks[r]->output(); }
};

struct WorldSpec {
  std::string binary_env;  // the variable naming the rank program
  int timeout_s = 30;      // BRAID_RENDEZVOUS_TIMEOUT_S and BRAID_TIMEOUT_S of every rank
  std::map<std::string, std::string> extra_env = {};
};

inline World start_world(const WorldSpec& spec, size_t n, const std::vector<std::string>& args,
                         const std::string& out_dir) {
  World w;
  const std::string timeout = std::to_string(spec.timeout_s);
  braid::testing::RankJob job{.argv = {braid::testing::binary_from_env(spec.binary_env.c_str())},
                              .env = {{"BRAID_RENDEZVOUS_TIMEOUT_S", timeout}, {"BRAID_TIMEOUT_S", timeout}}};
  job.argv.insert(job.argv.end(), args.begin(), args.end());
  for (const auto& [k, v] : spec.extra_env) job.env[k] = v;
  job.per_rank = [&out_dir](int r, braid::testing::EnvMap&, std::vector<std::string>& argv) {
    if (!out_dir.empty()) argv.insert(argv.end(), {"--out", out_dir + "/rank" + std::to_string(r) + ".bin"});
  };
  w.ranks = braid::testing::start_ranks(static_cast<int>(n), job);
  return w;
}

template <class Duration>
void wait_world(World& w, Duration bound) {
  for (size_t r = 0; r < w.ranks.size(); ++r) {
    w.exit_codes.push_back(w.ranks[r]->wait(bound));
    w.outputs += "--- rank " + std::to_string(r) + " (exit " + std::to_string(w.exit_codes.back()) + "):\n" +
                 w.ranks[r]->output();
  }
}

}  // namespace braid::ddp::testing
