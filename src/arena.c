/* Arenas (types.h, ARENA): bump allocation through slabs taken from the pool, released all at
 * once by a reset that keeps the slabs, for programs that link flatmalloc (the per-query arena
 * of the mskql write-up, the parser write-up's memory resource).
 *
 *     meta area:  [ ... | record of chunks 0-3 | record of chunks 4-7 | ... ]   (struct arena)
 *     first slab: [ allocations ...              ]
 *     next slabs: [ allocations ...                    ]   (chained in their run records)
 *     own runs:   [ one allocation larger than ARENA_BIG ]   (given back at reset)
 *
 * A slab is a run of the heap of its own kind (RUN_ARENA), taken and given back through span.c
 * like a large block, so it counts in the pool and its pages follow the retained budget once
 * given back; its chunks belong to no span, so free(), realloc() and malloc_usable_size() of
 * a pointer into one stop the program ("free of an arena allocation", large.c). The chain of
 * slabs and of own runs lives in the run records, out of the heap: an overrun damages no link.
 *
 * HARDENING. The arena's state (cursor, chain, counters) is a record in the meta area, below
 * the heap: one per FM_ARENA_CHUNKS chunks, picked by the arena's first slab (at least that
 * many chunks, so two live arenas never share one), so no write into or past a block reaches
 * it. Each run records its arena (struct fm_run's shard: record + 1), and every call but the
 * inline bump checks that the cursor lies in a run of that arena. The handle is the record's
 * address with bit 63 set and a generation in bits 48-62 and 0-5, the record's alignment:
 *
 *     handle = 1 << 63 | gen >> 6 << 48 | record address | gen & 63
 *
 * A record holds its live handle (the cursor's id, 0 when none) and the generation of the last,
 * bumped at each create in it, so destroy retires a handle for good (until 2^21 arenas later in
 * that record). Every call looks the handle up (bit 63, inside the table, committed, id equal)
 * and stops with one line naming itself otherwise; a NULL, a pointer into the heap or the stack
 * has bit 63 clear, so the inline bump of flatmalloc.h (sign test, id compare) sends it here.
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
#include <stddef.h>
#include <pthread.h>
#include <string.h>

#include "check.h"
#include "flatmalloc.h"
#include "fmt.h"
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
#define ARENA_HANDLE ((uintptr_t)1 << 63)   /* set in every handle, clear in every address */
#define ARENA_GEN_LOW 6u                    /* generation bits below the record's address */
#define ARENA_GEN_BITS 21u

/* An arena's state, in the meta area (fm_pool.arenas): the program's handle points here. */
struct arena {
  struct flatmalloc_arena_cursor pos;   /* first (flatmalloc.h): the current slab's next free byte,
                                           its end (0 sends every call to the slow path) and the
                                           live handle (0: no arena) */
  uintptr_t limit;       /* the current slab's end, always */
  uint32_t cur, first;   /* chunk index of the current and the first slab */
  uint32_t kept;         /* the last slab within the cap (chain order) */
  uint32_t last;         /* the last slab of the chain */
  uint32_t big;          /* own runs: chunk index + 1 of the newest, chained */
  uint32_t gen;          /* the generation of the last arena made in this record */
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
_Static_assert(sizeof(struct arena) <= FM_ARENA_REC && FM_ARENA_REC % 64 == 0, "an arena's record fits its slot, 64-aligned");
_Static_assert(offsetof(struct arena, pos) == 0, "the cursor opens the record (flatmalloc.h)");
_Static_assert(FLATMALLOC_ARENA_CURSOR_MASK == ((((uintptr_t)1 << 48) - 1) & ~(uintptr_t)((1u << ARENA_GEN_LOW) - 1)), "flatmalloc.h's mask");
_Static_assert(ARENA_SLAB_MIN >= FM_ARENA_CHUNKS * FM_CHUNK, "two first slabs never share a record");
_Static_assert(sizeof(uintptr_t) == 8, "handles carry a generation in an address's spare bits");

/* A sampled allocation (heap profiler), recorded in the arena's own memory: gone at reset. It
 * lies in the heap, among the allocations: a keyed check word says it is whole before the reset
 * follows its link. */
struct arena_sample {
  struct arena_sample *next;
  size_t size;
  uint32_t stack;
  uint32_t check;
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
static uint32_t sample_check(const struct arena_sample *s) {
  uint64_t x = ((uintptr_t)s ^ (uintptr_t)s->next * 0x9e3779b97f4a7c15ull ^ s->size * 0xc2b2ae3d27d4eb4full ^ s->stack ^ fm_pool.key) * (fm_pool.link_key | 1);
  return (uint32_t)(x >> 32);
}
static uint32_t hdr_magic(const struct arena_hdr *h) { return (uint32_t)fm_pool.key ^ (uint32_t)((uintptr_t)h >> 4) ^ ARENA_MAGIC; }

/* The first byte a slab hands out. */
static uintptr_t slab_start(const struct arena *a, uint32_t i) {
  (void)a;
  return chunk_addr(i);
}

/* ---- records and handles ----------------------------------------------------------------- */
static _Atomic uint32_t recs_seen;   /* records below this were used once: their pages are committed */

static struct arena *rec_at(uint32_t r) { return (struct arena *)((uintptr_t)fm_pool.arenas + (size_t)r * FM_ARENA_REC); }
static uint32_t rec_of(const struct arena *a) { return (uint32_t)(((uintptr_t)a - (uintptr_t)fm_pool.arenas) / FM_ARENA_REC); }
static uintptr_t handle_of(const struct arena *a) {
  uintptr_t g = a->gen;
  return ARENA_HANDLE | (g >> ARENA_GEN_LOW) << 48 | (uintptr_t)a | (g & ((1u << ARENA_GEN_LOW) - 1));
}

/* Run i is a run of arena a's (the record of its first chunk says so). */
static bool owns(const struct arena *a, uint32_t i) {
  return i < __atomic_load_n(&fm_pool.chunks_open, __ATOMIC_ACQUIRE) && span_rec(i)->kind == RUN_ARENA && span_rec(i)->shard == rec_of(a) + 1;
}
static void own(const struct arena *a, uint32_t i) { span_rec(i)->shard = rec_of(a) + 1; }

static cold __attribute__((noreturn)) void handle_bad(const char *call, const void *h) {
  char what[96];
  struct fmt f = {what, sizeof what, 0};
  fmt_str(&f, call);
  fmt_str(&f, " of a handle that is not a live arena");
  fmt_end(&f);
  fault_stop(what, h, FAULT_CLS_ARENA);
}
static cold __attribute__((noreturn)) void state_bad(const char *call, const struct arena *a) {
  char what[96];
  struct fmt f = {what, sizeof what, 0};
  fmt_str(&f, call);
  fmt_str(&f, ": the arena's state is damaged");
  fmt_end(&f);
  fault_stop(what, (const void *)a->pos.id, FAULT_CLS_ARENA);
}

/* The record of a live arena's handle h, checked (the cursor inside the current slab, the
 * slabs the arena's), or one line naming the call and abort(). */
static struct arena *arena_of(const flatmalloc_arena *h, const char *call) {
  uintptr_t v = (uintptr_t)h, at = v & FLATMALLOC_ARENA_CURSOR_MASK, off = at - (uintptr_t)fm_pool.arenas;
  if (!(v & ARENA_HANDLE) || !pool_ready() || off % FM_ARENA_REC ||
      off / FM_ARENA_REC >= atomic_load_explicit(&recs_seen, memory_order_acquire))
    handle_bad(call, h);
  struct arena *a = (struct arena *)at;
  if (a->pos.id != v) handle_bad(call, h);
  if (a->first / FM_ARENA_CHUNKS != rec_of(a) || !owns(a, a->first) || !owns(a, a->cur) || a->limit != run_end(a->cur) ||
      a->pos.bump < slab_start(a, a->cur) || a->pos.bump > a->limit || (a->pos.end && a->pos.end != a->limit))
    state_bad(call, a);
  return a;
}

/* The link n (chunk index + 1; 0 ends) of one of arena a's chains, checked: a run of a's. */
static uint32_t chain_next(const struct arena *a, uint32_t n, const char *call) {
  if (n && !owns(a, n - 1)) state_bad(call, a);
  return n;
}

/* ---- runs -------------------------------------------------------------------------------- */
static void held_add(struct arena *a, size_t bytes) {
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
static void run_give(struct arena *a, uint32_t i) {
  size_t bytes = run_bytes(i);
  bool pool = a->pool;
  atomic_fetch_sub_explicit(&T.held, bytes, memory_order_relaxed);
  a->given++;
  atomic_fetch_add_explicit(&T.given, 1, memory_order_relaxed);
  if (pool) VALGRIND_MAKE_MEM_NOACCESS((void *)chunk_addr(i), bytes);
  span_free(i);
}

static void slab_use(struct arena *a, uint32_t i) {
  a->cur = i;
  a->pos.bump = slab_start(a, i);
  a->limit = run_end(i);
  a->pos.end = a->slow ? 0 : a->limit;
}

/* Appends a new slab that holds need bytes after its start; false when the pool has none. */
static bool slab_add(struct arena *a, size_t need) {
  size_t size = run_bytes(a->last) * 2;
  if (size > ARENA_SLAB_MAX) size = ARENA_SLAB_MAX;
  if (size < need) size = need;
  int64_t i = run_take(size, fm_pool.valgrind && !a->pool);
  if (i < 0) return false;
  uint32_t prev = a->last;
  own(a, (uint32_t)i);
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
static void user_enter(struct arena *a) {
  uintptr_t none = 0, me = (uintptr_t)pthread_self();
  if (!atomic_compare_exchange_strong_explicit(&a->user, &none, me, memory_order_acquire, memory_order_relaxed))
    arena_fault("arena used by two threads at once", a);
}
static void user_leave(struct arena *a) { atomic_store_explicit(&a->user, 0, memory_order_release); }

/* Marks the end of the used part of the current slab (when a header fits before its end). */
static void end_mark(struct arena *a) {
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
static void run_check(const struct arena *a, uint32_t i, uintptr_t to) { used_check(slab_start(a, i), to); }

/* ---- allocation -------------------------------------------------------------------------- */
/* An allocation in a run of its own, chained to the arena's own runs. */
static void *big_alloc(struct arena *a, size_t size, size_t align, size_t lead) {
  size_t need;
  if (__builtin_add_overflow(size, lead + align + CANARY_MIN + ARENA_REDZONE, &need)) return NULL;
  int64_t i = run_take(need, fm_pool.valgrind && !a->pool);
  if (i < 0) return NULL;
  own(a, (uint32_t)i);
  span_rec((uint32_t)i)->next = a->big;
  a->big = (uint32_t)i + 1;
  a->big_bytes += run_bytes((uint32_t)i);
  held_add(a, run_bytes((uint32_t)i));
  return (void *)(align_up(chunk_addr((uint32_t)i) + lead, align));
}

/* Room for size bytes at align (lead bytes of header before them) in the current slab, the
 * next ones kept from earlier rounds, or a new one; false when the pool has no run. */
static bool slab_room(struct arena *a, size_t size, size_t align, size_t lead, size_t tail) {
  for (;;) {
    uintptr_t p = align_up(a->pos.bump + lead, align);
    if (p + size + tail <= a->limit) return true;
    if (a->checked) end_mark(a);
    a->before += a->pos.bump - slab_start(a, a->cur);
    uint32_t next = chain_next(a, span_rec(a->cur)->next, "flatmalloc_arena_alloc");
    if (!next) {
      if (!slab_add(a, align_up(lead, align) + size + tail + align)) return false;
      next = a->last + 1;
    }
    slab_use(a, next - 1);
    if (a->checked) end_mark(a);   /* a slab skipped for want of room is walked too */
  }
}

static noinline void *arena_alloc_slow(struct arena *a, size_t size, size_t align) {
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
      *s = (struct arena_sample){a->samples, size, stack, 0};
      s->check = sample_check(s);
      a->samples = s;
    } else {
      heap_arena_done(stack, size);
    }
  }
  return p;
}

void *flatmalloc_arena_alloc(flatmalloc_arena *h, size_t size, size_t align) {
  struct arena *a = arena_of(h, "flatmalloc_arena_alloc");
  void *p = flatmalloc_arena_bump(&a->pos, size, align);
  return likely(p) ? p : arena_alloc_slow(a, size, align);
}

void *flatmalloc_arena_calloc(flatmalloc_arena *h, size_t count, size_t size, size_t align) {
  struct arena *a = arena_of(h, "flatmalloc_arena_calloc");
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  void *p = flatmalloc_arena_bump(&a->pos, n, align);
  if (!p) p = arena_alloc_slow(a, n, align);
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
  /* the record is this arena's alone: no other live arena's first slab starts in these chunks */
  uint32_t r = (uint32_t)i / FM_ARENA_CHUNKS;
  struct arena *a = rec_at(r);
  if (a->pos.id) fault_stop("flatmalloc_arena_create: an arena's record is in use twice (damaged meta area)", (void *)a->pos.id, -1);
  bool pool = fm_pool.valgrind && vg_running == VG_MEMCHECK;
  uint32_t gen = (a->gen + 1) & ((1u << ARENA_GEN_BITS) - 1);
  *a = (struct arena){.first = (uint32_t)i, .kept = (uint32_t)i, .last = (uint32_t)i, .gen = gen, .keep = keep ? keep : ARENA_KEEP_DEFAULT,
                      .checked = fm_pool.opt.check, .pool = pool && !fm_pool.opt.check, .chain = run_bytes((uint32_t)i)};
  a->slow = a->checked || fm_pool.valgrind || heap_on;
  own(a, (uint32_t)i);
  span_rec((uint32_t)i)->next = 0;
  if (a->pool) VALGRIND_CREATE_MEMPOOL(a, ARENA_REDZONE, 0);   /* memcheck names an overrun "after a block" */
  if (a->pool) vg_arena_made(a, sizeof *a);   /* vg.h */
  slab_use(a, (uint32_t)i);
  if (a->checked) end_mark(a);
  held_add(a, a->chain);
  atomic_fetch_add_explicit(&T.live, 1, memory_order_relaxed);
  atomic_fetch_add_explicit(&T.made, 1, memory_order_relaxed);
  for (uint32_t seen = atomic_load_explicit(&recs_seen, memory_order_relaxed); seen <= r;)
    if (atomic_compare_exchange_weak_explicit(&recs_seen, &seen, r + 1, memory_order_release, memory_order_relaxed)) break;
  /* the handle last: a call that finds it finds the record whole */
  uintptr_t h = handle_of(a);
  atomic_store_explicit((_Atomic uintptr_t *)&a->pos.id, h, memory_order_release);
  return (flatmalloc_arena *)h;
}

static size_t used_now(const struct arena *a) { return a->before + (a->pos.bump - slab_start(a, a->cur)); }

/* Gives back the own runs and, checked, checks them. */
static void big_give(struct arena *a, const char *call) {
  for (uint32_t b = chain_next(a, a->big, call); b;) {
    uint32_t next = chain_next(a, span_rec(b - 1)->next, call);
    if (a->checked) run_check(a, b - 1, run_end(b - 1));
    run_give(a, b - 1);
    b = next;
  }
  a->big = 0;
  a->big_bytes = 0;
}

/* Resets arena a; call names the public call (reset or destroy) in a fault's line. */
static void arena_reset(struct arena *a, const char *call) {
  if (a->checked) {
    user_enter(a);
    for (uint32_t i = a->first;;) {   /* the slabs used this round: the current one is in the chain */
      run_check(a, i, i == a->cur ? align_up(a->pos.bump, FM_ALIGN) : run_end(i));
      if (i == a->cur) break;
      uint32_t n = chain_next(a, span_rec(i)->next, call);
      if (!n) state_bad(call, a);
      i = n - 1;
    }
  }
  for (struct arena_sample *s = a->samples; s; s = s->next) {
    if (s->check != sample_check(s)) arena_fault("heap profiler's record in an arena damaged (write past an arena allocation)", s);
    heap_arena_done(s->stack, s->size);
  }
  a->samples = NULL;
  size_t used = used_now(a);
  if (used > a->peak) a->peak = used;
  /* memcheck: every chunk goes, before a run given back can hold another thread's block */
  if (a->pool) VALGRIND_MEMPOOL_TRIM(a, a, 0);
  big_give(a, call);
  /* the slabs over the cap go back; the rest are the next round's */
  if (!owns(a, a->kept)) state_bad(call, a);
  for (uint32_t n = chain_next(a, span_rec(a->kept)->next, call); n;) {
    uint32_t next = chain_next(a, span_rec(n - 1)->next, call);
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

void flatmalloc_arena_reset(flatmalloc_arena *h) { arena_reset(arena_of(h, "flatmalloc_arena_reset"), "flatmalloc_arena_reset"); }

void flatmalloc_arena_destroy(flatmalloc_arena *h) {
  if (!h) return;
  struct arena *a = arena_of(h, "flatmalloc_arena_destroy");
  arena_reset(a, "flatmalloc_arena_destroy");
  uint32_t first = a->first;
  for (uint32_t n = chain_next(a, span_rec(first)->next, "flatmalloc_arena_destroy"); n;) {
    uint32_t next = chain_next(a, span_rec(n - 1)->next, "flatmalloc_arena_destroy");
    run_give(a, n - 1);
    n = next;
  }
  if (a->pool) VALGRIND_DESTROY_MEMPOOL(a);
  if (a->pool) vg_arena_gone(a, sizeof *a);
  /* retired: the record keeps its generation, the next arena made in it hands out another */
  a->pos = (struct flatmalloc_arena_cursor){0, 0, 0};
  atomic_fetch_sub_explicit(&T.live, 1, memory_order_relaxed);
  run_give(a, first);   /* last: from here another thread may make an arena in this record */
}

/* ---- statistics -------------------------------------------------------------------------- */
void flatmalloc_arena_stats(const flatmalloc_arena *h, struct flatmalloc_arena_stats *s) {
  const struct arena *a = arena_of(h, "flatmalloc_arena_stats");
  size_t used = used_now(a);
  *s = (struct flatmalloc_arena_stats){.used = used, .peak = used > a->peak ? used : a->peak, .held = a->chain + a->big_bytes,
                                       .held_peak = a->held_peak, .keep = a->keep, .runs_taken = a->taken, .runs_given = a->given,
                                       .resets = a->resets};
  for (uint32_t i = a->first;;) {
    s->slabs++;
    if (i == a->last) break;
    uint32_t n = chain_next(a, span_rec(i)->next, "flatmalloc_arena_stats");
    if (!n) state_bad("flatmalloc_arena_stats", a);
    i = n - 1;
  }
  for (uint32_t b = chain_next(a, a->big, "flatmalloc_arena_stats"); b; b = chain_next(a, span_rec(b - 1)->next, "flatmalloc_arena_stats"))
    s->own_runs++;
}

void arena_totals(struct arena_totals *t) {
  *t = (struct arena_totals){atomic_load(&T.live), atomic_load(&T.made), atomic_load(&T.held), atomic_load(&T.held_peak),
                             atomic_load(&T.taken), atomic_load(&T.given), atomic_load(&T.resets)};
}
