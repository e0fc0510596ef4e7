/* smaps.h: hugepages_report() prints this process's AnonHugePages line of /proc/self/smaps_rollup
 * on stderr (bench/largeheap.sh reads it; "AnonHugePages: 0 kB" when the file is missing). */
#ifndef LARGEHEAP_SMAPS_H
#define LARGEHEAP_SMAPS_H
#include <stdio.h>
#include <string.h>

static void hugepages_report(void)
{
  char line[256];
  long kb = 0;
  FILE *f = fopen("/proc/self/smaps_rollup", "r");
  while (f && fgets(line, sizeof line, f))
    if (strncmp(line, "AnonHugePages:", 14) == 0)
      sscanf(line + 14, "%ld", &kb);
  if (f)
    fclose(f);
  fprintf(stderr, "AnonHugePages: %ld kB\n", kb);
}
#endif
