/* glibc's own malloc controls and report, as a program calls them: mallopt with glibc 2.36's
 * parameters and return values, and malloc_info's XML. (glibc's environment, GLIBC_TUNABLES
 * and MALLOC_*_, is read with the other settings in options.c.) On the API floor, beside
 * api.c. docs/glibc.md is the guide: what each control does here, and why most do nothing.
 *
 * mallopt returns what glibc 2.36's __libc_mallopt returns: 1, except 0 for an M_MXFAST above
 * glibc's largest fast size (80 * sizeof(size_t) / 4; the int read as a size_t, so a negative
 * value is refused too). M_ARENA_TEST and M_ARENA_MAX with a value of 0 or less change nothing
 * in glibc and return 1 all the same; an unknown parameter returns 1. */
#include <errno.h>
#include <malloc.h>
#include <stdio.h>

#include "flatmalloc.h"
#include "fmt.h"
#include "internal.h"

#define GLIBC_MAX_FAST (80 * sizeof(size_t) / 4)   /* glibc's MAX_FAST_SIZE */

/* M_TRIM_THRESHOLD: the retained budget. glibc reads the int as a size_t, so any negative value
 * is a threshold no heap reaches: no page goes back, malloc_trim's included. A prefaulted pool
 * keeps its pages whatever is asked (FLATMALLOC_PREFAULT's promise). */
static void glibc_trim(int value) {
  if (fm_pool.opt.prefault) return;
  span_set_retain(value < 0 ? UINT64_MAX : (uint64_t)value);
}

/* M_PERTURB: the byte as glibc keeps it (an int: 256 fills 0xff and 0x00, 0 is off). Under a
 * Valgrind tool nothing is filled: the tool sees the program's bytes as it left them. */
static void glibc_perturb(int value) {
  if (fm_pool.valgrind) return;
  __atomic_store_n(&fm_pool.opt.perturb, value, __ATOMIC_RELAXED);
  pool_route();
}

int flatmalloc_mallopt(int param, int value) {
  bool ready = pool_init();   /* as glibc's ptmalloc_init; false only while the pool is being set up */
  switch (param) {
    case M_MXFAST:
      return (size_t)value <= GLIBC_MAX_FAST;   /* no fast bins here: nothing else to do */
    case M_TRIM_THRESHOLD:
      if (ready) glibc_trim(value);
      return 1;
    case M_PERTURB:
      if (ready) glibc_perturb(value);
      return 1;
    default:   /* M_TOP_PAD, M_MMAP_THRESHOLD, M_MMAP_MAX, M_CHECK_ACTION, M_ARENA_TEST,
                  M_ARENA_MAX: accepted, no effect here (docs/glibc.md); unknown ones too */
      return 1;
  }
}

/* ---- malloc_info ------------------------------------------------------------------------- */
static void xml_total(struct fmt *f, const char *tag, const char *type, const char *count, uint64_t n, uint64_t size) {
  fmt_str(f, "<");
  fmt_str(f, tag);
  fmt_str(f, " type=\"");
  fmt_str(f, type);
  if (count) {
    fmt_str(f, "\" count=\"");
    fmt_u64(f, n, 0);
  }
  fmt_str(f, "\" size=\"");
  fmt_u64(f, size, 0);
  fmt_str(f, "\"/>\n");
}

/* Lines after the heap's <sizes> and again after the last heap: glibc's totals, from mallinfo2
 * (free blocks and free bytes as "rest"; no fast bins; large blocks as glibc's mmapped ones; the
 * heap below its top as the system's memory, which it never gives up). */
static void xml_totals(struct fmt *f, const struct mallinfo2 *m, bool all) {
  xml_total(f, "total", "fast", "count", m->smblks, m->fsmblks);
  xml_total(f, "total", "rest", "count", m->ordblks, m->fordblks);
  if (all) xml_total(f, "total", "mmap", "count", m->hblks, m->hblkhd);
  xml_total(f, "system", "current", NULL, 0, m->arena);
  xml_total(f, "system", "max", NULL, 0, m->arena);
  xml_total(f, "aspace", "total", NULL, 0, m->arena);
  xml_total(f, "aspace", "mprotect", NULL, 0, m->arena);
}

static void xml_flush(struct fmt *f, FILE *fp) {
  fmt_end(f);
  fputs(f->buf, fp);
  f->len = 0;
}

/* glibc's shape: one <heap> for the pool, whose <sizes> has a line per class with free blocks
 * (in its spans or in thread caches; glibc's top chunk is not listed either: the heap's free
 * runs count in the totals as one block, as its top does). */
int flatmalloc_malloc_info(int options, FILE *fp) {
  if (options != 0) return EINVAL;   /* glibc 2.36 returns it, and leaves errno as it was */
  pool_init();
  struct mallinfo2 m = flatmalloc_mallinfo2();
  char buf[1024];   /* the longest piece: the seven lines of the totals */
  struct fmt f = {buf, sizeof buf, 0};
  fmt_str(&f, "<malloc version=\"1\">\n<heap nr=\"0\">\n<sizes>\n");
  xml_flush(&f, fp);
  for (unsigned c = 0; pool_ready() && c < fm_pool.nclass; c++) {
    struct class_stats s;
    class_stats(c, &s);
    uint64_t cached = tcache_cached(c), in_use = s.out > cached ? s.out - cached : 0;
    uint64_t room = s.spans * fm_pool.cls[c].nblocks, n = room > in_use ? room - in_use : 0;
    if (!n) continue;
    uint64_t size = fm_pool.cls[c].size;
    fmt_str(&f, "  <size from=\"");
    fmt_u64(&f, size, 0);
    fmt_str(&f, "\" to=\"");
    fmt_u64(&f, size, 0);
    fmt_str(&f, "\" total=\"");
    fmt_u64(&f, n * size, 0);
    fmt_str(&f, "\" count=\"");
    fmt_u64(&f, n, 0);
    fmt_str(&f, "\"/>\n");
    xml_flush(&f, fp);
  }
  fmt_str(&f, "</sizes>\n");
  xml_flush(&f, fp);
  xml_totals(&f, &m, false);
  fmt_str(&f, "</heap>\n");
  xml_flush(&f, fp);
  xml_totals(&f, &m, true);
  fmt_str(&f, "</malloc>\n");
  xml_flush(&f, fp);
  return 0;
}
