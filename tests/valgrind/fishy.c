/* memcheck's "fishy" size arguments (a negative number passed as a size) and calloc(0, -1):
 * each call must fail, and memcheck must report each as it does on glibc's heap. With
 * "realloc-null": realloc(NULL, 40), reallocarray(NULL, 2, 30) and posix_memalign(64, 50), all
 * leaked, whose stacks must read as glibc's (malloc, then main; memalign, posix_memalign, main). */
#include <malloc.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static volatile size_t minus1 = SIZE_MAX;   /* volatile: no compile-time warning or folding */
void *volatile sink;

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "realloc-null")) {
    sink = realloc(NULL, 40);
    sink = reallocarray(NULL, 2, 30);
    void *q;
    if (posix_memalign(&q, 64, 50) == 0) sink = q;
    q = NULL;
    sink = NULL;
    return 0;
  }
  void *p = malloc(16), *q = NULL;
  int fails = 0;
  fails += malloc(minus1) == NULL;
  fails += calloc(0, minus1) == NULL;
  fails += calloc(minus1, 1) == NULL;
  fails += realloc(p, minus1) == NULL;
  fails += memalign(64, minus1) == NULL;
  fails += posix_memalign(&q, 64, minus1) != 0;
  free(p);
  printf("fishy: %d of 6 failed\n", fails);
  return 0;
}
