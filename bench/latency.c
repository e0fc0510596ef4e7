/* latency: per-call latency of malloc and free, timed with the TSC.
 *
 * One program, run once per allocator with only LD_PRELOAD changing. Every call under test is a
 * plain malloc()/free() through the PLT (built with -fno-builtin, pointers escaped), bracketed by
 *   lfence; rdtsc  ...call...  rdtscp; lfence
 * The median cost of an empty bracket is subtracted from every sample; ticks are turned into
 * nanoseconds with a calibration against clock_gettime(CLOCK_MONOTONIC_RAW). Samples go to buffers
 * mmap'ed (and pre-faulted) before the run, so the allocator under test never holds them, and
 * percentiles are computed after the run with a radix sort that allocates nothing (the timer, its
 * calibration, the sort and the percentiles are bench/tsc.h's, shared with scale.c).
 *
 * Modes (one or more; each prints CSV lines "workload,metric,value" on stdout):
 *   hot    malloc alone, free alone and the malloc+free pair at 16 B .. 64 KiB
 *   churn  a live set of ~100k blocks of 16 B .. 64 KiB whose size distribution drifts across the
 *          run; each step frees a random block and allocates a new one in its slot (2 ops/step).
 *          Per-window P50/P99/P99.99/max (window = --window ops) for the drift plot.
 *   mt     a producer thread mallocs, a consumer thread frees (blocks cross threads through a
 *          single-producer single-consumer ring); latency of each side and pairs per second.
 * Every mode also prints rss_delta_kb: the peak resident set during the mode (VmHWM, reset at the
 * start of the mode) minus the resident set at its start (so the sample buffers are not counted).
 *
 * Options: --full (long run), --samples N (hot, per size and op), --ops N (churn),
 *          --live N (churn), --window N (churn), --pairs N (mt), --mt-size B, --seed S
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "rng.h"
#include "status.h"
#include "tsc.h"

/* ---------- utilities ---------- */

/* Keeps the compiler from proving anything about p (so malloc/free pairs stay). */
#define ESCAPE(p) __asm__ volatile("" : : "r"(p) : "memory")

static void die(const char *what)
{
  fprintf(stderr, "latency: %s: %s\n", what, strerror(errno));
  exit(1);
}

/* Buffers that are not the allocator's: mmap'ed and pre-faulted. */
static void *sample_buffer(size_t bytes)
{
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (p == MAP_FAILED)
    die("mmap");
  memset(p, 0, bytes); /* fault in even where MAP_POPULATE is ignored */
  return p;
}

/* ---------- percentiles ---------- */

/* Prints P50, P99, P99.9, P99.99, max, mean and P99.9/P50 of raw samples (sorts them in place). */
static void report(const char *workload, const char *what, uint32_t *samples, uint32_t *tmp,
                   size_t n)
{
  double mean = mean_ns(samples, n);
  radix_sort(samples, tmp, n);
  double p50 = pct(samples, n, 50), p999 = pct(samples, n, 99.9);
  printf("%s,%s_p50_ns,%.2f\n", workload, what, p50);
  printf("%s,%s_p99_ns,%.2f\n", workload, what, pct(samples, n, 99));
  printf("%s,%s_p99.9_ns,%.2f\n", workload, what, p999);
  printf("%s,%s_p99.99_ns,%.2f\n", workload, what, pct(samples, n, 99.99));
  printf("%s,%s_max_ns,%.2f\n", workload, what, max_ns(samples, n));
  printf("%s,%s_mean_ns,%.2f\n", workload, what, mean);
  /* a median below half a counter step is taken as half a step */
  double floor_ns = tick_q * ns_per_tick / 2;
  printf("%s,%s_tail_p99.9/p50,%.3f\n", workload, what, p999 / (p50 > floor_ns ? p50 : floor_ns));
}

/* ---------- calibration ---------- */

/* The timer (tsc.h) over 50 ms (200 ms in --full), the overhead the median of 5 rounds; prints it
 * and what an empty region reads as once the overhead is removed (should be ~0). */
static void calibrate(int full, uint32_t *buf, uint32_t *tmp, size_t cap)
{
  tsc_calibrate(full ? 200000000u : 50000000u, 5, buf, tmp, cap);
  printf("timer,ghz,%.4f\n", 1.0 / ns_per_tick);
  printf("timer,resolution_ns,%.2f\n", tick_q * ns_per_tick);
  printf("timer,overhead_ns,%.2f\n", overhead * ns_per_tick);
  size_t n = cap < 200000 ? cap : 200000;
  for (size_t i = 0; i < n; i++) {
    uint64_t a = t_start();
    uint64_t b = t_stop();
    buf[i] = sample(a, b);
  }
  radix_sort(buf, tmp, n);
  printf("timer,empty_p50_ns,%.2f\n", pct(buf, n, 50));
  printf("timer,empty_p99.9_ns,%.2f\n", pct(buf, n, 99.9));
  printf("timer,empty_mean_ns,%.2f\n", mean_ns(buf, n));
}

/* ---------- resident set (status_kb: status.h) ---------- */

static long rss_start;

static void rss_begin(void)
{
  int fd = open("/proc/self/clear_refs", O_WRONLY); /* "5" resets VmHWM to the current RSS */
  if (fd >= 0) {
    if (write(fd, "5", 1) != 1) { /* older kernels: the delta then includes earlier peaks */ }
    close(fd);
  }
  rss_start = status_kb("VmRSS:");
}

static void rss_end(const char *workload)
{
  long hwm = status_kb("VmHWM:");
  if (hwm >= 0 && rss_start >= 0)
    printf("%s,rss_delta_kb,%ld\n", workload, hwm - rss_start);
}

/* ---------- random numbers (rng.h) ---------- */

static inline double rng_unit(void) { return (double)(rng() >> 11) * 0x1.0p-53; }

/* ---------- hot path ---------- */

static const size_t hot_sizes[] = {16, 64, 256, 1024, 4096, 65536};

static void run_hot(size_t samples, uint32_t *b1, uint32_t *b2, uint32_t *tmp)
{
  rss_begin();
  for (size_t k = 0; k < sizeof hot_sizes / sizeof hot_sizes[0]; k++) {
    size_t sz = hot_sizes[k];
    char what[64];
    for (size_t i = 0; i < 10000; i++) { /* warm the path and the caches */
      void *p = malloc(sz);
      ESCAPE(p);
      *(volatile char *)p = (char)i;
      free(p);
    }
    /* malloc alone and free alone, timed separately in the same loop */
    for (size_t i = 0; i < samples; i++) {
      uint64_t t0 = t_start();
      void *p = malloc(sz);
      uint64_t t1 = t_stop();
      ESCAPE(p);
      *(volatile char *)p = (char)i; /* the program uses its block */
      uint64_t t2 = t_start();
      free(p);
      uint64_t t3 = t_stop();
      b1[i] = sample(t0, t1);
      b2[i] = sample(t2, t3);
    }
    snprintf(what, sizeof what, "malloc_%zu", sz);
    report("latency_hot", what, b1, tmp, samples);
    snprintf(what, sizeof what, "free_%zu", sz);
    report("latency_hot", what, b2, tmp, samples);
    /* the pair in one timed region */
    for (size_t i = 0; i < samples; i++) {
      uint64_t t0 = t_start();
      void *p = malloc(sz);
      ESCAPE(p);
      free(p);
      uint64_t t1 = t_stop();
      b1[i] = sample(t0, t1);
    }
    snprintf(what, sizeof what, "pair_%zu", sz);
    report("latency_hot", what, b1, tmp, samples);
  }
  rss_end("latency_hot");
}

/* ---------- fragmenting churn with a drifting size distribution ---------- */

/* The distribution at progress t in [0,1]:
 *  - 70 %: small blocks, uniform 16..256 B;
 *  - 30 %: log-uniform over [c-1.5, c+1.5] octaves (clipped to 16 B .. 64 KiB) around a centre c(t)
 *    that sweeps 2^6 = 64 B -> 2^16 = 64 KiB -> 64 B along a cosine over the run.
 * So the classes in demand move across the run while the live set keeps blocks of the old sizes:
 * the fragmentation a class-segregated allocator has to live with. */
static inline double churn_center(double t) { return 6.0 + 10.0 * (0.5 - 0.5 * cos(2 * M_PI * t)); }

static inline size_t churn_size(double t)
{
  if (rng_unit() < 0.7)
    return 16 + (size_t)(rng() % 241);
  double c = churn_center(t);
  double x = c - 1.5 + 3.0 * rng_unit();
  if (x < 4)
    x = 4;
  if (x > 16)
    x = 16;
  size_t s = (size_t)exp2(x);
  return s < 16 ? 16 : s > 65536 ? 65536 : s;
}

/* The program touches its block: the first bytes, and one byte per page. Not timed. */
static inline void touch(char *p, size_t sz)
{
  p[0] = 1;
  for (size_t o = 4096; o < sz; o += 4096)
    p[o] = 1;
  p[sz - 1] = 1;
}

static void run_churn(size_t ops, size_t live, size_t window, uint32_t *all, uint32_t *sub,
                      uint32_t *tmp)
{
  void **slot = sample_buffer(live * sizeof *slot);
  size_t steps = ops / 2; /* one step = free a random block + malloc its replacement */
  ops = steps * 2;
  rss_begin();
  for (size_t i = 0; i < live; i++) { /* fill (not timed) */
    size_t sz = churn_size(0);
    slot[i] = malloc(sz);
    if (!slot[i]) {
      fprintf(stderr, "latency: churn fill: malloc(%zu) for block %zu of %zu failed: %s\n", sz, i,
              live, strerror(errno));
      exit(1);
    }
    touch(slot[i], sz);
  }
  for (size_t s = 0; s < steps; s++) {
    double t = (double)s / (double)steps;
    size_t i = rng() % live;
    size_t sz = churn_size(t);
    void *old = slot[i];
    uint64_t t0 = t_start();
    free(old);
    uint64_t t1 = t_stop();
    uint64_t t2 = t_start();
    void *p = malloc(sz);
    uint64_t t3 = t_stop();
    ESCAPE(p);
    if (!p) {
      fprintf(stderr, "latency: churn step %zu of %zu: malloc(%zu) failed: %s\n", s, steps, sz,
              strerror(errno));
      exit(1);
    }
    touch(p, sz);
    slot[i] = p;
    all[2 * s] = sample(t0, t1);
    all[2 * s + 1] = sample(t2, t3);
  }
  rss_end("latency_churn");
  for (size_t i = 0; i < live; i++)
    free(slot[i]);
  munmap(slot, live * sizeof *slot);

  printf("latency_churn,ops,%zu\n", ops);
  printf("latency_churn,live_blocks,%zu\n", live);
  /* windows over both kinds of operation, in run order */
  size_t nwin = (ops + window - 1) / window;
  for (size_t w = 0; w < nwin; w++) {
    size_t a = w * window, n = ops - a < window ? ops - a : window;
    memcpy(sub, all + a, n * sizeof *sub);
    radix_sort(sub, tmp, n);
    double mid = ((double)a + n / 2.0) / (double)ops;
    printf("churn_window,w%03zu_ops_m,%.3f\n", w, (a + n / 2.0) / 1e6); /* window middle */
    printf("churn_window,w%03zu_center_b,%.0f\n", w, exp2(churn_center(mid)));
    printf("churn_window,w%03zu_p50_ns,%.2f\n", w, pct(sub, n, 50));
    printf("churn_window,w%03zu_p99_ns,%.2f\n", w, pct(sub, n, 99));
    printf("churn_window,w%03zu_p99.99_ns,%.2f\n", w, pct(sub, n, 99.99));
    printf("churn_window,w%03zu_max_ns,%.2f\n", w, max_ns(sub, n));
  }
  /* whole run, per kind: frees at even indexes, mallocs at odd */
  for (size_t s = 0; s < steps; s++)
    sub[s] = all[2 * s];
  report("latency_churn", "free", sub, tmp, steps);
  for (size_t s = 0; s < steps; s++)
    sub[s] = all[2 * s + 1];
  report("latency_churn", "malloc", sub, tmp, steps);
  report("latency_churn", "all", all, tmp, ops);
}

/* ---------- producer/consumer across two threads ---------- */

#define RING 4096 /* power of two */

struct ring {
  _Alignas(64) _Atomic size_t head; /* written by the producer */
  _Alignas(64) _Atomic size_t tail; /* written by the consumer */
  _Alignas(64) void *slot[RING];
};

struct mt_arg {
  struct ring *r;
  size_t pairs, size;
  uint32_t *samples;
};

/* Spin briefly, then yield: on a 2-core machine shared with other work the other thread may not be
 * running, and pure spinning would then measure the scheduler. Never inside a timed region. */
static inline void backoff(unsigned *spins)
{
  if (++*spins < 2000)
    __asm__ volatile("pause" ::: "memory");
  else
    sched_yield();
}

static void *consumer(void *arg)
{
  struct mt_arg *a = arg;
  struct ring *r = a->r;
  size_t tail = 0;
  for (size_t i = 0; i < a->pairs; i++) {
    unsigned spins = 0;
    while (atomic_load_explicit(&r->head, memory_order_acquire) == tail)
      backoff(&spins);
    void *p = r->slot[tail & (RING - 1)];
    atomic_store_explicit(&r->tail, ++tail, memory_order_release);
    uint64_t t0 = t_start();
    free(p);
    uint64_t t1 = t_stop();
    a->samples[i] = sample(t0, t1);
  }
  return NULL;
}

static void run_mt(size_t pairs, size_t size, uint32_t *pm, uint32_t *cf, uint32_t *tmp)
{
  struct ring *r = sample_buffer(sizeof *r);
  struct mt_arg carg = {r, pairs, size, cf};
  pthread_t th;
  rss_begin();
  /* warm both threads' paths a little (not timed, not counted) */
  for (int i = 0; i < 1000; i++) {
    void *p = malloc(size);
    ESCAPE(p);
    free(p);
  }
  uint64_t w0 = now_ns();
  if (pthread_create(&th, NULL, consumer, &carg) != 0)
    die("pthread_create");
  size_t head = 0;
  for (size_t i = 0; i < pairs; i++) {
    uint64_t t0 = t_start();
    void *p = malloc(size);
    uint64_t t1 = t_stop();
    ESCAPE(p);
    if (!p)
      die("malloc");
    *(volatile char *)p = 1;
    pm[i] = sample(t0, t1);
    unsigned spins = 0;
    while (head - atomic_load_explicit(&r->tail, memory_order_acquire) >= RING)
      backoff(&spins);
    r->slot[head & (RING - 1)] = p;
    atomic_store_explicit(&r->head, ++head, memory_order_release);
  }
  pthread_join(th, NULL);
  uint64_t w1 = now_ns();
  rss_end("latency_mt");
  printf("latency_mt,size_b,%zu\n", size);
  printf("latency_mt,pairs_per_s,%.0f\n", pairs / ((w1 - w0) / 1e9));
  report("latency_mt", "producer_malloc", pm, tmp, pairs);
  report("latency_mt", "consumer_free", cf, tmp, pairs);
  munmap(r, sizeof *r);
}

/* ---------- main ---------- */

static size_t arg_size(const char *s)
{
  char *end;
  double v = strtod(s, &end);
  if (*end == 'k' || *end == 'K')
    v *= 1e3;
  else if (*end == 'm' || *end == 'M')
    v *= 1e6;
  return (size_t)v;
}

int main(int argc, char **argv)
{
  int full = 0, do_hot = 0, do_churn = 0, do_mt = 0;
  size_t samples = 0, ops = 0, live = 100000, window = 0, pairs = 0, mt_size = 64;
  uint64_t seed = 42;
  for (int i = 1; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--full")) full = 1;
    else if (!strcmp(a, "--quick")) full = 0;
    else if (!strcmp(a, "hot")) do_hot = 1;
    else if (!strcmp(a, "churn")) do_churn = 1;
    else if (!strcmp(a, "mt")) do_mt = 1;
    else if (!strcmp(a, "all")) do_hot = do_churn = do_mt = 1;
    else if (v && !strcmp(a, "--samples")) samples = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--ops")) ops = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--live")) live = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--window")) window = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--pairs")) pairs = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--mt-size")) mt_size = arg_size(argv[++i]);
    else if (v && !strcmp(a, "--seed")) seed = strtoull(argv[++i], NULL, 0);
    else {
      fprintf(stderr,
              "usage: latency [--full] [--samples N] [--ops N] [--live N] [--window N]\n"
              "               [--pairs N] [--mt-size B] [--seed S] hot|churn|mt|all...\n");
      return 2;
    }
  }
  if (!do_hot && !do_churn && !do_mt)
    do_hot = do_churn = do_mt = 1;
  if (!samples) samples = full ? 1000000 : 200000;
  if (!ops) ops = full ? 12000000 : 2000000;
  if (!window) window = full ? 1000000 : 200000;
  if (!pairs) pairs = full ? 5000000 : 1000000;
  if (live < 1) live = 1;
  if (window < 1) window = 1;
  ops -= ops % 2;
  if (ops < 2) ops = 2;

  size_t cap = 200000;
  if (do_hot && samples > cap) cap = samples;
  if (do_churn && ops > cap) cap = ops;
  if (do_mt && pairs > cap) cap = pairs;
  /* all sample memory is mapped and faulted in here, before any timed call */
  uint32_t *b1 = sample_buffer(cap * sizeof *b1);
  uint32_t *b2 = sample_buffer(cap * sizeof *b2);
  uint32_t *tmp = sample_buffer(cap * sizeof *tmp);
  rng_state = seed;
  setvbuf(stdout, NULL, _IOLBF, 0);

  calibrate(full, b1, tmp, cap);
  if (do_hot) run_hot(samples, b1, b2, tmp);
  if (do_churn) run_churn(ops, live, window, b1, b2, tmp);
  if (do_mt) run_mt(pairs, mt_size, b1, b2, tmp);
  return 0;
}
