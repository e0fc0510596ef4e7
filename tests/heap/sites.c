/* Three known call sites for the heap profiler's test (tests/heap/heap.sh):
 *   site_keep64  keeps 64 MiB live (1024 blocks of 64 KiB)
 *   site_keep8   keeps 8 MiB live (32768 blocks of 256 B, aligned to 64: posix_memalign)
 *   site_churn   allocates 1 GiB in blocks of 4 KiB and frees each at once
 * usage: sites MODE [DUMP_PATH]
 *   plain    all three in the main thread
 *   fork     all three in a forked child; the parent waits and allocates nothing more
 *   threads  each site in its own thread; site_passed allocates 32 MiB in a fourth thread and
 *            the main thread frees it (sampled blocks freed by another thread)
 *   dump     as plain, then flatmalloc_heap_dump(DUMP_PATH), then frees the 64 MiB: the
 *            profile at exit ranks site_keep8 first, the dump site_keep64
 *   grow     as plain, then site_grow keeps one buffer grown by realloc from 1 MiB to 40 MiB
 *            in 1 MiB steps (in place when the space after it is free)
 *   signal   as dump, with raise(SIGUSR2) in place of the call (FLATMALLOC_HEAP_SIGNAL=USR2)
 * Prints the same lines with and without the profiler. */
#include <dlfcn.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#define N64 1024
#define N8 32768
#define NPASS 8192
static void *keep64[N64], *keep8[N8], *passed[NPASS];
static unsigned long sum;

static void *fill(void *p, size_t n) {
  if (!p) {
    fprintf(stderr, "sites: out of memory\n");
    exit(1);
  }
  memset(p, 1, n);
  sum += ((unsigned char *)p)[n - 1];
  return p;
}

__attribute__((noinline)) static void *site_keep64(void *arg) {
  for (int i = 0; i < N64; i++) keep64[i] = fill(malloc(64 << 10), 64 << 10);
  return arg;
}

__attribute__((noinline)) static void *site_keep8(void *arg) {
  for (int i = 0; i < N8; i++) {
    void *p = NULL;
    if (posix_memalign(&p, 64, 256) || ((unsigned long)p & 63)) {
      fprintf(stderr, "sites: posix_memalign(64, 256) failed\n");
      exit(1);
    }
    keep8[i] = fill(p, 256);
  }
  return arg;
}

__attribute__((noinline)) static void *site_churn(void *arg) {
  for (int i = 0; i < (1 << 18); i++) {
    void *volatile p = fill(malloc(4096), 4096);
    free(p);
  }
  return arg;
}

__attribute__((noinline)) static void *site_passed(void *arg) {
  for (int i = 0; i < NPASS; i++) passed[i] = fill(malloc(4096), 4096);
  return arg;
}

__attribute__((noinline)) static void *site_grow(void *arg) {
  (void)arg;
  char *p = NULL;
  for (size_t n = 1; n <= 40; n++) {
    char *q = realloc(p, n << 20);
    if (!q) {
      fprintf(stderr, "sites: realloc failed\n");
      exit(1);
    }
    p = q;
    memset(p + ((n - 1) << 20), 2, 1 << 20);
  }
  sum += (unsigned char)p[(40 << 20) - 1];
  return p;
}

static void all_three(void) {
  site_keep64(NULL);
  site_keep8(NULL);
  site_churn(NULL);
}

static void run(void *(*fn)(void *), pthread_t *t) {
  if (pthread_create(t, NULL, fn, NULL)) {
    fprintf(stderr, "sites: pthread_create failed\n");
    exit(1);
  }
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "plain";
  if (!strcmp(mode, "plain")) {
    all_three();
  } else if (!strcmp(mode, "fork")) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return 1;
    if (pid == 0) {
      all_three();
      printf("child: %lu\n", sum);
      exit(0);
    }
    int st;
    if (waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) return 1;
  } else if (!strcmp(mode, "threads")) {
    pthread_t t[4];
    run(site_keep64, &t[0]);
    run(site_keep8, &t[1]);
    run(site_churn, &t[2]);
    run(site_passed, &t[3]);
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    for (int i = 0; i < NPASS; i++) free(passed[i]);
  } else if (!strcmp(mode, "dump") && argc > 2) {
    all_three();
    int (*dump)(const char *) = (int (*)(const char *))dlsym(RTLD_DEFAULT, "flatmalloc_heap_dump");
    if (!dump || dump(argv[2]) != 0) {
      fprintf(stderr, "sites: flatmalloc_heap_dump(%s) failed\n", argv[2]);
      return 1;
    }
    for (int i = 0; i < N64; i++) free(keep64[i]);
  } else if (!strcmp(mode, "grow")) {
    all_three();
    site_grow(NULL);
  } else if (!strcmp(mode, "signal")) {
    all_three();
    raise(SIGUSR2);
    for (int i = 0; i < N64; i++) free(keep64[i]);
  } else {
    fprintf(stderr, "usage: sites plain|fork|threads|grow|signal|dump PATH\n");
    return 2;
  }
  printf("sites %s: %lu\n", mode, sum);
  return 0;
}
