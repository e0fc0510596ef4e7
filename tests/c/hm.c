/* hardened_malloc's 30 detection tests (GrapheneOS/hardened_malloc, test/), written anew as
 * flatmalloc's own: each case commits the same misuse in a forked child, and the parent checks
 * how the child ended in this mode: the exact one-line stop and SIGABRT, or (where this mode
 * does not detect the misuse) a normal exit with the program's other blocks intact. Never a
 * bare crash. Run as `hm check` under FLATMALLOC_CHECK=1 and `hm default` without it; each
 * prints its table, and fails below the mode's floor (checking mode: all 30; default: 16).
 * The C++ cases call the operators by their mangled names, as a compiler's new and delete do. */
#include <dlfcn.h>
#include <malloc.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>

#include "child.h"
#include <unistd.h>

static void *volatile sink;
static volatile char vsink;

/* Reports the pointer the line will name, on fd 3. */
static void *named(void *p) {
  char buf[32];
  int n = snprintf(buf, sizeof buf, "%p", p);
  if (write(3, buf, (size_t)n) != n) _exit(90);
  return p;
}

static void *op(const char *name) {
  void *f = dlsym(RTLD_DEFAULT, name);
  if (!f) _exit(92);
  return f;
}

/* Blocks the program holds through the misuse, each of its own byte. */
#define KEPT 32
static unsigned char *kept[KEPT];
static size_t kept_size(int i) { return (size_t)3000 + (size_t)i * 1111; }
static void keep_some(void) {
  for (int i = 0; i < KEPT; i++) {
    if (!(kept[i] = malloc(kept_size(i)))) _exit(91);
    memset(kept[i], i + 1, kept_size(i));
  }
}
static int kept_intact(void) {
  for (int i = 0; i < KEPT; i++)
    for (size_t j = 0; j < kept_size(i); j++)
      if (kept[i][j] != (unsigned char)(i + 1)) return 0;
  return 1;
}

#define LARGE (256 * 1024)

/* ---- the cases, in hardened_malloc's order of test_smc.py ------------------------------- */
static void delete_type_size_mismatch(void) {   /* new char, delete of a 32-byte struct */
  void *(*new_)(size_t) = op("_Znwm");
  void (*del)(void *, size_t) = op("_ZdlPvm");
  char *p = new_(1);
  del(named(p), 32);
}
static void invalid_aligned_sized_delete_small(void) {   /* alignas(64) of 64 bytes, deleted as 128 */
  void *(*new_)(size_t, size_t) = op("_ZnwmSt11align_val_t");
  void (*del)(void *, size_t, size_t) = op("_ZdlPvmSt11align_val_t");
  char *p = new_(64, 64);
  del(named(p), 128, 64);
}
static void invalid_aligned_sized_delete_large(void) {   /* alignas(8192) of 9000+ bytes, 10 short */
  void *(*new_)(size_t, size_t) = op("_ZnwmSt11align_val_t");
  void (*del)(void *, size_t, size_t) = op("_ZdlPvmSt11align_val_t");
  char *p = new_(16384, 8192);
  del(named(p), 16384 - 10, 8192);
}
static void double_free_large_delayed(void) {
  void *p = malloc(LARGE), *q = malloc(LARGE);
  free(p);
  free(q);
  free(named(p));
}
static void double_free_large(void) {
  void *p = malloc(LARGE);
  free(p);
  free(named(p));
}
static void double_free_small_delayed(void) {
  void *p = malloc(16), *q = malloc(16);
  free(p);
  free(q);
  free(named(p));
}
static void double_free_small(void) {
  void *p = malloc(16);
  free(p);
  free(named(p));
}
static void overflow_large_1_byte(void) {
  char *p = malloc(LARGE);
  p[malloc_usable_size(p)] = 0;
  free(named(p));
}
static void overflow_large_8_byte(void) {
  char *p = malloc(LARGE);
  p[malloc_usable_size(p) + 7] = 0;
  free(named(p));
}
static void overflow_small_1_byte(void) {
  char *p = malloc(8);
  p[malloc_usable_size(p)] = 1;
  free(named(p));
}
static void overflow_small_8_byte(void) {
  char *p = malloc(8);
  p[malloc_usable_size(p) + 7] ^= 1;
  free(named(p));
}
static void invalid_free_protected(void) {
  free(malloc(16));
  char *p = mmap(NULL, 16 * 4096, PROT_NONE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (p == MAP_FAILED) _exit(93);
  free(named(p + 8 * 4096));
}
static void invalid_free_small_region_far(void) {
  char *p = malloc(16);
  free(named(p + (1ul << 30)));
}
static void invalid_free_small_region(void) {
  char *p = malloc(16);
  free(named(p + 4 * 4096));
}
static void invalid_free_unprotected(void) {
  free(malloc(16));
  char *p = mmap(NULL, 16 * 4096, PROT_READ | PROT_WRITE, MAP_ANONYMOUS | MAP_PRIVATE, -1, 0);
  if (p == MAP_FAILED) _exit(93);
  free(named(p + 8 * 4096));
}
static void invalid_malloc_usable_size_small_quarantine(void) {
  void *p = malloc(16);
  free(p);
  sink = (void *)malloc_usable_size(named(p));
}
static void invalid_malloc_usable_size_small(void) {
  char *p = malloc(16);
  sink = (void *)malloc_usable_size(named(p + 4 * 4096));
}
static void read_after_free_large(void) {
  char *p = malloc(LARGE);
  memset(p, 'a', 16);
  free(p);
  named(p);
  for (size_t i = 0; i < LARGE; i++) vsink = p[i];
}
static void read_zero_size(void) {
  char *p = malloc(0);
  vsink = *(volatile char *)named(p);
}
static void unaligned_free_large(void) {
  char *p = malloc(LARGE);
  free(named(p + 1));
}
static void unaligned_free_small(void) {
  char *p = malloc(16);
  free(named(p + 1));
}
static void unaligned_malloc_usable_size_small(void) {
  char *p = malloc(16);
  sink = (void *)malloc_usable_size(named(p + 1));
}
static void uninitialized_free(void) { free(named((void *)1)); }
static void uninitialized_malloc_usable_size(void) { sink = (void *)malloc_usable_size(named((void *)1)); }
static void uninitialized_realloc(void) { sink = realloc(named((void *)1), 16); }
static void write_after_free_large_reuse(void) {
  char *p = malloc(LARGE);
  free(p);
  sink = malloc(LARGE);
  *(volatile char *)named(p + 64 * 1024 + 1) = 'a';
}
static void write_after_free_large(void) {
  char *p = malloc(LARGE);
  free(p);
  *(volatile char *)named(p + 64 * 1024 + 1) = 'a';
}
static void write_after_free_small_reuse(void) {
  char *p = malloc(128);
  free(p);
  sink = malloc(128);
  named(p);
  p[65] = 'a';
  for (int i = 0; i < 100000; i++) free(malloc(128));
}
static void write_after_free_small(void) {
  char *p = malloc(128);
  free(p);
  named(p);
  p[65] = 'a';
  for (int i = 0; i < 100000; i++) free(malloc(128));
}
static void write_zero_size(void) {
  char *p = malloc(0);
  *(volatile char *)named(p) = 5;
}

/* What a mode expects: the line's text before ": pointer ", and how its tail after the pointer
 * starts, or NULL: not detected here (the program goes on). Up to two lines, where the verdict
 * depends on what lies at the address (a block of a span never handed out, or inside one). */
struct expect {
  const char *what[2], *where[2];
};
#define ONE(w, at) {{w, NULL}, {at, NULL}}
#define NONE {{NULL, NULL}, {NULL, NULL}}
#define NOT_OURS "of a pointer not allocated by flatmalloc"

struct hm_case {
  const char *name;   /* hardened_malloc's test */
  void (*run)(void);
  struct expect check, dflt;
};

static const struct hm_case cases[] = {
  {"delete_type_size_mismatch", delete_type_size_mismatch, ONE("sized delete of a block of 1 bytes with size 32", "(class "), NONE},
  {"invalid_aligned_sized_delete_small", invalid_aligned_sized_delete_small,
   ONE("sized delete of a block of 64 bytes with size 128", "(class "), NONE},
  {"invalid_aligned_sized_delete_large", invalid_aligned_sized_delete_large,
   {{"sized delete of a block of 16384 bytes with size 16374", "sized delete of a block of 16384 bytes with size 16374"}, {"(class ", "(large area)"}},
   NONE},
  {"double_free_large_delayed", double_free_large_delayed, ONE("double free", "(large area)"), ONE("double free", "(large area)")},
  {"double_free_large", double_free_large, ONE("double free", "(large area)"), ONE("double free", "(large area)")},
  {"double_free_small_delayed", double_free_small_delayed, ONE("double free", "(class "), ONE("double free", "(class ")},
  {"double_free_small", double_free_small, ONE("double free", "(class "), ONE("double free", "(class ")},
  {"overflow_large_1_byte", overflow_large_1_byte, ONE("write past the end of a block", "(large area)"), NONE},
  {"overflow_large_8_byte", overflow_large_8_byte, ONE("write past the end of a block", "(large area)"), NONE},
  {"overflow_small_1_byte", overflow_small_1_byte, ONE("write past the end of a block", "(class "), NONE},
  {"overflow_small_8_byte", overflow_small_8_byte, ONE("write past the end of a block", "(class "), NONE},
  {"invalid_free_protected", invalid_free_protected, ONE("free " NOT_OURS, "(not in the pool)"), ONE("free " NOT_OURS, "(not in the pool)")},
  {"invalid_free_small_region_far", invalid_free_small_region_far, ONE("free " NOT_OURS, "(large area)"), ONE("free " NOT_OURS, "(large area)")},
  {"invalid_free_small_region", invalid_free_small_region, {{"free of an interior pointer", "double free"}, {"(class ", "(class "}},
   {{"free " NOT_OURS, "double free"}, {"(class ", "(class "}}},
  {"invalid_free_unprotected", invalid_free_unprotected, ONE("free " NOT_OURS, "(not in the pool)"), ONE("free " NOT_OURS, "(not in the pool)")},
  {"invalid_malloc_usable_size_small_quarantine", invalid_malloc_usable_size_small_quarantine,
   ONE("malloc_usable_size of a freed block", "(class "), ONE("malloc_usable_size of a freed block", "(class ")},
  {"invalid_malloc_usable_size_small", invalid_malloc_usable_size_small,
   {{"malloc_usable_size of an interior pointer", "malloc_usable_size of a freed block"}, {"(class ", "(class "}},
   {{"malloc_usable_size " NOT_OURS, "malloc_usable_size of a freed block"}, {"(class ", "(class "}}},
  {"read_after_free_large", read_after_free_large, ONE("read or write after free", "(large area)"), NONE},
  {"read_zero_size", read_zero_size, ONE("read or write of a malloc(0) block", "(large area)"), NONE},
  {"unaligned_free_large", unaligned_free_large, ONE("free of a misaligned pointer", "(large area)"), ONE("free of a misaligned pointer", "(large area)")},
  {"unaligned_free_small", unaligned_free_small, ONE("free of a misaligned pointer", "(class "), ONE("free of a misaligned pointer", "(class ")},
  {"unaligned_malloc_usable_size_small", unaligned_malloc_usable_size_small, ONE("malloc_usable_size of a misaligned pointer", "(class "),
   ONE("malloc_usable_size of a misaligned pointer", "(class ")},
  {"uninitialized_free", uninitialized_free, ONE("free " NOT_OURS, "(not in the pool)"), ONE("free " NOT_OURS, "(not in the pool)")},
  {"uninitialized_malloc_usable_size", uninitialized_malloc_usable_size, ONE("malloc_usable_size " NOT_OURS, "(not in the pool)"),
   ONE("malloc_usable_size " NOT_OURS, "(not in the pool)")},
  {"uninitialized_realloc", uninitialized_realloc, ONE("realloc " NOT_OURS, "(not in the pool)"), ONE("realloc " NOT_OURS, "(not in the pool)")},
  {"write_after_free_large_reuse", write_after_free_large_reuse, ONE("read or write after free", "(large area)"), NONE},
  {"write_after_free_large", write_after_free_large, ONE("read or write after free", "(large area)"), NONE},
  {"write_after_free_small_reuse", write_after_free_small_reuse, ONE("write after free", "(class "), NONE},
  {"write_after_free_small", write_after_free_small, ONE("write after free", "(class "), NONE},
  {"write_zero_size", write_zero_size, ONE("read or write of a malloc(0) block", "(large area)"), NONE},
};

static int hm_body(const void *a) {
  const struct hm_case *c = a;
  keep_some();
  c->run();
  return kept_intact() ? 0 : 95;
}

/* 1 detected as expected, 0 went on as expected (not detected), -1 anything else. */
static int run(const struct hm_case *c, const struct expect *e) {
  char line[512], p[64];
  int st = child_run(hm_body, c, line, sizeof line, p, sizeof p);
  if (st == -1) return -1;
  if (!e->what[0]) {
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0 && !line[0]) return 0;
    fprintf(stderr, "FAIL %s: should go on with its blocks intact: status %#x, stderr: %s\n", c->name, st, line);
    return -1;
  }
  if (!WIFSIGNALED(st) || WTERMSIG(st) != SIGABRT) {
    fprintf(stderr, "FAIL %s: not stopped by SIGABRT (status %#x), stderr: %s\n", c->name, st, line);
    return -1;
  }
  const char *nl = strchr(line, '\n');
  for (int i = 0; i < 2 && e->what[i]; i++) {
    char want[256];
    snprintf(want, sizeof want, "flatmalloc: %s: pointer %s %s", e->what[i], p, e->where[i]);
    if (!strncmp(line, want, strlen(want)) && nl && !nl[1] && (strncmp(e->where[i], "(class ", 7) || strstr(line, " bytes)\n"))) return 1;
  }
  fprintf(stderr, "FAIL %s: stderr was\n  %s\nwanted one line starting\n  flatmalloc: %s: pointer %s %s\n", c->name, line, e->what[0], p, e->where[0]);
  return -1;
}

int main(int argc, char **argv) {
  if (argc != 2 || (strcmp(argv[1], "check") && strcmp(argv[1], "default"))) {
    fprintf(stderr, "usage: hm check|default\n");
    return 2;
  }
  if (!dlsym(RTLD_DEFAULT, "flatmalloc_version")) {
    fprintf(stderr, "FAIL: not running under flatmalloc\n");
    return 1;
  }
  bool check = !strcmp(argv[1], "check");
  const char *env = getenv("FLATMALLOC_CHECK");
  if (check != (env && !strcmp(env, "1"))) {
    fprintf(stderr, "FAIL: mode %s but FLATMALLOC_CHECK=%s\n", argv[1], env ? env : "(unset)");
    return 1;
  }
  int n = (int)(sizeof cases / sizeof cases[0]), detected = 0, failed = 0;
  printf("%-44s %s\n", "hardened_malloc test", argv[1]);
  for (int i = 0; i < n; i++) {
    int r = run(&cases[i], check ? &cases[i].check : &cases[i].dflt);
    printf("%-44s %s\n", cases[i].name, r > 0 ? "detected" : r == 0 ? "not detected (went on, blocks intact)" : "FAILED");
    detected += r > 0;
    failed += r < 0;
  }
  int floor = check ? 30 : 16;
  printf("%d of %d detected (floor %d), %d failed\n", detected, n, floor, failed);
  return failed || detected < floor || n != 30;
}
