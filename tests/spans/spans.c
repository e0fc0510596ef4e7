/* Shared-pool behaviours, one case per run; prints "key value" lines for tests/spans/spans.sh,
 * which runs each case under glibc and under flatmalloc and compares. Block contents are
 * checked; the bookkeeping lives in mmap'ed memory and is subtracted from the RSS figures.
 *
 *   spans fill SIZE COUNT      COUNT blocks of SIZE, written and kept
 *   spans drift                1 GiB of 64 B, freed; of 512 B, freed; of 4 KiB, freed; 64 B again,
 *                              freed; then malloc_trim(0)
 *   spans release              10,000 blocks of 200 KB, written, all freed (no malloc_trim)
 *   spans delay MS             200 MiB of 1 KiB blocks, all freed; the pool's figures then; MS
 *                              milliseconds of sleep, then up to 200 runs taken and freed (a
 *                              1 MiB block each) until at most 16 MiB of free memory holds pages
 *                              (flatmalloc only)
 *   spans reuse                a span freed by one class is used by another (flatmalloc only)
 *   spans reserve              a reserved class allocates after a runaway size got ENOMEM
 *   spans buffers              up to 20 buffers of 5-25 MiB, one replaced at random 2,000 times
 *   spans chunk                the pool's chunk size (flatmalloc_stats_json) and what
 *                              malloc_usable_size gives a 100,000-byte block (flatmalloc only)
 *   spans warm                 a free run with pages is taken before a better fit without
 *   spans grow MS              a block from untouched memory, MS ms after another was freed
 *   spans trims                100 blocks of 64 B freed and malloc_trim(0), twice in a row: the
 *                              bytes in thread caches after each (flatmalloc only) */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>

#define MiB (1024.0 * 1024.0)

static void fail(const char *what) {
  fprintf(stderr, "FAIL: %s\n", what);
  exit(1);
}

static size_t book;   /* bytes of bookkeeping, resident */

static void *map(size_t bytes) {
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) fail("mmap for bookkeeping");
  book += bytes;
  return p;
}

/* kB of a /proc/self/status field */
static long status_kb(const char *key) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  long v = -1;
  size_t n = strlen(key);
  while (f && fgets(line, sizeof line, f))
    if (!strncmp(line, key, n) && line[n] == ':') v = atol(line + n + 1);
  if (f) fclose(f);
  return v;
}

static void report_rss(const char *prefix) {
  printf("%s_peak_mib %.1f\n", prefix, (status_kb("VmHWM") * 1024.0 - book) / MiB);
  printf("%s_rss_mib %.1f\n", prefix, (status_kb("VmRSS") * 1024.0 - book) / MiB);
}

static uint64_t tag(size_t i, size_t size) { return (i * 0x9e3779b97f4a7c15ull) ^ size; }

/* Writes every word of small blocks; one word per 4 KiB page and the ends of larger ones. */
static void stamp(void *p, size_t size, uint64_t t) {
  uint64_t *w = p;
  if (size <= 8192) {
    for (size_t i = 0; i < size / 8; i++) w[i] = t + i;
    return;
  }
  for (size_t o = 0; o + 8 <= size; o += 4096) *(uint64_t *)((char *)p + o) = t + o;
  *(uint64_t *)((char *)p + (size & ~(size_t)7) - 8) = ~t;
}

static int stamped(const void *p, size_t size, uint64_t t) {
  const uint64_t *w = p;
  if (size <= 8192) {
    for (size_t i = 0; i < size / 8; i++)
      if (w[i] != t + i) return 0;
    return 1;
  }
  for (size_t o = 0; o + 8 <= size; o += 4096)
    if (*(const uint64_t *)((const char *)p + o) != t + o) return 0;
  return *(const uint64_t *)((const char *)p + (size & ~(size_t)7) - 8) == ~t;
}

/* Allocates count blocks of size, stamps them; returns how many succeeded (NULL ends it). */
static size_t fill(void **v, size_t size, size_t count) {
  size_t i;
  for (i = 0; i < count; i++) {
    if (!(v[i] = malloc(size))) {
      if (errno != ENOMEM) fail("malloc returned NULL without ENOMEM");
      break;
    }
    stamp(v[i], size < 8 ? 0 : size, tag(i, size));
  }
  return i;
}

static void verify_free(void **v, size_t size, size_t n) {
  for (size_t i = 0; i < n; i++) {
    if (size >= 8 && !stamped(v[i], size, tag(i, size))) fail("a block lost its contents");
    free(v[i]);
  }
}

static int case_fill(size_t size, size_t count) {
  void **v = map(count * sizeof *v);
  size_t got = fill(v, size, count);
  printf("allocated %zu\nnull %zu\n", got, count - got);
  report_rss("fill");
  verify_free(v, size, got);
  return 0;
}

static int case_drift(void) {
  static const size_t sizes[] = {64, 512, 4096, 64};
  size_t max = (1u << 30) / 64;
  void **v = map(max * sizeof *v);
  for (unsigned k = 0; k < 4; k++) {
    size_t n = (1u << 30) / sizes[k], got = fill(v, sizes[k], n);
    if (got != n) fail("drift: malloc returned NULL");
    verify_free(v, sizes[k], got);
  }
  malloc_trim(0);
  report_rss("drift");
  return 0;
}

static int case_release(void) {
  enum { N = 10000, SIZE = 200000 };
  void **v = map(N * sizeof *v);
  if (fill(v, SIZE, N) != N) fail("release: malloc returned NULL");
  verify_free(v, SIZE, N);
  report_rss("release");
  return 0;
}

/* A number from the statistics' JSON. */
static unsigned long long stat_json(const char *key) {
  static size_t (*json)(char *, size_t);
  static char buf[1 << 16];
  char k[64];
  if (!json && !(json = (size_t (*)(char *, size_t))dlsym(RTLD_DEFAULT, "flatmalloc_stats_json")))
    fail("flatmalloc_stats_json not found (run preloaded)");
  json(buf, sizeof buf);
  snprintf(k, sizeof k, "\"%s\":", key);
  const char *c = strstr(buf, k);
  if (!c) fail("a figure missing from the statistics");
  return strtoull(c + strlen(k), NULL, 10);
}

static int case_delay(long ms) {
  enum { N = 200 << 10, SIZE = 1024 };
  void **v = map(N * sizeof *v);
  if (fill(v, SIZE, N) != N) fail("delay: malloc returned NULL");
  verify_free(v, SIZE, N);
  printf("returned_at_free %llu\nkept_at_free %llu\n", stat_json("returned"), stat_json("free_with_pages"));
  nanosleep(&(struct timespec){ms / 1000, ms % 1000 * 1000000}, NULL);
  int calls = 0;
  while (calls < 200 && stat_json("free_with_pages") > (16u << 20)) {
    void *p = malloc(1 << 20);
    if (!p) fail("delay: malloc returned NULL");
    memset(p, 1, 1 << 20);
    free(p);
    calls++;
  }
  printf("calls %d\nreturned_end %llu\nkept_end %llu\n", calls, stat_json("returned"), stat_json("free_with_pages"));
  return 0;
}

/* Blocks of 64 B fill a 64 MiB pool, are freed, then 1000 B blocks get as many bytes. */
static int case_reuse(void) {
  size_t max = (128u << 20) / 64;
  void **v = map(max * sizeof *v);
  size_t a = fill(v, 64, max);
  if (a == max) fail("reuse: a 64 MiB pool held 128 MiB of 64 B blocks: FLATMALLOC_POOL=64M not set?");
  verify_free(v, 64, a);
  size_t b = fill(v, 1000, max);
  printf("small_bytes %zu\nother_bytes %zu\n", a * 64, b * 1000);
  verify_free(v, 1000, b);
  size_t c = fill(v, 96 << 10, max);   /* whole chunks: what is measured is reuse, not rounding */
  printf("large_bytes %zu\n", c * (96 << 10));
  verify_free(v, 96 << 10, c);
  return 0;
}

/* Run with FLATMALLOC_CLASSES=...,256:25,... in a small pool: 16 B blocks until ENOMEM, then
 * 256 B blocks still come, up to their reservation. */
static int case_reserve(void) {
  size_t max = (256u << 20) / 16;
  void **v = map(max * sizeof *v), **w = map(max * sizeof *w);
  size_t a = fill(v, 16, max);
  if (a == max) fail("reserve: the runaway size never got ENOMEM");
  size_t b = fill(w, 256, max);
  printf("runaway_bytes %zu\nreserved_bytes %zu\n", a * 16, b * 256);
  verify_free(w, 256, b);
  verify_free(v, 16, a);
  return 0;
}

static int case_buffers(void) {
  enum { SLOTS = 20, ROUNDS = 2000 };
  void *buf[SLOTS] = {0};
  size_t len[SLOTS] = {0};
  uint64_t r = 0x5eed;
  struct rusage ru0, ru1;
  getrusage(RUSAGE_SELF, &ru0);
  for (unsigned i = 0; i < SLOTS + ROUNDS; i++) {
    unsigned s = i < SLOTS ? i : (unsigned)((r = r * 6364136223846793005ull + 1442695040888963407ull) >> 33) % SLOTS;
    if (buf[s] && ((unsigned char *)buf[s])[len[s] - 1] != (unsigned char)len[s]) fail("buffers: contents lost");
    free(buf[s]);
    r = r * 6364136223846793005ull + 1442695040888963407ull;
    len[s] = (5u << 20) + (size_t)((r >> 33) % (20u << 20));
    if (!(buf[s] = malloc(len[s]))) fail("buffers: malloc returned NULL");
    memset(buf[s], (unsigned char)len[s], len[s]);
  }
  getrusage(RUSAGE_SELF, &ru1);
  printf("minor_faults %ld\n", ru1.ru_minflt - ru0.ru_minflt);
  report_rss("buffers");
  for (unsigned s = 0; s < SLOTS; s++) free(buf[s]);
  return 0;
}

/* KiB of [p, p+len) resident (mincore). */
static size_t resident_kb(const void *p, size_t len) {
  static unsigned char vec[(64u << 20) / 4096];
  uintptr_t lo = (uintptr_t)p & ~(uintptr_t)4095, hi = ((uintptr_t)p + len + 4095) & ~(uintptr_t)4095;
  if ((hi - lo) / 4096 > sizeof vec || mincore((void *)lo, hi - lo, vec)) fail("mincore");
  size_t n = 0;
  for (size_t i = 0; i < (hi - lo) / 4096; i++) n += vec[i] & 1;
  return n * 4;
}

/* A free run that holds pages is taken before one that gave them back, even where the other
 * fits better: a 4 MiB block after a 4 MiB run was given back (malloc_trim) and a 6 MiB run
 * freed with its pages lands in the 6 MiB run, resident before it is written. */
static int case_warm(void) {
  const size_t M = 1u << 20;
  char *y = malloc(4 * M), *s1 = malloc(100000), *x = malloc(6 * M), *s2 = malloc(100000);
  if (!y || !s1 || !x || !s2) fail("warm: malloc returned NULL");
  memset(y, 1, 4 * M);
  memset(x, 2, 6 * M);
  free(y);
  free(x);
  malloc_trim(0);   /* both runs give their pages back */
  char *x2 = malloc(6 * M);   /* only the 6 MiB run fits */
  if (!x2) fail("warm: malloc returned NULL");
  memset(x2, 3, 6 * M);
  free(x2);   /* the 6 MiB run holds pages, the 4 MiB one none */
  char *w = malloc(4 * M);
  if (!w) fail("warm: malloc returned NULL");
  printf("x2_is_x %d\nw_is_x %d\nw_is_y %d\nw_resident_kb %zu\n", x2 == x, w == x, w == y, resident_kb(w, 4 * M));
  memset(w, 4, 4 * M);
  for (size_t i = 0; i < 4 * M; i += 4096)
    if (w[i] != 4) fail("warm: contents lost");
  free(w);
  free(s1);
  free(s2);
  return 0;
}

/* A run taken where no page was gives back as many pages of the free runs that did not fit it
 * and have held them for a 32nd of FLATMALLOC_RETAIN_DELAY: a freed 16 MiB block, MS ms before
 * a 32 MiB block comes from untouched memory (FLATMALLOC_RETAIN=1G: no budget gives it back). */
static int case_grow(long ms) {
  const size_t M = 1u << 20;
  malloc_trim(0);   /* no other free run holds pages */
  char *d = malloc(16 * M), *s = malloc(100000);
  if (!d || !s) fail("grow: malloc returned NULL");
  memset(d, 1, 16 * M);
  free(d);
  size_t freed = resident_kb(d, 16 * M);   /* (printed later: stdout's buffer would be a span taken here) */
  struct timespec t = {ms / 1000, ms % 1000 * 1000000};
  nanosleep(&t, NULL);
  char *e = malloc(32 * M);
  if (!e) fail("grow: malloc returned NULL");
  printf("freed_resident_kb %zu\nafter_resident_kb %zu\n", freed, resident_kb(d, 16 * M));
  memset(e, 2, 32 * M);
  for (size_t i = 0; i < 32 * M; i += 4096)
    if (e[i] != 2) fail("grow: contents lost");
  free(e);
  free(s);
  return 0;
}

/* malloc_trim(0) empties the caller's cache the first time, then once a FLATMALLOC_RETAIN_DELAY
 * at most: 100 blocks of 64 B freed into the cache and trimmed, twice in a row. */
static int case_trims(void) {
  void *b[100];
  for (int r = 1; r <= 2; r++) {
    for (int i = 0; i < 100; i++)
      if (!(b[i] = malloc(64))) fail("trims: malloc returned NULL");
    for (int i = 0; i < 100; i++) free(b[i]);
    malloc_trim(0);
    printf("cached_%d %llu\n", r, stat_json("cached"));
  }
  return 0;
}

static int case_chunk(void) {
  size_t (*json)(char *, size_t) = (size_t (*)(char *, size_t))dlsym(RTLD_DEFAULT, "flatmalloc_stats_json");
  if (!json) fail("chunk: flatmalloc_stats_json not found (run preloaded)");
  static char buf[1 << 16];
  json(buf, sizeof buf);
  const char *c = strstr(buf, "\"chunk\":");
  if (!c) fail("chunk: no chunk in the statistics");
  void *p = malloc(100000);
  if (!p) fail("chunk: malloc(100000) returned NULL");
  printf("chunk %llu\nusable_100000 %zu\n", strtoull(c + 8, NULL, 10), malloc_usable_size(p));
  free(p);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (argc == 4 && !strcmp(argv[1], "fill")) return case_fill(strtoull(argv[2], NULL, 0), strtoull(argv[3], NULL, 0));
  if (argc == 2 && !strcmp(argv[1], "drift")) return case_drift();
  if (argc == 2 && !strcmp(argv[1], "release")) return case_release();
  if (argc == 3 && !strcmp(argv[1], "delay")) return case_delay(atol(argv[2]));
  if (argc == 2 && !strcmp(argv[1], "reuse")) return case_reuse();
  if (argc == 2 && !strcmp(argv[1], "reserve")) return case_reserve();
  if (argc == 2 && !strcmp(argv[1], "buffers")) return case_buffers();
  if (argc == 2 && !strcmp(argv[1], "chunk")) return case_chunk();
  if (argc == 2 && !strcmp(argv[1], "warm")) return case_warm();
  if (argc == 3 && !strcmp(argv[1], "grow")) return case_grow(atol(argv[2]));
  if (argc == 2 && !strcmp(argv[1], "trims")) return case_trims();
  fprintf(stderr, "usage: spans fill SIZE COUNT | drift | release | reuse | reserve | buffers | chunk | warm | grow MS\n");
  return 2;
}
