/* Use after free while the block is younger than memcheck's --freelist-vol: free a block,
 * make 100 more blocks of its size, then read the freed one. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int main(void) {
  char *p = malloc(64), *keep[100];
  memset(p, 1, 64);
  free(p);
  for (int i = 0; i < 100; i++) {
    keep[i] = malloc(64);
    memset(keep[i], 2, 64);
  }
  int bad = p[10] == 7;             /* invalid read of size 1 inside a block of size 64 free'd */
  for (int i = 0; i < 100; i++) free(keep[i]);
  puts("uaf done");
  return bad;
}
