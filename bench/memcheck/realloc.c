/* bench/memcheck.sh's `realloc`: N times p = malloc(128), written, realloc(p, 300), free
 * (default 500,000): every realloc moves its block. Built with -O2 -fno-builtin; the pointers
 * also go through a volatile, so every call stays. */
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 500000;
  void *volatile sink;
  for (long i = 0; i < n; i++) {
    char *p = malloc(128);
    if (!p) return 1;
    memset(p, (int)i, 128);
    sink = p;
    char *q = realloc(p, 300);
    if (!q || q[127] != (char)i) return 1;
    sink = q;
    free(q);
  }
  (void)sink;
  return 0;
}
