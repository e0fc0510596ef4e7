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
    void **top = tc->top[c1];
    if (likely(top != tc->base[c1])) {
      tc->top[c1] = --top;
      st_store(FM_ST_OF(top), ST_LIVE);
      return *top;
    }
  }
  return fm_malloc_slow(size);
}

/* ptr must be a block start (one multiplication by the class's magic tells, and gives the
 * block's number q) whose state is LIVE; the freed block itself is never read or written. */
static always_inline void fm_free(void *ptr) {
  __builtin_prefetch(ptr, 1);
  uintptr_t ch = ((uintptr_t)ptr - fm_pool.heap_base) >> fm_pool.chunk_shift;
  if (likely(ch < fm_pool.heap_chunks)) {   /* a misaligned pointer fails the block-start test */
    const struct fm_line *l = &fm_pool.line[ch];
    uint64_t e = l->e;
    unsigned c1 = (uint8_t)e;
    uint64_t magic = fm_cf.magic[c1];
    uintptr_t span = (uintptr_t)(e >> 8);
    unsigned __int128 m = (unsigned __int128)((uintptr_t)ptr - span) * magic;
    if (likely((uint64_t)m < magic)) {
      uint8_t *st = l->stbase + (uint64_t)(m >> 64);
      struct fm_tcache *tc = fm_tc;
      void **top = tc->top[c1];
      if (likely(*st == ST_LIVE && top < tc->lim[c1])) {   /* plain: a scan only reads it too */
        st_store(st, ST_CACHED);
        *top = ptr;
        FM_ST_OF(top) = st;
        tc->top[c1] = top + 1;
        return;
      }
    }
  }
  fm_free_slow(ptr);
}
#endif
