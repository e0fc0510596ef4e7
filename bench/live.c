/* bench/live.c: liblive.so, preloaded in front of an allocator (LD_PRELOAD=liblive.so:ALLOC, or
 * alone for glibc), records the peak of the bytes a program holds: each malloc, calloc,
 * realloc, memalign, aligned_alloc, posix_memalign and C++ operator new adds the block's
 * malloc_usable_size to its thread's count, each free and delete subtracts it, and a thread of
 * its own adds up the counts every millisecond. (The operators are counted themselves: an
 * allocator that exports its own, as flatmalloc, jemalloc, tcmalloc and mimalloc do, serves
 * them without malloc.) At exit it prints "live_peak_kb N" to stderr, or appends it to the
 * file LIVE_OUT names (each process of a program that forks adds its line, if it leaves
 * through exit rather than _exit or exec). A program's peak resident size over this peak is
 * what its allocator adds, timing aside: a multi-threaded program's own peak may change from
 * run to run (rptest's by 5x).
 *
 * Per-thread counts, not one shared counter: a counter two threads add to on every call would
 * serialise them and change the interleaving that decides such a peak. Usable sizes, not the
 * sizes asked for (which free does not know): an allocator with coarser classes counts more as
 * held. Peaks shorter than a millisecond are missed. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#define SLOTS 4096   /* threads counted at once; more add to `retired` directly */

static void *(*next_malloc)(size_t), *(*next_calloc)(size_t, size_t), *(*next_realloc)(void *, size_t);
static void *(*next_memalign)(size_t, size_t), *(*next_aligned_alloc)(size_t, size_t);
static int (*next_posix_memalign)(void **, size_t, size_t);
static void (*next_free)(void *);

static struct {
  _Alignas(64) long bytes;
  int used;
} slot[SLOTS];
static __thread int my_slot = -1;
static long retired;   /* exited threads' counts, and threads without a slot */
static long peak;
static __thread long *mine;
static pthread_key_t exit_key;

/* dlsym may call calloc before next_calloc is known: such calls get this buffer, never freed */
static char early[4096];
static size_t early_used;

static void resolve(void) {
  next_malloc = dlsym(RTLD_NEXT, "malloc");
  next_calloc = dlsym(RTLD_NEXT, "calloc");
  next_realloc = dlsym(RTLD_NEXT, "realloc");
  next_memalign = dlsym(RTLD_NEXT, "memalign");
  next_aligned_alloc = dlsym(RTLD_NEXT, "aligned_alloc");
  next_posix_memalign = dlsym(RTLD_NEXT, "posix_memalign");
  next_free = dlsym(RTLD_NEXT, "free");
}

/* (a pthread key's destructor: the thread exits) */
static void thread_gone(void *arg) {
  (void)arg;
  if (my_slot < 0) return;
  __atomic_fetch_add(&retired, __atomic_exchange_n(&slot[my_slot].bytes, 0, __ATOMIC_RELAXED), __ATOMIC_RELAXED);
  __atomic_store_n(&slot[my_slot].used, 0, __ATOMIC_RELEASE);
  my_slot = -1;
  mine = &retired;
}

static long *my_count(void) {
  if (mine) return mine;
  mine = &retired;
  for (int i = 0; i < SLOTS; i++) {
    int z = 0;
    if (__atomic_compare_exchange_n(&slot[i].used, &z, 1, false, __ATOMIC_ACQ_REL, __ATOMIC_RELAXED)) {
      my_slot = i;
      mine = &slot[i].bytes;
      pthread_setspecific(exit_key, mine);   /* (any non-NULL value: the destructor runs) */
      break;
    }
  }
  return mine;
}

static void count(long d) {
  long *c = my_count();
  if (c == &retired) __atomic_fetch_add(c, d, __ATOMIC_RELAXED);
  else __atomic_store_n(c, *c + d, __ATOMIC_RELAXED);   /* only this thread writes its slot */
}

/* set while an operator new or delete runs: the malloc or free it may call (libstdc++'s) is
 * counted once, by the operator; and while malloc_usable_size runs (tcmalloc's calls operator
 * new the first time: that block is not counted) */
static __thread int in_operator;

static void add(void *p, long sign) {
  if (!p || in_operator) return;
  in_operator++;
  long n = (long)malloc_usable_size(p);
  in_operator--;
  count(sign * n);
}

static bool early_block(void *p) { return (char *)p >= early && (char *)p < early + sizeof early; }

void *malloc(size_t n) {
  if (!next_malloc) resolve();
  void *p = next_malloc(n);
  add(p, 1);
  return p;
}

void *calloc(size_t k, size_t n) {
  if (!next_calloc) {
    size_t b = (k * n + 15) & ~(size_t)15;
    if (early_used + b > sizeof early) return NULL;
    early_used += b;
    return early + early_used - b;
  }
  void *p = next_calloc(k, n);
  add(p, 1);
  return p;
}

void *realloc(void *q, size_t n) {
  if (!next_realloc) resolve();
  long old = q ? (long)malloc_usable_size(q) : 0;
  void *p = next_realloc(q, n);
  if (p || !n) {   /* (realloc(q, 0) may free q and return NULL) */
    count(-old);
    add(p, 1);
  }
  return p;
}

void *memalign(size_t a, size_t n) {
  if (!next_memalign) resolve();
  void *p = next_memalign(a, n);
  add(p, 1);
  return p;
}

void *aligned_alloc(size_t a, size_t n) {
  if (!next_aligned_alloc) resolve();
  void *p = next_aligned_alloc(a, n);
  add(p, 1);
  return p;
}

int posix_memalign(void **r, size_t a, size_t n) {
  if (!next_posix_memalign) resolve();
  int e = next_posix_memalign(r, a, n);
  if (!e) add(*r, 1);
  return e;
}

void free(void *p) {
  if (!p || early_block(p)) return;
  if (!next_free) resolve();
  add(p, -1);
  next_free(p);
}

/* C++: operator new and delete, nothrow, sized and aligned (mangled names, x86-64 and arm64) */
typedef struct { int unused; } nothrow_t;
#define NEXT(sym) static void *sym##_next; if (!sym##_next) sym##_next = dlsym(RTLD_NEXT, #sym)
#define COUNTED_NEW(sym, params, args)          \
  void *sym params {                              \
    NEXT(sym);                                    \
    in_operator++;                                \
    void *p = ((void *(*)params)sym##_next)args; \
    in_operator--;                                \
    add(p, 1);                                    \
    return p;                                     \
  }
#define COUNTED_DELETE(sym, params, args) \
  void sym params {                       \
    if (!p) return;                       \
    NEXT(sym);                            \
    add(p, -1);                           \
    in_operator++;                        \
    ((void (*)params)sym##_next)args;     \
    in_operator--;                        \
  }
COUNTED_NEW(_Znwm, (size_t n), (n))
COUNTED_NEW(_Znam, (size_t n), (n))
COUNTED_NEW(_ZnwmRKSt9nothrow_t, (size_t n, const nothrow_t *t), (n, t))
COUNTED_NEW(_ZnamRKSt9nothrow_t, (size_t n, const nothrow_t *t), (n, t))
COUNTED_NEW(_ZnwmSt11align_val_t, (size_t n, size_t a), (n, a))
COUNTED_NEW(_ZnamSt11align_val_t, (size_t n, size_t a), (n, a))
COUNTED_NEW(_ZnwmSt11align_val_tRKSt9nothrow_t, (size_t n, size_t a, const nothrow_t *t), (n, a, t))
COUNTED_NEW(_ZnamSt11align_val_tRKSt9nothrow_t, (size_t n, size_t a, const nothrow_t *t), (n, a, t))
COUNTED_DELETE(_ZdlPv, (void *p), (p))
COUNTED_DELETE(_ZdaPv, (void *p), (p))
COUNTED_DELETE(_ZdlPvm, (void *p, size_t n), (p, n))
COUNTED_DELETE(_ZdaPvm, (void *p, size_t n), (p, n))
COUNTED_DELETE(_ZdlPvRKSt9nothrow_t, (void *p, const nothrow_t *t), (p, t))
COUNTED_DELETE(_ZdaPvRKSt9nothrow_t, (void *p, const nothrow_t *t), (p, t))
COUNTED_DELETE(_ZdlPvSt11align_val_t, (void *p, size_t a), (p, a))
COUNTED_DELETE(_ZdaPvSt11align_val_t, (void *p, size_t a), (p, a))
COUNTED_DELETE(_ZdlPvmSt11align_val_t, (void *p, size_t n, size_t a), (p, n, a))
COUNTED_DELETE(_ZdaPvmSt11align_val_t, (void *p, size_t n, size_t a), (p, n, a))
COUNTED_DELETE(_ZdlPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t a, const nothrow_t *t), (p, a, t))
COUNTED_DELETE(_ZdaPvSt11align_val_tRKSt9nothrow_t, (void *p, size_t a, const nothrow_t *t), (p, a, t))

static long total(void) {
  long s = __atomic_load_n(&retired, __ATOMIC_RELAXED);
  for (int i = 0; i < SLOTS; i++) s += __atomic_load_n(&slot[i].bytes, __ATOMIC_RELAXED);
  return s;
}

static void *sampler(void *arg) {
  (void)arg;
  for (;;) {
    long s = total();
    if (s > peak) peak = s;
    usleep(1000);
  }
  return NULL;
}

static void start_sampler(void) {
  pthread_t t;
  pthread_attr_t a;
  pthread_attr_init(&a);
  pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
  pthread_create(&t, &a, sampler, NULL);
  pthread_attr_destroy(&a);
}

/* a forked child has no sampler: it starts its own, and its peak from what it holds at fork */
static void child(void) {
  peak = 0;
  start_sampler();
}

__attribute__((constructor)) static void start(void) {
  if (!next_malloc) resolve();
  pthread_key_create(&exit_key, thread_gone);
  pthread_atfork(NULL, NULL, child);
  start_sampler();
}

__attribute__((destructor)) static void report(void) {
  long s = total();
  if (s > peak) peak = s;
  const char *path = getenv("LIVE_OUT");
  FILE *f = path ? fopen(path, "a") : NULL;
  fprintf(f ? f : stderr, "live_peak_kb %ld\n", peak / 1024);
  if (f) fclose(f);
}
