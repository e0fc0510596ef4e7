/* The fast paths: malloc that hits the thread cache, free of the thread's own block to its
 * cache. Everything else (empty or full arrays, another thread's block, large blocks,
 * start-up, checking mode, memcheck, bad pointers) is one unlikely test away, in the noinline
 * slow paths of slow.c, the floor below. Only api.c, above, includes it. */
#ifndef FM_FAST_H
#define FM_FAST_H
#include "internal.h"

/* A block from the thread cache, else slow(size) (a tail call: a constant, the call is direct). */
static always_inline void *fm_alloc_or(size_t size, void *(*slow)(size_t)) {
  if (likely(size < fm_pool.small_lim)) {
    struct fm_tcache *tc = fm_tc;
    unsigned c1 = fm_pool.cls_of[(size + FM_ALIGN - 1) / FM_ALIGN];
    if (likely(!fm_bin_empty(tc, c1))) return fm_pop(tc, c1, NULL);
  }
  return slow(size);
}

static always_inline void *fm_alloc(size_t size) { return fm_alloc_or(size, fm_malloc_slow); }

/* ptr must start a block of a span (one multiplication by its class's magic: the high half
 * is the block's number, the low half below the magic iff ptr is a block start; chunks of no
 * class have magic 0 and the bin of no room, index 0) and its state must be this thread's
 * own LIVE value (its tag's; a thread without a tag has none). The freed block itself is never
 * read or written. A block start the fast path cannot take (another thread's, a full bin) goes
 * to fm_free_block with what was found (and the cache, whose `busy` it published), anything
 * else to fm_free_slow; a sized release (free_sized: call FM_FREE_SIZED, free_aligned_sized:
 * FM_FREE_ALIGNED_SIZED) to fm_free_sized_slow with its size, where checking mode checks it
 * (heap_chunks is 0 in checking mode, so every one of its calls comes that way). Default mode
 * does not check the size: the test that it fits the block's class (one multiplication by the
 * magic) cost 5 instructions a malloc+free_sized pair in callgrind, 51 to 56. */
enum { FM_FREE_PLAIN, FM_FREE_SIZED, FM_FREE_ALIGNED_SIZED };
static always_inline void fm_free_as(void *ptr, size_t size, unsigned call) {
  uintptr_t ch = ((uintptr_t)ptr - fm_pool.heap_base) >> FM_CHUNK_SHIFT;
  if (likely(ch < fm_pool.heap_chunks)) {
    const struct fm_line *l = &fm_pool.chunk[ch].line;
    uint64_t e = l->e;
    unsigned c1 = (uint8_t)e;
    uint64_t magic = fm_magic(c1);
    uintptr_t pc = (uintptr_t)ptr + c1;
    __asm__("" : "+r"(pc));   /* one lea: clang otherwise copies ptr, subtracts e and adds c1 */
    unsigned __int128 m = (unsigned __int128)(pc - e) * magic;   /* ptr - span */
    fm_st *st = (fm_st *)(l->st + (uint64_t)(m >> 64));
    __builtin_prefetch(st, 1);   /* for writing (x86: prefetchw): another thread's block's state is compare-exchanged next */
    struct fm_tcache *tc = fm_tc;
    struct fm_blk *top = tc->top[c1];
    __atomic_store_n(&tc->busy, st, __ATOMIC_RELEASE);   /* published before it is loaded (remote.c's adoption) */
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (likely((uint64_t)m < magic && *st == tc->own && top < tc->lim[c1])) {   /* plain: its owner is the only writer */
      st_store(st, ST_CACHED);
      top->p = ptr;
      top->st = st;
      tc->top[c1] = top + 1;
      return;
    }
    if ((uint64_t)m < magic) return fm_free_block(ptr, st, tc, c1);
  }
  if (call == FM_FREE_PLAIN) return fm_free_slow(ptr);
  fm_free_sized_slow(ptr, size, call);
}

static always_inline void fm_free(void *ptr) { fm_free_as(ptr, 0, FM_FREE_PLAIN); }
#endif