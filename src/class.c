/* Size classes (types.h, SPAN): each class's span geometry, and per shard its spans with free
 * blocks in occupancy buckets and batches moving between spans and thread caches under the
 * shard's lock, O(batch). */
#include <string.h>

#include "internal.h"
#include "os.h"

/* ---- span geometry ----------------------------------------------------------------------- */
static uintptr_t chunk_addr(uint32_t i) { return fm_pool.heap_base + ((uintptr_t)i << FM_CHUNK_SHIFT); }
static struct fm_line *line(uint32_t i) { return &fm_pool.chunk[i].line; }
/* The state byte of block q of the span at head: at its chunk's line's st + q (the line of the
 * chunk the block starts in, when the states sit in the lines; else every line of the span
 * names the span's states in the shadow). */
static fm_st *state_of(const struct fm_class *k, uint32_t head, uint32_t q) {
  uint32_t j = k->line_states ? (uint32_t)(((uint64_t)q * k->size) >> FM_CHUNK_SHIFT) : 0;
  return (fm_st *)(line(head + j)->st + q);
}
/* Block number of p in the span at span_addr (p in it). */
static uint32_t block_of(unsigned c, uintptr_t span_addr, const void *p) {
  return (uint32_t)(((unsigned __int128)((uintptr_t)p - span_addr) * fm_magic(c + 1)) >> 64);
}
/* One bit per 8 blocks that holds a FREE one; kept in the record of the span's 2nd chunk (a
 * span has at least 3, and only the first and last records belong to the run). */
static uint64_t *summary(uint32_t head) { return (uint64_t *)span_rec(head + 1); }
static uint32_t groups(const struct fm_class *k) { return (k->nblocks + 7) / 8; }

/* A shard's transfer cache: blocks given back as they came, still CACHED (fm_shard's xfer_n). */
static struct fm_blk *xfer_of(const struct fm_class *k, const struct fm_shard *h) {
  return fm_pool.xfer + ((size_t)(k - fm_pool.cls) * fm_pool.nshards + (size_t)(h - k->sh)) * FM_XFER;
}

/* Written under the shard's lock, read without it by class_give's first look. */
static void xfer_set(struct fm_shard *h, uint32_t n) { __atomic_store_n(&h->xfer_n, n, __ATOMIC_RELAXED); }

/* Shard sh of class k, locked; when another thread holds its lock (and may have been preempted
 * holding it), the first of the others, from sh's sibling on, that is free; only when every
 * shard's lock is held does it wait, for sh's. */
static struct fm_shard *shard_lock(struct fm_class *k, unsigned sh) {
  struct fm_shard *h = &k->sh[sh];
  if (fm_trylock(&h->lock)) return h;
  for (unsigned i = 1; i < fm_pool.nshards; i++)
    if (fm_trylock(&k->sh[sh ^ i].lock)) return &k->sh[sh ^ i];
  fm_count(CNT_WAIT);
  fm_lock(&h->lock);
  return h;
}

unsigned class_of(size_t size) { return fm_pool.cls_of[(size + FM_ALIGN - 1) / FM_ALIGN] - 1u; }

static uint32_t span_head(uint64_t e) { return (uint32_t)(((e & ~0xffull) - fm_pool.heap_base) >> FM_CHUNK_SHIFT); }

/* Class of the span holding p, or -1 when p is not in a span. */
int class_at(const void *p) {
  uintptr_t off = (uintptr_t)p - fm_pool.heap_base;
  if (off >= fm_pool.heap_size) return -1;
  unsigned c = fm_pool.chunk[off >> FM_CHUNK_SHIFT].line.e & 0xff;
  return c == FM_NO_CLASS ? -1 : (int)c - 1;
}

/* The class of the block that starts at p and its state byte, from p's line alone (as free()'s
 * fast path finds them); -1 when p starts no block of a span. */
int class_find(const void *p, fm_st **st) {
  uintptr_t off = (uintptr_t)p - fm_pool.heap_base;
  if (off >= fm_pool.heap_size) return -1;
  const struct fm_line *l = &fm_pool.chunk[off >> FM_CHUNK_SHIFT].line;
  uint64_t e = __atomic_load_n(&l->e, __ATOMIC_ACQUIRE), magic = fm_magic((uint8_t)e);
  unsigned __int128 m = (unsigned __int128)((uintptr_t)p - (e & ~0xffull)) * magic;
  if ((uint64_t)m >= magic) return -1;   /* inside a block, or no class (magic 0) */
  unsigned c = (uint8_t)e - 1u;
  if ((uint64_t)(m >> 64) >= fm_pool.cls[c].nblocks) return -1;
  *st = (fm_st *)(l->st + (uint64_t)(m >> 64));
  return (int)c;
}

/* The span (its first chunk) and the number of the block of class c that holds p, p being in a
 * span of that class; false when p lies past the span's last block. */
static bool locate(const void *p, unsigned c, uint32_t *head, uint32_t *q) {
  *head = span_head(fm_pool.chunk[((uintptr_t)p - fm_pool.heap_base) >> FM_CHUNK_SHIFT].line.e);
  *q = block_of(c, chunk_addr(*head), p);   /* a multiplication, not a division */
  return *q < fm_pool.cls[c].nblocks;
}

/* Start of the block of class c that holds p (p in a span of c). */
void *class_block(const void *p, unsigned c) {
  const struct fm_class *k = &fm_pool.cls[c];
  uint32_t head, q;
  if (!locate(p, c, &head, &q)) return NULL;
  return (void *)(chunk_addr(head) + (uintptr_t)q * k->size);
}

/* The state byte of p, which the program handed to call (free, realloc, malloc_usable_size),
 * when p is a LIVE block of class c; otherwise stops the program naming the call and what p is. */
fm_st *class_verify(const void *p, unsigned c, enum fault_call call) {
  const struct fm_class *k = &fm_pool.cls[c];
  uint32_t head, q;
  if ((uintptr_t)p & (FM_ALIGN - 1)) fault_bad(call, FAULT_MISALIGNED, p, (int)c);
  if (!locate(p, c, &head, &q)) fault_bad(call, FAULT_FOREIGN, p, (int)c);
  if (chunk_addr(head) + (uintptr_t)q * k->size != (uintptr_t)p) fault_bad(call, FAULT_INTERIOR, p, (int)c);
  fm_st *st = state_of(k, head, q), s = st_load(st);
  if (st_live(s)) return st;
  if (s == ST_CACHED || s == ST_ZERO || s == ST_REMOTE || (s == ST_FREE && q < __atomic_load_n(&span_rec(head)->hw, __ATOMIC_RELAXED)))
    fault_bad(call, FAULT_FREED, p, (int)c);
  fault_bad(call, FAULT_FOREIGN, p, (int)c);
}

/* The blocks a batch of a class of this size moves, and that a thread's bin holds at most. */
static uint32_t batch_of(uint32_t size) {
  uint32_t batch = FM_BATCH_BYTES / size;
  if (batch < FM_BATCH_MIN) batch = FM_BATCH_MIN;
  if (batch > FM_BATCH_MAX) batch = FM_BATCH_MAX;
  if (fm_pool.realtime && batch > FM_RT_BATCH) batch = FM_RT_BATCH;   /* the slowest call, not the median */
  return batch;
}

uint32_t class_bin_max(uint32_t size) {
  uint32_t batch = batch_of(size), most = FM_BIN_BYTES / size;   /* (FM_BIN_BYTES / FM_ALIGN >= FM_BIN_MAX) */
  if (most > FM_BIN_MAX) most = FM_BIN_MAX;
  if (most < 2 * batch || fm_pool.realtime) most = 2 * batch;   /* real-time: a flush moves one batch */
  return most;
}

void class_setup(const struct fm_options *o, uint8_t *cls_of, uint32_t heap_chunks) {
  const size_t chunk = FM_CHUNK;
  for (unsigned c = 0, units = 0; c < o->nclass; c++) {
    struct fm_class *k = &fm_pool.cls[c];
    uint32_t size = o->class_size[c], batch = batch_of(size);
    /* at least FM_SPAN_MIN, FM_SPAN_MIN_BLOCKS blocks and 3 chunks (the summary lives in the 2nd
     * chunk's record, not the last); of the next 8 chunk counts, the one that wastes the
     * smallest share */
    size_t span = (size_t)FM_SPAN_MIN_BLOCKS * size > FM_SPAN_MIN ? (size_t)FM_SPAN_MIN_BLOCKS * size : FM_SPAN_MIN, best = 0;
    if (span < 3 * chunk) span = 3 * chunk;
    span = (span + chunk - 1) & ~(chunk - 1);
    uint64_t n = 0;
    for (size_t s = span, i = 0; i < 8; i++, s += chunk) {
      uint64_t m = s / size;
      if (m > FM_SPAN_BLOCKS) m = FM_SPAN_BLOCKS;
      if (!best || m * size * best > n * size * s) best = s, n = m;   /* higher use of the span */
    }
    span = best;
    /* not a whole number of rounds of line offsets (SPAN in types.h) */
    if (size % 64 && n * size % 64 == 0) n--;
    k->size = size;
    k->batch = batch;
    k->bin_max = class_bin_max(size);
    k->nblocks = (uint32_t)n;
    k->span_chunks = (uint32_t)(span / chunk);
    k->xfer_max = FM_XFER_BYTES / size;   /* blocks held there keep their spans out of the pool */
    if (k->xfer_max > FM_XFER) k->xfer_max = FM_XFER;
    if (k->xfer_max < batch) k->xfer_max = batch;
    k->reserve = (uint64_t)heap_chunks * o->class_bp[c] / 10000;
    k->states = (uint32_t)((span + size - 1) / size);
    k->line_states = fm_line_states(size);
    k->st_shift = (uint8_t)fm_st_shift(size);
    k->bucket_mul = (((uint64_t)FM_BUCKETS << 32) + n - 1) / n;   /* (nblocks - 1) * it >> 32 < FM_BUCKETS */
    ((uint64_t *)fm_pool.chunk - FM_MAGICS)[c + 1] = UINT64_MAX / size + 1;   /* fm_magic */
    for (; units * FM_ALIGN <= size; units++) cls_of[units] = (uint8_t)(c + 1);
    if (fm_pool.realtime)
      for (unsigned s = 0; s < fm_pool.nshards; s++) fm_lock_init(&k->sh[s].lock, false);
  }
}

/* ---- buckets ----------------------------------------------------------------------------- */
/* Bucket 0 holds the fullest spans; a span with no free block is in none (FM_BUCKETS). */
static uint32_t bucket_of(const struct fm_class *k, uint32_t nfree) {
  return nfree ? (uint32_t)((uint64_t)(nfree - 1) * k->bucket_mul >> 32) : FM_BUCKETS;
}

static void bucket_remove(struct fm_shard *h, uint32_t head) {
  struct fm_run *r = span_rec(head);
  if (r->bucket >= FM_BUCKETS) return;
  if (r->prev) span_rec(r->prev - 1)->next = r->next;
  else h->bucket[r->bucket] = r->next;
  if (r->next) span_rec(r->next - 1)->prev = r->prev;
  if (!h->bucket[r->bucket]) h->bucket_map &= ~(1u << r->bucket);
  r->bucket = FM_BUCKETS;
}

static void bucket_insert(const struct fm_class *k, struct fm_shard *h, uint32_t head) {
  struct fm_run *r = span_rec(head);
  uint32_t b = bucket_of(k, r->nfree);
  r->bucket = b;
  if (b >= FM_BUCKETS) return;
  r->prev = 0;
  r->next = h->bucket[b];
  if (r->next) span_rec(r->next - 1)->prev = head + 1;
  h->bucket[b] = head + 1;
  h->bucket_map |= 1u << b;
}

/* ---- spans in and out -------------------------------------------------------------------- */
/* A fresh span for class c in shard h, all blocks FREE, in its bucket. False when the pool has
 * none. */
static bool span_new(unsigned c, struct fm_shard *h) {
  struct fm_class *k = &fm_pool.cls[c];
  if (h->spare) {
    bucket_insert(k, h, h->spare - 1);
    h->spare = 0;
    return true;
  }
  int64_t got = span_alloc(k->span_chunks, c, false);
  if (got < 0) return false;
  uint32_t head = (uint32_t)got;
  /* every state FREE, also past the last block (the shadow may hold an earlier life's): then an
   * address past it never reads LIVE, which is what free()'s fast path relies on; each line
   * says where its chunk's blocks' states are before its entry names the class */
  uintptr_t span = chunk_addr(head), chunk = FM_CHUNK;
  if (!k->line_states) memset(fm_st_q(k, span, 0), ST_FREE, k->states);
  for (uint32_t j = 0; j < k->span_chunks; j++) {
    struct fm_line *l = line(head + j);
    if (k->line_states) {
      memset(l->own, ST_FREE, sizeof l->own);
      l->st = (uintptr_t)l->own - (j * chunk + k->size - 1) / k->size;   /* its first block's number */
    } else {
      l->st = (uintptr_t)fm_st_q(k, span, 0);
    }
  }
  for (uint32_t j = 0; j < k->span_chunks; j++)
    __atomic_store_n(&line(head + j)->e, (uint64_t)chunk_addr(head) | (c + 1), __ATOMIC_RELEASE);
  uint64_t *sum = summary(head);
  memset(sum, 0, 64);
  for (uint32_t i = 0; i < groups(k); i++) sum[i / 64] |= 1ull << (i % 64);
  struct fm_run *r = span_rec(head);
  r->flags = 0;
  for (uint32_t j = 0; j < k->span_chunks; j++)
    if (span_chunk_dirty(head + j)) r->flags = RUN_DIRTY;   /* reused memory: no block reads as zero */
  r->nfree = k->nblocks;
  r->hw = 0;
  r->epoch = h->epoch;
  r->shard = (uint32_t)(h - k->sh);
  r->bucket = FM_BUCKETS;
  bucket_insert(k, h, head);
  if (++h->spans > h->spans_peak) h->spans_peak = h->spans;
  return true;
}

static void span_retire(const struct fm_class *k, struct fm_shard *h, uint32_t head) {
  bucket_remove(h, head);
  for (uint32_t j = 0; j < k->span_chunks; j++) __atomic_store_n(&line(head + j)->e, FM_NO_CLASS, __ATOMIC_RELAXED);
  h->spans--;
  span_free(head);
}

/* Moves into h (locked) a span of another shard whose lock is free: one of its emptiest (more
 * than 7/8 of its blocks free, each handed out once: not a span its threads are filling), else
 * its spare. A shard whose threads went away or sleep (larson's main thread, whose blocks
 * its workers took over) otherwise keeps spans that hold a few blocks each while busy shards
 * open new ones; a busy shard's fuller spans stay its own, so two threads' blocks share few
 * lines of states (tests/c/lines.c). Looks at FM_STEAL_LOOK
 * shards at most, from where its last look stopped. False when none has one. */
static bool span_steal(struct fm_class *k, struct fm_shard *h) {
  unsigned n = fm_pool.nshards, self = (unsigned)(h - k->sh), look = n - 1 < FM_STEAL_LOOK ? n - 1 : FM_STEAL_LOOK;
  for (unsigned i = 0; i < look; i++) {
    h->steal = (h->steal + 1) % n;
    if (h->steal == self) h->steal = (h->steal + 1) % n;
    struct fm_shard *x = &k->sh[h->steal];
    if (!fm_trylock(&x->lock)) continue;
    uint32_t head = x->bucket[FM_BUCKETS - 1];
    if (head && span_rec(head - 1)->hw == k->nblocks) {
      bucket_remove(x, head - 1);
    } else {
      head = x->spare;
      x->spare = 0;
    }
    if (!head--) {
      fm_unlock(&x->lock);
      continue;
    }
    struct fm_run *r = span_rec(head);
    uint32_t used = k->nblocks - r->nfree;
    x->out -= used;
    x->spans--;
    __atomic_store_n(&r->shard, self, __ATOMIC_RELAXED);   /* under x's lock: give_spans reads it again under it */
    fm_unlock(&x->lock);
    r->epoch = h->epoch;
    if ((h->out += used) > h->peak) h->peak = h->out;
    if (++h->spans > h->spans_peak) h->spans_peak = h->spans;
    bucket_insert(k, h, head);
    return true;
  }
  return false;
}

/* ---- batches ----------------------------------------------------------------------------- */
/* state_of in a loop over one span, st0 being its block 0's state: the shadow's are in a row
 * (in_lines: k->line_states, read once by the caller, as the stores in the loop might alias it). */
static inline fm_st *span_state(const struct fm_class *k, bool in_lines, uint32_t head, fm_st *st0, uint32_t q) {
  return in_lines ? state_of(k, head, q) : st0 + q;
}

/* The 8 states of a group of blocks (in a shadow: 8-aligned, as a span's states start on a chunk >> s)
 * as one word: each byte is still written alone by its block's owner, and under the shard's lock
 * no one else writes FREE states (relaxed atomics, plain moves on x86). */
#define GROUP_ONES 0x0101010101010101ull
#define GROUP_CACHED (GROUP_ONES * ST_CACHED)
static uint64_t group_load(const fm_st *st) { return __atomic_load_n((const uint64_t *)st, __ATOMIC_RELAXED); }
static void group_store(fm_st *st, uint64_t v) { __atomic_store_n((uint64_t *)st, v, __ATOMIC_RELAXED); }
/* Every byte CACHED (1) or ZERO (2): no bit above the two lowest, and exactly one of them. */
static bool group_cached(uint64_t x) { return !(x & ~(GROUP_ONES * 3)) && ((x ^ x >> 1) & GROUP_ONES) == GROUP_ONES; }
_Static_assert(ST_FREE == 0 && ST_CACHED == 1 && ST_ZERO == 2, "group_cached's test");

/* Takes up to `want` FREE blocks of span head into b[want - 1], b[want - 2], ... (lowest
 * address highest, so that a cache, popping from its top, hands them out in address order: a
 * program that fills them in turn walks memory forwards), marking them CACHED (ZERO when never
 * handed out from a span made of memory that held no pages). */
static uint32_t span_take(const struct fm_class *k, struct fm_shard *h, uint32_t head, struct fm_blk *b, uint32_t want) {
  struct fm_run *r = span_rec(head);
  uint64_t *sum = summary(head);
  uint8_t *base = (uint8_t *)chunk_addr(head);
  fm_st *st0 = state_of(k, head, 0);
  const bool in_lines = k->line_states;
  uint32_t got = 0, hw = r->hw;
  fm_st fresh = r->flags & RUN_DIRTY ? ST_CACHED : ST_ZERO;
  for (unsigned s = 0; s < 8 && got < want; s++)
    while (sum[s] && got < want) {
      uint32_t g = s * 64 + (uint32_t)__builtin_ctzll(sum[s]), q = g * 8, end = q + 8, left = 0;
      if (end > k->nblocks) end = k->nblocks;
      if (q >= hw) {   /* never handed out from here on: every block FREE, no state to read */
        uint32_t n = k->nblocks - q < want - got ? k->nblocks - q : want - got;
        uint8_t *a = base + (size_t)q * k->size;
        for (uint32_t i = q; i < q + n; i++, a += k->size) {
          fm_st *sq = span_state(k, in_lines, head, st0, i);
          st_store(sq, fresh);
          b[want - ++got] = (struct fm_blk){a, sq};
        }
        /* the groups taken whole leave the summary; the one it stopped in stays */
        uint32_t past = (q += n) == k->nblocks ? groups(k) : q / 8;
        for (uint32_t x = g; x < past; x++) sum[x / 64] &= ~(1ull << (x % 64));
        hw = q;
        continue;
      }
      if (!in_lines && end - q == 8 && want - got >= 8 && !group_load(st0 + q)) {
        /* a whole group FREE (the common case of a span's blocks coming back in order): its 8
         * states in one store */
        group_store(st0 + q, GROUP_CACHED);
        for (uint8_t *a = base + (size_t)q * k->size; q < end; q++, a += k->size) b[want - ++got] = (struct fm_blk){a, st0 + q};
      }
      for (; q < end && !left; q++) {
        fm_st *sq = span_state(k, in_lines, head, st0, q);
        if (st_load(sq) != ST_FREE) continue;
        if (got == want) {
          left = 1;
          break;
        }
        st_store(sq, q >= hw ? fresh : ST_CACHED);
        b[want - ++got] = (struct fm_blk){base + (size_t)q * k->size, sq};
      }
      if (q > hw) hw = q;   /* blocks below the last one looked at were handed out or are now */
      if (!left) sum[s] &= ~(1ull << (g % 64));
    }
  r->hw = hw;
  if (got > r->nfree) fault_stop("a span's state bytes are damaged", base, (int)(k - fm_pool.cls));
  r->nfree -= got;
  if (bucket_of(k, r->nfree) != r->bucket) {
    bucket_remove(h, head);
    bucket_insert(k, h, head);
  }
  return got;
}

/* Moves up to `want` blocks of class c from shard sh (or its sibling, shard_lock) into b (state
 * CACHED): first from its transfer cache, then from its spans, fullest first, the lowest
 * address last; with grow, takes a new span from the pool when no span has a free block.
 * Returns the count. */
uint32_t class_take(unsigned c, unsigned sh, struct fm_blk *b, uint32_t want, bool grow) {
  struct fm_class *k = &fm_pool.cls[c];
  struct fm_shard *h = shard_lock(k, sh);
  uint32_t got = 0;
  if (h->xfer_n) {
    uint32_t n = h->xfer_n < want ? h->xfer_n : want;
    xfer_set(h, h->xfer_n - n);
    memcpy(b + want - n, xfer_of(k, h) + h->xfer_n, n * sizeof *b);
    got = n;   /* they never left the shards' count of blocks out */
    if (got == want) {
      fm_unlock(&h->lock);
      return want;
    }
  }
  uint32_t cached = got;
  bool stole = false;
  while (got < want) {   /* each span fills the top of what is left */
    if (!h->bucket_map && (stole || !(stole = span_steal(k, h))) && (!grow || !span_new(c, h))) break;
    uint32_t head = h->bucket[__builtin_ctz(h->bucket_map)] - 1;
    got += span_take(k, h, head, b, want - got);
  }
  h->out += got - cached;
  if (h->out > h->peak) h->peak = h->out;
  fm_unlock(&h->lock);
  if (got < want) memmove(b, b + want - got, got * sizeof *b);
  return got;
}

/* n blocks of span head (record r) just went FREE in shard h (h's lock held): a span with no
 * block out goes back to the pool, but for one kept as the shard's spare. */
static void span_gave(const struct fm_class *k, struct fm_shard *h, uint32_t head, struct fm_run *r, uint32_t n) {
  if (!n) return;
  if ((r->nfree += n) == k->nblocks) {
    /* keep one empty span back, so a shard that swings between 0 and 1 blocks does not take
     * and return a span each time */
    if (h->spare) span_retire(k, h, h->spare - 1);
    bucket_remove(h, head);
    h->spare = head + 1;
  } else if (bucket_of(k, r->nfree) != r->bucket) {
    bucket_remove(h, head);
    bucket_insert(k, h, head);
  }
}

/* Whether b[0..8) are consecutive blocks of size `size`, each beside the next state. */
static bool group_run(const struct fm_blk *b, uintptr_t size) {
  uintptr_t a = (uintptr_t)b[0].p, st = (uintptr_t)b[0].st, bad = 0;
  for (unsigned j = 1; j < 8; j++) bad |= ((uintptr_t)b[j].p - a - j * size) | ((uintptr_t)b[j].st - st - j);
  return !bad;
}

/* Marks FREE the CACHED blocks b[i], b[i+1], ... that lie in the span of line entry e (b[i]
 * does), setting their groups' bits in its summary sum (NULL: a span abandoned at fork, whose
 * states stay as they are); returns the index of the first entry that is not a block of that
 * span with its state beside it. An entry's state address, less its chunk's line's st, is the
 * block's number: checked by a multiplication against the block's address. */
static uint32_t give_run(const struct fm_class *k, uint64_t e, const struct fm_blk *b, uint32_t i, uint32_t n, uint64_t *sum) {
  /* locals: the state stores could alias the pool's fields for the compiler */
  const uintptr_t span = (uintptr_t)(e & ~0xffull), heap = fm_pool.heap_base;
  const uintptr_t size = k->size, nblocks = k->nblocks, bytes = (uintptr_t)k->span_chunks << FM_CHUNK_SHIFT;
  const struct fm_chunk *chunks = fm_pool.chunk;
  const unsigned shift = FM_CHUNK_SHIFT;
  const bool in_lines = k->line_states;
  const uintptr_t st0 = chunks[(span - heap) >> shift].line.st;   /* every line's, unless in_lines */
  uintptr_t set = UINTPTR_MAX;   /* the group whose summary bit the last block set */
  for (; i < n; i++) {
    uintptr_t a = (uintptr_t)b[i].p, q;
    fm_st *st = b[i].st;
    /* (a state 8-aligned first: blocks freed at random fail there 7 times in 8, at no load) */
    if (!in_lines && ((uintptr_t)st & 7) == 0 && n - i >= 8 && b[i + 7].st == st + 7 && (q = (uintptr_t)st - st0) < nblocks &&
        nblocks - q >= 8 && span + q * size == a && group_run(b + i, size) && group_cached(group_load(st))) {
      /* a whole group of the span in address order, each beside its state (the common case
       * of blocks freed in the order they were handed out): its 8 states in one store */
      if (sum) {
        group_store(st, 0);
        sum[q / 512] |= 1ull << (q / 8 % 64);
      }
      i += 7;
      continue;
    }
    if (in_lines) {
      if (a - span >= bytes) break;   /* (its line is then one of the span's) */
      q = (uintptr_t)st - chunks[(a - heap) >> shift].line.st;
    } else {
      q = (uintptr_t)st - st0;
    }
    if (q >= nblocks || span + q * size != a) break;
    if (!st_cached(st_load(st))) fault_stop("a thread cache is damaged", b[i].p, (int)(k - fm_pool.cls));
    if (!sum) continue;
    st_store(st, ST_FREE);
    if (q / 8 != set) sum[q / 512] |= 1ull << ((set = q / 8) % 64);   /* blocks in address order share it */
  }
  return i;
}

/* Takes back n CACHED blocks of class c into their spans, each under the lock of its span's
 * shard (none held on entry). Blocks of one span in a row share its look-ups (a batch freed in
 * allocation order is mostly such runs). */
static void give_spans(struct fm_class *k, unsigned c, const struct fm_blk *b, uint32_t n) {
  struct fm_shard *h = NULL;
  for (uint32_t i = 0, j; i < n; i = j) {
    uintptr_t off = (uintptr_t)b[i].p - fm_pool.heap_base;
    uint64_t e = off < fm_pool.heap_size ? fm_pool.chunk[off >> FM_CHUNK_SHIFT].line.e : 0;
    if ((e & 0xff) != c + 1) fault_stop("a thread cache is damaged", b[i].p, (int)c);
    uint32_t head = span_head(e);
    struct fm_run *r = span_rec(head);
    for (struct fm_shard *x; (x = &k->sh[__atomic_load_n(&r->shard, __ATOMIC_RELAXED)]) != h;) {   /* (span_steal moves a span under its shard's lock) */
      if (h) fm_unlock(&h->lock);
      fm_lock(&(h = x)->lock);
    }
    bool keep = r->epoch == h->epoch;   /* a span abandoned at fork: the child leaves it */
    j = give_run(k, e, b, i, n, keep ? summary(head) : NULL);
    if (j == i) fault_stop("a thread cache is damaged", b[i].p, (int)c);
    h->out -= j - i;
    if (keep) span_gave(k, h, head, r, j - i);
  }
  if (h) fm_unlock(&h->lock);
}

/* Takes back n CACHED blocks of class c from a thread of shard sh: they go to the transfer
 * cache of the shard shard_lock gives (sh's, or another free one while sh's lock is held)
 * while it has room, else to the blocks' spans. */
void class_give(unsigned c, unsigned sh, const struct fm_blk *b, uint32_t n) {
  struct fm_class *k = &fm_pool.cls[c];
  struct fm_shard *h = &k->sh[sh];
  if (__atomic_load_n(&h->xfer_n, __ATOMIC_RELAXED) + n <= k->xfer_max) {
    h = shard_lock(k, sh);
    if (h->xfer_n + n <= k->xfer_max) {
      memcpy(xfer_of(k, h) + h->xfer_n, b, n * sizeof *b);
      xfer_set(h, h->xfer_n + n);
      fm_unlock(&h->lock);
      return;
    }
    fm_unlock(&h->lock);
  }
  give_spans(k, c, b, n);
}

/* Takes back n CACHED blocks of class c whose tag no thread holds into their spans, not a
 * transfer cache: from there the next refill of that shard would hand them to a thread beside
 * whichever thread holds their neighbours (the successor that freed them, say), and each free
 * of either would then write a line of states the other writes. */
void class_home(unsigned c, const struct fm_blk *b, uint32_t n) { give_spans(&fm_pool.cls[c], c, b, n); }

void class_note(unsigned c, unsigned sh, bool borrowed) {
  struct fm_shard *h = &fm_pool.cls[c].sh[sh];
  fm_lock(&h->lock);
  if (borrowed) h->borrows++;
  else h->exhausted++;
  fm_unlock(&h->lock);
}

/* Fork child: a shard whose lock was held at fork may be mid-change; the child abandons its
 * spans (new epoch: blocks freed into them are left alone) and starts afresh. */
void class_after_fork(void) {
  for (unsigned c = 0; c < fm_pool.nclass; c++)
    for (unsigned s = 0; s < fm_pool.nshards; s++) {
      struct fm_shard *h = &fm_pool.cls[c].sh[s];
      if (!fm_lock_held(&h->lock)) continue;
      fm_lock_init(&h->lock, false);
      h->epoch++;
      h->bucket_map = 0;
      h->spare = 0;
      xfer_set(h, 0);   /* their blocks stay CACHED: the child leaves them */
      memset(h->bucket, 0, sizeof h->bucket);
    }
}

void class_stats(unsigned c, struct class_stats *s) {
  struct fm_class *k = &fm_pool.cls[c];
  *s = (struct class_stats){.reserve = k->reserve};
  for (unsigned i = 0; i < fm_pool.nshards; i++) {
    struct fm_shard *h = &k->sh[i];
    fm_lock(&h->lock);
    s->out += h->out - h->xfer_n;
    s->peak += h->peak;
    s->spans += h->spans;
    s->spans_peak += h->spans_peak;
    s->borrows += h->borrows;
    s->exhausted += h->exhausted;
    fm_unlock(&h->lock);
  }
}

/* Whole-class validator (threads quiet): every span in a bucket belongs to the class and its
 * shard and sits in the right bucket, its FREE states agree with its count and the summary. */
int class_check(unsigned c) {
  struct fm_class *k = &fm_pool.cls[c];
  int faults = 0;
  for (unsigned i = 0; i < fm_pool.nshards; i++) {
    struct fm_shard *h = &k->sh[i];
    fm_lock(&h->lock);
    for (uint32_t b = 0; b < FM_BUCKETS; b++) {
      if (!!h->bucket[b] != !!(h->bucket_map & (1u << b))) faults++;
      uint32_t seen = 0;
      for (uint32_t x = h->bucket[b]; x && seen <= h->spans; x = span_rec(x - 1)->next, seen++) {
        uint32_t head = x - 1;
        struct fm_run *r = span_rec(head);
        if ((fm_pool.chunk[head].line.e & 0xff) != c + 1 || r->bucket != b || bucket_of(k, r->nfree) != b || r->shard != i) faults++;
        uint32_t nfree = 0;
        for (uint32_t q = 0; q < k->nblocks; q++) {
          fm_st s = st_load(state_of(k, head, q));
          if (s == ST_FREE) {
            nfree++;
            if (!(summary(head)[q / 512] >> (q / 8 % 64) & 1)) faults++;
          }
        }
        if (nfree != r->nfree) faults++;
      }
      if (seen > h->spans) faults++;
    }
    fm_unlock(&h->lock);
  }
  return faults;
}

/* malloc_trim: every transfer cache empties into its blocks' spans, and every shard's spare
 * span goes back, so each span with no block out returns to the heap (a batch at a time: a
 * shard's lock is never held while another's is taken). */
void class_trim(void) {
  struct fm_blk b[FM_BATCH_MAX];
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    struct fm_class *k = &fm_pool.cls[c];
    for (unsigned s = 0; s < fm_pool.nshards; s++) {
      struct fm_shard *h = &k->sh[s];
      for (;;) {
        fm_lock(&h->lock);
        uint32_t n = h->xfer_n < FM_BATCH_MAX ? h->xfer_n : FM_BATCH_MAX;
        xfer_set(h, h->xfer_n - n);
        memcpy(b, xfer_of(k, h) + h->xfer_n, n * sizeof *b);
        if (!n && h->spare) {
          span_retire(k, h, h->spare - 1);
          h->spare = 0;
        }
        fm_unlock(&h->lock);
        if (!n) break;
        give_spans(k, c, b, n);
      }
    }
  }
}
