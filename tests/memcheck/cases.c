/* Small programs with one bug each (and one without), for memcheck to find under flatmalloc. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char *volatile sink;

static void *worker(void *arg) {
  unsigned seed = (unsigned)(size_t)arg;
  char *v[256] = {0};
  for (int i = 0; i < 20000; i++) {
    int k = (int)(rand_r(&seed) % 256);
    if (v[k]) {
      if (v[k][0] != (char)k) abort();
      free(v[k]);
    }
    size_t n = 1 + rand_r(&seed) % (k < 8 ? 100000 : 600);
    v[k] = malloc(n);
    memset(v[k], k, n);
  }
  for (int k = 0; k < 256; k++) free(v[k]);
  return NULL;
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  if (!strcmp(c, "use-after-free")) {
    char *p = malloc(64);
    memset(p, 1, 64);
    free(p);
    return p[10] == 7;              /* invalid read of size 1 */
  }
  if (!strcmp(c, "write-past-end")) {
    char *p = malloc(40);
    p[40] = 1;                      /* invalid write of size 1, 0 bytes after a block of size 40 */
    free(p);
    return 0;
  }
  if (!strcmp(c, "leak")) {
    sink = malloc(1234);
    sink[0] = 1;
    sink = NULL;                    /* 1,234 bytes definitely lost */
    return 0;
  }
  if (!strcmp(c, "invalid-free")) {
    char *p = malloc(100);
    free(p + 8);                    /* invalid free */
    free(p);
    return 0;
  }
  if (!strcmp(c, "clean")) {
    pthread_t t[4];
    for (size_t i = 0; i < 4; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    char *p = calloc(10, 100), *q = realloc(NULL, 10);
    q = realloc(q, 100000);
    memset(q, 0, 100000);
    free(q);
    free(p);
    puts("clean done");
    return 0;
  }
  fprintf(stderr, "usage: cases use-after-free|write-past-end|leak|invalid-free|clean\n");
  return 2;
}
