// Rendezvous time of N rank processes: braidrun starts them, they meet in braidrun's store,
// agree on the job and connect to one another; the time is braidrun's whole run (process
// start-up included), so it is what a user waits for before the first collective.
//
//   ninja -C build bench/runtime/rendezvous_bench && build/bench/runtime/rendezvous_bench
#include <benchmark/benchmark.h>
#include <spawn.h>
#include <sys/wait.h>

#include <cstdlib>
#include <string>
#include <vector>

extern char** environ;

namespace {

std::string from_env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

void BM_Rendezvous(benchmark::State& state) {
  std::string braidrun = from_env("BRAIDRUN"), rank = from_env("RENDEZVOUS_RANK");
  if (braidrun.empty() || rank.empty()) {
    state.SkipWithError("BRAIDRUN / RENDEZVOUS_RANK not set: run through meson benchmark");
    return;
  }
  std::string n = std::to_string(state.range(0));
  std::vector<std::string> args = {braidrun, "--standalone", "--no-prefix", "--nproc-per-node", n, rank};
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  for (auto _ : state) {
    pid_t pid = 0;
    if (posix_spawn(&pid, argv[0], nullptr, nullptr, argv.data(), environ) != 0) {
      state.SkipWithError("cannot start braidrun");
      return;
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
      state.SkipWithError("a rank failed");
      return;
    }
  }
  state.counters["ranks"] = static_cast<double>(state.range(0));
}

BENCHMARK(BM_Rendezvous)->Arg(8)->Arg(64)->Unit(benchmark::kMillisecond)->UseRealTime()->Iterations(5);

}  // namespace

BENCHMARK_MAIN();
