/* bench/memcheck.sh's `loop`: N times p = malloc(48); free(p) (default 3,000,000).
 * Built with -O2 -fno-builtin; the pointer also goes through a volatile, so every call stays. */
#include <stdlib.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 3000000;
  void *volatile sink;
  for (long i = 0; i < n; i++) {
    void *p = malloc(48);
    if (!p) return 1;
    sink = p;
    free(p);
  }
  (void)sink;
  return 0;
}
