/* libflatmalloc.so: the C allocation API, one forward per symbol. All semantics live in the
 * core (src/api.c); the export map (flatmalloc.map) lets nothing else out. malloc and free
 * forward to the core's inline fast paths (src/fast.h) rather than to flatmalloc_malloc and
 * flatmalloc_free: it saves a jump on every call (measured: 55 -> 53 instructions per pair). */
#include <malloc.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "fast.h"
#include "flatmalloc.h"

#define EXPORT __attribute__((visibility("default")))

EXPORT void *malloc(size_t n) { return fm_alloc(n); }
EXPORT void free(void *p) { fm_free(p); }
EXPORT void *calloc(size_t c, size_t n) { return flatmalloc_calloc(c, n); }
EXPORT void *realloc(void *p, size_t n) { return flatmalloc_realloc(p, n); }
EXPORT void *reallocarray(void *p, size_t c, size_t n) { return flatmalloc_reallocarray(p, c, n); }
EXPORT int posix_memalign(void **r, size_t a, size_t n) { return flatmalloc_posix_memalign(r, a, n); }
EXPORT void *aligned_alloc(size_t a, size_t n) { return flatmalloc_aligned_alloc(a, n); }
EXPORT void *memalign(size_t a, size_t n) { return flatmalloc_memalign(a, n); }
EXPORT void *valloc(size_t n) { return flatmalloc_valloc(n); }
EXPORT void *pvalloc(size_t n) { return flatmalloc_pvalloc(n); }
EXPORT size_t malloc_usable_size(void *p) { return flatmalloc_malloc_usable_size(p); }
EXPORT void free_sized(void *p, size_t n) { flatmalloc_free_sized(p, n); }
EXPORT void free_aligned_sized(void *p, size_t a, size_t n) { flatmalloc_free_aligned_sized(p, a, n); }
EXPORT int malloc_trim(size_t pad) { return flatmalloc_malloc_trim(pad); }
EXPORT void malloc_stats(void) { flatmalloc_malloc_stats(); }
EXPORT struct mallinfo mallinfo(void) { return flatmalloc_mallinfo(); }
EXPORT struct mallinfo2 mallinfo2(void) { return flatmalloc_mallinfo2(); }
EXPORT int mallopt(int param, int value) { return flatmalloc_mallopt(param, value); }
EXPORT int malloc_info(int options, FILE *fp) { return flatmalloc_malloc_info(options, fp); }

/* The names glibc-aware programs call directly. */
EXPORT void *__libc_malloc(size_t n) { return flatmalloc_malloc(n); }
EXPORT void __libc_free(void *p) { flatmalloc_free(p); }
EXPORT void *__libc_calloc(size_t c, size_t n) { return flatmalloc_calloc(c, n); }
EXPORT void *__libc_realloc(void *p, size_t n) { return flatmalloc_realloc(p, n); }
EXPORT void *__libc_memalign(size_t a, size_t n) { return flatmalloc_memalign(a, n); }
EXPORT void *__libc_valloc(size_t n) { return flatmalloc_valloc(n); }
EXPORT void *__libc_pvalloc(size_t n) { return flatmalloc_pvalloc(n); }
EXPORT struct mallinfo __libc_mallinfo(void) { return flatmalloc_mallinfo(); }
EXPORT int __libc_mallopt(int param, int value) { return flatmalloc_mallopt(param, value); }
EXPORT int __posix_memalign(void **r, size_t a, size_t n) { return flatmalloc_posix_memalign(r, a, n); }

/* mlockall locks what the heap uses, not the pool: the pool is closed where it is not open
 * first (src/pool.c), then the system's call is made, as glibc's is. */
EXPORT int mlockall(int flags) {
  pool_before_mlockall();
  return (int)syscall(SYS_mlockall, flags);
}
