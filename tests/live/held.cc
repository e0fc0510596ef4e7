// tests/live/held.cc: a program whose peak of bytes held is known, for bench/live.c (liblive.so).
// 2 MiB of 1 KiB blocks from malloc, held 30 ms and freed; 4 MiB from new[] in two threads that
// hold them 30 ms and delete each other's; 2 MiB from malloc again. The peak is the new[] phase:
// 4 MiB, plus what the allocator rounds 1 KiB up to (glibc: 8 bytes a block) and libstdc++'s own
// blocks (its exception pool, about 72 KiB). Counting new[] and the malloc beneath it twice
// (libstdc++'s operator new calls malloc) would read 8 MiB, missing new[] (an allocator that
// exports its own) 2 MiB, missing the deletes (of the other thread's blocks) 6 MiB.
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

enum { KIB = 1024, N = 4096 };   // N blocks of 1 KiB: 4 MiB
static char *blocks[2][N / 2];
static pthread_barrier_t held;

static void *worker(void *arg) {
  long self = (long)arg;
  for (auto &b : blocks[self]) {
    b = new char[KIB];
    memset(b, 1, KIB);
  }
  pthread_barrier_wait(&held);
  if (self == 0) usleep(30000);   // (the sampler reads every millisecond)
  pthread_barrier_wait(&held);
  for (auto &b : blocks[1 - self]) delete[] b;
  return nullptr;
}

static void from_malloc(size_t n) {
  static void *p[N];
  for (size_t i = 0; i < n; i++) {
    p[i] = malloc(KIB);
    memset(p[i], 1, KIB);
  }
  usleep(30000);
  for (size_t i = 0; i < n; i++) free(p[i]);
  usleep(30000);
}

int main() {
  from_malloc(N / 2);
  pthread_barrier_init(&held, nullptr, 2);
  pthread_t t[2];
  for (long i = 0; i < 2; i++) pthread_create(&t[i], nullptr, worker, (void *)i);
  for (auto x : t) pthread_join(x, nullptr);
  from_malloc(N / 2);
  return 0;
}
