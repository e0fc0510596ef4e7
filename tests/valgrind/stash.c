/* Under memcheck, malloc takes blocks from a stash and their headers are written later (check.c,
 * "the stash"): everything that reads a block's size or counts blocks must still be exact.
 * Exits nonzero, naming the check, when one is not; valgrind.sh also wants 0 errors.
 *   usable      malloc_usable_size right after malloc, for every size the stash serves
 *   realloc     realloc right after malloc copies exactly the old size (grow, shrink, moves)
 *   threads     blocks malloc'ed by one thread are freed and realloc'ed by another
 *   mallinfo    mallinfo2's bytes in use grow by the blocks' size only (no stashed block)
 *   fork        the child allocates, frees and checks contents, with blocks stashed at the fork
 *   exit        threads leave with stashed blocks and live blocks; main frees the live ones
 * With the argument "exhaust" (run in a small pool): malloc(48) until NULL gives ENOMEM, no
 * block is damaged, and after freeing half of them malloc serves again. */
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int fail(const char *what, size_t n) {
  printf("FAIL %s (%zu)\n", what, n);
  exit(1);
}

static void fill(unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++) p[i] = (unsigned char)(seed + i * 7);
}
static int same(const unsigned char *p, size_t n, unsigned seed) {
  for (size_t i = 0; i < n; i++)
    if (p[i] != (unsigned char)(seed + i * 7)) return 0;
  return 1;
}

static void usable(void) {
  for (size_t n = 0; n <= 9000; n += n < 300 ? 1 : 97) {
    unsigned char *p = malloc(n);
    if (!p || malloc_usable_size(p) != n) fail("usable", n);
    free(p);
  }
}

static void grow_and_shrink(void) {
  for (size_t n = 1; n <= 5000; n += n < 200 ? 1 : 61) {
    unsigned char *p = malloc(n);
    fill(p, n, (unsigned)n);
    unsigned char *q = realloc(p, 2 * n + 100);   /* moves */
    if (!q || !same(q, n, (unsigned)n) || malloc_usable_size(q) != 2 * n + 100) fail("realloc grow", n);
    p = malloc(n);
    fill(p, n, (unsigned)n + 1);
    unsigned char *r = realloc(p, (n + 1) / 2);    /* in place */
    if (!r || !same(r, (n + 1) / 2, (unsigned)n + 1) || malloc_usable_size(r) != (n + 1) / 2) fail("realloc shrink", n);
    free(q);
    free(r);
  }
}

/* ---- blocks crossing threads ---- */
#define CROSS 4000
static unsigned char *cross[CROSS];
static void *consume(void *arg) {
  (void)arg;
  for (int i = 0; i < CROSS; i++) {
    size_t n = 1 + (size_t)i % 700;
    if (!same(cross[i], n, (unsigned)i)) fail("threads contents", (size_t)i);
    if (i % 3 == 0) {
      cross[i] = realloc(cross[i], n + 50);
      if (!same(cross[i], n, (unsigned)i)) fail("threads realloc", (size_t)i);
    }
    free(cross[i]);
  }
  return NULL;
}
static void threads(void) {
  for (int i = 0; i < CROSS; i++) {
    size_t n = 1 + (size_t)i % 700;
    cross[i] = malloc(n);
    fill(cross[i], n, (unsigned)i);
  }
  pthread_t t;
  pthread_create(&t, NULL, consume, NULL);
  pthread_join(t, NULL);
}

static void info(void) {
  void *warm = malloc(100);   /* the stash for this size is filled now */
  size_t before = mallinfo2().uordblks;
  void *p[10];
  for (int i = 0; i < 10; i++) p[i] = malloc(100);
  size_t grew = mallinfo2().uordblks - before;
  /* ten blocks of the class that holds 100 bytes and the header and canary: not a stash's worth */
  if (grew < 10 * 100 || grew > 10 * 256) fail("mallinfo", grew);
  for (int i = 0; i < 10; i++) free(p[i]);
  free(warm);
}

static void forked(void) {
  void *keep = malloc(40);   /* leaves blocks of its class stashed */
  pid_t pid = fork();
  if (pid == 0) {
    for (int i = 0; i < 2000; i++) {
      size_t n = 1 + (size_t)i % 300;
      unsigned char *q = malloc(n);
      fill(q, n, (unsigned)i);
      if (!same(q, n, (unsigned)i) || malloc_usable_size(q) != n) _exit(1);
      free(q);
    }
    free(keep);
    _exit(0);
  }
  int st;
  if (pid < 0 || waitpid(pid, &st, 0) != pid || !WIFEXITED(st) || WEXITSTATUS(st)) fail("fork", 0);
  free(keep);
}

static void *leave(void *arg) {
  unsigned char **out = arg;
  for (int i = 0; i < 16; i++) {
    out[i] = malloc(24 + (size_t)i);   /* the rest of the stash stays behind */
    fill(out[i], 24 + (size_t)i, (unsigned)i);
  }
  return NULL;
}
static void exits(void) {
  for (int t = 0; t < 8; t++) {
    unsigned char *got[16];
    pthread_t th;
    pthread_create(&th, NULL, leave, got);
    pthread_join(th, NULL);
    for (int i = 0; i < 16; i++) {
      if (!same(got[i], 24 + (size_t)i, (unsigned)i) || malloc_usable_size(got[i]) != 24 + (size_t)i)
        fail("exit", (size_t)i);
      free(got[i]);
    }
  }
}

static void *many[4000000];
static int exhaust(void) {
  size_t n = 0;
  errno = 0;
  while (n < sizeof many / sizeof many[0] && (many[n] = malloc(48))) fill(many[n], 48, (unsigned)n), n++;
  if (n == sizeof many / sizeof many[0] || errno != ENOMEM) fail("exhaust: ENOMEM", n);
  for (size_t i = 0; i < n; i++)
    if (!same(many[i], 48, (unsigned)i)) fail("exhaust: contents", i);
  for (size_t i = 0; i < n; i += 2) free(many[i]);
  for (size_t i = 0; i < n / 4; i++)
    if (!(many[2 * i] = malloc(48))) fail("exhaust: malloc after free", i);
  printf("stash done (%zu blocks)\n", n);
  return 0;
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "exhaust")) return exhaust();
  usable();
  grow_and_shrink();
  threads();
  info();
  forked();
  exits();
  puts("stash done");
  return 0;
}
