/* Runs of chunks: the heap's page-level allocator (types.h, RUN). Every run, free or not, is
 * described by the records of its first and last chunk, out of the heap: nothing here reads
 * or writes the memory it manages, except madvise giving its pages back.
 *
 * Free runs are indexed by length (two-level segregated fit: a bitmap of first levels, one of
 * second levels per first level; two such indexes, runs that may hold pages searched first),
 * so a good fit is found in O(1) and a released run merges with both neighbours in O(1). A
 * run never merges with the untouched space above top; a request that fits no list grows the
 * free run that ends at top, or is cut from top.
 *
 * Pages. A bit per chunk says it may hold pages (it was handed out and has not been given back
 * since). Free runs that may hold pages wait in a FIFO, oldest first; a run taken where no page
 * was gives back as many chunks of those old enough (release_for_fresh); when the chunks they
 * hold pass the budget, each free or take of a run gives back pages of the oldest runs: at most
 * twice the chunks it moved plus RELEASE_CHUNKS, scanning at most RELEASE_WORDS words of the
 * bitmap, so a call's work stays proportional to its run, and what is over the budget drains
 * over the next calls. The budget is max(FLATMALLOC_RETAIN, twice the chunks in use, the most
 * chunks in use in this window and the one before), windows being FLATMALLOC_RETAIN_DELAY long:
 * a heap that shrinks keeps the pages it needed a moment ago for between one and two delays, so
 * a program that frees all and allocates it again faults no page in, and one that stays small
 * gets them back. The clock is read when a free run joins the FIFO, when a run is taken where
 * no page was while free runs hold pages, and when the pages are over the rest of the budget;
 * no thread runs in the background, so the pages go back on the next calls after the delay, or
 * on malloc_trim.
 */
#include <sched.h>
#include <string.h>

#include "internal.h"
#include "os.h"

#define SL_BITS 4u
#define SL_COUNT (1u << SL_BITS)
#define FL_COUNT 32u
#define RELEASE_CHUNKS 32u    /* chunks a release may give back beyond the ones it freed */
#define RELEASE_WORDS 64u     /* bitmap words one release may scan */

/* Where a run may lie. Where the heap lies on huge pages (past huge_from), each of its huge
 * pages is DENSE (advised onto huge pages) or SPARSE (advised off them); below, BASE. Spans of
 * the classes up to FM_DENSE_MAX, large blocks of a huge page or more and arena slabs are
 * dense: their memory is written as it is handed out. The rest are sparse: a program may write
 * one word of a 48 KiB block, and on a huge page all of its 2 MiB would be resident
 * (stress-ng's malloc stressor: 290 MB against 168 on base pages). A free run lies in one zone
 * and merges only within it; a huge page changes kind only while no run uses it (convert). */
enum { Z_BASE, Z_DENSE, Z_SPARSE, ZONES };
enum { K_DENSE, K_SPARSE };   /* H.kinds: fresh meta reads K_DENSE, as pool.c advises the heap */

static struct {
  pthread_mutex_t lock;
  uint64_t *pages;           /* bit per chunk: may hold pages */
  uint32_t nchunks, top;     /* [top, nchunks) was never handed out */
  uint32_t quarantine;       /* runs that start below it belong to a forked parent */
  uint32_t committed;        /* chunks made accessible (strict overcommit) */
  uint32_t fl_map[ZONES][2];            /* per zone, [0]: free runs without pages, [1]: with (RUN_WARM) */
  uint32_t sl_map[ZONES][2][FL_COUNT];
  uint32_t heads[ZONES][2][FL_COUNT][SL_COUNT];   /* chunk index + 1 */
  uint8_t *kinds;                       /* per huge page from hp_first: K_DENSE or K_SPARSE */
  uint32_t hp_first;                    /* the first chunk that starts a huge page */
  unsigned hp_shift;                    /* log2 of the huge page in chunks */
  uint32_t oldest, newest;              /* release FIFO, chunk index + 1 */
  uint64_t used, used_peak, listed, dirty, released;
  uint64_t retain;                      /* chunks */
  bool keep;                            /* pages never go back (span_set_retain) */
  bool opening;                         /* a thread opens the next step (unlock_opening_ahead) */
  uint64_t delay, window;               /* ms: FLATMALLOC_RETAIN_DELAY; when this window began */
  uint64_t peak_now, peak_before;       /* the most chunks in use in this window, in the one before */
  uint64_t trimmed;                     /* ms: the last full malloc_trim (span_trim_full), 0: none */
  uint64_t held[FM_CLASS_MAX + 1], reserve[FM_CLASS_MAX + 1];
  uint64_t outstanding;                 /* sum of max(0, reserve - held) */
} H = {.lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP};

static struct fm_run *R(uint32_t i) { return span_rec(i); }
static uint32_t idx1(uint32_t i) { return i + 1; }

/* ---- the pages bitmap -------------------------------------------------------------------- */
static void pages_set(uint32_t from, uint32_t len) {
  for (uint32_t i = from, end = from + len; i < end;) {
    uint32_t w = i / 64, b = i % 64, n = end - i < 64 - b ? end - i : 64 - b;
    __atomic_fetch_or(&H.pages[w], n == 64 ? ~0ull : ((1ull << n) - 1) << b, __ATOMIC_RELAXED);
    i += n;
  }
}

/* Chunks of [from, from+len) whose bit is set. */
static uint32_t pages_count(uint32_t from, uint32_t len) {
  uint32_t n = 0;
  for (uint32_t i = from, end = from + len; i < end;) {
    uint32_t w = i / 64, b = i % 64, k = end - i < 64 - b ? end - i : 64 - b;
    n += (uint32_t)__builtin_popcountll(H.pages[w] & (k == 64 ? ~0ull : ((1ull << k) - 1) << b));
    i += k;
  }
  return n;
}

/* Read under a class's lock, for chunks of its own span, whose bits do not change while the
 * span lives; the word's other bits may (the writers, under H.lock, change them atomically). */
bool span_chunk_dirty(uint32_t i) { return __atomic_load_n(&H.pages[i / 64], __ATOMIC_RELAXED) >> (i % 64) & 1; }

/* ---- reservations ------------------------------------------------------------------------ */
static uint64_t owed(unsigned o) { return H.reserve[o] > H.held[o] ? H.reserve[o] - H.held[o] : 0; }

static void hold(unsigned o, int64_t chunks) {
  H.outstanding -= owed(o);
  H.held[o] += (uint64_t)chunks;
  H.outstanding += owed(o);
}

/* May owner o take `need` more chunks without touching another owner's reservation? */
static bool may_take(unsigned o, uint32_t need) {
  uint64_t avail = H.nchunks - H.used, others = H.outstanding - owed(o);
  return need <= avail && avail - need >= others;
}

/* ---- index ------------------------------------------------------------------------------- */
static void mapping(uint32_t len, unsigned *fl, unsigned *sl) {
  unsigned f = 31u - (unsigned)__builtin_clz(len);
  *fl = f;
  *sl = f < SL_BITS ? len & (SL_COUNT - 1) : (len >> (f - SL_BITS)) & (SL_COUNT - 1);
}

/* ---- huge pages (pool.c's plan: fm_pool.huge_chunks a huge page from chunk huge_from) ------ */
/* Zones are kept where the heap lies on huge pages past huge_from (not where all of the pool
 * does: prefaulted or hugetlb). */
static uint32_t huge_from(void) { return __atomic_load_n(&fm_pool.huge_from, __ATOMIC_RELAXED); }
static bool zoned(void) { return fm_pool.huge_chunks && huge_from(); }
static uint32_t hp_index(uint32_t c) { return (c - H.hp_first) >> H.hp_shift; }
static unsigned zone_of(uint32_t c) {
  if (!zoned() || c < huge_from()) return Z_BASE;
  return H.kinds[hp_index(c)] == K_SPARSE ? Z_SPARSE : Z_DENSE;
}
static bool on_huge(uint32_t c) { return fm_pool.huge_chunks && c >= huge_from() && zone_of(c) != Z_SPARSE; }
/* chunk c's place in its huge page (hp_first starts one; huge pages are a power of two) */
static uint32_t hp_phase(uint32_t c) { return (c - H.hp_first) & (fm_pool.huge_chunks - 1); }
static uint32_t hp_down(uint32_t c) { return c - hp_phase(c); }
static uint32_t hp_up(uint32_t c) { return hp_phase(c) ? hp_down(c) + fm_pool.huge_chunks : c; }

/* The zone of a new run of len chunks for owner (a class, or FM_CLASS_MAX) of the given kind. */
static unsigned zone_for(uint32_t len, unsigned owner, uint8_t kind) {
  if (!zoned()) return Z_BASE;
  bool dense = kind == RUN_ARENA || (kind == RUN_SPAN ? fm_pool.cls[owner].size <= FM_DENSE_MAX : len >= fm_pool.huge_chunks);
  return dense ? Z_DENSE : Z_SPARSE;
}

/* The huge pages [from, to) (whole ones, no run in them) become zone z's: advised onto huge
 * pages or off them, a system call per stretch that changes. */
static void set_zone(uint32_t from, uint32_t to, unsigned z) {
  uint8_t k = z == Z_SPARSE ? K_SPARSE : K_DENSE;
  uint32_t hp = fm_pool.huge_chunks, start = 0;
  bool open = false;
  for (uint32_t c = from;; c += hp) {
    bool change = c < to && H.kinds[hp_index(c)] != k;
    if (change && !open) start = c, open = true;
    if (!change && open) {
      uint32_t e = c < to ? c : to;
      os_advise_huge((void *)(fm_pool.heap_base + ((uintptr_t)start << FM_CHUNK_SHIFT)), (size_t)(e - start) << FM_CHUNK_SHIFT, k == K_DENSE);
      memset(H.kinds + hp_index(start), k, (e - start + hp - 1) >> H.hp_shift);
      open = false;
    }
    if (c >= to) break;
  }
}

/* The chunks of [from, to) (inside one run) whose pages can go back without splitting a huge
 * page that another run may use: all of them below the huge pages, among them the whole huge
 * pages inside. */
void span_whole(uint32_t from, uint32_t to, uint32_t *lo, uint32_t *hi) {
  *lo = from;
  *hi = to;
  if (!on_huge(to - 1)) return;
  if (from >= huge_from()) *lo = hp_up(from);
  *hi = hp_down(to);
  if (*hi < *lo) *hi = *lo;
}

/* The same for the free run [i, end), which may also give back the whole of its last huge page
 * when it ends at top: nothing above top is in use. */
static void givable(uint32_t i, uint32_t end, uint32_t *lo, uint32_t *hi) {
  span_whole(i, end, lo, hi);
  if (end >= H.top && end > *lo) *hi = end;
}

/* Chunks of [from, to), in a huge page that a run just taken lies in, that were held to have
 * no pages: the kernel faults the huge page in whole, so they count as holding pages now (their
 * bits stay clear: never written, they still read as zero, which calloc relies on). */
static uint32_t touched(uint32_t from, uint32_t to) {
  if (from >= to || !on_huge(from)) return 0;
  return to - from - pages_count(from, to - from);
}

static void fifo_remove(uint32_t i) {
  struct fm_run *r = R(i);
  r->flags &= (uint16_t)~RUN_QUEUED;
  if (r->older) R(r->older - 1)->newer = r->newer;
  else if (H.oldest == idx1(i)) H.oldest = r->newer;
  if (r->newer) R(r->newer - 1)->older = r->older;
  else if (H.newest == idx1(i)) H.newest = r->older;
  r->older = r->newer = 0;
}

static void fifo_append(uint32_t i) {
  struct fm_run *r = R(i);
  /* no system call in native code (check.c); no clock where pages never go back (its first
   * read faults the vDSO's data page in) */
  r->since = (uint32_t)(fm_pool.native || H.keep ? H.window : os_clock_ms());
  r->flags |= RUN_QUEUED;
  r->newer = 0;
  r->older = H.newest;
  if (H.newest) R(H.newest - 1)->newer = idx1(i);
  else H.oldest = idx1(i);
  H.newest = idx1(i);
}

/* Marks [i, i+len) a free run and lists it (not merged: the caller did that): with the runs
 * that may hold pages when it may (RUN_WARM, until a release has given them all back), else
 * with those that do not; in the release FIFO when some of them may go back (RUN_QUEUED: not
 * a run that lies in huge pages still partly in use, which keep their pages). */
static void list_insert(uint32_t i, uint32_t len, uint32_t dirty) {
  struct fm_run *r = R(i);
  unsigned fl, sl, w = dirty != 0, z = zone_of(i);
  mapping(len, &fl, &sl);
  *r = (struct fm_run){.len = len, .kind = RUN_FREE, .flags = w ? RUN_WARM : 0, .dirty = dirty, .next = H.heads[z][w][fl][sl]};
  if (r->next) R(r->next - 1)->prev = idx1(i);
  H.heads[z][w][fl][sl] = idx1(i);
  H.fl_map[z][w] |= 1u << fl;
  H.sl_map[z][w][fl] |= 1u << sl;
  R(i + len - 1)->head = i;
  H.listed += len;
  H.dirty += dirty;
  uint32_t lo, hi;
  givable(i, i + len, &lo, &hi);
  if (dirty && lo < hi) fifo_append(i);
}

static void list_remove(uint32_t i) {
  struct fm_run *r = R(i);
  unsigned fl, sl;
  if (r->kind != RUN_FREE || r->len == 0 || i + r->len > H.top)
    fault_stop("the heap's free-run records are damaged", (void *)(fm_pool.heap_base + ((uintptr_t)i << FM_CHUNK_SHIFT)), -1);
  unsigned w = (r->flags & RUN_WARM) != 0, z = zone_of(i);
  mapping(r->len, &fl, &sl);
  if (r->prev) R(r->prev - 1)->next = r->next;
  else H.heads[z][w][fl][sl] = r->next;
  if (r->next) R(r->next - 1)->prev = r->prev;
  if (!H.heads[z][w][fl][sl]) {
    H.sl_map[z][w][fl] &= ~(1u << sl);
    if (!H.sl_map[z][w][fl]) H.fl_map[z][w] &= ~(1u << fl);
  }
  if (r->flags & RUN_QUEUED) fifo_remove(i);
  H.listed -= r->len;
  H.dirty -= r->dirty;
  r->kind = 0;
}

/* A listed run of zone z of at least len chunks, removed from its list; the smallest list
 * whose every run fits, so no list is walked, among the runs that may hold pages first (cold:
 * last): a run that fits and has none would leave those pages resident and fault in new ones.
 * Returns its index + 1, 0 when none. */
static uint32_t list_find(uint32_t len, unsigned z, bool cold_first) {
  unsigned fl, sl;
  uint32_t want = len;
  unsigned f = 31u - (unsigned)__builtin_clz(len);
  if (f >= SL_BITS) want += (1u << (f - SL_BITS)) - 1;   /* round up to the next list */
  if (want < len) return 0;
  mapping(want, &fl, &sl);
  for (unsigned k = 0; k < 2; k++) {
    unsigned l = fl, w = cold_first ? k : 1 - k;
    uint32_t sm = H.sl_map[z][w][l] & (~0u << sl);
    if (!sm) {
      uint32_t fm = l + 1 < FL_COUNT ? H.fl_map[z][w] & (~0u << (l + 1)) : 0;
      if (!fm) continue;
      l = (unsigned)__builtin_ctz(fm);
      sm = H.sl_map[z][w][l];
    }
    uint32_t h = H.heads[z][w][l][__builtin_ctz(sm)];
    list_remove(h - 1);
    return h;
  }
  return 0;
}

/* ---- giving pages back ------------------------------------------------------------------- */
/* Clears the bits of [from, to) and gives their pages back (on huge pages, from where top is
 * to the end of its huge page too); returns the chunks whose bit was set. */
static uint32_t give_back(uint32_t from, uint32_t to) {
  uint32_t freed = 0, end = to;
  if (to == H.top && on_huge(to - 1) && (end = hp_up(to)) > H.nchunks) end = H.nchunks;
  for (uint32_t k = from; k < end;) {
    uint32_t w = k / 64, n = end - k < 64 - k % 64 ? end - k : 64 - k % 64;
    uint64_t mask = n == 64 ? ~0ull : ((1ull << n) - 1) << (k % 64);
    if (k < to) freed += (uint32_t)__builtin_popcountll(H.pages[w] & mask);
    __atomic_fetch_and(&H.pages[w], ~mask, __ATOMIC_RELAXED);
    k += n;
  }
  os_release((void *)(fm_pool.heap_base + ((uintptr_t)from << FM_CHUNK_SHIFT)), (size_t)(end - from) << FM_CHUNK_SHIFT);
  H.released += (uint64_t)freed << FM_CHUNK_SHIFT;
  return freed;
}

/* Run i has given back all it may (givable's [lo, hi)): it leaves the FIFO, and, when no chunk
 * of it holds pages any longer, joins the runs that hold none. */
static void release_done(uint32_t i, uint32_t lo, uint32_t hi) {
  struct fm_run *r = R(i);
  uint32_t end = i + r->len, left = 0;
  if (r->dirty) left = pages_count(i, lo - i) + pages_count(hi, end - hi);   /* the ends in huge pages in use */
  if (left > r->dirty) left = r->dirty;
  H.dirty -= r->dirty - left;
  r->dirty = left;
  if (r->flags & RUN_QUEUED) fifo_remove(i);
  if (!left) {
    uint32_t len = r->len;
    list_remove(i);   /* with the runs that hold no pages now */
    list_insert(i, len, 0);
  }
}

/* Gives back the pages of run i's chunks whose bit is set, scanning at most `words` words of
 * the bitmap and giving back at most `most` chunks (rounded up to whole huge pages there);
 * returns the chunks given back. The run stays listed; its count is updated, and it leaves the
 * FIFO once nothing is left to give. */
static uint32_t release_run(uint32_t i, uint32_t words, uint32_t most) {
  struct fm_run *r = R(i);
  uint32_t lo, end, scanned = 0, freed = 0;
  givable(i, i + r->len, &lo, &end);
  uint32_t c = r->clean > lo ? r->clean : lo;
  while (c < end && scanned < words) {   /* the first chunk that may hold pages */
    uint32_t w = c / 64;
    uint64_t bits = H.pages[w] & (~0ull << (c % 64));
    scanned++;
    if (bits) {
      c = w * 64 + (uint32_t)__builtin_ctzll(bits);
      break;
    }
    c = (w + 1) * 64;
  }
  if (c > end) c = end;
  if (c < end && scanned <= words) {
    /* one madvise from there over up to `most` chunks: chunks without pages in between cost
     * the kernel little, a syscall each would cost a lot more */
    uint32_t stop = end - c < most ? end : c + most;
    if (on_huge(c)) c = hp_down(c);   /* (givable: still at lo or above) */
    if (on_huge(stop - 1) && stop < end) stop = hp_up(stop) < end ? hp_up(stop) : end;
    freed = give_back(c, stop);
    c = stop;
  }
  r->clean = c;   /* below it, nothing is left to give back */
  if (c >= end || freed >= r->dirty) {   /* (dirty counts may overstate: a release finds out) */
    release_done(i, lo, end);
  } else {
    H.dirty -= freed;
    r->dirty -= freed;
  }
  return freed;
}

static void used_add(uint32_t len) {
  H.used += len;
  if (H.used > H.used_peak) H.used_peak = H.used;
  if (H.used > H.peak_now) H.peak_now = H.used;
}

/* Raises budget to the most chunks in use in the last one to two delays. Windows move on only
 * here: one that outlived its delay while nothing was over budget becomes the window before,
 * however long it was, so its peak still counts for one delay from now (kept too long, never
 * too short). */
static uint64_t budget_recent(uint64_t budget) {
  uint64_t now = os_clock_ms();
  if (now - H.window >= H.delay) {
    H.peak_before = H.peak_now;
    H.peak_now = H.used;
    H.window = now;
  }
  uint64_t peak = H.peak_now > H.peak_before ? H.peak_now : H.peak_before;
  return peak > budget ? peak : budget;
}

/* The budget; the recent peak (and the clock) only when the pages are over the rest of it. */
static uint64_t budget_now(void) {
  uint64_t budget = H.retain > 2 * H.used ? H.retain : 2 * H.used;
  return H.dirty > budget && H.delay ? budget_recent(budget) : budget;
}

/* A run taken where no page was (above top, or given back) while free runs hold pages means
 * none of those fitted (list_find looks among them first). Those free for longer than
 * FRESH_AGE of FLATMALLOC_RETAIN_DELAY (31 ms of 1 s) give back as many pages, oldest first:
 * the resident heap then grows by what no free run could serve, not by runs left behind that
 * nothing takes again (sqlite's sorter doubles a buffer to 64 MiB, each copy too big for the
 * holes the last ones left), while a program that frees and takes big blocks in turn keeps the
 * pages it takes again a moment later (mimalloc-bench's malloc-large: given back at once, they
 * cost it 2.7x the page faults). */
#define FRESH_AGE 32u   /* a 32nd */
static void release_for_fresh(uint32_t fresh) {
  if (fm_pool.native || H.keep || !H.oldest || !fresh) return;
  uint32_t now = (uint32_t)os_clock_ms();
  for (unsigned k = 0; k < 2 && H.oldest && fresh; k++) {
    if (now - R(H.oldest - 1)->since < H.delay / FRESH_AGE) return;
    uint32_t got = release_run(H.oldest - 1, RELEASE_WORDS + fresh / 32, fresh);
    fresh = got < fresh ? fresh - got : 0;
  }
}

static void release_over_budget(uint32_t moved) {
  if (fm_pool.native || H.keep) return;   /* no system call in native code (check.c): pages stay until malloc_trim */
  uint64_t budget = budget_now();
  uint32_t most = 2 * moved + RELEASE_CHUNKS;   /* the excess grows by up to twice what is freed */
  for (unsigned k = 0; k < 2 && H.dirty > budget && H.oldest && most; k++) {
    uint32_t got = release_run(H.oldest - 1, RELEASE_WORDS + moved / 32, most);
    most = got < most ? most - got : 0;
  }
}

/* The heap's lock: the one lock every thread may take (a span or large block taken or given
 * back), which the instrumented build counts apart. */
static void heap_lock(void) {
  fm_count(CNT_HEAP);
  fm_lock(&H.lock);
}

/* ---- runs -------------------------------------------------------------------------------- */
/* Where the pages holding entries [0, to) of an array of per-chunk entries of `each` bytes
 * end: past `huge` (an address, 0: nowhere) whole huge pages. */
static uintptr_t entries_end(const void *array, size_t each, uint32_t to, uintptr_t huge) {
  uintptr_t page = os_page_size(), hi = ((uintptr_t)array + to * each + page - 1) & ~(page - 1);
  if (huge && hi > huge) page = (uintptr_t)fm_pool.huge_chunks << FM_CHUNK_SHIFT, hi = (hi + page - 1) & ~(page - 1);
  return hi;
}

/* open: makes entries [from, to) accessible; else inaccessible the pages past those an opening
 * up to `from` opened (then `from` is such an opening's `to`) that hold no entry past `to`'s
 * (a page the table shares with what follows it stays). */
static bool commit_entries(const void *array, size_t each, uint32_t from, uint32_t to, uintptr_t huge, bool open) {
  uintptr_t page = os_page_size(), at = (uintptr_t)array;
  uintptr_t lo = open ? (at + from * each) & ~(page - 1) : entries_end(array, each, from, huge);
  uintptr_t hi = open ? entries_end(array, each, to, huge) : (at + to * each) & ~(page - 1);
  return hi <= lo || os_protect((void *)lo, hi - lo, open);
}

/* Where an opening that must reach chunk `to` stops: 1 MiB steps, whole huge pages on them (a
 * first touch finds all of its huge page open). */
static uint32_t commit_want(uint32_t to) {
  uint32_t step = (uint32_t)((1u << 20) >> FM_CHUNK_SHIFT);
  uint32_t want = on_huge(to - 1) ? hp_up(to) : (to + step - 1) / step * step;
  if (fm_pool.huge_chunks && to <= huge_from() && want > huge_from()) want = huge_from();
  return want < H.nchunks ? want : H.nchunks;
}

/* Opens the heap's chunks [from, want) and their per-chunk tables, or (open false, `from` the
 * end of what is open) closes them; touches no state of H, so an opening may run outside the
 * heap's lock (opening what is open already changes nothing). */
static bool commit_set(uint32_t from, uint32_t want, bool open) {
  for (unsigned s = 0; s < FM_SHADOWS; s++)
    if (fm_pool.st_bias[s] && !commit_entries((const void *)(fm_pool.st_bias[s] + (fm_pool.heap_base >> s)),
                                              (size_t)1 << (FM_CHUNK_SHIFT - s), from, want, 0, open))
      return false;
  return commit_entries(fm_pool.chunk, sizeof *fm_pool.chunk, from, want, fm_pool.huge_table, open) &&
         commit_entries(H.pages, 1, open ? from / 8 : (from + 63) / 8, (want + 63) / 8, 0, open) &&
         commit_entries(fm_pool.arenas, FM_ARENA_REC, from / FM_ARENA_CHUNKS + !open, want / FM_ARENA_CHUNKS + 1, 0, open) &&
         os_protect((void *)(fm_pool.heap_base + ((uintptr_t)from << FM_CHUNK_SHIFT)), (size_t)(want - from) << FM_CHUNK_SHIFT, open);
}

static bool commit_open(uint32_t from, uint32_t want) { return !pool_protecting() || commit_set(from, want, true); }

static void commit_raise(uint32_t want) {
  if (want <= H.committed) return;
  H.committed = want;
  __atomic_store_n(&fm_pool.chunks_open, want, __ATOMIC_RELEASE);
}

static bool commit_to(uint32_t to) {
  if (!fm_pool.lazy_commit || to <= H.committed) return true;
  uint32_t want = commit_want(to);
  if (!commit_open(H.committed, want)) return false;
  commit_raise(want);
  return true;
}

/* Called with the heap's lock held, and returns with it released: when top is within a step of
 * the end of what is open, opens the next step with the lock released (one thread at a time),
 * so that a thread that takes a span meanwhile neither waits behind the system calls nor makes
 * them. (A thread that sleeps on this lock is woken onto its waker's CPU, and two threads that
 * start together then share one CPU for milliseconds.) */
static void unlock_opening_ahead(void) {
  uint32_t from = H.committed, want = fm_pool.lazy_commit && from < H.nchunks ? commit_want(from + 1) : from;
  if (H.opening || want <= from || from - H.top >= want - from) {
    fm_unlock(&H.lock);
    return;
  }
  H.opening = true;
  fm_unlock(&H.lock);
  bool ok = commit_open(from, want);
  heap_lock();
  if (ok) commit_raise(want);
  H.opening = false;
  fm_unlock(&H.lock);
}

/* Marks [i, i+len) a run in use of the given kind. */
static void mark_used(uint32_t i, uint32_t len, uint8_t kind, unsigned owner) {
  *R(i) = (struct fm_run){.len = len, .kind = kind, .cls = (uint8_t)owner};
  R(i + len - 1)->head = i;
  used_add(len);
  hold(owner, len);
}

/* Puts back the chunks [i, i+len) beyond what the caller keeps, as a free run (merged with the
 * free run after it, if any). */
static void put_back(uint32_t i, uint32_t len, uint32_t dirty) {
  if (!len) return;
  uint32_t end = i + len;
  if (end < H.top && R(end)->kind == RUN_FREE && zone_of(end) == zone_of(i)) {
    uint32_t n = R(end)->len, d = R(end)->dirty;
    list_remove(end);
    len += n;
    dirty += d;
  }
  list_insert(i, len, dirty);
}

/* Whole huge pages of the other kind's free runs, enough for len chunks, become zone z's (a
 * free run of them in z's lists): from a run that holds them, among those without pages first
 * (a huge page's pages stay mapped as they are when its kind changes). False when none does. */
static bool convert(uint32_t len, unsigned z) {
  uint32_t hp = fm_pool.huge_chunks, need = (len + hp - 1) & ~(hp - 1);
  if (need < len || need + hp - 1 < need) return false;
  uint32_t h = list_find(need + hp - 1, z == Z_DENSE ? Z_SPARSE : Z_DENSE, true);
  if (!h) return false;
  uint32_t i = h - 1, end = i + R(i)->len, dirty = R(i)->dirty, lo = hp_up(i), hi = lo + need;
  uint32_t front = pages_count(i, lo - i), mid = pages_count(lo, need);   /* (the front: less than a huge page) */
  uint32_t back = dirty > front + mid ? dirty - front - mid : 0;   /* an upper bound, as dirty is */
  if (lo > i) list_insert(i, lo - i, front);
  if (end > hi) list_insert(hi, end - hi, back < end - hi ? back : end - hi);
  set_zone(lo, hi, z);
  list_insert(lo, need, mid);
  return true;
}

/* The heap grows past huge_from: the huge pages from top's next one to huge_from, never used
 * (nor opened, where the heap is opened as used), go on huge pages as those above do. Else the
 * program's first large block would take the huge pages while the spans handed out after it
 * filled the base pages below, and a heap this large gains from huge pages in all of it. */
static void huge_lower(uint32_t top) {
  uint32_t old = huge_from(), open = fm_pool.lazy_commit && H.committed > top ? H.committed : top;
  uint32_t from = hp_up(open) ? hp_up(open) : fm_pool.huge_chunks;
  if (from < old && os_advise_huge((void *)(fm_pool.heap_base + ((uintptr_t)from << FM_CHUNK_SHIFT)), (size_t)(old - from) << FM_CHUNK_SHIFT, true))
    __atomic_store_n(&fm_pool.huge_from, from, __ATOMIC_RELAXED);   /* large_calloc reads it unlocked */
}

/* Where a run of len chunks of zone z may start at top: there, unless it would cross from below
 * huge_from into the huge pages (then huge_from comes down to top's next huge page, and the run
 * starts there) or top's huge page holds another zone's runs (then at the next one). */
static uint32_t zone_start(uint32_t top, uint32_t len, unsigned z) {
  if (z == Z_BASE) return top;
  if (top < huge_from() && top + len > huge_from()) huge_lower(top);
  if (top < huge_from()) return top + len <= huge_from() ? top : huge_from();
  return hp_phase(top) && zone_of(top) != z ? hp_up(top) : top;
}

/* Can the free run t that ends at top grow into a run of len chunks of zone z? */
static bool tail_fits(uint32_t t, uint32_t len, unsigned z) {
  unsigned tz = zone_of(t);
  return tz == z || (tz == Z_BASE && t + len <= huge_from());
}

/* Takes len chunks for owner from listed free run i (removed from its list). */
static uint32_t take_listed(uint32_t i, uint32_t len, unsigned owner, uint8_t kind) {
  uint32_t have = R(i)->len, dirty = R(i)->dirty, clean = R(i)->clean, at = i;
  /* On huge pages: from the front, unless the run's front lies in a huge page in use that
   * cannot hold the request and its back can: then from the back, so the whole huge pages
   * between stay whole. */
  if (on_huge(i + have - 1) && i + have < H.top) {
    uint32_t front = hp_up(i) - i, back = hp_phase(i + have);
    if (front < len && back >= len && back < have) at = i + have - len;
  }
  uint32_t rest = have - len, had = pages_count(at, len);
  uint32_t left = dirty > had ? dirty - had : 0;   /* still an upper bound */
  if (left > rest) left = rest;
  uint32_t fresh = len - had;
  if (at == i) {
    /* From the front, though a release gives pages back from the front too: cut from the
     * back, runs freed later merge in front of the rest and reset its clean mark, so each
     * release scans only the given-back front (RELEASE_WORDS) and the excess stops draining. */
    uint32_t edge = on_huge(i + len) && hp_up(i + len) < i + have ? hp_up(i + len) : i + have;
    uint32_t more = touched(i + len, edge);   /* the rest of the huge page it ends in */
    put_back(i + len, rest, left + more < rest ? left + more : rest);
    fresh += more;
    if (rest && clean > i + len) R(i + len)->clean = clean;   /* the rest's front went back */
  } else {
    uint32_t more = touched(hp_down(at) > i ? hp_down(at) : i, at);   /* the rest of the huge page it starts in */
    list_insert(i, rest, left + more < rest ? left + more : rest);
    R(i)->clean = clean < at ? clean : at;
    fresh += more;
  }
  mark_used(at, len, kind, owner);
  release_for_fresh(fresh);
  return at;
}

/* Takes len chunks of zone z at top, growing the free run that ends there when it lies in z;
 * -1 when the pool has no room above. */
static int64_t take_top(uint32_t len, unsigned owner, uint8_t kind, unsigned z) {
  uint32_t top = H.top, i = top, t = top, tail_dirty = 0;
  if (top > H.quarantine) {
    uint32_t x = R(top - 1)->head;
    if (x >= H.quarantine && x < top && R(x)->kind == RUN_FREE) t = x;
  }
  if (t < top && R(t)->len + (H.nchunks - top) >= len && tail_fits(t, len, z)) {
    tail_dirty = R(t)->dirty;
    list_remove(t);
    i = t;
  } else {
    i = zone_start(top, len, z);
    if (i > H.nchunks || H.nchunks - i < len) i = top;   /* no room past z's start: at top, in top's zone */
  }
  /* the zone the run lies in: that of its start, or z in huge pages no run uses yet; it may not
   * cross from below huge_from into them */
  unsigned rz = i < huge_from() || hp_phase(i) || i < top ? zone_of(i) : z;
  if (H.nchunks - i < len || (rz == Z_BASE && zoned() && i + len > huge_from() && i < huge_from()) ||
      !commit_to(i + len)) {
    if (i < top) list_insert(i, top - i, tail_dirty);
    return -1;
  }
  if (i > top) {   /* the rest of top's huge page, or of the base pages, stays free in its zone */
    uint32_t gap = i - top, d = touched(top, i);
    if (t < top && zone_of(t) == zone_of(top)) {
      gap += top - t;
      d += R(t)->dirty;
      list_remove(t);
      top = t;
    }
    list_insert(top, gap, d);
    H.top = i;
  }
  if (rz != Z_BASE && i + len > huge_from()) {   /* huge pages above top become rz's */
    uint32_t from = hp_up(H.top > huge_from() ? H.top : huge_from()), to = hp_up(i + len);
    if (from < to) set_zone(from, to < H.nchunks ? to : H.nchunks, rz);
  }
  uint32_t fresh = len - pages_count(i, len), end = i + len, more = 0;
  if (on_huge(end)) {   /* the rest of the huge page the run ends in is touched with it, above top too */
    uint32_t stop = hp_up(end) < H.nchunks ? hp_up(end) : H.nchunks, hi = end > H.top ? end : H.top;
    more = touched(end, stop < hi ? stop : hi);   /* in the rest of the tail run */
    if (more > hi - end) more = hi - end;
    fresh += stop > hi ? touched(hi, stop) : 0;
  }
  if (end > H.top) H.top = end;
  else put_back(end, H.top - end, tail_dirty + more);   /* a good fit skips runs of its own list */
  mark_used(i, len, kind, owner);
  release_for_fresh(fresh + more);
  return i;
}


/* A run of len chunks for owner, the index of its first chunk, or -1 (errno untouched): from
 * the free runs of its zone, or below huge_from, or of whole huge pages the other zone gives up,
 * or at top; with the pool nearly full, from the other zone's runs (a dense run then lies on
 * base pages, a sparse one maybe in a huge page) rather than fail. */
static int64_t take(uint32_t len, unsigned owner, uint8_t kind) {
  if (!may_take(owner, len)) return -1;
  unsigned z = zone_for(len, owner, kind);
  uint32_t h = list_find(len, z, false);
  if (!h && z != Z_BASE) h = list_find(len, Z_BASE, false);
  if (!h && z != Z_BASE && convert(len, z)) h = list_find(len, z, false);
  if (h) return take_listed(h - 1, len, owner, kind);
  int64_t i = take_top(len, owner, kind, z);
  if (i < 0 && z != Z_BASE && (h = list_find(len, z == Z_DENSE ? Z_SPARSE : Z_DENSE, false))) i = take_listed(h - 1, len, owner, kind);
  return i;
}

/* ---- interface --------------------------------------------------------------------------- */
void span_setup(uint64_t *pages, uint8_t *kinds, uint32_t nchunks, uint64_t retain_bytes) {
  if (fm_pool.realtime) fm_lock_init(&H.lock, true);
  H.pages = pages;
  H.kinds = kinds;
  H.hp_shift = fm_pool.huge_chunks ? (unsigned)__builtin_ctz(fm_pool.huge_chunks) : 0;
  H.hp_first = fm_pool.huge_chunks ? fm_pool.huge_from & (fm_pool.huge_chunks - 1) : 0;
  H.nchunks = nchunks;
  span_set_retain(fm_pool.opt.prefault ? UINT64_MAX : retain_bytes);   /* a prefaulted pool keeps its pages */
  H.delay = fm_pool.opt.retain_delay;
  H.committed = fm_pool.lazy_commit ? 0 : nchunks;   /* the first span commits the first tables */
  __atomic_store_n(&fm_pool.chunks_open, H.committed, __ATOMIC_RELEASE);
  for (unsigned c = 0; c < fm_pool.nclass; c++) H.reserve[c] = fm_pool.cls[c].reserve;
  H.reserve[FM_CLASS_MAX] = (uint64_t)nchunks * fm_pool.opt.large_bp / 10000;
  for (unsigned o = 0; o <= FM_CLASS_MAX; o++) H.outstanding += H.reserve[o];
}

/* The retained budget in bytes; UINT64_MAX: no page ever goes back, malloc_trim's included
 * (the real-time profile, mallopt(M_TRIM_THRESHOLD, -1)). */
void span_set_retain(uint64_t bytes) {
  heap_lock();
  H.keep = bytes == UINT64_MAX;
  H.retain = H.keep ? UINT64_MAX : bytes >> FM_CHUNK_SHIFT;
  fm_unlock(&H.lock);
}

static int64_t alloc_kind(uint32_t len, unsigned owner, uint8_t kind) {
  heap_lock();
  int64_t i = take(len, owner, kind);
  if (i >= 0) release_over_budget(len);
  unlock_opening_ahead();
  return i;
}

int64_t span_alloc(uint32_t len, unsigned owner, bool large) { return alloc_kind(len, owner, large ? RUN_LARGE : RUN_SPAN); }

/* An arena's slab: held as a large block is (the large area's reservation and count). */
int64_t span_alloc_arena(uint32_t len) { return alloc_kind(len, FM_CLASS_MAX, RUN_ARENA); }

/* Run for a large block whose address is a multiple of align (a power of two above the chunk). */
int64_t span_alloc_aligned(uint32_t len, size_t align) {
  uint32_t align_chunks = (uint32_t)(align >> FM_CHUNK_SHIFT);
  heap_lock();
  int64_t i = take(len + align_chunks - 1, FM_CLASS_MAX, RUN_LARGE);
  if (i >= 0) {
    uintptr_t at = fm_pool.heap_base + ((uintptr_t)i << FM_CHUNK_SHIFT);
    uint32_t a = (uint32_t)((((at + align - 1) & ~(uintptr_t)(align - 1)) - fm_pool.heap_base) >> FM_CHUNK_SHIFT);
    uint32_t have = R((uint32_t)i)->len, front = a - (uint32_t)i, back = have - front - len;
    /* give back what lies before and after the aligned part */
    H.used -= front + back;
    hold(FM_CLASS_MAX, -(int64_t)(front + back));
    *R(a) = (struct fm_run){.len = len, .kind = RUN_LARGE, .cls = FM_CLASS_MAX};
    R(a + len - 1)->head = a;
    put_back(a + len, back, back);   /* counted as holding pages: a release finds out */
    if (front) list_insert((uint32_t)i, front, front);
    i = a;
    release_over_budget(len);
  }
  fm_unlock(&H.lock);
  return i;
}

/* Releases the run at i (a span, large block or arena run) and merges it with free neighbours. */
void span_free(uint32_t i) {
  heap_lock();
  if (i < H.quarantine) goto out;   /* a parent's run: leave it alone */
  struct fm_run *r = R(i);
  uint32_t len = r->len, freed = len;
  unsigned owner = r->cls;
  H.used -= len;
  hold(owner, -(int64_t)len);
  pages_set(i, len);
  uint32_t dirty = len, behind = 0;
  unsigned z = zone_of(i);
  if (i + len < H.top && R(i + len)->kind == RUN_FREE && zone_of(i + len) == z) {
    uint32_t n = i + len;
    if (R(n)->clean > n) behind = R(n)->clean;   /* its front was given back */
    dirty += R(n)->dirty;
    len += R(n)->len;
    list_remove(n);
  }
  uint32_t clean = 0;
  if (i > H.quarantine) {
    uint32_t p = R(i - 1)->head;
    if (p >= H.quarantine && p < i && R(p)->kind == RUN_FREE && p + R(p)->len == i && zone_of(p) == z) {
      dirty += R(p)->dirty;
      len += R(p)->len;
      clean = R(p)->clean;   /* what a release already gave back stays given back */
      behind = 0;
      list_remove(p);
      i = p;
    }
  }
  list_insert(i, len, dirty);
  R(i)->clean = clean;
  /* Merged in front of a given-back front, the run would hide it from the releases' bounded
   * scan, and a heap freed downwards would never drain: over budget, its pages go now. */
  if (behind && !fm_pool.native && !H.keep && H.dirty > budget_now() && release_run(i, 1, freed) == freed) R(i)->clean = behind;
  release_over_budget(freed);
out:
  fm_unlock(&H.lock);
}

/* Grows (into the free run after it, or top) or shrinks the large run at i to len chunks. */
bool span_resize(uint32_t i, uint32_t len) {
  bool ok = false;
  heap_lock();
  struct fm_run *r = R(i);
  uint32_t have = r->len, end = i + have;
  if (i < H.quarantine) goto out;
  if (len <= have) {
    H.used -= have - len;
    hold(FM_CLASS_MAX, -(int64_t)(have - len));
    r->len = len;
    R(i + len - 1)->head = i;
    pages_set(i + len, have - len);
    put_back(i + len, have - len, have - len);
    ok = true;
    goto out;
  }
  uint32_t more = len - have;
  unsigned z = zone_of(i);
  if (!may_take(FM_CLASS_MAX, more)) goto out;
  if (end == H.top) {
    /* into the huge pages above top, which become its zone's; not from below huge_from */
    if (H.nchunks - end >= more && (z != Z_BASE || !zoned() || i + len <= huge_from()) && commit_to(i + len)) {
      if (z != Z_BASE && hp_up(end) < i + len) set_zone(hp_up(end), hp_up(i + len) < H.nchunks ? hp_up(i + len) : H.nchunks, z);
      H.top = i + len;
      ok = true;
    }
  } else if (R(end)->kind == RUN_FREE && R(end)->len >= more && zone_of(end) == z) {
    uint32_t n = R(end)->len, d = R(end)->dirty;
    list_remove(end);
    put_back(i + len, n - more, d < n - more ? d : n - more);
    ok = true;
  }
  if (ok) {
    r->len = len;
    R(i + len - 1)->head = i;
    used_add(more);
    hold(FM_CLASS_MAX, more);
    release_for_fresh(more - pages_count(end, more));
  }
out:
  fm_unlock(&H.lock);
  return ok;
}

/* The kind of the run that holds chunk i, found by walking the runs from the bottom: for fault
 * reports only (a middle chunk's record is stale). 0 above top, below a forked parent's runs,
 * or when the records are damaged. */
int span_kind_at(uint32_t i) {
  int kind = 0;
  heap_lock();
  for (uint32_t j = H.quarantine; i >= H.quarantine && j < H.top;) {
    struct fm_run *r = R(j);
    if (!r->len || r->len > H.top - j) break;
    if (i < j + r->len) {
      kind = r->kind;
      break;
    }
    j += r->len;
  }
  fm_unlock(&H.lock);
  return kind;
}

/* Whether this malloc_trim is a full one (api.c: the caches emptied into their spans, and the
 * free runs in huge pages still partly in use given back, which splits them): the first, and
 * then one a FLATMALLOC_RETAIN_DELAY at most. A program that calls malloc_trim again and again
 * (stress-ng's malloc stressor, one call in eight) would otherwise split huge pages at 0.4 ms
 * each and keep no block cached; between full ones a call gives back what free runs' pages may
 * go back whole. */
bool span_trim_full(void) {
  if (H.keep || fm_pool.native) return true;   /* (no clock: nothing goes back there, and its first read faults) */
  heap_lock();
  uint64_t now = os_clock_ms();
  bool full = !H.trimmed || now - H.trimmed >= H.delay;
  if (full) H.trimmed = now ? now : 1;
  fm_unlock(&H.lock);
  return full;
}

/* malloc_trim: every free page that may go back without splitting a huge page goes back,
 * oldest runs first; with full, then also those of free runs in huge pages still partly in
 * use (the kernel maps the rest of such a huge page with base pages). */
int span_trim(bool full) {
  heap_lock();
  int any = H.dirty != 0 && !H.keep;
  while (any && H.oldest) release_run(H.oldest - 1, UINT32_MAX, UINT32_MAX);
  for (unsigned z = 0; full && any && z < ZONES; z++)
    while (H.fl_map[z][1]) {
      unsigned fl = (unsigned)__builtin_ctz(H.fl_map[z][1]), sl = (unsigned)__builtin_ctz(H.sl_map[z][1][fl]);
      uint32_t i = H.heads[z][1][fl][sl] - 1, len = R(i)->len;
      give_back(i, i + len);
      list_remove(i);
      list_insert(i, len, 0);
    }
  fm_unlock(&H.lock);
  return any;
}

/* In a forked child the lock may have been held by a thread that no longer exists, in the
 * middle of changing the lists. Then the child cannot trust the lists: it abandons them (and
 * the parent's free runs, a copy-on-write loss only) and carries on above top. Taking the lock
 * in a prepare handler instead would deadlock against glibc's stdio locks, which fork takes
 * after the prepare handlers. */
void span_after_fork(void) {
  H.opening = false;   /* (its thread is gone) */
  if (!fm_lock_held(&H.lock)) return;
  fm_lock_init(&H.lock, true);
  H.quarantine = H.top;
  memset(H.fl_map, 0, sizeof H.fl_map);
  memset(H.sl_map, 0, sizeof H.sl_map);
  memset(H.heads, 0, sizeof H.heads);
  H.oldest = H.newest = 0;
  H.listed = H.dirty = 0;
}

void span_stats(struct span_stats *s) {
  heap_lock();
  const unsigned shift = FM_CHUNK_SHIFT;
  *s = (struct span_stats){.used = H.used << shift, .used_peak = H.used_peak << shift, .free = H.listed << shift,
                           .dirty = H.dirty << shift, .top = (size_t)H.top << shift, .released = H.released,
                           .large_held = H.held[FM_CLASS_MAX] << shift};
  fm_unlock(&H.lock);
}

/* Whole-heap validator: walks every run below top and every list; they must agree. */
int span_check(void) {
  int faults = 0;
  uint64_t used = 0, listed = 0, dirty = 0;
  heap_lock();
  bool prev_free = false;
  for (uint32_t i = H.quarantine; i < H.top;) {
    struct fm_run *r = R(i);
    if (!r->len || i + r->len > H.top || R(i + r->len - 1)->head != i || !r->kind) {
      faults++;
      break;
    }
    if (r->kind == RUN_FREE) {
      if (prev_free && zone_of(i - 1) == zone_of(i)) faults++;   /* two adjacent free runs of one zone */
      listed += r->len;
      dirty += r->dirty;
    } else {
      used += r->len;
    }
    prev_free = r->kind == RUN_FREE;
    i += r->len;
  }
  for (unsigned z = 0; z < ZONES; z++)
    for (unsigned w = 0; w < 2; w++)
      for (unsigned fl = 0; fl < FL_COUNT; fl++)
        for (unsigned sl = 0; sl < SL_COUNT; sl++) {
          if ((H.heads[z][w][fl][sl] != 0) != !!(H.sl_map[z][w][fl] & (1u << sl))) faults++;
          uint32_t n = 0;
          for (uint32_t h = H.heads[z][w][fl][sl]; h && n <= H.nchunks; h = R(h - 1)->next, n++) {
            unsigned f, s;
            uint32_t i = h - 1, len = R(i)->len;
            mapping(len, &f, &s);
            if (R(i)->kind != RUN_FREE || f != fl || s != sl || !(R(i)->flags & RUN_WARM) != !w || zone_of(i) != z ||
                zone_of(i + len - 1) != z)
              faults++;   /* (a free run lies in one zone) */
          }
        }
  if (listed != H.listed || dirty != H.dirty) faults++;
  if (H.quarantine == 0 && used != H.used) faults++;
  fm_unlock(&H.lock);
  return faults;
}

/* ---- the pool opened ahead (fm_pool.protect unset) ---------------------------------------- */
/* At start-up, when opening is bookkeeping: the heap and its per-chunk tables accessible whole
 * (untouched, they take no memory), so that the heap's growth changes no mapping of the
 * process while its threads fault pages in. */
bool span_open_all(void) { return commit_set(0, H.nchunks, true); }

/* Before the program's mlockall: what the heap has not opened made inaccessible again (after an
 * opening in flight), so that mlockall locks what the heap uses; fm_pool.protect is set already,
 * so every later opening calls mprotect. */
void span_close_unopened(void) {
  heap_lock();
  while (H.opening) {
    fm_unlock(&H.lock);
    sched_yield();
    heap_lock();
  }
  if (H.committed < H.nchunks) commit_set(H.committed, H.nchunks, false);
  fm_unlock(&H.lock);
}
