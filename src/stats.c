/* Statistics: the FLATMALLOC_STATS report, its JSON form, mallinfo. Read without stopping the
 * threads: exact when they are quiet, close while they run. Nothing here allocates. */
#include <string.h>

#include "flatmalloc.h"
#include "fmt.h"
#include "internal.h"
#include "os.h"
#include "vg.h"

struct class_stats {
  uint64_t carved, in_use, peak, share_centi, borrows, exhausted;
};

static void class_stats(unsigned c, struct class_stats *s) {
  struct fm_class *k = &fm_pool.cls[c];
  uint64_t stored = atomic_load_explicit(&k->stored, memory_order_relaxed);
  uint64_t cached = tcache_cached(c);
  s->carved = class_carved(c);
  s->in_use = s->carved > stored + cached ? s->carved - stored - cached : 0;
  s->peak = atomic_load_explicit(&k->peak, memory_order_relaxed);
  if (s->peak < s->in_use) s->peak = s->in_use;
  s->share_centi = (k->end > k->start) ? s->carved * k->size * 10000 / (k->end - k->start) : 0;
  s->borrows = atomic_load_explicit(&k->borrows, memory_order_relaxed);
  s->exhausted = atomic_load_explicit(&k->exhausted, memory_order_relaxed);
}

static size_t committed(const struct large_stats *ls) {
  size_t n = os_resident((void *)fm_pool.base, fm_pool.small_base - fm_pool.base);
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    struct fm_class *k = &fm_pool.cls[c];
    n += os_resident((void *)k->start, atomic_load_explicit(&k->frontier, memory_order_relaxed) - k->start);
  }
  return n + os_resident((void *)ls->base, ls->committed_end - ls->base);
}

static void line_start(struct fmt *f, int pid) {
  fmt_str(f, "flatmalloc[");
  fmt_u64(f, (unsigned)pid, 0);
  fmt_str(f, "]: ");
}

/* The report goes to a copy of stderr taken at start-up: coreutils and others close fd 2
 * before the exit report runs. */
static int stats_fd = 2;

void stats_setup(void) {
  if (fm_pool.opt.stats) stats_fd = os_dup_high(2);
}

static void line_flush(struct fmt *f) {
  fmt_mem(f, "\n", 1);
  os_write(stats_fd, f->buf, f->len < f->size ? f->len : f->size - 1);
  f->len = 0;
}

void flatmalloc_stats_print(void) {
  if (!pool_ready()) return;
  char buf[256];
  struct fmt f = {buf, sizeof buf, 0};
  int pid = os_getpid();
  line_start(&f, pid);
  fmt_str(&f, "class    size     in_use       peak  share%  borrows  exhausted");
  line_flush(&f);
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    struct class_stats s;
    class_stats(c, &s);
    if (!s.peak && !s.exhausted && !s.borrows) continue;
    line_start(&f, pid);
    fmt_u64(&f, c, 5);
    fmt_u64(&f, fm_pool.cls[c].size, 8);
    fmt_u64(&f, s.in_use, 11);
    fmt_u64(&f, s.peak, 11);
    fmt_centi(&f, s.share_centi, 8);
    fmt_u64(&f, s.borrows, 9);
    fmt_u64(&f, s.exhausted, 11);
    line_flush(&f);
  }
  struct large_stats ls;
  large_stats(&ls);
  line_start(&f, pid);
  fmt_str(&f, "large in_use=");
  fmt_u64(&f, ls.in_use, 0);
  fmt_str(&f, " peak=");
  fmt_u64(&f, ls.peak, 0);
  fmt_str(&f, " free=");
  fmt_u64(&f, ls.free, 0);
  fmt_str(&f, " blocks=");
  fmt_u64(&f, ls.blocks, 0);
  line_flush(&f);
  line_start(&f, pid);
  fmt_str(&f, "pool reserved=");
  fmt_u64(&f, fm_pool.size, 0);
  fmt_str(&f, " committed=");
  fmt_u64(&f, committed(&ls), 0);
  line_flush(&f);
}

size_t flatmalloc_stats_json(char *buf, size_t size) {
  struct fmt f = {buf, size, 0};
  if (!pool_ready()) {
    fmt_str(&f, "{}");
    return fmt_end(&f);
  }
  struct large_stats ls;
  large_stats(&ls);
  fmt_str(&f, "{\"pid\":");
  fmt_u64(&f, (unsigned)os_getpid(), 0);
  fmt_str(&f, ",\"pool\":{\"reserved\":");
  fmt_u64(&f, fm_pool.size, 0);
  fmt_str(&f, ",\"committed\":");
  fmt_u64(&f, committed(&ls), 0);
  fmt_str(&f, "},\"classes\":[");
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    struct class_stats s;
    class_stats(c, &s);
    static const char *const keys[] = {",\"in_use\":", ",\"peak\":", ",\"borrows\":", ",\"exhausted\":"};
    uint64_t vals[] = {s.in_use, s.peak, s.borrows, s.exhausted};
    fmt_str(&f, c ? ",{\"class\":" : "{\"class\":");
    fmt_u64(&f, c, 0);
    fmt_str(&f, ",\"size\":");
    fmt_u64(&f, fm_pool.cls[c].size, 0);
    for (unsigned i = 0; i < 4; i++) {
      fmt_str(&f, keys[i]);
      fmt_u64(&f, vals[i], 0);
    }
    fmt_str(&f, ",\"share_used\":");
    fmt_centi(&f, s.share_centi, 0);
    fmt_str(&f, "}");
  }
  fmt_str(&f, "],\"large\":{\"in_use\":");
  fmt_u64(&f, ls.in_use, 0);
  fmt_str(&f, ",\"peak\":");
  fmt_u64(&f, ls.peak, 0);
  fmt_str(&f, ",\"free\":");
  fmt_u64(&f, ls.free, 0);
  fmt_str(&f, ",\"blocks\":");
  fmt_u64(&f, ls.blocks, 0);
  fmt_str(&f, "}}");
  return fmt_end(&f);
}

struct mallinfo2 flatmalloc_mallinfo2(void) {
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  if (!pool_ready()) return mi;
  size_t used = 0, held = 0;
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    struct class_stats s;
    class_stats(c, &s);
    used += s.in_use * fm_pool.cls[c].size;
    held += s.carved * fm_pool.cls[c].size;
  }
  struct large_stats ls;
  large_stats(&ls);
  mi.arena = held + ls.top;
  mi.uordblks = used + ls.in_use - check_held_bytes();   /* memcheck's held-back blocks are free */
  mi.fordblks = mi.arena - mi.uordblks;
  mi.ordblks = (size_t)ls.blocks;
  mi.keepcost = ls.free;
  return mi;
}

struct mallinfo flatmalloc_mallinfo(void) {
  struct mallinfo2 m2 = flatmalloc_mallinfo2();
  struct mallinfo mi;
  memset(&mi, 0, sizeof mi);
  mi.arena = (int)m2.arena;
  mi.ordblks = (int)m2.ordblks;
  mi.uordblks = (int)m2.uordblks;
  mi.fordblks = (int)m2.fordblks;
  mi.keepcost = (int)m2.keepcost;
  return mi;
}

__attribute__((destructor)) static void stats_at_exit_hook(void) {
  if (pool_ready() && fm_pool.opt.stats) flatmalloc_stats_print();
}
