/* The slow paths behind fast.h's fast paths, and the start-up the first of them triggers: read
 * the settings, reserve the pool, set every other file up. Until that is done (the dynamic
 * loader, dlsym and our own set-up may call malloc first) requests come from the bootstrap
 * buffer (boot.c). Above every other file of the core; fast.h sits on it, api.c on top. */
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "check.h"
#include "heap.h"
#include "internal.h"
#include "vg.h"

extern char **environ;

enum { POOL_NONE, POOL_STARTING, POOL_READY };
static __thread bool pool_starting;   /* this thread is inside pool_init */

static void start(void) {
  struct fm_pool *P = &fm_pool;
  options_read(&P->opt);
  P->valgrind = check_setup();
  pool_reserve(check_pool_heap() ? check_pool_map : NULL, P->valgrind ? check_pool_cap() : 0);
  tcache_setup();
  stats_setup();
  profile_setup();
  heap_setup();
  check_pool_start();
  if (P->valgrind) P->opt.perturb = 0;   /* the tools see the program's bytes as it left them */
  /* Check mode and memcheck send every call through the slow paths: the fast paths stay as
   * they are, with no extra test. Set last: the slow paths test it before the pool is ready,
   * and another thread that sees it set must find the pool laid out. */
  if (P->opt.check || P->valgrind || P->opt.profile) {
    P->checked = true;
  } else {
    pool_route();
  }
}

/* The chunks free()'s fast path may look up: those whose records the pool has opened (a
 * chunk above holds no block, and its line may be inaccessible; none at start-up), the bound
 * rising as the pool opens more (pool_reopen). */
static size_t chunks_known(void) {
  size_t open = __atomic_load_n(&fm_pool.chunks_open, __ATOMIC_ACQUIRE), all = fm_pool.heap_size >> FM_CHUNK_SHIFT;
  return open < all ? open : all;
}

/* A free past the fast path's bound: the bound rises to the chunks opened since, unless the
 * fast path is off for frees (checking mode, the perturb byte: 0). A mallopt that sets the
 * byte meanwhile stores 0 after setting it (pool_route): an exchange that came after that
 * store sees the byte and routes again. */
static void pool_reopen(void *p) {
  size_t seen = __atomic_load_n(&fm_pool.heap_chunks, __ATOMIC_RELAXED);
  size_t ch = ((uintptr_t)p - fm_pool.heap_base) >> FM_CHUNK_SHIFT;
  if (likely(ch < seen) || fm_pool.checked || !pool_ready() || ch >= chunks_known()) return;
  if (__atomic_load_n(&fm_pool.opt.perturb, __ATOMIC_SEQ_CST)) return;
  if (__atomic_compare_exchange_n(&fm_pool.heap_chunks, &seen, chunks_known(), false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED) &&
      __atomic_load_n(&fm_pool.opt.perturb, __ATOMIC_SEQ_CST))
    pool_route();
}

/* Where the fast paths send calls: glibc's perturb byte (mallopt(M_PERTURB) may set it at any
 * time) and the heap profiler, which counts every malloc's bytes, take every malloc to the slow
 * path (small_lim 0); perturb takes every free there too (heap_chunks 0). */
void pool_route(void) {
  struct fm_pool *P = &fm_pool;
  if (P->checked) return;   /* every call is there already */
  bool perturb = __atomic_load_n(&P->opt.perturb, __ATOMIC_RELAXED) != 0;
  __atomic_store_n(&P->heap_chunks, perturb ? 0 : chunks_known(), __ATOMIC_RELAXED);
  __atomic_store_n(&P->small_lim, heap_on || perturb ? 0 : P->small_max + 1, __ATOMIC_RELAXED);
}

bool pool_init(void) {
  int s = atomic_load_explicit(&fm_pool.state, memory_order_acquire);
  if (s == POOL_READY) return true;
  if (pool_starting || !environ) return false;
  if (s == POOL_NONE && atomic_compare_exchange_strong(&fm_pool.state, &s, POOL_STARTING)) {
    pool_starting = true;
    start();
    pool_starting = false;
    atomic_store_explicit(&fm_pool.state, POOL_READY, memory_order_release);
    pthread_atfork(NULL, NULL, pool_after_fork);   /* may allocate: the pool is ready now */
    return true;
  }
  while (atomic_load_explicit(&fm_pool.state, memory_order_acquire) != POOL_READY) sched_yield();
  return true;
}

/* Initialise before main even if nothing allocates, so a bad setting stops the program there. */
__attribute__((constructor)) static void pool_constructor(void) { pool_init(); }

/* ---- slow paths -------------------------------------------------------------------------- */
static cold noinline void *malloc_start(size_t size) {
  if (!pool_init()) return boot_alloc(size, 0);
  return fm_pool.checked ? check_malloc(size) : block_alloc(size);
}

/* checked first: under memcheck every call comes here, and each instruction on the way to
 * the requests costs (check.c's functions handle a pool not yet ready themselves) */
static always_inline void *malloc_on(size_t size) {
  if (fm_pool.checked) return check_malloc(size);
  if (likely(pool_ready())) return heap_on ? heap_alloc(size) : block_alloc(size);
  return malloc_start(size);
}

/* ---- glibc's perturb byte (MALLOC_PERTURB_, mallopt(M_PERTURB)): as glibc, a block handed out
 * reads N ^ 0xff over the bytes asked for, a freed block N over all its usable bytes (glibc
 * spares the blocks its thread cache takes; here every block). pool_route sends every call
 * here while it is set; one test each on the slow paths, none on the fast ones. ---- */
static int perturb_byte(void) { return __atomic_load_n(&fm_pool.opt.perturb, __ATOMIC_RELAXED); }

/* Past the fill, the fast paths' own steps where they would have taken the call (a block of
 * the thread's cache; a free of a live block of a class, as block_free's common case), else
 * the slow path's. bench/pairs 64 B under callgrind: 58 instructions a pair without the byte,
 * 211 with it (glibc with its byte: 137, its thread cache's blocks left unfilled). */
static cold noinline void *malloc_perturbed(size_t size) {
  void *p = NULL;
  if (likely(size <= fm_pool.small_max && !fm_pool.checked && !heap_on && pool_ready())) {
    struct fm_tcache *tc = fm_tc;
    unsigned c1 = fm_pool.cls_of[(size + FM_ALIGN - 1) / FM_ALIGN];
    if (likely(!fm_bin_empty(tc, c1))) p = fm_pop(tc, c1, NULL);
  }
  if (!p) p = malloc_on(size);
  int n = perturb_byte();
  if (p && n && !boot_owns(p)) memset(p, (n ^ 0xff) & 0xff, size);
  return p;
}

static cold noinline void free_perturbed(void *p);

void *fm_malloc_slow(size_t size) {
  if (unlikely(perturb_byte())) return malloc_perturbed(size);
  return malloc_on(size);
}

static always_inline void free_block_in(void *p, fm_st *st, unsigned c1) {
  if (likely(st_live(st_load(st)))) {
    block_enter("free");
    tcache_free(p, c1 - 1u, st);
    return block_leave();
  }
  block_free(p);   /* names the fault */
}

static cold noinline void free_block_inside(void *p, fm_st *st, unsigned c1) {
  if (heap_on) heap_free(p);
  free_block_in(p, st, c1);
}

/* free() of p, the start of a block of class c1 - 1 with its state at st, that the fast path
 * could not take (another thread's block, a full bin, a block not LIVE), tc the calling
 * thread's cache: the block is not looked up again. Straight to tcache_free_from, which marks
 * the thread inside (block_enter) only on its ways to a lock, when nothing else is to be done
 * (a sampled heap's record) or said (a call inside flatmalloc: a signal handler's, named by
 * block_enter). (Every way on a tail call.) */
void fm_free_block(void *p, fm_st *st, struct fm_tcache *tc, unsigned c1) {
  if (unlikely(heap_on)) return free_block_inside(p, st, c1);
  if (unlikely(block_inside)) return free_block_inside(p, st, c1);
  tcache_free_from(p, st, tc, c1);   /* (the arguments in the registers the fast path has them in) */
}

static always_inline void free_on(void *p) {
  if (fm_pool.checked) return check_free(p);
  if (heap_on && p) heap_free(p);   /* a sampled block: its record goes first */
  if (p) block_free(p);
}

/* A bad pointer is validated as the release will validate it, and stops there, named as free
 * names it; blocks of the bootstrap buffer are never reused and stay as they are. */
static void free_perturbed(void *p) {
  int n = perturb_byte();
  if (!p || !n || boot_owns(p)) return free_on(p);
  if (likely(!fm_pool.checked && !heap_on)) {
    fm_st *st;
    int c = pool_opened(p) ? class_find(p, &st) : -1;
    if (likely(c >= 0 && st_live(st_load(st)))) {
      memset(p, n & 0xff, fm_pool.cls[c].size);
      block_enter("free");
      tcache_free(p, (unsigned)c, st);
      return block_leave();
    }
  }
  size_t size = 0;
  struct check_block f;
  if (!fm_pool.checked) size = block_usable(p, CALL_FREE);
  else if (check_find(p, &f) == V_OK) size = f.size;
  memset(p, n & 0xff, size);
  free_on(p);
}

/* A sized release the fast path did not take: checking mode checks the size, the rest is
 * free's. */
void fm_free_sized_slow(void *p, size_t size, unsigned call) {
  if (fm_pool.checked && !perturb_byte()) return check_free_sized(p, size, call == 2 ? "free_aligned_sized" : "free_sized");
  fm_free_slow(p);
}

void fm_free_slow(void *p) {
  if (unlikely(perturb_byte())) return free_perturbed(p);
  pool_reopen(p);
  free_on(p);
}

