/* flatmalloc: one pool, configured size classes, per-thread caches.
 *
 * The core allocator under flatmalloc_-prefixed names. libflatmalloc.so exports the C
 * allocation API (malloc, free, ...) as one-line forwards to these; programs that link the
 * core directly (tests, benchmarks) call them by these names beside libc's malloc. */
#ifndef FLATMALLOC_H
#define FLATMALLOC_H

#include <stddef.h>
#include <malloc.h>

#ifdef __cplusplus
extern "C" {
#endif

#define FLATMALLOC_VERSION "0.1.0"
#define FLATMALLOC_API __attribute__((visibility("default")))

FLATMALLOC_API void *flatmalloc_malloc(size_t size);
FLATMALLOC_API void flatmalloc_free(void *ptr);
FLATMALLOC_API void *flatmalloc_calloc(size_t count, size_t size);
FLATMALLOC_API void *flatmalloc_realloc(void *ptr, size_t size);
FLATMALLOC_API void *flatmalloc_reallocarray(void *ptr, size_t count, size_t size);
FLATMALLOC_API int flatmalloc_posix_memalign(void **memptr, size_t alignment, size_t size);
FLATMALLOC_API void *flatmalloc_aligned_alloc(size_t alignment, size_t size);
FLATMALLOC_API void *flatmalloc_memalign(size_t alignment, size_t size);
FLATMALLOC_API void *flatmalloc_valloc(size_t size);
FLATMALLOC_API void *flatmalloc_pvalloc(size_t size);
FLATMALLOC_API size_t flatmalloc_malloc_usable_size(void *ptr);
FLATMALLOC_API void flatmalloc_free_sized(void *ptr, size_t size);
FLATMALLOC_API void flatmalloc_free_aligned_sized(void *ptr, size_t alignment, size_t size);
FLATMALLOC_API int flatmalloc_malloc_trim(size_t pad);
FLATMALLOC_API void flatmalloc_malloc_stats(void);
FLATMALLOC_API struct mallinfo flatmalloc_mallinfo(void);
FLATMALLOC_API struct mallinfo2 flatmalloc_mallinfo2(void);
FLATMALLOC_API int flatmalloc_mallopt(int param, int value);

/* Human-readable statistics (the FLATMALLOC_STATS=1 report) on stderr. */
FLATMALLOC_API void flatmalloc_stats_print(void);
/* The same figures as one JSON object, written into buf (NUL-terminated when size > 0).
 * Returns the length the whole text needs, without the NUL, as snprintf does. Allocates
 * nothing, so it is safe from any context. */
FLATMALLOC_API size_t flatmalloc_stats_json(char *buf, size_t size);
/* Whole-heap validator: walks every shared store, thread cache and the large area and checks
 * that lists, counters and bitmaps agree. Returns 0 when consistent, or the number of faults
 * found. Call it while other threads are quiet. O(heap): meant for tests and debugging. */
FLATMALLOC_API int flatmalloc_heap_check(void);
FLATMALLOC_API const char *flatmalloc_version(void);
/* With FLATMALLOC_HEAP set: writes the heap profile (gperftools' format, for google-pprof) to
 * path, or to FILE.PID.N when path is NULL. Returns 0, or -1 with errno when the profiler is
 * off (ENOENT) or the file cannot be created. */
FLATMALLOC_API int flatmalloc_heap_dump(const char *path);

#ifdef __cplusplus
}
#endif
#endif
