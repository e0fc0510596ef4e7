/* The core built as a plain library under ThreadSanitizer or UndefinedBehaviorSanitizer (meson
 * builds this file twice with the core's sources; a preloaded malloc cannot sit under a
 * sanitizer, the core's own API can). 4 threads allocate blocks of 1 B-70 KB through
 * flatmalloc_malloc and flatmalloc_calloc, fill them with a pattern naming the block, and swap
 * them through shared slots, so most blocks are freed by another thread than the one that
 * allocated them; one thread calls flatmalloc_malloc_trim now and then. Every block's pattern
 * (and a calloc block's zeros) is checked before it is freed; at the end the heap validator
 * must find nothing wrong. The sanitizer reports races and undefined behaviour itself and
 * makes the run fail. */
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flatmalloc.h"

enum { THREADS = 4, ROUNDS = 20000, SLOTS = 64 };

struct block { uint32_t size, tag; };   /* at the start of every block of 8 bytes or more */

static struct block *_Atomic slot[THREADS][SLOTS];

static void fail(const char *what, uint32_t tag) {
  fprintf(stderr, "FAIL %s (block tag %u)\n", what, tag);
  exit(1);
}

static uint8_t fill_byte(uint32_t tag, size_t i) { return (uint8_t)(tag * 31 + i); }

static void check_and_free(struct block *b) {
  if (b->size >= sizeof *b)
    for (size_t i = sizeof *b; i < b->size && i < 256; i++)
      if (((uint8_t *)b)[i] != fill_byte(b->tag, i)) fail("a block's contents changed while it was live", b->tag);
  flatmalloc_free(b);
}

static void *work(void *arg) {
  uint32_t id = (uint32_t)(uintptr_t)arg, s = id * 7919 + 1;
  for (uint32_t r = 0; r < ROUNDS; r++) {
    s = s * 1103515245 + 12345;
    uint32_t size = sizeof(struct block) + (s >> 8) % 70000, tag = id << 24 | r;
    uint8_t *p = (s & 1) ? flatmalloc_calloc(1, size) : flatmalloc_malloc(size);
    if (!p) fail("allocation returned NULL", tag);
    if (s & 1)
      for (uint32_t i = 0; i < size; i += 4096 - 1)
        if (p[i]) fail("calloc returned a block that is not zero", tag);
    struct block *b = (struct block *)p;
    b->size = size;
    b->tag = tag;
    for (size_t i = sizeof *b; i < size && i < 256; i++) p[i] = fill_byte(tag, i);
    struct block *old = atomic_exchange(&slot[(id + r) % THREADS][(s >> 4) % SLOTS], b);
    if (old) check_and_free(old);
    if (id == 0 && r % 4000 == 0) flatmalloc_malloc_trim(0);
  }
  return NULL;
}

int main(void) {
  pthread_t t[THREADS];
  for (uintptr_t i = 0; i < THREADS; i++)
    if (pthread_create(&t[i], NULL, work, (void *)i)) fail("pthread_create", 0);
  for (int i = 0; i < THREADS; i++) pthread_join(t[i], NULL);
  for (int i = 0; i < THREADS; i++)
    for (int k = 0; k < SLOTS; k++)
      if (slot[i][k]) check_and_free(slot[i][k]);
  int faults = flatmalloc_heap_check();
  if (faults) {
    fprintf(stderr, "FAIL the heap validator found %d faults\n", faults);
    return 1;
  }
  puts("ok  4 threads, 80,000 blocks swapped between them, contents intact, heap valid");
  return 0;
}
