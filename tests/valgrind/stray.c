/* Addresses that are no live block, under memcheck, beside glibc's run of the same program:
 *   badfree     free of 0x87654321 (nothing there) and of an array on the stack (Valgrind's
 *               memcheck/tests/badfree shape)
 *   big-blocks  reads through pointers to freed blocks of 900,000 and 1,000,015 bytes, run with
 *               --freelist-vol=1000000 --freelist-big-blocks=50000 (the shape of Valgrind's
 *               big_blocks_freed_list): four still held back, one reused after a later free,
 *               then one still held back after 100 more allocations
 *   shrink      malloc(100), realloc to 10, read 40 bytes past the new end */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile char sink;
static __attribute__((noinline)) void *same(void *p) { return p; }

static void big_blocks(void) {
  char *mid = malloc(900000), *big = malloc(1000015);
  free(mid);
  free(big);
  sink = big[1000];   /* both still held back */
  sink = mid[1000];
  char *small = malloc(10000);
  free(small);        /* pushes the big one out of the 1,000,000 bytes held back */
  sink = big[2000];
  sink = mid[2000];
  big = malloc(1000015);
  free(big);
  sink = small[10];
  sink = big[10];
  for (int i = 0; i < 100; i++) memset(malloc(10000), 1, 10000);   /* allocations free nothing */
  sink = small[10];
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  if (!strcmp(c, "badfree")) {
    int q[] = {1, 2, 3};
    free((void *)0x87654321);
    free(same(q));
  } else if (!strcmp(c, "big-blocks")) {
    big_blocks();
  } else if (!strcmp(c, "shrink")) {
    char *p = malloc(100);
    p = realloc(p, 10);
    sink = p[50];
    free(p);
  } else {
    fprintf(stderr, "usage: stray badfree|big-blocks|shrink\n");
    return 2;
  }
  puts("stray done");
  return 0;
}
