/* An allocation-heavy program for timing memcheck: 400,000 malloc/free of mixed small sizes
 * with a working set of 1,000 blocks, a few large ones, some realloc and calloc. */
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 400000;
  static char *set[1000];
  unsigned seed = 42;
  for (long i = 0; i < n; i++) {
    int k = (int)(rand_r(&seed) % 1000);
    free(set[k]);
    size_t size = 8 + rand_r(&seed) % (i % 1000 == 0 ? 100000 : 500);
    switch (i % 8) {
    case 0: set[k] = calloc(1, size); break;
    case 1: set[k] = realloc(malloc(size / 2 + 1), size); break;
    default: set[k] = malloc(size); break;
    }
    set[k][0] = (char)i;
  }
  for (int k = 0; k < 1000; k++) free(set[k]);
  return 0;
}
