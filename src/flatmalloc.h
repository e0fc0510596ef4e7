/* flatmalloc: one pool, configured size classes, per-thread caches.
 *
 * The core allocator under flatmalloc_-prefixed names. libflatmalloc.so exports the C
 * allocation API (malloc, free, ...) as one-line forwards to these; programs that link the
 * core directly (tests, benchmarks) call them by these names beside libc's malloc. */
#ifndef FLATMALLOC_H
#define FLATMALLOC_H

#include <stddef.h>
#include <stdint.h>
#include <malloc.h>

#ifdef __cplusplus
extern "C" {
#endif

#include "flatmalloc_version.h"   /* FLATMALLOC_VERSION, meson.build's project version */
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
/* glibc's report in glibc's XML shape (options must be 0: else EINVAL is returned, as glibc does). */
FLATMALLOC_API int flatmalloc_malloc_info(int options, FILE *fp);

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

/* ---- arenas --------------------------------------------------------------------------
 * Bump allocation from slabs of the pool, released all at once by flatmalloc_arena_reset,
 * which keeps the slabs for the next round (up to `keep` bytes of them) and costs the same
 * whatever the number of allocations. An arena is used by one thread at a time: in checking
 * mode (FLATMALLOC_CHECK=1) two threads in calls on one arena at once stop the program. Its
 * allocations are no blocks: free, realloc and malloc_usable_size of one stop the program.
 * Every call checks its handle: NULL, a pointer that no create returned, a destroyed arena's
 * handle (also when a new arena took its place) stop the program with one line naming the call
 * (destroy(NULL) excepted: it does nothing). docs/arenas.md has the whole contract. */
typedef struct flatmalloc_arena flatmalloc_arena;

/* A new arena; keep: bytes of slabs kept across resets (0: 4 MiB; the first slab, 64 KiB, is
 * always kept). NULL with errno ENOMEM when the pool has no room. */
FLATMALLOC_API flatmalloc_arena *flatmalloc_arena_create(size_t keep);
/* size bytes aligned to align (a power of two, at most 1 MiB); size 0 gives a distinct pointer.
 * NULL with errno ENOMEM when the pool is full, EINVAL for a bad alignment. */
FLATMALLOC_API void *flatmalloc_arena_alloc(flatmalloc_arena *arena, size_t size, size_t align);
/* count * size bytes, zeroed; NULL with ENOMEM also when the product overflows. */
FLATMALLOC_API void *flatmalloc_arena_calloc(flatmalloc_arena *arena, size_t count, size_t size, size_t align);
/* The start of an arena's record (the rest is private), which lives in flatmalloc's meta area,
 * below the heap, where no write into or past a block reaches it: the next free byte of its
 * current slab and the slab's end (0 when every allocation must take the library's call:
 * checking mode, Valgrind, the heap profiler), and the arena's live handle (0: none). A handle
 * is no address: it is the record's address with bit 63 set and a generation in its spare bits
 * (FLATMALLOC_ARENA_CURSOR_MASK clears them), so a handle retired by destroy never matches the
 * record's id again, and NULL or a pointer to memory (bit 63 clear) never does. */
struct flatmalloc_arena_cursor {
  uintptr_t bump, end, id;
};
#define FLATMALLOC_ARENA_CURSOR_MASK ((uintptr_t)0x0000ffffffffffc0)
/* The bump alone: NULL when the current slab has no room (or the alignment is bad). */
static inline void *flatmalloc_arena_bump(struct flatmalloc_arena_cursor *c, size_t size, size_t align) {
  uintptr_t p = (c->bump + align - 1) & ~(uintptr_t)(align - 1), e = p + size;
  if (__builtin_expect(e <= c->end && e > p && align - 1 < ((size_t)1 << 20) && !(align & (align - 1)), 1)) {
    c->bump = e;
    return (void *)p;
  }
  return NULL;
}
/* flatmalloc_arena_alloc with its common case inlined in the caller (the parser write-up's
 * allocator and the C++ header use it): a value with bit 63 set bumps the cursor of the record
 * it names, which no write into the heap reaches; anything else (NULL, a pointer to memory),
 * and every case the bump cannot serve, takes flatmalloc_arena_alloc, which checks the handle
 * and stops the program with one line when it is no live arena's. The generation is checked
 * there, not here: a destroyed arena's handle takes the call (its record's end is 0) unless a
 * new arena took the record, whose current slab it then bumps (use flatmalloc_arena_alloc where
 * a handle may outlive its arena). A value with bit 63 set that no create returned may fault. */
static inline void *flatmalloc_arena_alloc_inline(flatmalloc_arena *arena, size_t size, size_t align) {
  uintptr_t h = (uintptr_t)arena;
  if (__builtin_expect((intptr_t)h < 0, 1)) {
    struct flatmalloc_arena_cursor *c = (struct flatmalloc_arena_cursor *)(h & FLATMALLOC_ARENA_CURSOR_MASK);
    uintptr_t p = (c->bump + align - 1) & ~(uintptr_t)(align - 1), e = p + size;
    if (__builtin_expect(e <= c->end && e > p && align - 1 < ((size_t)1 << 20) && !(align & (align - 1)), 1)) {
      c->bump = e;
      return (void *)p;
    }
  }
  return flatmalloc_arena_alloc(arena, size, align);
}
/* Releases every allocation: the next allocation of the same size returns the arena's first
 * address again. */
FLATMALLOC_API void flatmalloc_arena_reset(flatmalloc_arena *arena);
/* Releases every allocation and the arena's memory; NULL does nothing. */
FLATMALLOC_API void flatmalloc_arena_destroy(flatmalloc_arena *arena);

struct flatmalloc_arena_stats {
  size_t used;        /* bytes handed out since the last reset, alignment padding included */
  size_t peak;        /* the most bytes handed out between two resets */
  size_t held;        /* bytes of pool the arena holds now: its slabs and own runs */
  size_t held_peak;
  size_t keep;        /* the cap on slab bytes kept across a reset */
  size_t slabs;       /* slabs held now (the first included) */
  size_t own_runs;    /* allocations above 256 KiB, each a run of its own until the reset */
  unsigned long long runs_taken, runs_given;   /* calls into the pool's heap since creation */
  unsigned long long resets;
};
FLATMALLOC_API void flatmalloc_arena_stats(const flatmalloc_arena *arena, struct flatmalloc_arena_stats *stats);

#ifdef __cplusplus
}
#endif
#endif
