/* The fast paths: malloc that hits the thread cache, free to the own thread's cache. Everything
 * else (empty or full lists, large blocks, start-up, checking mode, memcheck, bad pointers)
 * is one unlikely test away, in the noinline slow paths of api.c. */
#ifndef FM_FAST_H
#define FM_FAST_H
#include "internal.h"

static always_inline void *fm_alloc(size_t size) {
  if (likely(size < fm_pool.small_lim)) {
    struct fm_bin *b = &fm_tc->bin[fm_pool.cls_of[(size + FM_ALIGN - 1) / FM_ALIGN]];
    void **p = b->head;
    if (likely(p != NULL)) {
      b->head = p[0];
      b->count--;
      return p;
    }
  }
  return fm_malloc_slow(size);
}

static always_inline void fm_free(void *ptr) {
  uintptr_t off = (uintptr_t)ptr - fm_pool.small_base;
  /* rotating the low 4 bits to the top folds "misaligned" into "outside the small area" */
  if (likely(((off >> 4) | (off << 60)) < fm_pool.small_units)) {
    struct fm_bin *b = &fm_tc->bin[fm_pool.chunk_cls[off >> fm_pool.chunk_shift]];
    void **h = b->head;
    /* 2 <= count < limit, so h and h[0] exist; ptr must not be one of the last three blocks this
     * thread freed to this class (a double free). Those nodes are hot: the freed block itself,
     * likely cold, is only written, never read. */
    if (likely(b->count - 2 < b->limit - 2 && ptr != h && ptr != h[0] && ptr != ((void **)h[0])[0])) {
      *(void **)ptr = h;
      b->head = ptr;
      b->count++;
      return;
    }
  }
  fm_free_slow(ptr);
}
#endif
