/* The fault report: one line on stderr naming the fault, the pointer and where it lies, then
 * abort(). The bottom floor of the core: it calls nothing above it, and reads the pool's
 * geometry only as data. */
#include <stdlib.h>

#include "fmt.h"
#include "internal.h"
#include "os.h"

void fault_stop(const char *what, const void *p, int cls) {
  char buf[256];
  struct fmt f = {buf, sizeof buf - 1, 0};
  fmt_str(&f, "flatmalloc: ");
  fmt_str(&f, what);
  fmt_str(&f, ": pointer ");
  fmt_hex(&f, (uintptr_t)p);
  if (cls >= 0) {
    fmt_str(&f, " (class ");
    fmt_u64(&f, (unsigned)cls, 0);
    fmt_str(&f, ", ");
    fmt_u64(&f, fm_pool.cls[cls].size, 0);
    fmt_str(&f, " bytes)");
  } else if (cls == FAULT_CLS_ARENA) {
    fmt_str(&f, " (arena)");
  } else if ((uintptr_t)p - fm_pool.heap_base < fm_pool.heap_size) {
    fmt_str(&f, " (large area)");
  } else {
    fmt_str(&f, " (not in the pool)");
  }
  size_t n = fmt_end(&f);
  if (n > sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  os_write(2, buf, n);
  block_inside = false;   /* a handler of SIGABRT that allocates is served, not taken for a re-entry */
  abort();
}

void fault_say(const char *what) {
  char buf[160];
  struct fmt f = {buf, sizeof buf - 1, 0};
  fmt_str(&f, "flatmalloc: ");
  fmt_str(&f, what);
  size_t n = fmt_end(&f);
  if (n > sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  os_write(2, buf, n);
  block_inside = false;
  abort();
}

void fault_bad(enum fault_call call, enum fault_kind kind, const void *p, int cls) {
  static const char *const name[] = {[CALL_FREE] = "free", [CALL_REALLOC] = "realloc", [CALL_USABLE] = "malloc_usable_size"};
  static const char *const what[] = {[FAULT_FREED] = " of a freed block", [FAULT_FOREIGN] = " of a pointer not allocated by flatmalloc",
                                     [FAULT_INTERIOR] = " of an interior pointer", [FAULT_MISALIGNED] = " of a misaligned pointer",
                                     [FAULT_ARENA] = " of an arena allocation"};
  char text[64];
  struct fmt f = {text, sizeof text, 0};
  if (call == CALL_FREE && kind == FAULT_FREED) {
    fmt_str(&f, "double free");
  } else {
    fmt_str(&f, name[call]);
    fmt_str(&f, what[kind]);
  }
  fmt_end(&f);
  fault_stop(text, p, kind == FAULT_ARENA ? FAULT_CLS_ARENA : cls);
}
