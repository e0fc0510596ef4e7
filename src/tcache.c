/* Thread caches: the slow paths behind fast.h (refill, flush, another thread's block), the
 * remote stacks that take blocks home, the budget on what caches hold, slot recycling and
 * thread exit. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "internal.h"
#include "os.h"

/* Every thread starts on this empty cache: its arrays are empty and their caps 0, so the first
 * malloc and the first free of a thread take the slow path, which gives it a slot. A thread
 * left without one hands out blocks LIVE for no slot (anyone's to free, atomically); the fast
 * path's test of its value never passes, as its bins have no room. */
struct fm_tcache fm_tc_empty = {.tag = ST_LIVE};
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
static uint32_t room(const struct fm_tcache *tc, unsigned c1) { return (uint32_t)(tc->lim[c1] - tc->base[c1]); }

/* ---- the budget -------------------------------------------------------------------------- */
/* What this thread's bins may hold, in bytes: FM_TC_TOTAL shared by the threads holding a slot,
 * within [FM_TC_MIN, FM_TC_MAX]. Read on slow paths only. */
static uint64_t budget(void) {
  uint32_t live = atomic_load_explicit(&fm_pool.slots_live, memory_order_relaxed);
  uint64_t b = FM_TC_TOTAL / (live ? live : 1);
  return b < FM_TC_MIN ? FM_TC_MIN : b > FM_TC_MAX ? FM_TC_MAX : b;
}

/* Gives the oldest n cached blocks of class c back to the class. */
static void bin_flush(struct fm_tcache *tc, unsigned c, uint32_t n) {
  unsigned c1 = c + 1;
  if (!n) return;
  class_give(c, tc->shard, tc->b[c1], n);
  uint32_t left = cached(tc, c1) - n;
  memmove(tc->b[c1], tc->b[c1] + n, left * sizeof tc->b[c1][0]);
  tc->top[c1] -= n;
}

/* Sets the room of bin c to n blocks, giving back what no longer fits. */
static void bin_resize(struct fm_tcache *tc, unsigned c, uint32_t n) {
  unsigned c1 = c + 1;
  if (cached(tc, c1) > n) bin_flush(tc, c, cached(tc, c1) - n);
  tc->cap_bytes -= (uint64_t)room(tc, c1) * fm_pool.cls[c].size;
  tc->cap_bytes += (uint64_t)n * fm_pool.cls[c].size;
  tc->lim[c1] = tc->base[c1] + n;
}

/* Room for `more` blocks of class c in bin c, within the budget: bins of other classes shrink
 * to make it, one per call (round robin), so a thread whose size mix drifts keeps caching.
 * Returns whether the room grew. */
static bool bin_grow(struct fm_tcache *tc, unsigned c, uint32_t more) {
  uint64_t want = (uint64_t)more * fm_pool.cls[c].size, b = budget();
  if (tc->cap_bytes + want > b) {
    for (unsigned k = 0; k < fm_pool.nclass; k++) {
      unsigned v = tc->victim++ % fm_pool.nclass;
      if (v != c && room(tc, v + 1)) {
        bin_resize(tc, v, 0);
        break;
      }
    }
    if (tc->cap_bytes + want > b) return false;
  }
  bin_resize(tc, c, room(tc, c + 1) + more);
  return true;
}

/* ---- remote stacks ----------------------------------------------------------------------- */
/* A block another thread freed waits on its owner's remote stack, linked through its first
 * word, mangled with the process key and its own address; the owner checks every entry's
 * state before it trusts the link. */
static uintptr_t mix(const void *p) { return fm_pool.key ^ (uintptr_t)p; }

static void put(struct fm_tcache *tc, void *p, unsigned c, fm_st *st);

/* Takes up to `most` blocks of tc's remote stack home: into to's caches, or with to NULL
 * straight to their classes. */
static uintptr_t pending(const struct fm_tcache *tc) { return __atomic_load_n(&tc->pending, __ATOMIC_RELAXED); }

static void remote_collect(struct fm_tcache *tc, struct fm_tcache *to, uint32_t most) {
  if (!pending(tc)) {
    if (!atomic_load_explicit(&tc->remote, memory_order_relaxed)) return;
    __atomic_store_n(&tc->pending, atomic_exchange_explicit(&tc->remote, 0, memory_order_acquire), __ATOMIC_RELAXED);
  }
  while (pending(tc) && most--) {
    void *p = (void *)pending(tc);
    fm_st *st;
    int c = class_find(p, &st);
    if (c < 0) fault_stop("a block freed by another thread was damaged", p, class_at(p));
    if (st_load(st) != ST_REMOTE) fault_stop("double free (by two threads at once)", p, c);
    __atomic_store_n(&tc->pending, *(uintptr_t *)p ^ mix(p), __ATOMIC_RELAXED);
    st_store(st, ST_CACHED);
    if (to) put(to, p, (unsigned)c, st);
    else class_give((unsigned)c, tc->shard, &(struct fm_blk){p, st}, 1);
  }
}

/* A slot no thread holds has no owner to take its stack home: whoever finds blocks there drains
 * it, one thread at a time, and the next thread to hold the slot waits for that to end. (Each
 * side writes, then reads what the other writes: sequentially consistent.) */
static void remote_orphans(struct fm_tcache *o) {
  while (!atomic_load(&o->live) && (pending(o) || atomic_load(&o->remote))) {
    if (atomic_exchange(&o->draining, 1)) return;   /* the drainer looks again when it is done */
    if (!atomic_load(&o->live))
      while (pending(o) || atomic_load_explicit(&o->remote, memory_order_relaxed)) remote_collect(o, NULL, UINT32_MAX);
    atomic_store(&o->draining, 0);
  }
}

/* Pushes the chain first..last (linked but for last) on owner's remote stack in one step. */
static void remote_push(struct fm_tcache *owner, void *first, void *last) {
  uintptr_t h = atomic_load_explicit(&owner->remote, memory_order_relaxed);
  do *(uintptr_t *)last = h ^ mix(last);
  while (!atomic_compare_exchange_weak(&owner->remote, &h, (uintptr_t)first));
  if (!atomic_load(&owner->live)) remote_orphans(owner);
}

static void outbox_flush(struct fm_tcache *tc) {
  if (!tc->out_n) return;
  tc->out_n = 0;
  remote_push(tc->out_to, tc->out_first, tc->out_last);
}

/* REMOTE block p of owner's goes home: chained in tc's outbox, which goes out in one push when
 * it is full, holds another owner's blocks, or tc refills, flushes statistics or exits (so a
 * thread holds at most FM_OUTBOX blocks of others). */
static void remote_free(struct fm_tcache *tc, struct fm_tcache *owner, void *p) {
  if (tc == &fm_tc_empty) {
    remote_push(owner, p, p);
    return;
  }
  if (tc->out_n && tc->out_to != owner) outbox_flush(tc);
  if (tc->out_n) *(uintptr_t *)p = (uintptr_t)tc->out_first ^ mix(p);
  else tc->out_to = owner, tc->out_last = p;
  tc->out_first = p;
  if (++tc->out_n == FM_OUTBOX) outbox_flush(tc);
}

/* ---- slots in and out -------------------------------------------------------------------- */
static void tcache_exit(void *v) {
  struct fm_tcache *tc = v;
  fm_tc = &fm_tc_empty;
  outbox_flush(tc);
  for (unsigned c = 0; c < fm_pool.nclass; c++)
    if (tc->base[c + 1]) bin_resize(tc, c, 0);
  atomic_fetch_sub_explicit(&fm_pool.slots_live, 1, memory_order_relaxed);
  atomic_store(&tc->live, 0);
  remote_orphans(tc);   /* what other threads freed for it, now and after */
  slot_push(tc);
}

void tcache_setup(void) { pthread_key_create(&tcache_key, tcache_exit); }

/* Sets slot tc's bins up: empty and without room (it grows by demand), or none when not
 * caching; its blocks are LIVE with its own value only when it caches (a thread without a
 * cache cannot take remote blocks home: its blocks are anyone's to free atomically). */
static void slot_open(struct fm_tcache *tc, bool caching) {
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    unsigned c1 = c + 1;
    tc->base[c1] = tc->top[c1] = tc->lim[c1] = caching ? tc->b[c1] : NULL;
  }
  tc->cap_bytes = 0;
  while (atomic_exchange(&tc->draining, 1)) sched_yield();   /* a thread drains its stack: wait */
  atomic_store(&tc->live, 1);
  atomic_store(&tc->draining, 0);
  tc->tag = caching ? (fm_st)(ST_OWNED + tc->index) : ST_LIVE;
  tc->shard = (uint16_t)(tc->index & (FM_SHARDS - 1));
}

/* Gives the calling thread a slot. NULL when every slot is taken: the thread then works
 * directly on the classes, one block at a time. */
static struct fm_tcache *tcache_attach(void) {
  struct fm_tcache *tc = slot_pop();
  if (!tc) return NULL;
  slot_open(tc, !fm_pool.valgrind);   /* not under a Valgrind tool: it sees blocks leave and come back */
  atomic_fetch_add_explicit(&fm_pool.slots_live, 1, memory_order_relaxed);
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
/* One block of class c, LIVE for tc; with borrow, a class that cannot grow takes a free block of
 * one of the next FM_BORROW_STEPS larger classes. NULL when none has one. *zero (when asked)
 * says the block should read as zero. */
static void *take(struct fm_tcache *tc, unsigned c, bool borrow, bool *zero) {
  unsigned last = c + (borrow ? FM_BORROW_STEPS : 0);
  if (last >= fm_pool.nclass) last = fm_pool.nclass - 1;
  outbox_flush(tc);
  if (tc->base[1]) remote_collect(tc, tc, FM_COLLECT);
  for (unsigned k = c; k <= last; k++) {
    unsigned k1 = k + 1;
    struct fm_blk got;
    if (tc->base[k1]) {
      uint32_t batch = fm_pool.cls[k].batch;
      if (tc->top[k1] == tc->base[k1]) {
        if (room(tc, k1) < batch) bin_grow(tc, k, batch - room(tc, k1));
        uint32_t want = room(tc, k1) < batch ? room(tc, k1) : batch;
        if (want) tc->top[k1] = tc->base[k1] + class_take(k, tc->shard, tc->b[k1], want, k == c);
      }
      if (tc->top[k1] != tc->base[k1]) {
        got = *--tc->top[k1];
      } else if (room(tc, k1) || !class_take(k, tc->shard, &got, 1, k == c)) {
        goto next;
      }
    } else if (!class_take(k, tc->shard, &got, 1, k == c)) {
      goto next;
    }
    if (zero) *zero = st_load(got.st) == ST_ZERO;
    st_store(got.st, tc->tag);
    if (k != c) class_note(k, tc->shard, true);
    return got.p;
  next:
    if (k == c) class_note(c, tc->shard, false);
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
  tc->tag = ST_LIVE;   /* program threads free these blocks too */
  tc_native = tc;
}

void *tcache_alloc_direct(unsigned c, bool borrow) { return take(tc_native, c, borrow, NULL); }

/* ---- flush ------------------------------------------------------------------------------- */
/* Caches CACHED block p of class c (st its state) in tc, or gives it back to the class when tc
 * has no bin for it or no room within its budget. */
static void put(struct fm_tcache *tc, void *p, unsigned c, fm_st *st) {
  unsigned c1 = c + 1;
  if (!tc->base[c1]) {   /* no slot, or under Valgrind: no caching */
    class_give(c, tc->shard, &(struct fm_blk){p, st}, 1);
    return;
  }
  if (tc->top[c1] >= tc->lim[c1]) {
    uint32_t r = room(tc, c1), batch = fm_pool.cls[c].batch;
    if (tc->cap_bytes > budget()) bin_resize(tc, c, r / 2);
    else if (r >= 2 * batch || !bin_grow(tc, c, r < batch ? batch - r : batch)) bin_flush(tc, c, (r + 1) / 2);
    if (tc->top[c1] >= tc->lim[c1]) {
      class_give(c, tc->shard, &(struct fm_blk){p, st}, 1);
      return;
    }
  }
  *tc->top[c1]++ = (struct fm_blk){p, st};
}

/* free() of LIVE block p of class c (st its state) when the fast path could not take it: the
 * thread's own block to its cache; another cached thread's block to that thread's remote stack;
 * a block no slot owns to this thread's cache, taken with one atomic step. */
void tcache_free(void *p, unsigned c, fm_st *st) {
  struct fm_tcache *tc = tcache_mine();
  fm_st s = st_load(st);
  if (s == tc->tag && s != ST_LIVE) {
    st_store(st, ST_CACHED);
  } else {
    /* the state was LIVE when free() checked it: anything else now is another free's doing */
    if (!st_live(s) || !__atomic_compare_exchange_n(st, &s, s == ST_LIVE ? ST_CACHED : ST_REMOTE, false,
                                                    __ATOMIC_RELAXED, __ATOMIC_RELAXED))
      fault_stop("double free (by two threads at once)", p, (int)c);
    if (s != ST_LIVE) {
      remote_free(tc, &fm_pool.slots[s - ST_OWNED], p);
      return;
    }
  }
  put(tc, p, c, st);
}

void tcache_free_direct(void *p, unsigned c, fm_st *st) {
  st_store(st, ST_CACHED);   /* one native call at a time, no program thread running */
  put(tc_native, p, c, st);
}

/* Sends the calling thread's outbox and takes its remote stack home (for the statistics and
 * malloc_trim, which count those blocks as free). */
void tcache_collect(void) {
  struct fm_tcache *tc = fm_tc;
  if (tc == &fm_tc_empty) return;
  outbox_flush(tc);
  if (!tc->base[1]) return;
  while (pending(tc) || atomic_load_explicit(&tc->remote, memory_order_relaxed)) remote_collect(tc, tc, UINT32_MAX);
}

/* Fork child: only this thread goes on. The other threads' slots are never held again (their
 * blocks stay where they are, a copy-on-write loss only); what the child frees of their blocks
 * goes to their classes through their remote stacks, drained as orphans. A drain a parent's
 * thread was in the middle of stays unfinished: those blocks are lost, nothing else. */
void tcache_after_fork(void) {
  uint32_t used = atomic_load_explicit(&fm_pool.slots_used, memory_order_relaxed), live = 0;
  for (uint32_t i = 0; i < used; i++) {
    struct fm_tcache *tc = &fm_pool.slots[i];
    if (tc != fm_tc && atomic_load_explicit(&tc->live, memory_order_relaxed))   /* (a slot's page is written only if need be) */
      atomic_store_explicit(&tc->live, 0, memory_order_relaxed);
    live += atomic_load_explicit(&tc->live, memory_order_relaxed);
  }
  atomic_store_explicit(&fm_pool.slots_live, live, memory_order_relaxed);
}

/* Blocks of class c sitting in thread caches (read without the threads' help: approximate
 * while they run, exact when they are quiet). */
uint64_t tcache_cached(unsigned c) {
  uint64_t n = 0;
  uint32_t used = atomic_load_explicit(&fm_pool.slots_used, memory_order_relaxed);
  for (uint32_t i = 0; i < used; i++) {
    struct fm_tcache *tc = &fm_pool.slots[i];
    struct fm_blk *top = __atomic_load_n(&tc->top[c + 1], __ATOMIC_RELAXED), *base = tc->base[c + 1];
    n += top > base ? (uint64_t)(top - base) : 0;
  }
  return n;
}

/* Every live slot's entries are blocks of the bin's class in state CACHED, each once, and its
 * room adds up to what it counts. */
int tcache_check(void) {
  int faults = 0;
  uint32_t used = atomic_load_explicit(&fm_pool.slots_used, memory_order_relaxed);
  for (uint32_t i = 0; i < used; i++) {
    struct fm_tcache *tc = &fm_pool.slots[i];
    uint64_t bytes = 0;
    for (unsigned c = 0; c < fm_pool.nclass; c++) {
      unsigned c1 = c + 1;
      if (tc->top[c1] < tc->base[c1] || tc->top[c1] > tc->lim[c1] || room(tc, c1) > FM_CACHE_MAX) faults++;
      bytes += (uint64_t)room(tc, c1) * fm_pool.cls[c].size;
      for (uint32_t j = 0; j < cached(tc, c1) && j < FM_CACHE_MAX; j++) {
        fm_st *st;
        if (class_find(tc->b[c1][j].p, &st) != (int)c || !st_cached(st_load(st)) || st != tc->b[c1][j].st) faults++;
      }
    }
    if (bytes != tc->cap_bytes) faults++;
  }
  return faults;
}
