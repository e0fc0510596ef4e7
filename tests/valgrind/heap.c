/* A heap whose peak massif and DHAT must see as with glibc: grows to about 3 MB in blocks of
 * mixed sizes, frees half, grows again, frees all. */
#include <stdlib.h>
#include <string.h>

static void *b[4000];

int main(void) {
  for (int i = 0; i < 4000; i++) b[i] = memset(malloc(100 + (size_t)(i % 7) * 200), 1, 100);
  for (int i = 0; i < 4000; i += 2) free(b[i]), b[i] = NULL;
  for (int i = 0; i < 4000; i += 2) b[i] = calloc(1, 1000);
  for (int i = 0; i < 4000; i++) free(b[i]);
  void *big = malloc(2 << 20);      /* a large block */
  memset(big, 0, 4096);
  free(big);
  return 0;
}
