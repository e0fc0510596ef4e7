/* Thread caches: the slow paths behind fast.h (refill, flush, another thread's block), owner
 * tags (their blocks' way home is remote.c's), the budget on what caches hold, caches in and
 * out (thread start and exit). */
#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <string.h>

#include "internal.h"
#include "os.h"

/* Every thread starts on this empty cache: its arrays are empty and their caps 0, so the first
 * malloc and the first free of a thread take the slow path, which gives it a cache. A thread
 * left without one (the pool full, or under a Valgrind tool) hands out blocks LIVE for no tag
 * (anyone's to free, atomically); the fast path's test of its value never passes. */
struct fm_tcache fm_tc_empty = {.tag = ST_LIVE, .own = ST_NONE};
__thread struct fm_tcache *fm_tc __attribute__((tls_model("initial-exec"))) = &fm_tc_empty;

static pthread_key_t tcache_key;
/* The thread's cache went back at its exit: what other destructors allocate or free after that
 * works on the classes directly, rather than take a cache no destructor would give back. */
static __thread bool tcache_gone __attribute__((tls_model("initial-exec")));

#ifdef FM_COUNTERS
#include "fmt.h"
_Atomic uint64_t fm_counters[CNT_N];

/* The instrumented build's report: one line on stderr at exit. */
__attribute__((destructor)) static void counters_report(void) {
  char buf[160];
  struct fmt f = {buf, sizeof buf, 0};
  static const char *const names[CNT_N] = {"flatmalloc counters: locks=", " waits=", " shared_rmw=", " heap_locks="};
  for (unsigned i = 0; i < CNT_N; i++) {
    fmt_str(&f, names[i]);
    fmt_u64(&f, atomic_load(&fm_counters[i]), 0);
  }
  fmt_str(&f, "\n");
  os_write(2, buf, f.len < f.size ? f.len : f.size - 1);
}
#endif

/* ---- tags: the unused ones oldest first, once FM_TAG_WAIT wait ------------------------------ */
/* A tag goes back at its thread's exit while the thread's blocks may live on (a successor
 * thread inherits them: larson's threads, a pool's workers): their states still name it. Taken
 * again at once by the next new thread, it would send those blocks home to that thread, and
 * two threads' blocks would mix in spans and state lines. So unused tags wait in a FIFO and the
 * oldest is taken once FM_TAG_WAIT wait there: by then what the exited thread left has most
 * likely been freed. Until then a tag never used is taken, if one is left: taking those first
 * would, in a program that keeps starting threads, put every tag's inbox in memory (larson's
 * peak 33 -> 68 MiB, when every exit went to the back of a FIFO of all 250). Taking and giving
 * back happen at a thread's start and exit only: a lock. */
static pthread_mutex_t tags_lock = PTHREAD_MUTEX_INITIALIZER;
static uint16_t tags_fifo[FM_TAGS];   /* unused tags' indexes: fm_pool.tags_free of them from fifo_head, */
static uint32_t fifo_head;            /* ... wrapping at FM_TAGS */

/* a's page's end (a, when it starts one); tag's inbox's first slot */
static uintptr_t page_up(uintptr_t a) { return (a + os_page_size() - 1) & ~(os_page_size() - 1); }
static uintptr_t inbox_at(uint32_t tag) { return (uintptr_t)(fm_pool.inbox + (size_t)tag * fm_pool.inbox_n); }

/* A heap opened as it is used opens a tag's inbox when the tag is first taken (mlockall then
 * locks the inboxes of the threads there were, not of all FM_TAGS). False when the system
 * refuses: the thread runs without a tag. */
static bool inbox_open(uint32_t i) {
  if (!fm_pool.lazy_commit || !pool_protecting()) return true;
  uintptr_t lo = inbox_at(i) & ~(os_page_size() - 1);
  return os_commit((void *)lo, page_up(inbox_at(i + 1)) - lo);
}

/* A tag: a new one while fewer than FM_TAG_WAIT wait to be taken again, else the one that waited
 * longest. A new tag's inbox is opened after the lock is let go (no thread waits behind the
 * system call); when the system refuses, the tag is never handed out. */
static struct fm_tag *tag_pop(void) {
  struct fm_tag *t = NULL;
  bool fresh = false;
  fm_lock(&tags_lock);
  uint32_t used = atomic_load_explicit(&fm_pool.tags_used, memory_order_relaxed);
  uint32_t waiting = atomic_load_explicit(&fm_pool.tags_free, memory_order_relaxed);
  if (used < FM_TAGS && waiting < FM_TAG_WAIT) {
    t = &fm_pool.tags[used];
    fresh = true;
    atomic_store_explicit(&fm_pool.tags_used, used + 1, memory_order_relaxed);
  } else if (waiting) {
    t = &fm_pool.tags[tags_fifo[fifo_head]];
    fifo_head = (fifo_head + 1) % FM_TAGS;
    atomic_fetch_sub_explicit(&fm_pool.tags_free, 1, memory_order_relaxed);
  }
  fm_unlock(&tags_lock);
  if (fresh && !(t->opened = inbox_open(used))) return NULL;
  return t;
}

static void tag_push(struct fm_tag *t) {
  fm_lock(&tags_lock);
  uint32_t n = atomic_load_explicit(&fm_pool.tags_free, memory_order_relaxed);
  tags_fifo[(fifo_head + n) % FM_TAGS] = (uint16_t)(t - fm_pool.tags);
  atomic_store_explicit(&fm_pool.tags_free, n + 1, memory_order_relaxed);
  fm_unlock(&tags_lock);
}

/* Whether tag_pop may find one: a relaxed look, for threads that run without one. */
static bool tag_free(void) {
  return atomic_load_explicit(&fm_pool.tags_free, memory_order_relaxed) ||
         atomic_load_explicit(&fm_pool.tags_used, memory_order_relaxed) < FM_TAGS;
}

static fm_st tag_value(const struct fm_tag *t) { return (fm_st)(ST_OWNED + (t - fm_pool.tags)); }

static uint32_t cached(const struct fm_tcache *tc, unsigned c1) { return (uint32_t)(tc->top[c1] - tc->base[c1]); }
static uint32_t room(const struct fm_tcache *tc, unsigned c1) { return (uint32_t)(tc->lim[c1] - tc->base[c1]); }
/* The most bin c's room may reach: its class's bin_max, or in a cache without long rows (check.c's
 * native one) its packed row. */
static uint32_t bin_most(const struct fm_tcache *tc, unsigned c) {
  uint32_t n = fm_pool.cls[c].bin_max;
  return tc->wide || n < FM_ROW ? n : FM_ROW;
}

/* Moves bin c from its packed row to its long one: a bin starts packed with the others, so a
 * thread that caches a little of many classes touches a few pages, and takes its long row, in
 * pages of its own, once it may hold more. */
static void bin_widen(struct fm_tcache *tc, unsigned c) {
  unsigned c1 = c + 1;
  struct fm_blk *to = tc->wide;
  for (unsigned k = 0; k < c; k++)
    if (fm_pool.cls[k].bin_max > FM_ROW) to += fm_pool.cls[k].bin_max;
  uint32_t n = cached(tc, c1), r = room(tc, c1);
  memcpy(to, tc->base[c1], n * sizeof *to);
  tc->base[c1] = to;
  tc->top[c1] = to + n;
  tc->lim[c1] = to + r;
  tc->row[c1] = (uint16_t)fm_pool.cls[c].bin_max;
}

/* The shard a refill or flush uses now. While no more threads hold a cache than a class has
 * shards, the thread's own (by salt, the lowest free one, so a thread that replaces an exited
 * one works where that one's spans are): threads then share no span and no line of states,
 * wherever the kernel moves them (by the CPU they ran on at a refill, two threads that had
 * swapped CPUs on a busy machine refilled from one shard, and each free then wrote a line the
 * other wrote too). With more, one of the two (by salt) of the CPU the thread
 * runs on (check.c's native calls must not read the thread's storage, where glibc keeps the
 * CPU: they keep to the first two). */
static unsigned shard_at(unsigned salt) {
  if (fm_pool.native) return salt & 1;
  if (atomic_load_explicit(&fm_pool.caches_live, memory_order_relaxed) <= fm_pool.nshards) return salt & (fm_pool.nshards - 1);
  return (os_cpu() * 2 + (salt & 1)) & (fm_pool.nshards - 1);
}

static unsigned shard_now(const struct fm_tcache *tc) { return shard_at(tc->salt); }

/* ---- the budget -------------------------------------------------------------------------- */
/* What this thread's bins may hold, in bytes: tc_total shared by the threads holding a cache,
 * within [FM_TC_MIN, FM_TC_MAX]. Read on slow paths only. */
static uint64_t budget(struct fm_tcache *tc) {
  uint32_t live = atomic_load_explicit(&fm_pool.caches_live, memory_order_relaxed);
  if (live != tc->live_seen) {   /* (a division: only when threads came or went) */
    uint64_t b = fm_pool.tc_total / (live ? live : 1);
    tc->budget = b < FM_TC_MIN ? FM_TC_MIN : b > FM_TC_MAX ? FM_TC_MAX : b;
    tc->live_seen = live;
  }
  return tc->budget < tc->earned ? tc->budget : tc->earned;
}

/* A thread starts with FM_TC_START of room and earns more, doubling, each FM_TC_EARN times its
 * bins could not grow: one that allocates a few hundred blocks and then waits (a pool of idle
 * threads) holds little, one that keeps allocating soon holds its full budget. */
static bool budget_allows(struct fm_tcache *tc, uint64_t want) {
  if (tc->cap_bytes + want <= budget(tc)) return true;
  if (++tc->pressure >= FM_TC_EARN && tc->earned < FM_TC_MAX) {
    tc->earned *= 2;
    tc->pressure = 0;
  }
  return false;
}

/* Gives the oldest n cached blocks of class c back to the class. */
static void bin_flush(struct fm_tcache *tc, unsigned c, uint32_t n) {
  unsigned c1 = c + 1;
  if (!n) return;
  tc->moved += n;
  class_give(c, shard_now(tc), tc->base[c1], n);
  uint32_t left = cached(tc, c1) - n;
  memmove(tc->base[c1], tc->base[c1] + n, left * sizeof *tc->base[c1]);
  tc->top[c1] -= n;
}

/* Sets the room of bin c to n blocks, giving back what no longer fits. */
static void bin_resize(struct fm_tcache *tc, unsigned c, uint32_t n) {
  unsigned c1 = c + 1;
  if (cached(tc, c1) > n) bin_flush(tc, c, cached(tc, c1) - n);
  if (n > tc->row[c1]) bin_widen(tc, c);   /* (n is at most bin_most) */
  tc->cap_bytes -= (uint64_t)room(tc, c1) * fm_pool.cls[c].size;
  tc->cap_bytes += (uint64_t)n * fm_pool.cls[c].size;
  tc->lim[c1] = tc->base[c1] + n;
}

/* Room for `more` blocks of class c in bin c, within the budget: a bin of another class
 * halves to make it, one per call (round robin), so a thread whose size mix drifts keeps
 * caching, and one whose classes all stay busy does not trade whole bins back and forth.
 * Returns whether the room grew. */
static bool bin_grow(struct fm_tcache *tc, unsigned c, uint32_t more) {
  uint64_t want = (uint64_t)more * fm_pool.cls[c].size;
  if (!budget_allows(tc, want)) {
    for (unsigned k = 0; k < fm_pool.nclass; k++) {
      unsigned v = tc->victim < fm_pool.nclass ? tc->victim : 0;
      tc->victim = v + 1;
      if (v != c && room(tc, v + 1)) {
        bin_resize(tc, v, room(tc, v + 1) / 2);
        break;
      }
    }
    if (!budget_allows(tc, want)) return false;
  }
  bin_resize(tc, c, room(tc, c + 1) + more);
  return true;
}

/* ---- the most work one call did ---------------------------------------------------------- */
/* Blocks one slow call moved (between the thread's cache, the classes and other threads'
 * outboxes and inboxes): the real-time profile's bound is checked against the most (stats). */
static _Atomic uint32_t most_moved;

static void work_note(struct fm_tcache *tc) {
  if (tc->taking) return;   /* (counted at the refill's end) */
  uint32_t m = atomic_load_explicit(&most_moved, memory_order_relaxed);
  while (tc->moved > m &&
         !atomic_compare_exchange_weak_explicit(&most_moved, &m, tc->moved, memory_order_relaxed, memory_order_relaxed)) {}
  tc->moved = 0;
}

/* ---- blocks other threads freed, home (remote.c) ------------------------------------------ */
static void put(struct fm_tcache *tc, void *p, unsigned c, fm_st *st);

/* The runs b[0..n) (CACHED, as remote.c's entries hold them) go into to's caches; in the
 * real-time profile a full bin's blocks go to the class instead (no flush inside a refill).
 * Returns the blocks. Each block's first line is fetched for writing meanwhile: the mallocs
 * after the refill hand these blocks out next, and a program that writes a block it gets
 * (xmalloc-test's memset) would otherwise wait for each line in turn, as nothing of ours reads
 * the block before it does. */
static uint32_t home_all(struct fm_tcache *to, const struct fm_blk *b, uint32_t n) {
  uint32_t moved = 0;
  for (uint32_t i = 0; i < n; i++) {
    uintptr_t v = (uintptr_t)b[i].p;
    char *p = remote_block(v);
    unsigned c = remote_class(v);
    uint32_t run = remote_run(v), size = fm_pool.cls[c].size;
    fm_st *st = b[i].st;
    struct fm_blk *top = to->top[c + 1];
    uint32_t k = 0, fits = top < to->lim[c + 1] ? (uint32_t)(to->lim[c + 1] - top) : 0;   /* (no cache: lim == top == NULL) */
    moved += run;
    for (; k < run && k < fits; k++, p += size) {
      __builtin_prefetch(p, 1);
      top[k] = (struct fm_blk){p, st + k};
    }
    to->top[c + 1] = top + k;
    for (; k < run; k++, p += size) {   /* the bin is full */
      __builtin_prefetch(p, 1);
      if (fm_pool.realtime) class_give(c, shard_now(to), &(struct fm_blk){p, st + k}, 1);
      else put(to, p, c, st + k);
    }
  }
  return moved;
}

/* The blocks waiting for tag t, whose holder has fallen behind (remote.c), into tc's caches. */
static void adopt(struct fm_tcache *tc, struct fm_tag *t) {
  struct remote_adoption a;
  if (!remote_adopt_begin(t, &a)) return;
  struct fm_blk b[FM_OUTBOX];
  for (uint32_t n; (n = remote_adopt_take(&a, b, FM_OUTBOX));) tc->moved += home_all(tc, b, n);
}

/* Takes up to `most` blocks of tc's own tag home (inbox first, then its remote stack). */
static void remote_collect(struct fm_tcache *tc, uint32_t most) {
  struct fm_blk b[FM_OUTBOX];
  for (uint32_t n, left = most; left; left -= n) {
    n = remote_take(tc->t, b, left < FM_OUTBOX ? left : FM_OUTBOX);
    if (!n) break;
    n = home_all(tc, b, n);
    tc->moved += n;
  }
}

/* The outbox's last entry is written: its run starts after out_down, with its length. */
static void run_end(struct fm_tcache *tc) {
  if (tc->out_n)
    tc->out[tc->out_n - 1] = (struct fm_blk){(void *)(tc->out_down + tc->out_size + ((uintptr_t)(tc->out_run - 1) << FM_SLOT_RUN)),
                                             (fm_st *)(tc->out_down_st + 1)};
}

static noinline void outbox_flush(struct fm_tcache *tc) {
  if (!tc->out_n) return;
  run_end(tc);
  uint32_t n = tc->out_n;
  tc->moved += tc->out_k;
  tc->out_n = tc->out_k = 0;
  tc->out_up = tc->out_down = 0;   /* no run to lengthen */
  remote_send(tc->out_to, tc->out, n);
}

/* The outbox goes from remote_free: this call's work (a drain of a tag no thread holds takes a
 * class's lock: the thread is inside). */
static noinline void outbox_send(struct fm_tcache *tc) {
  bool outer = block_enter_once();
  outbox_flush(tc);
  work_note(tc);
  block_rest(outer);
}

static void remote_free(struct fm_tcache *tc, fm_st tag, void *p, unsigned c, fm_st *st);

/* remote_free's other cases: no cache (the block is sent alone), or an outbox that holds
 * another owner's blocks (sent first). */
static noinline void remote_free_other(struct fm_tcache *tc, fm_st tag, void *p, unsigned c, fm_st *st) {
  if (tc == &fm_tc_empty)   /* (inside: tcache_free_from takes no empty cache) */
    return remote_send(&fm_pool.tags[tag - ST_OWNED], &(struct fm_blk){(void *)remote_entry(p, c), st}, 1);
  outbox_send(tc);
  remote_free(tc, tag, p, c, st);
}

/* REMOTE block p of the tag whose LIVE value is `tag` goes home: into tc's outbox, which is sent
 * in one step when it holds FM_OUTBOX blocks or another owner's, or tc refills, flushes statistics
 * or exits (so a thread holds at most FM_OUTBOX blocks of others). A block next to the last
 * entry's run, of its class and owner, the one after its end or before its start (its address and
 * its state's the next after or before), lengthens the run: a thread that frees blocks in the
 * order they were handed out (or the reverse) sends one entry for many, and their holder reads one
 * slot. The lengthening is tried first and costs no more instructions than a new entry did before
 * runs (a thread's cache is never the empty one once out_up is set). Every way out is a tail call:
 * no register to save. */
static noinline void remote_free(struct fm_tcache *tc, fm_st tag, void *p, unsigned c, fm_st *st) {
  uintptr_t v = remote_entry(p, c);
  if (v == tc->out_up && (uintptr_t)st == tc->out_up_st && tag == tc->out_tag) {
    tc->out_run++;
    tc->out_up = v + tc->out_size;
    tc->out_up_st++;
  } else if (v == tc->out_down && (uintptr_t)st == tc->out_down_st && tag == tc->out_tag) {
    tc->out_run++;
    tc->out_down = v - tc->out_size;
    tc->out_down_st--;
  } else {
    uint32_t n = tc->out_n;
    if (unlikely(tc == &fm_tc_empty || (n && tc->out_tag != tag))) return remote_free_other(tc, tag, p, c, st);
    run_end(tc);
    uintptr_t size = fm_pool.cls[c].size;
    tc->out_to = &fm_pool.tags[tag - ST_OWNED];
    tc->out_tag = tag;
    tc->out_n = n + 1;   /* (its entry is written by run_end) */
    tc->out_run = 1;
    tc->out_size = size;
    tc->out_up = v + size;
    tc->out_down = v - size;
    tc->out_up_st = (uintptr_t)st + 1;
    tc->out_down_st = (uintptr_t)st - 1;
  }
  if (++tc->out_k == FM_OUTBOX) return outbox_send(tc);
}

/* ---- caches in and out ------------------------------------------------------------------- */
/* Every cache, for the statistics and the validator; changed at thread start and exit only. */
static pthread_mutex_t caches_lock = PTHREAD_MUTEX_INITIALIZER;
static struct fm_tcache *caches;
static uint32_t runs_n;      /* caches in heap runs, under caches_lock */
static uint32_t slots_n;     /* caches in the cache area, likewise */
static uint64_t slots_used[FM_CACHES_MAX / 64];   /* bit i: slot i holds a cache or is warm (caches_lock) */
static uint32_t slots_open;  /* slots below this are open (lazy_commit) */
/* Slots of exited threads that kept their pages, the latest last (caches_lock): the next new
 * threads take them first, so a program that keeps starting short threads faults in no cache
 * and gives none back (mimalloc-bench's mleak: 5,000 threads, a madvise and two faults each). */
static uint32_t warm[FM_WARM_SLOTS], warm_n;
/* Salts below 64 in use (bit s), under caches_lock: a new cache takes the lowest free one. */
static uint64_t salts_used;
static uint16_t salts_next = 64;   /* the next salt once all 64 are in use */
static uint32_t tags_held;   /* threads holding a tag (atomic) */

/* Adds d to a count the statistics read beside the other (caches_live, tags_held), under
 * caches_lock as tcache_stats reads them: a thread counts its cache before its tag and drops
 * its tag before its cache, so no reading has more threads with a tag than with a cache. */
static void count_add(_Atomic uint32_t *live, uint32_t *tags, int32_t d) {
  fm_lock(&caches_lock);
  if (live) atomic_fetch_add_explicit(live, (uint32_t)d, memory_order_relaxed);
  if (tags) __atomic_fetch_add(tags, (uint32_t)d, __ATOMIC_RELAXED);
  fm_unlock(&caches_lock);
}

/* Gives tc a tag: its blocks from now on carry the tag's LIVE value and it frees them with
 * plain stores. The blocks it handed out before stay LIVE for anyone. */
static void tag_take(struct fm_tcache *tc) {
  struct fm_tag *t = tag_pop();
  if (!t) return;
  if (!remote_hold(t, tc)) {   /* another thread takes its blocks now: another time */
    tag_push(t);
    return;
  }
  tc->t = t;
  tc->tag = tc->own = tag_value(t);
  count_add(NULL, &tags_held, 1);
}

static void tag_drop(struct fm_tcache *tc) {
  struct fm_tag *t = tc->t;
  if (!t) return;
  tc->t = NULL;
  tc->tag = ST_LIVE;
  tc->own = ST_NONE;
  remote_release(t);   /* what other threads free for it, now and after, goes back to the spans */
  tag_push(t);
  count_add(NULL, &tags_held, -1);
}

/* Bytes of a cache's rows before the long ones; of a cache with the classes of o (pool.c lays
 * the cache area out with it); and chunks of a cache's run in the heap. */
static size_t packed_bytes(unsigned nclass) { return offsetof(struct fm_tcache, b) + (size_t)nclass * FM_ROW * sizeof *fm_tc_empty.b; }

size_t tcache_bytes(const struct fm_options *o) {
  size_t bytes = packed_bytes(o->nclass);
  for (unsigned c = 0; c < o->nclass; c++) {
    uint32_t most = class_bin_max(o->class_size[c]);
    if (most > FM_ROW) bytes += most * sizeof *fm_tc_empty.b;
  }
  return bytes;
}

static uint32_t cache_chunks(void) { return (uint32_t)((fm_pool.cache_bytes + FM_CHUNK - 1) >> FM_CHUNK_SHIFT); }

/* Sets cache tc up (in heap run `run` or the cache area's slot `slot`, each + 1; neither for
 * check.c's native cache), empty, without a tag, and links it in the list of caches. */
static void cache_init(struct fm_tcache *tc, uint32_t run, uint32_t slot) {
  memset(tc, 0, offsetof(struct fm_tcache, b));
  tc->run = run;
  tc->slot = slot;
  tc->earned = FM_TC_START;
  tc->tag = ST_LIVE;
  tc->own = ST_NONE;
  tc->wide = run || slot ? (struct fm_blk *)((char *)tc + packed_bytes(fm_pool.nclass)) : NULL;
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    tc->base[c + 1] = tc->top[c + 1] = tc->lim[c + 1] = tc->b + (size_t)c * FM_ROW;
    tc->row[c + 1] = FM_ROW;
    tc->grow[c + 1] = (uint16_t)(2 * fm_pool.cls[c].batch);
  }
  fm_lock(&caches_lock);
  if (~salts_used) {
    tc->salt = (uint16_t)__builtin_ctzll(~salts_used);
    salts_used |= 1ull << tc->salt;
  } else {
    tc->salt = salts_next++;
    if (salts_next < 64) salts_next = 64;
  }
  tc->next = caches;
  if (caches) caches->prev = tc;
  caches = tc;
  runs_n += run != 0;
  slots_n += slot != 0;
  fm_unlock(&caches_lock);
}

static struct fm_tcache *slot_cache(uint32_t i) { return (struct fm_tcache *)(fm_pool.caches + (uintptr_t)i * fm_pool.cache_bytes); }

/* The lowest free slot of the cache area, opened, taken; -1 when none is free or the system
 * refuses to open it. Slots are taken lowest first, so the open ones are the lowest. */
static int64_t slot_take(void) {
  int64_t i = -1;
  fm_lock(&caches_lock);
  if (warm_n) {   /* (still marked used, and open) */
    i = warm[--warm_n];
    fm_unlock(&caches_lock);
    return i;
  }
  for (uint32_t w = 0; w * 64 < fm_pool.caches_n; w++)
    if (~slots_used[w]) {
      i = w * 64 + __builtin_ctzll(~slots_used[w]);
      break;
    }
  if (i >= fm_pool.caches_n) i = -1;
  bool fresh = i >= 0 && (uint32_t)i >= slots_open;
  if (fresh) slots_open = (uint32_t)i + 1;
  if (i >= 0) slots_used[i / 64] |= 1ull << (i % 64);
  fm_unlock(&caches_lock);
  /* opened after the lock is let go; a slot the system refuses to open stays taken */
  if (fresh && fm_pool.lazy_commit && pool_protecting() && !os_commit(slot_cache((uint32_t)i), fm_pool.cache_bytes)) i = -1;
  return i;
}

/* The inboxes and the cache area accessible whole at start-up (span_open_all), or, before the
 * program's mlockall (fm_pool.protect set), inaccessible again where no tag or cache has used
 * them. */
bool tcache_open_all(void) {
  uintptr_t lo = inbox_at(0) & ~(os_page_size() - 1);
  return os_commit((void *)lo, page_up(inbox_at(FM_TAGS)) - lo) &&
         os_commit(slot_cache(0), (size_t)fm_pool.caches_n * fm_pool.cache_bytes);
}

void tcache_close_unopened(void) {
  fm_lock(&tags_lock);
  uint32_t used = atomic_load_explicit(&fm_pool.tags_used, memory_order_relaxed);
  uintptr_t lo = page_up(inbox_at(used)), hi = inbox_at(FM_TAGS) & ~(os_page_size() - 1);   /* (what follows stays) */
  if (hi > lo) os_protect((void *)lo, hi - lo, false);
  fm_unlock(&tags_lock);
  fm_lock(&caches_lock);
  if (slots_open < fm_pool.caches_n)
    os_protect(slot_cache(slots_open), (size_t)(fm_pool.caches_n - slots_open) * fm_pool.cache_bytes, false);
  fm_unlock(&caches_lock);
}

/* A new cache, with empty bins and no room (it grows by demand): in the cache area while it has
 * a slot free, which lies on base pages (an idle thread touches a few pages of its cache, and a
 * cache on a huge page would make the whole of it resident: 1,000 idle threads 218 MB against
 * 104 MB); else in a run of the heap (the large area's: not a large block, so free() of any
 * address in it stops the program). */
static struct fm_tcache *cache_new(void) {
  int64_t i = slot_take();
  if (i >= 0) {
    struct fm_tcache *tc = slot_cache((uint32_t)i);
    cache_init(tc, 0, (uint32_t)i + 1);
    return tc;
  }
  i = span_alloc(cache_chunks(), FM_CLASS_MAX, true);
  if (i < 0) return NULL;
  struct fm_tcache *tc = (struct fm_tcache *)(fm_pool.heap_base + ((uintptr_t)i << FM_CHUNK_SHIFT));
  cache_init(tc, (uint32_t)i + 1, 0);
  return tc;
}

static void cache_free(struct fm_tcache *tc) {
  fm_lock(&caches_lock);
  if (tc->prev) tc->prev->next = tc->next;
  else caches = tc->next;
  if (tc->next) tc->next->prev = tc->prev;
  if (tc->salt < 64) salts_used &= ~(1ull << tc->salt);
  if (tc->run) {
    runs_n--;
    fm_unlock(&caches_lock);
    span_free(tc->run - 1);
    return;
  }
  /* the slot stays open; it keeps its pages for the next thread while FM_WARM_SLOTS others do,
   * else they go back (not in the real-time profile, nor from hugetlb pages) */
  uint32_t i = tc->slot - 1;
  slots_n--;
  if (warm_n < FM_WARM_SLOTS) {
    warm[warm_n++] = i;
  } else {
    if (!fm_pool.realtime && !fm_pool.hugetlb) os_release(tc, fm_pool.cache_bytes);
    slots_used[i / 64] &= ~(1ull << (i % 64));
  }
  fm_unlock(&caches_lock);
}

static void tcache_exit(void *v) {
  struct fm_tcache *tc = v;
  fm_tc = &fm_tc_empty;
  tcache_gone = true;
  outbox_flush(tc);
  for (unsigned c = 0; c < fm_pool.nclass; c++) bin_resize(tc, c, 0);
  tag_drop(tc);
  count_add(&fm_pool.caches_live, NULL, -1);
  cache_free(tc);
}

void tcache_setup(void) {
  pthread_key_create(&tcache_key, tcache_exit);
  if (fm_pool.realtime) {
    fm_lock_init(&tags_lock, false);
    fm_lock_init(&caches_lock, false);
  }
  fm_pool.tc_total = (uint64_t)FM_TC_PER_CPU * fm_pool.cpus;
  remote_setup();
}

/* Gives the calling thread a cache and, while one is free, a tag. The empty cache when the
 * pool has no room for one, the thread's cache is gone (it is exiting), or under a Valgrind
 * tool (which sees blocks leave and come back): the thread then works directly on the
 * classes, one block at a time. */
static cold noinline struct fm_tcache *tcache_attach(void) {
  if (tcache_gone || fm_pool.valgrind) return &fm_tc_empty;
  struct fm_tcache *tc = cache_new();
  if (!tc) return &fm_tc_empty;
  count_add(&fm_pool.caches_live, NULL, 1);
  tag_take(tc);
  fm_tc = tc;
  pthread_setspecific(tcache_key, tc);
  return tc;
}

/* (The attach out of line: a caller's frame stays that of a leaf.) */
static struct fm_tcache *tcache_mine(void) {
  struct fm_tcache *tc = fm_tc;
  return likely(tc != &fm_tc_empty) ? tc : tcache_attach();
}

/* The calling thread's cache, attached now as a first free() attaches it: checking mode's free
 * reaches the cache only when the quarantine lets the block go, later and maybe on another
 * thread, and whether a thread holds a cache and a tag must not hang on that. */
void tcache_join(void) { (void)tcache_mine(); }

void tcache_stats(struct tcache_stats *s) {
  fm_lock(&caches_lock);
  s->threads = atomic_load_explicit(&fm_pool.caches_live, memory_order_relaxed);
  s->tagged = __atomic_load_n(&tags_held, __ATOMIC_RELAXED);
  s->heap_bytes = (uint64_t)runs_n * cache_chunks() << FM_CHUNK_SHIFT;
  s->bytes = s->heap_bytes + (uint64_t)slots_n * fm_pool.cache_bytes;
  s->most_moved = atomic_load_explicit(&most_moved, memory_order_relaxed);
  fm_unlock(&caches_lock);
}

/* ---- refill ------------------------------------------------------------------------------ */
/* One block of class c, LIVE for tc; with borrow, a class that cannot grow takes a free block of
 * one of the next FM_BORROW_STEPS larger classes. NULL when none has one. *zero (when asked)
 * says the block should read as zero. */
static void *take(struct fm_tcache *tc, unsigned c, bool borrow, bool *zero) {
  unsigned last = c + (borrow ? FM_BORROW_STEPS : 0);
  if (last >= fm_pool.nclass) last = fm_pool.nclass - 1;
  tc->taking = true;
  outbox_flush(tc);
  if (tc->t) remote_collect(tc, fm_pool.realtime ? FM_RT_BATCH : remote_behind(tc->t) ? FM_COLLECT_BEHIND : FM_COLLECT);
  else if ((tc->run || tc->slot) && tag_free()) tag_take(tc);   /* (a thread's cache: not the empty one, nor check.c's native one) */
  unsigned sh = shard_now(tc);
  /* the tag this thread sent to last, when its holder has fallen behind (off its CPU): its
   * blocks come into this cache */
  if (tc->out_to && tc->out_to != tc->t) adopt(tc, tc->out_to);
  for (unsigned k = c; k <= last; k++) {
    unsigned k1 = k + 1;
    struct fm_blk got;
    if (tc->base[k1] && (k == c || !fm_pool.realtime)) {   /* (real-time: a larger class lends one block) */
      uint32_t batch = fm_pool.cls[k].batch;
      if (tc->top[k1] == tc->base[k1]) {
        if (tc->flushed >> k & 1) {   /* it gave back blocks it now wants: it may hold another batch */
          tc->flushed &= ~(1ull << k);
          uint32_t most = bin_most(tc, k);
          tc->grow[k1] = (uint16_t)(tc->grow[k1] + batch < most ? tc->grow[k1] + batch : most);
        }
        if (room(tc, k1) < batch) bin_grow(tc, k, batch - room(tc, k1));
        uint32_t want = room(tc, k1) < batch ? room(tc, k1) : batch;
        if (want) {
          uint32_t got_n = class_take(k, sh, tc->base[k1], want, k == c);
          tc->top[k1] = tc->base[k1] + got_n;
          tc->moved += got_n;
        }
      }
      if (tc->top[k1] != tc->base[k1]) {
        got = *--tc->top[k1];
      } else if (room(tc, k1) || !class_take(k, sh, &got, 1, k == c)) {
        goto next;
      }
    } else if (!class_take(k, sh, &got, 1, k == c)) {
      goto next;
    }
    if (zero) *zero = st_load(got.st) == ST_ZERO;
    st_store(got.st, tc->tag);
    if (k != c) class_note(k, sh, true);
    tc->taking = false;
    work_note(tc);
    return got.p;
  next:
    if (k == c) class_note(c, sh, false);
  }
  tc->taking = false;
  work_note(tc);
  return NULL;
}

/* take(), NULL with errno ENOMEM. */
void *tcache_alloc(unsigned c, bool borrow, bool *zero) {
  void *p = take(tcache_mine(), c, borrow, zero);
  if (!p) errno = ENOMEM;
  return p;
}

/* check.c's native calls under memcheck run one at a time and must not touch thread-local
 * storage (the cache pointer, errno): they share one cache of their own (the statistics count
 * its blocks, the validator checks them) that no thread owns, without a tag: program threads
 * free these blocks too. Without one they work one block at a time, straight on the classes. */
static struct fm_tcache *tc_native = &fm_tc_empty;

/* Its memory is static (defined memory for memcheck, which would see a write into the pool
 * that no block covers), its rows for every possible class. */
static union {
  struct fm_tcache tc;
  char bytes[offsetof(struct fm_tcache, b) + FM_CLASS_MAX * FM_ROW * sizeof *fm_tc_empty.b];
} native_cache;

void tcache_native_setup(void) {
  struct fm_tcache *tc = &native_cache.tc;
  cache_init(tc, 0, 0);
  tc_native = tc;
}

void *tcache_alloc_direct(unsigned c, bool borrow) { return take(tc_native, c, borrow, NULL); }

/* ---- flush ------------------------------------------------------------------------------- */
/* Caches CACHED block p of class c (st its state) in tc, or gives it back to the class when tc
 * has no bin for it or no room within its budget. */
static noinline void put_full(struct fm_tcache *tc, void *p, unsigned c, fm_st *st) {
  unsigned c1 = c + 1;
  if (!tc->base[c1]) {   /* no cache: no caching */
    class_give(c, shard_now(tc), &(struct fm_blk){p, st}, 1);
    return;
  }
  if (tc->top[c1] >= tc->lim[c1]) {
    uint32_t r = room(tc, c1), batch = fm_pool.cls[c].batch, may = tc->grow[c1] > r ? tc->grow[c1] - r : 0;
    uint32_t more = r < batch ? batch - r : batch;
    if (more > may) more = may;   /* a batch at a time, up to what the bin may hold now */
    if (tc->cap_bytes > budget(tc)) {
      bin_resize(tc, c, r / 2);
    } else if (!more || !bin_grow(tc, c, more)) {
      bin_flush(tc, c, (r + 1) / 2);
      tc->flushed |= 1ull << c;
    }
    if (tc->top[c1] >= tc->lim[c1]) {
      class_give(c, shard_now(tc), &(struct fm_blk){p, st}, 1);
      tc->moved++;
    } else {
      *tc->top[c1]++ = (struct fm_blk){p, st};
    }
    return work_note(tc);
  }
  *tc->top[c1]++ = (struct fm_blk){p, st};
}

/* put_full for tcache_free_from: the class's lock may be taken, so the thread is inside. (Not in
 * put_full itself: check.c's native calls reach it, where the thread's variables are not.) */
static noinline void put_full_inside(struct fm_tcache *tc, void *p, unsigned c, fm_st *st) {
  block_enter("free");
  put_full(tc, p, c, st);
  block_leave();
}

/* CACHED block p into tc's bin, full() when it has no room. */
static always_inline void put_or(struct fm_tcache *tc, void *p, unsigned c, fm_st *st,
                                 void (*full)(struct fm_tcache *, void *, unsigned, fm_st *)) {
  struct fm_blk *top = tc->top[c + 1];
  if (unlikely(top >= tc->lim[c + 1])) return full(tc, p, c, st);   /* (no cache: lim == top == NULL) */
  *top = (struct fm_blk){p, st};
  tc->top[c + 1] = top + 1;
}

static void put(struct fm_tcache *tc, void *p, unsigned c, fm_st *st) { put_or(tc, p, c, st, put_full); }

static cold noinline void free_raced(void *p, unsigned c) { fault_stop("double free (by two threads at once)", p, (int)c); }

/* free() of LIVE block p of class c (st its state, s as loaded after tc->busy was published)
 * when the fast path could not take it: the thread's own block to its cache (full(): its bin
 * has no room); a block of another tag to that tag's inbox; a block no tag owns to this
 * thread's cache, taken with one atomic step. */
static always_inline void free_as(struct fm_tcache *tc, void *p, unsigned c, fm_st *st, fm_st s,
                                  void (*full)(struct fm_tcache *, void *, unsigned, fm_st *)) {
  if (s == tc->own) {
    st_store(st, ST_CACHED);
    return put_or(tc, p, c, st, full);
  }
  /* the state was LIVE when free() checked it: anything else now is another free's doing */
  fm_count(CNT_RMW);
  fm_st was = s;
  if (s == ST_LIVE) {
    if (!__atomic_compare_exchange_n(st, &s, ST_CACHED, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) return free_raced(p, c);
    return put_or(tc, p, c, st, full);
  }
  if (!st_live(s) || !__atomic_compare_exchange_n(st, &s, ST_REMOTE, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
    return free_raced(p, c);
  remote_free(tc, was, p, c, st);
}

static always_inline void free_in(struct fm_tcache *tc, void *p, unsigned c, fm_st *st) {
  __atomic_store_n(&tc->busy, st, __ATOMIC_RELEASE);   /* before the load (remote.c's adoption) */
  __atomic_signal_fence(__ATOMIC_SEQ_CST);
  free_as(tc, p, c, st, st_load(st), put_full);
}

static cold noinline void free_attach(void *p, unsigned c, fm_st *st) { free_in(tcache_attach(), p, c, st); }

static cold noinline void free_inside(void *p, unsigned c, fm_st *st) {
  block_enter("free");
  tcache_free(p, c, st);
  block_leave();
}

/* fm_free_block's way for the block the fast path found: that path published the state in
 * tc->busy before it loaded it, and the thread is not inside flatmalloc (fm_free_block looked),
 * so it takes free_in's steps without marking it inside, except on the ways that may take a
 * lock (a full bin's, outbox_send: they mark it); a state not LIVE (a double free) goes to
 * block_free, which names it. (Every way out a tail call, as tcache_free's.) */
void tcache_free_from(void *p, fm_st *st, struct fm_tcache *tc, unsigned c1) {
  unsigned c = c1 - 1;
  fm_st s = st_load(st);
  if (unlikely(!st_live(s))) return block_free(p);
  if (unlikely(tc == &fm_tc_empty)) return free_inside(p, c, st);   /* (its attach takes a lock) */
  free_as(tc, p, c, st, s, put_full_inside);
}

/* (Every way out a tail call: no register to save on the way to another thread's outbox.) */
void tcache_free(void *p, unsigned c, fm_st *st) {
  struct fm_tcache *tc = fm_tc;
  if (unlikely(tc == &fm_tc_empty)) return free_attach(p, c, st);
  free_in(tc, p, c, st);
}

void tcache_free_direct(void *p, unsigned c, fm_st *st) {
  st_store(st, ST_CACHED);   /* one native call at a time, no program thread running */
  put(tc_native, p, c, st);
}

/* Sends the calling thread's outbox (checking mode, after the quarantine let blocks go: another
 * thread's block there would otherwise wait for this thread's next refill to reach its owner). */
void tcache_send(void) {
  struct fm_tcache *tc = fm_tc;
  if (tc != &fm_tc_empty) outbox_flush(tc);
}

/* Sends the calling thread's outbox and takes its inbox and remote stack home (for the statistics and
 * malloc_trim, which count those blocks as free). */
void tcache_collect(void) {
  struct fm_tcache *tc = fm_tc;
  if (tc == &fm_tc_empty) return;
  outbox_flush(tc);
  if (tc->t) remote_collect(tc, UINT32_MAX);
  tc->moved = 0;   /* (malloc_trim's and the statistics' work is not an allocation call's) */
}

/* Fork child: only this thread goes on. The other threads' caches are never used again: they
 * leave the list (their runs and blocks stay where they are, a copy-on-write loss only, which
 * the statistics no longer count as caches). Their tags are free again, with what waited in
 * their inboxes and on their remote stacks abandoned the same way (a drain a parent's thread
 * was in the middle of cannot be finished); what the child frees of their blocks goes home
 * through the tag as through any free tag's: drained as orphans, or to the child's thread that
 * takes it. In this thread's own inbox, the slots other threads reserved and had not written
 * are holes its drain steps over. */
void tcache_after_fork(void) {
  if (fm_lock_held(&caches_lock)) fm_lock_init(&caches_lock, false);
  struct fm_tcache *me = fm_tc != &fm_tc_empty ? fm_tc : NULL;
  caches = NULL;
  runs_n = slots_n = 0;
  salts_used = 0;
  struct fm_tcache *keep[2] = {me, tc_native != &fm_tc_empty && tc_native != me ? tc_native : NULL};
  for (unsigned i = 0; i < 2; i++) {
    struct fm_tcache *tc = keep[i];
    if (!tc) continue;
    tc->prev = NULL;
    tc->next = caches;
    if (caches) caches->prev = tc;
    caches = tc;
    runs_n += tc->run != 0;
    slots_n += tc->slot != 0;
    if (tc->salt < 64) salts_used |= 1ull << tc->salt;
  }
  struct fm_tag *mine = me ? me->t : NULL;
  uint32_t used = atomic_load_explicit(&fm_pool.tags_used, memory_order_relaxed);
  remote_after_fork(mine, used);
  if (fm_lock_held(&tags_lock)) fm_lock_init(&tags_lock, false);
  atomic_store_explicit(&fm_pool.tags_free, 0, memory_order_relaxed);
  fifo_head = 0;
  for (uint32_t i = 0; i < used; i++)   /* (one whose inbox a thread of the parent was opening stays out) */
    if (&fm_pool.tags[i] != mine && fm_pool.tags[i].opened) tag_push(&fm_pool.tags[i]);
  tags_held = mine != NULL;
  atomic_store_explicit(&fm_pool.caches_live, me != NULL, memory_order_relaxed);
}

/* Blocks of class c sitting in thread caches (read without the threads' help: approximate
 * while they run, exact when they are quiet). */
uint64_t tcache_cached(unsigned c) {
  uint64_t n = 0;
  fm_lock(&caches_lock);
  for (struct fm_tcache *tc = caches; tc; tc = tc->next) {
    struct fm_blk *top = __atomic_load_n(&tc->top[c + 1], __ATOMIC_RELAXED), *base = tc->base[c + 1];
    n += top > base ? (uint64_t)(top - base) : 0;
  }
  fm_unlock(&caches_lock);
  return n;
}

/* Every cache's entries are blocks of the bin's class in state CACHED, each once, and its
 * room adds up to what it counts. */
int tcache_check(void) {
  int faults = 0;
  fm_lock(&caches_lock);
  for (struct fm_tcache *tc = caches; tc; tc = tc->next) {
    uint64_t bytes = 0;
    for (unsigned c = 0; c < fm_pool.nclass; c++) {
      unsigned c1 = c + 1;
      if (tc->top[c1] < tc->base[c1] || tc->top[c1] > tc->lim[c1] || room(tc, c1) > tc->row[c1]) faults++;
      bytes += (uint64_t)room(tc, c1) * fm_pool.cls[c].size;
      for (uint32_t j = 0; j < cached(tc, c1) && j < tc->row[c1]; j++) {
        fm_st *st;
        if (class_find(tc->base[c1][j].p, &st) != (int)c || !st_cached(st_load(st)) || st != tc->base[c1][j].st) faults++;
      }
    }
    if (bytes != tc->cap_bytes) faults++;
  }
  fm_unlock(&caches_lock);
  return faults;
}

/* malloc_trim: the calling thread's blocks, those other threads freed for it included, go
 * back to their classes (the bins keep their room, and fill again by demand). */
void tcache_trim(void) {
  struct fm_tcache *tc = fm_tc;
  if (tc == &fm_tc_empty) return;
  tcache_collect();
  for (unsigned c = 0; c < fm_pool.nclass; c++) bin_flush(tc, c, cached(tc, c + 1));
  tc->moved = 0;
}
