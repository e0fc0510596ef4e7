/* Size classes: the size -> class table, each class's region, and its shared store (a
 * lock-free stack of batches, see types.h). */
#include "internal.h"
#include "os.h"

/* ---- block index <-> address: 40-bit indexes let one 64-bit word hold index and tag ----- */
static uint64_t ptr_to_index(const void *p) { return ((uintptr_t)p - fm_pool.base) / FM_ALIGN; }
void *class_index_to_ptr(uint64_t idx) { return (void *)(fm_pool.base + idx * FM_ALIGN); }

/* Word 1 of a batch's first block: the next batch (index) and this batch's block count. */
static uint64_t *batch_word(void *blk) { return (uint64_t *)blk + 1; }

unsigned class_of(size_t size) { return fm_pool.cls_of[(size + FM_ALIGN - 1) / FM_ALIGN]; }

int class_at(const void *p) {
  uintptr_t off = (uintptr_t)p - fm_pool.small_base;
  return off < fm_pool.small_size ? fm_pool.chunk_cls[off >> fm_pool.chunk_shift] : -1;
}

size_t class_setup(const struct fm_options *o, uintptr_t start, size_t small_size, uint8_t *cls_of,
                   uint8_t *chunk_cls, unsigned chunk_shift) {
  size_t chunk = (size_t)1 << chunk_shift, units = 0;
  uintptr_t at = start;
  for (unsigned c = 0; c < o->nclass; c++) {
    struct fm_class *k = &fm_pool.cls[c];
    size_t region = (size_t)((unsigned __int128)small_size * o->class_bp[c] / 10000) & ~(chunk - 1);
    uint32_t size = o->class_size[c], batch = FM_BATCH_BYTES / size;
    if (batch < FM_BATCH_MIN) batch = FM_BATCH_MIN;
    if (batch > FM_BATCH_MAX) batch = FM_BATCH_MAX;
    if (region < chunk || region < 2ull * batch * size) return 0;
    k->size = size;
    k->batch = batch;
    k->start = at;
    k->end = at + region / size * size;
    k->region_end = at + region;
    atomic_store(&k->frontier, at);
    atomic_store(&k->committed, fm_pool.lazy_commit ? at : k->region_end);
    for (size_t i = 0; i < region >> chunk_shift; i++) chunk_cls[((at - start) >> chunk_shift) + i] = (uint8_t)c;
    for (; units * FM_ALIGN <= size; units++) cls_of[units] = (uint8_t)c;
    at += region;
  }
  return at - start;   /* what rounding left over goes to the large area */
}

/* Makes the region accessible up to at least `to` (strict overcommit only; a chunk at a time,
 * so a region costs one mprotect per chunk it grows by). */
static bool class_commit(struct fm_class *k, uintptr_t to) {
  uintptr_t c = atomic_load_explicit(&k->committed, memory_order_acquire);
  size_t chunk = (size_t)1 << fm_pool.chunk_shift;
  while (c < to) {
    uintptr_t want = (to + chunk - 1) & ~(uintptr_t)(chunk - 1);
    if (want > k->region_end) want = k->region_end;
    if (!os_commit((void *)c, want - c)) return false;   /* another thread may overlap: harmless */
    if (atomic_compare_exchange_weak(&k->committed, &c, want)) break;
  }
  return true;
}

/* Pops one batch from the store, or cuts one from the frontier. Returns its block count (0:
 * the class is exhausted) and its first block in *head; the list is NULL-terminated. */
unsigned class_take(unsigned c, void **head) {
  struct fm_class *k = &fm_pool.cls[c];
  uint64_t h = atomic_load_explicit(&k->store, memory_order_acquire);
  while (h & FM_IDX_MASK) {
    void *blk = class_index_to_ptr(h & FM_IDX_MASK);
    /* blk may be taken and reused by another thread meanwhile: the tag makes the CAS fail */
    uint64_t w = __atomic_load_n(batch_word(blk), __ATOMIC_RELAXED);
    uint64_t nh = (w & FM_IDX_MASK) | ((h & ~FM_IDX_MASK) + (1ull << FM_IDX_BITS));
    if (atomic_compare_exchange_weak_explicit(&k->store, &h, nh, memory_order_acquire, memory_order_acquire)) {
      unsigned n = (unsigned)(w >> FM_IDX_BITS);
      atomic_fetch_sub_explicit(&k->stored, n, memory_order_relaxed);
      *head = blk;
      return n;
    }
  }
  uintptr_t f = atomic_load_explicit(&k->frontier, memory_order_relaxed), nf;
  unsigned n;
  do {
    if (f >= k->end) return 0;
    n = (unsigned)((k->end - f) / k->size);
    if (n > k->batch) n = k->batch;
    nf = f + (uintptr_t)n * k->size;
    if (!class_commit(k, nf)) return 0;
  } while (!atomic_compare_exchange_weak_explicit(&k->frontier, &f, nf, memory_order_relaxed, memory_order_relaxed));
  char *b = (char *)f;
  for (unsigned i = 0; i + 1 < n; i++, b += k->size) *(void **)b = b + k->size;
  *(void **)b = NULL;
  *head = (void *)f;
  uint64_t held = class_carved(c) - atomic_load_explicit(&k->stored, memory_order_relaxed);
  uint64_t peak = atomic_load_explicit(&k->peak, memory_order_relaxed);
  while (held > peak && !atomic_compare_exchange_weak(&k->peak, &peak, held)) {}
  return n;
}

/* Pushes a NULL-terminated list of count blocks as one batch. */
void class_give(unsigned c, void *head, unsigned count) {
  struct fm_class *k = &fm_pool.cls[c];
  atomic_fetch_add_explicit(&k->stored, count, memory_order_relaxed);
  uint64_t h = atomic_load_explicit(&k->store, memory_order_relaxed);
  uint64_t idx = ptr_to_index(head);
  do {
    __atomic_store_n(batch_word(head), (h & FM_IDX_MASK) | ((uint64_t)count << FM_IDX_BITS), __ATOMIC_RELAXED);
  } while (!atomic_compare_exchange_weak_explicit(&k->store, &h, idx | ((h & ~FM_IDX_MASK) + (1ull << FM_IDX_BITS)),
                                                 memory_order_release, memory_order_relaxed));
}

uint64_t class_carved(unsigned c) {
  struct fm_class *k = &fm_pool.cls[c];
  return (atomic_load_explicit(&k->frontier, memory_order_relaxed) - k->start) / k->size;
}

/* Whole-store validator (threads quiet): every block on the store's batches lies in the
 * class's carved part on a block boundary, each batch holds as many blocks as it says, and the
 * total agrees with the counter. Walks are bounded by the counts, so a cycle is a fault, not a
 * hang. */
static bool block_ok(const struct fm_class *k, const void *p) {
  uintptr_t a = (uintptr_t)p;
  return a >= k->start && a < atomic_load_explicit(&k->frontier, memory_order_relaxed) && (a - k->start) % k->size == 0;
}

int class_check_list(unsigned c, void *head, uint64_t count) {
  const struct fm_class *k = &fm_pool.cls[c];
  void **p = head;
  for (uint64_t i = 0; i < count; i++, p = p[0])
    if (!p || !block_ok(k, p)) return 1;
  return p != NULL;
}

int class_check(unsigned c) {
  struct fm_class *k = &fm_pool.cls[c];
  uint64_t total = 0, carved = class_carved(c);
  int faults = 0;
  for (uint64_t h = atomic_load(&k->store) & FM_IDX_MASK; h && total <= carved;) {
    void *blk = class_index_to_ptr(h);
    uint64_t w = *batch_word(blk), n = w >> FM_IDX_BITS;
    if (!block_ok(k, blk) || class_check_list(c, blk, n)) return faults + 1;
    total += n;
    h = w & FM_IDX_MASK;
  }
  if (total != atomic_load(&k->stored)) faults++;
  return faults;
}
