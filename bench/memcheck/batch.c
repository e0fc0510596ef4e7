/* bench/memcheck.sh's `batch`: N malloc(48) kept in an array, then all freed, in allocation
 * order (default 3,000,000). Built with -O2 -fno-builtin. */
#include <stdlib.h>

int main(int argc, char **argv) {
  long n = argc > 1 ? atol(argv[1]) : 3000000;
  void **set = malloc((size_t)n * sizeof *set);
  if (!set) return 1;
  for (long i = 0; i < n; i++)
    if (!(set[i] = malloc(48))) return 1;
  for (long i = 0; i < n; i++) free(set[i]);
  free(set);
  return 0;
}
