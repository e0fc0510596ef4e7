/* Arenas under memcheck: the arena is a mempool, so memcheck reports a read after the reset, an
 * overrun and an undefined read inside an arena as with any block; a clean program has no error. */
#include <stdio.h>
#include <string.h>

#include "flatmalloc.h"

static volatile char sink;

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "clean";
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  char *p = flatmalloc_arena_alloc(a, 40, 16);
  memset(p, 1, 40);
  if (!strcmp(c, "read-after-reset")) {
    flatmalloc_arena_reset(a);
    sink = p[10];
  } else if (!strcmp(c, "overrun")) {
    char *q = flatmalloc_arena_alloc(a, 48, 16);
    memset(q, 2, 48);
    q[48] = 3;
  } else if (!strcmp(c, "undefined")) {
    char *q = flatmalloc_arena_alloc(a, 64, 16);
    if (q[5] == 7) puts("seven");
  } else {
    /* clean: many rounds, slabs and own runs, every byte written before it is read */
    for (int round = 0; round < 20; round++) {
      for (int i = 0; i < 2000; i++) {
        char *q = flatmalloc_arena_alloc(a, (size_t)(1 + i % 300), 8);
        memset(q, i, (size_t)(1 + i % 300));
        sink = q[i % 300 / 2];
      }
      char *big = flatmalloc_arena_alloc(a, 600000, 64);
      memset(big, 1, 600000);
      sink = big[599999];
      flatmalloc_arena_reset(a);
    }
    puts("clean done");
  }
  flatmalloc_arena_destroy(a);
  return 0;
}
