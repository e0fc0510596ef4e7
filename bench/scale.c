/* scale: threads, batches and large heaps (issue 17: two threads must do twice the work of one).
 *
 * One program, run once per allocator with only LD_PRELOAD changing (bench/scale.sh does the
 * runs). Every call under test is a plain malloc()/free() through the PLT; the program is built
 * with -fno-builtin, keeps every pointer in memory the allocator does not own (mmap'ed arrays,
 * static arrays, stacks) and writes into every block it gets, so no call can be elided.
 *
 *   scale MODE [options]      prints CSV lines "MODE,metric,value" on stdout
 *
 * "Mops/s" everywhere counts calls: one malloc is one op, one free is one op.
 * Sizes called "16 B-4 KiB" are log-uniform: each octave (16-32, 32-64, ... 2048-4096) is
 * equally likely, so the mean request is ~740 B (uniform would make it 2 KiB, mostly large).
 *
 *   own        T threads (--threads T, default 2), each with its own working set of 1,000 slots of
 *              16 B-4 KiB: free a random slot, malloc a new random size into it. --ops calls per
 *              thread after a start barrier; Mops/s from the first thread's start to the last
 *              thread's end: own,tT_mops_per_s.
 *   batch      N = 100,000 mallocs of one size (8 bytes written into each), then the N frees
 *              (each block's 8 bytes checked first), repeated after one untimed round: up to
 *              --rounds times (30), at least 3, until 0.25 s (0.1 s --quick) have passed; at
 *              16, 64, 256, 1024, 4096 B. --order fifo (default: freed in
 *              allocation order), lifo (newest first) or both: batch,fifo_SIZE_mops_per_s.
 *   prodcons   one producer thread mallocs, one consumer thread frees; blocks cross in batches
 *              of 256 pointers through a ring of 16 batches (the shape of xmalloc-test), at
 *              64 B and 1 KiB, each in a fresh pair of threads: prodcons,SIZE_mops_per_s.
 *   falseshare two threads each malloc an 8 B object, increment each of its bytes 500 times and
 *              free it, over and over (Hoard's cache-thrash: active false sharing when the two
 *              threads' objects share a cache line); then the same after each thread first frees
 *              an object the main thread allocated just before the other's (cache-scratch:
 *              passive false sharing). Wall-clock seconds: falseshare,active_s / passive_s.
 *   larson     larson's server simulation: 2 lineages of threads, each over its own array of
 *              5,000 blocks of 8-1,000 B (uniform, as larson); a thread frees and replaces
 *              random blocks, and after --ops calls it starts its successor, hands it the array
 *              (the blocks it allocated are freed by the new thread) and exits, --rounds times.
 *              larson,mops_per_s.
 *   map        std::map<int,int> of 1M entries, keys in a scrambled order: build, then teardown
 *              (bench/scale_cxx.cc): map,build_s / teardown_s / total_s.
 *   bigheap    262,144 live blocks of one size (--size, default 64); then random free+malloc
 *              pairs, each pair timed with the TSC as latency.c does (samples in pre-faulted
 *              mmap'ed buffers, calibrated to ns, the empty region's overhead removed):
 *              bigheap,SIZE_p50_ns, _p99_ns, _p99.9_ns, _p99.99_ns, _max_ns, _mean_ns.
 *              The block's tag is read (checked) before the timed free, as a program reads what
 *              it frees; --cold skips that read (metrics bigheap,cold_SIZE_...), so free meets
 *              the block and its neighbours out of cache. --split times the free and the malloc
 *              of each pair apart: bigheap,SIZE_free_p50_ns ... and bigheap,SIZE_malloc_p50_ns ...
 *   xchg       as own (--threads T, 1-10,000), but one step in eight puts the slot's block into a
 *              table of 4,096 entries shared by all threads instead of freeing it, and frees the
 *              block it displaces (another thread's, mostly), its size and tag read from it:
 *              xchg,tT_mops_per_s, and VmRSS after the run and its peak: xchg,tT_rss_kb and
 *              xchg,tT_hwm_kb (own prints both too).
 *              Past 256 threads --ops is shared out (each thread does ops * 256 / T calls) and
 *              the threads get 256 KiB stacks.
 *   idle       1,000 threads created one after another; each, when created, allocates 400
 *              blocks of 16 B-4 KiB, fills them, frees them in allocation order, and waits on a
 *              condition variable; when all 1,000 wait the main thread reads VmRSS, then lets
 *              them exit, joins them and reads VmRSS again. Default stacks.
 *              idle,rss_start_kb / rss_idle_kb / rss_after_exit_kb / create_s.
 *   grow       a heap that grows in T threads at once (--threads T, default 2): the threads wait
 *              for the start in 10 ms sleeps, as rptest's workers do, then each mallocs blocks of
 *              8-16,000 B (uniform), writes a byte in each of their pages, and frees one of its
 *              newer blocks for every eight it takes, until it has taken --ops MiB (24; 8
 *              --quick). The slowest thread's time from its own start, grow,tT_ms, and how much
 *              of its time each thread had a CPU (its CPU time over that time, the threads'
 *              mean): grow,tT_cpu_share, 1.00 when no thread waited for another or shared a
 *              CPU with it (on as many CPUs as threads).
 *   xcpu       not the allocator: the host. Two threads on the first two CPUs the process may
 *              use pass one cache line back and forth 20,000 times (--ops), or for 50 ms if
 *              that ends first: the mean round trip, xcpu,round_trip_ns (0 with one CPU). This
 *              2-core VM has two speeds, about 100 and 400 ns, that change within seconds and
 *              decide how fast blocks cross threads (bench/contention.sh and bench/mibench.sh
 *              record it before and after each run).
 *
 * Options: --quick (smaller counts), --threads T, --ops N, --rounds N, --size B, --order O,
 *          --sizes LO-HI (own, xchg, idle: log-uniform LO-HI bytes instead of 16 B-4 KiB; own's
 *          and xchg's metrics then read tT_LO-HI_...),
 *          --cold and --split (bigheap), --seed S. Every block's first and last 8 bytes carry a tag that is checked before the
 *          block is freed: a wrong byte exits with status 3 and one line on stderr.
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

#include "status.h"
#include "tsc.h"

#define unlikely(x) __builtin_expect(!!(x), 0)
#define ESCAPE(p) __asm__ volatile("" : : "r"(p) : "memory")
#define CACHE_LINE 64

/* scale_cxx.cc */
void scale_map(long entries, unsigned long long seed);

/* ---------- options ---------- */

static int quick;
static uint64_t seed = 0x5ca1ab1e;
static long opt_threads = -1, opt_ops = -1, opt_rounds = -1, opt_size = -1;
static const char *opt_order = "fifo";
static int opt_cold; /* bigheap: do not read a block before freeing it */
static int opt_split; /* bigheap: time free and malloc apart */

static long pick(long opt, long full, long small) { return opt >= 0 ? opt : quick ? small : full; }

/* ---------- utilities ---------- */

static void die(const char *what)
{
  fprintf(stderr, "scale: %s: %s\n", what, strerror(errno));
  exit(1);
}

static double now_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Memory that is not the allocator's: mmap'ed and faulted in before anything is timed. */
static void *outside(size_t bytes)
{
  void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE,
                 -1, 0);
  if (p == MAP_FAILED)
    die("mmap");
  memset(p, 0, bytes);
  return p;
}

static void *xmalloc(size_t size)
{
  void *p = malloc(size);
  if (unlikely(!p)) {
    fprintf(stderr, "scale: malloc(%zu) returned NULL\n", size);
    exit(1);
  }
  ESCAPE(p);
  return p;
}

/* Threads of the many-thread runs get 256 KiB stacks (all allocators alike): 4,000 default
 * 8 MiB stacks would only reserve address space, but the smaller ones keep VmRSS about the heap. */
static size_t opt_stack;

static void start_thread(pthread_t *th, void *(*fn)(void *), void *arg)
{
  pthread_attr_t a;
  pthread_attr_init(&a);
  if (opt_stack)
    pthread_attr_setstacksize(&a, opt_stack);
  int e = pthread_create(th, &a, fn, arg);
  pthread_attr_destroy(&a);
  if (e) {
    errno = e;
    die("pthread_create");
  }
}

static inline void cpu_relax(void) { __asm__ volatile("pause" ::: "memory"); }

/* Spins briefly, then yields: on a loaded 2-core machine the other side may not be running. */
static inline void backoff(unsigned *spins)
{
  if (++*spins < 200)
    cpu_relax();
  else
    sched_yield();
}

/* ---------- random numbers and sizes ---------- */

static inline uint64_t rng_next(uint64_t *s) /* splitmix64 */
{
  uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

/* Uniform in [0, n), n < 2^32. */
static inline uint32_t rng_below(uint64_t *s, uint32_t n)
{
  return (uint32_t)(((rng_next(s) >> 32) * (uint64_t)n) >> 32);
}

/* Log-uniform sizes_lo..sizes_hi (16 B-4 KiB unless --sizes), as a table indexed by 12 random
 * bits. */
#define LOGSIZE_BITS 12
static uint32_t logsize[1u << LOGSIZE_BITS];
static long sizes_lo = 16, sizes_hi = 4096;
static int sizes_set; /* --sizes given: own's and xchg's metrics name the range */

static void logsize_init(void)
{
  double lo = (double)sizes_lo, hi = (double)sizes_hi;
  for (uint32_t i = 0; i < (1u << LOGSIZE_BITS); i++) {
    double u = ((double)i + 0.5) / (double)(1u << LOGSIZE_BITS);
    uint32_t s = (uint32_t)floor(lo * exp(u * log((hi + 1) / lo)));
    logsize[i] = s < lo ? (uint32_t)lo : s > hi ? (uint32_t)hi : s;
  }
}

/* own's and xchg's metric prefix: "t2" or, with --sizes, "t2_1024-4096". */
static const char *run_name(long t)
{
  static char name[64];
  if (sizes_set)
    snprintf(name, sizeof name, "t%ld_%ld-%ld", t, sizes_lo, sizes_hi);
  else
    snprintf(name, sizeof name, "t%ld", t);
  return name;
}

static inline uint32_t rng_logsize(uint64_t *s) { return logsize[rng_next(s) >> (64 - LOGSIZE_BITS)]; }

/* ---------- block tags ---------- */

/* The first and last 8 bytes of a block (the first only under 16 B) carry a tag kept beside the
 * pointer. Checked before every free: a block handed out twice, or written by the allocator
 * while the program holds it, shows up as a wrong tag. */
static inline void tag_write(void *p, size_t size, uint64_t tag)
{
  __builtin_memcpy(p, &tag, 8);
  if (size >= 16)
    __builtin_memcpy((char *)p + size - 8, &tag, 8);
}

static void tag_fail(const char *mode, const void *p, size_t size, uint64_t want)
{
  fprintf(stderr, "scale %s: block %p (%zu B) does not hold its tag %#llx: the allocator handed "
          "it out twice or wrote into it\n", mode, p, size, (unsigned long long)want);
  fflush(stderr);
  _exit(3);
}

static inline void tag_check(const char *mode, const void *p, size_t size, uint64_t tag)
{
  uint64_t a, b = tag;
  __builtin_memcpy(&a, p, 8);
  if (size >= 16)
    __builtin_memcpy(&b, (const char *)p + size - 8, 8);
  if (unlikely(a != tag || b != tag))
    tag_fail(mode, p, size, tag);
}

struct slot {
  void *p;
  uint64_t tag;
  uint32_t size;
};

static inline void slot_fill(struct slot *s, uint32_t size, uint64_t tag)
{
  void *p = xmalloc(size);
  tag_write(p, size, tag);
  s->p = p;
  s->tag = tag;
  s->size = size;
}

static inline void slot_free(const char *mode, struct slot *s)
{
  tag_check(mode, s->p, s->size, s->tag);
  free(s->p);
}

/* ---------- own: private working sets ---------- */

#define OWN_SLOTS 1000
#define MAX_THREADS 10000

struct own_worker {
  _Alignas(CACHE_LINE) pthread_t th;
  int xchg; /* xchg's worker: one step in eight goes through the shared table */
  struct slot *slots; /* mmap'ed per thread: no two threads' bookkeeping share a line */
  uint64_t rng;
  long steps;
  double t0, t1;
};

static struct own_worker *own_workers;
static pthread_barrier_t own_barrier;

static void *own_run(void *arg);

/* Starts t workers of `ops` calls each (per thread; --ops is divided among the threads past
 * 256, so that 4,000 threads do the work of 256), their slots outside the heap. */
static void own_start(long t, long ops, int xchg)
{
  own_workers = outside((size_t)t * sizeof *own_workers);
  if (t > 256) {
    ops = ops * 256 / t;
    opt_stack = 256 << 10;
  }
  pthread_barrier_init(&own_barrier, NULL, (unsigned)t);
  for (long i = 0; i < t; i++) {
    struct own_worker *w = &own_workers[i];
    w->slots = outside(OWN_SLOTS * sizeof(struct slot));
    w->rng = seed * 1000003u + (uint64_t)i;
    w->steps = ops / 2 > 1 ? ops / 2 : 1;
    w->xchg = xchg;
    start_thread(&w->th, own_run, w);
  }
}

/* The workers' wall-clock span: first start to last end; calls made. */
static double own_join(long t, double *calls)
{
  double t0 = 1e300, t1 = 0;
  *calls = 0;
  for (long i = 0; i < t; i++) {
    pthread_join(own_workers[i].th, NULL);
    t0 = own_workers[i].t0 < t0 ? own_workers[i].t0 : t0;
    t1 = own_workers[i].t1 > t1 ? own_workers[i].t1 : t1;
    *calls += (double)own_workers[i].steps * 2;
  }
  return t1 - t0;
}

static void mode_own(void)
{
  long t = pick(opt_threads, 2, 2);
  long ops = pick(opt_ops, 4000000, 1500000); /* calls per thread */
  if (t < 1 || t > MAX_THREADS) {
    fprintf(stderr, "scale own: --threads must be 1..%d\n", MAX_THREADS);
    exit(2);
  }
  own_start(t, ops, 0);
  double calls, span = own_join(t, &calls);
  printf("own,%s_mops_per_s,%.3f\n", run_name(t), calls / span / 1e6);
  printf("own,%s_rss_kb,%ld\n", run_name(t), status_kb("VmRSS:"));
  printf("own,%s_hwm_kb,%ld\n", run_name(t), status_kb("VmHWM:"));
}

/* ---------- xchg: own working sets, one block in eight freed by another thread ---------- */

/* A block put in the shared table carries its size beside its tag, for whoever takes it out. */
#define XCHG_TABLE 4096
static _Atomic(void *) xchg_table[XCHG_TABLE];

/* A block goes to the table; the one it displaces (most likely another thread's) is checked
 * and freed here. */
static void xchg_put(struct slot *v, uint64_t x)
{
  tag_check("xchg", v->p, v->size, v->tag);
  __builtin_memcpy((char *)v->p + 8, &v->size, 4);
  void *q = atomic_exchange_explicit(&xchg_table[(x >> 8) % XCHG_TABLE], v->p, memory_order_acq_rel);
  if (q) {
    uint64_t tag;
    uint32_t size;
    __builtin_memcpy(&tag, q, 8);
    __builtin_memcpy(&size, (char *)q + 8, 4);
    /* (its last 8 bytes hold the tag only where they miss the size) */
    tag_check("xchg", q, size >= 20 ? size : 8, tag);
    free(q);
  }
}

/* own's and xchg's worker: fill the slots, wait for the others, then free (or, for xchg, one
 * step in eight, put in the table) a random slot's block and malloc a new one into it. */
static void *own_run(void *arg)
{
  struct own_worker *w = arg;
  struct slot *s = w->slots;
  const char *mode = w->xchg ? "xchg" : "own";
  uint64_t r = w->rng, x;
  for (int i = 0; i < OWN_SLOTS; i++)
    slot_fill(&s[i], rng_logsize(&r), rng_next(&r));
  pthread_barrier_wait(&own_barrier);
  w->t0 = now_s();
  for (long k = 0; k < w->steps; k++) {
    struct slot *v = &s[rng_below(&r, OWN_SLOTS)];
    if (w->xchg && ((x = rng_next(&r)) & 7) == 0)
      xchg_put(v, x);
    else
      slot_free(mode, v);
    slot_fill(v, rng_logsize(&r), r);
  }
  w->t1 = now_s();
  for (int i = 0; i < OWN_SLOTS; i++)
    slot_free(mode, &s[i]);
  return NULL;
}

static void mode_xchg(void)
{
  long t = pick(opt_threads, 2, 2);
  long ops = pick(opt_ops, 4000000, 1500000);
  if (t < 1 || t > MAX_THREADS) {
    fprintf(stderr, "scale xchg: --threads must be 1..%d\n", MAX_THREADS);
    exit(2);
  }
  own_start(t, ops, 1);
  double calls, span = own_join(t, &calls);
  for (int i = 0; i < XCHG_TABLE; i++) {
    void *q = atomic_exchange(&xchg_table[i], NULL);
    free(q);
  }
  printf("xchg,%s_mops_per_s,%.3f\n", run_name(t), calls / span / 1e6);
  printf("xchg,%s_rss_kb,%ld\n", run_name(t), status_kb("VmRSS:"));
  printf("xchg,%s_hwm_kb,%ld\n", run_name(t), status_kb("VmHWM:"));
}

/* ---------- batch: N mallocs of one size, then N frees ---------- */

#define BATCH_N 100000

static void batch_round(void **ptrs, size_t size, int lifo)
{
  for (size_t i = 0; i < BATCH_N; i++) {
    void *p = xmalloc(size);
    *(uint64_t *)p = i;
    ptrs[i] = p;
  }
  for (size_t k = 0; k < BATCH_N; k++) {
    size_t i = lifo ? BATCH_N - 1 - k : k;
    if (unlikely(*(uint64_t *)ptrs[i] != i))
      tag_fail("batch", ptrs[i], size, i);
    free(ptrs[i]);
  }
}

static void mode_batch(void)
{
  static const size_t sizes[] = {16, 64, 256, 1024, 4096};
  /* up to --rounds rounds, at least 3, stopping once a size has had its time budget: an
   * allocator that hands pages back between rounds pays 100,000 page faults a round at 4 KiB */
  long rounds = pick(opt_rounds, 30, 12);
  double budget = quick ? 0.1 : 0.25;
  int fifo = strcmp(opt_order, "lifo") != 0, lifo = strcmp(opt_order, "fifo") != 0;
  void **ptrs = outside(BATCH_N * sizeof(void *));
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    for (int order = 0; order < 2; order++) {
      if ((order == 0 && !fifo) || (order == 1 && !lifo))
        continue;
      if (opt_size > 0 && (size_t)opt_size != sizes[k])
        continue;
      batch_round(ptrs, sizes[k], order); /* untimed: the first round faults pages in */
      double t0 = now_s(), t;
      long r = 0;
      do
        batch_round(ptrs, sizes[k], order);
      while (++r < rounds && (r < 3 || (t = now_s() - t0) < budget));
      t = now_s() - t0;
      printf("batch,%s_%zu_mops_per_s,%.3f\n", order ? "lifo" : "fifo", sizes[k],
             2.0 * BATCH_N * (double)r / t / 1e6);
    }
  }
}

/* ---------- prodcons: one thread mallocs, another frees ---------- */

#define PC_BATCH 256
#define PC_RING 16

static struct {
  _Alignas(CACHE_LINE) _Atomic uint64_t head; /* batches published by the producer */
  _Alignas(CACHE_LINE) _Atomic uint64_t tail; /* batches freed by the consumer */
  _Alignas(CACHE_LINE) size_t size;
  long batches;
  void **slots; /* PC_RING * PC_BATCH pointers, mmap'ed */
} pc;

static void *pc_produce(void *arg)
{
  (void)arg;
  uint64_t tail = 0;
  for (long b = 0; b < pc.batches; b++) {
    unsigned spins = 0;
    while ((uint64_t)b - tail >= PC_RING) {
      tail = atomic_load_explicit(&pc.tail, memory_order_acquire);
      if ((uint64_t)b - tail >= PC_RING)
        backoff(&spins);
    }
    void **out = pc.slots + (size_t)(b % PC_RING) * PC_BATCH;
    for (int i = 0; i < PC_BATCH; i++) {
      void *p = xmalloc(pc.size);
      *(uint64_t *)p = (uint64_t)b * PC_BATCH + (uint64_t)i;
      out[i] = p;
    }
    atomic_store_explicit(&pc.head, (uint64_t)b + 1, memory_order_release);
  }
  return NULL;
}

static void *pc_consume(void *arg)
{
  (void)arg;
  uint64_t head = 0;
  for (long b = 0; b < pc.batches; b++) {
    unsigned spins = 0;
    while ((uint64_t)b >= head) {
      head = atomic_load_explicit(&pc.head, memory_order_acquire);
      if ((uint64_t)b >= head)
        backoff(&spins);
    }
    void **in = pc.slots + (size_t)(b % PC_RING) * PC_BATCH;
    for (int i = 0; i < PC_BATCH; i++) {
      if (unlikely(*(uint64_t *)in[i] != (uint64_t)b * PC_BATCH + (uint64_t)i))
        tag_fail("prodcons", in[i], pc.size, (uint64_t)b * PC_BATCH + (uint64_t)i);
      free(in[i]);
    }
    atomic_store_explicit(&pc.tail, (uint64_t)b + 1, memory_order_release);
  }
  return NULL;
}

static void mode_prodcons(void)
{
  static const size_t sizes[] = {64, 1024};
  long items = pick(opt_ops, 2000000, 1000000);
  pc.slots = outside(PC_RING * PC_BATCH * sizeof(void *));
  for (size_t k = 0; k < sizeof sizes / sizeof sizes[0]; k++) {
    if (opt_size > 0 && (size_t)opt_size != sizes[k])
      continue;
    pc.size = sizes[k];
    pc.batches = items / PC_BATCH;
    atomic_store(&pc.head, 0);
    atomic_store(&pc.tail, 0);
    pthread_t p, c;
    double t0 = now_s();
    start_thread(&c, pc_consume, NULL);
    start_thread(&p, pc_produce, NULL);
    pthread_join(p, NULL);
    pthread_join(c, NULL);
    double t = now_s() - t0;
    printf("prodcons,%zu_mops_per_s,%.3f\n", sizes[k], 2.0 * (double)pc.batches * PC_BATCH / t / 1e6);
  }
}

/* ---------- falseshare: cache-thrash and cache-scratch ---------- */

#define FS_OBJ 8
#define FS_WRITES 500

struct fs_worker {
  _Alignas(CACHE_LINE) pthread_t th;
  void *handed; /* passive: freed first, so its line may come back to this thread */
  long iters;
  double t0, t1;
};

static struct fs_worker fs_workers[2];
static pthread_barrier_t fs_barrier;

static void *fs_run(void *arg)
{
  struct fs_worker *w = arg;
  pthread_barrier_wait(&fs_barrier);
  w->t0 = now_s();
  if (w->handed)
    free(w->handed);
  for (long i = 0; i < w->iters; i++) {
    volatile char *p = xmalloc(FS_OBJ);
    for (int r = 0; r < FS_WRITES; r++)
      for (int j = 0; j < FS_OBJ; j++)
        p[j]++;
    free((void *)p);
  }
  w->t1 = now_s();
  return NULL;
}

static double fs_pass(long iters, int passive)
{
  pthread_barrier_init(&fs_barrier, NULL, 2);
  for (int i = 0; i < 2; i++) {
    fs_workers[i].iters = iters;
    fs_workers[i].handed = passive ? xmalloc(FS_OBJ) : NULL;
  }
  for (int i = 0; i < 2; i++)
    start_thread(&fs_workers[i].th, fs_run, &fs_workers[i]);
  for (int i = 0; i < 2; i++)
    pthread_join(fs_workers[i].th, NULL);
  pthread_barrier_destroy(&fs_barrier);
  double t0 = fs_workers[0].t0 < fs_workers[1].t0 ? fs_workers[0].t0 : fs_workers[1].t0;
  double t1 = fs_workers[0].t1 > fs_workers[1].t1 ? fs_workers[0].t1 : fs_workers[1].t1;
  return t1 - t0;
}

static void mode_falseshare(void)
{
  long iters = pick(opt_ops, 40000, 15000);
  printf("falseshare,active_s,%.4f\n", fs_pass(iters, 0));
  printf("falseshare,passive_s,%.4f\n", fs_pass(iters, 1));
}

/* ---------- larson: threads that hand their blocks to their successors ---------- */

#define LARSON_SLOTS 5000
#define LARSON_MIN 8
#define LARSON_MAX 1000
#define LARSON_LINEAGES 2

struct larson_lineage {
  _Alignas(CACHE_LINE) struct slot *slots; /* mmap'ed per lineage */
  long rounds_left;
  uint64_t rng;
  pthread_t th; /* the thread running now */
};

static struct larson_lineage larson_lineages[LARSON_LINEAGES];
static long larson_steps;
static pthread_mutex_t larson_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t larson_cv = PTHREAD_COND_INITIALIZER;
static int larson_done;

static void *larson_run(void *arg)
{
  struct larson_lineage *l = arg;
  struct slot *s = l->slots;
  uint64_t r = l->rng;
  for (long k = 0; k < larson_steps; k++) {
    struct slot *v = &s[rng_below(&r, LARSON_SLOTS)];
    slot_free("larson", v);
    slot_fill(v, LARSON_MIN + rng_below(&r, LARSON_MAX - LARSON_MIN + 1), r);
  }
  l->rng = r;
  /* the successor takes the array; this thread detaches and exits, as larson's threads do */
  if (--l->rounds_left > 0) {
    pthread_detach(pthread_self());
    start_thread(&l->th, larson_run, l);
  } else {
    pthread_detach(pthread_self());
    pthread_mutex_lock(&larson_mu);
    larson_done++;
    pthread_cond_signal(&larson_cv);
    pthread_mutex_unlock(&larson_mu);
  }
  return NULL;
}

static void mode_larson(void)
{
  long ops = pick(opt_ops, 200000, 200000); /* calls per thread */
  long rounds = pick(opt_rounds, 20, 8);    /* threads per lineage */
  larson_steps = ops / 2;
  for (int i = 0; i < LARSON_LINEAGES; i++) {
    struct larson_lineage *l = &larson_lineages[i];
    l->slots = outside(LARSON_SLOTS * sizeof(struct slot));
    l->rng = seed * 7919u + (uint64_t)i;
    l->rounds_left = rounds;
    for (int k = 0; k < LARSON_SLOTS; k++)
      slot_fill(&l->slots[k], LARSON_MIN + rng_below(&l->rng, LARSON_MAX - LARSON_MIN + 1),
                rng_next(&l->rng));
  }
  double t0 = now_s();
  for (int i = 0; i < LARSON_LINEAGES; i++)
    start_thread(&larson_lineages[i].th, larson_run, &larson_lineages[i]);
  pthread_mutex_lock(&larson_mu);
  while (larson_done < LARSON_LINEAGES)
    pthread_cond_wait(&larson_cv, &larson_mu);
  pthread_mutex_unlock(&larson_mu);
  double t = now_s() - t0;
  printf("larson,mops_per_s,%.3f\n",
         (double)LARSON_LINEAGES * (double)rounds * (double)(larson_steps * 2) / t / 1e6);
  for (int i = 0; i < LARSON_LINEAGES; i++)
    for (int k = 0; k < LARSON_SLOTS; k++)
      slot_free("larson", &larson_lineages[i].slots[k]);
}

/* ---------- bigheap: latency of free+malloc against a large live set ---------- */
/* The timer is bench/tsc.h's, as latency.c's: lfence; rdtsc ... rdtscp; lfence, calibrated against
 * the monotonic clock over 50 ms, the counter's step found as the gcd of back-to-back differences,
 * the trimmed mean of an empty region (one round) subtracted, percentiles interpolated within a
 * step. */

#define BIGHEAP_LIVE 262144

/* Percentiles, maximum and mean of n samples (sorted here), as bigheap,PREFIX_p50_ns ... */
static void bigheap_report(const char *prefix, uint32_t *samples, uint32_t *tmp, size_t n)
{
  double mean = mean_ns(samples, n);
  radix_sort(samples, tmp, n);
  static const double ps[] = {50, 99, 99.9, 99.99};
  static const char *const names[] = {"p50", "p99", "p99.9", "p99.99"};
  for (int i = 0; i < 4; i++)
    printf("bigheap,%s_%s_ns,%.2f\n", prefix, names[i], pct(samples, n, ps[i]));
  printf("bigheap,%s_max_ns,%.2f\n", prefix, max_ns(samples, n));
  printf("bigheap,%s_mean_ns,%.2f\n", prefix, mean);
}

static void mode_bigheap(void)
{
  size_t size = (size_t)pick(opt_size, 64, 64);
  size_t pairs = (size_t)pick(opt_ops, 1000000, 400000);
  if (size < 8) {
    fprintf(stderr, "scale bigheap: --size must be >= 8\n");
    exit(2);
  }
  uint32_t *samples = outside(pairs * sizeof(uint32_t));
  uint32_t *tmp = outside(pairs * sizeof(uint32_t));
  uint32_t *frees = opt_split ? outside(pairs * sizeof(uint32_t)) : NULL;
  struct slot *live = outside(BIGHEAP_LIVE * sizeof(struct slot));
  tsc_calibrate(50000000u, 1, samples, tmp, pairs);
  uint64_t r = seed;
  for (size_t i = 0; i < BIGHEAP_LIVE; i++)
    slot_fill(&live[i], (uint32_t)size, rng_next(&r));
  /* untimed warm-up: the free lists leave allocation order before anything is measured */
  for (size_t k = 0; k < BIGHEAP_LIVE; k++) {
    struct slot *v = &live[rng_below(&r, BIGHEAP_LIVE)];
    slot_free("bigheap", v);
    slot_fill(v, (uint32_t)size, r);
  }
  for (size_t k = 0; k < pairs; k++) {
    struct slot *v = &live[rng_below(&r, BIGHEAP_LIVE)];
    void *old = v->p;
    if (!opt_cold) /* a program reads a block before it frees it */
      tag_check("bigheap", old, size, v->tag);
    uint64_t t0 = t_start();
    free(old);
    if (opt_split) { /* (a branch every run takes the same way) */
      uint64_t tf = t_stop();
      frees[k] = sample(t0, tf);
      t0 = t_start();
    }
    void *p = malloc(size);
    uint64_t t1 = t_stop();
    if (unlikely(!p)) {
      fprintf(stderr, "scale: malloc(%zu) returned NULL\n", size);
      exit(1);
    }
    samples[k] = sample(t0, t1);
    tag_write(p, size, r);
    v->p = p;
    v->tag = r;
  }
  char prefix[64];
  const char *cold = opt_cold ? "cold_" : "";
  snprintf(prefix, sizeof prefix, "%s%zu%s", cold, size, opt_split ? "_malloc" : "");
  bigheap_report(prefix, samples, tmp, pairs);
  if (opt_split) {
    snprintf(prefix, sizeof prefix, "%s%zu_free", cold, size);
    bigheap_report(prefix, frees, tmp, pairs);
  }
  for (size_t i = 0; i < BIGHEAP_LIVE; i++)
    slot_free("bigheap", &live[i]);
}

/* ---------- idle: a thousand threads that allocated and now wait ---------- */

#define IDLE_THREADS 1000
#define IDLE_BLOCKS 400

static pthread_mutex_t idle_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t idle_cv = PTHREAD_COND_INITIALIZER; /* worker -> main: work done */
static pthread_cond_t idle_go = PTHREAD_COND_INITIALIZER; /* main -> workers: exit */
static int idle_ready, idle_release;

static void *idle_run(void *arg)
{
  uint64_t r = seed * 31337u + (uint64_t)(uintptr_t)arg;
  void *blocks[IDLE_BLOCKS];
  uint32_t sizes[IDLE_BLOCKS];
  for (int i = 0; i < IDLE_BLOCKS; i++) {
    sizes[i] = rng_logsize(&r);
    blocks[i] = xmalloc(sizes[i]);
    memset(blocks[i], (int)(i & 0xff), sizes[i]); /* a program uses what it allocates */
  }
  for (int i = 0; i < IDLE_BLOCKS; i++) {
    const unsigned char *b = blocks[i];
    if (unlikely(b[0] != (i & 0xff) || b[sizes[i] - 1] != (i & 0xff)))
      tag_fail("idle", b, sizes[i], (uint64_t)(i & 0xff));
    free(blocks[i]);
  }
  pthread_mutex_lock(&idle_mu);
  idle_ready++;
  pthread_cond_signal(&idle_cv);
  while (!idle_release)
    pthread_cond_wait(&idle_go, &idle_mu);
  pthread_mutex_unlock(&idle_mu);
  return NULL;
}

static void mode_idle(void)
{
  long n = pick(opt_threads, IDLE_THREADS, IDLE_THREADS);
  pthread_t *th = outside((size_t)n * sizeof(pthread_t));
  printf("idle,rss_start_kb,%ld\n", status_kb("VmRSS:"));
  double t0 = now_s();
  for (long i = 0; i < n; i++) {
    start_thread(&th[i], idle_run, (void *)(uintptr_t)i);
    pthread_mutex_lock(&idle_mu);
    while (idle_ready <= i)
      pthread_cond_wait(&idle_cv, &idle_mu);
    pthread_mutex_unlock(&idle_mu);
  }
  double t = now_s() - t0;
  printf("idle,rss_idle_kb,%ld\n", status_kb("VmRSS:"));
  pthread_mutex_lock(&idle_mu);
  idle_release = 1;
  pthread_cond_broadcast(&idle_go);
  pthread_mutex_unlock(&idle_mu);
  for (long i = 0; i < n; i++)
    pthread_join(th[i], NULL);
  printf("idle,rss_after_exit_kb,%ld\n", status_kb("VmRSS:"));
  printf("idle,create_s,%.4f\n", t);
}

/* ---------- grow ---------- */

static atomic_int grow_go;
static long grow_bytes;

struct grow_worker {
  pthread_t th;
  long i;
  double wall_s, cpu_s;
  char pad[CACHE_LINE];
};

static double thread_cpu_s(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static void *grow_run(void *arg)
{
  struct grow_worker *w = arg;
  uint64_t r = seed + (uint64_t)w->i * 0x9e3779b97f4a7c15ull;
  size_t cap = (size_t)grow_bytes / 8 + 16, n = 0, taken = 0;
  struct slot *s = outside(cap * sizeof *s);
  while (!atomic_load_explicit(&grow_go, memory_order_acquire)) {
    struct timespec ts = {0, 10000000};
    nanosleep(&ts, NULL);
  }
  double t0 = now_s(), c0 = thread_cpu_s();
  for (long k = 1; taken < (size_t)grow_bytes; k++) {
    uint32_t size = 8 + rng_below(&r, 15993);
    slot_fill(&s[n], size, (uint64_t)k);
    for (uint32_t o = 4096; o + 8 < size; o += 4096)
      ((volatile char *)s[n].p)[o] = 1;
    taken += size;
    n++;
    if ((k & 7) == 0) {   /* one of the eight newest goes */
      struct slot *v = &s[n - 1 - rng_below(&r, 8)];
      slot_free("grow", v);
      *v = s[--n];
    }
  }
  w->wall_s = now_s() - t0;
  w->cpu_s = thread_cpu_s() - c0;
  for (size_t k = 0; k < n; k++)
    slot_free("grow", &s[k]);
  return NULL;
}

static void mode_grow(void)
{
  long t = pick(opt_threads, 2, 2);
  if (t < 1 || t > 64) {
    fprintf(stderr, "scale grow: --threads 1-64\n");
    exit(2);
  }
  grow_bytes = pick(opt_ops, 24, 8) << 20;
  struct grow_worker *w = outside((size_t)t * sizeof *w);
  for (long i = 0; i < t; i++) {
    w[i].i = i;
    start_thread(&w[i].th, grow_run, &w[i]);
  }
  struct timespec ts = {0, 100000000};   /* all of them asleep */
  nanosleep(&ts, NULL);
  atomic_store_explicit(&grow_go, 1, memory_order_release);
  double slowest = 0, share = 0;
  for (long i = 0; i < t; i++) {
    pthread_join(w[i].th, NULL);
    slowest = w[i].wall_s > slowest ? w[i].wall_s : slowest;
    share += w[i].wall_s > 0 ? w[i].cpu_s / w[i].wall_s / (double)t : 0;
  }
  printf("grow,t%ld_ms,%.2f\n", t, slowest * 1e3);
  printf("grow,t%ld_cpu_share,%.2f\n", t, share);
}

/* ---------- map ---------- */

#ifdef SCALE_NO_MAP /* built without a C++ compiler */
void scale_map(long entries, unsigned long long seed)
{
  (void)entries, (void)seed;
  fprintf(stderr, "scale map: built without C++ (no scale_cxx.cc)\n");
  exit(2);
}
#endif

static void mode_map(void) { scale_map(pick(opt_ops, 1000000, 500000), seed); }

/* ---------- xcpu ---------- */

static _Atomic long xcpu_ball __attribute__((aligned(64)));
static long xcpu_n;

static int xcpu_pin(int cpu)
{
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu, &set);
  return pthread_setaffinity_np(pthread_self(), sizeof set, &set);
}

static void *xcpu_run(void *arg)
{
  if (xcpu_pin((int)(intptr_t)arg))
    die("pthread_setaffinity_np");
  for (long i = 0;; i++) {
    long b;
    while ((b = atomic_load_explicit(&xcpu_ball, memory_order_acquire)) != 2 * i + 1)
      if (b < 0)
        return NULL;
    atomic_store_explicit(&xcpu_ball, 2 * i + 2, memory_order_release);
  }
}

static void mode_xcpu(void)
{
  cpu_set_t set;
  int cpu[2], n = 0;
  if (sched_getaffinity(0, sizeof set, &set))
    die("sched_getaffinity");
  for (int c = 0; c < CPU_SETSIZE && n < 2; c++)
    if (CPU_ISSET(c, &set))
      cpu[n++] = c;
  if (n < 2) {
    printf("xcpu,round_trip_ns,0\n");
    return;
  }
  xcpu_n = pick(opt_ops, 20000, 2000);
  pthread_t th;
  start_thread(&th, xcpu_run, (void *)(intptr_t)cpu[1]);
  if (xcpu_pin(cpu[0]))
    die("pthread_setaffinity_np");
  double t0 = now_s(), t = 0;
  long i = 0;
  while (i < xcpu_n && (i % 256 || (t = now_s() - t0) < 0.05)) {   /* a busy CPU may hold the other thread for a while */
    atomic_store_explicit(&xcpu_ball, 2 * i + 1, memory_order_release);
    while (atomic_load_explicit(&xcpu_ball, memory_order_acquire) != 2 * i + 2) {}
    i++;
  }
  t = now_s() - t0;
  atomic_store_explicit(&xcpu_ball, -1, memory_order_release);
  pthread_join(th, NULL);
  printf("xcpu,round_trip_ns,%.0f\n", i ? t / (double)i * 1e9 : 0.0);
}

/* ---------- main ---------- */

static const struct {
  const char *name;
  void (*run)(void);
} modes[] = {
  {"own", mode_own},         {"batch", mode_batch},   {"prodcons", mode_prodcons},
  {"falseshare", mode_falseshare}, {"larson", mode_larson}, {"map", mode_map},
  {"bigheap", mode_bigheap}, {"idle", mode_idle}, {"xchg", mode_xchg}, {"xcpu", mode_xcpu},
  {"grow", mode_grow},
};

static void usage(void)
{
  fprintf(stderr, "usage: scale MODE [--quick] [--threads T] [--ops N] [--rounds N] [--size B]\n"
                  "                  [--order fifo|lifo|both] [--cold] [--split] [--seed S] [--sizes LO-HI]\n"
                  "modes: own batch prodcons falseshare larson map bigheap idle xchg xcpu grow\n");
  exit(2);
}

static long arg_long(const char *s)
{
  char *end;
  errno = 0;
  long v = strtol(s, &end, 0);
  if (errno || *end || v < 0)
    usage();
  return v;
}

int main(int argc, char **argv)
{
  if (argc < 2)
    usage();
  const char *mode = argv[1];
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    const char *v = i + 1 < argc ? argv[i + 1] : NULL;
    if (!strcmp(a, "--quick")) quick = 1;
    else if (!strcmp(a, "--cold")) opt_cold = 1;
    else if (!strcmp(a, "--split")) opt_split = 1;
    else if (v && !strcmp(a, "--threads")) opt_threads = arg_long(argv[++i]);
    else if (v && !strcmp(a, "--ops")) opt_ops = arg_long(argv[++i]);
    else if (v && !strcmp(a, "--rounds")) opt_rounds = arg_long(argv[++i]);
    else if (v && !strcmp(a, "--size")) opt_size = arg_long(argv[++i]);
    else if (v && !strcmp(a, "--seed")) seed = (uint64_t)arg_long(argv[++i]);
    else if (v && !strcmp(a, "--sizes")) {
      char *end;
      sizes_lo = strtol(v, &end, 10);
      if (*end != '-' || (sizes_hi = strtol(end + 1, &end, 10), *end) || sizes_lo < 16 || sizes_hi < sizes_lo || sizes_hi > (1l << 24)) {
        fprintf(stderr, "scale: --sizes wants LO-HI bytes, 16 <= LO <= HI <= 16M, got %s\n", v);
        exit(2);
      }
      sizes_set = 1;
      i++;
    }
    else if (v && !strcmp(a, "--order") &&
             (!strcmp(v, "fifo") || !strcmp(v, "lifo") || !strcmp(v, "both"))) opt_order = argv[++i];
    else usage();
  }
  logsize_init();
  setvbuf(stdout, NULL, _IOLBF, 0);
  for (size_t k = 0; k < sizeof modes / sizeof modes[0]; k++)
    if (!strcmp(mode, modes[k].name)) {
      modes[k].run();
      return 0;
    }
  usage();
}
