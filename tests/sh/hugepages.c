/* tests/sh/hugepages.sh's program: a heap of 64 B blocks, freed in random order.
 *
 *   hugepages MIB   fills MIB MiB of 64 B blocks (each written), frees a random half, then the
 *                   rest, then calls malloc_trim(0); after each step prints
 *                   "STEP rss_kib huge_kib pool_huge_kib" (filled, half, all, trimmed: Rss and
 *                   AnonHugePages + Private_Hugetlb from /proc/self/smaps_rollup, and the pool's
 *                   bytes on huge pages from flatmalloc_stats_json when flatmalloc is preloaded,
 *                   else -1). The index of blocks is mmap'd, outside every allocator, and
 *                   checked: each block keeps its own tag until freed.
 *   hugepages 0     prints "small ..." after one malloc of 100 bytes.
 *   hugepages sparse MIB   MIB MiB of blocks of 48 KiB, the first word of each written (a
 *                   program that uses a little of its buffers): prints "sparse ..."
 *   hugepages churn MIB    MIB MiB of 64 B blocks (each written, kept), then 200,000 steps of
 *                   stress-ng's malloc stressor on 8,192 slots (malloc, calloc, realloc,
 *                   aligned_alloc or free of up to 64 KiB, the first word written, malloc_trim(0)
 *                   one step in eight); prints "kept ..." after the 64 B blocks and "churned ..."
 *                   after the steps, the 64 B blocks checked
 *   hugepages first MIB    a block of 32 MiB first (each page written), prints "block ...", then
 *                   MIB MiB of 64 B blocks (each written), prints "after ...", all checked */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

static long rollup(const char *name) {
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  char line[256];
  long v = 0;
  size_t n = strlen(name);
  if (!f) {
    perror("smaps_rollup");
    exit(2);
  }
  while (fgets(line, sizeof line, f))
    if (!strncmp(line, name, n)) v += atol(line + n);
  fclose(f);
  return v;
}

/* The "huge" figure of flatmalloc's statistics, in KiB; -1 without flatmalloc. */
static long pool_huge(void) {
  size_t (*json)(char *, size_t) = (size_t (*)(char *, size_t))dlsym(RTLD_DEFAULT, "flatmalloc_stats_json");
  static char buf[1 << 16];
  if (!json) return -1;
  json(buf, sizeof buf);
  const char *h = strstr(buf, "\"huge\":");
  return h ? atol(h + 7) / 1024 : -2;
}

static void report(const char *step) {
  long rss = rollup("Rss:"), huge = rollup("AnonHugePages:") + rollup("Private_Hugetlb:");
  printf("%s %ld %ld %ld\n", step, rss, huge, pool_huge());
  fflush(stdout);
}

static void free_checked(uint64_t **p, size_t i) {
  if (p[i][0] != i || p[i][7] != ~(uint64_t)i) {
    fprintf(stderr, "block %zu damaged\n", i);
    exit(3);
  }
  free(p[i]);
}

static int sparse(size_t mib) {
  size_t n = (mib << 20) / (48 << 10);
  void **p = mmap(NULL, n * sizeof *p, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return 2;
  for (size_t i = 0; i < n; i++) {
    if (!(p[i] = malloc(48 << 10))) return 1;
    *(size_t *)p[i] = i;
  }
  report("sparse");
  for (size_t i = 0; i < n; i++) {
    if (*(size_t *)p[i] != i) return 3;
    free(p[i]);
  }
  return 0;
}

static uint64_t rnd(uint64_t *x) {
  *x ^= *x << 13, *x ^= *x >> 7, *x ^= *x << 17;
  return *x;
}

#define SLOTS 8192
static int churn(size_t mib) {
  size_t n = (mib << 20) / 64;
  uint64_t **p = mmap(NULL, n * sizeof *p, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void **slot = mmap(NULL, SLOTS * sizeof *slot, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED || slot == MAP_FAILED) return 2;
  for (size_t i = 0; i < n; i++) {
    if (!(p[i] = malloc(64))) return 1;
    for (unsigned k = 0; k < 8; k++) p[i][k] = k == 7 ? ~(uint64_t)i : i;
  }
  report("kept");
  uint64_t x = 0x5eed5eed5eedull;
  for (unsigned step = 0; step < 200000; step++) {
    uint64_t r = rnd(&x);
    size_t i = r % SLOTS, len = (r >> 16) % (64 << 10) + 8;
    if (slot[i] && (r >> 40) % 2) {
      free(slot[i]);
      slot[i] = NULL;
    } else if (slot[i]) {
      void *q = realloc(slot[i], len);
      if (!q) return 1;
      slot[i] = q;
      *(size_t *)q = i;
    } else if ((r >> 40) % 2) {
      unsigned how = (r >> 44) % 8;
      slot[i] = how == 0 ? calloc(1, len) : how == 1 ? aligned_alloc(64, len) : malloc(len);
      if (!slot[i]) return 1;
      *(size_t *)slot[i] = i;
    }
    if ((r >> 50) % 8 == 0) malloc_trim(0);
  }
  report("churned");
  for (size_t i = 0; i < n; i++) free_checked(p, i);
  for (size_t i = 0; i < SLOTS; i++) free(slot[i]);
  return 0;
}

static int first(size_t mib) {
  size_t n = (mib << 20) / 64, big = 32 << 20;
  uint64_t **p = mmap(NULL, n * sizeof *p, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  char *b = malloc(big);
  if (p == MAP_FAILED || !b) return 2;
  memset(b, 0x5a, big);
  report("block");
  for (size_t i = 0; i < n; i++) {
    if (!(p[i] = malloc(64))) return 1;
    for (unsigned k = 0; k < 8; k++) p[i][k] = k == 7 ? ~(uint64_t)i : i;
  }
  report("after");
  for (size_t i = 0; i < big; i += 4096)
    if (b[i] != 0x5a) return 3;
  for (size_t i = 0; i < n; i++) free_checked(p, i);
  free(b);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 2 && !strcmp(argv[1], "first")) return first(strtoul(argv[2], NULL, 10));
  if (argc > 2 && !strcmp(argv[1], "sparse")) return sparse(strtoul(argv[2], NULL, 10));
  if (argc > 2 && !strcmp(argv[1], "churn")) return churn(strtoul(argv[2], NULL, 10));
  size_t mib = argc > 1 ? strtoul(argv[1], NULL, 10) : 256, n = (mib << 20) / 64;
  if (!n) {
    void *volatile q = malloc(100);
    report("small");
    free(q);
    return 0;
  }
  uint64_t **p = mmap(NULL, n * sizeof *p, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  size_t *order = mmap(NULL, n * sizeof *order, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED || order == MAP_FAILED) return 2;
  for (size_t i = 0; i < n; i++) {
    if (!(p[i] = malloc(64))) {
      fprintf(stderr, "malloc failed at %zu\n", i);
      return 1;
    }
    for (unsigned k = 0; k < 8; k++) p[i][k] = k == 7 ? ~(uint64_t)i : i;
    order[i] = i;
  }
  report("filled");
  uint64_t x = 88172645463325252ull;
  for (size_t i = n - 1; i > 0; i--) {
    x ^= x << 13, x ^= x >> 7, x ^= x << 17;
    size_t j = x % (i + 1), t = order[i];
    order[i] = order[j], order[j] = t;
  }
  for (size_t i = 0; i < n / 2; i++) free_checked(p, order[i]);
  report("half");
  for (size_t i = n / 2; i < n; i++) free_checked(p, order[i]);
  report("all");
  malloc_trim(0);
  report("trimmed");
  return 0;
}
