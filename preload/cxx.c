/* The C++ allocation operators, written in C under their mangled names (x86-64 and other LP64
 * targets: size_t is "m"), so C++ programs get flatmalloc's blocks without going through
 * libstdc++'s operator new, sized delete keeps free's fast path, and checking and described
 * modes know which family a block came from. No libstdc++ dependency: its pieces are weak
 * references, present whenever a C++ runtime is loaded.
 *
 * Failure: new calls the installed new_handler and retries, as the standard asks; with no
 * handler it throws std::bad_alloc through the C++ runtime's own __cxa_throw (this file is
 * built with unwind tables), and if no C++ runtime is loaded it stops the program with one
 * line. The nothrow forms return NULL instead. */
#include <stdbool.h>
#include <stdlib.h>

#include "fast.h"
#include "flatmalloc.h"
#include "os.h"
#include "vg.h"

#define EXPORT __attribute__((visibility("default")))

typedef void (*new_handler)(void);
extern new_handler _ZSt15get_new_handlerv(void) __attribute__((weak));            /* std::get_new_handler */
extern void *__cxa_allocate_exception(size_t) __attribute__((weak));
extern void __cxa_throw(void *, void *, void (*)(void *)) __attribute__((weak));
extern char _ZTISt9bad_alloc[] __attribute__((weak));                              /* typeid(std::bad_alloc) */
extern char _ZTVSt9bad_alloc[] __attribute__((weak));                              /* its vtable */
extern void _ZNSt9bad_allocD1Ev(void *) __attribute__((weak));                     /* its destructor */

/* ---- allocation -------------------------------------------------------------------------- */
/* The operators' bodies are macros: in described mode the request is issued from the
 * operator's own code, so the tool's stack reads "operator new(unsigned long)", then the
 * program, with or without debug information. */
static always_inline void *cxx_plain(size_t n, size_t align) {
  return align ? flatmalloc_aligned_alloc(align, n) : fm_alloc(n);
}

static cold noinline void *cxx_fail(size_t n, size_t align, enum check_kind kind, bool nothrow) {
  for (;;) {
    new_handler h = _ZSt15get_new_handlerv ? _ZSt15get_new_handlerv() : NULL;
    if (!h) break;
    h();
    void *p;
    if (!fm_pool.checked) {
      p = cxx_plain(n, align);
    } else if ((p = vg_new_block(n, align, kind))) {
      vg_alloced(p, n, false);
    }
    if (p) return p;
  }
  if (nothrow) return NULL;
  if (__cxa_allocate_exception && __cxa_throw && _ZTISt9bad_alloc && _ZTVSt9bad_alloc) {
    void **e = __cxa_allocate_exception(sizeof(void *));
    e[0] = _ZTVSt9bad_alloc + 2 * sizeof(void *);   /* the object is its vtable pointer */
    __cxa_throw(e, _ZTISt9bad_alloc, _ZNSt9bad_allocD1Ev);
  }
  static const char msg[] = "flatmalloc: operator new: out of memory, and no C++ runtime to throw std::bad_alloc\n";
  os_write(2, msg, sizeof msg - 1);
  abort();
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

/* ---- release ----------------------------------------------------------------------------- */
#define DELETE_BODY(p, kind)                                                                   \
  if (unlikely(fm_pool.checked)) {                                                             \
    long r;                                                                                    \
    if (!(p) || (r = vg_take_block((p), (int)(kind))) == TAKE_NONE) return;                    \
    if (r == TAKE_MISMATCH) return vg_tool_release((int)(kind))(p);                            \
    if (r == TAKE_BAD) { /* the tool reports the bad pointer */                                \
      vg_freed((p), 0);                                                                        \
      return;                                                                                  \
    }                                                                                          \
    vg_freed((p), (size_t)r);                                                                  \
    vg_give_block();                                                                           \
    return;                                                                                    \
  }                                                                                            \
  fm_free(p)

/* ---- the operators ----------------------------------------------------------------------- */
typedef struct { char c; } nothrow_t;   /* const std::nothrow_t &: only its address is passed */

EXPORT void *_Znwm(size_t n) { NEW_BODY(n, 0, KIND_NEW, false); }
EXPORT void *_Znam(size_t n) { NEW_BODY(n, 0, KIND_NEW_ARRAY, false); }
EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const nothrow_t *t) { (void)t; NEW_BODY(n, 0, KIND_NEW, true); }
EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const nothrow_t *t) { (void)t; NEW_BODY(n, 0, KIND_NEW_ARRAY, true); }
EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t a) { NEW_BODY(n, a, KIND_NEW, false); }
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t a) { NEW_BODY(n, a, KIND_NEW_ARRAY, false); }
EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const nothrow_t *t) { (void)t; NEW_BODY(n, a, KIND_NEW, true); }
EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const nothrow_t *t) { (void)t; NEW_BODY(n, a, KIND_NEW_ARRAY, true); }

EXPORT void _ZdlPv(void *p) { DELETE_BODY(p, KIND_NEW); }
EXPORT void _ZdaPv(void *p) { DELETE_BODY(p, KIND_NEW_ARRAY); }
EXPORT void _ZdlPvm(void *p, size_t n) { (void)n; DELETE_BODY(p, KIND_NEW); }
EXPORT void _ZdaPvm(void *p, size_t n) { (void)n; DELETE_BODY(p, KIND_NEW_ARRAY); }
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const nothrow_t *t) { (void)t; DELETE_BODY(p, KIND_NEW); }
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const nothrow_t *t) { (void)t; DELETE_BODY(p, KIND_NEW_ARRAY); }
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t a) { (void)a; DELETE_BODY(p, KIND_NEW); }
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t a) { (void)a; DELETE_BODY(p, KIND_NEW_ARRAY); }
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)n, (void)a; DELETE_BODY(p, KIND_NEW); }
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)n, (void)a; DELETE_BODY(p, KIND_NEW_ARRAY); }
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const nothrow_t *t) { (void)a, (void)t; DELETE_BODY(p, KIND_NEW); }
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const nothrow_t *t) { (void)a, (void)t; DELETE_BODY(p, KIND_NEW_ARRAY); }
