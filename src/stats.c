/* Statistics: the FLATMALLOC_STATS report, its JSON form, mallinfo. Read without stopping the
 * threads: exact when they are quiet, close while they run. Nothing here allocates. */
#include <string.h>

#include "flatmalloc.h"
#include "fmt.h"
#include "internal.h"
#include "os.h"
#include "vg.h"

struct cstat {
  struct class_stats s;
  uint64_t in_use;
};

static void cstat(unsigned c, struct cstat *x) {
  class_stats(c, &x->s);
  uint64_t cached = tcache_cached(c);
  x->in_use = x->s.out > cached ? x->s.out - cached : 0;
}

/* The large area's runs less the thread caches' and the arenas' (runs of it too). */
static size_t large_only(const struct span_stats *ss, const struct tcache_stats *ts, const struct arena_totals *at) {
  size_t own = ts->heap_bytes + at->held;
  return ss->large_held > own ? ss->large_held - own : 0;
}

static size_t committed(void) {
  struct span_stats ss;
  span_stats(&ss);
  return os_resident((void *)fm_pool.base, fm_pool.heap_base - fm_pool.base) +
         os_resident((void *)fm_pool.heap_base, ss.top);
}

/* The pool's bytes on huge pages (transparent or hugetlb), its tables included. */
static size_t huge_bytes(void) { return fm_pool.huge_chunks ? os_huge_resident((void *)fm_pool.base, fm_pool.heap_base - fm_pool.base + fm_pool.heap_size) : 0; }

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

static void field(struct fmt *f, const char *name, uint64_t v) {
  fmt_str(f, name);
  fmt_u64(f, v, 0);
}

/* All arenas' totals, each as `before name after value` (the first with `first` for before):
 * the report's form and the JSON's. */
static void arena_fields(struct fmt *f, const struct arena_totals *t, const char *first, const char *before, const char *after) {
  static const char *const names[] = {"live", "created", "held", "peak", "runs_taken", "runs_given", "resets"};
  const uint64_t vals[] = {t->live, t->made, t->held, t->held_peak, t->taken, t->given, t->resets};
  for (unsigned i = 0; i < sizeof vals / sizeof vals[0]; i++) {
    fmt_str(f, i ? before : first);
    fmt_str(f, names[i]);
    fmt_str(f, after);
    fmt_u64(f, vals[i], 0);
  }
}

void flatmalloc_stats_print(void) {
  if (!pool_ready()) return;
  char buf[256];
  struct fmt f = {buf, sizeof buf, 0};
  int pid = os_getpid();
  const size_t chunk = FM_CHUNK;
  line_start(&f, pid);
  fmt_str(&f, "class    size     in_use       peak    spans  peak_spans  reserved  borrows  exhausted");
  line_flush(&f);
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    struct cstat x;
    cstat(c, &x);
    if (!x.s.peak && !x.s.exhausted && !x.s.borrows && !x.s.reserve) continue;
    line_start(&f, pid);
    fmt_u64(&f, c, 5);
    fmt_u64(&f, fm_pool.cls[c].size, 8);
    fmt_u64(&f, x.in_use, 11);
    fmt_u64(&f, x.s.peak, 11);
    fmt_u64(&f, x.s.spans, 9);
    fmt_u64(&f, x.s.spans_peak, 12);
    fmt_u64(&f, x.s.reserve * chunk, 10);
    fmt_u64(&f, x.s.borrows, 9);
    fmt_u64(&f, x.s.exhausted, 11);
    line_flush(&f);
  }
  struct span_stats ss;
  span_stats(&ss);
  struct tcache_stats ts;
  tcache_stats(&ts);
  struct arena_totals at;
  arena_totals(&at);
  line_start(&f, pid);
  field(&f, "large in_use=", large_only(&ss, &ts, &at));
  line_flush(&f);
  line_start(&f, pid);
  field(&f, "threads with_cache=", ts.threads);
  field(&f, " with_tag=", ts.tagged);
  field(&f, " caches_bytes=", ts.bytes);
  field(&f, " most_moved=", ts.most_moved);
  line_flush(&f);
  if (at.made) {   /* a program that made no arena gets the report it always had */
    line_start(&f, pid);
    fmt_str(&f, "arenas");
    arena_fields(&f, &at, " ", " ", "=");
    line_flush(&f);
  }
  line_start(&f, pid);
  field(&f, "pool reserved=", fm_pool.size);
  field(&f, " in_use=", ss.used);
  field(&f, " peak=", ss.used_peak);
  field(&f, " free_with_pages=", ss.dirty);
  field(&f, " committed=", committed());
  field(&f, " returned=", ss.released);
  field(&f, " huge=", huge_bytes());
  line_flush(&f);
}

size_t flatmalloc_stats_json(char *buf, size_t size) {
  struct fmt f = {buf, size, 0};
  if (!pool_ready()) {
    fmt_str(&f, "{}");
    return fmt_end(&f);
  }
  struct span_stats ss;
  span_stats(&ss);
  struct tcache_stats ts;
  tcache_stats(&ts);
  const size_t chunk = FM_CHUNK;
  field(&f, "{\"pid\":", (unsigned)os_getpid());
  field(&f, ",\"pool\":{\"reserved\":", fm_pool.size);
  field(&f, ",\"committed\":", committed());
  field(&f, ",\"in_use\":", ss.used);
  field(&f, ",\"peak\":", ss.used_peak);
  uint64_t cached = 0;
  for (unsigned c = 0; c < fm_pool.nclass; c++) cached += tcache_cached(c) * fm_pool.cls[c].size;
  field(&f, ",\"cached\":", cached);
  field(&f, ",\"free_with_pages\":", ss.dirty);
  field(&f, ",\"returned\":", ss.released);
  field(&f, ",\"huge\":", huge_bytes());
  field(&f, ",\"chunk\":", chunk);
  fmt_str(&f, "},\"classes\":[");
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    struct cstat x;
    cstat(c, &x);
    static const char *const keys[] = {",\"in_use\":", ",\"peak\":", ",\"spans\":", ",\"peak_spans\":",
                                       ",\"reserved\":", ",\"borrows\":", ",\"exhausted\":"};
    uint64_t vals[] = {x.in_use, x.s.peak, x.s.spans, x.s.spans_peak, x.s.reserve * chunk, x.s.borrows, x.s.exhausted};
    field(&f, c ? ",{\"class\":" : "{\"class\":", c);
    field(&f, ",\"size\":", fm_pool.cls[c].size);
    for (unsigned i = 0; i < sizeof vals / sizeof vals[0]; i++) field(&f, keys[i], vals[i]);
    fmt_str(&f, "}");
  }
  struct arena_totals at;
  arena_totals(&at);
  field(&f, "],\"large\":{\"in_use\":", large_only(&ss, &ts, &at));
  field(&f, "},\"threads\":{\"with_cache\":", ts.threads);
  field(&f, ",\"with_tag\":", ts.tagged);
  field(&f, ",\"caches_bytes\":", ts.bytes);
  field(&f, ",\"most_moved\":", ts.most_moved);
  fmt_str(&f, "},\"arenas\":{");
  arena_fields(&f, &at, "\"", ",\"", "\":");
  fmt_str(&f, "}}");
  return fmt_end(&f);
}

struct mallinfo2 flatmalloc_mallinfo2(void) {
  struct mallinfo2 mi;
  memset(&mi, 0, sizeof mi);
  if (!pool_ready()) return mi;
  check_release_queued();   /* memcheck: queued frees count as free */
  tcache_collect();         /* blocks other threads freed for this one */
  size_t used = 0, free_blocks = 0;
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    struct cstat x;
    cstat(c, &x);
    used += x.in_use * fm_pool.cls[c].size;
    uint64_t room = x.s.spans * fm_pool.cls[c].nblocks;
    if (room > x.in_use) free_blocks += room - x.in_use;   /* a borrowed block is out of another class's span */
  }
  struct span_stats ss;
  span_stats(&ss);
  struct tcache_stats ts;
  tcache_stats(&ts);
  size_t large = ss.large_held - ts.heap_bytes;   /* the thread caches' runs are the allocator's own */
  mi.arena = ss.used - ts.heap_bytes + ss.free;
  mi.uordblks = used + large - check_held_bytes();   /* memcheck's held-back blocks are free */
  mi.fordblks = mi.arena - mi.uordblks;
  /* free chunks: the classes' free blocks, and the free runs as one (as glibc counts its top
   * chunk); never 0 while fordblks is not (Valgrind's mallinfo test), nor the other way */
  size_t chunks = free_blocks + (ss.free != 0);
  mi.ordblks = !mi.fordblks ? 0 : chunks ? chunks : 1;
  mi.hblkhd = large;
  mi.keepcost = ss.dirty;
  return mi;
}

struct mallinfo flatmalloc_mallinfo(void) {
  struct mallinfo2 m2 = flatmalloc_mallinfo2();
  struct mallinfo mi;
  memset(&mi, 0, sizeof mi);
  mi.arena = (int)m2.arena;
  mi.ordblks = (int)m2.ordblks;
  mi.hblkhd = (int)m2.hblkhd;
  mi.uordblks = (int)m2.uordblks;
  mi.fordblks = (int)m2.fordblks;
  mi.keepcost = (int)m2.keepcost;
  return mi;
}

__attribute__((destructor)) static void stats_at_exit_hook(void) {
  if (pool_ready() && fm_pool.opt.stats) flatmalloc_stats_print();
}
