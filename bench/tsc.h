/* tsc.h: the TSC timer of latency.c and scale.c (static functions; include after the system
 * headers, with _GNU_SOURCE defined).
 *
 * A timed call is bracketed by
 *   lfence; rdtsc  ...call...  rdtscp; lfence
 * (t_start, t_stop) and kept as a raw sample of ticks (sample). tsc_calibrate measures the ticks
 * per ns against clock_gettime(CLOCK_MONOTONIC_RAW), the counter's step tick_q (the gcd of
 * back-to-back differences) and the overhead of an empty timed region. Raw samples are sorted by a
 * radix sort that allocates nothing; pct, mean_ns and max_ns turn them into ns with the overhead
 * removed, pct interpolating within a counter step.
 */
#ifndef BENCH_TSC_H
#define BENCH_TSC_H
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

/* ---------- timing ---------- */

static inline uint64_t t_start(void)
{
  uint32_t lo, hi;
  __asm__ volatile("lfence\n\trdtsc\n\tlfence" : "=a"(lo), "=d"(hi) : : "memory");
  return ((uint64_t)hi << 32) | lo;
}

static inline uint64_t t_stop(void)
{
  uint32_t lo, hi, aux;
  __asm__ volatile("rdtscp\n\tlfence" : "=a"(lo), "=d"(hi), "=c"(aux) : : "memory");
  return ((uint64_t)hi << 32) | lo;
}

/* A raw sample: ticks between the two stamps, overhead still in (removed in pct/mean_ns). */
static inline uint32_t sample(uint64_t t0, uint64_t t1)
{
  uint64_t d = t1 - t0;
  return d > UINT32_MAX ? UINT32_MAX : (uint32_t)d;
}

static double ns_per_tick; /* calibrated */
static double overhead;    /* mean ticks of an empty timed region (unbiased on a coarse counter) */
static double tick_q = 1;  /* the counter's step: gcd of observed differences, in ticks */

static uint64_t now_ns(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC_RAW, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* ---------- sorting and percentiles (no allocation) ---------- */

static size_t radix_count[65536];

/* Sorts a[0..n) ascending; tmp must hold n elements. Two passes of 16 bits. */
static void radix_sort(uint32_t *a, uint32_t *tmp, size_t n)
{
  for (int pass = 0; pass < 2; pass++) {
    int shift = pass * 16;
    memset(radix_count, 0, sizeof radix_count);
    for (size_t i = 0; i < n; i++)
      radix_count[(a[i] >> shift) & 0xffff]++;
    size_t sum = 0;
    for (size_t d = 0; d < 65536; d++) {
      size_t c = radix_count[d];
      radix_count[d] = sum;
      sum += c;
    }
    for (size_t i = 0; i < n; i++)
      tmp[radix_count[(a[i] >> shift) & 0xffff]++] = a[i];
    memcpy(a, tmp, n * sizeof *a);
  }
}

/* Percentile p of a sorted array of raw tick counts, in ns, with the timer's overhead removed.
 *
 * The counter may advance in steps of q ticks (on the AMD EPYC guests here: 26 ticks = 10 ns), so
 * raw samples sit on a grid of multiples of q. The counter's phase is independent of the call, so
 * the fraction of samples <= v equals the true latency's CDF averaged over [v, v + q): the samples
 * that read v stand for the interval (v - q/2, v + q/2], and the percentile is interpolated
 * linearly inside it. With q = 1 this is the ordinary nearest-rank percentile; with a coarse
 * counter it removes the staircase. The mean (unbiased whatever q is) is printed beside it. */
static double pct(const uint32_t *s, size_t n, double p)
{
  if (n == 0)
    return 0;
  double r = p / 100.0 * (double)n; /* wanted rank, fractional */
  size_t k = (size_t)ceil(r);
  if (k < 1)
    k = 1;
  if (k > n)
    k = n;
  uint32_t v = s[k - 1];
  size_t lo = k - 1, hi = k; /* [lo, hi) = the samples equal to v */
  while (lo > 0 && s[lo - 1] == v)
    lo--;
  while (hi < n && s[hi] == v)
    hi++;
  double frac = (r - (double)lo) / (double)(hi - lo);
  if (frac < 0)
    frac = 0;
  if (frac > 1)
    frac = 1;
  double ticks = (double)v - tick_q / 2.0 + frac * tick_q - overhead;
  return ticks > 0 ? ticks * ns_per_tick : 0;
}

/* Mean of raw samples in ns, overhead removed. */
static double mean_ns(const uint32_t *s, size_t n)
{
  double sum = 0;
  for (size_t i = 0; i < n; i++)
    sum += s[i];
  double ticks = sum / (double)n - overhead;
  return ticks > 0 ? ticks * ns_per_tick : 0;
}

static double max_ns(const uint32_t *sorted, size_t n)
{
  double ticks = (double)sorted[n - 1] - overhead;
  return ticks > 0 ? ticks * ns_per_tick : 0;
}

/* ---------- calibration ---------- */

static uint64_t gcd64(uint64_t a, uint64_t b)
{
  while (b) {
    uint64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

/* Sets ns_per_tick, tick_q and overhead; buf and tmp hold cap samples each.
 *  - the TSC frequency against the monotonic clock over span_ns;
 *  - the counter's step: gcd of the differences between 100,000 back-to-back reads;
 *  - the overhead of an empty timed region. The median of a coarse counter is a grid value, so
 *    the mean is used; it is trimmed (samples above median + 2 steps are interrupts, not the
 *    timer), over min(cap, 40,000) regions, and taken over `rounds` rounds (1..5), keeping the
 *    median round, so one noisy burst cannot shift it. */
static void tsc_calibrate(uint64_t span_ns, int rounds, uint32_t *buf, uint32_t *tmp, size_t cap)
{
  uint64_t n0 = now_ns(), c0 = t_start(), n1, c1;
  do {
    n1 = now_ns();
    c1 = t_start();
  } while (n1 - n0 < span_ns);
  ns_per_tick = (double)(n1 - n0) / (double)(c1 - c0);

  uint64_t g = 0, prev = t_start();
  for (int i = 0; i < 100000; i++) {
    uint64_t t = t_start();
    if (t != prev)
      g = gcd64(g, t - prev);
    prev = t;
  }
  tick_q = g ? (double)g : 1;

  size_t n = cap < 40000 ? cap : 40000;
  double round_mean[5];
  if (rounds < 1)
    rounds = 1;
  if (rounds > 5)
    rounds = 5;
  for (int k = 0; k < rounds; k++) {
    for (size_t i = 0; i < n; i++) {
      uint64_t a = t_start();
      uint64_t b = t_stop();
      buf[i] = sample(a, b);
    }
    radix_sort(buf, tmp, n);
    double cut = buf[n / 2] + 2 * tick_q, sum = 0;
    size_t m = 0;
    for (size_t i = 0; i < n && buf[i] <= cut; i++, m++)
      sum += buf[i];
    round_mean[k] = sum / (double)m;
  }
  for (int i = 1; i < rounds; i++) /* insertion sort of at most 5 */
    for (int j = i; j > 0 && round_mean[j - 1] > round_mean[j]; j--) {
      double t = round_mean[j];
      round_mean[j] = round_mean[j - 1];
      round_mean[j - 1] = t;
    }
  overhead = round_mean[rounds / 2];
}

#endif
