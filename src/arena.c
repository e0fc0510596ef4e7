/* Arenas (types.h, ARENA): bump allocation through slabs taken from the pool, released all at
 * once by a reset that keeps the slabs, for programs that link flatmalloc (the per-query arena
 * of the mskql write-up, the parser write-up's memory resource).
 *
 *     first slab: [ struct flatmalloc_arena | allocations ...              ]
 *     next slabs: [ allocations ...                    ]   (chained in their run records)
 *     own runs:   [ one allocation larger than ARENA_BIG ]   (given back at reset)
 *
 * A slab is a run of the heap of its own kind (RUN_ARENA), taken and given back through span.c
 * like a large block, so it counts in the pool and its pages follow the retained budget once
 * given back; its chunks belong to no span, so free(), realloc() and malloc_usable_size() of
 * a pointer into one stop the program ("free of an arena allocation", large.c). The chain of
 * slabs and of own runs lives in the run records, out of the heap: an overrun damages no link.
 * The arena's own struct opens its first slab.
 *
 * Slabs double from ARENA_SLAB_MIN to ARENA_SLAB_MAX. A reset rewinds to the first slab and
 * keeps the chain up to the cap given at creation (the first slab always), so a program that
 * does the same work each round takes no run after the first: the prefix within the cap is
 * known from when each slab was added, and the reset walks only the slabs over the cap and the
 * own runs, each given back in one call to span.c.
 *
 * The fast path is a bump and one compare against `end`. Checking mode, Valgrind and the heap
 * profiler set `end` to 0, which sends every call to the slow path:
 * - checking mode: each allocation is [header | padding | bytes | canary], the end of the used
 *   part of a slab marked by a header of size ARENA_END; a reset checks every canary and
 *   fills the old contents with ARENA_FILL; a second thread in a call on the same arena stops;
 * - memcheck: the arena is a mempool, each allocation one chunk of it, a red zone after each;
 *   a reset trims the pool to nothing, so a read after it is reported as any freed block's;
 * - the heap profiler: the thread's byte countdown runs over arena bytes too, and a sampled
 *   allocation is counted live, by its stack, until the reset. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "flatmalloc.h"
#include "heap.h"
#include "internal.h"
#include "vg.h"

#ifndef FM_VALGRIND
#define VALGRIND_CREATE_MEMPOOL(p, rz, z) ((void)(p))
#define VALGRIND_DESTROY_MEMPOOL(p) ((void)(p))
#define VALGRIND_MEMPOOL_ALLOC(p, a, s) ((void)(p), (void)(a), (void)(s))
#define VALGRIND_MEMPOOL_TRIM(p, a, s) ((void)(p))
#endif

#define ARENA_SLAB_MIN (64u << 10)       /* the first slab, as mskql's */
#define ARENA_SLAB_MAX (1u << 20)        /* slabs double up to this */
#define ARENA_BIG (ARENA_SLAB_MAX / 4)   /* a request of more gets a run of its own */
#define ARENA_ALIGN_MAX ((size_t)1 << 20)  /* also flatmalloc_arena_bump's */
#define ARENA_KEEP_DEFAULT ((size_t)4 << 20)
#define ARENA_REDZONE 16u                /* Valgrind: no-access bytes after each allocation */
#define ARENA_FILL 0xa5                  /* checking mode: what a reset leaves in old contents */
#define ARENA_END UINT64_MAX             /* checking mode: header size that ends a slab's use */
#define ARENA_MAGIC 0xa7e4a5b1u

struct flatmalloc_arena {
  struct flatmalloc_arena_cursor pos;   /* first (flatmalloc.h): the current slab's next free byte
                                           and its end; end 0 sends every call to the slow path */
  uintptr_t limit;       /* the current slab's end, always */
  uint32_t cur, first;   /* chunk index of the current and the first slab */
  uint32_t kept;         /* the last slab within the cap (chain order) */
  uint32_t last;         /* the last slab of the chain */
  uint32_t big;          /* own runs: chunk index + 1 of the newest, chained */
  uint32_t magic;
  bool slow;             /* checking mode, Valgrind or the heap profiler */
  bool checked;          /* checking mode's headers, canaries and fill */
  bool pool;             /* memcheck: described as a mempool */
  size_t keep;           /* bytes of slabs kept across a reset (the cap) */
  size_t chain;          /* bytes of the slabs in the chain */
  size_t big_bytes;      /* bytes of the own runs */
  size_t before;         /* bytes handed out from slabs before the current one, this round */
  size_t peak, held_peak;
  uint64_t taken, given, resets;
  _Atomic uintptr_t user;   /* checking mode: the thread inside a call */
  struct arena_sample *samples;   /* heap profiler: sampled allocations of this round */
};

/* A sampled allocation (heap profiler), recorded in the arena's own memory: gone at reset. */
struct arena_sample {
  struct arena_sample *next;
  size_t size;
  uint32_t stack;
};

/* Checking mode's header before each allocation. */
struct arena_hdr {
  uint64_t size;   /* ARENA_END: no allocation from here on in this slab */
  uint32_t lead;   /* bytes from the header to the allocation */
  uint32_t magic;
};

/* All arenas' totals, for the statistics. */
static struct {
  _Atomic uint64_t live, made, held, held_peak, taken, given, resets;
} T;

static uintptr_t chunk_addr(uint32_t i) { return fm_pool.heap_base + ((uintptr_t)i << FM_CHUNK_SHIFT); }
static size_t run_bytes(uint32_t i) { return (size_t)span_rec(i)->len << FM_CHUNK_SHIFT; }
static uintptr_t run_end(uint32_t i) { return chunk_addr(i) + run_bytes(i); }
static uintptr_t align_up(uintptr_t v, size_t a) { return (v + a - 1) & ~(uintptr_t)(a - 1); }
static bool align_ok(size_t align) { return align && !(align & (align - 1)) && align <= ARENA_ALIGN_MAX; }
static uint32_t magic_of(const flatmalloc_arena *a) { return (uint32_t)(fm_pool.key >> 16) ^ (uint32_t)((uintptr_t)a >> 4) ^ ARENA_MAGIC; }
static uint32_t hdr_magic(const struct arena_hdr *h) { return (uint32_t)fm_pool.key ^ (uint32_t)((uintptr_t)h >> 4) ^ ARENA_MAGIC; }

/* The first byte a slab hands out: after the arena itself in the first slab. */
static uintptr_t slab_start(const flatmalloc_arena *a, uint32_t i) {
  return i == a->first ? align_up((uintptr_t)a + sizeof *a + ARENA_REDZONE, 64) : chunk_addr(i);
}

/* ---- runs -------------------------------------------------------------------------------- */
static void held_add(flatmalloc_arena *a, size_t bytes) {
  size_t held = a->chain + a->big_bytes;
  if (held > a->held_peak) a->held_peak = held;
  uint64_t all = atomic_fetch_add_explicit(&T.held, bytes, memory_order_relaxed) + bytes;
  for (uint64_t p = atomic_load_explicit(&T.held_peak, memory_order_relaxed); all > p;)
    if (atomic_compare_exchange_weak_explicit(&T.held_peak, &p, all, memory_order_relaxed, memory_order_relaxed)) break;
  a->taken++;
  atomic_fetch_add_explicit(&T.taken, 1, memory_order_relaxed);
}

/* A run of at least bytes, or -1. Under a Valgrind tool the heap is no-access until handed
 * out: memcheck's mempool makes each allocation accessible, and otherwise (checking mode
 * under a tool writes headers and canaries) the whole run is opened. */
static int64_t run_take(size_t bytes, bool open) {
  size_t n = (bytes + FM_CHUNK - 1) >> FM_CHUNK_SHIFT;
  if (bytes > fm_pool.heap_size || n >= UINT32_MAX) return -1;
  int64_t i = span_alloc_arena((uint32_t)n);
  if (i >= 0 && open) VALGRIND_MAKE_MEM_UNDEFINED((void *)chunk_addr((uint32_t)i), n << FM_CHUNK_SHIFT);
  return i;
}

/* Gives run i back (last of all the first slab, which holds the arena itself). */
static void run_give(flatmalloc_arena *a, uint32_t i) {
  size_t bytes = run_bytes(i);
  bool pool = a->pool;
  atomic_fetch_sub_explicit(&T.held, bytes, memory_order_relaxed);
  a->given++;
  atomic_fetch_add_explicit(&T.given, 1, memory_order_relaxed);
  if (pool) VALGRIND_MAKE_MEM_NOACCESS((void *)chunk_addr(i), bytes);
  span_free(i);
}

static void slab_use(flatmalloc_arena *a, uint32_t i) {
  a->cur = i;
  a->pos.bump = slab_start(a, i);
  a->limit = run_end(i);
  a->pos.end = a->slow ? 0 : a->limit;
}

/* Appends a new slab that holds need bytes after its start; false when the pool has none. */
static bool slab_add(flatmalloc_arena *a, size_t need) {
  size_t size = run_bytes(a->last) * 2;
  if (size > ARENA_SLAB_MAX) size = ARENA_SLAB_MAX;
  if (size < need) size = need;
  int64_t i = run_take(size, fm_pool.valgrind && !a->pool);
  if (i < 0) return false;
  uint32_t prev = a->last;
  span_rec(a->last)->next = (uint32_t)i + 1;
  span_rec((uint32_t)i)->next = 0;
  a->last = (uint32_t)i;
  a->chain += run_bytes((uint32_t)i);
  if (a->kept == prev && a->chain <= a->keep) a->kept = (uint32_t)i;   /* within the cap while all before it are */
  held_add(a, run_bytes((uint32_t)i));
  return true;
}

/* ---- checking mode ----------------------------------------------------------------------- */
static cold __attribute__((noreturn)) void arena_fault(const char *what, const void *p) { fault_stop(what, p, FAULT_CLS_ARENA); }

/* One call at a time: the thread inside a call owns the arena's word. */
static void user_enter(flatmalloc_arena *a) {
  uintptr_t none = 0, me = (uintptr_t)pthread_self();
  if (!atomic_compare_exchange_strong_explicit(&a->user, &none, me, memory_order_acquire, memory_order_relaxed))
    arena_fault("arena used by two threads at once", a);
}
static void user_leave(flatmalloc_arena *a) { atomic_store_explicit(&a->user, 0, memory_order_release); }

/* Marks the end of the used part of the current slab (when a header fits before its end). */
static void end_mark(flatmalloc_arena *a) {
  uintptr_t at = align_up(a->pos.bump, FM_ALIGN);
  if (at + sizeof(struct arena_hdr) > a->limit) return;
  struct arena_hdr *h = (struct arena_hdr *)at;
  *h = (struct arena_hdr){ARENA_END, 0, hdr_magic(h)};
}

/* Checks every allocation of [from, to) (headers and canaries), then fills it with ARENA_FILL. */
static void used_check(uintptr_t from, uintptr_t to) {
  for (uintptr_t at = from; at + sizeof(struct arena_hdr) <= to;) {
    struct arena_hdr *h = (struct arena_hdr *)at;
    if (h->magic != hdr_magic(h)) arena_fault("arena allocation header damaged (write past the end of the one before)", h);
    if (h->size == ARENA_END) break;
    uint8_t *user = (uint8_t *)h + h->lead, *end = (uint8_t *)align_up((uintptr_t)user + h->size + CANARY_MIN, FM_ALIGN);
    if ((uintptr_t)end > to || !check_canary_ok(user, h->size, end)) arena_fault("write past the end of an arena allocation", user);
    at = (uintptr_t)end;
  }
  memset((void *)from, ARENA_FILL, to - from);
}

/* The used part of run i, which the arena used up to `to` (its end when unknown). */
static void run_check(const flatmalloc_arena *a, uint32_t i, uintptr_t to) { used_check(slab_start(a, i), to); }

/* ---- allocation -------------------------------------------------------------------------- */
/* An allocation in a run of its own, chained to the arena's own runs. */
static void *big_alloc(flatmalloc_arena *a, size_t size, size_t align, size_t lead) {
  size_t need;
  if (__builtin_add_overflow(size, lead + align + CANARY_MIN + ARENA_REDZONE, &need)) return NULL;
  int64_t i = run_take(need, fm_pool.valgrind && !a->pool);
  if (i < 0) return NULL;
  span_rec((uint32_t)i)->next = a->big;
  a->big = (uint32_t)i + 1;
  a->big_bytes += run_bytes((uint32_t)i);
  held_add(a, run_bytes((uint32_t)i));
  return (void *)(align_up(chunk_addr((uint32_t)i) + lead, align));
}

/* Room for size bytes at align (lead bytes of header before them) in the current slab, the
 * next ones kept from earlier rounds, or a new one; false when the pool has no run. */
static bool slab_room(flatmalloc_arena *a, size_t size, size_t align, size_t lead, size_t tail) {
  for (;;) {
    uintptr_t p = align_up(a->pos.bump + lead, align);
    if (p + size + tail <= a->limit) return true;
    if (a->checked) end_mark(a);
    a->before += a->pos.bump - slab_start(a, a->cur);
    uint32_t next = span_rec(a->cur)->next;
    if (!next) {
      if (!slab_add(a, align_up(lead, align) + size + tail + align)) return false;
      next = a->last + 1;
    }
    slab_use(a, next - 1);
    if (a->checked) end_mark(a);   /* a slab skipped for want of room is walked too */
  }
}

static noinline void *arena_alloc_slow(flatmalloc_arena *a, size_t size, size_t align) {
  if (!align_ok(align)) {
    errno = EINVAL;
    return NULL;
  }
  if (a->checked) user_enter(a);
  if (!size) size = 1;
  if (align < FM_ALIGN && a->checked) align = FM_ALIGN;
  /* memcheck makes a chunk's red zones no-access on both sides when it is trimmed: the lead
   * keeps the one before the first chunk of a run inside the run */
  size_t lead = a->checked ? sizeof(struct arena_hdr) : a->pool ? ARENA_REDZONE : 0;
  size_t tail = a->checked ? CANARY_MIN : a->pool ? ARENA_REDZONE : 0;
  uint32_t stack = heap_on && !a->checked ? heap_arena_sample(size) : 0;
  uint8_t *p;
  uintptr_t at = 0;   /* where the allocation's room starts (checking mode's header) */
  if (size > ARENA_BIG || align > ARENA_BIG) {
    p = big_alloc(a, size, align, lead);
    if (p) at = chunk_addr(a->big - 1);
  } else if (slab_room(a, size, align, lead, tail)) {
    at = a->pos.bump;
    p = (uint8_t *)align_up(a->pos.bump + lead, align);
    a->pos.bump = (uintptr_t)p + size;
  } else {
    p = NULL;
  }
  if (!p) {
    if (stack) heap_arena_done(stack, size);
    if (a->checked) user_leave(a);
    errno = ENOMEM;
    return NULL;
  }
  if (a->checked) {
    struct arena_hdr *h = (struct arena_hdr *)at;   /* 16-aligned: every checked allocation ends so */
    *h = (struct arena_hdr){size, (uint32_t)((uintptr_t)p - at), hdr_magic(h)};
    uint8_t *end = (uint8_t *)align_up((uintptr_t)p + size + CANARY_MIN, FM_ALIGN);
    check_canary_fill(p, size, end);
    if (a->pos.bump == (uintptr_t)p + size) {
      a->pos.bump = (uintptr_t)end;
      end_mark(a);
    } else {
      struct arena_hdr *e = (struct arena_hdr *)end;   /* an own run: ends after its allocation */
      if ((uintptr_t)end + sizeof *e <= run_end(a->big - 1)) *e = (struct arena_hdr){ARENA_END, 0, hdr_magic(e)};
    }
    user_leave(a);
  } else if (a->pool) {
    if (a->pos.bump == (uintptr_t)p + size) a->pos.bump += ARENA_REDZONE;
    VALGRIND_MEMPOOL_ALLOC(a, p, size);
  }
  if (stack) {   /* recorded in the arena itself (the profiler is off in checking mode and under Valgrind) */
    struct arena_sample *s = slab_room(a, sizeof *s, FM_ALIGN, 0, 0) ? (struct arena_sample *)align_up(a->pos.bump, FM_ALIGN) : NULL;
    if (s) {
      a->pos.bump = (uintptr_t)(s + 1);
      *s = (struct arena_sample){a->samples, size, stack};
      a->samples = s;
    } else {
      heap_arena_done(stack, size);
    }
  }
  return p;
}

void *flatmalloc_arena_alloc(flatmalloc_arena *a, size_t size, size_t align) {
  void *p = flatmalloc_arena_bump(&a->pos, size, align);
  return likely(p) ? p : arena_alloc_slow(a, size, align);
}

void *flatmalloc_arena_calloc(flatmalloc_arena *a, size_t count, size_t size, size_t align) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = flatmalloc_arena_alloc(a, n, align);
  return p ? memset(p, 0, n) : NULL;
}

/* ---- create, reset, destroy -------------------------------------------------------------- */
flatmalloc_arena *flatmalloc_arena_create(size_t keep) {
  if (!pool_ready() && !pool_init()) {
    errno = ENOMEM;
    return NULL;
  }
  int64_t i = run_take(ARENA_SLAB_MIN, fm_pool.valgrind && fm_pool.opt.check);
  if (i < 0) {
    errno = ENOMEM;
    return NULL;
  }
  flatmalloc_arena *a = (flatmalloc_arena *)chunk_addr((uint32_t)i);
  bool pool = fm_pool.valgrind && vg_running == VG_MEMCHECK;
  if (pool) VALGRIND_MAKE_MEM_UNDEFINED(a, sizeof *a);
  *a = (flatmalloc_arena){.first = (uint32_t)i, .kept = (uint32_t)i, .last = (uint32_t)i, .keep = keep ? keep : ARENA_KEEP_DEFAULT,
                          .checked = fm_pool.opt.check, .pool = pool && !fm_pool.opt.check, .chain = run_bytes((uint32_t)i)};
  a->slow = a->checked || fm_pool.valgrind || heap_on;
  a->magic = magic_of(a);
  span_rec((uint32_t)i)->next = 0;
  if (a->pool) VALGRIND_CREATE_MEMPOOL(a, ARENA_REDZONE, 0);   /* memcheck names an overrun "after a block" */
  if (a->pool) vg_arena_made(a, sizeof *a);   /* vg.h */
  slab_use(a, (uint32_t)i);
  if (a->checked) end_mark(a);
  held_add(a, a->chain);
  atomic_fetch_add_explicit(&T.live, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&T.made, 1, memory_order_relaxed);
  return a;
}

static void arena_verify(const flatmalloc_arena *a, const char *what) {
  uintptr_t off = (uintptr_t)a - fm_pool.heap_base;
  /* a record in the middle of a run may be stale: the magic tells an arena from its remains */
  if (!a || off >= fm_pool.heap_size || off & (FM_CHUNK - 1) || span_rec((uint32_t)(off >> FM_CHUNK_SHIFT))->kind != RUN_ARENA ||
      a->magic != magic_of(a))
    fault_stop(what, a, -1);
}

static size_t used_now(const flatmalloc_arena *a) { return a->before + (a->pos.bump - slab_start(a, a->cur)); }

/* Gives back the own runs and, checked, checks them. */
static void big_give(flatmalloc_arena *a) {
  for (uint32_t b = a->big; b;) {
    uint32_t next = span_rec(b - 1)->next;
    if (a->checked) run_check(a, b - 1, run_end(b - 1));
    run_give(a, b - 1);
    b = next;
  }
  a->big = 0;
  a->big_bytes = 0;
}

void flatmalloc_arena_reset(flatmalloc_arena *a) {
  arena_verify(a, "flatmalloc_arena_reset of a pointer that is not an arena");
  if (a->checked) {
    user_enter(a);
    for (uint32_t i = a->first;; i = span_rec(i)->next - 1) {   /* the slabs used this round */
      run_check(a, i, i == a->cur ? align_up(a->pos.bump, FM_ALIGN) : run_end(i));
      if (i == a->cur) break;
    }
  }
  for (struct arena_sample *s = a->samples; s; s = s->next) heap_arena_done(s->stack, s->size);
  a->samples = NULL;
  size_t used = used_now(a);
  if (used > a->peak) a->peak = used;
  /* memcheck: every chunk goes, before a run given back can hold another thread's block */
  if (a->pool) VALGRIND_MEMPOOL_TRIM(a, a, 0);
  big_give(a);
  /* the slabs over the cap go back; the rest are the next round's */
  for (uint32_t n = span_rec(a->kept)->next; n;) {
    uint32_t next = span_rec(n - 1)->next;
    a->chain -= run_bytes(n - 1);
    run_give(a, n - 1);
    n = next;
  }
  span_rec(a->kept)->next = 0;
  a->last = a->kept;
  a->before = 0;
  slab_use(a, a->first);
  if (a->checked) {
    end_mark(a);
    user_leave(a);
  }
  a->resets++;
  atomic_fetch_add_explicit(&T.resets, 1, memory_order_relaxed);
}

void flatmalloc_arena_destroy(flatmalloc_arena *a) {
  if (!a) return;
  flatmalloc_arena_reset(a);
  uint32_t first = a->first;
  for (uint32_t n = span_rec(first)->next; n;) {
    uint32_t next = span_rec(n - 1)->next;
    run_give(a, n - 1);
    n = next;
  }
  if (a->pool) VALGRIND_DESTROY_MEMPOOL(a);
  if (a->pool) vg_arena_gone(a, sizeof *a);
  a->magic = 0;
  atomic_fetch_sub_explicit(&T.live, 1, memory_order_relaxed);
  run_give(a, first);
}

/* ---- statistics -------------------------------------------------------------------------- */
void flatmalloc_arena_stats(const flatmalloc_arena *a, struct flatmalloc_arena_stats *s) {
  arena_verify(a, "flatmalloc_arena_stats of a pointer that is not an arena");
  size_t used = used_now(a);
  *s = (struct flatmalloc_arena_stats){.used = used, .peak = used > a->peak ? used : a->peak, .held = a->chain + a->big_bytes,
                                       .held_peak = a->held_peak, .keep = a->keep, .runs_taken = a->taken, .runs_given = a->given,
                                       .resets = a->resets};
  for (uint32_t i = a->first;; i = span_rec(i)->next - 1) {
    s->slabs++;
    if (i == a->last) break;
  }
  for (uint32_t b = a->big; b; b = span_rec(b - 1)->next) s->own_runs++;
}

void arena_totals(struct arena_totals *t) {
  *t = (struct arena_totals){atomic_load(&T.live), atomic_load(&T.made), atomic_load(&T.held), atomic_load(&T.held_peak),
                             atomic_load(&T.taken), atomic_load(&T.given), atomic_load(&T.resets)};
}
