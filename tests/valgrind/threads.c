/* Threads that allocate, hand blocks to each other through a mutex-protected queue and free
 * them: helgrind and drd must report nothing. With "race", two threads also write one heap
 * word without a lock: that race must still be reported. With "trim", one more thread calls
 * malloc_trim and mallinfo2 meanwhile, which take the allocator's locks in the program's
 * threads (under memcheck the others' calls run natively and must wait for them). */
#include <malloc.h>
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
static int running;   /* workers left, under lock */

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
  pthread_mutex_lock(&lock);
  running--;
  pthread_mutex_unlock(&lock);
  if (race) shared[0]++;            /* unlocked, and after the last lock: the planted race */
  return NULL;
}

static void *trimmer(void *arg) {
  (void)arg;
  for (;;) {
    pthread_mutex_lock(&lock);
    int left = running;
    pthread_mutex_unlock(&lock);
    if (!left) return NULL;
    malloc_trim(0);
    (void)mallinfo2();
  }
}

int main(int argc, char **argv) {
  race = argc > 1 && !strcmp(argv[1], "race");
  shared = calloc(1, sizeof *shared);
  pthread_t t[N + 1];
  running = N;
  for (size_t i = 0; i < N; i++) pthread_create(&t[i], NULL, worker, (void *)(i + 1));
  int trim = argc > 1 && !strcmp(argv[1], "trim");
  if (trim) pthread_create(&t[N], NULL, trimmer, NULL);
  for (int i = 0; i < N + trim; i++) pthread_join(t[i], NULL);
  while (queued) free(queue[--queued]);
  free(shared);
  puts("threads done");
  return 0;
}
