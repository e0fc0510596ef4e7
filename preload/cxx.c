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
#include "cxx.h"
#include "os.h"

#define EXPORT __attribute__((visibility("default")))

typedef void (*new_handler)(void);
extern new_handler _ZSt15get_new_handlerv(void) __attribute__((weak));            /* std::get_new_handler */
extern void *__cxa_allocate_exception(size_t) __attribute__((weak));
extern void __cxa_throw(void *, void *, void (*)(void *)) __attribute__((weak));
extern char _ZTISt9bad_alloc[] __attribute__((weak));                              /* typeid(std::bad_alloc) */
extern char _ZTVSt9bad_alloc[] __attribute__((weak));                              /* its vtable */
extern void _ZNSt9bad_allocD1Ev(void *) __attribute__((weak));                     /* its destructor */

/* ---- failure ----------------------------------------------------------------------------- */
void *cxx_fail(size_t n, size_t align, enum check_kind kind, bool nothrow) {
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

/* ---- the operators ----------------------------------------------------------------------- */
/* The hot six are malloc's and free's fast paths (delete: and the test for checking mode),
 * else a tail call to the operator's body in cxx_named.c, which carries its name: they keep no
 * stack frame (the whole body here cost new 11 instructions a call and delete 7), and a tool's
 * stack still reads "operator new(unsigned long)", then the program. */

EXPORT void *_Znwm(size_t n) { return fm_alloc_or(n, cxx_new); }
EXPORT void *_Znam(size_t n) { return fm_alloc_or(n, cxx_new_array); }
EXPORT void *_ZnwmRKSt9nothrow_t(size_t n, const nothrow_t *t) { (void)t; NEW_BODY(n, 0, KIND_NEW, true); }
EXPORT void *_ZnamRKSt9nothrow_t(size_t n, const nothrow_t *t) { (void)t; NEW_BODY(n, 0, KIND_NEW_ARRAY, true); }
EXPORT void *_ZnwmSt11align_val_t(size_t n, size_t a) { NEW_BODY(n, a, KIND_NEW, false); }
EXPORT void *_ZnamSt11align_val_t(size_t n, size_t a) { NEW_BODY(n, a, KIND_NEW_ARRAY, false); }
EXPORT void *_ZnwmSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const nothrow_t *t) { (void)t; NEW_BODY(n, a, KIND_NEW, true); }
EXPORT void *_ZnamSt11align_val_tRKSt9nothrow_t(size_t n, size_t a, const nothrow_t *t) { (void)t; NEW_BODY(n, a, KIND_NEW_ARRAY, true); }

EXPORT void _ZdlPv(void *p) { unlikely(fm_pool.checked) ? cxx_delete(p) : fm_free(p); }
EXPORT void _ZdaPv(void *p) { unlikely(fm_pool.checked) ? cxx_delete_array(p) : fm_free(p); }
EXPORT void _ZdlPvm(void *p, size_t n) { unlikely(fm_pool.checked) ? cxx_delete_sized(p, n) : fm_free(p); }
EXPORT void _ZdaPvm(void *p, size_t n) { unlikely(fm_pool.checked) ? cxx_delete_array_sized(p, n) : fm_free(p); }
EXPORT void _ZdlPvRKSt9nothrow_t(void *p, const nothrow_t *t) { (void)t; DELETE_BODY(p, KIND_NEW); }
EXPORT void _ZdaPvRKSt9nothrow_t(void *p, const nothrow_t *t) { (void)t; DELETE_BODY(p, KIND_NEW_ARRAY); }
EXPORT void _ZdlPvSt11align_val_t(void *p, size_t a) { (void)a; DELETE_BODY(p, KIND_NEW); }
EXPORT void _ZdaPvSt11align_val_t(void *p, size_t a) { (void)a; DELETE_BODY(p, KIND_NEW_ARRAY); }
EXPORT void _ZdlPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)a; DELETE_SIZED_BODY(p, KIND_NEW, n, "sized delete"); }
EXPORT void _ZdaPvmSt11align_val_t(void *p, size_t n, size_t a) { (void)a; DELETE_SIZED_BODY(p, KIND_NEW_ARRAY, n, "sized delete[]"); }
EXPORT void _ZdlPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const nothrow_t *t) { (void)a, (void)t; DELETE_BODY(p, KIND_NEW); }
EXPORT void _ZdaPvSt11align_val_tRKSt9nothrow_t(void *p, size_t a, const nothrow_t *t) { (void)a, (void)t; DELETE_BODY(p, KIND_NEW_ARRAY); }
