/* Functions the core's files share, floor by floor from the bottom: a file calls only the
 * files listed above its own section. Each function carries its file's noun. */
#ifndef FM_INTERNAL_H
#define FM_INTERNAL_H
#include <stddef.h>
#include "types.h"

static inline bool pool_ready(void) { return atomic_load_explicit(&fm_pool.state, memory_order_acquire) == 2; }
/* p lies in a chunk whose records may be read (the pool opens them as the heap grows: a chunk
 * above is in no block and its records' page may still be inaccessible). */
static inline bool pool_opened(const void *p) {
  return ((uintptr_t)p - fm_pool.heap_base) >> FM_CHUNK_SHIFT < __atomic_load_n(&fm_pool.chunks_open, __ATOMIC_ACQUIRE);
}

/* The classes' and the heap's locks. Under memcheck check.c runs the allocator natively inside
 * Valgrind, where pthread's functions cannot run (they read the thread pointer, which is
 * Valgrind's) and no program thread runs meanwhile: there the locks are skipped, after
 * check.c made sure that no program thread holds one or waits for one (lockers is 0; it is
 * counted before the lock is taken and after it is released, so it covers the whole hold). */
/* The contention counters of an instrumented build (meson -Dcounters=true, bench/README.md):
 * acquisitions of a lock shared by threads, the acquisitions that had to wait, atomic
 * read-modify-writes on a line other threads write, and of the locks the heap's (the one lock
 * not per CPU). Nothing in a normal build. */
enum { CNT_LOCK, CNT_WAIT, CNT_RMW, CNT_HEAP, CNT_N };
#ifdef FM_COUNTERS
hidden extern _Atomic uint64_t fm_counters[CNT_N];
#define fm_count(x) atomic_fetch_add_explicit(&fm_counters[x], 1, memory_order_relaxed)
#else
#define fm_count(x) ((void)0)
#endif

static inline void fm_lock(pthread_mutex_t *m) {
  if (fm_pool.native) return;
  if (fm_pool.count_lockers) atomic_fetch_add_explicit(&fm_pool.lockers, 1, memory_order_relaxed);
  fm_count(CNT_LOCK);
  pthread_mutex_lock(m);
}
/* fm_lock if the lock is free now; false (nothing held) when another thread holds it. */
static inline bool fm_trylock(pthread_mutex_t *m) {
  if (fm_pool.native) return true;
  if (fm_pool.count_lockers) atomic_fetch_add_explicit(&fm_pool.lockers, 1, memory_order_relaxed);
  if (pthread_mutex_trylock(m) == 0) {
    fm_count(CNT_LOCK);
    return true;
  }
  if (fm_pool.count_lockers) atomic_fetch_sub_explicit(&fm_pool.lockers, 1, memory_order_relaxed);
  return false;
}
static inline void fm_unlock(pthread_mutex_t *m) {
  if (fm_pool.native) return;
  pthread_mutex_unlock(m);
  if (fm_pool.count_lockers) atomic_fetch_sub_explicit(&fm_pool.lockers, 1, memory_order_relaxed);
}

/* Sets up a lock at start-up or in a fork child. In the real-time profile with priority
 * inheritance: a thread that waits for it lends its priority to the holder, so a real-time
 * thread never waits behind a lower-priority holder that a middle one keeps off the CPU. Else
 * adaptive (spins a little before it sleeps) where asked, plain otherwise (zero is a plain
 * unlocked lock: the shards' need no set-up). */
static inline void fm_lock_init(pthread_mutex_t *m, bool adaptive) {
  pthread_mutexattr_t a;
  pthread_mutexattr_init(&a);
  if (fm_pool.realtime) pthread_mutexattr_setprotocol(&a, PTHREAD_PRIO_INHERIT);
  else if (adaptive) pthread_mutexattr_settype(&a, PTHREAD_MUTEX_ADAPTIVE_NP);
  pthread_mutex_init(m, &a);
  pthread_mutexattr_destroy(&a);
}

/* In a fork child (one thread): the lock was held at fork. A plain read of glibc's lock word,
 * not a trylock, so that the child writes no page of a lock that was free (a trylock on each
 * of the classes' locks cost every PostgreSQL backend a copy-on-write fault per shard). */
static inline bool fm_lock_held(const pthread_mutex_t *m) { return __atomic_load_n(&m->__data.__lock, __ATOMIC_RELAXED) != 0; }

/* fault.c: one line and abort(); cls names the class, -1 none, FAULT_CLS_ARENA an arena's run */
#define FAULT_CLS_ARENA (-2)
hidden cold __attribute__((noreturn)) void fault_stop(const char *what, const void *p, int cls);
/* One line with no pointer ("flatmalloc: " what), and abort(). */
hidden cold __attribute__((noreturn)) void fault_say(const char *what);
/* A bad pointer handed to a call: the line names the call and what the pointer is ("double
 * free", "realloc of a freed block", "malloc_usable_size of an interior pointer", ...). */
enum fault_call { CALL_FREE, CALL_REALLOC, CALL_USABLE };
enum fault_kind { FAULT_FREED, FAULT_FOREIGN, FAULT_INTERIOR, FAULT_MISALIGNED, FAULT_ARENA };
hidden cold __attribute__((noreturn)) void fault_bad(enum fault_call call, enum fault_kind kind, const void *p, int cls);

/* options.c */
hidden void options_read(struct fm_options *o);
hidden cold __attribute__((noreturn)) void options_fail(const char *name, const char *value, const char *why);
hidden void options_check_room(const struct fm_options *o, uint32_t heap_chunks);   /* after class_setup */

/* span.c: runs of chunks, for spans and large blocks */
hidden void span_setup(uint64_t *pages, uint8_t *kinds, uint32_t nchunks, uint64_t retain_bytes);
hidden int64_t span_alloc(uint32_t len, unsigned owner, bool large);   /* first chunk, or -1 */
hidden int64_t span_alloc_aligned(uint32_t len, size_t align);
hidden int64_t span_alloc_arena(uint32_t len);   /* a RUN_ARENA run (arena.c), owned as the large area */
hidden void span_free(uint32_t i);
hidden bool span_resize(uint32_t i, uint32_t len);
hidden int span_kind_at(uint32_t i);   /* RUN_* of the run holding chunk i; 0: above top or unknown */
hidden bool span_chunk_dirty(uint32_t i);
hidden void span_whole(uint32_t from, uint32_t to, uint32_t *lo, uint32_t *hi);   /* what goes back splitting no huge page */
hidden bool span_trim_full(void);   /* this malloc_trim empties the caches and splits huge pages */
hidden int span_trim(bool full);
hidden void span_set_retain(uint64_t bytes);   /* the retained budget; UINT64_MAX: pages never go back */
hidden void span_after_fork(void);
struct span_stats { size_t used, used_peak, free, dirty, top, released, large_held; };
hidden void span_stats(struct span_stats *s);
hidden int span_check(void);

/* The run record of chunk i (for the span and large layers above). */
static inline struct fm_run *span_rec(uint32_t i) { return &fm_pool.chunk[i].rec; }

/* large.c */
hidden void *large_alloc(size_t size, size_t align);
hidden void *large_calloc(size_t size);
hidden bool large_owns(const void *p);
hidden void large_verify(const void *p, enum fault_call call);
hidden enum fault_kind large_fault(const void *p);   /* p in the heap, outside spans and block starts */
hidden void large_free(void *p);
hidden size_t large_usable(const void *p);
hidden bool large_resize(void *p, size_t size);
enum large_shade { SHADE_NONE, SHADE_HIDDEN, SHADE_GUARD };
hidden bool large_shade(void *p, uint32_t from, uint32_t n, enum large_shade s);   /* checking mode: chunks of large block p inaccessible, or back */
hidden enum large_shade large_shade_at(const void *p);
hidden uint32_t large_chunks(const void *p);   /* chunks of large block p */

/* class.c: size classes, their spans, batches */
hidden void class_setup(const struct fm_options *o, uint8_t *cls_of, uint32_t heap_chunks);
hidden uint32_t class_bin_max(uint32_t size);   /* blocks a thread's bin of a class of this size holds at most */
hidden unsigned class_of(size_t size);
hidden int class_at(const void *p);   /* class of the span holding p, or -1 */
hidden int class_find(const void *p, fm_st **st);   /* class and state of the block starting at p, or -1 */
hidden void *class_block(const void *p, unsigned c);   /* start of the block of class c holding p */
hidden fm_st *class_verify(const void *p, unsigned c, enum fault_call call);   /* state of LIVE block p, or stops */
hidden uint32_t class_take(unsigned c, unsigned shard, struct fm_blk *b, uint32_t want, bool grow);
hidden void class_give(unsigned c, unsigned shard, const struct fm_blk *b, uint32_t n);
hidden void class_home(unsigned c, const struct fm_blk *b, uint32_t n);   /* blocks of a thread gone: to their spans */
hidden void class_note(unsigned c, unsigned shard, bool borrowed);
hidden void class_after_fork(void);
hidden void class_trim(void);   /* malloc_trim: the transfer caches and spare spans given back */
struct class_stats { uint64_t out, peak, spans, spans_peak, reserve, borrows, exhausted; };
hidden void class_stats(unsigned c, struct class_stats *s);
hidden int class_check(unsigned c);

/* remote.c: blocks freed for another tag's holder, on their way home. Its entries (struct
 * fm_blk, as inbox slots hold them) list a run of blocks, each the next of its span after
 * the one before and its state the next byte: the first block's address and state, with the
 * class and the run's length in the address's top bits (an entry made by remote_entry is a
 * run of one). */
static inline uintptr_t remote_entry(const void *p, unsigned c) { return (uintptr_t)p | (uintptr_t)(c + 1) << FM_SLOT_CLASS; }
static inline void *remote_block(uintptr_t v) { return (void *)(v & (((uintptr_t)1 << FM_SLOT_RUN) - 1)); }
static inline unsigned remote_class(uintptr_t v) { return (unsigned)(v >> FM_SLOT_CLASS) - 1u; }
static inline uint32_t remote_run(uintptr_t v) { return (uint32_t)(v >> FM_SLOT_RUN & 0xff) + 1u; }
static inline void *remote_nth(uintptr_t v, uint32_t k) { return (char *)remote_block(v) + (size_t)k * fm_pool.cls[remote_class(v)].size; }   /* the run's block k */
hidden void remote_setup(void);
hidden void remote_send(struct fm_tag *owner, struct fm_blk *b, uint32_t n);
/* up to `most` blocks as runs (CACHED) into b; return the runs */
hidden uint32_t remote_take(struct fm_tag *t, struct fm_blk *b, uint32_t most);   /* t's holder */
struct remote_adoption { struct fm_tag *t; uint32_t end; };   /* not t's holder: */
hidden bool remote_adopt_begin(struct fm_tag *t, struct remote_adoption *a);
hidden uint32_t remote_adopt_take(struct remote_adoption *a, struct fm_blk *b, uint32_t most);
hidden bool remote_behind(const struct fm_tag *t);   /* blocks wait on t's remote stack */
hidden void remote_orphans(struct fm_tag *t);
hidden bool remote_hold(struct fm_tag *t, struct fm_tcache *tc);
hidden void remote_release(struct fm_tag *t);
hidden void remote_after_fork(struct fm_tag *mine, uint32_t used);

/* tcache.c: thread caches */
hidden void tcache_setup(void);
hidden size_t tcache_bytes(const struct fm_options *o);   /* a thread cache's bytes with these classes */
hidden void *tcache_alloc(unsigned c, bool borrow, bool *zero);   /* zero: NULL or told whether it reads as zero */
hidden void tcache_free(void *p, unsigned c, fm_st *st);
hidden void tcache_free_from(void *p, fm_st *st, struct fm_tcache *tc, unsigned c1);   /* fm_free_block's: see there */
hidden void tcache_native_setup(void);
hidden void *tcache_alloc_direct(unsigned c, bool borrow);   /* check.c's native calls: their cache, no errno */
hidden void tcache_free_direct(void *p, unsigned c, fm_st *st);
hidden uint64_t tcache_cached(unsigned c);
hidden int tcache_check(void);
hidden void tcache_after_fork(void);
hidden void tcache_collect(void);
hidden void tcache_join(void);   /* the calling thread's cache, as its first free() attaches it */
hidden void tcache_send(void);   /* the calling thread's outbox goes to its owners now */
hidden void tcache_trim(void);   /* malloc_trim: the calling thread's cached blocks given back */
/* threads: threads holding a cache; tagged: threads holding a tag; bytes: the heap runs the
 * caches take */
struct tcache_stats { uint64_t threads, tagged, bytes, heap_bytes, most_moved; };   /* heap_bytes: of caches in heap runs */
hidden void tcache_stats(struct tcache_stats *s);

/* The thread cache's pop, for fast.h and the heap profiler: the newest block of tc's bin c1
 * (not empty), made LIVE for tc. With zero, *zero says whether it was never handed out from
 * fresh memory (calloc checks it then). */
static always_inline void *fm_pop(struct fm_tcache *tc, unsigned c1, bool *zero) {
  struct fm_blk *top = --tc->top[c1];
  void *p = top->p;
  fm_st *st = top->st;
  if (zero) *zero = st_load(st) == ST_ZERO;
  st_store(st, tc->tag);
  return p;
}

static always_inline bool fm_bin_empty(const struct fm_tcache *tc, unsigned c1) { return tc->top[c1] == tc->base[c1]; }

/* block.c: a block of any size, and its release, for the API and checking mode */
/* The thread is inside a call that may hold the heap's or a class's lock (block_enter to
 * block_leave): a call that comes in meanwhile (a signal handler's) stops with one line
 * naming the re-entry, rather than wait for a lock its own thread holds. The fast paths do
 * not look: they take no lock. */
hidden extern __thread bool block_inside __attribute__((tls_model("initial-exec")));
hidden cold __attribute__((noreturn)) void block_reentered(const char *call);
static always_inline void block_enter(const char *call) {
  if (unlikely(block_inside)) block_reentered(call);
  block_inside = true;
}
static always_inline void block_leave(void) { block_inside = false; }
/* The same for a slow path that tcache_free_from (not inside, by its caller's test) and the
 * callers above (inside already) both reach: it marks the thread inside only when it was not;
 * block_rest(the value returned) after. */
static always_inline bool block_enter_once(void) {
  bool outer = block_inside;
  block_inside = true;
  return outer;
}
static always_inline void block_rest(bool outer) { block_inside = outer; }
hidden void *block_alloc(size_t size);
hidden void *block_alloc_aligned(size_t align, size_t size);
hidden void block_free(void *p);          /* validated: stops on a bad pointer */
hidden bool block_reads_zero(const void *p, size_t n);   /* calloc: a ZERO block still reads as zero */
hidden size_t block_usable(const void *p, enum fault_call call);   /* validated: stops naming call */
hidden void *block_alloc_direct(size_t size);   /* native code (check.c): its own cache, no errno */
hidden bool block_free_direct(void *p);         /* native code: false for a bad pointer, no stop */

/* pool.c: the pool's reservation and layout (tool_map and tool_cap: a Valgrind tool's heap and
 * the most it may be, or NULL and 0); boot.c: the bootstrap buffer */
hidden void pool_reserve(void *(*tool_map)(size_t size), uint64_t tool_cap);
hidden void pool_after_fork(void);
hidden void pool_before_mlockall(void);
hidden bool span_open_all(void);
hidden void span_close_unopened(void);
hidden bool tcache_open_all(void);
hidden void tcache_close_unopened(void);
/* Whether an opening calls mprotect (fm_pool.protect; set once, by the program's mlockall). */
static inline bool pool_protecting(void) { return __atomic_load_n(&fm_pool.protect, __ATOMIC_ACQUIRE); }
hidden void *boot_alloc(size_t size, size_t align);
hidden bool boot_owns(const void *p);
hidden size_t boot_usable(const void *p);

/* profile.c: FLATMALLOC_PROFILE; check.c reports each block's requested size */
hidden void profile_setup(void);
hidden void profile_alloc(size_t size);
hidden void profile_free(size_t size);

/* check.c: checking mode and memcheck (malloc, free and realloc through check_short.c) */
hidden void *check_malloc(size_t size);
hidden void *check_memalign(size_t size, size_t align);
hidden void check_free(void *p);
hidden void check_free_sized(void *p, size_t size, const char *call);
hidden void check_quarantine_empty(void);   /* malloc_trim: checking mode's held-back blocks go back */   /* free_sized, free_aligned_sized */
hidden void *check_realloc(void *p, size_t size);
hidden size_t check_usable(void *p);
hidden void check_pool_start(void);

/* heap.c: the heap profiler (heap.h) */

/* arena.c: arenas (flatmalloc_arena_*), above heap.c (sampling) and check.c (the canary); its
 * totals for stats.c, above it */
struct arena_totals { uint64_t live, made, held, held_peak, taken, given, resets; };
hidden void arena_totals(struct arena_totals *t);

/* stats.c */
hidden void stats_setup(void);

/* slow.c: start-up, and the slow paths behind the inline fast paths of fast.h (above it) */
hidden bool pool_init(void);          /* false: use the bootstrap buffer for now */
hidden void pool_route(void);         /* after a change of opt.perturb (mallopt) */
hidden noinline void *fm_malloc_slow(size_t size);
hidden noinline void fm_free_slow(void *p);
hidden noinline void fm_free_sized_slow(void *p, size_t size, unsigned call);   /* call: fast.h's FM_FREE_SIZED or FM_FREE_ALIGNED_SIZED */
hidden noinline void fm_free_block(void *p, fm_st *st, struct fm_tcache *tc, unsigned c1);
#endif
