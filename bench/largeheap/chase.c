/* chase.c: a pointer chase over a large heap, for bench/largeheap.sh (issue 52). `chase BLOCKS
 * STEPS SEED`: mallocs BLOCKS blocks of 64 B one after another, links them into one random cycle
 * (Fisher-Yates with splitmix64 from SEED), frees the arrays that built it, then follows the
 * cycle for STEPS steps. Prints on stdout a checksum of the blocks' numbers along the walk (the
 * same under every allocator), on stderr `timed: NS ns/step cpu: NS` (clock_gettime around the
 * walk only: CLOCK_MONOTONIC, then the thread's CPU time, which other work on the machine
 * disturbs less) and the AnonHugePages line of /proc/self/smaps_rollup. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "../rng.h"
#include "smaps.h"

struct block {
  struct block *next;
  uint64_t id;
  char pad[48];
};

static double now(clockid_t c)
{
  struct timespec t;
  clock_gettime(c, &t);
  return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
  long n = argc > 1 ? atol(argv[1]) : 8L << 20;
  long steps = argc > 2 ? atol(argv[2]) : 4L << 20;
  rng_state = argc > 3 ? strtoull(argv[3], NULL, 0) : 52;
  struct block **b = malloc(n * sizeof *b);
  uint32_t *perm = malloc(n * sizeof *perm);
  if (!b || !perm)
    return 1;
  for (long i = 0; i < n; i++) {
    if (!(b[i] = malloc(sizeof(struct block))))
      return 1;
    b[i]->id = (uint64_t)i;
    perm[i] = (uint32_t)i;
  }
  for (long i = n - 1; i > 0; i--) {
    long j = (long)(rng() % (uint64_t)(i + 1));
    uint32_t t = perm[i];
    perm[i] = perm[j];
    perm[j] = t;
  }
  for (long i = 0; i < n; i++)
    b[perm[i]]->next = b[perm[(i + 1) % n]];
  struct block *p = b[perm[0]];
  free(perm);
  free(b);

  uint64_t sum = 0;
  double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
  for (long s = 0; s < steps; s++) {
    sum = sum * 31 + p->id;
    p = p->next;
  }
  double t1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
  printf("%llu\n", (unsigned long long)sum);
  fprintf(stderr, "timed: %.1f ns/step cpu: %.1f\n", (t1 - t0) * 1e9 / (double)steps, (c1 - c0) * 1e9 / (double)steps);
  hugepages_report();
  return 0; /* the blocks stay: a program's exit frees nothing */
}
