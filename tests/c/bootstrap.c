/* Start-up: calls made before the pool exists (here: before environ is set, as the dynamic
 * loader's can be) are served from the bootstrap buffer; those blocks work, can be freed,
 * measured and reallocated into the pool after it exists. Links the core directly: a
 * constructor that runs before the core's hides environ until main. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flatmalloc.h"

extern char **environ;
static char **saved_environ;

__attribute__((constructor(101))) static void hide_environ(void) {
  saved_environ = environ;
  environ = NULL;
}

#define CHECK(c, ...) do { if (!(c)) { fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
  fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); exit(1); } } while (0)

int main(void) {
  /* before the pool: bootstrap blocks */
  char *a = flatmalloc_malloc(100), *b = flatmalloc_calloc(10, 30), *c = NULL;
  CHECK(a && b, "bootstrap allocation failed");
  CHECK(flatmalloc_posix_memalign((void **)&c, 4096, 50) == 0 && ((uintptr_t)c & 4095) == 0, "bootstrap memalign");
  for (int i = 0; i < 300; i++) CHECK(b[i] == 0, "bootstrap calloc not zero at %d", i);
  memset(a, 'a', 100);
  memset(c, 'c', 50);
  CHECK(flatmalloc_malloc_usable_size(a) >= 100, "usable size of a bootstrap block");
  char json[64];
  flatmalloc_stats_json(json, sizeof json);
  CHECK(strcmp(json, "{}") == 0, "the pool exists before environ did: %s", json);

  /* the pool starts at the first call that sees environ */
  environ = saved_environ;
  char *p = flatmalloc_malloc(64);
  CHECK(p != NULL, "first pool allocation");
  flatmalloc_stats_json(json, sizeof json);
  CHECK(strncmp(json, "{\"pid\":", 7) == 0, "the pool did not start: %s", json);
  CHECK((uintptr_t)p - (uintptr_t)a > 1u << 20 || (uintptr_t)a - (uintptr_t)p > 1u << 20,
        "pool block next to the bootstrap block");

  /* bootstrap blocks live on: realloc copies them into the pool, free accepts them */
  char *a2 = flatmalloc_realloc(a, 5000);
  CHECK(a2 && a2 != a, "realloc of a bootstrap block");
  for (int i = 0; i < 100; i++) CHECK(a2[i] == 'a', "realloc lost byte %d of a bootstrap block", i);
  for (int i = 0; i < 50; i++) CHECK(c[i] == 'c', "bootstrap block damaged at %d", i);
  flatmalloc_free(b);
  flatmalloc_free(c);
  flatmalloc_free(a2);
  flatmalloc_free(p);
  CHECK(flatmalloc_heap_check() == 0, "heap check");
  puts("ok: bootstrap blocks before the pool, freed and reallocated after it");
  return 0;
}
