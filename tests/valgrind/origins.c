/* memcheck --track-origins=yes: a 64-byte block, one byte of it read before it was written. */
#include <stdio.h>
#include <stdlib.h>

int main(void) {
  volatile char *p = malloc(64);
  puts(p[3] ? "origins: set" : "origins: clear");
  free((void *)p);
  return 0;
}
