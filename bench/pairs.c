/* pairs SIZE [N] [sized]: N malloc+free pairs of SIZE bytes (default 1,000,000) in run_pairs();
 * with "sized", malloc+free_sized(p, SIZE) pairs.
 *
 * Made to be counted, not timed: scripts/bench --callgrind runs it under
 *   valgrind --tool=callgrind --toggle-collect=run_pairs
 * so only the loop (and everything it calls in the allocator) is counted, and divides the
 * instructions by N. One warm-up pair before the loop keeps the allocator's initialisation out.
 * Built with -fno-builtin; the pointer is escaped so the pair cannot be optimised away. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void free_sized(void *p, size_t size) __attribute__((weak));   /* C23; glibc before 2.39 has none: the preloaded allocator's */

static int sized;

__attribute__((noinline)) void run_pairs(size_t size, size_t n)
{
  if (sized) {
    for (size_t i = 0; i < n; i++) {
      void *p = malloc(size);
      __asm__ volatile("" : : "r"(p) : "memory");
      free_sized(p, size);
    }
    return;
  }
  for (size_t i = 0; i < n; i++) {
    void *p = malloc(size);
    __asm__ volatile("" : : "r"(p) : "memory");
    free(p);
  }
}

int main(int argc, char **argv)
{
  if (argc < 2) {
    fprintf(stderr, "usage: pairs SIZE [N]\n");
    return 2;
  }
  size_t size = strtoull(argv[1], NULL, 0);
  size_t n = argc > 2 ? strtoull(argv[2], NULL, 0) : 1000000;
  sized = argc > 3 && !strcmp(argv[3], "sized");
  void *p = malloc(size); /* warm-up: initialisation and first refill */
  __asm__ volatile("" : : "r"(p) : "memory");
  free(p);
  run_pairs(size, n);
  printf("pairs,size_b,%zu\npairs,n,%zu\n", size, n);
  return 0;
}
