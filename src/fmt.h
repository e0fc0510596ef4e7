/* Text formatting into a caller's buffer: no allocation, no locale, usable before the pool
 * exists and inside fault reports. Output past the end is counted but not written. */
#ifndef FM_FMT_H
#define FM_FMT_H
#include <stddef.h>
#include <stdint.h>
#include "types.h"

struct fmt {
  char *buf;
  size_t size, len;
};

hidden void fmt_str(struct fmt *f, const char *s);
hidden void fmt_mem(struct fmt *f, const char *s, size_t n);
hidden void fmt_u64(struct fmt *f, uint64_t v, unsigned width);
hidden void fmt_hex(struct fmt *f, uint64_t v);
/* Terminates the text (when there is room) and returns its full length. */
hidden size_t fmt_end(struct fmt *f);
#endif
