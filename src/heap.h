/* The sampling heap profiler (heap.c), as the API and start-up see it. It sits beside the API
 * layer: api.c's slow paths call in, heap.c calls block.c and large.c below. */
#ifndef FM_HEAP_H
#define FM_HEAP_H
#include "types.h"

/* Set once at start-up when FLATMALLOC_HEAP is on: pool.c then sends every malloc to the slow
 * path (small_lim 0) and api.c's slow paths call heap_alloc and heap_free. */
hidden extern bool heap_on;

hidden void heap_setup(void);                /* pool.c, after the pool is laid out */
hidden void *heap_alloc(size_t size);        /* malloc's slow path with the pool ready */
hidden void *heap_alloc_aligned(size_t align, size_t size);   /* align above 16, pool ready */
hidden void *heap_calloc(size_t size);       /* calloc's, with the pool ready; NULL with ENOMEM */
hidden void heap_resized(void *p, size_t size);   /* realloc grew or shrank large block p in place */
hidden void heap_free(void *p);              /* free's slow path, before the block is released */
/* arena.c: an arena allocation of size bytes counts down the thread's bytes as malloc's do;
 * sampled, it returns its stack's number (counted live until heap_arena_done), else 0. */
hidden uint32_t heap_arena_sample(size_t size);
hidden void heap_arena_done(uint32_t stack, size_t size);
#endif
