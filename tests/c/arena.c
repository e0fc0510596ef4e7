/* Arenas (flatmalloc_arena_*): behaviour, counted in the arena's statistics, never timed. The
 * program links libflatmalloc.so, as a program that uses arenas does. Run as `arena` and, under
 * FLATMALLOC_CHECK=1, as `arena check` (checking mode's canary, fill and thread cases). */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "flatmalloc.h"
#include "fmtest.h"

static struct flatmalloc_arena_stats st(const flatmalloc_arena *a) {
  struct flatmalloc_arena_stats s;
  flatmalloc_arena_stats(a, &s);
  return s;
}

static void pattern(void *p, size_t n, unsigned tag) {
  for (size_t i = 0; i < n; i++) ((unsigned char *)p)[i] = (unsigned char)(tag * 31 + i);
}
static bool pattern_ok(const void *p, size_t n, unsigned tag) {
  for (size_t i = 0; i < n; i++)
    if (((const unsigned char *)p)[i] != (unsigned char)(tag * 31 + i)) return false;
  return true;
}

/* Contents survive until the reset; after it the same sizes come from the same addresses and
 * no run is taken. */
static void same_slabs(void) {
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  CHECK(a, "create: %s", strerror(errno));
  enum { N = 20000 };
  static void *first[N];
  size_t total = 0;
  for (int round = 0; round < 3; round++) {
    struct flatmalloc_arena_stats before = st(a);
    for (unsigned i = 0; i < N; i++) {
      size_t n = 1 + (i * 7919u) % 200;
      void *p = flatmalloc_arena_alloc(a, n, 16);
      CHECK(p && (uintptr_t)p % 16 == 0, "alloc %zu: %p", n, p);
      pattern(p, n, i);
      if (round == 0) first[i] = p, total += n;
      else CHECK(p == first[i], "round %d: allocation %u at %p, first round's at %p", round, i, p, first[i]);
    }
    for (unsigned i = 0; i < N; i++) CHECK(pattern_ok(first[i], 1 + (i * 7919u) % 200, i), "allocation %u damaged", i);
    struct flatmalloc_arena_stats s = st(a);
    CHECK(s.used >= total, "used %zu < %zu", s.used, total);
    if (round > 0) CHECK(s.runs_taken == before.runs_taken, "round %d took %llu runs", round, s.runs_taken - before.runs_taken);
    else CHECK(s.slabs > 1, "20,000 allocations fit one slab?");
    flatmalloc_arena_reset(a);
    CHECK(st(a).used == 0, "used after reset");
  }
  void *p = flatmalloc_arena_alloc(a, 40, 16);
  CHECK(p == first[0], "after reset the first allocation is not the arena's first address");
  flatmalloc_arena_destroy(a);
  printf("same slabs: ok\n");
}

static void alignments(void) {
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  for (size_t align = 1; align <= (64u << 10); align *= 2)
    for (int k = 0; k < 5; k++) {
      size_t n = 1 + (size_t)k * 100;
      char *p = flatmalloc_arena_alloc(a, n, align);
      CHECK(p && (uintptr_t)p % align == 0, "align %zu size %zu: %p", align, n, (void *)p);
      memset(p, 0x33, n);
    }
  char *p = flatmalloc_arena_alloc(a, 100, 1 << 20);
  CHECK(p && (uintptr_t)p % (1 << 20) == 0, "align 1 MiB: %p", (void *)p);
  errno = 0;
  CHECK(!flatmalloc_arena_alloc(a, 8, 0) && errno == EINVAL, "align 0 not EINVAL");
  errno = 0;
  CHECK(!flatmalloc_arena_alloc(a, 8, 24) && errno == EINVAL, "align 24 not EINVAL");
  errno = 0;
  CHECK(!flatmalloc_arena_alloc(a, 8, 2u << 20) && errno == EINVAL, "align 2 MiB not EINVAL");
  void *z1 = flatmalloc_arena_alloc(a, 0, 1), *z2 = flatmalloc_arena_alloc(a, 0, 1);
  CHECK(z1 && z2 && z1 != z2, "size 0: %p %p", z1, z2);
  errno = 0;
  CHECK(!flatmalloc_arena_alloc(a, SIZE_MAX - 8, 16) && errno == ENOMEM, "SIZE_MAX not ENOMEM");
  errno = 0;
  CHECK(!flatmalloc_arena_alloc(a, (size_t)1 << 52, 16) && errno == ENOMEM, "4 PiB not ENOMEM");
  errno = 0;
  CHECK(!flatmalloc_arena_calloc(a, SIZE_MAX / 2, 3, 8) && errno == ENOMEM, "calloc overflow not ENOMEM");
  unsigned char *c = flatmalloc_arena_calloc(a, 1000, 3, 8);
  for (int i = 0; i < 3000; i++) CHECK(c[i] == 0, "calloc byte %d", i);
  flatmalloc_arena_destroy(a);
  printf("alignments 1 B - 1 MiB, errors: ok\n");
}

/* Larger than a slab: a run of its own each, given back at the reset. */
static void big(void) {
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  size_t sizes[] = {300u << 10, 1u << 20, 5u << 20, 33u << 20};
  char *p[4];
  for (int i = 0; i < 4; i++) {
    p[i] = flatmalloc_arena_alloc(a, sizes[i], 64);
    CHECK(p[i], "big %zu: %s", sizes[i], strerror(errno));
    pattern(p[i], sizes[i], (unsigned)i);
  }
  char *small = flatmalloc_arena_alloc(a, 100, 16);
  pattern(small, 100, 9);
  for (int i = 0; i < 4; i++) CHECK(pattern_ok(p[i], sizes[i], (unsigned)i), "big %d damaged", i);
  CHECK(pattern_ok(small, 100, 9), "small damaged");
  struct flatmalloc_arena_stats s = st(a);
  CHECK(s.own_runs == 4 && s.held >= (39u << 20), "own runs %zu held %zu", s.own_runs, s.held);
  flatmalloc_arena_reset(a);
  s = st(a);
  CHECK(s.own_runs == 0 && s.held < (1u << 20), "after reset: own runs %zu held %zu", s.own_runs, s.held);
  flatmalloc_arena_destroy(a);
  printf("allocations larger than a slab: ok\n");
}

static size_t pool_in_use(void) {
  char buf[1 << 14];
  flatmalloc_stats_json(buf, sizeof buf);
  const char *k = strstr(buf, "\"in_use\":");
  CHECK(k, "no in_use in %s", buf);
  return strtoull(k + 9, NULL, 10);
}

/* What a reset keeps is bounded by the cap; the rest goes back to the pool. */
static void cap(void) {
  for (size_t keep = 256u << 10; keep <= (8u << 20); keep *= 4) {
    size_t base = pool_in_use();
    flatmalloc_arena *a = flatmalloc_arena_create(keep);
    for (int i = 0; i < 40000; i++) memset(flatmalloc_arena_alloc(a, 400, 8), 1, 400);   /* 16 MB */
    struct flatmalloc_arena_stats s = st(a);
    CHECK(s.held >= 16000000, "held %zu", s.held);
    CHECK(pool_in_use() - base >= 16000000, "the slabs are not in the pool's in_use");
    flatmalloc_arena_reset(a);
    s = st(a);
    CHECK(s.held <= keep && s.keep == keep, "keep %zu: holds %zu after reset", keep, s.held);
    CHECK(pool_in_use() - base <= keep, "keep %zu: pool in_use grew by %zu", keep, pool_in_use() - base);
    flatmalloc_arena_destroy(a);
    CHECK(pool_in_use() == base, "destroy left %zu bytes in use", pool_in_use() - base);
  }
  flatmalloc_arena *a = flatmalloc_arena_create(1);   /* the first slab stays whatever the cap */
  for (int i = 0; i < 10000; i++) flatmalloc_arena_alloc(a, 100, 8);
  flatmalloc_arena_reset(a);
  CHECK(st(a).slabs == 1 && st(a).held == (64u << 10), "keep 1: %zu slabs, %zu bytes", st(a).slabs, st(a).held);
  flatmalloc_arena_destroy(a);
  CHECK(st((a = flatmalloc_arena_create(0))).keep == (4u << 20), "default keep is not 4 MiB");
  flatmalloc_arena_destroy(a);
  printf("cap on kept memory: ok\n");
}

/* O(1): calls into the heap made by a reset and the round after it, for 10 and for 1,000,000
 * allocations (the arena's runs taken and given; checking mode walks the contents, so there
 * only the calls count). */
static void calls(void) {
  unsigned long long got[2];
  long counts[2] = {10, 1000000};
  for (int k = 0; k < 2; k++) {
    flatmalloc_arena *a = flatmalloc_arena_create(64u << 20);
    for (long i = 0; i < counts[k]; i++) flatmalloc_arena_alloc(a, 16, 16);
    struct flatmalloc_arena_stats s0 = st(a);
    flatmalloc_arena_reset(a);
    struct flatmalloc_arena_stats s1 = st(a);
    for (long i = 0; i < counts[k]; i++) flatmalloc_arena_alloc(a, 16, 16);
    flatmalloc_arena_reset(a);
    struct flatmalloc_arena_stats s2 = st(a);
    got[k] = (s2.runs_taken + s2.runs_given) - (s0.runs_taken + s0.runs_given);
    CHECK(s1.runs_given == s0.runs_given, "%ld allocations: the reset made %llu calls", counts[k], s1.runs_given - s0.runs_given);
    flatmalloc_arena_destroy(a);
  }
  CHECK(got[0] == got[1] && got[0] == 0, "heap calls over a reset and a round: 10 allocations %llu, 1,000,000 %llu", got[0], got[1]);
  printf("reset after 1,000,000 allocations: %llu heap calls, as after 10: ok\n", got[1]);
}

/* ---- faults: a child commits one, the parent checks the line and SIGABRT --------------------- */
static void expect_stop(const char *name, void (*fn)(void), const char *want) {
  int fd[2];
  CHECK(pipe(fd) == 0, "pipe");
  pid_t pid = fork();
  if (pid == 0) {
    dup2(fd[1], 2);
    fn();
    _exit(0);
  }
  close(fd[1]);
  char buf[1024];
  size_t n = 0;
  ssize_t r;
  while (n < sizeof buf - 1 && (r = read(fd[0], buf + n, sizeof buf - 1 - n)) > 0) n += (size_t)r;
  buf[n] = 0;
  close(fd[0]);
  int status;
  waitpid(pid, &status, 0);
  CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "%s: no SIGABRT (status %#x), stderr: %s", name, status, buf);
  bool arena_ptr = strstr(want, "arena allocation") != NULL;   /* the line says where the pointer lies */
  CHECK(strstr(buf, want) && (!arena_ptr || strstr(buf, "(arena)\n")) && strchr(buf, '\n') == buf + strlen(buf) - 1,
        "%s: stderr is not one line with '%s'%s: %s", name, want, arena_ptr ? " ending '(arena)'" : "", buf);
  printf("%s: %s", name, buf);
}

static void *volatile sink;
static void free_arena(void) {
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  flatmalloc_arena_alloc(a, 24, 8);
  free(flatmalloc_arena_alloc(a, 24, 8));
}
static void free_arena_odd(void) {
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  flatmalloc_arena_alloc(a, 3, 1);
  free(flatmalloc_arena_alloc(a, 5, 1));
}
static void free_arena_big(void) { free(flatmalloc_arena_alloc(flatmalloc_arena_create(0), 2u << 20, 16)); }
static void realloc_arena(void) { sink = realloc(flatmalloc_arena_alloc(flatmalloc_arena_create(0), 64, 16), 128); }
static void usable_arena(void) { sink = (void *)malloc_usable_size(flatmalloc_arena_alloc(flatmalloc_arena_create(0), 64, 16)); }
static void free_the_arena(void) { free(flatmalloc_arena_create(0)); }   /* a handle is no address */
static void reset_not_arena(void) {
  void *p = malloc(4096);
  flatmalloc_arena_reset((flatmalloc_arena *)p);
}

/* ---- handles: every call checks its handle; a bad one stops with one line naming the call, ---
 * before anything changes (a SIGABRT handler in the child checks the heap and the bytes in
 * use, and reports on a pipe) */
static int after_fd = -1;
static size_t in_use_before;
static void after_stop(int sig) {
  (void)sig;
  char line[96];
  int n = snprintf(line, sizeof line, "heap_check=%d in_use_delta=%lld\n", flatmalloc_heap_check(),
                   (long long)pool_in_use() - (long long)in_use_before);
  if (write(after_fd, line, (size_t)n) < 0) _exit(4);
  signal(SIGABRT, SIG_DFL);
}

/* A child runs fn, which must stop with one line naming `want` and change nothing in the heap. */
static void expect_clean_stop(const char *name, void (*fn)(void), const char *want) {
  int fd[2];
  CHECK(pipe(fd) == 0, "pipe");
  after_fd = fd[1];
  expect_stop(name, fn, want);
  close(fd[1]);
  char buf[256];
  ssize_t n = read(fd[0], buf, sizeof buf - 1);
  close(fd[0]);
  buf[n > 0 ? n : 0] = 0;
  CHECK(!strcmp(buf, "heap_check=0 in_use_delta=0\n"), "%s: after the stop the heap changed: %s", name, buf[0] ? buf : "(no report)\n");
}

enum { H_NULL, H_STACK, H_MALLOC, H_ZEROED, H_INTERIOR, H_NEXT_RECORD, H_DESTROYED, H_STALE, H_FORGED, H_KINDS };
static const char *const h_name[] = {"NULL", "a stack address", "a malloc'd block", "a zeroed buffer", "an interior pointer (handle + 8)",
                                     "the next record (handle + 192)", "a destroyed arena", "a stale handle whose record was reused",
                                     "a forged value with bit 63 set"};
enum { C_ALLOC, C_INLINE, C_CALLOC, C_RESET, C_DESTROY, C_STATS, C_CALLS };
static const char *const c_name[] = {"flatmalloc_arena_alloc", "flatmalloc_arena_alloc_inline", "flatmalloc_arena_calloc",
                                     "flatmalloc_arena_reset", "flatmalloc_arena_destroy", "flatmalloc_arena_stats"};
static int h_kind, c_kind;

static flatmalloc_arena *bad_handle(char *local) {
  flatmalloc_arena *a = flatmalloc_arena_create(0), *b;
  CHECK(a && flatmalloc_arena_alloc(a, 100, 16), "create");
  switch (h_kind) {
    case H_NULL: return NULL;
    case H_STACK: return (flatmalloc_arena *)(void *)local;
    case H_MALLOC: return memset(malloc(4096), 0x5a, 4096);
    case H_ZEROED: return calloc(1, 4096);
    case H_INTERIOR: return (flatmalloc_arena *)((char *)a + 8);
    case H_NEXT_RECORD: return (flatmalloc_arena *)((char *)a + 192);
    case H_DESTROYED: flatmalloc_arena_destroy(a); return a;
    case H_STALE:
      flatmalloc_arena_destroy(a);
      b = flatmalloc_arena_create(0);
      CHECK(b && b != a && ((uintptr_t)b & FLATMALLOC_ARENA_CURSOR_MASK) == ((uintptr_t)a & FLATMALLOC_ARENA_CURSOR_MASK),
            "the new arena %p did not take the destroyed one's record (%p): the case tests nothing", (void *)b, (void *)a);
      CHECK(flatmalloc_arena_alloc(b, 64, 16), "the new arena works");
      return a;
    default: return (flatmalloc_arena *)(((uintptr_t)1 << 63) | 0x10000);
  }
}

static void bad_call(void) {
  char local[256];   /* the stack address */
  memset(local, 0, sizeof local);
  flatmalloc_arena *h = bad_handle(local);
  struct flatmalloc_arena_stats s;
  in_use_before = pool_in_use();
  signal(SIGABRT, after_stop);
  switch (c_kind) {
    case C_ALLOC: sink = flatmalloc_arena_alloc(h, 64, 16); break;
    case C_INLINE: sink = flatmalloc_arena_alloc_inline(h, 64, 16); break;
    case C_CALLOC: sink = flatmalloc_arena_calloc(h, 4, 16, 16); break;
    case C_RESET: flatmalloc_arena_reset(h); break;
    case C_DESTROY: flatmalloc_arena_destroy(h); break;
    default: flatmalloc_arena_stats(h, &s); break;
  }
}

/* The inline bump checks no generation (the library's calls do): a stale handle whose record a
 * new arena took, or a handle's bits changed below the record's alignment, bump the arena that
 * holds the record, never memory outside its slabs. */
static void inline_unchecked(void) {
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  flatmalloc_arena_destroy(a);
  flatmalloc_arena *b = flatmalloc_arena_create(0);
  CHECK(((uintptr_t)b & FLATMALLOC_ARENA_CURSOR_MASK) == ((uintptr_t)a & FLATMALLOC_ARENA_CURSOR_MASK), "b did not take a's record");
  char *q = flatmalloc_arena_alloc(b, 64, 16), *p = flatmalloc_arena_alloc_inline(a, 64, 16);
  CHECK(p == q + 64, "the stale handle's inline bump returned %p, not b's next bytes %p", (void *)p, (void *)(q + 64));
  char *r = flatmalloc_arena_alloc_inline((flatmalloc_arena *)((char *)b + 8), 64, 16);
  CHECK(r == p + 64, "handle + 8: the inline bump returned %p, not b's next bytes %p", (void *)r, (void *)(p + 64));
  flatmalloc_arena_destroy(b);
  printf("inline bump of a stale handle whose record a new arena took, and of handle + 8: that arena's next bytes: ok\n");
}

static void handles(bool checking) {
  int n = 0;
  for (c_kind = 0; c_kind < C_CALLS; c_kind++)
    for (h_kind = 0; h_kind < H_KINDS; h_kind++) {
      /* destroy(NULL) does nothing, as free(NULL); the inline bump reads a value with bit 63 set */
      if ((c_kind == C_DESTROY && h_kind == H_NULL) || (c_kind == C_INLINE && h_kind == H_FORGED)) continue;
      if (c_kind == C_INLINE && (h_kind == H_STALE || h_kind == H_INTERIOR) && !checking) continue;   /* inline_unchecked() */
      const char *call = c_kind == C_INLINE ? c_name[C_ALLOC] : c_name[c_kind];
      char name[160], want[96];
      snprintf(name, sizeof name, "%s of %s", c_name[c_kind], h_name[h_kind]);
      snprintf(want, sizeof want, "%s of a handle that is not a live arena", call);
      expect_clean_stop(name, bad_call, want);
      n++;
    }
  size_t before = pool_in_use();
  flatmalloc_arena_destroy(NULL);
  CHECK(flatmalloc_heap_check() == 0 && pool_in_use() == before, "destroy(NULL) changed the heap");
  printf("handles: %d bad handle and call pairs each stop with the call's line, the heap unchanged; destroy(NULL) does nothing: ok\n", n);
}

/* ---- a damaged record: written in place through the handle (no write into the heap reaches it) */
static _Alignas(64) unsigned char target[1024];
static int damage_kind;
static void damaged_call(void) {
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  for (int i = 0; i < 100; i++) memset(flatmalloc_arena_alloc(a, 100, 16), 1, 100);
  struct flatmalloc_arena_cursor *c = (struct flatmalloc_arena_cursor *)((uintptr_t)a & FLATMALLOC_ARENA_CURSOR_MASK);
  c->bump = (uintptr_t)target;   /* the cursor aimed at a global, and its end past it */
  if (c->end) c->end = (uintptr_t)target + sizeof target;
  memset(target, 0x3c, sizeof target);
  signal(SIGABRT, SIG_DFL);
  switch (damage_kind) {
    case 0: sink = flatmalloc_arena_alloc(a, 1u << 20, 16); break;   /* past the bump: the checks */
    case 1: flatmalloc_arena_reset(a); break;
    case 2: flatmalloc_arena_destroy(a); break;
    default: { struct flatmalloc_arena_stats s; flatmalloc_arena_stats(a, &s); } break;
  }
  for (size_t i = 0; i < sizeof target; i++) CHECK(target[i] == 0x3c, "the call wrote into the target");
}
static void damaged_state(void) {
  static const char *const want[] = {"flatmalloc_arena_alloc: the arena's state is damaged", "flatmalloc_arena_reset: the arena's state is damaged",
                                     "flatmalloc_arena_destroy: the arena's state is damaged", "flatmalloc_arena_stats: the arena's state is damaged"};
  for (damage_kind = 0; damage_kind < 4; damage_kind++) expect_stop(want[damage_kind], damaged_call, want[damage_kind]);
  printf("a cursor moved outside the arena's slabs: every call stops before using it (a reset writes nothing): ok\n");
}

/* checking mode */
static void overrun(void) {
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  char *p = flatmalloc_arena_alloc(a, 40, 16);
  flatmalloc_arena_alloc(a, 40, 16);
  p[40] = 0;
  flatmalloc_arena_reset(a);
}
static void overrun_big(void) {
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  char *p = flatmalloc_arena_alloc(a, 3u << 20, 16);
  memset(p, 'x', (3u << 20) + 1);
  flatmalloc_arena_reset(a);
}
static flatmalloc_arena *shared;
static void *hammer(void *arg) {
  (void)arg;
  for (long i = 0; i < 200000000; i++) {
    flatmalloc_arena_alloc(shared, 32, 16);
    if (i % 512 == 0) flatmalloc_arena_reset(shared);
  }
  return NULL;
}
static void two_threads(void) {
  shared = flatmalloc_arena_create(0);
  pthread_t t;
  pthread_create(&t, NULL, hammer, NULL);
  hammer(NULL);
  pthread_join(t, NULL);
}

static void fill_after_reset(void) {
  flatmalloc_arena *a = flatmalloc_arena_create(0);
  unsigned char *p = flatmalloc_arena_alloc(a, 100, 16);
  memset(p, 0, 100);
  flatmalloc_arena_reset(a);
  for (int i = 0; i < 100; i++) CHECK(p[i] == 0xa5, "byte %d after reset: %#x", i, p[i]);
  flatmalloc_arena_destroy(a);
  printf("checking mode: a reset fills old contents with 0xa5: ok\n");
}

/* ---- the heap profiler (run as `arena heap` with FLATMALLOC_HEAP and a small sample) ------ */
static __attribute__((noinline)) void heap_site(flatmalloc_arena *a) {
  for (int i = 0; i < 8192; i++) memset(flatmalloc_arena_alloc(a, 1024, 16), 1, 1024);
  __asm__ volatile("");
}

/* live bytes and allocations counted for stacks that start in heap_site, in profile path */
static void heap_site_counts(const char *path, unsigned long long *live, unsigned long long *allocs) {
  FILE *f = fopen(path, "r");
  CHECK(f, "no profile %s", path);
  char line[8192];
  *live = *allocs = 0;
  while (fgets(line, sizeof line, f)) {
    unsigned long long ln, lb, an, ab;
    char *at = strchr(line, '@');
    if (!at || sscanf(line, "%llu: %llu [%llu: %llu]", &ln, &lb, &an, &ab) != 4 || !strncmp(line, "heap", 4)) continue;
    /* the stack's first frame (the library's own are dropped) is the call in heap_site */
    uintptr_t pc = (uintptr_t)strtoull(at + 1, NULL, 16);
    if (pc - (uintptr_t)heap_site < 256) *live += lb, *allocs += an;
  }
  fclose(f);
}

static void heap_profile(void) {
  flatmalloc_arena *a = flatmalloc_arena_create(16u << 20);
  heap_site(a);
  char path[64];
  snprintf(path, sizeof path, "/tmp/fm-arena-heap.%d", (int)getpid());
  CHECK(flatmalloc_heap_dump(path) == 0, "flatmalloc_heap_dump: %s", strerror(errno));
  unsigned long long live, allocs;
  heap_site_counts(path, &live, &allocs);
  CHECK(allocs > 100 && live >= allocs * 1024, "before reset: %llu sampled allocations, %llu live bytes at the site", allocs, live);
  flatmalloc_arena_reset(a);
  CHECK(flatmalloc_heap_dump(path) == 0, "flatmalloc_heap_dump: %s", strerror(errno));
  unsigned long long live2, allocs2;
  heap_site_counts(path, &live2, &allocs2);
  unlink(path);
  CHECK(live2 == 0 && allocs2 == allocs, "after reset: %llu live bytes, %llu allocations (before %llu)", live2, allocs2, allocs);
  flatmalloc_arena_destroy(a);
  printf("heap profiler: %llu sampled arena allocations at their call site, none live after the reset: ok\n", allocs);
}

int main(int argc, char **argv) {
  fmt_init("arena", argc, argv);
  if (argc > 1 && !strcmp(argv[1], "heap")) {
    heap_profile();
    return 0;
  }
  bool checking = argc > 1 && !strcmp(argv[1], "check");
  same_slabs();
  alignments();
  big();
  cap();
  calls();
  expect_stop("free of an arena pointer", free_arena, "free of an arena allocation");
  expect_stop("free of an unaligned arena pointer", free_arena_odd, "free of an arena allocation");
  expect_stop("free of an arena's own run", free_arena_big, "free of an arena allocation");
  expect_stop("realloc of an arena pointer", realloc_arena, "realloc of an arena allocation");
  expect_stop("malloc_usable_size of an arena pointer", usable_arena, "malloc_usable_size of an arena allocation");
  expect_stop("free of an arena's handle", free_the_arena, "free of a pointer not allocated by flatmalloc");
  expect_stop("reset of a malloc block", reset_not_arena, "flatmalloc_arena_reset of a handle that is not a live arena");
  handles(checking);
  if (!checking) inline_unchecked();
  damaged_state();
  if (checking) {
    expect_stop("overrun", overrun, "write past the end of an arena allocation");
    expect_stop("overrun of an own run", overrun_big, "write past the end of an arena allocation");
    expect_stop("two threads", two_threads, "arena used by two threads at once");
    fill_after_reset();
  }
  char buf[1 << 14];
  flatmalloc_arena *live = flatmalloc_arena_create(0);
  flatmalloc_stats_json(buf, sizeof buf);
  CHECK(strstr(buf, "\"arenas\":{\"live\":1,\"created\":"), "no arenas in the JSON: %s", buf);
  int fd[2];
  CHECK(pipe(fd) == 0, "pipe");
  int saved = dup(2);
  dup2(fd[1], 2);
  flatmalloc_stats_print();
  dup2(saved, 2);
  close(fd[1]);
  ssize_t n = read(fd[0], buf, sizeof buf - 1);
  buf[n > 0 ? n : 0] = 0;
  CHECK(strstr(buf, "]: arenas live=1 created="), "no arenas line in the report: %s", buf);
  flatmalloc_arena_destroy(live);
  printf("statistics: the arenas' totals in the report and the JSON: ok\n");
  printf("arena: all ok\n");
  return 0;
}
