/* Described mode: under any Valgrind tool every call comes here (and to check_short.c's short
 * ways), and each block is described to the tool with client requests; the blocks are laid
 * out as checking mode's (check.c, which this file calls and which never calls back), and
 * with FLATMALLOC_CHECK=1 the same functions serve checking mode outside Valgrind, where each
 * request costs a few instructions and does nothing. The tool reports a fault itself, checking
 * mode stops with one line.
 *
 * Described mode, tool by tool:
 * - memcheck: the pool is one block of memcheck's own heap (check_pool_map), because memcheck's
 *   leak search scans every mapping of the program as a root except its own heap: blocks in an
 *   mmap'ed pool would keep each other reachable. In Valgrind's heap that block is split and
 *   the pool's part marked unallocated, and memcheck forgets the block (native_arena_split):
 *   memcheck describes an address no block holds as glibc's run does its heap's free memory,
 *   and its leak searches count the program's blocks alone. Freed blocks are held back (the
 *   quarantine) for memcheck's --freelist-vol bytes, as memcheck's own malloc holds them.
 * - drd: the pool and the pool's bookkeeping are untracked; a block is fresh, tracked memory
 *   from malloc to free (a block another thread freed is new memory, not a race). The
 *   bookkeeping runs in native calls (as under memcheck), which take no pthread lock and whose
 *   accesses drd does not see: the allocator orders no two threads, and every race the program
 *   has is reported.
 * - massif and the rest: malloc-like and free-like blocks.
 * - DHAT (3.19) ignores malloc-like blocks, and helgrind (3.19) describes an address only by
 *   the blocks of its own malloc: every call is handed to the allocator the tool put in libc's
 *   place, by tail calls, so the tool's stacks still start at the program's call.
 * Each request is issued from a function whose symbol is the API's name (malloc, free, ...),
 * reached from the exported function by tail calls, so the tool's stack starts at the
 * program's call and suppressions on fun:malloc match. */
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "os.h"

enum vg_tool vg_running;
static bool serial;                  /* described mode: core calls under lock() */
static uint8_t *heap_block;          /* memcheck: the heap block the pool lives in */
static bool native;                  /* memcheck, drd: the bookkeeping runs natively (see below) */
static _Atomic bool pool_gone;       /* memcheck: heap_block released at exit */

/* DHAT: the tool's own allocator, reached through libc's names (which the tool replaces). */
static struct {
  void *(*malloc)(size_t);
  void *(*calloc)(size_t, size_t);
  void *(*realloc)(void *, size_t);
  void *(*memalign)(size_t, size_t);
  void (*free)(void *);
  size_t (*usable)(void *);
  int (*posix_memalign)(void **, size_t, size_t);
  bool on;   /* memcheck: its own functions report fishy sizes and mismatched releases */
} tool_heap;
static bool forward;
/* memcheck with the default pool: when the pool has no room, memcheck's own heap serves the
 * malloc family (its blocks are then memcheck's, as in glibc's run: tool_owns). A pool the
 * program sized itself (FLATMALLOC_POOL) gives ENOMEM as outside Valgrind. */
static bool spill;
/* After the pool failed a request, this many more go to memcheck's heap before the pool is
 * tried again (frees may have made room): a full pool costs a few native calls per SPILL_RUN
 * requests, not per request. */
#define SPILL_RUN 64u
unsigned vg_spill_run;
static void spill_start(void) { __atomic_store_n(&vg_spill_run, SPILL_RUN, __ATOMIC_RELAXED); }
/* A request memcheck's heap may be handed: Valgrind's own allocator asserts (and stops the
 * program) on sizes near SSIZE_MAX and on huge alignments, where glibc returns NULL. */
static bool spill_fits(size_t size, size_t align) { return size <= ((size_t)1 << 46) && align <= ((size_t)1 << 20); }

/* A flag, not a pthread mutex: helgrind and drd see only pthread's locks, so this one orders
 * no two program threads for them (a mutex taken by every malloc and free would hide every
 * race the program has); under memcheck it is also a tenth of a mutex's instructions. Waits
 * with sched_yield, a system call, where Valgrind lets the holder run. */
static void lock(void) {
  if (!serial) return;
  while (atomic_flag_test_and_set_explicit(&quick.flag, memory_order_acquire)) sched_yield();
}
static void unlock(void) {
  if (!serial) return;
  atomic_flag_clear_explicit(&quick.flag, memory_order_release);
}

struct vg_quick quick = {.flag = ATOMIC_FLAG_INIT,
                             .malloc_req = {VG_USERREQ__MALLOCLIKE_BLOCK},
                             .free_req = {VG_USERREQ__FREELIKE_BLOCK},
                             .call_req = {VG_USERREQ__CLIENT_CALL2},
                             .queue_off = 1};

/* ---- allocation -------------------------------------------------------------------------- */
static void *native_block(size_t size, size_t align, enum check_kind kind, bool zero);

/* A block of size bytes aligned to align, with its header and canary, zeroed with zero; not
 * yet described. */
static void *block_new(size_t size, size_t align, enum check_kind kind, bool zero) {
  if (align < FM_ALIGN) align = FM_ALIGN;
  size_t total;
  if (__builtin_add_overflow(size, check_block_lead(align) + CANARY_MIN, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  if (pool_gone) {
    uint8_t *p = boot_alloc(size, align);
    return p && zero ? memset(p, 0, size) : p;
  }
  if (native) return native_block(size, align, kind, zero);
  lock();
  VALGRIND_DISABLE_ERROR_REPORTING;
  uint8_t *b = block_alloc(total);
  uint8_t *user = NULL;
  if (b) {
    user = check_head(b, size, align, kind);
    if (zero) memset(user, 0, size);
    /* Under memcheck a block's bytes are all no-access whenever it is handed out (the pool
     * starts so and a release leaves it so); only pages the strict-overcommit mode makes
     * accessible later need telling. */
    if (fm_pool.opt.check || fm_pool.lazy_commit) {
      uint8_t *end = check_block_end(b, class_at(b));
      check_canary_fill(user, size, end);
      VALGRIND_MAKE_MEM_NOACCESS(b, (size_t)(user - b));
      VALGRIND_MAKE_MEM_NOACCESS(user + size, (size_t)(end - user - size));
    }
    profile_alloc(size);
  }
  VALGRIND_ENABLE_ERROR_REPORTING;
  unlock();
  return user;
}

void *vg_new_block(size_t size, size_t align, enum check_kind kind) {
  if (forward) return align > FM_ALIGN ? tool_heap.memalign(align, size) : tool_heap.malloc(size);
  return block_new(size, align, kind, false);
}

/* ---- quarantine (memcheck) --------------------------------------------------------------- */
/* Freed blocks wait in a FIFO until --freelist-vol bytes (by requested size, as memcheck
 * counts) were freed after them, so memcheck still knows them as freed blocks when the program
 * touches them. The FIFO is a list of nodes, each a block of the pool (never described to a
 * tool) of HELD_PER_NODE entries: a block leaving it is found by reading the entries in order,
 * not by following links through held blocks, which are long out of the caches by then. */
#define HELD_NODE_BYTES 8192u
#define HELD_PER_NODE ((HELD_NODE_BYTES - 16) / 16)
struct held_node {
  struct held_node *next;
  uintptr_t unused;
  uintptr_t e[HELD_PER_NODE][2];   /* the block, its requested size */
};
static struct {
  struct held_node *first, *last;   /* entries out.. of first are the oldest, ..in of last the newest */
  unsigned out, in;
  size_t volume, max;
  _Atomic size_t bytes;   /* the held blocks' and the nodes' own sizes, which mallinfo counts as
                             free (one writer at a time: no read-modify-write) */
  bool on;
} held;

/* What the statistics count for the block: its class size, or a large block's bytes. */
static size_t block_bytes(uint8_t *b, int cls) {
  return cls >= 0 ? fm_pool.cls[cls].size : large_usable(b);
}

size_t check_held_bytes(void) { return atomic_load_explicit(&held.bytes, memory_order_relaxed); }

static void held_add(size_t n) {
  atomic_store_explicit(&held.bytes, atomic_load_explicit(&held.bytes, memory_order_relaxed) + n, memory_order_relaxed);
}

static void give_back(uint8_t *b) {
  if (pool_gone) return;
  if (!fm_pool.native) block_free(b);
  else (void)block_free_direct(b);   /* native code cannot report a damaged block: it stays out */
}

static struct held_node *node_new(void) {
  struct held_node *n = fm_pool.native ? block_alloc_direct(sizeof *n) : block_alloc(sizeof *n);
  if (!n) return NULL;
  n->next = NULL;
  held_add(block_bytes((uint8_t *)n, class_at(n)));
  return n;
}

static void node_free(struct held_node *n) {
  held_add(-block_bytes((uint8_t *)n, class_at(n)));
  give_back((uint8_t *)n);
}

/* Called with lock() held and memcheck looking away, or natively. */
static void hold(uint8_t *b, int cls, size_t size) {
  if (!held.on) return give_back(b);
  if (!held.last || held.in == HELD_PER_NODE) {
    struct held_node *n = node_new();
    if (!n) return give_back(b);   /* no room to note it: released at once */
    if (held.last) held.last->next = n;
    else held.first = n;
    held.last = n;
    held.in = 0;
  }
  held.last->e[held.in][0] = (uintptr_t)b;
  held.last->e[held.in++][1] = size;
  held.volume += size;
  held_add(block_bytes(b, cls));
  while (held.volume > held.max) {
    struct held_node *n = held.first;
    uint8_t *o = (uint8_t *)n->e[held.out][0];
    held.volume -= n->e[held.out++][1];
    held_add(-block_bytes(o, class_at(o)));
    give_back(o);
    if (n == held.last && held.out == held.in) {
      held.out = held.in = 0;   /* empty: the node stays */
    } else if (held.out == HELD_PER_NODE) {
      held.first = n->next;
      held.out = 0;
      node_free(n);
    }
  }
}

/* ---- deferred releases (memcheck, native) ----------------------------------------------- */
/* free tells memcheck at once (FREELIKE: from then on the block is no-access to the program and
 * memcheck reports a second free) but queues the pointer; one native call hands the queue to
 * the quarantine (validate, mark freed, hold) every QUEUE_LEN frees, and before malloc_trim,
 * mallinfo and an allocation that failed. A queued block is still LIVE to the allocator, so it
 * is reused no earlier than before. Only releases that cannot be mismatched are queued: free
 * and realloc(p, 0) while no new or new[] block is live (quick.queue_off), since a mismatch must be
 * reported with the stack of the bad call, and the kind is in the header, which only native
 * code reads cheaply. Appends take quick.flag; the queue changes only under it. */
/* The shortest way through malloc under memcheck (native calls, pool present, no profile):
 * every load and call costs there. */
static bool lean_malloc;
#define LEAN_MAX ((size_t)1 << 62)   /* no overflow adding the header and canary */

/* The block between vg_take_block and vg_give_block: the thread's own (checking mode alone
 * takes no lock). */
static _Thread_local struct check_block taken;
static void queue_push(void *p);
static uintptr_t native_free(uintptr_t tid, uintptr_t p, uintptr_t unused);
static uintptr_t native_call(uintptr_t (*fn)(uintptr_t, uintptr_t, uintptr_t), uintptr_t a, uintptr_t b);
static void cxx_gone(uintptr_t r);

/* Marks taken block f freed, holds it back and lets go of the lock (a native take did that). */
static void give_taken(struct check_block *f) {
  if (!f->native) {
    f->h->magic = check_magic(f->h, false);
    profile_free(f->size);
    hold(f->b, f->cls, f->size);
    VALGRIND_ENABLE_ERROR_REPORTING;
  }
  unlock();
}

/* A block allocated by one family and released through another: in checking mode a fault;
 * under memcheck (after the block was released) the caller hands p to the tool's release
 * function of that family, so that memcheck reports its own "Mismatched free() / delete /
 * delete []" error, counted and suppressible, with the allocation stack (memcheck knows the
 * block as a custom one, allocated by no family); under the other tools one line. */
static long take_mismatched(void *p, struct check_block *f, int release) {
  if (release < 0 || check_kind_fits(f->kind, (enum check_kind)release)) return (long)f->size;
  if (vg_running == VG_MEMCHECK && !fm_pool.opt.check) {
    give_taken(f);
    return TAKE_MISMATCH;
  }
  check_mismatch(p, f, (enum check_kind)release, false);
  return (long)f->size;
}

/* memcheck: a pointer outside the pool and the bootstrap buffer is a block of memcheck's own
 * heap (realloc of a new or new[] block moved it there: named_realloc) or no block at all;
 * memcheck's functions take it and report what they report in glibc's run. */
static bool tool_owns(const void *p) {
  return tool_heap.on && (uintptr_t)p - fm_pool.heap_base >= fm_pool.heap_size && !boot_owns(p);
}

/* Validates p for a release through the family of release (-1: any). Returns its size with
 * lock() held and memcheck looking away (native calls: the block is released already), for
 * vg_give_block (the caller describes the release between the two, so that no other
 * thread can reuse the block first); TAKE_BAD for a bad pointer the tool should report;
 * TAKE_NONE when there is nothing to do (bootstrap block, forwarded); TAKE_MISMATCH (see
 * take_mismatched). */
long vg_take_block(void *p, int release) {
  struct check_block *f = &taken;
  if (boot_owns(p)) return TAKE_NONE;
  if (tool_owns(p)) return TAKE_MISMATCH;   /* the caller hands p to memcheck's release */
  if (forward) {
    tool_heap.free(p);
    return TAKE_NONE;
  }
  lock();
  f->native = native && !pool_gone;
  f->queue = false;
  if (f->native) {
    if (release == KIND_MALLOC && !quick.queue_off) {   /* see "deferred releases" */
      f->queue = true;
      f->b = p;
      return 0;
    }
    uintptr_t r = native_call(native_free, (uintptr_t)p, 0);   /* validates and holds p */
    if ((r & 15) != V_OK) {
      unlock();
      return TAKE_BAD;
    }
    cxx_gone(r);
    f->cls = -1;
    f->size = r >> 8;
    f->kind = (enum check_kind)(r >> 4 & 3);
    profile_free(f->size);
    return take_mismatched(p, f, release);
  }
  VALGRIND_DISABLE_ERROR_REPORTING;
  enum check_verdict v = check_find(p, f);
  if (v == V_OK) return take_mismatched(p, f, release);
  VALGRIND_ENABLE_ERROR_REPORTING;
  unlock();
  check_fault(v, p, f->cls);
  return TAKE_BAD;
}

void vg_give_block(void) {
  struct check_block *f = &taken;
  if (f->queue) {
    void *p = f->b;
    unlock();
    return queue_push(p);
  }
  give_taken(f);
}

/* memcheck's release function of the family of release (see take_mismatched): libc's free,
 * or libstdc++'s delete or delete[], which memcheck replaced. */
vg_release_fn *vg_tool_release(int release) {
  if (release == KIND_MALLOC && tool_heap.free) return tool_heap.free;
  static const char *const name[] = {[KIND_MALLOC] = "free", [KIND_NEW] = "_ZdlPv", [KIND_NEW_ARRAY] = "_ZdaPv"};
  vg_release_fn *fn = (vg_release_fn *)dlsym(RTLD_NEXT, name[release]);
  return fn ? fn : (vg_release_fn *)dlsym(RTLD_NEXT, "free");
}

/* ---- native calls (memcheck, drd) ------------------------------------------------------- */
/* Under memcheck and drd the bookkeeping runs natively: VALGRIND_NON_SIMD_CALL runs a
 * function on the real CPU inside Valgrind, uninstrumented, and the tool does not see its
 * memory accesses (no look-away windows for headers and links). Such a function gets
 * Valgrind's thread id first and runs while no program thread runs; thread-local storage is
 * Valgrind's there (no thread's cache, no errno, no pthread call: the native calls share one
 * cache of their own, tcache_alloc_direct), a client request or a stop would be Valgrind's
 * too. So a native call validates and returns a code, and the program's side (the functions
 * named malloc, free, ...) issues the requests and reports. The classes' and the heap's locks
 * are skipped inside (fm_lock); a call made while a program thread holds or waits for one
 * (statistics, malloc_trim, validators) returns NATIVE_BUSY and is retried after a yield.
 * Free blocks' pages are not given back to the system inside (no system calls). */
#define NATIVE_ZERO 4u

static bool native_enter(void) {
  if (atomic_load_explicit(&fm_pool.lockers, memory_order_relaxed)) return false;
  fm_pool.native = true;
  return true;
}

static uintptr_t native_leave(uintptr_t r) {
  fm_pool.native = false;
  return r;
}

/* Release codes: the verdict (bits 0-3), the block's kind (4-5), NATIVE_IN_PLACE, its size
 * from bit 8. */
static uintptr_t native_code(enum check_verdict v, const struct check_block *f) {
  return v != V_OK ? v : (uintptr_t)f->kind << 4 | (uintptr_t)f->size << 8;
}

/* how: the alignment (16 or more), the kind in bits 0-1, NATIVE_ZERO. */
static uintptr_t native_new(uintptr_t tid, uintptr_t size, uintptr_t how) {
  (void)tid;
  if (!native_enter()) return NATIVE_BUSY;
  size_t align = how & ~(uintptr_t)15;
  if (size > LEAN_MAX) return native_leave(0);   /* the total below would overflow */
  uint8_t *b = block_alloc_direct(size + check_block_lead(align) + CANARY_MIN), *user = NULL;
  if (b) {
    user = check_head(b, size, align, (enum check_kind)(how & 3));
    if (how & NATIVE_ZERO) memset(user, 0, size);
  }
  return native_leave((uintptr_t)user);
}

/* ---- the stash (memcheck, native) ------------------------------------------------------- */
/* malloc of a small block takes it from a stash per class, which one native call fills with
 * up to STASH_LEN blocks, and notes the size it asked for beside the taken slot; a later native
 * call writes the taken blocks' headers. Every native call that reads a header (releases,
 * realloc, malloc_usable_size) writes the waiting ones first. So malloc costs one request,
 * MALLOCLIKE, as glibc's malloc under memcheck costs one call into memcheck. A stashed block is
 * LIVE to the allocator and its header still its last life's (freed, or none): a stray free of
 * it is not taken. The stash changes only under quick.flag, and the native calls that use it
 * are made with the flag held. Before mallinfo, malloc_trim and after a failed allocation the
 * stash goes back to the classes (check_release_queued). memcheck's leak search reads this
 * library's data as a root: the stash keeps its pointers inverted, and malloc clears the
 * request's copy, so that a leaked block never looks reachable from here. */
#define STASH_BYTES ((size_t)64 << 10)   /* most bytes one fill takes */
#define STASH_CLASS_MAX 8192u            /* largest class stashed: eight blocks a fill */

static uint64_t stash_filled;   /* classes whose stash has blocks or taken slots (native calls only) */
_Static_assert(FM_CLASS_MAX <= 64, "one bit a class in stash_filled");

static void pending_write(void) {
  for (uint64_t m = stash_filled; m; m &= m - 1) {
    unsigned c = (unsigned)__builtin_ctzll(m);
    for (unsigned i = quick.nstash[c]; i < quick.nfilled[c]; i++)
      check_head((uint8_t *)~quick.stash[c][i] - 2 * FM_ALIGN, quick.asked[c][i], FM_ALIGN, KIND_MALLOC);
    quick.nfilled[c] = quick.nstash[c];
    if (!quick.nstash[c]) stash_filled &= ~(1ull << c);
  }
}

static uintptr_t native_pending(uintptr_t tid, uintptr_t unused1, uintptr_t unused2) {
  (void)tid, (void)unused1, (void)unused2;
  if (!native_enter()) return NATIVE_BUSY;
  pending_write();
  return native_leave(0);
}

/* Fills class c's empty stash with blocks of size bytes; returns the count << 4 (never BUSY). */
uintptr_t vg_native_fill(uintptr_t tid, uintptr_t c, uintptr_t size) {
  (void)tid;
  if (!native_enter()) return NATIVE_BUSY;
  pending_write();
  unsigned want = (unsigned)(STASH_BYTES / fm_pool.cls[c].size), n = 0;
  if (want > STASH_LEN) want = STASH_LEN;
  while (n < want) {
    uint8_t *b = block_alloc_direct(size);
    if (!b) break;
    quick.stash[c][n++] = ~((uintptr_t)b + 2 * FM_ALIGN);
  }
  /* malloc takes the last first: the blocks go out in the order they came, ascending addresses
   * as with glibc (memcheck names the lowest block of a leaked cycle its definitely lost one) */
  for (unsigned i = 0, j = n ? n - 1 : 0; i < j; i++, j--) {
    uintptr_t t = quick.stash[c][i];
    quick.stash[c][i] = quick.stash[c][j];
    quick.stash[c][j] = t;
  }
  quick.nstash[c] = quick.nfilled[c] = (uint8_t)n;
  if (n) stash_filled |= 1ull << c;
  return native_leave((uintptr_t)n << 4);
}

/* Gives every stashed block back (they are LIVE, their headers are stale: no validation). */
static uintptr_t native_unstash(uintptr_t tid, uintptr_t unused1, uintptr_t unused2) {
  (void)tid, (void)unused1, (void)unused2;
  if (!native_enter()) return NATIVE_BUSY;
  pending_write();
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    for (unsigned i = 0; i < quick.nstash[c]; i++) give_back((uint8_t *)~quick.stash[c][i] - 2 * FM_ALIGN);
    quick.nstash[c] = quick.nfilled[c] = 0;
  }
  stash_filled = 0;
  return native_leave(0);
}

static uintptr_t native_release(uintptr_t p) {
  struct check_block f;
  enum check_verdict v = check_find((void *)p, &f);
  if (v == V_OK) {
    f.h->magic = check_magic(f.h, false);
    hold(f.b, f.cls, f.size);
  }
  return native_code(v, &f);
}

/* free: validates p and holds it back. */
static uintptr_t native_free(uintptr_t tid, uintptr_t p, uintptr_t unused) {
  (void)tid, (void)unused;
  if (!native_enter()) return NATIVE_BUSY;
  pending_write();
  return native_leave(native_release(p));
}

/* The queued releases, in the order of the frees; each entry becomes its release code. */
static uintptr_t native_flush(uintptr_t tid, uintptr_t unused1, uintptr_t unused2) {
  (void)tid, (void)unused1, (void)unused2;
  if (!native_enter()) return NATIVE_BUSY;
  pending_write();
  for (unsigned i = 0; i < quick.nqueue; i++) quick.queue[i] = native_release(quick.queue[i]);
  return native_leave(0);
}

static bool queued(uintptr_t p) {
  for (unsigned i = 0; i < quick.nqueue; i++)
    if (quick.queue[i] == p) return true;
  return false;
}

/* False under memcheck, whose own realloc always moves the block: the block then carries
 * realloc's stack and its old address is reported when used, as with glibc. */
static bool shrink_in_place;

/* realloc: validates p; shrinks it in place (shrink_in_place) when the new size leaves room for
 * the canary. */
uintptr_t vg_native_resize(uintptr_t tid, uintptr_t p, uintptr_t size) {
  (void)tid;
  if (!native_enter()) return NATIVE_BUSY;
  pending_write();
  struct check_block f;
  enum check_verdict v = queued(p) ? V_FREED : check_find((void *)p, &f);
  uintptr_t r = native_code(v, &f);
  if (v == V_OK && shrink_in_place && size <= f.size && size + CANARY_MIN <= (size_t)(check_block_end(f.b, f.cls) - (uint8_t *)p)) {
    f.h->size = size;
    f.h->kind = KIND_MALLOC;
    r |= NATIVE_IN_PLACE;
  }
  return native_leave(r);
}

static noinline uintptr_t native_call(uintptr_t (*fn)(uintptr_t, uintptr_t, uintptr_t), uintptr_t a, uintptr_t b) {
  uintptr_t r;
  while ((r = VALGRIND_NON_SIMD_CALL2(fn, a, b)) == NATIVE_BUSY) sched_yield();
  return r;
}

/* Hands the queued releases to the quarantine (caller holds quick.flag). */
void vg_flush_locked(void) {
  if (!quick.nqueue) return;
  if (pool_gone) {   /* the pool may be unmapped: the blocks are only described from here on */
    quick.nqueue = 0;
    return;
  }
  native_call(native_flush, 0, 0);
  for (unsigned i = 0; i < quick.nqueue; i++)
    if ((quick.queue[i] & 15) == V_OK) profile_free(quick.queue[i] >> 8);
  quick.nqueue = 0;
}

void vg_flush_unlock(void) {
  vg_flush_locked();
  unlock();
}

/* The queued releases and the stash go back to the allocator (mallinfo, malloc_trim, a failed
 * allocation). */
void check_release_queued(void) {
  if (!native) return;
  lock();
  vg_flush_locked();
  if (!pool_gone) native_call(native_unstash, 0, 0);
  unlock();
}

/* The pending headers and the queued releases, before the program's side reads a header
 * (malloc_usable_size: a freed block's is 0, as memcheck's own). */
static void pending_flush(void) {
  if (!native || pool_gone) return;
  lock();
  vg_flush_locked();
  native_call(native_pending, 0, 0);
  unlock();
}

/* A block for malloc(size) from the stash, for realloc (check_short.c's malloc takes its own);
 * NULL when size is not stashed or none is left. */
static void *stash_take(size_t size) {
  if (size >= quick.stash_lim) return NULL;
  unsigned c = vg_stash_class(size);
  lock();
  unsigned n = quick.nstash[c];
  if (!n) n = (unsigned)(native_call(vg_native_fill, c, size + LEAN_LEAD) >> 4);
  uintptr_t p = n ? vg_stash_pop(c, n, size) : 0;
  unlock();
  return (void *)p;
}

/* Only under memcheck, whose lock() is quick.flag: taken here directly. */
static void queue_push(void *p) {
  while (atomic_flag_test_and_set_explicit(&quick.flag, memory_order_acquire)) sched_yield();
  vg_queue_add((uintptr_t)p);
  if (quick.nqueue == QUEUE_LEN) vg_flush_locked();
  atomic_flag_clear_explicit(&quick.flag, memory_order_release);
}

static void *native_block(size_t size, size_t align, enum check_kind kind, bool zero) {
  uintptr_t how = align | kind | (zero ? NATIVE_ZERO : 0);
  void *p = (void *)native_call(native_new, size, how);
  if (!p) {   /* the queued and the stashed blocks may make room */
    check_release_queued();
    p = (void *)native_call(native_new, size, how);
  }
  if (!p) {
    errno = ENOMEM;
    return NULL;
  }
  if (kind >= KIND_NEW) quick.queue_off++;
  profile_alloc(size);
  return p;
}

static void cxx_gone(uintptr_t r) {
  if ((r & 15) == V_OK && (enum check_kind)(r >> 4 & 3) >= KIND_NEW) quick.queue_off--;
}

/* The release code r of p: false for a bad pointer (memcheck reported it when told); a release
 * through the wrong family is reported here. */
static bool native_taken(void *p, uintptr_t r, int release, bool realloc_call) {
  if ((r & 15) != V_OK) return false;
  struct check_block f = {.cls = -1, .size = r >> 8, .kind = (enum check_kind)(r >> 4 & 3)};
  if (release >= 0 && !check_kind_fits(f.kind, (enum check_kind)release)) check_mismatch(p, &f, (enum check_kind)release, realloc_call);
  return true;
}

/* ---- the API's functions, under the API's names ------------------------------------------- */
/* Local symbols named malloc, free, ...: each issues its requests from its own body and is
 * reached by tail calls from the exported function, so a tool's stack reads malloc, main. */
#define NAMED(fn) __asm__(fn) noinline __attribute__((used))
static void *named_malloc(size_t size) NAMED("malloc");
static void *named_memalign(size_t size, size_t align) NAMED("memalign");
static void *named_calloc(size_t count, size_t size) NAMED("calloc");
static void named_free(void *p) NAMED("free");
static void *named_realloc(void *p, size_t size) NAMED("realloc");
static int named_posix_memalign(void **memptr, size_t align, size_t size) NAMED("posix_memalign");

/* memcheck's "fishy" sizes (above SSIZE_MAX, a negative number passed as a size): the call is
 * handed to memcheck's own function of the same name, which reports the error and returns NULL,
 * so the error is memcheck's own, counted and suppressible. */
static bool fishy(size_t size) {
  if (likely((ssize_t)size >= 0 || !tool_heap.on)) return false;
  errno = ENOMEM;   /* memcheck's functions leave errno as it was */
  return true;
}

/* Under memcheck check_short.c's malloc takes sizes below the stash's limit: the test for a
 * fishy size costs the larger ones only. */
static void *named_malloc(size_t size) {
  if (unlikely(fishy(size))) return tool_heap.malloc(size);
  if (unlikely(__atomic_load_n(&vg_spill_run, __ATOMIC_RELAXED)) && spill_fits(size, 0)) {
    __atomic_store_n(&vg_spill_run, __atomic_load_n(&vg_spill_run, __ATOMIC_RELAXED) - 1, __ATOMIC_RELAXED);
    return tool_heap.malloc(size);
  }
  if (likely(lean_malloc)) {   /* memcheck, native, no profile */
    lock();
    quick.call_req[1] = (uintptr_t)native_new;
    quick.call_req[2] = size;
    quick.call_req[3] = FM_ALIGN | KIND_MALLOC;
    uintptr_t p = vg_request(quick.call_req, 0);
    if (likely(p > NATIVE_BUSY)) return vg_malloc_told(p, size);   /* the request, then unlock */
    unlock();
    int e = errno;
    p = (uintptr_t)native_block(size, FM_ALIGN, KIND_MALLOC, false);   /* retry, flush, errno */
    if (unlikely(!p)) {
      if (!spill || !spill_fits(size, 0)) return NULL;
      errno = e;
      spill_start();
      return tool_heap.malloc(size);
    }
    lock();
    return vg_malloc_told(p, size);
  }
  if (unlikely(!pool_ready())) return boot_alloc(size, 0);   /* not reached: api.c and cxx.c start the pool first */
  if (forward) return tool_heap.malloc(size);
  void *p = block_new(size, FM_ALIGN, KIND_MALLOC, false);
  if (p && !pool_gone) vg_alloced(p, size, false);
  return p;
}

static void *named_memalign(size_t size, size_t align) {
  if (forward || fishy(size)) return tool_heap.memalign(align, size);
  int e = errno;
  void *p = block_new(size, align, KIND_ALIGNED, false);
  if (unlikely(!p) && spill && spill_fits(size, align)) {
    errno = e;
    return tool_heap.memalign(align, size);
  }
  if (p && !pool_gone) vg_alloced(p, size, false);
  return p;
}

static void *named_calloc(size_t count, size_t size) {
  size_t n;
  if (forward || fishy(count) || fishy(size)) return tool_heap.calloc(count, size);
  if (__builtin_mul_overflow(count, size, &n)) {
    errno = ENOMEM;
    return NULL;
  }
  if (likely(lean_malloc)) {   /* as named_malloc's */
    uintptr_t p = VALGRIND_NON_SIMD_CALL2(native_new, n, FM_ALIGN | KIND_MALLOC | NATIVE_ZERO);
    if (unlikely(p <= NATIVE_BUSY)) {
      int e = errno;
      p = (uintptr_t)native_block(n, FM_ALIGN, KIND_MALLOC, true);
      if (!p && spill && spill_fits(n, 0)) {
        errno = e;
        return tool_heap.calloc(count, size);
      }
    }
    if (likely(p)) VALGRIND_MALLOCLIKE_BLOCK(p, n, 0, 1);
    vg_scrub(p);
    return (void *)p;
  }
  void *p = block_new(n, FM_ALIGN, KIND_MALLOC, true);
  if (p && !pool_gone) vg_alloced(p, n, true);
  return p;
}

/* No local whose address is taken: a mismatch leaves by a tail call to memcheck's free, and
 * memcheck's stack then reads free, main, as with glibc. */
static void named_free(void *p) {
  if (!p) return;
  if (forward && !boot_owns(p)) return tool_heap.free(p);
  long r = vg_take_block(p, KIND_MALLOC);
  if (r == TAKE_MISMATCH) return vg_tool_release(KIND_MALLOC)(p);
  if (r == TAKE_BAD) vg_freed(p, 0);   /* memcheck reports "Invalid free()" */
  if (r < 0) return;
  vg_freed(p, (size_t)r);
  vg_give_block();
}

/* realloc's block in checking mode and under the tools that are not native: thread-local, not
 * on the stack, so that realloc can leave by a tail call (memcheck's stack then reads realloc,
 * then the program). */
static _Thread_local struct check_block realloc_taken;

static void *named_realloc(void *p, size_t size) {
  struct check_block *f = &realloc_taken;
  if (forward && !boot_owns(p)) return tool_heap.realloc(p, size);
  if (fishy(size) || tool_owns(p)) return tool_heap.realloc(p, size);
  if (!size) {   /* realloc(p, 0) frees p */
    long r = vg_take_block(p, KIND_MALLOC);
    if (r == TAKE_MISMATCH) vg_tool_release(KIND_MALLOC)(p);
    if (r == TAKE_BAD) vg_freed(p, 0);
    if (r >= 0) {
      vg_freed(p, (size_t)r);
      vg_give_block();
    }
    return NULL;
  }
  if (boot_owns(p)) {
    void *q = forward ? tool_heap.malloc(size) : block_new(size, FM_ALIGN, KIND_MALLOC, false);
    if (!q) return NULL;
    memcpy(q, p, boot_usable(p) < size ? boot_usable(p) : size);
    if (!pool_gone && !forward) vg_alloced(q, size, false);
    return q;
  }
  if (native && !pool_gone) {
    lock();   /* the pending headers (see "the stash") */
    uintptr_t r = native_call(vg_native_resize, (uintptr_t)p, size);
    unlock();
    if ((r & 15) == V_OK && tool_heap.on && !check_kind_fits((enum check_kind)(r >> 4 & 3), KIND_MALLOC)) {
      /* a new or new[] block: released here, then memcheck's realloc reports the mismatch
       * (counted, as in glibc's run) and moves the block into memcheck's heap (tool_owns) */
      lock();
      r = native_call(native_free, (uintptr_t)p, 0);
      unlock();
      cxx_gone(r);
      if ((r & 15) == V_OK) profile_free(r >> 8);
      return tool_heap.realloc(p, size);
    }
    if (!native_taken(p, r, KIND_MALLOC, true)) {
      vg_freed(p, 0);   /* memcheck: "Invalid free() / delete / delete[] / realloc()" */
      return NULL;
    }
    size_t old = r >> 8;
    if (r & NATIVE_IN_PLACE) {
      VALGRIND_RESIZEINPLACE_BLOCK(p, old, size, 0);
      cxx_gone(r);   /* it is a malloc block now */
      profile_free(old);
      profile_alloc(size);
      return p;
    }
    void *q = stash_take(size);
    int e = errno;
    if (!q) q = block_new(size, FM_ALIGN, KIND_MALLOC, false);
    if (unlikely(!q) && spill && spill_fits(size, 0) && (q = tool_heap.malloc(size))) {   /* p moves to memcheck's heap */
      errno = e;
      memcpy(q, p, old < size ? old : size);
      named_free(p);
      return q;
    }
    if (!q) return NULL;
    if (vg_running == VG_MEMCHECK) {   /* p is a malloc block: its release is queued there */
      lock();
      return vg_realloc_told((uintptr_t)q, size, p, old < size ? old : size);
    }
    vg_alloced(q, size, false);
    memcpy(q, p, old < size ? old : size);
    vg_freed(p, old);
    if (!quick.queue_off) {   /* no new or new[] block is live: p is a malloc block */
      queue_push(p);
      return q;
    }
    lock();
    r = native_call(native_free, (uintptr_t)p, 0);
    unlock();
    if (native_taken(p, r, -1, false)) profile_free(old);
    cxx_gone(r);
    return q;
  }
  if (!check_take(p, f, KIND_MALLOC, true)) {
    vg_freed(p, 0);   /* memcheck: "Invalid free() / delete / delete[] / realloc()" */
    return NULL;
  }
  size_t old = f->size;
  VALGRIND_DISABLE_ERROR_REPORTING;
  uint8_t *end = check_block_end(f->b, f->cls), *user = p;
  VALGRIND_ENABLE_ERROR_REPORTING;
  if (shrink_in_place && size <= old && size + CANARY_MIN <= (size_t)(end - user)) {   /* shrink in place */
    VALGRIND_RESIZEINPLACE_BLOCK(p, old, size, 0);
    VALGRIND_DISABLE_ERROR_REPORTING;
    f->h->size = size;
    f->h->kind = KIND_MALLOC;
    profile_free(old);
    profile_alloc(size);
    check_canary_fill(user, size, end);
    VALGRIND_MAKE_MEM_NOACCESS(user + size, (size_t)(end - user - size));
    VALGRIND_ENABLE_ERROR_REPORTING;
    return p;
  }
  void *q = block_new(size, FM_ALIGN, KIND_MALLOC, false);
  if (!q) return NULL;
  /* memcheck copies between two described blocks (the bytes' definedness goes with them);
   * for the others the old block is gone before the new one comes, as in their own realloc
   * (massif's peak counts a moved block once) */
  bool copy_described = vg_running == VG_MEMCHECK;
  if (copy_described && !pool_gone) vg_alloced(q, size, false);
  memcpy(q, p, old < size ? old : size);
  if (vg_take_block(p, -1) >= 0) {
    vg_freed(p, old);
    vg_give_block();
  }
  if (!copy_described && !pool_gone) vg_alloced(q, size, false);
  return q;
}

/* Calls memalign, as memcheck's posix_memalign does: the tool's stack reads memalign,
 * posix_memalign, then the program. */
static int named_posix_memalign(void **memptr, size_t align, size_t size) {
  if (fishy(size)) return tool_heap.posix_memalign(memptr, align, size);
  void *p = named_memalign(size, align);
  if (!p) {
    errno = ENOMEM;   /* as glibc 2.36 leaves it */
    return ENOMEM;
  }
  *memptr = p;
  return 0;
}

int check_posix_memalign(void **memptr, size_t align, size_t size) { return named_posix_memalign(memptr, align, size); }

void *vg_malloc_long(size_t size) { return named_malloc(size); }
void *check_memalign(size_t size, size_t align) { return named_memalign(size, align); }
void *check_calloc(size_t count, size_t size) { return named_calloc(count, size); }
void vg_free_long(void *p) { named_free(p); }
/* realloc(NULL, n) leaves by a tail call to malloc, as memcheck's realloc does: the tool's stack
 * reads malloc, then the program, and suppressions on fun:malloc match. */
void *vg_realloc_long(void *p, size_t size) { return p ? named_realloc(p, size) : named_malloc(size); }

size_t check_usable(void *p) {
  struct check_block f;
  if (boot_owns(p)) return boot_usable(p);
  if (forward || tool_owns(p)) return tool_heap.usable(p);
  pending_flush();
  VALGRIND_DISABLE_ERROR_REPORTING;
  enum check_verdict v = check_find(p, &f);
  VALGRIND_ENABLE_ERROR_REPORTING;
  return v == V_OK ? f.size : check_usable_fault(v, p, f.cls);
}

/* ---- start-up and exit under Valgrind ---------------------------------------------------- */
/* memcheck's --freelist-vol and --track-origins: the tool's options are not the program's, but
 * the kernel's copy of the command line is (/proc/thread-self/cmdline; Valgrind fakes
 * /proc/self/cmdline), and VALGRIND_OPTS comes before it. */
/* arena_walks: Valgrind walks every block of its heap (--sanity-level=2 and above, at exit with
 * --stats=yes or --profile-heap=yes), counting a superblock's bytes in 32 bits (m_mallocfree.c's
 * sanity_check_malloc_arena and cc_analyse_alloc_arena: "UInt i ... i += mk_plain_bszB(b_bszB)"),
 * so a heap block of 4 GiB or more stops Valgrind with an assertion; those walks also check each
 * block's in-use mark against the free lists (see native_arena_split). */
static bool origins, arena_walks;
static void parse_option(const char *arg) {
  static const char vol[] = "--freelist-vol=", track[] = "--track-origins=", sanity[] = "--sanity-level=";
  if (!strncmp(arg, sanity, sizeof sanity - 1) && strtol(arg + sizeof sanity - 1, NULL, 10) > 1) arena_walks = true;
  if (!strcmp(arg, "--stats=yes") || !strcmp(arg, "--profile-heap=yes")) arena_walks = true;
  if (!strncmp(arg, track, sizeof track - 1)) origins = !strncmp(arg + sizeof track - 1, "yes", 3);
  if (strncmp(arg, vol, sizeof vol - 1)) return;
  size_t v = 0;
  for (const char *s = arg + sizeof vol - 1; *s >= '0' && *s <= '9'; s++) v = v * 10 + (size_t)(*s - '0');
  held.max = v;
}

static void read_tool_options(void) {
  extern char **environ;
  held.max = 20000000;   /* memcheck's default */
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "VALGRIND_OPTS=", 14)) continue;
    for (const char *s = *e + 14; *s; s++)
      if (s[0] == '-' && (s == *e + 14 || s[-1] == ' ')) parse_option(s);
  }
  static char buf[4096];
  int fd = open("/proc/thread-self/cmdline", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ssize_t n = read(fd, buf, sizeof buf - 1);
  close(fd);
  if (n <= 0) return;
  buf[n] = 0;
  /* valgrind's own argv[0], its options, then the program: stop at the first non-option */
  for (char *a = buf + strlen(buf) + 1; a < buf + n && *a == '-'; a += strlen(a) + 1) parse_option(a);
}

static bool tool_heap_find(void) {
  tool_heap.malloc = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  tool_heap.calloc = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "calloc");
  tool_heap.realloc = (void *(*)(void *, size_t))dlsym(RTLD_NEXT, "realloc");
  tool_heap.memalign = (void *(*)(size_t, size_t))dlsym(RTLD_NEXT, "memalign");
  tool_heap.free = (void (*)(void *))dlsym(RTLD_NEXT, "free");
  tool_heap.usable = (size_t(*)(void *))dlsym(RTLD_NEXT, "malloc_usable_size");
  tool_heap.posix_memalign = (int (*)(void **, size_t, size_t))dlsym(RTLD_NEXT, "posix_memalign");
  return tool_heap.posix_memalign && tool_heap.malloc && tool_heap.calloc && tool_heap.realloc && tool_heap.memalign && tool_heap.free &&
         tool_heap.usable;
}

bool check_setup(void) {
  vg_running = vg_tool();
  forward = (vg_running == VG_DHAT || vg_running == VG_HELGRIND) && tool_heap_find();
  tool_heap.on = vg_running == VG_MEMCHECK && tool_heap_find();
  serial = vg_running != VG_NONE;
  /* The thread checkers do not check the lock's and the short ways' words (see lock()). */
  VALGRIND_HG_DISABLE_CHECKING(&quick, sizeof quick);
  VALGRIND_DRD_IGNORE(&quick, sizeof quick);
  held.on = vg_running == VG_MEMCHECK;
  shrink_in_place = vg_running != VG_MEMCHECK;
  if (held.on) read_tool_options();
  return serial;
}

/* The default pool's ceiling under each tool. memcheck's heap holds a block of 16 GiB but not
 * 32; with --track-origins=yes memcheck notes an origin for every word of the heap block the
 * pool lives in when it is allocated, in a cache whose first level (allocated in any case)
 * covers 64 MiB and whose second level takes about 4.6 bytes of the tool's memory and 7 ms per
 * MiB beyond: a pool of 56 MiB (61 MiB with its tables) would cost nothing more than glibc's
 * run (a 64-byte program: 156 MB against 155 MB), but a default pool is at least 64 MiB
 * (pool.c): 230 MB, 1.5x glibc's; 256 MiB cost 1.15 GB. So that pool stays at 64 MiB, and
 * memcheck's own heap serves past it (spill), at glibc's cost. helgrind shadows mapped memory
 * eagerly (4 GiB of pool cost it 3 GB and 4 s), and under it the pool serves nothing (every
 * call is forwarded); drd's suppression of the pool costs it time in proportion (32 GiB:
 * 13 s). FLATMALLOC_POOL overrides each. */
size_t check_pool_cap(void) {
  switch (vg_running) {
  case VG_MEMCHECK: return origins ? (size_t)64 << 20 : arena_walks ? (size_t)2 << 30 : (size_t)16 << 30;
  case VG_HELGRIND: return (size_t)64 << 20;
  case VG_DRD: return (size_t)512 << 20;
  default: return (size_t)32 << 30;
  }
}

bool check_pool_heap(void) { return vg_running == VG_MEMCHECK; }

#define VG_RANGE_STEP ((size_t)128 << 20)   /* memcheck warns about ranges above 256 MiB */

static void vg_range(void (*req)(void *, size_t), uintptr_t from, uintptr_t to) {
  for (; from < to; from += VG_RANGE_STEP) req((void *)from, to - from < VG_RANGE_STEP ? to - from : VG_RANGE_STEP);
}
static void req_noaccess(void *a, size_t n) { VALGRIND_MAKE_MEM_NOACCESS(a, n); }
static void req_defined(void *a, size_t n) { (void)VALGRIND_MAKE_MEM_DEFINED(a, n); }
static void req_hg_untracked(void *a, size_t n) { VALGRIND_HG_DISABLE_CHECKING(a, n); }
static void req_drd_ignore(void *a, size_t n) { VALGRIND_DRD_IGNORE(a, n); }

/* The pool's block in Valgrind's heap (Valgrind 3.19's m_mallocfree.c), which memcheck
 * describes an address in no block of its own by (m_addrinfo.c, VG_(describe_addr): "N bytes
 * inside a block of size S") and which memcheck's leak search counts while memcheck knows it.
 * The block is alone in an unsplittable superblock: a 32-byte header (the payload's size, then
 * the superblock's own address), then the block: its size word (the low bit set: unallocated),
 * a red zone, the payload, a red zone, its size word again. Rewritten natively (unseen by
 * memcheck), that one block becomes three, and the superblock splittable:
 *   1. the block memcheck's malloc returned (heap_block, a few bytes of the slack before the
 *      pool, which the pool never touches): memcheck is told it is freed at once, so no leak
 *      search counts it; when memcheck's queue of freed blocks gives it back, Valgrind's heap
 *      puts it on a free list (it may hand it out again: it is no part of the pool);
 *   2. a block marked in use that nothing ever frees, so that 1 never merges with 3 and the
 *      superblock is never whole again (an unsplittable or wholly free superblock is unmapped);
 *   3. the rest, the pool, marked unallocated and on no free list: Valgrind never hands it out,
 *      and memcheck describes an address there "inside an unallocated block", as glibc's run
 *      reads its heap's free memory.
 * The layout is checked first (the superblock names itself, the block is alone in it, its two
 * size words agree, its payload is where the red zones put it, no heap profile's word): nothing
 * is written unless it is there, and the pool then stays one block in use in memcheck's books,
 * shrunk to one byte, released at exit. Not done when Valgrind walks its heap's blocks
 * (arena_walks), which would find a free block on no list. */
static bool arena_split;

static uintptr_t native_arena_split(uintptr_t tid, uintptr_t unused1, uintptr_t unused2) {
  (void)tid, (void)unused1, (void)unused2;
  uintptr_t sb = ((uintptr_t)heap_block - 48) & ~(uintptr_t)4095, b = sb + 32, *w = (uintptr_t *)sb;
  if (w[1] != sb) return 0;   /* not an unsplittable superblock */
  uintptr_t size = *(uintptr_t *)b, lead = (uintptr_t)heap_block - b;   /* size word and red zone */
  if (size & 15 || size != w[0] || lead < 16 || lead & 15 || size < 8 * lead + 4096) return 0;
  if (*(uintptr_t *)(b + size - sizeof size) != size) return 0;
  uintptr_t one = 2 * lead + 16, two = 2 * lead + 16, three = size - one - two;
  /* every word written before the next page, where the pool starts at the earliest */
  if (b + one + two + sizeof size > ((uintptr_t)heap_block | 4095) + 1) return 0;
  uintptr_t *w1 = (uintptr_t *)b, *w2 = (uintptr_t *)(b + one), *w3 = (uintptr_t *)(b + one + two);
  w1[0] = one, w1[one / sizeof *w1 - 1] = one;
  w2[0] = two, w2[two / sizeof *w2 - 1] = two;
  w3[0] = three | 1, w3[three / sizeof *w3 - 1] = three | 1;
  w[1] = 0;   /* splittable */
  return 1;
}

/* memcheck: the pool is one block of memcheck's heap (libc's malloc, which memcheck replaces),
 * shrunk at once to one byte in memcheck's books, then split (native_arena_split) and
 * forgotten by memcheck, or else released at exit (check_pool_end): it never shows in the
 * program's heap. Returns one byte past the block's start, so that the pool's alignment keeps
 * that byte out of the pool. */
#define VG_LOW_HOLD ((size_t)4 << 30)   /* no pool below: 32-bit garbage is never in it */
void *check_pool_map(size_t size) {
  void *(*heap_malloc)(size_t) = (void *(*)(size_t))dlsym(RTLD_NEXT, "malloc");
  if (!heap_malloc) return NULL;
  /* Valgrind maps a block this large at the lowest hole that holds it, just above its own
   * image (at 1.5 GB): a bogus pointer such as 0x87654321 would be inside the pool, where
   * glibc's run finds nothing. The first 4 GiB of holes are held while the block is made, in
   * steps that memcheck does not warn about (under --track-origins=yes each byte held costs
   * time, and that pool is small). */
  void *hold[VG_LOW_HOLD / VG_RANGE_STEP];
  unsigned nhold = 0;
  while (!origins && nhold < VG_LOW_HOLD / VG_RANGE_STEP && (hold[nhold] = os_reserve(VG_RANGE_STEP, 0))) nhold++;
  uint8_t *p = heap_malloc(size);
  while (nhold) os_unreserve(hold[--nhold], VG_RANGE_STEP);
  if (!p) return NULL;
  for (size_t left = size; left > 1;) {
    size_t next = left > VG_RANGE_STEP + 1 ? left - VG_RANGE_STEP : 1;
    VALGRIND_RESIZEINPLACE_BLOCK(p, left, next, 0);
    left = next;
  }
  heap_block = p;
  vg_range(req_defined, (uintptr_t)p + 1, (uintptr_t)p + size);   /* the kernel's zeroes */
  if (!arena_walks && VALGRIND_NON_SIMD_CALL2(native_arena_split, 0, 0)) {
    arena_split = true;
    VALGRIND_DISABLE_ERROR_REPORTING;   /* a malloc'ed block freed as a custom one */
    VALGRIND_FREELIKE_BLOCK(p, 0);
    VALGRIND_ENABLE_ERROR_REPORTING;
  }
  return p + 1;
}

/* A child whose fork came while another thread held quick.flag drops the queue, the stash and
 * the pending list, which that thread may have been changing (their blocks stay out). */
static void check_after_fork(void) {
  if (atomic_flag_test_and_set(&quick.flag)) {
    quick.nqueue = 0;
    memset(quick.nstash, 0, sizeof quick.nstash);
    memset(quick.nfilled, 0, sizeof quick.nfilled);
    stash_filled = 0;
  }
  atomic_flag_clear(&quick.flag);
}

/* Under Valgrind the block area starts inaccessible (memcheck: blocks become addressable as
 * they are handed out; its leak search does not wade through untouched gigabytes), and for the
 * thread checkers the pool and its bookkeeping are untracked. */
void check_pool_start(void) {
  if (!fm_pool.valgrind) return;
  uintptr_t end = fm_pool.base + fm_pool.size;
  vg_range(req_noaccess, fm_pool.heap_base, end);
  if (vg_running == VG_HELGRIND) {
    vg_range(req_hg_untracked, fm_pool.base, end);
    VALGRIND_HG_DISABLE_CHECKING(&fm_pool, sizeof fm_pool);
  } else if (vg_running == VG_DRD) {
    vg_range(req_drd_ignore, fm_pool.base, end);
    VALGRIND_DRD_IGNORE(&fm_pool, sizeof fm_pool);
  }
  pthread_atfork(NULL, NULL, check_after_fork);
  /* helgrind and drd: native calls make no pthread call and their memory accesses are not seen,
   * so the allocator orders no two threads for them and its bookkeeping raises nothing */
  native = (vg_running == VG_MEMCHECK || vg_running == VG_HELGRIND || vg_running == VG_DRD) && !fm_pool.opt.check &&
           !fm_pool.lazy_commit;
  if (native) {
    fm_pool.count_lockers = true;
    tcache_native_setup();
  }
  lean_malloc = native && vg_running == VG_MEMCHECK && !fm_pool.opt.profile;
  spill = native && tool_heap.on && !fm_pool.opt.pool_text;
  if (lean_malloc)
    for (unsigned c = 0; c < fm_pool.nclass && fm_pool.cls[c].size <= STASH_CLASS_MAX; c++)
      if (fm_pool.cls[c].size > LEAN_LEAD) quick.stash_lim = fm_pool.cls[c].size - LEAN_LEAD + 1;
  if (native && held.max) quick.queue_off = 0;   /* no new block is live yet: only native calls count them */
}

/* Runs after the program's and the other libraries' exit handlers: memcheck forgets the heap
 * block the pool lives in (its leak search then sees only the program's blocks), unless it did
 * at start (native_arena_split). From here on the pool may be unmapped at memcheck's next
 * allocation: new requests come from the bootstrap buffer and freed blocks are only
 * described, never reused. */
__attribute__((destructor)) static void check_pool_end(void) {
  if (!heap_block) return;
  lean_malloc = false;
  quick.stash_lim = 0;
  quick.queue_off++;
  pool_gone = true;
  if (arena_split) return;   /* memcheck forgot the block at start */
  VALGRIND_DISABLE_ERROR_REPORTING;   /* a malloc'ed block freed as a custom one */
  VALGRIND_FREELIKE_BLOCK(heap_block, 0);
  VALGRIND_ENABLE_ERROR_REPORTING;
}
