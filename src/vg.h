/* Valgrind client requests, or nothing when built without Valgrind's headers. Outside
 * Valgrind each request is a few instructions that do nothing; the default fast paths never
 * reach one (memcheck mode sends every call through the slow paths). */
#ifndef FM_VG_H
#define FM_VG_H
#include <stdbool.h>
#ifdef FM_VALGRIND
#include <valgrind/memcheck.h>
#else
#define RUNNING_ON_VALGRIND 0
#define VALGRIND_MALLOCLIKE_BLOCK(a, s, r, z) ((void)0)
#define VALGRIND_FREELIKE_BLOCK(a, r) ((void)0)
#define VALGRIND_RESIZEINPLACE_BLOCK(a, o, n, r) ((void)0)
#define VALGRIND_MAKE_MEM_NOACCESS(a, s) ((void)0)
#define VALGRIND_MAKE_MEM_DEFINED(a, s) 0
#define VALGRIND_DISABLE_ERROR_REPORTING ((void)0)
#define VALGRIND_ENABLE_ERROR_REPORTING ((void)0)
#endif

/* Under memcheck, not under callgrind or another tool: only memcheck answers its own requests
 * (with -1 for this one); the others return the default, 0. */
static inline bool vg_memcheck(void) {
  if (!RUNNING_ON_VALGRIND) return false;
  char probe = 0;
  return (long)VALGRIND_MAKE_MEM_DEFINED(&probe, 1) == -1;
}
#endif
