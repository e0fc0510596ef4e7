/* Stops (issue 54): a bad pointer anywhere in the pool, opened or not, and a call made while
 * the same thread is inside the allocator (a signal handler's) each stop the program with one
 * line and SIGABRT, never a bare SIGSEGV or a hang; blocks aligned past a chunk are served and
 * freed alike in both modes. Each case runs in a forked child; the parent checks how it ended,
 * the exact line, and, where the child goes on, that the program's other blocks are intact.
 * Run as `stops check` under FLATMALLOC_CHECK=1 and as `stops default` without it. */
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"

#define GIB ((size_t)1 << 30)
static void *volatile sink;

/* Reports the pointer the line will name, on fd 3, before the call. */
static void *named(void *p) {
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%p", p);
  if (write(3, buf, (size_t)n) != n) _exit(90);
  return p;
}

/* Blocks the program holds while it misbehaves: each filled with its own byte. */
#define KEPT 64
static unsigned char *kept[KEPT];
static size_t kept_size(int i) { return (size_t)(i * 997 % 70000) + 1; }
static void keep_some(void) {
  for (int i = 0; i < KEPT; i++) {
    kept[i] = malloc(kept_size(i));
    if (!kept[i]) _exit(91);
    memset(kept[i], i + 1, kept_size(i));
  }
}
/* 0 when every kept block still holds its byte. */
static int kept_intact(void) {
  for (int i = 0; i < KEPT; i++)
    for (size_t j = 0; j < kept_size(i); j++)
      if (kept[i][j] != (unsigned char)(i + 1)) return 1;
  return 0;
}

/* ---- 1: addresses in chunks the heap never used ----------------------------------------- */
static char *far_from_a_block(void) {
  keep_some();
  char *p = malloc(16);
  return p + GIB;   /* inside the pool (it is at least 2 GiB here), in a chunk never opened */
}
static void far_free(void) { free(named(far_from_a_block())); }
static void far_realloc(void) { sink = realloc(named(far_from_a_block()), 10); }
static void far_usable(void) { sink = (void *)malloc_usable_size(named(far_from_a_block())); }
static void far_free_large(void) {
  keep_some();
  char *p = malloc(1 << 20);
  free(named(p + 3 * GIB / 2));
}
static void far_arena(void) {
  void (*reset)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "flatmalloc_arena_reset");
  if (!reset) _exit(92);
  reset(named(far_from_a_block()));
}

/* ---- 3: re-entry from a signal handler ------------------------------------------------- */
static void on_alarm(int sig) {
  (void)sig;
  char *a = malloc(48), *b = malloc(300000);
  if (!a || !b) _exit(93);
  memset(a, 0x11, 48);
  b[0] = b[299999] = 0x22;
  free(a);
  free(b);
}
/* Large blocks (each a run of the heap's, under its lock) and small ones, with a timer firing
 * every 20 us whose handler allocates both: the handler is bound to come in while the thread
 * holds the heap's lock. If it never does, the program finishes, its blocks intact. */
static void reentry(void) {
  keep_some();
  struct sigaction sa = {0};
  sa.sa_handler = on_alarm;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGALRM, &sa, NULL);
  struct itimerval t = {{0, 20}, {0, 20}};
  setitimer(ITIMER_REAL, &t, NULL);
  for (long i = 0; i < 2000000; i++) {
    char *p = malloc(200000 + (size_t)(i % 7) * 20000), *q = malloc((size_t)(i % 500) + 1);
    if (!p || !q) _exit(94);
    p[0] = q[0] = 2;
    free(p);
    free(q);
  }
  setitimer(ITIMER_REAL, &(struct itimerval){0}, NULL);
  _exit(kept_intact() ? 95 : 0);
}

/* ---- 2: alignments past a chunk, freed at once, realloc'ed, sized ----------------------- */
/* One block of `align` (1 MiB, 1 GiB, 16 GiB) by each function: NULL only with ENOMEM. */
static int aligned_one(int how, size_t align, size_t size) {
  void *p = NULL;
  errno = 0;
  if (how == 0) p = aligned_alloc(align, size);
  if (how == 1) p = memalign(align, size);
  if (how == 2 && posix_memalign(&p, align, size)) p = NULL, errno = ENOMEM;
  if (!p) return errno == ENOMEM ? 0 : 1;
  if ((uintptr_t)p & (align - 1)) return 2;
  if (malloc_usable_size(p) < size) return 3;
  memset(p, 0x77, size);
  char *q = realloc(p, size + 100000);
  if (!q) return 4;
  for (size_t i = 0; i < size; i++)
    if (q[i] != 0x77) return 5;
  free(q);
  return 0;
}
static void aligned(void) {
  keep_some();
  static const size_t aligns[] = {(size_t)1 << 20, GIB, (size_t)16 << 30};
  static const size_t sizes[] = {1, 16, 5000, 300000};
  for (int a = 0; a < 3; a++)
    for (int how = 0; how < 3; how++)
      for (int s = 0; s < 4; s++) {
        int r = aligned_one(how, aligns[a], sizes[s]);
        if (r) {
          fprintf(stderr, "align %zu how %d size %zu: step %d\n", aligns[a], how, sizes[s], r);
          _exit(100 + r);
        }
        void *p = aligned_alloc(aligns[a], sizes[s]);   /* freed at once */
        free(p);
      }
  _exit(kept_intact() ? 96 : 0);
}

struct stop {
  const char *name;
  void (*run)(void);
  const char *message;   /* the line's text before ": pointer " (or the whole line, no pointer) */
  const char *where;     /* after the pointer; NULL: the line names no pointer */
  const char *alt;       /* another line the case may end with (re-entry: the handler's free) */
  int goes_on;           /* the program may finish: exit 0 then, its blocks intact */
};

static const struct stop stops[] = {
  {"far-free", far_free, "free of a pointer not allocated by flatmalloc", "(large area)", NULL, 0},
  {"far-realloc", far_realloc, "realloc of a pointer not allocated by flatmalloc", "(large area)", NULL, 0},
  {"far-usable", far_usable, "malloc_usable_size of a pointer not allocated by flatmalloc", "(large area)", NULL, 0},
  {"far-free-large", far_free_large, "free of a pointer not allocated by flatmalloc", "(large area)", NULL, 0},
  {"far-arena", far_arena, "flatmalloc_arena_reset of a handle that is not a live arena", "(arena)", NULL, 0},
  {"reentry", reentry, "malloc called while its thread is inside flatmalloc (from a signal handler?)", NULL,
   "free called while its thread is inside flatmalloc (from a signal handler?)", 1},
  {"aligned", aligned, NULL, NULL, NULL, 2},
};

static int stop_body(const void *a) {
  ((const struct stop *)a)->run();
  return 0;   /* the fault went unnoticed */
}

static int run(const struct stop *s) {
  char line[512], p[64];
  int st = child_run(stop_body, s, line, sizeof line, p, sizeof p);
  if (st == -1) return 1;
  if (s->goes_on && WIFEXITED(st) && WEXITSTATUS(st) == 0 && !line[0]) {
    printf("ok %s: went on, its blocks intact\n", s->name);
    return 0;
  }
  if (s->goes_on == 2) {
    fprintf(stderr, "FAIL %s: status %#x, stderr: %s\n", s->name, st, line);
    return 1;
  }
  if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT) {
    fprintf(stderr, "FAIL %s: child was not killed by SIGABRT (status %#x), stderr: %s\n", s->name, st, line);
    return 1;
  }
  char want[256], alt[256] = "";
  if (s->where) snprintf(want, sizeof want, "flatmalloc: %s: pointer %s %s\n", s->message, p, s->where);
  else snprintf(want, sizeof want, "flatmalloc: %s\n", s->message);
  if (s->alt) snprintf(alt, sizeof alt, "flatmalloc: %s\n", s->alt);
  if (strcmp(line, want) && (!s->alt || strcmp(line, alt))) {
    fprintf(stderr, "FAIL %s: stderr was\n  %s\nwanted the one line\n  %s\n", s->name, line, want);
    return 1;
  }
  printf("ok %s: %s", s->name, line);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "check") && strcmp(argv[1], "default"))) {
    fprintf(stderr, "usage: stops check|default\n");
    return 2;
  }
  if (!dlsym(RTLD_DEFAULT, "flatmalloc_version")) {
    fprintf(stderr, "FAIL: not running under flatmalloc\n");
    return 1;
  }
  const char *env = getenv("FLATMALLOC_CHECK");
  if ((strcmp(argv[1], "check") == 0) != (env && strcmp(env, "1") == 0)) {
    fprintf(stderr, "FAIL: mode %s but FLATMALLOC_CHECK=%s\n", argv[1], env ? env : "(unset)");
    return 1;
  }
  int failed = 0;
  for (size_t i = 0; i < sizeof stops / sizeof stops[0]; i++) failed += run(&stops[i]);
  printf("%d failed\n", failed);
  return failed != 0;
}
