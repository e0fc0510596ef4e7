/* flatmalloc core types. Read this first.
 *
 * POOL. At start-up the allocator reserves one contiguous region of address space (fm_pool.base,
 * fm_pool.size) and never asks the system for memory again. The pool is laid out as
 *
 *     [ meta | class 0 region | class 1 region | ... | class N-1 region | large area ]
 *              ^ small_base                                            ^ large.base
 *
 * Every region starts on a chunk boundary (chunk = 2^chunk_shift bytes, at least 64 KiB). The
 * meta area holds the chunk table (chunk -> class, so free() finds a block's class from its
 * address with one byte load), the size -> class table, and the thread cache slots.
 *
 * CLASS REGION. Each size class owns a fixed share of the pool (FLATMALLOC_CLASSES) and cuts it
 * into blocks of one size. Blocks are handed out from a bump frontier the first time, and after
 * that circulate through the class's shared store: a lock-free stack of batches. A batch is a
 * NULL-terminated singly-linked list of free blocks (word 0 of each block links to the next);
 * the first block's word 1 packs the next batch's index and the batch's block count. The store
 * head is a tagged index (40-bit block index, 24-bit ABA tag) so one compare-and-swap moves a
 * whole batch, and a fork at any instant leaves the child a consistent store.
 *
 * THREAD CACHE. Each thread owns a slot (struct fm_tcache) holding, per class, a free list and
 * its length, plus one spare batch. malloc pops and free pushes there with plain loads and
 * stores. Batches move between the cache and the store whole, in O(1) (struct fm_bin). A free from any thread goes to the freeing thread's own cache: a block freed by another
 * thread costs the same as a local one. A thread that exits hands its lists back to the stores.
 *
 * LARGE BLOCK. Requests above the largest class come from the large area: blocks with a
 * 16-byte boundary-tag header, managed by a two-level segregated fit (TLSF) index with bitmaps:
 * O(1) good fit, O(1) coalescing with both neighbours, and a bump "top" for untouched space.
 *
 * Memory therefore flows: pool -> class frontier -> thread cache <-> class store, or
 * pool -> large top -> large block <-> large free lists. Nothing flows back to the system except
 * the pages of free large blocks (madvise), as README.md describes. */
#ifndef FM_TYPES_H
#define FM_TYPES_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- one definition of the compiler vocabulary ------------------------------------------ */
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define noinline __attribute__((noinline))
#define always_inline inline __attribute__((always_inline))
#define cold __attribute__((cold))
#define hidden __attribute__((visibility("hidden")))
#define cacheline_aligned __attribute__((aligned(64)))

/* ---- may be modified --------------------------------------------------------------------- */
#define FM_CLASS_MAX 64              /* most size classes FLATMALLOC_CLASSES may declare */
#define FM_SMALL_MAX (1u << 20)      /* largest class size allowed */
#define FM_BATCH_BYTES (32u << 10)   /* a batch holds about this many bytes ... */
#define FM_BATCH_MIN 4u              /* ... but never fewer blocks than this */
#define FM_BATCH_MAX 64u             /* ... nor more than this */
#define FM_BORROW_STEPS 8u           /* a full class tries this many larger classes (two doublings) */
#define FM_BOOT_BYTES (256u << 10)   /* bootstrap buffer for calls made before the pool exists */
#define FM_RETAIN_DEFAULT (64ull << 20)

/* ---- do not modify ----------------------------------------------------------------------- */
#define FM_ALIGN 16u                 /* every block starts on this boundary */
#define FM_CHUNK_SHIFT_MIN 16u
#define FM_CHUNKS_MAX (1u << 16)     /* the chunk table has at most this many entries */
#define FM_IDX_BITS 40u              /* block index = (address - pool base) / 16 */
#define FM_IDX_MASK ((1ull << FM_IDX_BITS) - 1)
#define FM_POOL_MAX (1ull << (FM_IDX_BITS + 4))

_Static_assert(FM_CLASS_MAX <= 255, "class ids fit in the byte-wide chunk table");
_Static_assert(FM_BATCH_MAX < (1u << (64 - FM_IDX_BITS)) / 4, "a batch count fits beside an index");
_Static_assert((FM_ALIGN & (FM_ALIGN - 1)) == 0, "alignment is a power of two");

/* A thread's free blocks of one class: the list malloc pops and free pushes, and one spare
 * batch. When the list reaches a batch, free moves it whole to the spare place (the old spare
 * goes to the store); when the list runs dry, malloc takes the spare back. Both moves are O(1):
 * no list is ever walked. */
struct fm_bin {
  void *head;
  uint32_t count;
  uint32_t limit;    /* free() pushes while count < limit; 0 sends every free to the slow path */
  void *spare;
  uint32_t spare_count;
  uint32_t pad;
};

/* A thread cache slot. Slots live in the pool's meta area and are recycled through a lock-free
 * stack, so statistics can read every slot without the threads' help. */
struct fm_tcache {
  struct fm_bin bin[FM_CLASS_MAX];
  uint64_t next_free;    /* link on the stack of unused slots */
  uint32_t index;
  uint32_t live;
};

/* One size class: its region, batch size, shared store and counters. */
struct fm_class {
  uint32_t size;
  uint32_t batch;
  uintptr_t start, end;
  uintptr_t region_end;                          /* start of the next region */
  cacheline_aligned _Atomic uint64_t store;      /* tagged head of the batch stack */
  cacheline_aligned _Atomic uintptr_t frontier;  /* next never-used address in the region */
  _Atomic uintptr_t committed;                   /* end of the accessible part (strict overcommit) */
  cacheline_aligned _Atomic uint64_t stored;     /* blocks in the store */
  _Atomic uint64_t peak;                         /* most blocks outside the store at once */
  _Atomic uint64_t borrows;                      /* batches lent to a smaller full class */
  _Atomic uint64_t exhausted;                    /* requests this class could not serve */
};

/* Settings, read once from the environment (options.c). */
struct fm_options {
  size_t pool;              /* 0: physical memory, halved until the reservation succeeds */
  const char *pool_text;    /* FLATMALLOC_POOL as written, for messages */
  unsigned nclass;
  uint32_t class_size[FM_CLASS_MAX];
  uint32_t class_bp[FM_CLASS_MAX];   /* share of the small area, in hundredths of a percent */
  unsigned large_pct;
  size_t retain;
  bool prefault, stats, check;
};

/* Everything the fast paths read sits in the first cache line. */
struct fm_pool {
  uintptr_t small_base;
  size_t small_units;        /* small area size / 16; 0 sends every free to the slow path */
  size_t small_lim;          /* sizes below this take the fast path; 0 before start-up */
  const uint8_t *cls_of;     /* (size + 15) / 16 -> class */
  const uint8_t *chunk_cls;  /* (address - small_base) >> chunk_shift -> class */
  unsigned chunk_shift;
  uint64_t key;              /* random, mixed into checking mode's header magic */

  uintptr_t base;
  size_t size;
  size_t small_size;
  size_t small_max;          /* largest class size */
  unsigned nclass;
  bool valgrind;             /* running under a Valgrind tool: described mode */
  bool checked;              /* checking or described mode: every call takes the slow path */
  bool lazy_commit;          /* strict overcommit: regions become accessible as they are used */
  struct fm_tcache *slots;
  uint32_t slots_max;
  _Atomic uint32_t slots_used;
  _Atomic uint64_t slots_free;    /* tagged stack of unused slots */
  struct fm_options opt;
  struct fm_class cls[FM_CLASS_MAX];
};

hidden extern struct fm_pool fm_pool;
hidden extern __thread struct fm_tcache *fm_tc __attribute__((tls_model("initial-exec")));
hidden extern struct fm_tcache fm_tc_empty;

#endif
