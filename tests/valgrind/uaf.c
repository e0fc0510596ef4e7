/* Use after free while the block is younger than memcheck's --freelist-vol: free a block,
 * make 100 more blocks of its size, then read the freed one. With an argument, the other
 * mistakes memcheck must still see while frees are queued (check.c, "deferred releases"):
 *   after-flush         the same, with 200 frees after it (its release left the queue)
 *   double-free         free(p) twice in a row
 *   double-free-later   free(p), 200 frees, free(p)
 *   realloc-after-free  realloc of a freed block */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void churn(int n) {   /* n mallocs of 64 bytes, then their frees */
  char *keep[200];
  for (int i = 0; i < n; i++) {
    keep[i] = malloc(64);
    memset(keep[i], 2, 64);
  }
  for (int i = 0; i < n; i++) free(keep[i]);
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  char *p = malloc(64), *keep[100];
  memset(p, 1, 64);
  free(p);
  if (!strcmp(c, "after-flush")) {
    churn(200);
    int bad = p[10] == 7;           /* invalid read of size 1 inside a block of size 64 free'd */
    puts("uaf done");
    return bad;
  }
  if (!strcmp(c, "double-free") || !strcmp(c, "double-free-later")) {
    if (c[11]) churn(200);
    free(p);                        /* invalid free */
    puts("uaf done");
    return 0;
  }
  if (!strcmp(c, "realloc-after-free")) {
    char *q = realloc(p, 32);       /* invalid free / realloc */
    puts("uaf done");
    return q != NULL;
  }
  for (int i = 0; i < 100; i++) {
    keep[i] = malloc(64);
    memset(keep[i], 2, 64);
  }
  int bad = p[10] == 7;             /* invalid read of size 1 inside a block of size 64 free'd */
  for (int i = 0; i < 100; i++) free(keep[i]);
  puts("uaf done");
  return bad;
}
