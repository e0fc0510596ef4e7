/* The fast paths: malloc that hits the thread cache, free to the own thread's cache. Everything
 * else (empty or full arrays, large blocks, start-up, checking mode, memcheck, bad pointers)
 * is one unlikely test away, in the noinline slow paths of api.c. */
#ifndef FM_FAST_H
#define FM_FAST_H
#include "internal.h"

static always_inline void *fm_alloc(size_t size) {
  if (likely(size < fm_pool.small_lim)) {
    struct fm_tcache *tc = fm_tc;
    unsigned c1 = fm_pool.cls_of[(size + FM_ALIGN - 1) / FM_ALIGN];
    uint32_t n = tc->nc[c1].n;
    if (likely(n != 0)) {
      tc->nc[c1].n = --n;
      *tc->st[c1][n] = ST_LIVE;
      return tc->p[c1][n];
    }
  }
  return fm_malloc_slow(size);
}

/* ptr must be a block start (one multiplication by the class's magic tells, and gives the
 * block's number q) whose state is LIVE; the freed block itself is never read or written. */
static always_inline void fm_free(void *ptr) {
  uintptr_t off = (uintptr_t)ptr - fm_pool.heap_base;
  /* rotating the low 4 bits to the top folds "misaligned" into "outside the heap" */
  if (likely(((off >> 4) | (off << 60)) < fm_pool.heap_units)) {
    uint64_t e = fm_pool.pmap[off >> fm_pool.chunk_shift];
    unsigned c1 = (uint8_t)e;
    uintptr_t span = (uintptr_t)(e >> 8);
    uint64_t magic = fm_cf.magic[c1];
    unsigned __int128 m = (unsigned __int128)((uintptr_t)ptr - span) * magic;
    if (likely((uint64_t)m < magic)) {
      uint8_t *st = (uint8_t *)span + fm_cf.st_off[c1] + (uint64_t)(m >> 64);
      struct fm_tcache *tc = fm_tc;
      uint32_t n = tc->nc[c1].n;
      if (likely(*st == ST_LIVE && n < tc->nc[c1].cap)) {
        *st = ST_CACHED;
        tc->p[c1][n] = ptr;
        tc->st[c1][n] = st;
        tc->nc[c1].n = n + 1;
        return;
      }
    }
  }
  fm_free_slow(ptr);
}
#endif
