/* The C allocation API under flatmalloc_ names: glibc's semantics on every edge (errno,
 * overflow, zero sizes, alignment) live here once; the preload shim only forwards. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "fast.h"
#include "flatmalloc.h"
#include "heap.h"
#include "os.h"
#include "vg.h"

/* glibc's perturb byte (slow.c fills what malloc and free reach; calloc's blocks are zeroed all
 * the same): 0 when off. While it is set every call takes the slow paths (pool_route). */
static int perturb_byte(void) { return __atomic_load_n(&fm_pool.opt.perturb, __ATOMIC_RELAXED); }

/* ---- entry points ------------------------------------------------------------------------ */
void *flatmalloc_malloc(size_t size) { return fm_alloc(size); }

void flatmalloc_free(void *p) { fm_free(p); }

/* In checking mode the size must be the one the block was asked with. */
void flatmalloc_free_sized(void *p, size_t size) { fm_free_as(p, size, FM_FREE_SIZED); }

void flatmalloc_free_aligned_sized(void *p, size_t alignment, size_t size) {
  (void)alignment;
  fm_free_as(p, size, FM_FREE_ALIGNED_SIZED);
}

size_t flatmalloc_malloc_usable_size(void *p) {
  if (!p) return 0;
  if (fm_pool.checked) return check_usable(p);
  return block_usable(p, CALL_USABLE);
}

void *flatmalloc_calloc(size_t count, size_t size) {
  size_t n;
  if (fm_pool.checked) return check_calloc(count, size);   /* memcheck reports fishy arguments */
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  if (heap_on && pool_ready()) return heap_calloc(n);
  if (n > fm_pool.small_max && pool_ready()) {
    block_enter("calloc");
    void *p = large_calloc(n);
    block_leave();
    if (!p) errno = ENOMEM;
    return p;
  }
  if (n >= fm_pool.small_lim && !(perturb_byte() && pool_ready())) {   /* before start-up */
    void *p = fm_alloc(n);
    return p ? memset(p, 0, n) : NULL;
  }
  /* as fm_alloc, reading the state first: a block never handed out whose pages were never
   * written should read as zero, and a memset would only fault its pages in; a stray write
   * may have reached it all the same, so it is checked, not trusted */
  unsigned c1 = fm_pool.cls_of[(n + FM_ALIGN - 1) / FM_ALIGN];
  struct fm_tcache *tc = fm_tc;
  bool zero;
  void *p;
  if (!fm_bin_empty(tc, c1)) {
    p = fm_pop(tc, c1, &zero);
  } else {
    block_enter("calloc");
    p = tcache_alloc(c1 - 1, true, &zero);
    block_leave();
  }
  if (!p) return NULL;
  return zero && block_reads_zero(p, n) ? p : memset(p, 0, n);
}

static always_inline void *alloc_aligned_on(size_t align, size_t size) {
  if (unlikely(!pool_ready()) && !pool_init()) return boot_alloc(size, align);
  if (fm_pool.checked) return check_memalign(size, align);
  return heap_on ? heap_alloc_aligned(align, size) : block_alloc_aligned(align, size);
}

static cold noinline void *alloc_aligned_perturbed(size_t align, size_t size) {
  void *p = alloc_aligned_on(align, size);
  int n = perturb_byte();
  if (p && n && !boot_owns(p)) memset(p, (n ^ 0xff) & 0xff, size);
  return p;
}

/* Memory aligned to align (a power of two). */
static void *alloc_aligned(size_t align, size_t size) {
  if (align <= FM_ALIGN) return fm_alloc(size);
  if (unlikely(perturb_byte())) return alloc_aligned_perturbed(align, size);
  return alloc_aligned_on(align, size);
}

static bool pow2(size_t v) { return v && !(v & (v - 1)); }

int flatmalloc_posix_memalign(void **memptr, size_t alignment, size_t size) {
  if (alignment % sizeof(void *) || !pow2(alignment)) return EINVAL;
  if (fm_pool.checked && likely(!perturb_byte())) return check_posix_memalign(memptr, alignment, size);
  void *p = alloc_aligned(alignment, size);
  if (!p) return ENOMEM;   /* errno is ENOMEM too, as glibc leaves it (its tests rely on it) */
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

/* Checking mode's realloc with the perturb byte set: the block always moves, so that malloc
 * and free (slow.c) fill the new block and the old one. */
static cold noinline void *realloc_perturbed(void *p, size_t size) {
  if (!p) return fm_alloc(size);
  if (size == 0) {
    fm_free(p);
    return NULL;
  }
  size_t old;
  struct check_block f;
  if (boot_owns(p)) {
    old = boot_usable(p);
  } else {
    if (!check_take(p, &f, KIND_MALLOC, true)) return NULL;   /* checking mode stops first */
    old = f.size;
  }
  void *q = fm_alloc(size);
  if (!q) return NULL;
  memcpy(q, p, old < size ? old : size);
  fm_free(p);
  return q;
}

void *flatmalloc_realloc(void *p, size_t size) {
  if (fm_pool.checked) return unlikely(perturb_byte()) ? realloc_perturbed(p, size) : check_realloc(p, size);
  if (!p) return fm_alloc(size);
  if (size == 0) {
    fm_free(p);
    return NULL;
  }
  if (fm_pool.checked) return check_realloc(p, size);
  fm_st *st;
  int c = pool_opened(p) ? class_find(p, &st) : -1;
  size_t old;
  if (likely(c >= 0 && st_live(st_load(st)))) {   /* a live block of a class, found as free() finds it */
    old = fm_pool.cls[c].size;
    /* keep the block when the new size fits and would not waste more than half of it */
    if (size <= old && (size > old / 2 || old <= 16)) return p;
  } else {
    old = block_usable(p, CALL_REALLOC);   /* a large or bootstrap block; any other pointer stops here */
    block_enter("realloc");
    bool resized = large_owns(p) && size > fm_pool.small_max / 2 && large_resize(p, size);
    block_leave();
    if (resized) {
      if (heap_on) heap_resized(p, size);
      int n = perturb_byte();
      if (unlikely(n) && size > old) memset((char *)p + old, (n ^ 0xff) & 0xff, size - old);   /* the new part */
      return p;
    }
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
  check_release_queued();   /* memcheck: frees still queued (check.c) */
  check_quarantine_empty(); /* checking mode: the blocks held back */
  block_enter("malloc_trim");
  bool full = span_trim_full();
  if (full) {
    tcache_trim();          /* this thread's blocks, those other threads freed for it too */
    class_trim();           /* the transfer caches and spare spans, so empty spans go back */
  }
  int r = span_trim(full);
  block_leave();
  return r;
}

void flatmalloc_malloc_stats(void) { flatmalloc_stats_print(); }

int flatmalloc_heap_check(void) {
  if (!pool_ready()) return 0;
  VALGRIND_DISABLE_ERROR_REPORTING;   /* it reads free blocks and headers */
  int faults = span_check() + tcache_check();
  for (unsigned c = 0; c < fm_pool.nclass; c++) faults += class_check(c);
  VALGRIND_ENABLE_ERROR_REPORTING;
  return faults;
}

const char *flatmalloc_version(void) { return FLATMALLOC_VERSION; }
