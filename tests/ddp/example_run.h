// The training examples run as their tests start them: alone (one process, outside any job), or
// under braidrun --standalone on n ranks of this host; what each run printed and its epochs.
#pragma once

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "tests/ddp/epoch_lines.h"
#include "tests/support/subprocess.h"

namespace braid::ddp {

// The examples' exit status where they cannot run here (no data set, no libtorch); the tests skip.
inline constexpr int kExampleSkipped = 77;

struct ExampleRun {
  int rc = -1;  // as Subprocess::wait returns it (-1: still running after the bound)
  std::string output;
  std::vector<Epoch> epochs;
};

// Runs `argv` followed by `args` with `env` added, waiting up to `bound`.
inline ExampleRun run_example(std::vector<std::string> argv, const std::vector<std::string>& args,
                              const std::map<std::string, std::string>& env, std::chrono::seconds bound) {
  argv.insert(argv.end(), args.begin(), args.end());
  braid::testing::Subprocess p(argv, env);
  ExampleRun run;
  run.rc = p.wait(bound);
  run.output = p.output();
  run.epochs = epochs(run.output);
  return run;
}

// `exe args` alone: WORLD_SIZE and RANK removed from its environment, so it trains by itself.
inline ExampleRun run_alone(const std::string& exe, const std::vector<std::string>& args, std::chrono::seconds bound) {
  return run_example({exe}, args, {{"WORLD_SIZE", "\x01"}, {"RANK", "\x01"}}, bound);
}

// `exe args` on `ranks` ranks started by `braidrun` (its path), rendezvous bounded by
// `rendezvous_timeout_s`.
inline ExampleRun run_under_braidrun(const std::string& braidrun, int ranks, const std::string& exe,
                                     const std::vector<std::string>& args, int rendezvous_timeout_s,
                                     std::chrono::seconds bound) {
  return run_example({braidrun, "--standalone", "--nproc-per-node", std::to_string(ranks), exe}, args,
                     {{"BRAID_RENDEZVOUS_TIMEOUT_S", std::to_string(rendezvous_timeout_s)}}, bound);
}

}  // namespace braid::ddp
