/* The C allocation API under flatmalloc_ names: glibc's semantics on every edge (errno,
 * overflow, zero sizes, alignment) live here once; the preload shim only forwards. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "fast.h"
#include "flatmalloc.h"
#include "os.h"
#include "vg.h"

/* ---- slow paths -------------------------------------------------------------------------- */
/* A block of at least size bytes: from its class, a larger class it borrows from, or the large
 * area. The large area is the next step after the largest class, so only the classes whose
 * borrowing reaches the largest one continue there; a full small class never eats into it. */
void *alloc_block(size_t size) {
  void *p = NULL;
  if (size <= fm_pool.small_max) {
    unsigned c = class_of(size);
    if ((p = tcache_alloc(c, true)) || c + FM_BORROW_STEPS < fm_pool.nclass - 1) return p;
  }
  if (!(p = large_alloc(size, 0))) errno = ENOMEM;
  return p;
}

void *fm_malloc_slow(size_t size) {
  if (unlikely(!pool_ready()) && !pool_init()) return boot_alloc(size, 0);
  if (fm_pool.checked) return check_malloc(size, 0);
  return alloc_block(size);
}

/* Is p one of the last three blocks this thread freed to class c (the same check as the fast
 * path's, for the counts it leaves to the slow path)? */
static bool small_double_free(void *p, unsigned c) {
  struct fm_bin *b = &fm_tc->bin[c];
  void **q = b->head;
  for (uint32_t i = 0; q && i < b->count && i < 3; i++, q = q[0])
    if (q == p) return true;
  return false;
}

static void small_verify(void *p, unsigned c) {
  struct fm_class *k = &fm_pool.cls[c];
  if ((uintptr_t)p & (FM_ALIGN - 1)) check_fault("free of a misaligned pointer", p, (int)c);
  if ((uintptr_t)p >= atomic_load_explicit(&k->frontier, memory_order_relaxed))
    check_fault("free of a pointer not allocated by flatmalloc", p, (int)c);
  if (small_double_free(p, c)) check_fault("double free", p, (int)c);
}

void fm_free_slow(void *p) {
  if (!p) return;
  if (fm_pool.checked) return check_free(p);
  int c = class_at(p);
  if (c >= 0) {
    small_verify(p, (unsigned)c);
    tcache_free(p, (unsigned)c);
  } else if (large_owns(p)) {
    large_free(p);
  } else if (!boot_owns(p)) {
    check_fault("free of a pointer not allocated by flatmalloc", p, -1);
  }
}

/* ---- entry points ------------------------------------------------------------------------ */
void *flatmalloc_malloc(size_t size) { return fm_alloc(size); }

void flatmalloc_free(void *p) { fm_free(p); }

void flatmalloc_free_sized(void *p, size_t size) {
  (void)size;
  fm_free(p);
}

void flatmalloc_free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment;
  (void)size;
  fm_free(p);
}

size_t flatmalloc_malloc_usable_size(void *p) {
  if (!p) return 0;
  if (fm_pool.checked) return check_usable(p);
  int c = class_at(p);
  if (c >= 0) return fm_pool.cls[c].size;
  if (large_owns(p)) return large_usable(p);
  if (boot_owns(p)) return boot_usable(p);
  check_fault("malloc_usable_size of a pointer not allocated by flatmalloc", p, -1);
}

void *flatmalloc_calloc(size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  if (fm_pool.checked) return check_calloc(n);
  if (n > fm_pool.small_max && pool_ready()) {
    void *p = large_calloc(n);
    if (!p) errno = ENOMEM;
    return p;
  }
  void *p = fm_alloc(n);
  if (p) memset(p, 0, n);
  return p;
}

/* Memory aligned to align (a power of two). Small classes whose size is a multiple of align
 * hand out aligned blocks (regions start on chunk boundaries); the rest is large. */
static void *alloc_aligned(size_t align, size_t size) {
  if (align <= FM_ALIGN) return fm_alloc(size);
  if (unlikely(!pool_ready()) && !pool_init()) return boot_alloc(size, align);
  if (fm_pool.checked) return check_malloc(size, align);
  if (size <= fm_pool.small_max && align <= ((size_t)1 << fm_pool.chunk_shift)) {
    for (unsigned c = class_of(size); c < fm_pool.nclass; c++)
      if (fm_pool.cls[c].size % align == 0) {
        void *p = tcache_alloc(c, false);
        if (p) return p;
      }
  }
  void *p = large_alloc(size, align);
  if (!p) errno = ENOMEM;
  return p;
}

static bool pow2(size_t v) { return v && !(v & (v - 1)); }

int flatmalloc_posix_memalign(void **memptr, size_t alignment, size_t size) {
  if (alignment % sizeof(void *) || !pow2(alignment)) return EINVAL;
  if (fm_pool.checked) return check_posix_memalign(memptr, alignment, size);
  int saved = errno;
  void *p = alloc_aligned(alignment, size);
  if (!p) {
    errno = saved;
    return ENOMEM;
  }
  *memptr = p;
  return 0;
}

/* glibc's memalign (and aligned_alloc before glibc 2.38): an alignment that is not a power of
 * two is rounded up to one; one above SIZE_MAX / 2 + 1 is EINVAL. */
void *flatmalloc_memalign(size_t alignment, size_t size) {
  if (alignment > SIZE_MAX / 2 + 1) {
    errno = EINVAL;
    return NULL;
  }
  if (!pow2(alignment)) alignment = alignment < 2 ? 1 : (size_t)1 << (64 - __builtin_clzll(alignment));
  return alloc_aligned(alignment, size);
}

void *flatmalloc_aligned_alloc(size_t alignment, size_t size) { return flatmalloc_memalign(alignment, size); }

void *flatmalloc_valloc(size_t size) { return alloc_aligned(os_page_size(), size); }

void *flatmalloc_pvalloc(size_t size) {
  size_t page = os_page_size();
  if (size > SIZE_MAX - page) {
    errno = ENOMEM;
    return NULL;
  }
  size = size ? (size + page - 1) & ~(page - 1) : page;
  return alloc_aligned(page, size);
}

void *flatmalloc_realloc(void *p, size_t size) {
  if (fm_pool.checked) return check_realloc(p, size);
  if (!p) return fm_alloc(size);
  if (size == 0) {
    fm_free(p);
    return NULL;
  }
  size_t old = flatmalloc_malloc_usable_size(p);
  if (class_at(p) >= 0) {
    /* keep the block when the new size fits and would not waste more than half of it */
    if (size <= old && (size > old / 2 || old <= 16)) return p;
  } else if (large_owns(p) && size > fm_pool.small_max / 2 && large_resize(p, size)) {
    return p;
  }
  void *q = fm_alloc(size);
  if (!q) return NULL;
  memcpy(q, p, old < size ? old : size);
  fm_free(p);
  return q;
}

void *flatmalloc_reallocarray(void *p, size_t count, size_t size) {
  size_t n;
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  return flatmalloc_realloc(p, n);
}

int flatmalloc_malloc_trim(size_t pad) {
  (void)pad;
  if (!pool_ready()) return 0;
  VALGRIND_DISABLE_ERROR_REPORTING;   /* it reads the headers of free (no-access) large blocks */
  int released = large_trim();
  VALGRIND_ENABLE_ERROR_REPORTING;
  return released;
}

void flatmalloc_malloc_stats(void) { flatmalloc_stats_print(); }

int flatmalloc_mallopt(int param, int value) {
  (void)param;
  (void)value;
  return 1;
}

int flatmalloc_heap_check(void) {
  if (!pool_ready()) return 0;
  VALGRIND_DISABLE_ERROR_REPORTING;   /* it reads free blocks and headers */
  int faults = large_check() + tcache_check();
  for (unsigned c = 0; c < fm_pool.nclass; c++) faults += class_check(c);
  VALGRIND_ENABLE_ERROR_REPORTING;
  return faults;
}

const char *flatmalloc_version(void) { return FLATMALLOC_VERSION; }
