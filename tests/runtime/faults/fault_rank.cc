// A rank process for the fault tests: a long loop of collectives whose every result is checked,
// so a fault can only end it loudly. Joins through the environment (MASTER_ADDR, RANK, ...) and
// prints one line per event:
//   READY rank=R                                    rendezvous done, first operation ran
//   DONE rank=R iters=N                             every iteration ran and was right (exit 0)
//   FAILED rank=R code=CODE iter=I msg=...          a braid::Error (exit 3)
//   WRONG rank=R iter=I op=OP index=J got=G want=W  a result that is not what it must be (exit 4)
// FAULT_ITERS sets the iterations (default: practically forever); FAULT_SEED the sizes' seed
// (the same on every rank).
#include <braid/braid.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <vector>

namespace {

using braid::DType;
using braid::Op;

long env_long(const char* name, long fallback) {
  const char* v = std::getenv(name);
  return v ? std::atol(v) : fallback;
}

// What rank `r` contributes at element `j` of iteration `i`: small, so sums never overflow.
int32_t value(long i, int r, size_t j) { return static_cast<int32_t>((i * 7 + r * 13 + static_cast<long>(j)) % 1000); }

struct Checker {
  int rank;
  long iter;
  bool ok = true;
  void expect(const char* op, size_t j, int64_t got, int64_t want) {
    if (!ok || got == want) return;
    ok = false;
    std::printf("WRONG rank=%d iter=%ld op=%s index=%zu got=%lld want=%lld\n", rank, iter, op, j,
                static_cast<long long>(got), static_cast<long long>(want));
    std::fflush(stdout);
  }
};

// One iteration: all_reduce (sum), broadcast from a rotating root, all_gather; every element
// of every result is compared with what it must be.
bool iteration(braid::Communicator& comm, long i, size_t n, std::vector<int32_t>& a, std::vector<int32_t>& g) {
  const int r = comm.rank(), size = comm.size();
  Checker c{r, i};
  for (size_t j = 0; j < n; ++j) a[j] = value(i, r, j);
  comm.all_reduce(a.data(), n, DType::i32, Op::sum);
  for (size_t j = 0; j < n && c.ok; ++j) {
    int64_t want = 0;
    for (int q = 0; q < size; ++q) want += value(i, q, j);
    c.expect("all_reduce", j, a[j], want);
  }
  const int root = static_cast<int>(i % size);
  for (size_t j = 0; j < n; ++j) a[j] = r == root ? value(i, root, j) : -1;
  comm.broadcast(a.data(), n, DType::i32, root);
  for (size_t j = 0; j < n && c.ok; ++j) c.expect("broadcast", j, a[j], value(i, root, j));
  const size_t m = 1 + n / static_cast<size_t>(size);
  std::vector<int32_t> mine(m);
  for (size_t j = 0; j < m; ++j) mine[j] = value(i, r, j);
  g.assign(m * static_cast<size_t>(size), -1);
  comm.all_gather(mine.data(), g.data(), m, DType::i32);
  for (int q = 0; q < size && c.ok; ++q) {
    for (size_t j = 0; j < m && c.ok; ++j) c.expect("all_gather", j, g[static_cast<size_t>(q) * m + j], value(i, q, j));
  }
  return c.ok;
}

}  // namespace

int main() {
  int rank = -1;
  long i = 0;
  try {
    braid::Communicator comm = braid::Communicator::from_env();
    rank = comm.rank();
    const long iters = env_long("FAULT_ITERS", 1L << 40);
    std::mt19937 rng(static_cast<unsigned>(env_long("FAULT_SEED", 7)));
    std::vector<int32_t> a(1 << 16), g;
    for (; i < iters; ++i) {
      const size_t n = 1 + rng() % a.size();
      if (!iteration(comm, i, n, a, g)) return 4;
      if (i == 0) {
        std::printf("READY rank=%d\n", rank);
        std::fflush(stdout);
      }
      if (i % 64 == 63) std::this_thread::sleep_for(std::chrono::milliseconds(1));  // idle moments too
    }
    std::printf("DONE rank=%d iters=%ld\n", rank, i);
    std::fflush(stdout);
    return 0;
  } catch (const braid::Error& e) {
    std::printf("FAILED rank=%d code=%s iter=%ld msg=%s\n", rank, braid::to_string(e.code()), i, e.what());
    std::fflush(stdout);
    return 3;
  }
}
