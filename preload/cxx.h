/* The C++ operators' bodies, shared by cxx.c (the operators) and cxx_named.c (the slow ways
 * of the hot ones, under the operators' own names). */
#ifndef FM_CXX_H
#define FM_CXX_H
#include <stdbool.h>
#include <stdlib.h>

#include "fast.h"
#include "flatmalloc.h"
#include "vg.h"

hidden cold noinline void *cxx_fail(size_t n, size_t align, enum check_kind kind, bool nothrow);

/* The operators' bodies are macros: in described mode the request is issued from the
 * operator's own code, so the tool's stack reads "operator new(unsigned long)", then the
 * program, with or without debug information. */
static always_inline void *cxx_plain(size_t n, size_t align) {
  return align ? flatmalloc_aligned_alloc(align, n) : fm_alloc(n);
}

#define NEW_BODY(n, align, kind, nothrow)                                                      \
  void *p;                                                                                     \
  if (likely(fm_pool.small_lim)) {                                                             \
    p = cxx_plain(n, align);                                                                   \
  } else if (!pool_ready() && !pool_init()) {                                                  \
    p = boot_alloc(n, align);                                                                  \
  } else if (!fm_pool.checked) {                                                               \
    p = cxx_plain(n, align);                                                                   \
  } else if ((p = vg_new_block(n, align, kind))) {                                             \
    vg_alloced(p, n, false);                                                                   \
  }                                                                                            \
  return likely(p != NULL) ? p : cxx_fail(n, align, kind, nothrow)

#define DELETE_BODY(p, kind) DELETE_SIZED_BODY(p, kind, 0, NULL)
/* A sized delete (call names it): in checking mode n must be the size new was asked for. */
#define DELETE_SIZED_BODY(p, kind, n, call)                                                    \
  if (unlikely(fm_pool.checked)) {                                                             \
    long r;                                                                                    \
    if (!(p) || (r = vg_take_block((p), (int)(kind))) == TAKE_NONE) return;                    \
    if (r == TAKE_MISMATCH) return vg_tool_release((int)(kind))(p);                            \
    if (r == TAKE_BAD) { /* the tool reports the bad pointer */                                \
      vg_freed((p), 0);                                                                        \
      return;                                                                                  \
    }                                                                                          \
    if ((call) != NULL) vg_check_size((p), r, (n), (call));                                    \
    vg_freed((p), (size_t)r);                                                                  \
    vg_give_block();                                                                           \
    return;                                                                                    \
  }                                                                                            \
  fm_free(p)

typedef struct { char c; } nothrow_t;   /* const std::nothrow_t &: only its address is passed */

/* cxx_named.c: the hot operators past the thread cache (new) or in checking and described
 * modes (delete) */
hidden void *cxx_new(size_t n);
hidden void *cxx_new_array(size_t n);
hidden void cxx_delete(void *p);
hidden void cxx_delete_array(void *p);
hidden void cxx_delete_sized(void *p, size_t n);
hidden void cxx_delete_array_sized(void *p, size_t n);
#endif
