/* bench/shm_exchange_floor.c - what a small all_reduce between two processes of one host costs
 * with nothing but the data's own movement: the physical floor braid and Open MPI are measured
 * against in bench/launch_modes.sh.
 *
 * Two processes (fork) share one mapping. Per iteration, timed like ../shared/bench's mpi_bench:
 * the buffer is refilled (untimed), both meet at a barrier (a flag each, spun on), then the timed
 * part: each copies its buffer into its own slot of the mapping, raises its flag, waits for the
 * peer's and adds the peer's slot into its buffer (f32 sum, read straight from the mapping). No
 * header, no queue, no completion: one copy in, one read, one reduce. A slot is reused every
 * iteration (the next barrier orders the reuse), so its lines stay in the two CPUs' caches, as
 * in a transport that reuses its buffers. Each iteration's time is the slower process's; the
 * median is printed.
 *
 *   shm_exchange_floor [--bytes B] [--iters N] [--warmup W] [--bind 0|1]
 *   bind 1: process i pinned to the i-th CPU it may use; 0: both free (as --bind-to none)
 * Output: RESULT\tfloor\t<bytes>\t<iters>\t<median_us>\t<min_us>
 */
#define _GNU_SOURCE
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#if defined(__x86_64__) || defined(__i386__)
#define CPU_RELAX() __builtin_ia32_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

enum { kMaxBytes = 1 << 20, kMaxIters = 100000 };

struct Line {
  _Alignas(64) _Atomic uint64_t value;
};

struct Shared {
  struct Line barrier[2];
  struct Line ready[2];
  _Alignas(64) unsigned char slot[2][kMaxBytes];
  double times[2][kMaxIters];
};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec * 1e6 + (double)t.tv_nsec / 1e3;
}

static int by_value(const void* a, const void* b) {
  const double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static void wait_for(_Atomic uint64_t* v, uint64_t at_least) {
  while (atomic_load_explicit(v, memory_order_acquire) < at_least) CPU_RELAX();
}

/* Pins the calling process to the `nth` CPU of its allowed set (or leaves it where it is). */
static void pin_nth(int nth) {
  cpu_set_t allowed, one;
  if (sched_getaffinity(0, sizeof allowed, &allowed) != 0) return;
  int seen = 0;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (!CPU_ISSET(c, &allowed)) continue;
    if (seen++ == nth) {
      CPU_ZERO(&one);
      CPU_SET(c, &one);
      sched_setaffinity(0, sizeof one, &one);
      return;
    }
  }
}

int main(int argc, char** argv) {
  size_t bytes = 4096;
  long iters = 1000, warmup = 20;
  int bind = 1;
  for (int i = 1; i + 1 < argc; i += 2) {
    if (!strcmp(argv[i], "--bytes")) bytes = strtoul(argv[i + 1], NULL, 0);
    else if (!strcmp(argv[i], "--iters")) iters = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--warmup")) warmup = atol(argv[i + 1]);
    else if (!strcmp(argv[i], "--bind")) bind = atoi(argv[i + 1]);
    else {
      fprintf(stderr, "unknown argument %s\n", argv[i]);
      return 2;
    }
  }
  if (bytes % sizeof(float) != 0 || bytes > kMaxBytes || iters < 1 || iters > kMaxIters || warmup < 0) {
    fprintf(stderr, "need --bytes a multiple of 4 up to %d, --iters 1..%d\n", kMaxBytes, kMaxIters);
    return 2;
  }
  struct Shared* s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (s == MAP_FAILED) {
    perror("mmap");
    return 1;
  }
  const pid_t child = fork();
  if (child < 0) {
    perror("fork");
    return 1;
  }
  const int me = child == 0 ? 1 : 0, peer = 1 - me;
  if (bind) pin_nth(me);
  const size_t n = bytes / sizeof(float);
  float* buf = aligned_alloc(64, bytes + 64);
  float* init = aligned_alloc(64, bytes + 64);
  for (size_t i = 0; i < n; ++i) init[i] = (float)(i % 251 + (size_t)me);
  const float* theirs = (const float*)s->slot[peer];
  for (long it = 0; it < warmup + iters; ++it) {
    const uint64_t round = (uint64_t)it + 1;
    memcpy(buf, init, bytes);
    atomic_store_explicit(&s->barrier[me].value, round, memory_order_release);
    wait_for(&s->barrier[peer].value, round);
    const double t0 = now_us();
    memcpy(s->slot[me], buf, bytes);
    atomic_store_explicit(&s->ready[me].value, round, memory_order_release);
    wait_for(&s->ready[peer].value, round);
    for (size_t i = 0; i < n; ++i) buf[i] += theirs[i];
    const double t1 = now_us();
    if (it >= warmup) s->times[me][it - warmup] = t1 - t0;
  }
  const float want = (float)(0 % 251) * 2 + 1;
  if (n > 0 && buf[0] != want) fprintf(stderr, "process %d: wrong sum %g (want %g)\n", me, (double)buf[0], (double)want);
  if (me == 1) return 0;
  waitpid(child, NULL, 0);
  double* t = malloc(sizeof(double) * (size_t)iters);
  for (long i = 0; i < iters; ++i) t[i] = s->times[0][i] > s->times[1][i] ? s->times[0][i] : s->times[1][i];
  qsort(t, (size_t)iters, sizeof(double), by_value);
  const double median = iters % 2 ? t[iters / 2] : 0.5 * (t[iters / 2 - 1] + t[iters / 2]);
  printf("RESULT\tfloor\t%zu\t%ld\t%.2f\t%.2f\n", bytes, iters, median, t[0]);
  return 0;
}
