/* Thread caches: the slow paths behind fast.h (refill, flush), slot recycling and thread exit. */
#include <errno.h>
#include <pthread.h>

#include "internal.h"
#include "vg.h"

/* Every thread starts on this empty cache: its lists are empty and its limits 0, so the first
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
  fm_pool.slots[i].index = i;
  return &fm_pool.slots[i];
}

static void slot_push(struct fm_tcache *s) {
  uint64_t h = atomic_load_explicit(&fm_pool.slots_free, memory_order_relaxed);
  do __atomic_store_n(&s->next_free, (uint32_t)h, __ATOMIC_RELAXED);
  while (!atomic_compare_exchange_weak_explicit(&fm_pool.slots_free, &h,
                                                (uint64_t)(s->index + 1) | ((h >> 32) + 1) << 32,
                                                memory_order_release, memory_order_relaxed));
}

/* Hands every cached block back to the stores. */
static void tcache_flush_all(struct fm_tcache *tc) {
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    struct fm_bin *b = &tc->bin[c];
    if (b->count) class_give(c, b->head, b->count);
    if (b->spare_count) class_give(c, b->spare, b->spare_count);
    *b = (struct fm_bin){.limit = b->limit};
  }
}

static void tcache_exit(void *v) {
  struct fm_tcache *tc = v;
  fm_tc = &fm_tc_empty;
  VALGRIND_DISABLE_ERROR_REPORTING;   /* the lists' links live in no-access blocks */
  tcache_flush_all(tc);
  VALGRIND_ENABLE_ERROR_REPORTING;
  atomic_store_explicit((_Atomic uint32_t *)&tc->live, 0, memory_order_relaxed);
  slot_push(tc);
}

void tcache_setup(void) { pthread_key_create(&tcache_key, tcache_exit); }

/* Gives the calling thread a slot. NULL when every slot is taken: the thread then works
 * directly on the stores, one block at a time. */
static struct fm_tcache *tcache_attach(void) {
  struct fm_tcache *tc = slot_pop();
  if (!tc) return NULL;
  for (unsigned c = 0; c < fm_pool.nclass; c++)
    tc->bin[c] = (struct fm_bin){.limit = fm_pool.small_units ? fm_pool.cls[c].batch : 0};
  tc->live = 1;
  fm_tc = tc;
  pthread_setspecific(tcache_key, tc);
  return tc;
}

/* ---- refill ------------------------------------------------------------------------------ */
static void *bin_pop(struct fm_bin *b) {
  void **p = b->head;
  b->head = p[0];
  b->count--;
  return p;
}

/* One block of class c for the calling thread; with borrow, a full class takes a block of one
 * of the next FM_BORROW_STEPS larger classes. NULL with errno ENOMEM when none has one. */
void *tcache_alloc(unsigned c, bool borrow) {
  struct fm_tcache *tc = fm_tc;
  if (tc == &fm_tc_empty && !(tc = tcache_attach())) tc = &fm_tc_empty;
  unsigned last = c + (borrow ? FM_BORROW_STEPS : 0);
  if (last >= fm_pool.nclass) last = fm_pool.nclass - 1;
  for (unsigned k = c; k <= last; k++) {
    struct fm_bin *b = &tc->bin[k];
    if (!b->head && b->spare) {
      b->head = b->spare;
      b->count = b->spare_count;
      b->spare = NULL;
      b->spare_count = 0;
    }
    if (!b->head) {
      void *head;
      unsigned n = class_take(k, &head);
      if (!n) {
        if (k == c) atomic_fetch_add_explicit(&fm_pool.cls[c].exhausted, 1, memory_order_relaxed);
        continue;
      }
      if (tc == &fm_tc_empty) {   /* no slot: keep one block, return the rest */
        void *rest = *(void **)head;
        if (rest) class_give(k, rest, n - 1);
        return head;
      }
      b->head = head;
      b->count = n;
    }
    if (k != c) atomic_fetch_add_explicit(&fm_pool.cls[k].borrows, 1, memory_order_relaxed);
    return bin_pop(b);
  }
  errno = ENOMEM;
  return NULL;
}

/* ---- flush ------------------------------------------------------------------------------- */
/* free() of a block of class c whose list is full (or the thread has no slot yet). */
void tcache_free(void *p, unsigned c) {
  struct fm_tcache *tc = fm_tc;
  if (tc == &fm_tc_empty) tc = tcache_attach();
  struct fm_bin *b = tc ? &tc->bin[c] : NULL;
  if (!b || !b->limit) {   /* no slot, or checking or memcheck mode: no caching */
    ((void **)p)[0] = NULL;
    class_give(c, p, 1);
    return;
  }
  if (b->count >= b->limit) {
    if (b->spare_count) class_give(c, b->spare, b->spare_count);
    b->spare = b->head;
    b->spare_count = b->count;
    b->head = NULL;
    b->count = 0;
  }
  ((void **)p)[0] = b->head;
  b->head = p;
  b->count++;
}

/* Blocks of class c sitting in thread caches (read without the threads' help: approximate
 * while they run, exact when they are quiet). */
uint64_t tcache_cached(unsigned c) {
  uint64_t n = 0;
  uint32_t used = atomic_load_explicit(&fm_pool.slots_used, memory_order_relaxed);
  for (uint32_t i = 0; i < used; i++) {
    struct fm_bin *b = &fm_pool.slots[i].bin[c];
    n += __atomic_load_n(&b->count, __ATOMIC_RELAXED) + __atomic_load_n(&b->spare_count, __ATOMIC_RELAXED);
  }
  return n;
}

/* Every live slot's lists are well formed and as long as their counts say. */
int tcache_check(void) {
  int faults = 0;
  uint32_t used = atomic_load_explicit(&fm_pool.slots_used, memory_order_relaxed);
  for (uint32_t i = 0; i < used; i++)
    for (unsigned c = 0; c < fm_pool.nclass; c++) {
      struct fm_bin *b = &fm_pool.slots[i].bin[c];
      faults += class_check_list(c, b->head, b->count) + class_check_list(c, b->spare, b->spare_count);
    }
  return faults;
}

