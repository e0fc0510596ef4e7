/* memcheck --track-origins=yes: a 64-byte block, one byte of it read before it was written;
 * with an argument, first 200 blocks of 1 MiB, written and kept (past the default pool under
 * --track-origins=yes, 64 MiB), freed at the end. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(int argc, char **argv) {
  (void)argv;
  static char *big[200];
  int n = argc > 1 ? 200 : 0;
  for (int i = 0; i < n; i++) {
    if (!(big[i] = malloc(1 << 20))) {
      printf("origins: malloc failed after %d MiB\n", i);
      return 1;
    }
    memset(big[i], i, 1 << 20);
  }
  if (n) printf("origins: %d MiB allocated\n", n);
  volatile char *p = malloc(64);
  puts(p[3] ? "origins: set" : "origins: clear");
  free((void *)p);
  for (int i = 0; i < n; i++) free(big[i]);
  return 0;
}
