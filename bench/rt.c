/* rt: the real-time experiment of issue 43 (the PMAD write-up's on Linux), one call timed at a time.
 *
 * A real-time program's start-up, then one sequence of calls, each timed alone:
 *   - glibc's real-time recipe: mallopt(M_TRIM_THRESHOLD, -1), mallopt(M_MMAP_MAX, 0) (whatever the
 *     allocator: a real-time program calls them; their return values are printed), --no-mallopt
 *     leaves them out;
 *   - the thread pinned to one CPU (sched_setaffinity; --cpu N, default the last CPU allowed);
 *   - SCHED_FIFO at priority 10 with --fifo (reported when refused);
 *   - mlockall(MCL_CURRENT | MCL_FUTURE) (--no-mlock leaves it out; a failure is reported and the
 *     run goes on), VmRSS and VmLck printed after it;
 *   - with --touch, every page of the private writable anonymous mappings written once
 *     (touch_mappings: a virtual machine's lazy backing of populated pages taken out).
 * Sequences:
 *   hot    malloc+free of one size, 16, 64, 256, 1024, 4096 B, --samples N pairs each (200,000)
 *          after 10,000 untimed; each malloc and each free timed alone.
 *   churn  a heap of --live N blocks (262,144) of --min..--max B (16..1024, uniform), filled
 *          untimed, then --steps N steps (2,000,000) of a seeded sequence (--seed S): each frees
 *          a random live slot and mallocs a random size into it, the free and the malloc timed
 *          alone. Between them, untimed, the program reads the first byte of the block it is
 *          about to free (as a program frees what it used; --cold leaves the read out, as the
 *          write-up's harness does) and writes the first and last bytes of the new one.
 * The timer is bench/tsc.h's (lfence; rdtsc ... rdtscp; lfence, calibrated against
 * CLOCK_MONOTONIC_RAW, the empty region's overhead removed; its resolution is printed). Page
 * faults (getrusage) are counted over the timed part, which access("/rt-timed-begin") and
 * access("/rt-timed-end") bracket so that `strace -f` shows the system calls made inside it.
 *
 * --out FILE keeps every raw sample (ticks) for `rt merge`, which takes several runs of the same
 * sequence and prints, per group, the percentiles of each step's least time over the runs (kind
 * "min") and the median and worst over the runs of each single run's percentiles ("single_median",
 * "single_worst"). A run prints its own as kind "single". CSV rows:
 *   rt,KIND,SEQ,GROUP,n,p50_ns,p99_ns,p99.9_ns,p99.99_ns,max_ns,max_step,max_size
 * Groups: hot malloc_S, free_S, pair_S (the two calls' sum), calls_S (both kinds pooled); churn
 * free, malloc, calls. max_step is the step of the maximum (for rerunning it), max_size its size.
 *
 * --trace-step K (churn) calls the free and the malloc of step K through rt_traced_free and
 * rt_traced_malloc (noinline), so that `valgrind --tool=callgrind --toggle-collect=rt_traced_*`
 * or a breakpoint shows what that one call does, and prints that step's page faults and times.
 * --pretouch BYTES (churn) first mallocs that much in blocks of 1 MiB, writes a byte of each
 * 4 KiB page and frees it all: memory the allocator hands out later was written once before
 * (on a virtual machine that backs a guest's page only at its first write, see the results).
 * --untimed reads no timer (Valgrind does not run rdtscp): the same calls, samples of 0.
 *
 * Built with -DRT_PMAD (bench/rt.sh --pmad DIR), the calls go to PMAD's pmad_alloc/pmad_free
 * instead of malloc/free; the pool is declared here (rt_heap_begin).
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <malloc.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "rng.h"
#include "status.h"
#include "tsc.h"

#define ESCAPE(p) __asm__ volatile("" : : "r"(p) : "memory")

static void die(const char *what)
{
  fprintf(stderr, "rt: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* The timer, off with --untimed (under Valgrind, which does not run rdtscp): samples read 0. */
static int untimed;
static inline uint64_t ts(void) { return untimed ? 0 : t_start(); }
static inline uint64_t te(void) { return untimed ? 0 : t_stop(); }

/* ---------- the allocator under test ---------- */

#ifdef RT_PMAD
/* PMAD (github.com/anastassow/PMAD): one pool of declared classes, single-threaded. */
#include "incPMAD.h"
#define RT_ALLOCATOR "pmad"
static inline void *rt_malloc(size_t n) { return pmad_alloc(n); }
static inline void rt_free(void *p) { pmad_free(p); }

/* Declares classes for requests of lo..hi B (the hot sizes exactly; for churn every 32 B up to
 * hi, 32 classes for 16..1024, the README's limit) and a pool where each class holds twice the
 * blocks the sequence keeps live on average, plus 1,024: shares are whole percentages summing to
 * 100, so the pool is sized for the class the rounding serves worst. */
static void rt_heap_begin(int hot, size_t live, size_t lo, size_t hi)
{
  size_t cls[64], need[64], pct_of[64], n = 0;
  if (hot) {
    static const size_t hs[] = {16, 64, 256, 1024, 4096};
    for (n = 0; n < 5; n++) {
      cls[n] = hs[n];
      need[n] = 1024 * (hs[n] + 16);
    }
  } else {
    for (size_t c = 32; c < hi + 32 && n < 64; c += 32) {
      size_t top = c < hi ? c : hi, bot = c - 32 + 1 > lo ? c - 32 + 1 : lo;
      cls[n] = c;
      size_t sizes = top >= bot ? top - bot + 1 : 0;
      need[n] = (2 * live * sizes / (hi - lo + 1) + 1024) * (c + 16);
      n++;
    }
  }
  size_t sum = 0, given = 0;
  for (size_t i = 0; i < n; i++)
    sum += need[i];
  for (size_t i = 0; i < n; i++) {
    pct_of[i] = 100 * need[i] / sum;
    if (pct_of[i] == 0)
      pct_of[i] = 1;
    given += pct_of[i];
  }
  while (given < 100) { /* the class with the most need per percent gets one more */
    size_t w = 0;
    for (size_t i = 1; i < n; i++)
      if (need[i] * pct_of[w] > need[w] * pct_of[i])
        w = i;
    pct_of[w]++;
    given++;
  }
  if (given > 100) {
    fprintf(stderr, "rt: pmad: %zu classes need more than 100 shares\n", n);
    exit(1);
  }
  size_t pool = 0;
  for (size_t i = 0; i < n; i++) {
    size_t p = need[i] * 100 / pct_of[i] + 100;
    if (p > pool)
      pool = p;
  }
  pool += 1 << 20; /* its header and class table */
  PmadStatus s = pmad_init(cls, (uint8_t)n, pct_of, pool);
  if (s != PMAD_OK) {
    fprintf(stderr, "rt: pmad_init(%zu classes, %zu B) failed: %d\n", n, pool, (int)s);
    exit(1);
  }
  printf("pmad,classes,%zu\n", n);
  printf("pmad,pool_mib,%.1f\n", pool / 1048576.0);
}
#else
#define RT_ALLOCATOR "malloc"
#define rt_malloc malloc
#define rt_free free
static void rt_heap_begin(int hot, size_t live, size_t lo, size_t hi)
{
  (void)hot, (void)live, (void)lo, (void)hi;
}
#endif

/* The traced step's calls, kept out of line so a tool can find them by name. */
__attribute__((noinline, used)) void rt_traced_free(void *p) { rt_free(p); }
__attribute__((noinline, used)) void *rt_traced_malloc(size_t n) { return rt_malloc(n); }

/* ---------- memory that is not the allocator's ---------- */

static void *buffer(size_t bytes)
{
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (p == MAP_FAILED)
    die("mmap");
  memset(p, 0, bytes);
  return p;
}

/* ---------- samples: named columns of n values ---------- */

#define MAXCOL 24

struct run {
  char seq[16];
  uint32_t ncol, n;
  double ns_per_tick, overhead, tick_q;
  char name[MAXCOL][24];
  uint32_t *col[MAXCOL];
};

static uint32_t *run_col(struct run *r, const char *name)
{
  for (uint32_t i = 0; i < r->ncol; i++)
    if (!strcmp(r->name[i], name))
      return r->col[i];
  return NULL;
}

static uint32_t *run_add(struct run *r, const char *name)
{
  if (r->ncol == MAXCOL) {
    fprintf(stderr, "rt: too many columns\n");
    exit(1);
  }
  snprintf(r->name[r->ncol], sizeof r->name[0], "%s", name);
  r->col[r->ncol] = buffer((size_t)r->n * sizeof(uint32_t));
  return r->col[r->ncol++];
}

static const char raw_magic[8] = "RTRAW01";

static void run_save(const struct run *r, const char *path)
{
  FILE *f = fopen(path, "wb");
  if (!f)
    die(path);
  fwrite(raw_magic, 1, sizeof raw_magic, f);
  fwrite(r->seq, 1, sizeof r->seq, f);
  fwrite(&r->ncol, sizeof r->ncol, 1, f);
  fwrite(&r->n, sizeof r->n, 1, f);
  fwrite(&r->ns_per_tick, sizeof(double), 1, f);
  fwrite(&r->overhead, sizeof(double), 1, f);
  fwrite(&r->tick_q, sizeof(double), 1, f);
  for (uint32_t i = 0; i < r->ncol; i++) {
    fwrite(r->name[i], 1, sizeof r->name[i], f);
    fwrite(r->col[i], sizeof(uint32_t), r->n, f);
  }
  if (fclose(f) != 0)
    die(path);
}

static void run_load(struct run *r, const char *path)
{
  FILE *f = fopen(path, "rb");
  char magic[8];
  if (!f)
    die(path);
  memset(r, 0, sizeof *r);
  if (fread(magic, 1, 8, f) != 8 || memcmp(magic, raw_magic, 8) ||
      fread(r->seq, 1, sizeof r->seq, f) != sizeof r->seq ||
      fread(&r->ncol, sizeof r->ncol, 1, f) != 1 || fread(&r->n, sizeof r->n, 1, f) != 1 ||
      fread(&r->ns_per_tick, sizeof(double), 1, f) != 1 ||
      fread(&r->overhead, sizeof(double), 1, f) != 1 ||
      fread(&r->tick_q, sizeof(double), 1, f) != 1 || r->ncol > MAXCOL) {
    fprintf(stderr, "rt: %s: not a raw file of rt\n", path);
    exit(1);
  }
  r->seq[sizeof r->seq - 1] = 0;
  for (uint32_t i = 0; i < r->ncol; i++) {
    r->col[i] = malloc((size_t)r->n * sizeof(uint32_t));
    if (!r->col[i] || fread(r->name[i], 1, sizeof r->name[i], f) != sizeof r->name[i] ||
        fread(r->col[i], sizeof(uint32_t), r->n, f) != r->n) {
      fprintf(stderr, "rt: %s: truncated\n", path);
      exit(1);
    }
    r->name[i][sizeof r->name[i] - 1] = 0;
  }
  fclose(f);
}

/* ---------- statistics ---------- */

struct stat6 {
  size_t n;
  double p50, p99, p999, p9999, max;
  size_t max_step; /* step of the maximum */
  uint32_t max_size;
};

static uint32_t *sort_tmp, *sort_buf;
static size_t sort_cap;

static void sort_room(size_t n)
{
  if (n <= sort_cap)
    return;
  if (sort_cap) {
    munmap(sort_tmp, sort_cap * sizeof(uint32_t));
    munmap(sort_buf, sort_cap * sizeof(uint32_t));
  }
  sort_tmp = buffer(n * sizeof(uint32_t));
  sort_buf = buffer(n * sizeof(uint32_t));
  sort_cap = n;
}

/* Statistics of one or two columns of n samples (two: pooled, step = index / 2 when interleaved
 * is meant, here a then b; the step of the maximum is its index in its own column). */
static struct stat6 stats(const uint32_t *a, const uint32_t *b, size_t n, const uint32_t *size)
{
  struct stat6 s = {0};
  size_t m = b ? 2 * n : n, arg = 0;
  uint32_t mx = 0;
  sort_room(m);
  for (size_t i = 0; i < n; i++) {
    sort_buf[i] = a[i];
    if (a[i] > mx)
      mx = a[i], arg = i;
  }
  if (b)
    for (size_t i = 0; i < n; i++) {
      sort_buf[n + i] = b[i];
      if (b[i] > mx)
        mx = b[i], arg = i;
    }
  radix_sort(sort_buf, sort_tmp, m);
  s.n = m;
  s.p50 = pct(sort_buf, m, 50);
  s.p99 = pct(sort_buf, m, 99);
  s.p999 = pct(sort_buf, m, 99.9);
  s.p9999 = pct(sort_buf, m, 99.99);
  s.max = max_ns(sort_buf, m);
  s.max_step = arg;
  s.max_size = size ? size[arg] : 0;
  return s;
}

static void print_stat(const char *kind, const char *seq, const char *group, const struct stat6 *s)
{
  printf("rt,%s,%s,%s,%zu,%.1f,%.1f,%.1f,%.1f,%.1f,%zu,%u\n", kind, seq, group, s->n, s->p50,
         s->p99, s->p999, s->p9999, s->max, s->max_step, s->max_size);
}

/* The groups of a run: calls alone, their pairs (hot) and the two kinds pooled. A pair's sample
 * is the sum of two timed regions, so one overhead comes off here and the other in pct. */
static int group_stats(struct run *r, struct stat6 *out, char names[][24], int max)
{
  int k = 0;
  uint32_t *size = run_col(r, "size");
  const char *prefix[] = {"malloc_", "free_"};
  if (!strcmp(r->seq, "churn")) {
    uint32_t *f = run_col(r, "free"), *m = run_col(r, "malloc");
    out[k] = stats(f, NULL, r->n, size), snprintf(names[k++], 24, "free");
    out[k] = stats(m, NULL, r->n, size), snprintf(names[k++], 24, "malloc");
    out[k] = stats(f, m, r->n, size), snprintf(names[k++], 24, "calls");
    return k;
  }
  uint32_t *pair = malloc((size_t)r->n * sizeof(uint32_t));
  if (!pair)
    die("malloc");
  uint32_t ovh = (uint32_t)lround(overhead);
  for (uint32_t c = 0; c < r->ncol && k + 4 <= max; c++) {
    if (strncmp(r->name[c], prefix[0], strlen(prefix[0])))
      continue;
    const char *sz = r->name[c] + strlen(prefix[0]);
    char fname[32];
    snprintf(fname, sizeof fname, "%s%s", prefix[1], sz);
    uint32_t *m = r->col[c], *f = run_col(r, fname);
    if (!f)
      continue;
    for (uint32_t i = 0; i < r->n; i++) {
      uint64_t v = (uint64_t)m[i] + f[i];
      pair[i] = v > ovh ? (uint32_t)(v - ovh) : 0;
    }
    out[k] = stats(m, NULL, r->n, NULL), snprintf(names[k++], 24, "malloc_%s", sz);
    out[k] = stats(f, NULL, r->n, NULL), snprintf(names[k++], 24, "free_%s", sz);
    out[k] = stats(pair, NULL, r->n, NULL), snprintf(names[k++], 24, "pair_%s", sz);
    out[k] = stats(m, f, r->n, NULL), snprintf(names[k++], 24, "calls_%s", sz);
  }
  free(pair);
  return k;
}

/* ---------- start-up: the real-time recipe ---------- */

/* Writes every page of every private writable anonymous mapping once (each byte written is the
 * one read: nothing changes). Some virtual machines back a page the guest populated (MAP_POPULATE,
 * mlockall) only at its first write, a host fault the guest never counts (see the results): this
 * takes that cost out of the allocator's calls for the memory mapped so far. */
static void touch_mappings(void)
{
  static char maps[1 << 20];
  int fd = open("/proc/self/maps", O_RDONLY);
  size_t len = 0, pages = 0;
  ssize_t got;
  if (fd < 0)
    die("/proc/self/maps");
  while (len < sizeof maps - 1 && (got = read(fd, maps + len, sizeof maps - 1 - len)) > 0)
    len += (size_t)got;
  close(fd);
  maps[len] = 0;
  for (char *line = maps, *next; line && *line; line = next) {
    next = strchr(line, '\n');
    if (next)
      *next++ = 0;
    unsigned long lo, hi, inode;
    char perms[8];
    int path_at = 0;
    if (sscanf(line, "%lx-%lx %7s %*s %*s %lu %n", &lo, &hi, perms, &inode, &path_at) < 4)
      continue;
    const char *path = path_at ? line + path_at : "";
    if (perms[0] != 'r' || perms[1] != 'w' || perms[3] != 'p' || inode != 0 ||
        !strcmp(path, "[stack]"))
      continue;
    for (unsigned long a = lo; a < hi; a += 4096, pages++) {
      volatile char *q = (volatile char *)a;
      *q = *q;
    }
  }
  printf("setup,touched_pages,%zu\n", pages);
}

static void rt_setup(int cpu, int fifo, int mlock, int recipe, int touch)
{
  if (recipe) {
    printf("setup,mallopt_trim_threshold_ret,%d\n", mallopt(M_TRIM_THRESHOLD, -1));
    printf("setup,mallopt_mmap_max_ret,%d\n", mallopt(M_MMAP_MAX, 0));
  }
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof set, &set) != 0)
    die("sched_getaffinity");
  if (cpu < 0)
    for (int c = 0; c < CPU_SETSIZE; c++)
      if (CPU_ISSET(c, &set))
        cpu = c;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  if (sched_setaffinity(0, sizeof set, &set) != 0)
    die("sched_setaffinity");
  printf("setup,cpu,%d\n", cpu);
  if (fifo) {
    struct sched_param sp = {.sched_priority = 10};
    if (sched_setscheduler(0, SCHED_FIFO, &sp) != 0)
      printf("setup,sched_fifo,refused: %s\n", strerror(errno));
    else
      printf("setup,sched_fifo,10\n");
  }
  if (mlock) {
    if (mlockall(MCL_CURRENT | MCL_FUTURE) != 0)
      printf("setup,mlockall,failed: %s\n", strerror(errno));
    else
      printf("setup,mlockall,ok\n");
  }
  if (touch)
    touch_mappings();
  printf("setup,vmrss_kb,%ld\n", status_kb("VmRSS:"));
  printf("setup,vmlck_kb,%ld\n", status_kb("VmLck:"));
}

static struct rusage ru0;

static void timed_begin(void)
{
  getrusage(RUSAGE_SELF, &ru0);
  (void)!access("/rt-timed-begin", F_OK);
}

static void timed_end(const char *seq)
{
  struct rusage ru1;
  (void)!access("/rt-timed-end", F_OK);
  getrusage(RUSAGE_SELF, &ru1);
  printf("faults,%s,minflt,%ld\n", seq, ru1.ru_minflt - ru0.ru_minflt);
  printf("faults,%s,majflt,%ld\n", seq, ru1.ru_majflt - ru0.ru_majflt);
  printf("faults,%s,nivcsw,%ld\n", seq, ru1.ru_nivcsw - ru0.ru_nivcsw);
  printf("mem,%s,vmrss_kb,%ld\n", seq, status_kb("VmRSS:"));
  printf("mem,%s,vmlck_kb,%ld\n", seq, status_kb("VmLck:"));
}

/* ---------- the sequences (random numbers: rng.h) ---------- */

static const size_t hot_sizes[] = {16, 64, 256, 1024, 4096};

static void seq_hot(struct run *r)
{
  size_t nsz = sizeof hot_sizes / sizeof hot_sizes[0];
  uint32_t *m[8], *f[8];
  for (size_t k = 0; k < nsz; k++) {
    char name[24];
    snprintf(name, sizeof name, "malloc_%zu", hot_sizes[k]);
    m[k] = run_add(r, name);
    snprintf(name, sizeof name, "free_%zu", hot_sizes[k]);
    f[k] = run_add(r, name);
  }
  rt_heap_begin(1, 0, 0, 0);
  timed_begin();
  for (size_t k = 0; k < nsz; k++) {
    size_t sz = hot_sizes[k];
    for (int i = 0; i < 10000; i++) {
      void *p = rt_malloc(sz);
      ESCAPE(p);
      *(volatile char *)p = (char)i;
      rt_free(p);
    }
    for (uint32_t i = 0; i < r->n; i++) {
      uint64_t t0 = ts();
      void *p = rt_malloc(sz);
      uint64_t t1 = te();
      ESCAPE(p);
      *(volatile char *)p = (char)i;
      uint64_t t2 = ts();
      rt_free(p);
      uint64_t t3 = te();
      m[k][i] = sample(t0, t1);
      f[k][i] = sample(t2, t3);
    }
  }
  timed_end("hot");
}

static void seq_churn(struct run *r, size_t live, size_t lo, size_t hi, size_t warm, int cold,
                      size_t pretouch, long trace_step)
{
  uint32_t *fs = run_add(r, "free"), *ms = run_add(r, "malloc"), *szs = run_add(r, "size");
  char **slot = buffer(live * sizeof *slot);
  size_t span = hi - lo + 1;
  rt_heap_begin(0, live, lo, hi);
  if (pretouch) { /* write every page of that much heap once, then give it back */
    size_t nb = pretouch >> 20;
    char **big = buffer((nb + 1) * sizeof *big);
    for (size_t b = 0; b < nb; b++) {
      big[b] = rt_malloc(1 << 20);
      if (!big[b]) {
        fprintf(stderr, "rt: --pretouch: malloc(1 MiB) %zu of %zu failed\n", b, nb);
        exit(1);
      }
      for (size_t o = 0; o < 1 << 20; o += 4096)
        big[b][o] = 1;
    }
    for (size_t b = 0; b < nb; b++)
      rt_free(big[b]);
    munmap(big, (nb + 1) * sizeof *big);
  }
  for (size_t i = 0; i < live; i++) { /* fill, untimed */
    size_t sz = lo + rng() % span;
    slot[i] = rt_malloc(sz);
    if (!slot[i]) {
      fprintf(stderr, "rt: churn fill: malloc(%zu) for block %zu of %zu failed\n", sz, i, live);
      exit(1);
    }
    slot[i][0] = slot[i][sz - 1] = 1;
  }
  for (size_t s = 0; s < warm; s++) {
    size_t i = rng() % live, sz = lo + rng() % span;
    rt_free(slot[i]);
    slot[i] = rt_malloc(sz);
    if (!slot[i]) {
      fprintf(stderr, "rt: churn warm-up step %zu: malloc(%zu) failed\n", s, sz);
      exit(1);
    }
    slot[i][0] = slot[i][sz - 1] = 1;
  }
  timed_begin();
  for (uint32_t s = 0; s < r->n; s++) {
    size_t i = rng() % live, sz = lo + rng() % span;
    char *old = slot[i], *p;
    uint64_t t0, t1, t2, t3;
    if (!cold)
      (void)*(volatile char *)old;
    if ((long)s != trace_step) {
      t0 = ts();
      rt_free(old);
      t1 = te();
      t2 = ts();
      p = rt_malloc(sz);
      t3 = te();
    } else {
      struct rusage a, b, c;
      getrusage(RUSAGE_SELF, &a);
      t0 = ts();
      rt_traced_free(old);
      t1 = te();
      getrusage(RUSAGE_SELF, &b);
      t2 = ts();
      p = rt_traced_malloc(sz);
      t3 = te();
      getrusage(RUSAGE_SELF, &c);
      printf("trace,%u,free_minflt,%ld\n", s, b.ru_minflt - a.ru_minflt);
      printf("trace,%u,malloc_minflt,%ld\n", s, c.ru_minflt - b.ru_minflt);
      printf("trace,%u,malloc_size,%zu\n", s, sz);
    }
    ESCAPE(p);
    if (!p) {
      fprintf(stderr, "rt: churn step %u: malloc(%zu) failed\n", s, sz);
      exit(1);
    }
    p[0] = p[sz - 1] = 1;
    slot[i] = p;
    fs[s] = sample(t0, t1);
    ms[s] = sample(t2, t3);
    szs[s] = (uint32_t)sz;
  }
  timed_end("churn");
  if (trace_step >= 0 && (uint64_t)trace_step < r->n)
    printf("trace,%ld,free_ns,%.1f\ntrace,%ld,malloc_ns,%.1f\n", trace_step,
           (fs[trace_step] - overhead) * ns_per_tick, trace_step,
           (ms[trace_step] - overhead) * ns_per_tick);
}

/* ---------- merge: several runs of one sequence ---------- */

static int cmp_double(const void *a, const void *b)
{
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static int merge(int nfile, char **files)
{
  struct run lo, cur;
  enum { MAXG = 32, MAXF = 64 };
  static struct stat6 single[MAXF][MAXG];
  char names[MAXG][24];
  double ovh[MAXF];
  int ng = 0;
  if (nfile < 1 || nfile > MAXF) {
    fprintf(stderr, "rt merge: 1 to %d raw files\n", MAXF);
    return 2;
  }
  for (int fi = 0; fi < nfile; fi++) {
    struct run *r = fi == 0 ? &lo : &cur;
    run_load(r, files[fi]);
    ns_per_tick = r->ns_per_tick, overhead = r->overhead, tick_q = r->tick_q;
    ovh[fi] = r->overhead;
    if (fi > 0) {
      if (strcmp(cur.seq, lo.seq) || cur.n != lo.n || cur.ncol != lo.ncol) {
        fprintf(stderr, "rt merge: %s is not a run of the same sequence as %s\n", files[fi],
                files[0]);
        return 1;
      }
    }
    int g = group_stats(r, single[fi], names, MAXG);
    if (fi == 0)
      ng = g;
    for (int k = 0; k < g; k++)
      print_stat("single", r->seq, names[k], &single[fi][k]);
    if (fi > 0) {
      for (uint32_t c = 0; c < lo.ncol; c++) {
        if (!strcmp(lo.name[c], "size"))
          continue;
        uint32_t *a = lo.col[c], *b = run_col(&cur, lo.name[c]);
        for (uint32_t i = 0; i < lo.n; i++)
          if (b[i] < a[i])
            a[i] = b[i];
      }
      for (uint32_t c = 0; c < cur.ncol; c++)
        free(cur.col[c]);
    }
  }
  /* the runs' calibrations differ by a fraction of a ns: the median overhead serves the min */
  qsort(ovh, (size_t)nfile, sizeof ovh[0], cmp_double);
  overhead = ovh[nfile / 2];
  ns_per_tick = lo.ns_per_tick, tick_q = lo.tick_q;
  struct stat6 least[MAXG];
  group_stats(&lo, least, names, MAXG);
  for (int k = 0; k < ng; k++) {
    print_stat("min", lo.seq, names[k], &least[k]);
    double v[5][MAXF];
    for (int fi = 0; fi < nfile; fi++) {
      v[0][fi] = single[fi][k].p50, v[1][fi] = single[fi][k].p99;
      v[2][fi] = single[fi][k].p999, v[3][fi] = single[fi][k].p9999;
      v[4][fi] = single[fi][k].max;
    }
    struct stat6 med = least[k], worst = least[k];
    double *mf[5] = {&med.p50, &med.p99, &med.p999, &med.p9999, &med.max};
    double *wf[5] = {&worst.p50, &worst.p99, &worst.p999, &worst.p9999, &worst.max};
    for (int j = 0; j < 5; j++) {
      qsort(v[j], (size_t)nfile, sizeof(double), cmp_double);
      *mf[j] = v[j][nfile / 2];
      *wf[j] = v[j][nfile - 1];
    }
    med.max_step = worst.max_step = 0;
    med.max_size = worst.max_size = 0;
    print_stat("single_median", lo.seq, names[k], &med);
    print_stat("single_worst", lo.seq, names[k], &worst);
  }
  /* the slowest steps of each kind by their least time: what to rerun with --trace-step */
  uint32_t *size = run_col(&lo, "size");
  for (uint32_t c = 0; size && c < lo.ncol; c++) {
    if (!strcmp(lo.name[c], "size"))
      continue;
    uint32_t *a = lo.col[c], top[10] = {0};
    size_t at[10] = {0}, nt = 0;
    for (uint32_t i = 0; i < lo.n; i++) {
      if (nt == 10 && a[i] <= top[9])
        continue;
      size_t j = nt < 10 ? nt++ : 9;
      for (; j > 0 && top[j - 1] < a[i]; j--)
        top[j] = top[j - 1], at[j] = at[j - 1];
      top[j] = a[i], at[j] = i;
    }
    for (size_t j = 0; j < nt; j++)
      printf("top,%s,%s,%zu,%zu,%.1f,%u\n", lo.seq, lo.name[c], j + 1, at[j],
             (top[j] - overhead) * ns_per_tick, size[at[j]]);
  }
  printf("merge,runs,%d\n", nfile);
  return 0;
}

/* ---------- main ---------- */

static size_t arg_size(const char *s)
{
  char *end;
  double v = strtod(s, &end);
  if (end == s || v < 0) {
    fprintf(stderr, "rt: %s: not a count\n", s);
    exit(2);
  }
  if (*end == 'k' || *end == 'K')
    v *= 1e3, end++;
  else if (*end == 'm' || *end == 'M')
    v *= 1e6, end++;
  if (*end) {
    fprintf(stderr, "rt: %s: unknown suffix (k or M)\n", s);
    exit(2);
  }
  return (size_t)v;
}

static void usage(void)
{
  fprintf(stderr, "usage: rt hot|churn [--samples N] [--steps N] [--live N] [--min B] [--max B]\n"
                  "          [--seed S] [--warm N] [--cold] [--pretouch BYTES] [--cpu N] [--fifo]\n"
                  "          [--no-mlock] [--no-mallopt] [--touch] [--trace-step K] [--untimed]\n"
                  "          [--out FILE]\n"
                  "       rt merge RAW...\n");
  exit(2);
}

int main(int argc, char **argv)
{
  (void)mean_ns; /* tsc.h's, not used here */
  if (argc < 2)
    usage();
  setvbuf(stdout, NULL, _IOLBF, 0);
  if (!strcmp(argv[1], "merge"))
    return merge(argc - 2, argv + 2);
  int hot = !strcmp(argv[1], "hot");
  if (!hot && strcmp(argv[1], "churn"))
    usage();
  size_t samples = 200000, steps = 2000000, live = 262144, lo = 16, hi = 1024, warm = 0,
         pretouch = 0;
  uint64_t seed = 43;
  int cpu = -1, fifo = 0, mlock = 1, recipe = 1, cold = 0, touch = 0;
  long trace_step = -1;
  const char *out = NULL;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--fifo")) fifo = 1;
    else if (!strcmp(a, "--no-mlock")) mlock = 0;
    else if (!strcmp(a, "--no-mallopt")) recipe = 0;
    else if (!strcmp(a, "--cold")) cold = 1;
    else if (!strcmp(a, "--untimed")) untimed = 1;
    else if (!strcmp(a, "--touch")) touch = 1;
    else if (v && !strcmp(a, "--samples")) samples = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--steps")) steps = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--live")) live = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--min")) lo = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--max")) hi = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--warm")) warm = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--pretouch")) pretouch = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--seed")) seed = strtoull(argv[++i], NULL, 0);
    else if (v && !strcmp(a, "--cpu")) cpu = (int)arg_size(argv[++i]);
    else if (v && !strcmp(a, "--trace-step")) trace_step = (long)arg_size(argv[++i]);
    else if (v && !strcmp(a, "--out")) out = argv[++i];
    else usage();
  }
  if (lo < 1 || hi < lo || live < 1 || samples < 1 || steps < 1 || steps > UINT32_MAX ||
      samples > UINT32_MAX) {
    fprintf(stderr, "rt: need 1 <= --min <= --max, --live >= 1, 1 <= --samples, --steps < 2^32\n");
    return 2;
  }
  rng_state = seed;
  struct run r = {0};
  snprintf(r.seq, sizeof r.seq, "%s", argv[1]);
  r.n = (uint32_t)(hot ? samples : steps);

  printf("setup,allocator_calls,%s\n", RT_ALLOCATOR);
  sort_room(hot ? 2 * r.n : 2 * (size_t)r.n); /* before mlockall: no allocator, no fault later */
  rt_setup(cpu, fifo, mlock, recipe, touch);
  if (untimed)
    ns_per_tick = 1, overhead = 0, tick_q = 1;
  else
    tsc_calibrate(50000000u, 5, sort_buf, sort_tmp, sort_cap);
  r.ns_per_tick = ns_per_tick, r.overhead = overhead, r.tick_q = tick_q;
  printf("timer,source,rdtsc (lfence; rdtsc ... rdtscp; lfence)\n");
  printf("timer,ghz,%.4f\n", 1.0 / ns_per_tick);
  printf("timer,resolution_ns,%.2f\n", tick_q * ns_per_tick);
  printf("timer,overhead_ns,%.2f\n", overhead * ns_per_tick);

  if (hot)
    seq_hot(&r);
  else
    seq_churn(&r, live, lo, hi, warm, cold, pretouch, trace_step);

  struct stat6 st[32];
  char names[32][24];
  int ng = group_stats(&r, st, names, 32);
  for (int k = 0; k < ng; k++)
    print_stat("single", r.seq, names[k], &st[k]);
  if (out)
    run_save(&r, out);
  return 0;
}
