/* Recording mode (FLATMALLOC_PROFILE=FILE): per request size, the number of requests and the
 * peak number of live blocks, written to FILE.PID at exit for `flatmalloc classes`.
 *
 * BUCKETS. A request of size s falls in a 16-byte bucket (16i, 16i + 16] while s is at most the
 * largest class of the running configuration (fm_pool.small_max), above it in a power-of-two
 * bucket (2^(k-1), 2^k]. A zero-byte request counts as 16.
 *
 * TABLES. Profiling turns on checking mode's routing (every call takes the slow path and the
 * block header keeps the requested size, so free knows it); check.c calls profile_alloc and
 * profile_free. Each thread owns a table (one struct profile_bucket per bucket) and is its only
 * writer: plain loads, relaxed stores, no lock and no atomic read-modify-write per call. A table
 * is taken at a thread's first call and handed back when the thread exits, to be reused by the
 * next new thread: counts in it stay valid as sums, so nothing is lost. Tables come from the
 * large area and are never freed.
 *
 * PEAK ACROSS THREADS. The number of live blocks of a bucket is the sum over tables of
 * live (allocations minus frees made by that table's threads; a thread that frees another's
 * blocks goes negative). Its exact peak would need a shared counter per bucket; instead each
 * table keeps `others`, the other tables' sum as read at its last refresh, and after each
 * allocation records others + own live as a candidate peak. A thread refreshes `others` for a
 * bucket at its first allocation there and every 64th after that (reading each table's live
 * once: relaxed loads, bounded by the number of tables). The recorded peak is the largest
 * candidate of any table, and at least the live count at exit. It is exact when one thread
 * allocates at a time (a single-threaded process, a forked backend) and otherwise off by at
 * most what the other threads did in the bucket since the refresh (at most 63 of their own
 * allocations of that size each, or their frees).
 *
 * FORK. Each process writes its own FILE.PID. A forked child starts its counts afresh: its
 * requests from zero, and its peak relative to the blocks it inherited (origin), so merging the
 * files (`flatmalloc classes` adds them) counts every block once per process that made it. The
 * child's only thread keeps its table; the tables of the parent's other threads go back on the
 * free stack.
 *
 * Processes that end with _exit, a signal or exec write nothing. */
#include <pthread.h>
#include <string.h>

#include "fmt.h"
#include "internal.h"
#include "os.h"

#define PROFILE_VERSION 1
#define PROFILE_TABLES_MAX 4096u     /* threads alive at once that get a table */
#define PROFILE_REFRESH 64u          /* re-read the other tables every this many allocations */
#define PROFILE_PATH_MAX 512u

struct profile_bucket {
  uint64_t requests;
  int64_t live;      /* read by other threads: relaxed loads and stores */
  int64_t others;    /* the other tables' live sum (less origin) at the last refresh */
  int64_t peak;
};

struct profile_table {
  uint64_t next_free;   /* link on the stack of unused tables (index + 1) */
  uint32_t index;
  uint32_t pad;
  struct profile_bucket b[];
};

static bool profile_on;
static unsigned b16;          /* 16-byte buckets: sizes up to b16 * 16 */
static unsigned kmin;         /* first power-of-two bucket: (2^(kmin-1), 2^kmin] */
static unsigned nbucket;
static int64_t *origin;       /* live blocks inherited at fork, per bucket */
static char path[PROFILE_PATH_MAX];
static struct profile_table *tables[PROFILE_TABLES_MAX];
static _Atomic uint32_t ntables;
static _Atomic uint64_t free_tables;   /* tagged stack: low 32 bits index + 1, high 32 a tag */
static _Atomic uint64_t dropped;       /* calls not recorded: no table could be had */
static pthread_key_t profile_key;
static __thread struct profile_table *profile_tl __attribute__((tls_model("initial-exec")));

#define LOAD(x) __atomic_load_n(&(x), __ATOMIC_RELAXED)
#define STORE(x, v) __atomic_store_n(&(x), (v), __ATOMIC_RELAXED)

/* ---- buckets ----------------------------------------------------------------------------- */
static unsigned bucket_of(size_t size) {
  if (size <= (size_t)b16 * 16) return size ? (unsigned)((size - 1) / 16) : 0;
  unsigned k = 64u - (unsigned)__builtin_clzll(size - 1);   /* 2^k >= size */
  if (k > 63) k = 63;
  return b16 + k - kmin;
}

static uint64_t bucket_size(unsigned i) { return i < b16 ? 16ull * (i + 1) : 1ull << (kmin + i - b16); }

/* ---- tables ------------------------------------------------------------------------------ */
static struct profile_table *table_pop(void) {
  uint64_t h = atomic_load_explicit(&free_tables, memory_order_acquire);
  while ((uint32_t)h) {
    struct profile_table *t = tables[(uint32_t)h - 1];
    uint64_t nh = (uint32_t)LOAD(t->next_free) | ((h >> 32) + 1) << 32;
    if (atomic_compare_exchange_weak_explicit(&free_tables, &h, nh, memory_order_acquire, memory_order_acquire))
      return t;
  }
  return NULL;
}

static void table_push(struct profile_table *t) {
  uint64_t h = atomic_load_explicit(&free_tables, memory_order_relaxed);
  do STORE(t->next_free, (uint32_t)h);
  while (!atomic_compare_exchange_weak_explicit(&free_tables, &h, (uint64_t)(t->index + 1) | ((h >> 32) + 1) << 32,
                                                memory_order_release, memory_order_relaxed));
}

static struct profile_table *table_new(void) {
  uint32_t i = atomic_load_explicit(&ntables, memory_order_relaxed);
  do {
    if (i >= PROFILE_TABLES_MAX) return NULL;
  } while (!atomic_compare_exchange_weak(&ntables, &i, i + 1));
  size_t bytes = sizeof(struct profile_table) + (size_t)nbucket * sizeof(struct profile_bucket);
  struct profile_table *t = large_alloc(bytes, 0);
  if (!t) return NULL;   /* slot i stays empty; readers skip it */
  memset(t, 0, bytes);
  t->index = i;
  __atomic_store_n(&tables[i], t, __ATOMIC_RELEASE);
  return t;
}

/* The calling thread's table, taken at its first call (NULL when none can be had). */
static noinline cold struct profile_table *table_attach(void) {
  struct profile_table *t;
  if (!(t = table_pop()) && !(t = table_new())) {
    atomic_fetch_add_explicit(&dropped, 1, memory_order_relaxed);   /* rare: > 4096 threads */
    return NULL;
  }
  profile_tl = t;
  pthread_setspecific(profile_key, t);   /* may allocate: profile_tl is set already */
  return t;
}

static inline struct profile_table *table_get(void) {
  struct profile_table *t = profile_tl;
  return likely(t != NULL) ? t : table_attach();
}

static void profile_thread_exit(void *v) {
  profile_tl = NULL;
  table_push(v);
}

/* Live blocks of bucket i in every table but t, less those inherited at fork. */
static int64_t others_live(const struct profile_table *t, unsigned i) {
  int64_t sum = -origin[i];
  uint32_t n = atomic_load_explicit(&ntables, memory_order_acquire);
  for (uint32_t s = 0; s < n; s++) {
    struct profile_table *u = __atomic_load_n(&tables[s], __ATOMIC_ACQUIRE);
    if (u && u != t) sum += LOAD(u->b[i].live);
  }
  return sum;
}

/* ---- recording (check.c calls these) ----------------------------------------------------- */
void profile_alloc(size_t size) {
  if (!profile_on) return;
  struct profile_table *t = table_get();
  if (!t) return;
  unsigned i = bucket_of(size);
  struct profile_bucket *b = &t->b[i];
  uint64_t n = b->requests;
  STORE(b->requests, n + 1);
  int64_t live = b->live + 1;
  STORE(b->live, live);
  if (n % PROFILE_REFRESH == 0) b->others = others_live(t, i);
  if (b->others + live > b->peak) STORE(b->peak, b->others + live);
}

void profile_free(size_t size) {
  if (!profile_on) return;
  struct profile_table *t = table_get();
  if (!t) return;
  struct profile_bucket *b = &t->b[bucket_of(size)];
  STORE(b->live, b->live - 1);
}

/* ---- fork -------------------------------------------------------------------------------- */
/* In the child only the forking thread exists: nothing runs beside this. */
static void profile_after_fork(void) {
  uint32_t n = atomic_load_explicit(&ntables, memory_order_relaxed);
  for (unsigned i = 0; i < nbucket; i++) {
    int64_t sum = 0;
    for (uint32_t s = 0; s < n; s++)
      if (tables[s]) sum += tables[s]->b[i].live;
    origin[i] = sum;
  }
  atomic_store_explicit(&free_tables, 0, memory_order_relaxed);
  atomic_store_explicit(&dropped, 0, memory_order_relaxed);
  for (uint32_t s = 0; s < n; s++) {
    struct profile_table *t = tables[s];
    if (!t) continue;
    for (unsigned i = 0; i < nbucket; i++) {
      struct profile_bucket *b = &t->b[i];
      b->requests = 0;
      b->peak = 0;
      b->others = -b->live;   /* others + own live = live - origin = 0 */
    }
    if (t != profile_tl) table_push(t);
  }
}

/* ---- start-up and the file --------------------------------------------------------------- */
void profile_setup(void) {
  const char *p = fm_pool.opt.profile;
  if (!p) return;
  struct fmt f = {path, sizeof path, 0};
  if (p[0] != '/') {
    char cwd[PROFILE_PATH_MAX];
    if (os_cwd(cwd, sizeof cwd)) {
      fmt_str(&f, cwd);
      fmt_str(&f, "/");
    }
  }
  fmt_str(&f, p);
  if (fmt_end(&f) + 24 >= sizeof path) options_fail("FLATMALLOC_PROFILE", p, "path too long");
  b16 = (unsigned)(fm_pool.small_max / 16);
  kmin = 64u - (unsigned)__builtin_clzll(fm_pool.small_max);   /* 2^kmin > small_max */
  nbucket = b16 + 64 - kmin;
  origin = large_alloc(nbucket * sizeof *origin, 0);
  if (!origin) options_fail("FLATMALLOC_PROFILE", p, "no room for the profile's tables in the pool");
  memset(origin, 0, nbucket * sizeof *origin);
  pthread_key_create(&profile_key, profile_thread_exit);
  pthread_atfork(NULL, NULL, profile_after_fork);
  profile_on = true;
}

struct out {
  struct fmt f;
  int fd;
  char buf[4096];
};

static void out_line(struct out *o) {
  fmt_mem(&o->f, "\n", 1);
  if (o->f.len > sizeof o->buf - 200) {
    os_write(o->fd, o->buf, o->f.len);
    o->f.len = 0;
  }
}

static void out_pair(struct out *o, const char *key, uint64_t v) {
  fmt_str(&o->f, key);
  fmt_u64(&o->f, v, 0);
  out_line(o);
}

/* The file: a version line, a few "key value" lines, one "size requests peak" line per bucket
 * that saw a request, and "end N" (N bucket lines): a file without it is truncated. */
static void profile_write(void) {
  char name[PROFILE_PATH_MAX];
  struct fmt nf = {name, sizeof name, 0};
  fmt_str(&nf, path);
  fmt_str(&nf, ".");
  fmt_u64(&nf, (unsigned)os_getpid(), 0);
  fmt_end(&nf);
  struct out o;
  o.f = (struct fmt){o.buf, sizeof o.buf, 0};
  if ((o.fd = os_create(name)) < 0) {
    fmt_str(&o.f, "flatmalloc: FLATMALLOC_PROFILE: cannot create ");
    fmt_str(&o.f, name);
    fmt_mem(&o.f, "\n", 1);
    os_write(2, o.buf, o.f.len);
    return;
  }
  uint32_t n = atomic_load_explicit(&ntables, memory_order_acquire);
  out_pair(&o, "flatmalloc-profile ", PROFILE_VERSION);
  out_pair(&o, "pid ", (unsigned)os_getpid());
  out_pair(&o, "exact-up-to ", (uint64_t)b16 * 16);
  out_pair(&o, "tables ", n);
  out_pair(&o, "dropped ", atomic_load_explicit(&dropped, memory_order_relaxed));
  fmt_str(&o.f, "columns size requests peak");
  out_line(&o);
  uint64_t lines = 0;
  for (unsigned i = 0; i < nbucket; i++) {
    uint64_t requests = 0;
    int64_t live = -origin[i], peak = 0;
    for (uint32_t s = 0; s < n; s++) {
      struct profile_table *t = __atomic_load_n(&tables[s], __ATOMIC_ACQUIRE);
      if (!t) continue;
      requests += LOAD(t->b[i].requests);
      live += LOAD(t->b[i].live);
      if (LOAD(t->b[i].peak) > peak) peak = LOAD(t->b[i].peak);
    }
    if (live > peak) peak = live;
    if (!requests && !peak) continue;
    fmt_u64(&o.f, bucket_size(i), 0);
    fmt_str(&o.f, " ");
    fmt_u64(&o.f, requests, 0);
    fmt_str(&o.f, " ");
    fmt_u64(&o.f, (uint64_t)peak, 0);
    out_line(&o);
    lines++;
  }
  out_pair(&o, "end ", lines);
  os_write(o.fd, o.buf, o.f.len);
  os_close(o.fd);
}

__attribute__((destructor)) static void profile_at_exit(void) {
  if (profile_on && pool_ready()) profile_write();
}
