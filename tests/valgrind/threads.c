/* Threads that allocate, hand blocks to each other through a mutex-protected queue and free
 * them: helgrind and drd must report nothing. With "race", two threads also write one heap
 * word without a lock: that race must still be reported. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 4
#define ROUNDS 300

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static char *queue[64];
static int queued;
static int *shared;
static int race;

static void *worker(void *arg) {
  unsigned seed = (unsigned)(size_t)arg;
  for (int i = 0; i < ROUNDS; i++) {
    size_t n = 2 + rand_r(&seed) % 300;
    char *p = malloc(n);
    memset(p, (int)n, n);
    pthread_mutex_lock(&lock);
    char *q = queued ? queue[--queued] : NULL;
    if (queued < 64) queue[queued++] = p;
    else free(p);
    pthread_mutex_unlock(&lock);
    if (q) {                        /* a block another thread made: read it, then free it */
      if (q[1] != q[0]) abort();
      free(q);
    }
  }
  if (race) shared[0]++;            /* unlocked: the planted race */
  return NULL;
}

int main(int argc, char **argv) {
  race = argc > 1 && !strcmp(argv[1], "race");
  shared = calloc(1, sizeof *shared);
  pthread_t t[N];
  for (size_t i = 0; i < N; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
  for (int i = 0; i < N; i++) pthread_join(t[i], NULL);
  while (queued) free(queue[--queued]);
  free(shared);
  puts("threads done");
  return 0;
}
