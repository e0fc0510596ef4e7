#include "fmt.h"

void fmt_mem(struct fmt *f, const char *s, size_t n) {
  for (size_t i = 0; i < n; i++, f->len++)
    if (f->len + 1 < f->size) f->buf[f->len] = s[i];
}

void fmt_str(struct fmt *f, const char *s) {
  size_t n = 0;
  while (s[n]) n++;
  fmt_mem(f, s, n);
}

void fmt_u64(struct fmt *f, uint64_t v, unsigned width) {
  char tmp[24];
  unsigned n = 0;
  do tmp[sizeof tmp - ++n] = (char)('0' + v % 10); while ((v /= 10) && n < sizeof tmp);
  for (; width > n; width--) fmt_mem(f, " ", 1);
  fmt_mem(f, tmp + sizeof tmp - n, n);
}

void fmt_hex(struct fmt *f, uint64_t v) {
  char tmp[18];
  unsigned n = 0;
  do tmp[sizeof tmp - ++n] = "0123456789abcdef"[v & 15]; while ((v >>= 4) && n < 16);
  fmt_str(f, "0x");
  fmt_mem(f, tmp + sizeof tmp - n, n);
}

size_t fmt_end(struct fmt *f) {
  if (f->size) f->buf[f->len < f->size ? f->len : f->size - 1] = 0;
  return f->len;
}
