/* Thread caches: the slow paths behind fast.h (refill, flush), slot recycling and thread exit. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "internal.h"
#include "os.h"

/* Every thread starts on this empty cache: its arrays are empty and their caps 0, so the first
 * malloc and the first free of a thread take the slow path, which gives it a slot. */
struct fm_tcache fm_tc_empty;
__thread struct fm_tcache *fm_tc __attribute__((tls_model("initial-exec"))) = &fm_tc_empty;

static pthread_key_t tcache_key;

/* ---- slots: a lock-free stack of unused ones, then a bump index -------------------------- */
static struct fm_tcache *slot_pop(void) {
  uint64_t h = atomic_load_explicit(&fm_pool.slots_free, memory_order_acquire);
  while ((uint32_t)h) {
    struct fm_tcache *s = &fm_pool.slots[(uint32_t)h - 1];
    uint64_t next = __atomic_load_n(&s->next_free, __ATOMIC_RELAXED);
    uint64_t nh = (uint32_t)next | ((h >> 32) + 1) << 32;
    if (atomic_compare_exchange_weak_explicit(&fm_pool.slots_free, &h, nh, memory_order_acquire,
                                              memory_order_acquire))
      return s;
  }
  uint32_t i = atomic_load_explicit(&fm_pool.slots_used, memory_order_relaxed);
  do {
    if (i >= fm_pool.slots_max) return NULL;
  } while (!atomic_compare_exchange_weak(&fm_pool.slots_used, &i, i + 1));
  struct fm_tcache *s = &fm_pool.slots[i];
  if (fm_pool.lazy_commit) {
    uintptr_t page = os_page_size(), a = (uintptr_t)s & ~(page - 1);
    if (!os_commit((void *)a, (((uintptr_t)(s + 1) + page - 1) & ~(page - 1)) - a)) return NULL;
  }
  s->index = i;
  return s;
}

static void slot_push(struct fm_tcache *s) {
  uint64_t h = atomic_load_explicit(&fm_pool.slots_free, memory_order_relaxed);
  do __atomic_store_n(&s->next_free, (uint32_t)h, __ATOMIC_RELAXED);
  while (!atomic_compare_exchange_weak_explicit(&fm_pool.slots_free, &h,
                                                (uint64_t)(s->index + 1) | ((h >> 32) + 1) << 32,
                                                memory_order_release, memory_order_relaxed));
}

static uint32_t cached(const struct fm_tcache *tc, unsigned c1) { return (uint32_t)(tc->top[c1] - tc->base[c1]); }

/* Gives the oldest n cached blocks of class c back to the class. */
static void bin_flush(struct fm_tcache *tc, unsigned c, uint32_t n) {
  unsigned c1 = c + 1;
  class_give(c, tc->p[c1], tc->st[c1], n);
  uint32_t left = cached(tc, c1) - n;
  memmove(tc->p[c1], tc->p[c1] + n, left * sizeof tc->p[c1][0]);
  memmove(tc->st[c1], tc->st[c1] + n, left * sizeof tc->st[c1][0]);
  tc->top[c1] -= n;
}

static void tcache_exit(void *v) {
  struct fm_tcache *tc = v;
  fm_tc = &fm_tc_empty;
  for (unsigned c = 0; c < fm_pool.nclass; c++)
    if (cached(tc, c + 1)) bin_flush(tc, c, cached(tc, c + 1));
  atomic_store_explicit((_Atomic uint32_t *)&tc->live, 0, memory_order_relaxed);
  slot_push(tc);
}

void tcache_setup(void) { pthread_key_create(&tcache_key, tcache_exit); }

/* Sets slot tc's bins up: empty, each holding up to two batches, or none (caps 0) when not
 * caching. */
static void slot_open(struct fm_tcache *tc, bool caching) {
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    unsigned c1 = c + 1;
    tc->base[c1] = tc->top[c1] = caching ? tc->p[c1] : NULL;
    tc->lim[c1] = caching ? tc->p[c1] + 2 * fm_pool.cls[c].batch : NULL;
  }
  tc->live = 1;
}

/* Gives the calling thread a slot. NULL when every slot is taken: the thread then works
 * directly on the classes, one block at a time. */
static struct fm_tcache *tcache_attach(void) {
  struct fm_tcache *tc = slot_pop();
  if (!tc) return NULL;
  slot_open(tc, !fm_pool.valgrind);   /* not under a Valgrind tool: it sees blocks leave and come back */
  fm_tc = tc;
  pthread_setspecific(tcache_key, tc);
  return tc;
}

static struct fm_tcache *tcache_mine(void) {
  struct fm_tcache *tc = fm_tc;
  if (tc == &fm_tc_empty && !(tc = tcache_attach())) tc = &fm_tc_empty;
  return tc;
}

/* ---- refill ------------------------------------------------------------------------------ */
/* One block of class c, LIVE; with borrow, a class that cannot grow takes a free block of one
 * of the next FM_BORROW_STEPS larger classes. NULL when none has one. *zero (when asked) says
 * the block reads as zero. */
static void *take(struct fm_tcache *tc, unsigned c, bool borrow, bool *zero) {
  unsigned last = c + (borrow ? FM_BORROW_STEPS : 0);
  if (last >= fm_pool.nclass) last = fm_pool.nclass - 1;
  for (unsigned k = c; k <= last; k++) {
    unsigned k1 = k + 1;
    void *p;
    uint8_t *st;
    if (tc->base[k1]) {
      if (tc->top[k1] == tc->base[k1])
        tc->top[k1] = tc->base[k1] + class_take(k, tc->p[k1], tc->st[k1], fm_pool.cls[k].batch, k == c);
      if (tc->top[k1] == tc->base[k1]) goto next;
      void **top = --tc->top[k1];
      p = *top;
      st = FM_ST_OF(top);
    } else if (!class_take(k, &p, &st, 1, k == c)) {
      goto next;
    }
    if (zero) *zero = st_load(st) == ST_ZERO;
    st_store(st, ST_LIVE);
    if (k != c) class_note(k, true);
    return p;
  next:
    if (k == c) class_note(c, false);
  }
  return NULL;
}

/* take(), NULL with errno ENOMEM. */
void *tcache_alloc(unsigned c, bool borrow, bool *zero) {
  void *p = take(tcache_mine(), c, borrow, zero);
  if (!p) errno = ENOMEM;
  return p;
}

/* check.c's native calls under memcheck run one at a time and must not touch thread-local
 * storage (the cache pointer, errno): they share one cache of their own, a slot as a thread's
 * (the statistics count its blocks, the validator checks them) that no thread owns. Without a
 * slot they work one block at a time, straight on the classes. */
static struct fm_tcache *tc_native = &fm_tc_empty;

void tcache_native_setup(void) {
  struct fm_tcache *tc = slot_pop();
  if (!tc) return;
  slot_open(tc, true);
  tc_native = tc;
}

void *tcache_alloc_direct(unsigned c, bool borrow) { return take(tc_native, c, borrow, NULL); }

/* ---- flush ------------------------------------------------------------------------------- */
/* Caches LIVE block p of class c (st its state byte) in tc, or gives it back to the class when
 * tc has no bin for it. */
static void put(struct fm_tcache *tc, void *p, unsigned c, uint8_t *st) {
  unsigned c1 = c + 1;
  st_store(st, ST_CACHED);
  if (!tc->base[c1]) {   /* no slot, or under Valgrind: no caching */
    class_give(c, &p, &st, 1);
    return;
  }
  if (tc->top[c1] >= tc->lim[c1]) bin_flush(tc, c, (uint32_t)(tc->lim[c1] - tc->base[c1]) / 2);
  void **top = tc->top[c1]++;
  *top = p;
  FM_ST_OF(top) = st;
}

/* free() of LIVE block p of class c (st its state byte) when the fast path could not take it. */
void tcache_free(void *p, unsigned c, uint8_t *st) { put(tcache_mine(), p, c, st); }

void tcache_free_direct(void *p, unsigned c, uint8_t *st) { put(tc_native, p, c, st); }

/* Blocks of class c sitting in thread caches (read without the threads' help: approximate
 * while they run, exact when they are quiet). */
uint64_t tcache_cached(unsigned c) {
  uint64_t n = 0;
  uint32_t used = atomic_load_explicit(&fm_pool.slots_used, memory_order_relaxed);
  for (uint32_t i = 0; i < used; i++) {
    struct fm_tcache *tc = &fm_pool.slots[i];
    void **top = __atomic_load_n(&tc->top[c + 1], __ATOMIC_RELAXED), **base = tc->base[c + 1];
    n += top > base ? (uint64_t)(top - base) : 0;
  }
  return n;
}

/* Every live slot's entries are blocks of the bin's class in state CACHED, each once. */
int tcache_check(void) {
  int faults = 0;
  uint32_t used = atomic_load_explicit(&fm_pool.slots_used, memory_order_relaxed);
  for (uint32_t i = 0; i < used; i++)
    for (unsigned c = 0; c < fm_pool.nclass; c++) {
      struct fm_tcache *tc = &fm_pool.slots[i];
      unsigned c1 = c + 1;
      if (tc->top[c1] < tc->base[c1] || tc->top[c1] > tc->lim[c1]) faults++;
      for (uint32_t j = 0; j < cached(tc, c1) && j < FM_CACHE_MAX; j++) {
        uint8_t *st;
        void *p = tc->p[c1][j];
        if (class_at(p) != (int)c || class_block(p, c, &st) != p || st != tc->st[c1][j] ||
            !st_cached(st_load(st)))
          faults++;
      }
    }
  return faults;
}
