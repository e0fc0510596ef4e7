/* tests/sh/hugepages.sh's helper: thp N SIZE allocates N blocks of SIZE bytes, writes each one's
 * index into it, checks every one, then reads /proc/self/smaps while they are live and prints
 *   hg_kb=K huge_kb=H data=ok
 * K: the size of the mappings marked for huge pages (VmFlags "hg"), H: their AnonHugePages. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: thp N SIZE\n");
    return 2;
  }
  long n = atol(argv[1]);
  size_t size = (size_t)atol(argv[2]);
  void **v = malloc((size_t)n * sizeof *v);
  if (!v) return 1;
  for (long i = 0; i < n; i++) {
    if (!(v[i] = malloc(size))) return 1;
    memcpy(v[i], &i, sizeof i);
  }
  for (long i = 0; i < n; i++)
    if (memcmp(v[i], &i, sizeof i)) {
      fprintf(stderr, "thp: block %ld lost its contents\n", i);
      return 1;
    }
  FILE *f = fopen("/proc/self/smaps", "r");
  if (!f) return 1;
  char line[512];
  unsigned long lo = 0, hi = 0, huge = 0, hg_kb = 0, huge_kb = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long a, b;
    if (!(line[0] >= 'A' && line[0] <= 'Z')) {   /* a mapping's first line; its fields follow */
      if (sscanf(line, "%lx-%lx ", &a, &b) == 2) lo = a, hi = b, huge = 0;
    } else if (!strncmp(line, "AnonHugePages:", 14)) {
      huge = strtoul(line + 14, NULL, 10);
    } else if (!strncmp(line, "VmFlags:", 8) && strstr(line, " hg")) {
      hg_kb += (hi - lo) >> 10;
      huge_kb += huge;
    }
  }
  fclose(f);
  for (long i = 0; i < n; i++) free(v[i]);
  free(v);
  printf("hg_kb=%lu huge_kb=%lu data=ok\n", hg_kb, huge_kb);
  return 0;
}
