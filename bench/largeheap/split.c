/* bench/largeheap/split.c: built by hand (cc -O2), run alone; see bench/results/2026-12-02-0340-hugepages.md. */
/* What a split costs: madvise(MADV_DONTNEED) of 16 KiB inside a transparent huge page (the
 * kernel splits it) against that of the whole 2 MiB page, and the first write to what was given
 * back afterwards (a base page, or a whole huge page zeroed), each over 64 huge pages, the mean
 * of the last two of three rounds; and the AnonHugePages left at the end. */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e9 + t.tv_nsec; }
#define HP (2u << 20)
#define N 64
int main(void) {
  double split = 0, whole = 0, fault_split = 0, fault_whole = 0;
  char *m = mmap(NULL, (size_t)(N + 1) * HP, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *a = (char *)(((uintptr_t)m + HP - 1) & ~(uintptr_t)(HP - 1));
  madvise(a, (size_t)N * HP, MADV_HUGEPAGE);
  for (int k = 0; k < 3; k++) {
    memset(a, 1, (size_t)N * HP);
    double t0 = now();
    for (int i = 0; i < N; i++) madvise(a + (size_t)i * HP + 64 * 1024, 16384, MADV_DONTNEED);
    double t1 = now();
    for (int i = 0; i < N; i++) a[(size_t)i * HP + 64 * 1024] = 2;   /* refault the given-back piece */
    double t2 = now();
    madvise(a, (size_t)N * HP, MADV_DONTNEED);
    memset(a, 1, (size_t)N * HP);
    double t3 = now();
    for (int i = 0; i < N; i++) madvise(a + (size_t)i * HP, HP, MADV_DONTNEED);
    double t4 = now();
    for (int i = 0; i < N; i++) a[(size_t)i * HP] = 2;
    double t5 = now();
    if (k) split += (t1 - t0) / N, fault_split += (t2 - t1) / N, whole += (t4 - t3) / N, fault_whole += (t5 - t4) / N;
  }
  printf("madvise 16K in a huge page (split): %.1f us; its refault %.1f us\n", split / 2e3, fault_split / 2e3);
  printf("madvise a whole huge page: %.1f us; its refault (a huge page, zeroed) %.1f us\n", whole / 2e3, fault_whole / 2e3);
  FILE *f = fopen("/proc/self/smaps_rollup", "r"); char line[128];
  while (fgets(line, sizeof line, f)) if (!strncmp(line, "AnonHugePages", 13)) fputs(line, stdout);
  return 0;
}
