/* setuid_probe: run by setuid.sh as a set-user-ID-root copy, started by an unprivileged user
 * with libflatmalloc.so preloaded and FLATMALLOC_* settings in its environment.
 *   setuid_probe VAR...   prints, on stdout, one line per fact:
 *     ids ruid=R euid=E secure=S       real and effective user, getauxval(AT_SECURE)
 *     flatmalloc VERSION               flatmalloc_version() through dlsym (or "flatmalloc none")
 *     maps yes|no                      libflatmalloc is mapped (/proc/self/maps)
 *     env VAR=VALUE|unset              each VAR as the program sees it
 *     pool N                           the pool's reserved bytes (flatmalloc_stats_json)
 *     alloc ok                         blocks of every size were served, written and freed
 *     freed XX                         a byte of a block filled with 0x11 and freed (glibc's
 *                                      perturb byte N: N; flatmalloc writes nothing else there)
 *     usable1 N                        malloc_usable_size(malloc(1)) (1 in checking mode)
 * and writes nothing on stderr itself. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>
#include <unistd.h>

int main(int argc, char **argv) {
  printf("ids ruid=%d euid=%d secure=%lu\n", (int)getuid(), (int)geteuid(), getauxval(AT_SECURE));
  const char *(*version)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "flatmalloc_version");
  printf("flatmalloc %s\n", version ? version() : "none");
  FILE *m = fopen("/proc/self/maps", "r");
  char line[512];
  int mapped = 0;
  while (m && fgets(line, sizeof line, m)) mapped |= strstr(line, "libfm-setuid-test") != NULL;
  if (m) fclose(m);
  printf("maps %s\n", mapped ? "yes" : "no");
  for (int i = 1; i < argc; i++) {
    const char *v = getenv(argv[i]);
    printf("env %s%s%s\n", argv[i], v ? "=" : " ", v ? v : "unset");
  }
  size_t (*json)(char *, size_t) = (size_t (*)(char *, size_t))dlsym(RTLD_DEFAULT, "flatmalloc_stats_json");
  static char buf[1 << 16];
  const char *p = json && json(buf, sizeof buf) < sizeof buf ? strstr(buf, "\"pool\":{\"reserved\":") : NULL;
  printf("pool %llu\n", p ? strtoull(p + strlen("\"pool\":{\"reserved\":"), NULL, 10) : 0ull);
  void *v[200];
  for (int i = 0; i < 200; i++) {
    size_t n = (size_t)16 << (i % 16);
    if (!(v[i] = malloc(n))) return printf("alloc failed at %zu\n", n), 1;
    memset(v[i], i, n);
  }
  for (int i = 0; i < 200; i++) free(v[i]);
  printf("alloc ok\n");
  volatile unsigned char *freed = malloc(5000);
  if (!freed) return printf("alloc failed at 5000\n"), 1;
  memset((void *)freed, 0x11, 5000);
  free((void *)freed);
  printf("freed %02x\n", freed[100]);   /* a read after free, on purpose */
  printf("usable1 %zu\n", malloc_usable_size(malloc(1)));
  return 0;
}
