// hand_off_overlap - does an *_async operation still overlap short compute now that the runtime
// may leave it to its caller (runtime/communicator_impl.h, the hand-off)? A rank program for
// braidrun. For each compute time C (microseconds, a busy loop on the calling thread) it times,
// over --iters steps after a barrier each: all_reduce_async of --bytes, C us of compute, test(),
// wait(). Rank 0 prints the median step and how many operations test() found done at the end
// of the compute (done there = it ran meanwhile on the progress thread).
//
//   braidrun --standalone --nproc-per-node 2 build/bench/runtime/hand_off_overlap --compute-us 0,100,300,1000,3000
#include <braid/braid.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

std::vector<long> parse_list(const char* text) {
  std::vector<long> out;
  for (const char* p = text; *p != '\0';) {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p) break;  // not a number: the list ends here
    out.push_back(v);
    p = *end == ',' ? end + 1 : end;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<long> compute_us = {0, 100, 300, 1000, 3000};
  size_t bytes = size_t{1} << 20;
  int iters = 200;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string flag = argv[i];
    if (flag == "--compute-us") compute_us = parse_list(argv[i + 1]);
    else if (flag == "--bytes") bytes = std::strtoul(argv[i + 1], nullptr, 10);
    else if (flag == "--iters") iters = std::atoi(argv[i + 1]);
    else {
      std::fprintf(stderr, "hand_off_overlap: unknown flag %s (--compute-us LIST, --bytes N, --iters N)\n", flag.c_str());
      return 2;
    }
  }
  braid::Communicator comm = braid::Communicator::from_env();
  std::vector<float> v(bytes / sizeof(float), 1.0f);
  if (comm.rank() == 0) std::printf("# %zu-byte all_reduce_async, compute, wait(); %d steps\n", bytes, iters);
  for (long c : compute_us) {
    std::vector<double> times;
    int done_early = 0;
    for (int i = 0; i < iters + 10; ++i) {
      comm.barrier();
      const auto t0 = Clock::now();
      braid::Work w = comm.all_reduce_async(v.data(), v.size(), braid::DType::f32, braid::Op::sum);
      while (Clock::now() - t0 < std::chrono::microseconds(c)) {
      }
      const bool early = w.test();
      w.wait();
      if (i < 10) continue;  // warm-up
      times.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
      done_early += early ? 1 : 0;
    }
    std::sort(times.begin(), times.end());
    if (comm.rank() == 0) {
      std::printf("compute %6ld us: median step %8.1f us, done by the end of the compute %3d/%d\n", c,
                  times[times.size() / 2], done_early, iters);
    }
  }
  return 0;
}
