/* A block of any size, and its validated release: classes below the largest class, large
 * blocks above. The floor the API and checking mode stand on. */
#include <errno.h>

#include "fmt.h"
#include "internal.h"

/* A block of at least size bytes: from its class, a larger class it borrows from when the pool
 * has no span for it, or a large block. NULL with errno ENOMEM. */
__thread bool block_inside __attribute__((tls_model("initial-exec")));

void block_reentered(const char *call) {
  block_inside = false;   /* a handler of the abort's signal may call in again */
  char what[96];
  struct fmt f = {what, sizeof what, 0};
  fmt_str(&f, call);
  fmt_str(&f, " called while its thread is inside flatmalloc (from a signal handler?)");
  fmt_end(&f);
  fault_say(what);
}

void *block_alloc(size_t size) {
  block_enter("malloc");
  void *p = size <= fm_pool.small_max ? tcache_alloc(class_of(size), true, NULL) : large_alloc(size, 0);
  block_leave();
  if (!p && size > fm_pool.small_max) errno = ENOMEM;
  return p;
}

/* Memory aligned to align (a power of two above 16). A class whose size is a multiple of align
 * hands out aligned blocks (spans start on chunk boundaries); the rest is large. */
void *block_alloc_aligned(size_t align, size_t size) {
  void *p = NULL;
  block_enter("malloc");
  if (size <= fm_pool.small_max && align <= FM_CHUNK)
    for (unsigned c = class_of(size); c < fm_pool.nclass && !p; c++)
      if (fm_pool.cls[c].size % align == 0) p = tcache_alloc(c, false, NULL);
  if (!p) p = large_alloc(size, align);
  block_leave();
  if (!p) errno = ENOMEM;
  return p;
}

static void release(void *p);

void block_free(void *p) {
  block_enter("free");
  release(p);
  block_leave();
}

/* A chunk the pool has not opened holds no block: its records are not read. */
static void release(void *p) {
  fm_st *st;
  bool open = pool_opened(p);
  int c = open ? class_find(p, &st) : -1;
  if (c >= 0 && st_live(st_load(st))) {   /* the common case; class_verify names any fault */
    tcache_free(p, (unsigned)c, st);
    return;
  }
  c = open ? class_at(p) : -1;
  if (c >= 0) {
    tcache_free(p, (unsigned)c, class_verify(p, (unsigned)c, CALL_FREE));
  } else if ((uintptr_t)p - fm_pool.heap_base < fm_pool.heap_size) {
    large_verify(p, CALL_FREE);
    large_free(p);
  } else if (!boot_owns(p)) {
    fault_bad(CALL_FREE, FAULT_FOREIGN, p, -1);
  }
}

/* The usable size of live block p, which the program handed to call; any other pointer stops
 * the program, as free would. */
size_t block_usable(const void *p, enum fault_call call) {
  int c = pool_opened(p) ? class_at(p) : -1;
  if (c >= 0) {
    class_verify(p, (unsigned)c, call);
    return fm_pool.cls[c].size;
  }
  if ((uintptr_t)p - fm_pool.heap_base < fm_pool.heap_size) {
    block_enter(call == CALL_REALLOC ? "realloc" : "malloc_usable_size");   /* large_fault may take the heap's lock */
    large_verify(p, call);
    block_leave();
    return large_usable(p);
  }
  if (boot_owns(p)) return boot_usable(p);
  fault_bad(call, FAULT_FOREIGN, p, -1);
}

/* A write access to the page of w that changes nothing: a compare-exchange of 0 with 0 writes
 * on x86 whether or not it succeeds. A read of a page never written would map the shared zero
 * page, and the program's first write would then fault again and, while its threads run on
 * other CPUs, interrupt each to flush their TLBs (rptest: 1,631 such flushes a run, mimalloc
 * 37); touched for writing first, the page faults in once, as the program's own write would. */
static void touch_for_write(const uint64_t *w) {
  uint64_t zero = 0;
  __atomic_compare_exchange_n((uint64_t *)w, &zero, 0, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
}

/* The pages of the words first..last (at most two, of 4 KiB or more) touched for writing. */
static void touch_words(const uint64_t *first, const uint64_t *last) {
  touch_for_write(first);
  if (((uintptr_t)first ^ (uintptr_t)last) >> 12) touch_for_write(last);
}

/* Whether a fresh block of n bytes at p (ZERO: never handed out, from pages never written)
 * still reads as zero: calloc checks it rather than trust it, since a stray write may have
 * reached it. A block up to a page is read whole; of a larger one the first and last 64
 * bytes, where a linear overflow or underflow from a neighbour must have written before it
 * reached further (reading them faults in at most the two pages the program is about to write
 * anyway, not the ones between). Each page read is touched for writing first. */
bool block_reads_zero(const void *p, size_t n) {
  const uint64_t *w = p;
  uint64_t any = 0;
  if (n <= 4096) {
    touch_words(w, (const uint64_t *)((uintptr_t)((const char *)p + n - 1) & ~(uintptr_t)7));
    for (size_t i = 0; i < n / 8; i++) any |= w[i];
  } else {
    const uint64_t *e = (const uint64_t *)((const char *)p + (n & ~(size_t)7) - 64);
    touch_words(w, w + 7);
    touch_words(e, e + 7);
    for (size_t i = 0; i < 8; i++) any |= w[i] | e[i];
  }
  for (size_t i = n & ~(size_t)7; i < n; i++) any |= ((const uint8_t *)p)[i];
  return !any;
}

/* ---- for native code --------------------------------------------------------------------- */
/* Under memcheck check.c runs the allocator natively inside Valgrind, where thread-local
 * storage (thread caches, errno) is Valgrind's and stopping would stop Valgrind: these use
 * the native calls' own cache, and neither set errno nor stop. */
void *block_alloc_direct(size_t size) {
  if (size <= fm_pool.small_max) return tcache_alloc_direct(class_of(size), true);
  return large_alloc(size, 0);
}

bool block_free_direct(void *p) {
  fm_st *st;
  if (!pool_opened(p)) return false;
  int c = class_find(p, &st);
  if (c >= 0) {
    if (!st_live(st_load(st))) return false;
    tcache_free_direct(p, (unsigned)c, st);
    return true;
  }
  if (!large_owns(p)) return false;
  large_free(p);
  return true;
}
