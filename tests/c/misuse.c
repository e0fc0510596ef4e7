/* Misuse: each case runs in a forked child that commits one fault; the parent checks that the
 * child died of SIGABRT after exactly one stderr line naming the fault, the pointer and the
 * class. Run as `misuse check` under FLATMALLOC_CHECK=1 and as `misuse default` without it. */
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "child.h"

static void *volatile sink;

/* Reports the pointer the fault will name, on fd 3, before committing it. */
static void *named(void *p) {
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%p", p);
  if (write(3, buf, (size_t)n) != n) _exit(90);
  return p;
}

static void fill(void *p, size_t n) { memset(p, 0x5a, n); }

/* ---- the faults -------------------------------------------------------------------------- */
static void double_free_small(void) {
  char *p = malloc(40);
  fill(p, 40);
  free(named(p));
  free(p);
}
static void double_free_large(void) {
  char *keep = malloc(300000), *p = malloc(300000), *after = malloc(300000);
  free(named(p));
  free(p);
  sink = keep;
  sink = after;
}
/* A few frees in between: two of the same class, and others of other sizes. */
static void double_free_between(void) {
  void *p = malloc(48), *a = malloc(48), *b = malloc(48), *x = malloc(100), *y = malloc(500), *z = malloc(3000);
  free(named(p));
  free(a);
  free(x);
  free(b);
  free(y);
  free(z);
  free(p);
}
static void free_stack(void) {
  char buf[64];
  sink = buf;
  free(named(buf + 16));
}
static void free_mmap(void) {
  void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  free(named(m));
}
static void free_interior_small(void) {
  char *p = malloc(100);
  free(named(p + 32));
}
static void free_interior_large(void) {
  char *p = malloc(200000);
  free(named(p + 4096));
}
static void free_misaligned(void) {
  char *p = malloc(64);
  free(named(p + 1));
}
static void overrun_1(void) {
  char *p = malloc(40);
  fill(p, 41);
  free(named(p));
}
static void overrun_8(void) {
  char *p = malloc(40);
  fill(p, 48);
  free(named(p));
}
static void overrun_large(void) {
  char *p = malloc(100000);
  fill(p, 100001);
  free(named(p));
}
static void overrun_realloc(void) {
  char *p = malloc(24);
  fill(p, 25);
  sink = realloc(named(p), 4000);
}
static void realloc_freed(void) {
  char *p = malloc(40), *q = malloc(40);
  free(p);
  sink = q;
  sink = realloc(named(p), 80);
}
/* Issue 18: the line names the call the program made (realloc, malloc_usable_size), and a
 * block whose span went back to the heap is a freed block, not an interior pointer. */
static void realloc_stack(void) {
  char buf[64];
  sink = buf;
  sink = realloc(named(buf + 16), 100);
}
static void realloc_interior(void) {
  char *p = malloc(100);
  sink = realloc(named(p + 32), 200);
}
static void realloc_freed_large(void) {
  char *keep = malloc(300000), *p = malloc(300000), *after = malloc(300000);
  free(p);
  sink = realloc(named(p), 400000);
  sink = keep;
  sink = after;
}
static void usable_stack(void) {
  char buf[64];
  sink = buf;
  sink = (void *)malloc_usable_size(named(buf + 16));
}
static void usable_interior(void) {
  char *p = malloc(100);
  sink = (void *)malloc_usable_size(named(p + 32));
}
static void usable_freed(void) {
  char *p = malloc(40), *q = malloc(40);
  free(p);
  sink = q;
  sink = (void *)malloc_usable_size(named(p));
}
static void usable_freed_large(void) {
  char *keep = malloc(300000), *p = malloc(300000), *after = malloc(300000);
  free(p);
  sink = (void *)malloc_usable_size(named(p));
  sink = keep;
  sink = after;
}
/* Blocks of n bytes (the class, in checking mode too, of 64 KiB or of 5 KiB, which starts
 * blocks inside chunks) freed, newest first, their spans back in the heap and their pages given
 * back (malloc_trim); then a block from the middle again, which went back to its span. */
static void span_gone(void (*release)(void *), size_t n) {
  void *v[256];
  for (int i = 0; i < 256; i++) fill(v[i] = malloc(n), n);
  for (int i = 255; i >= 0; i--) free(v[i]);
  malloc_trim(0);
  int i = 101;
  while (n < 8192 && i < 255 && !((uintptr_t)v[i] & 8191)) i++;   /* inside a chunk */
  release(named(v[i]));
}
static void call_free(void *p) { free(p); }
static void call_realloc(void *p) { sink = realloc(p, 10); }
static void call_usable(void *p) { sink = (void *)malloc_usable_size(p); }
static void free_span_gone(void) { span_gone(call_free, 60000); }
static void realloc_span_gone(void) { span_gone(call_realloc, 60000); }
static void free_span_gone_5k(void) { span_gone(call_free, 5000); }
static void usable_span_gone_5k(void) { span_gone(call_usable, 5000); }

struct fault {
  const char *name;
  void (*run)(void);
  const char *message;   /* what the line says before ": pointer " */
  const char *where;     /* what it says after the pointer */
  int modes;             /* 1: checking mode, 2: default mode */
};

static const struct fault faults[] = {
  {"double-free-small", double_free_small, "double free", "(class ", 3},
  {"double-free-large", double_free_large, "double free", "(large area)", 3},
  {"double-free-between", double_free_between, "double free", "(class ", 3},
  {"free-stack", free_stack, "free of a pointer not allocated by flatmalloc", "(not in the pool)", 3},
  {"free-mmap", free_mmap, "free of a pointer not allocated by flatmalloc", "(not in the pool)", 3},
  {"free-interior-small", free_interior_small, "free of an interior pointer", "(class ", 1},
  {"free-interior-large", free_interior_large, "free of an interior pointer", "(large area)", 1},
  {"free-misaligned", free_misaligned, "free of a misaligned pointer", "(class ", 3},
  {"overrun-1", overrun_1, "write past the end of a block", "(class ", 1},
  {"overrun-8", overrun_8, "write past the end of a block", "(class ", 1},
  {"overrun-large", overrun_large, "write past the end of a block", "(large area)", 1},
  {"overrun-realloc", overrun_realloc, "write past the end of a block", "(class ", 1},
  {"realloc-freed", realloc_freed, "realloc of a freed block", "(class ", 3},
  {"realloc-freed-large", realloc_freed_large, "realloc of a freed block", "(large area)", 3},
  {"realloc-stack", realloc_stack, "realloc of a pointer not allocated by flatmalloc", "(not in the pool)", 3},
  {"realloc-interior", realloc_interior, "realloc of an interior pointer", "(class ", 3},
  {"usable-stack", usable_stack, "malloc_usable_size of a pointer not allocated by flatmalloc", "(not in the pool)", 3},
  {"usable-interior", usable_interior, "malloc_usable_size of an interior pointer", "(class ", 3},
  {"usable-freed", usable_freed, "malloc_usable_size of a freed block", "(class ", 3},
  {"usable-freed-large", usable_freed_large, "malloc_usable_size of a freed block", "(large area)", 3},
  {"free-span-gone", free_span_gone, "double free", "(large area)", 3},
  {"realloc-span-gone", realloc_span_gone, "realloc of a freed block", "(large area)", 3},
  {"free-span-gone-5k", free_span_gone_5k, "double free", "(large area)", 3},
  {"usable-span-gone-5k", usable_span_gone_5k, "malloc_usable_size of a freed block", "(large area)", 3},
};

static int fault_body(const void *a) {
  ((const struct fault *)a)->run();
  return 0;   /* the fault went unnoticed */
}

/* Runs f in a child; returns 0 when the child died as the fault demands. */
static int expect_fault(const struct fault *f) {
  char line[512], p[64];
  int st = child_run(fault_body, f, line, sizeof line, p, sizeof p);
  if (st == -1) return 1;
  char want[256];
  snprintf(want, sizeof want, "flatmalloc: %s: pointer %s %s", f->message, p, f->where);
  const char *nl = strchr(line, '\n');
  if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT) {
    fprintf(stderr, "FAIL %s: child was not killed by SIGABRT (status %#x), stderr: %s\n", f->name, st, line);
    return 1;
  }
  if (strncmp(line, want, strlen(want)) != 0 || !nl || nl[1] != 0) {
    fprintf(stderr, "FAIL %s: stderr was\n  %s\nwanted one line starting\n  %s\n", f->name, line, want);
    return 1;
  }
  if (strncmp(f->where, "(class ", 7) == 0 && !strstr(line, " bytes)")) {
    fprintf(stderr, "FAIL %s: no class size in %s\n", f->name, line);
    return 1;
  }
  printf("ok %s: %s", f->name, line);
  return 0;
}

static int clean_body(const void *a) {
  (void)a;
  void *v[1000];
  for (int r = 0; r < 20; r++) {
    for (int i = 0; i < 1000; i++) fill(v[i] = malloc((size_t)(i * 37 % 70000) + 1), (size_t)(i * 37 % 70000) + 1);
    for (int i = 0; i < 1000; i += 2) v[i] = realloc(v[i], (size_t)i * 5 + 3);
    for (int i = 0; i < 1000; i++) free(v[i]);
  }
  return 0;
}

/* A correct program under the same mode exits 0 and says nothing. */
static int expect_clean(void) {
  char line[512], p[64];
  int st = child_run(clean_body, NULL, line, sizeof line, p, sizeof p);
  if (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0 || line[0]) {
    fprintf(stderr, "FAIL clean program: status %#x, stderr: %s\n", st, line);
    return 1;
  }
  printf("ok clean program: exit 0, no message\n");
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "check") && strcmp(argv[1], "default"))) {
    fprintf(stderr, "usage: misuse check|default\n");
    return 2;
  }
  if (!dlsym(RTLD_DEFAULT, "flatmalloc_version")) {
    fprintf(stderr, "FAIL: not running under flatmalloc\n");
    return 1;
  }
  const char *env = getenv("FLATMALLOC_CHECK");
  int mode = strcmp(argv[1], "check") == 0 ? 1 : 2;
  if ((mode == 1) != (env && strcmp(env, "1") == 0)) {
    fprintf(stderr, "FAIL: mode %s but FLATMALLOC_CHECK=%s\n", argv[1], env ? env : "(unset)");
    return 1;
  }
  int failed = expect_clean();
  for (size_t i = 0; i < sizeof faults / sizeof faults[0]; i++)
    if (faults[i].modes & mode) failed += expect_fault(&faults[i]);
  printf("%d failed\n", failed);
  return failed != 0;
}
