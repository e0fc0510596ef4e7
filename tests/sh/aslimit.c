/* aslimit: the pool under RLIMIT_AS (rlimit.sh runs it preloaded).
 *   aslimit room      prints "pool=N" (the pool's reserved bytes, from flatmalloc_stats_json),
 *                     then shows the program kept room under the limit set before it started:
 *                     8 threads start, a quarter of the limit can be mapped, 36 MiB of blocks
 *                     (small and large) are allocated, written and freed.
 *   aslimit lower     lowers RLIMIT_AS after start-up to what the process uses now plus 32 MiB,
 *                     then allocates 204 MiB of blocks (the pool, reserved before, serves them)
 *                     and tries to map 64 MiB (the kernel must refuse: the limit binds other
 *                     mappings). Run it with a pool of 512M or more.
 *   aslimit threads   prints "pool=N", then starts 8 threads with the default attributes (so
 *                     the default stack size) that run at once (a barrier holds them all
 *                     alive), each allocating, writing and freeing blocks of 100 B, 4 KiB and
 *                     256 KiB.
 * Prints "ok ..." lines; exits non-zero with "FAIL ..." otherwise. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#define MiB ((size_t)1 << 20)

static unsigned long long pool_reserved(void) {
  size_t (*json)(char *, size_t) = (size_t (*)(char *, size_t))dlsym(RTLD_DEFAULT, "flatmalloc_stats_json");
  if (!json) {
    fprintf(stderr, "FAIL not running under flatmalloc (flatmalloc_stats_json not found)\n");
    exit(1);
  }
  static char buf[1 << 16];
  json(buf, sizeof buf);
  const char *p = strstr(buf, "\"pool\":{\"reserved\":");
  if (!p) {
    fprintf(stderr, "FAIL no pool in %s\n", buf);
    exit(1);
  }
  return strtoull(p + strlen("\"pool\":{\"reserved\":"), NULL, 10);
}

static void *idle(void *arg) { return arg; }

static pthread_barrier_t all_alive;

static void *busy(void *arg) {
  pthread_barrier_wait(&all_alive);
  static const size_t sizes[] = {100, 4096, 256 << 10};
  for (int i = 0; i < 3; i++) {
    char *p = malloc(sizes[i]);
    if (!p) return (void *)1;
    memset(p, i, sizes[i]);
    free(p);
  }
  return arg;
}

/* Address space the process maps now (VmSize), in bytes. */
static size_t vm_size(void) {
  FILE *f = fopen("/proc/self/status", "r");
  char line[256];
  size_t kb = 0;
  while (f && fgets(line, sizeof line, f))
    if (sscanf(line, "VmSize: %zu kB", &kb) == 1) break;
  if (f) fclose(f);
  return kb * 1024;
}

static int allocate(size_t total, size_t each) {
  size_t n = total / each;
  char **v = malloc(n * sizeof *v);
  if (!v) return 1;
  for (size_t i = 0; i < n; i++) {
    if (!(v[i] = malloc(each))) {
      fprintf(stderr, "FAIL malloc(%zu) #%zu of %zu returned NULL: %s\n", each, i, n, strerror(errno));
      return 1;
    }
    memset(v[i], (int)i, each);
  }
  for (size_t i = 0; i < n; i++) free(v[i]);
  free(v);
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 2) return 2;
  setvbuf(stdout, NULL, _IOLBF, 0);
  unsigned long long pool = pool_reserved();
  printf("pool=%llu\n", pool);
  struct rlimit r;
  getrlimit(RLIMIT_AS, &r);
  if (strcmp(argv[1], "room") == 0) {
    if (r.rlim_cur == RLIM_INFINITY) return printf("ok no limit\n"), 0;
    pthread_t t[8];
    for (int i = 0; i < 8; i++)
      if ((errno = pthread_create(&t[i], NULL, idle, NULL))) {
        fprintf(stderr, "FAIL pthread_create #%d under the limit: %s\n", i, strerror(errno));
        return 1;
      }
    for (int i = 0; i < 8; i++) pthread_join(t[i], NULL);
    size_t quarter = (size_t)r.rlim_cur / 4;
    void *m = mmap(NULL, quarter, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m == MAP_FAILED) {
      fprintf(stderr, "FAIL mmap of a quarter of the limit (%zu bytes): %s\n", quarter, strerror(errno));
      return 1;
    }
    munmap(m, quarter);
    if (allocate(2 * MiB, 4096) || allocate(2 * MiB, 100) || allocate(32 * MiB, MiB)) return 1;
    printf("ok 8 threads, an mmap of %zu bytes, 36 MiB of blocks under a limit of %llu\n", quarter,
           (unsigned long long)r.rlim_cur);
    return 0;
  }
  if (strcmp(argv[1], "threads") == 0) {
    enum { N = 8 };
    pthread_t t[N];
    pthread_barrier_init(&all_alive, NULL, N);
    for (int i = 0; i < N; i++)
      if ((errno = pthread_create(&t[i], NULL, busy, NULL))) {
        fprintf(stderr, "FAIL pthread_create #%d of %d under a limit of %llu: %s\n", i, N,
                (unsigned long long)r.rlim_cur, strerror(errno));
        return 1;
      }
    for (int i = 0; i < N; i++) {
      void *ret;
      pthread_join(t[i], &ret);
      if (ret) return fprintf(stderr, "FAIL thread #%d: malloc returned NULL\n", i), 1;
    }
    printf("ok %d threads with default stacks ran at once under a limit of %llu\n", N, (unsigned long long)r.rlim_cur);
    return 0;
  }
  if (strcmp(argv[1], "lower") == 0) {
    r.rlim_cur = vm_size() + 32 * MiB;
    if (setrlimit(RLIMIT_AS, &r) != 0) return perror("FAIL setrlimit"), 1;
    if (allocate(4 * MiB, 1000) || allocate(200 * MiB, 2 * MiB)) return 1;
    void *m = mmap(NULL, 64 * MiB, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (m != MAP_FAILED) {
      fprintf(stderr, "FAIL mmap of 64 MiB succeeded above the lowered limit\n");
      return 1;
    }
    printf("ok limit lowered to %llu after start-up: 204 MiB of blocks served from the pool, an mmap of 64 MiB refused (%s)\n",
           (unsigned long long)r.rlim_cur, strerror(errno));
    return 0;
  }
  return 2;
}
