/* The bodies of the hot C++ operators (cxx.c) past the thread cache, and in checking and
 * described modes, each in a function that carries its operator's name (a local symbol, as
 * check_short.c names memcheck's short ways): the operator reaches it by a tail call, so a
 * tool's stack reads "operator new(unsigned long)", then the program, as when the body was the
 * operator's own. */
#include "cxx.h"

#define NAMED(fn) __asm__(fn) noinline __attribute__((used))
static void *named_new(size_t n) NAMED("_Znwm");
static void *named_new_array(size_t n) NAMED("_Znam");
static void named_delete(void *p) NAMED("_ZdlPv");
static void named_delete_array(void *p) NAMED("_ZdaPv");
static void named_delete_sized(void *p, size_t n) NAMED("_ZdlPvm");
static void named_delete_array_sized(void *p, size_t n) NAMED("_ZdaPvm");

static void *named_new(size_t n) { NEW_BODY(n, 0, KIND_NEW, false); }
static void *named_new_array(size_t n) { NEW_BODY(n, 0, KIND_NEW_ARRAY, false); }
static void named_delete(void *p) { DELETE_BODY(p, KIND_NEW); }
static void named_delete_array(void *p) { DELETE_BODY(p, KIND_NEW_ARRAY); }
static void named_delete_sized(void *p, size_t n) { DELETE_SIZED_BODY(p, KIND_NEW, n, "sized delete"); }
static void named_delete_array_sized(void *p, size_t n) { DELETE_SIZED_BODY(p, KIND_NEW_ARRAY, n, "sized delete[]"); }

void *cxx_new(size_t n) { return named_new(n); }
void *cxx_new_array(size_t n) { return named_new_array(n); }
void cxx_delete(void *p) { named_delete(p); }
void cxx_delete_array(void *p) { named_delete_array(p); }
void cxx_delete_sized(void *p, size_t n) { named_delete_sized(p, n); }
void cxx_delete_array_sized(void *p, size_t n) { named_delete_array_sized(p, n); }
