/* bench/shm_copy_paths.c - the ways one process can copy a large message out of another on
 * ordinary 4 KiB pages, both directions at once as in a 2-rank sendrecv, beside memcpy.
 *
 *   shm_copy_paths [bytes=64M] [reps=9] [piece=1M]     (cc -O2 -pthread)
 *
 * Two processes (fork), each with a source and a destination buffer of `bytes` on 4 KiB pages
 * (MADV_NOHUGEPAGE, touched), and a copy of its source whose 2 MiB ranges it moved onto huge
 * pages with MADV_COLLAPSE (what transport/shm/page_collapse.h does; the time it took is printed).
 * Per repetition, all kinds in turn, each started together after a barrier:
 *   memcpy         each copies its own source to its destination (memcpy_pair's ceiling)
 *   cma-4k         each reads the other's 4 KiB-page source with one process_vm_readv
 *   cma-4k-piece   the same in calls of `piece` bytes
 *   vmsplice-pipe  each vmsplices its source into a pipe (1 MiB, the unprivileged maximum) in
 *                  `piece` steps while it reads the other's pipe into its destination: the
 *                  reader's read() is the one copy, from the writer's pages
 *   cma-collapsed  each reads the other's collapsed source with one process_vm_readv (4 KiB
 *                  destination)
 * Output: per kind, the median over reps of the slower process's time and GB/s per process.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_COLLAPSE
#define MADV_COLLAPSE 25
#endif

enum { kKinds = 5, kMaxReps = 64 };
static const char* kNames[kKinds] = {"memcpy", "cma-4k", "cma-4k-piece", "vmsplice-pipe", "cma-collapsed"};

struct shared {
  pthread_barrier_t bar;
  char* src[2];
  char* collapsed[2];
  pid_t pid[2];
  int pipes[2][2];
  double us[kKinds][2][kMaxReps];
};

static size_t bytes, piece;

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int cmpd(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static char* small_pages(size_t n, int fill) {
  char* p = mmap(NULL, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) { perror("mmap"); exit(1); }
  madvise(p, n, MADV_NOHUGEPAGE);
  memset(p, fill, n);
  return p;
}

static char* collapsed_pages(size_t n, int fill) {
  const size_t huge = (size_t)2 << 20;
  char* map = mmap(NULL, n + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (map == MAP_FAILED) { perror("mmap"); exit(1); }
  char* p = (char*)(((uintptr_t)map + huge - 1) & ~(uintptr_t)(huge - 1));
  memset(p, fill, n);
  double t0 = now_us();
  int rc = madvise(p, n, MADV_COLLAPSE);
  fprintf(stderr, "# MADV_COLLAPSE of %zu bytes: %s, %.0f us\n", n, rc == 0 ? "ok" : strerror(errno), now_us() - t0);
  return p;
}

static void read_other(pid_t pid, char* dst, const char* src, size_t call) {
  for (size_t o = 0; o < bytes; o += call) {
    size_t n = bytes - o < call ? bytes - o : call;
    struct iovec local = {dst + o, n}, remote = {(void*)(src + o), n};
    if (process_vm_readv(pid, &local, 1, &remote, 1, 0) != (ssize_t)n) { perror("process_vm_readv"); exit(1); }
  }
}

static void splice_both_ways(struct shared* s, int me, char* dst) {
  int out = s->pipes[me][1], in = s->pipes[1 - me][0];
  size_t sent = 0, got = 0;
  while (sent < bytes || got < bytes) {
    if (sent < bytes) {
      struct iovec v = {s->src[me] + sent, bytes - sent < piece ? bytes - sent : piece};
      ssize_t k = vmsplice(out, &v, 1, SPLICE_F_NONBLOCK);
      if (k > 0) sent += (size_t)k;
      else if (errno != EAGAIN) { perror("vmsplice"); exit(1); }
    }
    if (got < bytes) {
      ssize_t k = read(in, dst + got, bytes - got < piece ? bytes - got : piece);
      if (k > 0) got += (size_t)k;
      else if (k < 0 && errno != EAGAIN) { perror("read"); exit(1); }
    }
  }
}

int main(int argc, char** argv) {
  bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)64 << 20;
  int reps = argc > 2 ? atoi(argv[2]) : 9;
  piece = argc > 3 ? strtoull(argv[3], NULL, 0) : (size_t)1 << 20;
  if (reps < 1 || reps > kMaxReps) reps = 9;
  struct shared* s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&s->bar, &attr, 2);
  for (int i = 0; i < 2; i++) {
    if (pipe2(s->pipes[i], O_NONBLOCK) != 0) { perror("pipe2"); return 1; }
    if (fcntl(s->pipes[i][1], F_SETPIPE_SZ, 1 << 20) < 0) perror("F_SETPIPE_SZ");
  }
  pid_t child = fork();
  const int me = child == 0, other = 1 - me;
  char* dst = small_pages(bytes, 0);
  s->src[me] = small_pages(bytes, 1 + me);
  s->collapsed[me] = collapsed_pages(bytes, 1 + me);
  s->pid[me] = getpid();
  pthread_barrier_wait(&s->bar);
  for (int r = -1; r < reps; r++) { /* one warm-up */
    for (int k = 0; k < kKinds; k++) {
      pthread_barrier_wait(&s->bar);
      double t0 = now_us();
      if (k == 0) memcpy(dst, s->src[me], bytes);
      if (k == 1) read_other(s->pid[other], dst, s->src[other], bytes);
      if (k == 2) read_other(s->pid[other], dst, s->src[other], piece);
      if (k == 3) splice_both_ways(s, me, dst);
      if (k == 4) read_other(s->pid[other], dst, s->collapsed[other], bytes);
      double t = now_us() - t0;
      if (dst[bytes - 1] != (k == 0 ? 1 + me : 1 + other)) { fprintf(stderr, "%s: wrong bytes\n", kNames[k]); exit(1); }
      if (r >= 0) s->us[k][me][r] = t;
      dst[bytes - 1] = 0;
    }
  }
  pthread_barrier_wait(&s->bar); /* the other's buffers stay mapped until both are done */
  if (child == 0) _exit(0);
  waitpid(child, NULL, 0);
  for (int k = 0; k < kKinds; k++) {
    double worst[kMaxReps];
    for (int r = 0; r < reps; r++) worst[r] = s->us[k][0][r] > s->us[k][1][r] ? s->us[k][0][r] : s->us[k][1][r];
    qsort(worst, (size_t)reps, sizeof(double), cmpd);
    double med = worst[reps / 2];
    printf("%-14s %10.1f us %7.2f GB/s per process\n", kNames[k], med, bytes / med / 1e3);
  }
  return 0;
}
