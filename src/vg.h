/* Valgrind client requests, and the interface of "described" mode (vg.c).
 *
 * Under any Valgrind tool (memcheck, helgrind, drd, massif, DHAT, ...) flatmalloc runs in
 * described mode: every call takes the slow paths of vg.c, which tell the tool about each
 * block (malloc-like / free-like blocks; for the thread checkers, fresh memory on allocation
 * and untracked memory while the allocator owns it). Outside Valgrind each request is a few
 * instructions that do nothing; the default fast paths never reach one. Built without
 * Valgrind's headers, the requests compile to nothing. */
#ifndef FM_VG_H
#define FM_VG_H
#include <stdbool.h>
#include <stddef.h>
#include <string.h>
#include "types.h"
#ifdef FM_VALGRIND
#include <valgrind/memcheck.h>
#include <valgrind/helgrind.h>
/* drd.h's ANNOTATE_* names clash with helgrind.h's; its two range requests by number (the
 * enum in drd.h is a stable ABI). Helgrind's CLEAN_MEMORY is also drd's. */
#define FM_DRD_START_SUPPRESSION (VG_USERREQ_TOOL_BASE('D', 'R') + 2)
#define FM_DRD_FINISH_SUPPRESSION (VG_USERREQ_TOOL_BASE('D', 'R') + 3)
#define VALGRIND_DRD_IGNORE(a, s) VALGRIND_DO_CLIENT_REQUEST_STMT(FM_DRD_START_SUPPRESSION, a, s, 0, 0, 0)
#define VALGRIND_DRD_WATCH(a, s) VALGRIND_DO_CLIENT_REQUEST_STMT(FM_DRD_FINISH_SUPPRESSION, a, s, 0, 0, 0)
#else
#define RUNNING_ON_VALGRIND 0
#define VALGRIND_MALLOCLIKE_BLOCK(a, s, r, z) ((void)(a), (void)(s), (void)(z))
#define VALGRIND_FREELIKE_BLOCK(a, r) ((void)(a))
#define VALGRIND_RESIZEINPLACE_BLOCK(a, o, n, r) ((void)0)
#define VALGRIND_MAKE_MEM_NOACCESS(a, s) ((void)(a), (void)(s))
#define VALGRIND_MAKE_MEM_DEFINED(a, s) ((void)(a), (void)(s), 0)
#define VALGRIND_MAKE_MEM_UNDEFINED(a, s) ((void)0)
#define VALGRIND_DISABLE_ERROR_REPORTING ((void)0)
#define VALGRIND_ENABLE_ERROR_REPORTING ((void)0)
#define VALGRIND_PRINTF_BACKTRACE(...) ((void)0)
#define VALGRIND_HG_CLEAN_MEMORY(a, s) ((void)(a), (void)(s))
#define VALGRIND_HG_DISABLE_CHECKING(a, s) ((void)(a), (void)(s))
#define VALGRIND_HG_ENABLE_CHECKING(a, s) ((void)(a), (void)(s))
#define VALGRIND_DRD_IGNORE(a, s) ((void)(a), (void)(s))
#define VALGRIND_DRD_WATCH(a, s) ((void)(a), (void)(s))
#define VALGRIND_NON_SIMD_CALL2(f, a, b) ((void)(f), (void)(a), (void)(b), 0ul)
#define VG_USERREQ__MALLOCLIKE_BLOCK 0
#define VG_USERREQ__FREELIKE_BLOCK 0
#define VG_USERREQ__CLIENT_CALL2 0
#endif

/* A client request whose arguments (the request's code first) the caller put in args, for
 * code that owns a static block of them under a lock: the macros above keep theirs in a
 * stack array, and so need a stack frame, whose every change memcheck instruments. */
static inline uintptr_t vg_request(const uintptr_t *args, uintptr_t dflt) {
#ifdef FM_VALGRIND
  uintptr_t r;
  __asm__ volatile("rolq $3, %%rdi; rolq $13, %%rdi\n\trolq $61, %%rdi; rolq $51, %%rdi\n\t"
                   "xchgq %%rbx, %%rbx"
                   : "=d"(r)
                   : "a"(args), "0"(dflt)
                   : "cc", "memory");
  return r;
#else
  (void)args;
  return dflt;
#endif
}

/* memcheck's leak search reads every register of every thread as a root: a copy of a block's
 * pointer left in a scratch register when malloc returns keeps the block reachable for a leak
 * check made before the register is reused (VALGRIND_DO_LEAK_CHECK, vgdb's leak_check). The
 * functions that return a block clear them; p stays in rax, the return register. */
#if defined(FM_VALGRIND) && defined(__x86_64__)
#define vg_scrub(p)                                                                            \
  __asm__ volatile("xorl %%ecx, %%ecx\n\txorl %%edx, %%edx\n\txorl %%esi, %%esi\n\txorl %%edi, %%edi\n\t"   \
                   "xorl %%r8d, %%r8d\n\txorl %%r9d, %%r9d\n\txorl %%r10d, %%r10d\n\txorl %%r11d, %%r11d"  \
                   : "+a"(p) : : "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11")
#else
#define vg_scrub(p) ((void)(p))
#endif

/* ---- which tool -------------------------------------------------------------------------- */
enum vg_tool { VG_NONE, VG_MEMCHECK, VG_HELGRIND, VG_DRD, VG_MASSIF, VG_DHAT };

/* Valgrind puts its tool's preload library (vgpreload_<tool>-<arch>.so) in the client's
 * LD_PRELOAD; memcheck also answers its own requests (with -1 for this one), the others 0.
 * Reads environ directly: this runs at start-up, before anything may allocate. */
static inline enum vg_tool vg_tool(void) {
  extern char **environ;
  if (!RUNNING_ON_VALGRIND) return VG_NONE;
  char probe = 0;
  if ((long)VALGRIND_MAKE_MEM_DEFINED(&probe, 1) == -1) return VG_MEMCHECK;
  static const struct { const char *name; enum vg_tool tool; } known[] = {
    {"vgpreload_helgrind", VG_HELGRIND}, {"vgpreload_drd", VG_DRD},
    {"vgpreload_massif", VG_MASSIF}, {"vgpreload_dhat", VG_DHAT}};
  for (char **e = environ; e && *e; e++) {
    if (strncmp(*e, "LD_PRELOAD=", 11)) continue;
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
      if (strstr(*e, known[i].name)) return known[i].tool;
  }
  /* callgrind, cachegrind and the others read no request about blocks: they get the allocator
   * as it runs outside Valgrind, fast paths included, so their counts are the real ones */
  return VG_NONE;
}

/* ---- described mode: what the tools are told --------------------------------------------- */
/* Macros, not inline functions: a request's stack is the stack at the instruction that issues
 * it, so the exported function (malloc, operator new, ...) must issue it from its own body for
 * the tool's stack to start at the program's call; an inlined function would show as a frame of
 * its own in a build with debug information (valgrind --read-inline-info). */
hidden extern enum vg_tool vg_running;

#define vg_alloced(p, size, zeroed)                                                            \
  do {                                                                                         \
    VALGRIND_MALLOCLIKE_BLOCK((p), (size), 0, (zeroed));                                       \
    if (vg_running == VG_HELGRIND) {                                                           \
      VALGRIND_HG_ENABLE_CHECKING((p), (size));                                                \
      VALGRIND_HG_CLEAN_MEMORY((p), (size));                                                   \
    } else if (vg_running == VG_DRD) {                                                         \
      VALGRIND_DRD_WATCH((p), (size));                                                         \
      VALGRIND_HG_CLEAN_MEMORY((p), (size));                                                   \
    }                                                                                          \
  } while (0)

#define vg_freed(p, size)                                                                      \
  do {                                                                                         \
    VALGRIND_FREELIKE_BLOCK((p), 0);                                                           \
    if (vg_running == VG_HELGRIND) VALGRIND_HG_DISABLE_CHECKING((p), (size));                  \
    else if (vg_running == VG_DRD) VALGRIND_DRD_IGNORE((p), (size));                           \
  } while (0)

/* memcheck, arenas (arena.c): an arena is a mempool, its allocations the pool's chunks, and
 * its own state a malloc-like block, described from flatmalloc_arena_create's body (so its
 * stack reads flatmalloc_arena_create, then the program): a leaked arena reads as a leaked
 * malloc'd struct, and while an arena lives memcheck has a malloc-like block to start its leak
 * search from (it skips every mempool chunk when none is live, as at exit once the pool's own
 * block is gone). Gone, the state stays addressable for the arena's own last writes. */
#define vg_arena_made(a, size) VALGRIND_MALLOCLIKE_BLOCK((a), (size), 0, 1)
#define vg_arena_gone(a, size)                                                                 \
  do {                                                                                         \
    VALGRIND_FREELIKE_BLOCK((a), 0);                                                           \
    (void)VALGRIND_MAKE_MEM_DEFINED((a), (size));                                              \
  } while (0)

/* How a block was allocated; a release through the wrong family is a fault. */
enum check_kind { KIND_MALLOC, KIND_ALIGNED, KIND_NEW, KIND_NEW_ARRAY };

/* For the C++ operators (preload/cxx.c), which describe their blocks themselves. */
hidden void *vg_new_block(size_t size, size_t align, enum check_kind kind);   /* undescribed */
/* A block vg_take_block took (r: its size) for a sized release of size bytes through call:
 * checking mode stops when size is another. */
hidden void vg_check_size(void *p, long r, size_t size, const char *call);
/* What a release needs to know of a block (check.c fills it). */
struct check_hdr;
struct check_block {
  bool native;   /* native calls: validated and released already */
  bool queue;    /* memcheck: vg_give_block queues b, the program's pointer */
  struct check_hdr *h;
  uint8_t *b;
  uint8_t *user;   /* the program's pointer */
  int cls;
  size_t size;
  enum check_kind kind;
};
/* Validates p for a release through the family of release (-1: any). Returns the block's size:
 * release it (the caller describes the release with vg_freed, then calls vg_give_block);
 * or TAKE_BAD, a bad pointer (tell the tool: vg_freed(p, 0)); TAKE_NONE, nothing to do
 * (bootstrap block, forwarded); TAKE_MISMATCH, released through the wrong family, or under
 * memcheck a pointer outside the pool (memcheck's own block, or none): under memcheck the
 * caller hands p to vg_tool_release(release), by a tail call. */
#define TAKE_NONE (-1L)
#define TAKE_BAD (-2L)
#define TAKE_MISMATCH (-3L)
hidden long vg_take_block(void *p, int release);
hidden void vg_give_block(void);
typedef void vg_release_fn(void *);
hidden vg_release_fn *vg_tool_release(int release);

/* ---- memcheck's short ways (check_short.c), and what they share with vg.c -------------- */
/* malloc of a stashed size, free while releases are queued and realloc between the two (see
 * "the stash" and "deferred releases" in vg.c) live in a file of their own: their local
 * functions are named malloc, free and realloc, as vg.c's, and reach vg.c's only by tail
 * calls, so that malloc and free need no stack frame (memcheck instruments every change of the
 * stack pointer) and the stacks still start at the program's call. Their requests for a
 * malloc block (told) and for a moved realloc block (told_realloc) are also where vg.c's
 * malloc and realloc end, by tail calls, so that each comes from one instruction. */
#define CANARY_MIN 8u                           /* bytes of canary at least */
#define LEAN_LEAD (2 * FM_ALIGN + CANARY_MIN)   /* header and canary around a malloc block */
#define QUEUE_LEN 64u
#define STASH_LEN 32u
#define NATIVE_BUSY 15u   /* neither a block (16-aligned) nor a release code (verdict < 15) */
#define NATIVE_IN_PLACE 64u   /* in a release code: realloc shrank the block in place */
struct vg_quick {
  atomic_flag flag;                /* memcheck's lock (vg.c's lock()) for all below */
  uintptr_t malloc_req[5];         /* MALLOCLIKE: code, block, size, red zone 0, not zeroed */
  uintptr_t free_req[3];           /* FREELIKE: code, block, red zone 0 */
  uintptr_t call_req[4];           /* CLIENT_CALL2: code, function, two arguments */
  uintptr_t queue[QUEUE_LEN];      /* freed pointers; the flush puts release codes here */
  unsigned nqueue;
  _Atomic size_t queue_off;        /* see vg.c: 0 while free queues its releases */
  size_t stash_lim;                /* sizes below are stashed; 0 while there is no stash */
  uint8_t nstash[FM_CLASS_MAX];    /* blocks left in each class's stash; slots nstash to */
  uint8_t nfilled[FM_CLASS_MAX];   /* nfilled - 1 were taken and wait for their headers */
  uint32_t asked[FM_CLASS_MAX][STASH_LEN];    /* the size malloc asked for, of taken slots */
  uintptr_t stash[FM_CLASS_MAX][STASH_LEN];   /* ~the program's pointers (see "the stash") */
};
hidden extern struct vg_quick quick;

/* The stash's class for malloc(size), size below quick.stash_lim. */
static inline unsigned vg_stash_class(size_t size) {
  return fm_pool.cls_of[(size + LEAN_LEAD + FM_ALIGN - 1) / FM_ALIGN] - 1u;
}

/* Takes the last of class c's n > 0 stashed blocks for malloc(size); quick.flag held. */
static inline uintptr_t vg_stash_pop(unsigned c, unsigned n, size_t size) {
  uintptr_t p = ~quick.stash[c][--n];
  quick.nstash[c] = (uint8_t)n;
  quick.asked[c][n] = (uint32_t)size;
  return p;
}
/* Appends released pointer p to the queue of frees; quick.flag held, the queue not full. */
static inline void vg_queue_add(uintptr_t p) {
  unsigned n = quick.nqueue;
  quick.queue[n] = p;
  __atomic_store_n(&quick.nqueue, n + 1, __ATOMIC_RELEASE);
}
hidden uintptr_t vg_native_fill(uintptr_t tid, uintptr_t c, uintptr_t size);
hidden uintptr_t vg_native_resize(uintptr_t tid, uintptr_t p, uintptr_t size);   /* a release code */
hidden void vg_flush_locked(void);
hidden void vg_flush_unlock(void);   /* vg_flush_locked, then quick.flag released */
hidden void *vg_malloc_long(size_t size);   /* vg.c's named malloc */
/* While nonzero, the default pool was full: vg.c's malloc serves that many more requests from
 * memcheck's heap before it tries the pool again (see "spill" in vg.c). */
hidden extern unsigned vg_spill_run;
/* Tells memcheck of malloc's block p of size bytes and lets go of quick.flag: every malloc of
 * the short and the long way issues its request from this one instruction, so that one call
 * site's blocks have one stack (one loss record) whatever their size. */
hidden void *vg_malloc_told(uintptr_t p, size_t size);
/* Likewise realloc's new block q of size bytes: copies copy bytes of p, the valid malloc block
 * it replaces, and queues p's release. */
hidden void *vg_realloc_told(uintptr_t q, size_t size, void *p, size_t copy);
hidden void vg_free_long(void *p);          /* vg.c's named free */
hidden void *vg_realloc_long(void *p, size_t size);   /* vg.c's named realloc */

/* pool.c: which tool (true under any), then under memcheck the pool comes from memcheck's own heap (see vg.c). */
hidden bool check_setup(void);
hidden bool check_pool_heap(void);
hidden void *check_pool_map(size_t size);
hidden size_t check_pool_cap(void);
hidden void *check_calloc(size_t count, size_t size);   /* count * size may overflow */
hidden int check_posix_memalign(void **memptr, size_t align, size_t size);
/* stats.c, malloc_trim: hands the releases queued under memcheck to the allocator. */
hidden void check_release_queued(void);
/* stats.c: bytes of freed blocks held back for memcheck (mallinfo counts them as free). */
hidden size_t check_held_bytes(void);
#endif
