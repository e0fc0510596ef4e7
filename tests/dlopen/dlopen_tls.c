/* dlopen of a library with TLS under flatmalloc: threads that touch the library's TLS get
 * blocks glibc allocates with malloc (and frees at thread exit or dlclose). Each thread checks
 * its own TLS values; the library is opened and closed repeatedly. */
#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

static unsigned long (*touch)(unsigned long);
static unsigned long (*sum)(void);

static void *worker(void *arg) {
  unsigned long tag = (unsigned long)arg;
  if (touch(tag) != 7) return (void *)1;           /* fresh TLS starts at the initial value */
  void *junk = malloc(100 + tag);
  if (sum() != tag + 16 * (tag & 0xff)) return (void *)2;
  free(junk);
  return NULL;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  if (!dlsym(RTLD_DEFAULT, "flatmalloc_version")) {
    fprintf(stderr, "FAIL: not running under flatmalloc\n");
    return 1;
  }
  for (int round = 0; round < 20; round++) {
    void *h = dlopen(argv[1], RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "FAIL: dlopen: %s\n", dlerror());
      return 1;
    }
    touch = (unsigned long (*)(unsigned long))dlsym(h, "tls_touch");
    sum = (unsigned long (*)(void))dlsym(h, "tls_sum");
    pthread_t t[16];
    for (unsigned long i = 0; i < 16; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 100 * (unsigned long)round + 1));
    for (int i = 0; i < 16; i++) {
      void *r;
      pthread_join(t[i], &r);
      if (r) {
        fprintf(stderr, "FAIL: round %d thread %d: TLS check %ld failed\n", round, i, (long)r);
        return 1;
      }
    }
    dlclose(h);
  }
  printf("ok: 20 rounds of dlopen, 16 threads each touching 64 KiB of dynamic TLS\n");
  return 0;
}
