/* Large blocks (types.h, LARGE BLOCK): a run of whole chunks each, starting on a chunk
 * boundary. The page map marks a large block's first chunk, so free() tells a block start from
 * an interior or stale pointer without reading the heap; size and state are in the run record.
 * Nothing sits beside the block, so an overflow from its neighbour can damage no link. */
#include <string.h>

#include "internal.h"
#include "os.h"

#define LARGE_HEAD (~0xffull)   /* page map of a large block's first chunk: class byte 0 */
/* Checking mode's inaccessible chunks (class byte 0, so no block of a class either): */
#define LARGE_HIDDEN (~0x1ffull)   /* a freed large block's, waiting in the quarantine */
#define LARGE_GUARD (~0x2ffull)    /* a live block's guard (malloc(0)'s bytes) */

static uint32_t chunk_of(const void *p) { return (uint32_t)(((uintptr_t)p - fm_pool.heap_base) >> FM_CHUNK_SHIFT); }
static void *chunk_ptr(uint32_t i) { return (void *)(fm_pool.heap_base + ((uintptr_t)i << FM_CHUNK_SHIFT)); }

static bool chunks_for(size_t size, uint32_t *len) {
  if (size > fm_pool.heap_size) return false;
  size_t n = (size + FM_CHUNK - 1) >> FM_CHUNK_SHIFT;
  *len = n ? (uint32_t)n : 1;
  return true;
}

static void *mark(int64_t i) {
  if (i < 0) return NULL;
  __atomic_store_n(&fm_pool.chunk[i].line.e, LARGE_HEAD, __ATOMIC_RELEASE);
  return chunk_ptr((uint32_t)i);
}

void *large_alloc(size_t size, size_t align) {
  uint32_t len;
  if (!chunks_for(size, &len) || align > fm_pool.heap_size) return NULL;
  if (align <= FM_CHUNK) return mark(span_alloc(len, FM_CLASS_MAX, true));
  if (align > ((size_t)1 << 31 << FM_CHUNK_SHIFT)) return NULL;
  return mark(span_alloc_aligned(len, align));
}

/* Clears chunks [i, j) of the block p of size bytes (only up to size). */
static void clear(uint8_t *p, size_t size, uint32_t i, uint32_t j) {
  size_t at = (size_t)i << FM_CHUNK_SHIFT, len = (size_t)(j - i) << FM_CHUNK_SHIFT;
  if (at < size) memset(p + at, 0, size - at < len ? size - at : len);
}

/* calloc of a large block. Chunks that may hold pages are cleared. The others never held pages
 * or gave them back, but a stray write past a neighbouring block may have touched them since:
 * giving their pages back again makes them read as zero, in one system call per stretch, at
 * the cost of a page-table walk where (as almost always) no page is there, and without
 * faulting a page in; but only whole huge pages: part of one that another run uses is
 * cleared instead (a madvise there would split it, 0.4 ms on this VM, and stress-ng's calloc
 * churn made 6,600 of them in 20,000 calls). A prefaulted pool keeps its pages: those are
 * cleared too. */
void *large_calloc(size_t size) {
  uint8_t *p = large_alloc(size, 0);
  if (!p) return NULL;
  uint32_t first = chunk_of(p), n = (uint32_t)((size + FM_CHUNK - 1) >> FM_CHUNK_SHIFT);
  for (uint32_t i = 0, j; i < n; i = j) {
    bool dirty = span_chunk_dirty(first + i);
    for (j = i + 1; j < n && span_chunk_dirty(first + j) == dirty;) j++;
    uint32_t lo = j, hi = j;
    if (!dirty && !fm_pool.opt.prefault) span_whole(first + i, first + j, &lo, &hi), lo -= first, hi -= first;
    if (lo < hi && !os_release(p + ((size_t)lo << FM_CHUNK_SHIFT), (size_t)(hi - lo) << FM_CHUNK_SHIFT)) lo = hi = j;
    clear(p, size, i, lo);
    clear(p, size, hi, j);
  }
  return p;
}

bool large_owns(const void *p) {
  uintptr_t off = (uintptr_t)p - fm_pool.heap_base;
  return pool_opened(p) && !(off & (FM_CHUNK - 1)) && fm_pool.chunk[off >> FM_CHUNK_SHIFT].line.e == LARGE_HEAD;
}

/* Always-on check of a pointer in the heap but not in a span, handed to call: returns when p
 * is a large block, else stops the program naming the call and what p is. A pointer into a
 * free run was handed out and freed (a large block, or a block of a span that went back to
 * the heap); one into a large block, not at its start, is interior; one above top was never
 * handed out. */
void large_verify(const void *p, enum fault_call call) {
  if (large_owns(p)) return;
  enum fault_kind kind = large_fault(p);
  if (kind != FAULT_ARENA && ((uintptr_t)p - fm_pool.heap_base) & (FM_ALIGN - 1)) kind = FAULT_MISALIGNED;
  fault_bad(call, kind, p, -1);
}

/* What p, in the heap but neither in a span nor a large block's start, is (see above; a
 * pointer into an arena's run is an arena allocation). */
enum fault_kind large_fault(const void *p) {
  if (!pool_opened(p)) return FAULT_FOREIGN;   /* above every run the heap handed out */
  int kind = span_kind_at(chunk_of(p));
  return kind == RUN_FREE ? FAULT_FREED : kind == RUN_LARGE ? FAULT_INTERIOR : kind == RUN_ARENA ? FAULT_ARENA : FAULT_FOREIGN;
}

void large_free(void *p) {
  uint32_t i = chunk_of(p);
  __atomic_store_n(&fm_pool.chunk[i].line.e, FM_NO_CLASS, __ATOMIC_RELAXED);
  span_free(i);
}

size_t large_usable(const void *p) { return (size_t)span_rec(chunk_of(p))->len << FM_CHUNK_SHIFT; }

/* Grows or shrinks p's block in place when its neighbour allows. */
bool large_resize(void *p, size_t size) {
  uint32_t len;
  return chunks_for(size, &len) && span_resize(chunk_of(p), len);
}

/* ---- checking mode's inaccessible chunks ------------------------------------------------- */
/* Chunks [from, from + n) of large block p made inaccessible (SHADE_HIDDEN, SHADE_GUARD) or
 * accessible again (SHADE_NONE), each chunk's line saying which; false, nothing changed, when
 * the kernel refuses. A shaded chunk's line names no class and no block start, so no lookup
 * reads the memory. */
bool large_shade(void *p, uint32_t from, uint32_t n, enum large_shade s) {
  uint32_t i = chunk_of(p) + from;
  void *at = chunk_ptr(i);
  if (s == SHADE_NONE) {
    if (!os_protect(at, (size_t)n << FM_CHUNK_SHIFT, true)) return false;
    for (uint32_t j = 0; j < n; j++) __atomic_store_n(&fm_pool.chunk[i + j].line.e, from + j ? FM_NO_CLASS : LARGE_HEAD, __ATOMIC_RELEASE);
    return true;
  }
  if (!os_protect(at, (size_t)n << FM_CHUNK_SHIFT, false)) return false;
  for (uint32_t j = 0; j < n; j++) __atomic_store_n(&fm_pool.chunk[i + j].line.e, s == SHADE_HIDDEN ? LARGE_HIDDEN : LARGE_GUARD, __ATOMIC_RELEASE);
  return true;
}

enum large_shade large_shade_at(const void *p) {
  if (!pool_opened(p)) return SHADE_NONE;
  uint64_t e = __atomic_load_n(&fm_pool.chunk[chunk_of(p)].line.e, __ATOMIC_ACQUIRE);
  return e == LARGE_HIDDEN ? SHADE_HIDDEN : e == LARGE_GUARD ? SHADE_GUARD : SHADE_NONE;
}

uint32_t large_chunks(const void *p) { return span_rec(chunk_of(p))->len; }
