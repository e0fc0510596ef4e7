/* tests/sh/states.sh's helper: states N SIZE allocates N blocks of SIZE bytes, writes each one's
 * index into it, checks every one, then counts the resident pages of the pool below its lowest
 * block or its array of them (the tables: states, lines, run records, shards) and prints
 *   meta_kb=M blocks_kb=B data=ok
 * M: resident KiB from the start of the mapping that holds the lowest block (and of the
 * anonymous mappings right below it) up to that block's page (mincore), B: N * SIZE / 1024. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: states N SIZE\n");
    return 2;
  }
  long n = atol(argv[1]);
  size_t size = (size_t)atol(argv[2]);
  void **v = malloc((size_t)n * sizeof *v);
  if (!v) return 1;
  uintptr_t low = (uintptr_t)v;   /* (a large block, perhaps below the others) */
  for (long i = 0; i < n; i++) {
    if (!(v[i] = malloc(size))) return 1;
    memcpy(v[i], &i, sizeof i);
    if ((uintptr_t)v[i] < low) low = (uintptr_t)v[i];
  }
  for (long i = 0; i < n; i++)
    if (memcmp(v[i], &i, sizeof i)) {
      fprintf(stderr, "states: block %ld lost its contents\n", i);
      return 1;
    }
  FILE *f = fopen("/proc/self/maps", "r");
  if (!f) return 1;
  /* the mapping that holds it and the anonymous ones right below it (the tables, where a
   * madvise split them off) */
  char line[512];
  uintptr_t lo = 0, run_lo = 0, prev_hi = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b;
    char path[256] = "";
    if (sscanf(line, "%lx-%lx %*s %*s %*s %*s %255s", &a, &b, path) < 2) continue;
    if (path[0] || a != prev_hi) run_lo = a;
    prev_hi = path[0] ? 0 : b;
    if (a <= low && low < b) lo = run_lo;
  }
  fclose(f);
  size_t page = (size_t)sysconf(_SC_PAGESIZE), len = ((low & ~(page - 1)) - lo);
  unsigned char *vec = malloc(len / page + 1);
  if (!lo || !vec || mincore((void *)lo, len, vec)) {
    fprintf(stderr, "states: no mapping holds %#lx, or mincore failed\n", (unsigned long)low);
    return 1;
  }
  size_t resident = 0;
  for (size_t i = 0; i < len / page; i++) resident += vec[i] & 1;
  for (long i = 0; i < n; i++) free(v[i]);
  free(v);
  free(vec);
  printf("meta_kb=%zu blocks_kb=%zu data=ok\n", resident * page >> 10, (size_t)n * size >> 10);
  return 0;
}
