/* An arena that is never destroyed, under memcheck: built with -DARENA (linking flatmalloc) the
 * program creates an arena and makes ten 40-byte allocations in it; built without, it mallocs a
 * struct in the arena's place and ten blocks of 40 bytes, for glibc's run. The pointers are
 * dropped. With an argument, one more malloc'd block stays live, reachable from a global; with
 * "overrun", a read past an allocation instead. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef ARENA
#include "flatmalloc.h"
#endif

void *volatile keep;

/* Out of main, so that no copy of a dropped pointer stays in main's registers or frame. */
static __attribute__((noinline)) void leak_arena(void) {
#ifdef ARENA
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  for (int i = 0; i < 10; i++) memset(flatmalloc_arena_alloc(a, 40, 16), i, 40);
#else
  memset(malloc(128), 0, 128);
  for (int i = 0; i < 10; i++) memset(malloc(40), i, 40);
#endif
}

/* A read 100 bytes past a 48-byte allocation, past its red zone: in the arena's slab's part
 * not handed out yet (with malloc, in memcheck's heap past the block). */
static volatile char sink;
static __attribute__((noinline)) void overrun(void) {
#ifdef ARENA
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  char *p = flatmalloc_arena_alloc(a, 48, 16);
#else
  char *p = malloc(48);
#endif
  memset(p, 1, 48);
  sink = p[148];
#ifdef ARENA
  flatmalloc_arena_destroy(a);
#else
  free(p);
#endif
}

int main(int argc, char **argv) {
  /* The pool is started by malloc, as in most programs: an arena made before any malloc takes
   * the heap's first chunk, whose address the allocator keeps (docs/valgrind.md). */
  free(malloc(1));
  if (argc > 1 && !strcmp(argv[1], "overrun")) {
    overrun();
    puts("overrun done");
    return 0;
  }
  if (argc > 1) keep = malloc(24);
  leak_arena();
  puts("arenaleak done");
  return 0;
}
