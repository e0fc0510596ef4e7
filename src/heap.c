/* The sampling heap profiler (FLATMALLOC_HEAP=FILE): call stacks of about one allocation per
 * FLATMALLOC_HEAP_SAMPLE bytes (512 KiB by default), written in gperftools' heap-profile
 * format, which `google-pprof` reads.
 *
 * SAMPLING. Each thread counts down the bytes it allocates from an interval drawn from the
 * exponential distribution of mean FLATMALLOC_HEAP_SAMPLE (a Poisson process over the bytes,
 * as tcmalloc and jemalloc do): an allocation of s bytes is sampled with probability
 * 1 - exp(-s / mean) whatever the allocations before it. The file's header says `heap_v2/MEAN`
 * and pprof divides each stack's counts by that probability (at the stack's mean size).
 * The countdown needs every malloc: with the profiler on, pool.c sets small_lim to 0, so every
 * malloc takes api.c's slow path, which calls heap_alloc (the countdown, then the thread
 * cache's pop, inline); calloc calls heap_calloc. Without it nothing changes: the fast paths
 * are the same code, and the slow paths test heap_on once.
 *
 * SAMPLED BLOCKS. A sampled request of any size is served as a large block (a run of whole
 * chunks of its own, as tcmalloc gives each sampled object its own span), so
 *   - free() of it always reaches the slow path (a large block fails the fast path's
 *     block-start test), and
 *   - its record is found in O(1): mark[chunk of the block] holds its size and stack. Only the
 *     first chunk of a sampled block is marked, and the mark is taken off before the block is
 *     released, so a stale or interior pointer finds no mark and goes on to block_free's checks.
 * A small sampled block costs a chunk (8 or 16 KiB) instead of its class size: about 2-3 % of
 * the memory of a heap of small blocks at the default interval.
 *
 * STACKS. _Unwind_Backtrace from libgcc_s (jemalloc's prof-libgcc does the same): it reads
 * .eh_frame, which every Debian binary has, where a frame-pointer walk would return wrong
 * stacks for the many programs built without frame pointers. It allocates nothing on its usual
 * path; any allocation it makes (first use) runs with the thread's `busy` flag set, unsampled.
 * Leading frames inside flatmalloc's own library are dropped, so a stack starts at the call
 * to malloc (or calloc, realloc, new). Stacks are interned in a hash table; the counters per
 * stack (sampled blocks live and allocated, their bytes) change under one lock, taken only by
 * samples and by frees of sampled blocks.
 *
 * FILES. At exit each process writes FILE.PID; flatmalloc_heap_dump(path) and the signal
 * FLATMALLOC_HEAP_SIGNAL write on demand (FILE.PID.N for the signal). A forked child keeps the
 * blocks it inherited as live and counts allocations from the fork on. The signal handler
 * writes only when it gets the lock at once; otherwise the thread holding it writes when it
 * lets it go. Tables come from the pool's large area and are never freed. */
#include <errno.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <string.h>
#include <unwind.h>

#include "flatmalloc.h"
#include "fmt.h"
#include "heap.h"
#include "internal.h"
#include "os.h"

#define HEAP_DEPTH 48u            /* frames kept per stack */
#define HEAP_STACKS (1u << 14)    /* distinct stacks (a power of two); more go to entry 0 */
#define HEAP_PATH_MAX 512u
#define MARK_STACK_BITS 20u       /* mark: size << 20 | stack + 1; sizes below 2^44 (FM_POOL_MAX) */
_Static_assert(HEAP_STACKS < (1u << MARK_STACK_BITS), "stack numbers fit in the mark");
_Static_assert(FM_POOL_MAX <= (1ull << (64 - MARK_STACK_BITS)), "block sizes fit in the mark");

struct heap_stack {
  uint64_t hash;                /* 0: unused */
  uint32_t depth, pad;
  uint64_t live_n, live_bytes, alloc_n, alloc_bytes;
  uintptr_t pc[HEAP_DEPTH];
};

struct heap_thread {
  int64_t left;      /* bytes until the next sample */
  uint64_t rng;      /* 0: the thread has not allocated yet */
  bool busy;         /* taking a sample: allocations meanwhile are not sampled */
};

bool heap_on;
static __thread struct heap_thread heap_tl __attribute__((tls_model("initial-exec")));
static pthread_mutex_t heap_lock = PTHREAD_MUTEX_INITIALIZER;
static struct heap_stack *stacks;   /* open addressing on hash; entry 0: stacks that found no room */
static uint32_t nstacks;
static uint64_t *mark;              /* per chunk: a sampled block starting there, or 0 */
static double mean;
static char path[HEAP_PATH_MAX];
static volatile sig_atomic_t pending;   /* a signal found the lock taken */
static _Atomic uint32_t dumps;          /* FILE.PID.N of the signal's dumps */
static _Atomic int self_known;          /* 0, 1 finding, 2 found */
static uintptr_t self_lo, self_hi;      /* our library's text: frames there are dropped */

/* ---- sampling ---------------------------------------------------------------------------- */
static uint64_t rng_next(struct heap_thread *t) {
  uint64_t x = t->rng;
  x ^= x >> 12;
  x ^= x << 25;
  x ^= x >> 27;
  t->rng = x;
  return x * 0x2545f4914f6cdd1dull;
}

/* -ln(u) for a normal u in (0, 1], within 1e-9: u = m * 2^e with m in [1/sqrt 2, sqrt 2), and
 * ln m = 2 atanh(t), t = (m - 1) / (m + 1), |t| < 0.18, by its series to t^9. Here rather than
 * libm's log(): libm would be one more library mapped into every program. */
static double neg_ln(double u) {
  uint64_t bits;
  memcpy(&bits, &u, sizeof bits);
  int e = (int)((bits >> 52) & 0x7ff) - 1023;
  bits = (bits & ((1ull << 52) - 1)) | (1023ull << 52);
  double m;
  memcpy(&m, &bits, sizeof m);
  if (m > 1.41421356237309504880) m *= 0.5, e++;
  double t = (m - 1) / (m + 1), t2 = t * t;
  double ln_m = 2 * t * (1 + t2 * (1.0 / 3 + t2 * (1.0 / 5 + t2 * (1.0 / 7 + t2 * (1.0 / 9)))));
  return -(e * 0.69314718055994530942 + ln_m);
}

/* Bytes to the next sample: exponential with mean `mean`, at least 1. */
static int64_t heap_interval(struct heap_thread *t) {
  double u = (double)((rng_next(t) >> 11) + 1) * 0x1p-53;   /* (0, 1]: normal, never 0 */
  double v = neg_ln(u) * mean;
  return v < 1 ? 1 : v > 0x1p62 ? (int64_t)1 << 62 : (int64_t)v;
}

/* ---- stacks ------------------------------------------------------------------------------ */
static int self_find(struct dl_phdr_info *info, size_t size, void *arg) {
  (void)size;
  uintptr_t me = (uintptr_t)arg;
  for (int i = 0; i < info->dlpi_phnum; i++) {
    const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
    uintptr_t lo = info->dlpi_addr + ph->p_vaddr;
    if (ph->p_type != PT_LOAD || me - lo >= ph->p_memsz) continue;
    if (info->dlpi_name && info->dlpi_name[0]) {   /* a library; linked into the program: keep all */
      self_lo = lo;
      self_hi = lo + ph->p_memsz;
    }
    return 1;
  }
  return 0;
}

struct walk {
  uintptr_t *pc;
  uint32_t n;
};

static _Unwind_Reason_Code walk_frame(struct _Unwind_Context *ctx, void *arg) {
  struct walk *w = arg;
  uintptr_t ip = _Unwind_GetIP(ctx);
  if (!ip) return _URC_END_OF_STACK;
  if (w->n == 0 && ip - self_lo < self_hi - self_lo) return _URC_NO_REASON;
  w->pc[w->n++] = ip;
  return w->n < HEAP_DEPTH ? _URC_NO_REASON : _URC_END_OF_STACK;
}

static noinline uint32_t heap_backtrace(uintptr_t *pc) {
  int k = 0;
  if (atomic_load_explicit(&self_known, memory_order_acquire) != 2 &&
      atomic_compare_exchange_strong(&self_known, &k, 1)) {
    dl_iterate_phdr(self_find, (void *)(uintptr_t)heap_backtrace);
    atomic_store_explicit(&self_known, 2, memory_order_release);
  }
  struct walk w = {pc, 0};
  _Unwind_Backtrace(walk_frame, &w);
  return w.n;
}

static uint64_t stack_hash(const uintptr_t *pc, uint32_t n) {
  uint64_t h = 0x9e3779b97f4a7c15ull ^ n;
  for (uint32_t i = 0; i < n; i++) h = (h ^ pc[i]) * 0xff51afd7ed558ccdull, h ^= h >> 32;
  return h | 1;
}

/* The entry of stack pc[0..n), made when new; under heap_lock. Entry 0 when the table is
 * three-quarters full. */
static struct heap_stack *stack_get(const uintptr_t *pc, uint32_t n) {
  uint64_t h = stack_hash(pc, n);
  for (uint32_t i = (uint32_t)h & (HEAP_STACKS - 1);; i = (i + 1) & (HEAP_STACKS - 1)) {
    struct heap_stack *s = &stacks[i];
    if (i == 0) continue;
    if (s->hash == h && s->depth == n && !memcmp(s->pc, pc, n * sizeof *pc)) return s;
    if (s->hash) continue;
    if (nstacks >= HEAP_STACKS / 4 * 3) return &stacks[0];
    nstacks++;
    s->depth = n;
    memcpy(s->pc, pc, n * sizeof *pc);
    s->hash = h;
    return s;
  }
}

/* ---- the file ---------------------------------------------------------------------------- */
struct out {
  struct fmt f;
  int fd;
  char buf[4096];
};

static void out_flush(struct out *o, size_t room) {
  if (o->f.len > sizeof o->buf - room) {
    os_write(o->fd, o->buf, o->f.len);
    o->f.len = 0;
  }
}

static void out_counts(struct out *o, uint64_t ln, uint64_t lb, uint64_t an, uint64_t ab) {
  fmt_u64(&o->f, ln, 6);
  fmt_str(&o->f, ": ");
  fmt_u64(&o->f, lb, 8);
  fmt_str(&o->f, " [");
  fmt_u64(&o->f, an, 6);
  fmt_str(&o->f, ": ");
  fmt_u64(&o->f, ab, 8);
  fmt_str(&o->f, "] @");
}

/* gperftools' heap profile: a header with the totals and the sampling rate, a line per stack
 * (live count: bytes [allocated count: bytes] @ pcs), then /proc/self/maps after
 * MAPPED_LIBRARIES: so pprof finds each address's object. Under heap_lock. */
static int heap_write(const char *name) {
  struct out o;
  o.f = (struct fmt){o.buf, sizeof o.buf, 0};
  if ((o.fd = os_create(name)) < 0) return -1;
  uint64_t t[4] = {0, 0, 0, 0};
  for (uint32_t i = 0; i < HEAP_STACKS; i++) {
    const struct heap_stack *s = &stacks[i];
    t[0] += s->live_n, t[1] += s->live_bytes, t[2] += s->alloc_n, t[3] += s->alloc_bytes;
  }
  fmt_str(&o.f, "heap profile: ");
  out_counts(&o, t[0], t[1], t[2], t[3]);
  fmt_str(&o.f, " heap_v2/");
  fmt_u64(&o.f, (uint64_t)mean, 0);
  fmt_str(&o.f, "\n");
  for (uint32_t i = 0; i < HEAP_STACKS; i++) {
    const struct heap_stack *s = &stacks[i];
    if (!s->alloc_n) continue;
    out_counts(&o, s->live_n, s->live_bytes, s->alloc_n, s->alloc_bytes);
    for (uint32_t k = 0; k < s->depth || k == 0; k++) {
      fmt_str(&o.f, " ");
      fmt_hex(&o.f, k < s->depth ? s->pc[k] : 0);
      out_flush(&o, 64);
    }
    fmt_str(&o.f, "\n");
  }
  fmt_str(&o.f, "\nMAPPED_LIBRARIES:\n");
  os_write(o.fd, o.buf, o.f.len);
  int maps = os_open_read("/proc/self/maps");
  if (maps >= 0) {
    long n;
    while ((n = os_read(maps, o.buf, sizeof o.buf)) > 0) os_write(o.fd, o.buf, (size_t)n);
    os_close(maps);
  }
  os_close(o.fd);
  return 0;
}

/* FILE.PID, or FILE.PID.N for the n-th dump on demand. */
static void heap_name(char *name, uint32_t n) {
  struct fmt f = {name, HEAP_PATH_MAX, 0};
  fmt_str(&f, path);
  fmt_str(&f, ".");
  fmt_u64(&f, (unsigned)os_getpid(), 0);
  if (n) {
    fmt_str(&f, ".");
    fmt_u64(&f, n, 0);
  }
  fmt_end(&f);
}

static void heap_write_next(void) {
  char name[HEAP_PATH_MAX];
  heap_name(name, atomic_fetch_add(&dumps, 1) + 1);
  heap_write(name);
}

static void heap_unlock(void) {
  pthread_mutex_unlock(&heap_lock);
  if (unlikely(pending)) {
    pending = 0;
    pthread_mutex_lock(&heap_lock);
    heap_write_next();
    pthread_mutex_unlock(&heap_lock);
  }
}

static void heap_on_signal(int sig) {
  (void)sig;
  int saved = errno;
  if (pthread_mutex_trylock(&heap_lock) == 0) {
    heap_write_next();
    pthread_mutex_unlock(&heap_lock);
  } else {
    pending = 1;
  }
  errno = saved;
}

int flatmalloc_heap_dump(const char *name) {
  if (!heap_on) {
    errno = ENOENT;
    return -1;
  }
  char deflt[HEAP_PATH_MAX];
  if (!name) {
    heap_name(deflt, atomic_fetch_add(&dumps, 1) + 1);
    name = deflt;
  }
  pthread_mutex_lock(&heap_lock);
  int r = heap_write(name);
  heap_unlock();
  return r;
}

/* ---- the allocation and free paths ------------------------------------------------------- */
/* Counts sampled large block p of size bytes for stack pc[0..n) and marks its first chunk. */
static void heap_record(void *p, size_t size, const uintptr_t *pc, uint32_t n) {
  uintptr_t ch = ((uintptr_t)p - fm_pool.heap_base) >> FM_CHUNK_SHIFT;
  pthread_mutex_lock(&heap_lock);
  struct heap_stack *s = stack_get(pc, n);
  s->live_n++, s->live_bytes += size, s->alloc_n++, s->alloc_bytes += size;
  __atomic_store_n(&mark[ch], (uint64_t)size << MARK_STACK_BITS | (uint64_t)(s - stacks + 1), __ATOMIC_RELAXED);
  heap_unlock();
}

/* Not sampled: a block of size bytes, aligned to align (0: 16), read as zero when zero is set. */
static void *plain(size_t size, size_t align, bool zero) {
  if (align) return block_alloc_aligned(align, size);
  if (!zero) return block_alloc(size);
  void *p = size > fm_pool.small_max ? large_calloc(size) : block_alloc(size);
  return p && size <= fm_pool.small_max ? memset(p, 0, size) : p;
}

static noinline void *heap_sample(size_t size, size_t align, bool zero) {
  struct heap_thread *t = &heap_tl;
  if (t->busy) return plain(size, align, zero);
  if (!t->rng) {   /* the thread's first allocation: start its countdown */
    t->rng = (fm_pool.key ^ ((uintptr_t)t * 0x9e3779b97f4a7c15ull)) | 1;
    t->left = heap_interval(t) - (int64_t)size;
    if (t->left > 0) return plain(size, align, zero);
  }
  t->left = heap_interval(t);
  uintptr_t pc[HEAP_DEPTH];
  t->busy = true;
  uint32_t n = heap_backtrace(pc);
  void *p = zero ? large_calloc(size) : large_alloc(size, align);
  t->busy = false;
  if (!p) return plain(size, align, zero);   /* no run for a block of its own: not sampled */
  heap_record(p, size, pc, n);
  return p;
}

/* Not sampled, size at most the largest class: the fast paths' pop from the thread cache
 * (heap mode fails fm_alloc's size test on purpose to come here), else tcache_alloc. */
static always_inline void *heap_pop(size_t size, bool *zero) {
  struct fm_tcache *tc = fm_tc;
  unsigned c1 = fm_pool.cls_of[(size + FM_ALIGN - 1) / FM_ALIGN];
  return fm_bin_empty(tc, c1) ? tcache_alloc(c1 - 1, true, zero) : fm_pop(tc, c1, zero);
}

void *heap_alloc(size_t size) {
  struct heap_thread *t = &heap_tl;
  int64_t left = t->left - (int64_t)size;
  if (unlikely(left <= 0 || size >= ((size_t)1 << 62))) return left <= 0 ? heap_sample(size, 0, false) : block_alloc(size);
  t->left = left;
  if (unlikely(size > fm_pool.small_max)) return block_alloc(size);
  return heap_pop(size, NULL);
}

/* posix_memalign and the like, align above 16: a sampled block is a large block so aligned. */
void *heap_alloc_aligned(size_t align, size_t size) {
  struct heap_thread *t = &heap_tl;
  int64_t left = t->left - (int64_t)size;
  if (size < ((size_t)1 << 62) && left <= 0) {
    void *p = heap_sample(size, align, false);
    if (!p) errno = ENOMEM;
    return p;
  }
  t->left = left;
  return block_alloc_aligned(align, size);
}

/* calloc: a block that reads as zero, cleared only when it may not (a fresh class block that
 * still reads as zero, large_calloc's fresh pages given back). NULL with errno ENOMEM. */
void *heap_calloc(size_t size) {
  struct heap_thread *t = &heap_tl;
  int64_t left = t->left - (int64_t)size;
  void *p;
  if (size < ((size_t)1 << 62) && left <= 0) {
    p = heap_sample(size, 0, true);
  } else if (size > fm_pool.small_max) {
    t->left = left;
    p = large_calloc(size);
  } else {
    t->left = left;
    bool zero;
    p = heap_pop(size, &zero);
    if (p && !(zero && block_reads_zero(p, size))) memset(p, 0, size);
    return p;
  }
  if (!p) errno = ENOMEM;
  return p;
}

void heap_free(void *p) {
  uintptr_t off = (uintptr_t)p - fm_pool.heap_base;
  if (off >= fm_pool.heap_size || (off & (FM_CHUNK - 1))) return;
  uint64_t *m = &mark[off >> FM_CHUNK_SHIFT];
  if (!__atomic_load_n(m, __ATOMIC_RELAXED)) return;
  uint64_t v = __atomic_exchange_n(m, 0, __ATOMIC_RELAXED);   /* one of two racing frees */
  if (!v) return;
  struct heap_stack *s = &stacks[(v & ((1u << MARK_STACK_BITS) - 1)) - 1];
  pthread_mutex_lock(&heap_lock);
  s->live_n--, s->live_bytes -= v >> MARK_STACK_BITS;
  heap_unlock();
}

/* realloc resized large block p in place to size bytes: counted as its free and an allocation
 * of size bytes at the same place, which may be sampled (p is a large block: it can be marked). */
void heap_resized(void *p, size_t size) {
  heap_free(p);
  struct heap_thread *t = &heap_tl;
  int64_t left = t->left - (int64_t)size;
  if (left > 0 || t->busy || !t->rng || size >= ((size_t)1 << 62)) {
    if (t->rng) t->left = left;
    return;
  }
  t->left = heap_interval(t);
  uintptr_t pc[HEAP_DEPTH];
  t->busy = true;
  uint32_t n = heap_backtrace(pc);
  t->busy = false;
  heap_record(p, size, pc, n);
}

/* ---- arena allocations ------------------------------------------------------------------- */
/* An arena allocation is not a block of its own: a sampled one is counted by its stack while
 * it lives (until its arena's reset), and nothing is marked. */
uint32_t heap_arena_sample(size_t size) {
  struct heap_thread *t = &heap_tl;
  int64_t left = t->left - (int64_t)size;
  if (!t->rng) {
    t->rng = (fm_pool.key ^ ((uintptr_t)t * 0x9e3779b97f4a7c15ull)) | 1;
    left = heap_interval(t) - (int64_t)size;
  }
  if (left > 0 || t->busy || size >= ((size_t)1 << 62)) {
    t->left = left;
    return 0;
  }
  t->left = heap_interval(t);
  uintptr_t pc[HEAP_DEPTH];
  t->busy = true;
  uint32_t n = heap_backtrace(pc);
  t->busy = false;
  pthread_mutex_lock(&heap_lock);
  struct heap_stack *s = stack_get(pc, n);
  s->live_n++, s->live_bytes += size, s->alloc_n++, s->alloc_bytes += size;
  heap_unlock();
  return (uint32_t)(s - stacks) + 1;
}

void heap_arena_done(uint32_t stack, size_t size) {
  if (stack - 1 >= HEAP_STACKS) return;   /* the record lives in the arena: trust no value */
  struct heap_stack *s = &stacks[stack - 1];
  pthread_mutex_lock(&heap_lock);
  if (s->live_n) s->live_n--, s->live_bytes -= size < s->live_bytes ? size : s->live_bytes;
  heap_unlock();
}

/* ---- start-up, fork, exit ---------------------------------------------------------------- */
/* In the child only the forking thread runs: a lock another thread held is free again, and
 * the child's allocated counts start from the blocks it inherited. */
static void heap_after_fork(void) {
  pthread_mutex_init(&heap_lock, NULL);
  pending = 0;
  atomic_store(&dumps, 0);
  for (uint32_t i = 0; i < HEAP_STACKS; i++) {
    stacks[i].alloc_n = stacks[i].live_n;
    stacks[i].alloc_bytes = stacks[i].live_bytes;
  }
}

void heap_setup(void) {
  const struct fm_options *o = &fm_pool.opt;
  const char *p = o->heap;
  if (!p) return;
  if (o->check || o->profile || fm_pool.valgrind) {
    static const char msg[] =
        "flatmalloc: FLATMALLOC_HEAP is ignored in checking mode, with FLATMALLOC_PROFILE and under Valgrind\n";
    os_write(2, msg, sizeof msg - 1);
    return;
  }
  struct fmt f = {path, sizeof path, 0};
  if (p[0] != '/') {
    char cwd[HEAP_PATH_MAX];
    if (os_cwd(cwd, sizeof cwd)) {
      fmt_str(&f, cwd);
      fmt_str(&f, "/");
    }
  }
  fmt_str(&f, p);
  if (fmt_end(&f) + 32 >= sizeof path) options_fail("FLATMALLOC_HEAP", p, "path too long");
  size_t chunks = fm_pool.heap_size >> FM_CHUNK_SHIFT;
  mark = large_calloc(chunks * sizeof *mark);
  stacks = large_calloc(HEAP_STACKS * sizeof *stacks);
  if (!mark || !stacks) options_fail("FLATMALLOC_HEAP", p, "no room for the profiler's tables in the pool");
  stacks[0].depth = 0;   /* "other stacks": written with the one address 0 */
  mean = (double)o->heap_sample;
  if (o->heap_signal) os_on_signal(o->heap_signal, heap_on_signal);
  pthread_atfork(NULL, NULL, heap_after_fork);
  heap_on = true;
}

__attribute__((destructor)) static void heap_at_exit(void) {
  if (!heap_on || !pool_ready()) return;
  char name[HEAP_PATH_MAX];
  heap_name(name, 0);
  pthread_mutex_lock(&heap_lock);
  if (heap_write(name) < 0) {
    char buf[HEAP_PATH_MAX + 64];
    struct fmt e = {buf, sizeof buf, 0};
    fmt_str(&e, "flatmalloc: FLATMALLOC_HEAP: cannot create ");
    fmt_str(&e, name);
    fmt_str(&e, "\n");
    os_write(2, buf, e.len < sizeof buf ? e.len : sizeof buf);
  }
  pthread_mutex_unlock(&heap_lock);
}
