/* Races the allocator must not hide from helgrind and drd (issue 19). "counter": two threads
 * each do an unlocked counter++ and then a malloc/free pair, 100 times; "heap": the same with
 * the counter in a heap block; "clean": eight threads hand blocks to each other through a
 * mutex-protected queue and free blocks the others allocated, so freed blocks are reused by
 * other threads: no race at all. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROUNDS 100
static long counter;
static long *heap_counter;
static long *target;

static void *racer(void *arg) {
  (void)arg;
  for (int i = 0; i < ROUNDS; i++) {
    (*target)++;
    free(malloc(32));
  }
  return NULL;
}

#define CLEAN_THREADS 8
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *queue[16];
static int queued;

static void *clean(void *arg) {
  unsigned seed = (unsigned)(size_t)arg;
  for (int i = 0; i < 200; i++) {
    size_t n = 2 + rand_r(&seed) % 200;
    char *p = malloc(n);
    memset(p, (int)(n & 0x7f), n);
    pthread_mutex_lock(&lock);
    char *q = queued ? queue[--queued] : NULL;
    if (queued < 16) queue[queued++] = p;
    else free(p);
    pthread_mutex_unlock(&lock);
    if (q) {
      if (q[0] != q[1]) abort();
      q[0] = 1;   /* a write to a block another thread wrote */
      free(q);
    }
  }
  return NULL;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "clean";
  if (!strcmp(mode, "clean")) {
    pthread_t t[CLEAN_THREADS];
    for (size_t i = 0; i < CLEAN_THREADS; i++) pthread_create(&t[i], NULL, clean, (void *)(i + 1));
    for (size_t i = 0; i < CLEAN_THREADS; i++) pthread_join(t[i], NULL);
    while (queued) free(queue[--queued]);
  } else {
    heap_counter = malloc(sizeof *heap_counter);
    *heap_counter = 0;
    target = strcmp(mode, "heap") ? &counter : heap_counter;
    pthread_t a, b;
    pthread_create(&a, NULL, racer, NULL);
    pthread_create(&b, NULL, racer, NULL);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    free(heap_counter);
  }
  puts("race done");
  return 0;
}
