/* bench/shm_cma_bench.c - why cross-memory attach (process_vm_readv) copies slower than memcpy
 * here, and when it does not: the same bytes copied by memcpy and by process_vm_readv from
 * another process, with the buffers on 4 KiB pages or on transparent huge pages (MADV_HUGEPAGE),
 * and with the copy cut into calls of a given size.
 *
 *   shm_cma_bench [bytes=64M] [reps=9]         (cc -O2 -pthread; bench/shm_compare.sh builds it)
 *
 * Two processes (fork), each with its own source and destination buffers, touched after the fork:
 *   memcpy     one process copies its source to its destination; the other waits.
 *   memcpy-2way both do that at once (what two copying ranks on two cores can each expect).
 *   cma-1way   one process reads the other's source into its destination; the other waits.
 *   cma-2way   both read each other's source at once (a 2-rank sendrecv's single copies).
 * Output (median over reps; GB/s per copying process, GB = 1e9 B):
 *   RESULT\tcma\t<kind>-<pages>-<call KiB>\t1\t<bytes>\t<reps>\t<median_us>\t<min_us>\t<GB/s>
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

struct shared {
  pthread_barrier_t bar;
  char* src[2];
  pid_t pid[2];
  double us[2][64];
};

static double now_us(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1e6 + t.tv_nsec * 1e-3;
}

static int cmpd(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return x < y ? -1 : x > y;
}

static char* buffer(size_t bytes, int huge, int fill) {
  char* p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) { perror("mmap"); exit(1); }
  if (huge) madvise(p, bytes, MADV_HUGEPAGE);
  memset(p, fill, bytes);
  return p;
}

/* kind 0: memcpy, 1: memcpy-2way, 2: cma-1way, 3: cma-2way; run by process `me` (0 or 1). */
static void run(struct shared* s, int me, int kind, int huge, size_t bytes, size_t call, int reps) {
  char* dst = buffer(bytes, huge, 2);
  s->src[me] = buffer(bytes, huge, 1 + me);
  s->pid[me] = getpid();
  const int other = 1 - me;
  pthread_barrier_wait(&s->bar);
  const int copies = kind == 1 || kind == 3 || me == 0, cma = kind >= 2;
  for (int r = -1; r < reps; r++) { /* one warm-up */
    pthread_barrier_wait(&s->bar);
    double t0 = now_us();
    if (copies && !cma) memcpy(dst, s->src[me], bytes);
    for (size_t o = 0; copies && cma && o < bytes; o += call) {
      size_t n = bytes - o < call ? bytes - o : call;
      struct iovec local = {dst + o, n}, remote = {s->src[other] + o, n};
      if (process_vm_readv(s->pid[other], &local, 1, &remote, 1, 0) != (ssize_t)n) { perror("process_vm_readv"); exit(1); }
    }
    if (r >= 0) s->us[me][r] = now_us() - t0;
  }
  pthread_barrier_wait(&s->bar); /* the other's source stays mapped until both are done */
  munmap(dst, bytes);
  munmap(s->src[me], bytes);
}

int main(int argc, char** argv) {
  size_t bytes = argc > 1 ? strtoull(argv[1], NULL, 0) : (size_t)64 << 20;
  int reps = argc > 2 ? atoi(argv[2]) : 9;
  if (reps < 1 || reps > 64) reps = 9;
  struct shared* s = mmap(NULL, sizeof *s, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  pthread_barrierattr_t attr;
  pthread_barrierattr_init(&attr);
  pthread_barrierattr_setpshared(&attr, PTHREAD_PROCESS_SHARED);
  pthread_barrier_init(&s->bar, &attr, 2);
  const char* kinds[4] = {"memcpy", "memcpy-2way", "cma-1way", "cma-2way"};
  const size_t calls[3] = {(size_t)64 << 10, (size_t)1 << 20, bytes};
  for (int huge = 0; huge < 2; huge++) {
    for (int kind = 0; kind < 4; kind++) {
      for (int c = kind < 2 ? 2 : 0; c < 3; c++) {
        if (c < 2 && calls[c] >= bytes) continue; /* the whole buffer in one call is the last row */
        pid_t child = fork();
        if (child < 0) { perror("fork"); return 1; }
        run(s, child == 0, kind, huge, bytes, calls[c], reps);
        if (child == 0) _exit(0);
        waitpid(child, NULL, 0);
        qsort(s->us[0], reps, sizeof(double), cmpd);
        double med = s->us[0][reps / 2];
        printf("RESULT\tcma\t%s-%s-%zuK\t1\t%zu\t%d\t%.1f\t%.1f\t%.3f\n", kinds[kind], huge ? "thp" : "4k",
               calls[c] >> 10, bytes, reps, med, s->us[0][0], bytes / (med * 1e-6) / 1e9);
        fflush(stdout);
      }
    }
  }
  return 0;
}
