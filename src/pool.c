/* Start-up: read the settings, reserve the pool, lay it out. Until that is done (the dynamic
 * loader, dlsym and our own set-up may call malloc first) requests come from a static
 * bootstrap buffer, whose blocks free() and realloc() recognise forever after. */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "fmt.h"
#include "internal.h"
#include "os.h"

#include "vg.h"

extern char **environ;

struct fm_pool fm_pool;

enum { POOL_NONE, POOL_STARTING, POOL_READY };
static _Atomic int pool_state;
static __thread bool pool_starting;   /* this thread is inside pool_init */

/* ---- bootstrap buffer ------------------------------------------------------------------- */
/* Each block is preceded by a 16-byte header holding its size; blocks are never reused. */
static _Alignas(4096) char boot[FM_BOOT_BYTES];
static _Atomic size_t boot_used;

void *boot_alloc(size_t size, size_t align) {
  if (align < FM_ALIGN) align = FM_ALIGN;
  if (size > FM_BOOT_BYTES || align > FM_BOOT_BYTES) goto full;
  size_t need = (size + FM_ALIGN - 1) & ~(size_t)(FM_ALIGN - 1);
  size_t old = atomic_load(&boot_used), at;
  do {
    at = ((uintptr_t)boot + old + FM_ALIGN + align - 1) / align * align - (uintptr_t)boot;
    if (at + need > FM_BOOT_BYTES) goto full;
  } while (!atomic_compare_exchange_weak(&boot_used, &old, at + need));
  ((size_t *)(boot + at))[-1] = need;
  return boot + at;
full:
  errno = ENOMEM;
  return NULL;
}

bool boot_owns(const void *p) { return (uintptr_t)p - (uintptr_t)boot < FM_BOOT_BYTES; }
size_t boot_usable(const void *p) { return ((const size_t *)p)[-1]; }

/* ---- layout ----------------------------------------------------------------------------- */
static size_t align_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }

static void pool_layout(void *mem, size_t size) {
  struct fm_pool *P = &fm_pool;
  struct fm_options *o = &P->opt;
  unsigned shift = FM_CHUNK_SHIFT_MIN;
  while ((size >> shift) > FM_CHUNKS_MAX) shift++;
  size_t chunk = (size_t)1 << shift;
  size_t max_size = o->class_size[o->nclass - 1];

  /* meta: chunk table, size -> class table, thread cache slots */
  size_t nchunks = size >> shift;
  size_t ntab = max_size / FM_ALIGN + 1;
  size_t slots = size / (64u << 10);
  if (slots < 64) slots = 64;
  if (slots > 32768) slots = 32768;
  size_t slot_off = align_up(nchunks + ntab, 64);
  size_t meta = align_up(slot_off + slots * sizeof(struct fm_tcache), chunk);

  uintptr_t base = (uintptr_t)mem;
  if (P->lazy_commit && !os_commit(mem, meta < size ? meta : size))
    options_fail("FLATMALLOC_POOL", o->pool_text ? o->pool_text : "(default)",
                 "the commit limit (vm.overcommit_memory=2) refused the pool's tables");
  size_t rest = meta < size ? (size & ~(chunk - 1)) - meta : 0;   /* meta is whole chunks */
  size_t large = (size_t)((unsigned __int128)rest * o->large_pct / 100) & ~(chunk - 1);
  size_t small = rest - large;

  P->base = base;
  P->size = size;
  P->chunk_shift = shift;
  P->slots = (struct fm_tcache *)(base + slot_off);
  P->slots_max = (uint32_t)slots;
  /* the chunk table covers the whole pool; the fast path indexes it from small_base */
  uint8_t *chunk_cls = (uint8_t *)base + meta / chunk;
  uint8_t *cls_of = (uint8_t *)base + nchunks;
  P->small_base = base + meta;
  small = class_setup(o, P->small_base, small, cls_of, chunk_cls, shift);
  if (!small) {
    char v[32];
    struct fmt f = {v, sizeof v, 0};
    fmt_u64(&f, size, 0);
    fmt_end(&f);
    options_fail("FLATMALLOC_POOL", o->pool_text ? o->pool_text : v, "pool too small for the classes (each class needs two batches)");
  }
  P->small_size = small;
  P->cls_of = cls_of;
  P->chunk_cls = chunk_cls;
  P->small_max = max_size;
  P->nclass = o->nclass;
  P->key = os_random();
  large_setup(P->small_base + small, base + (size & ~(chunk - 1)), o->retain);
}

/* Reserves size bytes starting on a 2 MiB boundary (so every chunk, and every class region, is
 * aligned to its own size: blocks of a 4096-byte class are page-aligned). The slack before the
 * boundary stays unused; it is never touched, so it costs nothing. */
#define POOL_ALIGN (2u << 20)
static void *pool_map(size_t size, bool prefault) {
  uintptr_t mem = (uintptr_t)(check_pool_heap() ? check_pool_map(size + POOL_ALIGN)
                                                : os_reserve(size + POOL_ALIGN, prefault, !fm_pool.lazy_commit));
  return mem ? (void *)((mem + POOL_ALIGN - 1) & ~(uintptr_t)(POOL_ALIGN - 1)) : NULL;
}

static void pool_reserve(void) {
  struct fm_options *o = &fm_pool.opt;
  fm_pool.lazy_commit = !o->prefault && os_overcommit_strict();
  void *mem = NULL;
  size_t size = o->pool;
  if (size) {
    mem = pool_map(size, o->prefault);
    if (!mem) {
      errno = ENOMEM;
      options_fail("FLATMALLOC_POOL", o->pool_text, "the system refused to reserve a pool of this size");
    }
  } else {
    uint64_t phys = os_physical_memory();
    if (fm_pool.valgrind && phys > check_pool_cap()) phys = check_pool_cap();   /* see check.c */
    size = phys > FM_POOL_MAX ? FM_POOL_MAX : (size_t)phys;
    for (; size >= (64u << 20); size /= 2)
      if ((mem = pool_map(size, o->prefault))) break;
    if (!mem) options_fail("FLATMALLOC_POOL", "(default)", "could not reserve even 64M of address space");
  }
  o->pool = size;
  pool_layout(mem, size);
}

static void pool_start(void) {
  struct fm_pool *P = &fm_pool;
  options_read(&P->opt);
  P->valgrind = check_setup();
  P->checked = P->opt.check || P->valgrind;
  pool_reserve();
  tcache_setup();
  stats_setup();
  /* Check mode and memcheck send every call through the slow paths: the fast paths stay as
   * they are, with no extra test. */
  check_pool_start();
  if (!P->checked) {
    P->small_units = P->small_size / FM_ALIGN;
    P->small_lim = P->small_max + 1;
  }
}

bool pool_ready(void) { return atomic_load_explicit(&pool_state, memory_order_acquire) == POOL_READY; }

bool pool_init(void) {
  int s = atomic_load_explicit(&pool_state, memory_order_acquire);
  if (s == POOL_READY) return true;
  if (pool_starting || !environ) return false;
  if (s == POOL_NONE && atomic_compare_exchange_strong(&pool_state, &s, POOL_STARTING)) {
    pool_starting = true;
    pool_start();
    pool_starting = false;
    atomic_store_explicit(&pool_state, POOL_READY, memory_order_release);
    /* In a forked child only the forking thread exists: other threads' cache slots and their
     * blocks are left as they were (never reused; copy-on-write makes that free), and the
     * class stores are consistent at any instant. Only the large area may need repair. */
    pthread_atfork(NULL, NULL, large_after_fork);   /* may allocate: the pool is ready now */
    return true;
  }
  while (atomic_load_explicit(&pool_state, memory_order_acquire) != POOL_READY) sched_yield();
  return true;
}

/* Initialise before main even if nothing allocates, so a bad setting stops the program there. */
__attribute__((constructor)) static void pool_constructor(void) { pool_init(); }
