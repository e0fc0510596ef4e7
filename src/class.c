/* Size classes (types.h, SPAN): each class's span geometry, its spans with free blocks in
 * occupancy buckets, and batches moving between spans and thread caches under the class's
 * lock, O(batch). */
#include <string.h>

#include "internal.h"
#include "os.h"

/* ---- span geometry ----------------------------------------------------------------------- */
static uintptr_t chunk_addr(uint32_t i) { return fm_pool.heap_base + ((uintptr_t)i << fm_pool.chunk_shift); }
static uint8_t *states(const struct fm_class *k, uint32_t head) { return (uint8_t *)chunk_addr(head) + k->nblocks * k->size; }
static struct fm_line *line(uint32_t i) { return (struct fm_line *)&fm_pool.line[i]; }
/* The state byte of block q of the span at head. */
static uint8_t *state_of(const struct fm_class *k, uint32_t head, uint32_t q) {
  if (!k->inline_st) return states(k, head) + q;
  return line(head + (uint32_t)(((uint64_t)q * k->size) >> fm_pool.chunk_shift))->stbase + q;
}
/* Block number of p in the span at span_addr (p in it). */
static uint32_t block_of(unsigned c, uintptr_t span_addr, const void *p) {
  return (uint32_t)(((unsigned __int128)((uintptr_t)p - span_addr) * fm_cf.magic[c + 1]) >> 64);
}
/* One bit per 8 state bytes that holds a FREE one; kept in the record of the span's 2nd chunk
 * (a span has at least 3, and only the first and last records belong to the run). */
static uint64_t *summary(uint32_t head) { return (uint64_t *)span_rec(head + 1); }
static uint32_t words(const struct fm_class *k) { return (k->nblocks + 7) / 8; }

/* Bytes of v that are 0 (ST_FREE), as their top bits; exact per byte (no borrow between them). */
static uint64_t zero_bytes(uint64_t v) {
  const uint64_t m = 0x7f7f7f7f7f7f7f7full;
  return ~(((v & m) + m) | v | m);
}

struct fm_cf fm_cf;

unsigned class_of(size_t size) { return fm_pool.cls_of[(size + FM_ALIGN - 1) / FM_ALIGN] - 1u; }

static uint32_t span_head(uint64_t e) { return (uint32_t)(((e >> 8) - fm_pool.heap_base) >> fm_pool.chunk_shift); }

/* Class of the span holding p, or -1 when p is not in a span. */
int class_at(const void *p) {
  uintptr_t off = (uintptr_t)p - fm_pool.heap_base;
  if (off >= fm_pool.heap_size) return -1;
  unsigned c = fm_pool.line[off >> fm_pool.chunk_shift].e & 0xff;
  return c == FM_NO_CLASS ? -1 : (int)c - 1;
}

/* The span (its first chunk) and the number of the block of class k that holds p, p being in a
 * span of that class; false when p lies past the span's last block. */
static bool locate(const void *p, const struct fm_class *k, uint32_t *head, uint32_t *q) {
  *head = span_head(fm_pool.line[((uintptr_t)p - fm_pool.heap_base) >> fm_pool.chunk_shift].e);
  *q = (uint32_t)(((uintptr_t)p - chunk_addr(*head)) / k->size);
  return *q < k->nblocks;
}

/* Start of the block of class c that holds p (p in a span of c), and its state byte. */
void *class_block(const void *p, unsigned c, uint8_t **st) {
  const struct fm_class *k = &fm_pool.cls[c];
  uint32_t head, q;
  if (!locate(p, k, &head, &q)) return NULL;
  if (st) *st = state_of(k, head, q);
  return (void *)(chunk_addr(head) + (uintptr_t)q * k->size);
}

/* The state byte of p, which the program handed to call (free, realloc, malloc_usable_size),
 * when p is a LIVE block of class c; otherwise stops the program naming the call and what p is. */
uint8_t *class_verify(const void *p, unsigned c, enum fault_call call) {
  const struct fm_class *k = &fm_pool.cls[c];
  uint32_t head, q;
  if ((uintptr_t)p & (FM_ALIGN - 1)) fault_bad(call, FAULT_MISALIGNED, p, (int)c);
  if (!locate(p, k, &head, &q)) fault_bad(call, FAULT_FOREIGN, p, (int)c);
  if (chunk_addr(head) + (uintptr_t)q * k->size != (uintptr_t)p) fault_bad(call, FAULT_INTERIOR, p, (int)c);
  uint8_t *st = state_of(k, head, q), s = __atomic_load_n(st, __ATOMIC_RELAXED);
  if (s == ST_LIVE) return st;
  if (s == ST_CACHED || (s == ST_FREE && q < __atomic_load_n(&span_rec(head)->hw, __ATOMIC_RELAXED))) fault_bad(call, FAULT_FREED, p, (int)c);
  fault_bad(call, FAULT_FOREIGN, p, (int)c);
}

void class_setup(const struct fm_options *o, uint8_t *cls_of, uint32_t heap_chunks) {
  size_t chunk = (size_t)1 << fm_pool.chunk_shift;
  for (unsigned c = 0, units = 0; c < o->nclass; c++) {
    struct fm_class *k = &fm_pool.cls[c];
    uint32_t size = o->class_size[c], batch = FM_BATCH_BYTES / size;
    if (batch < FM_BATCH_MIN) batch = FM_BATCH_MIN;
    if (batch > FM_BATCH_MAX) batch = FM_BATCH_MAX;
    /* at least FM_SPAN_MIN, 8 blocks and 3 chunks (the summary lives in the 2nd chunk's record,
     * not the last); of the next 8 chunk counts, the one that wastes the smallest share */
    bool inl = (chunk + size - 1) / size <= FM_LINE_STATES;
    size_t span = 8ull * size + 64 > FM_SPAN_MIN ? 8ull * size + 64 : FM_SPAN_MIN, best = 0;
    if (span < 3 * chunk) span = 3 * chunk;
    span = (span + chunk - 1) & ~(chunk - 1);
    uint64_t n = 0;
    for (size_t s = span, i = 0; i < 8; i++, s += chunk) {
      uint64_t states = inl ? 0 : ((s - 1) / size + 1 + 7) & ~7ull, m = (s - states) / size;
      if (m > FM_SPAN_BLOCKS) m = FM_SPAN_BLOCKS;
      if (!best || m * size * best > n * size * s) best = s, n = m;   /* higher use of the span */
    }
    span = best;
    pthread_mutex_init(&k->lock, NULL);
    k->size = size;
    k->batch = batch;
    k->nblocks = (uint32_t)n;
    k->span_chunks = (uint32_t)(span / chunk);
    k->nstates = inl ? 0 : (uint32_t)((span - 1) / size + 1);
    k->xfer_max = FM_XFER_BYTES / (batch * size);   /* blocks held there keep their spans out of the pool */
    if (k->xfer_max > FM_XFER) k->xfer_max = FM_XFER;
    if (k->xfer_max < 1) k->xfer_max = 1;
    k->inline_st = inl;
    k->reserve = (uint64_t)heap_chunks * o->class_bp[c] / 10000;
    k->epoch = 1;
    fm_cf.magic[c + 1] = UINT64_MAX / size + 1;
    fm_cf.size[c + 1] = size;
    for (; units * FM_ALIGN <= size; units++) cls_of[units] = (uint8_t)(c + 1);
  }
}

/* ---- buckets ----------------------------------------------------------------------------- */
/* Bucket 0 holds the fullest spans; a span with no free block is in none (FM_BUCKETS). */
static uint32_t bucket_of(const struct fm_class *k, uint32_t nfree) {
  return nfree ? (uint32_t)((uint64_t)(nfree - 1) * FM_BUCKETS / k->nblocks) : FM_BUCKETS;
}

static void bucket_remove(struct fm_class *k, uint32_t head) {
  struct fm_run *r = span_rec(head);
  if (r->bucket >= FM_BUCKETS) return;
  if (r->prev) span_rec(r->prev - 1)->next = r->next;
  else k->bucket[r->bucket] = r->next;
  if (r->next) span_rec(r->next - 1)->prev = r->prev;
  if (!k->bucket[r->bucket]) k->bucket_map &= ~(1u << r->bucket);
  r->bucket = FM_BUCKETS;
}

static void bucket_insert(struct fm_class *k, uint32_t head) {
  struct fm_run *r = span_rec(head);
  uint32_t b = bucket_of(k, r->nfree);
  r->bucket = b;
  if (b >= FM_BUCKETS) return;
  r->prev = 0;
  r->next = k->bucket[b];
  if (r->next) span_rec(r->next - 1)->prev = head + 1;
  k->bucket[b] = head + 1;
  k->bucket_map |= 1u << b;
}

/* ---- spans in and out -------------------------------------------------------------------- */
/* A fresh span for class c, all blocks FREE, in its bucket. False when the pool has none. */
static bool span_new(unsigned c) {
  struct fm_class *k = &fm_pool.cls[c];
  if (k->spare) {
    bucket_insert(k, k->spare - 1);
    k->spare = 0;
    return true;
  }
  int64_t got = span_alloc(k->span_chunks, c, false);
  if (got < 0) return false;
  uint32_t head = (uint32_t)got;
  uint32_t w = words(k);
  size_t chunk = (size_t)1 << fm_pool.chunk_shift;
  if (!k->inline_st) {
    uint8_t *st = states(k, head);
    uint32_t ch_first = (uint32_t)(((uintptr_t)st - fm_pool.heap_base) >> fm_pool.chunk_shift);
    uint32_t ch_last = (uint32_t)(((uintptr_t)st + w * 8 - 1 - fm_pool.heap_base) >> fm_pool.chunk_shift);
    for (uint32_t i = ch_first; i <= ch_last; i++)
      if (span_chunk_dirty(i)) {   /* reused memory: states from an earlier life */
        memset(st, ST_FREE, k->nblocks);
        break;
      }
    memset(st + k->nblocks, 0xff, ((k->nstates + 7) & ~7u) - k->nblocks);   /* no block there: never FREE or LIVE */
  }
  for (uint32_t j = 0; j < k->span_chunks; j++) {
    struct fm_line *l = line(head + j);
    if (k->inline_st) {   /* the blocks that start in chunk j: FREE; the other places: never FREE or LIVE */
      uint64_t q0 = (j * chunk + k->size - 1) / k->size, q1 = ((j + 1) * chunk + k->size - 1) / k->size;
      if (q1 > k->nblocks) q1 = k->nblocks;
      memset(l->st, 0xff, sizeof l->st);
      if (q1 > q0) memset(l->st, ST_FREE, q1 - q0);
      l->stbase = (uint8_t *)((uintptr_t)l->st - q0);   /* stbase[q] is st[q - q0] (integer math: outside st until q is added) */
    } else {
      l->stbase = states(k, head);
    }
    __atomic_store_n(&l->e, (uint64_t)chunk_addr(head) << 8 | (c + 1), __ATOMIC_RELEASE);
  }
  uint64_t *sum = summary(head);
  memset(sum, 0, 64);
  for (uint32_t i = 0; i < w; i++) sum[i / 64] |= 1ull << (i % 64);
  struct fm_run *r = span_rec(head);
  r->nfree = k->nblocks;
  r->hw = 0;
  r->epoch = k->epoch;
  r->bucket = FM_BUCKETS;
  bucket_insert(k, head);
  if (++k->spans > k->spans_peak) k->spans_peak = k->spans;
  return true;
}

static void span_retire(struct fm_class *k, uint32_t head) {
  bucket_remove(k, head);
  for (uint32_t j = 0; j < k->span_chunks; j++) __atomic_store_n(&line(head + j)->e, FM_NO_CLASS, __ATOMIC_RELAXED);
  k->spans--;
  span_free(head);
}

static void class_give_spans(struct fm_class *k, unsigned c, void *const *p, uint8_t *const *st, uint32_t n);

/* ---- batches ----------------------------------------------------------------------------- */
/* Block q of the span at head, never handed out, lies in chunks that held no pages when the
 * span was made (the bits change only when the run is freed): it reads as zero. */
static bool fresh(const struct fm_class *k, uint32_t head, uint32_t q) {
  uint64_t from = (uint64_t)q * k->size, to = from + k->size - 1;
  for (uint32_t i = head + (uint32_t)(from >> fm_pool.chunk_shift); i <= head + (uint32_t)(to >> fm_pool.chunk_shift); i++)
    if (span_chunk_dirty(i)) return false;
  return true;
}

/* Takes up to `want` FREE blocks of span head into p/st, marking them CACHED (ZERO when fresh). */
static uint32_t span_take(struct fm_class *k, uint32_t head, void **p, uint8_t **st, uint32_t want) {
  struct fm_run *r = span_rec(head);
  uint64_t *sum = summary(head);
  uint8_t *base = (uint8_t *)chunk_addr(head);
  uint32_t got = 0;
  for (unsigned s = 0; s < 8 && got < want; s++)
    while (sum[s] && got < want) {
      uint32_t w = s * 64 + (uint32_t)__builtin_ctzll(sum[s]), q = w * 8, end = q + 8, left = 0;
      if (end > k->nblocks) end = k->nblocks;
      if (!k->inline_st && !zero_bytes(__atomic_load_n((uint64_t *)(states(k, head) + q), __ATOMIC_RELAXED)))
        q = end;   /* the 8 states after the blocks in one load: none FREE */
      for (; q < end; q++) {
        uint8_t *sq = state_of(k, head, q);
        if (__atomic_load_n(sq, __ATOMIC_RELAXED) != ST_FREE) continue;
        if (got == want) {
          left = 1;
          break;
        }
        st_store(sq, q >= r->hw && fresh(k, head, q) ? ST_ZERO : ST_CACHED);
        if (q >= r->hw) r->hw = q + 1;
        p[got] = base + (size_t)q * k->size;
        st[got++] = sq;
      }
      if (!left) sum[s] &= ~(1ull << (w % 64));
    }
  if (got > r->nfree) fault_stop("a span's state bytes are damaged", base, (int)(k - fm_pool.cls));
  r->nfree -= got;
  bucket_remove(k, head);
  bucket_insert(k, head);
  return got;
}

/* Moves up to `want` blocks of class c, fullest spans first, into p/st (state CACHED); with
 * grow, takes a new span from the pool when no span has a free block. Returns the count. */
uint32_t class_take(unsigned c, void **p, uint8_t **st, uint32_t want, bool grow) {
  struct fm_class *k = &fm_pool.cls[c];
  uint32_t got = 0;
  fm_lock(&k->lock);
  if (want == k->batch && k->xfer_n) {
    k->xfer_n--;
    memcpy(p, k->xfer_p[k->xfer_n], want * sizeof *p);
    memcpy(st, k->xfer_st[k->xfer_n], want * sizeof *st);
    fm_unlock(&k->lock);
    return want;   /* they never left the class's count of blocks out */
  }
  while (got < want) {
    if (!k->bucket_map && (!grow || !span_new(c))) break;
    uint32_t head = k->bucket[__builtin_ctz(k->bucket_map)] - 1;
    got += span_take(k, head, p + got, st + got, want - got);
  }
  k->out += got;
  if (k->out > k->peak) k->peak = k->out;
  fm_unlock(&k->lock);
  return got;
}

/* Takes back n CACHED blocks of class c: a whole batch goes to the transfer cache while it has
 * room, anything else to the blocks' spans, where a span with no block out goes back to the
 * pool. */
void class_give(unsigned c, void *const *p, uint8_t *const *st, uint32_t n) {
  struct fm_class *k = &fm_pool.cls[c];
  fm_lock(&k->lock);
  if (n == k->batch && k->xfer_n < k->xfer_max) {
    memcpy(k->xfer_p[k->xfer_n], p, n * sizeof *p);
    memcpy(k->xfer_st[k->xfer_n], st, n * sizeof *st);
    k->xfer_n++;
    fm_unlock(&k->lock);
    return;
  }
  class_give_spans(k, c, p, st, n);
  fm_unlock(&k->lock);
}

/* Returns n CACHED blocks to their spans (class lock held). */
static void class_give_spans(struct fm_class *k, unsigned c, void *const *p, uint8_t *const *st, uint32_t n) {
  uint32_t shift = fm_pool.chunk_shift;
  k->out -= n;
  for (uint32_t i = 0; i < n; i++) {
    uint32_t ch = (uint32_t)(((uintptr_t)p[i] - fm_pool.heap_base) >> shift);
    uint64_t e = fm_pool.line[ch].e;
    uint32_t head = span_head(e);
    struct fm_run *r = span_rec(head);
    if ((e & 0xff) != c + 1 || !st_cached(st_load(st[i]))) fault_stop("a thread cache is damaged", p[i], (int)c);
    if (r->epoch != k->epoch) continue;   /* a span abandoned at fork: the child leaves it */
    uint32_t q = block_of(c, (uintptr_t)(e >> 8), p[i]);
    st_store(st[i], ST_FREE);
    summary(head)[q / 512] |= 1ull << (q / 8 % 64);
    if (++r->nfree == k->nblocks) {
      /* keep one empty span back, so a class that swings between 0 and 1 blocks does not take
       * and return a span each time */
      if (k->spare) span_retire(k, k->spare - 1);
      bucket_remove(k, head);
      k->spare = head + 1;
    } else if (bucket_of(k, r->nfree) != r->bucket) {
      bucket_remove(k, head);
      bucket_insert(k, head);
    }
  }
}

void class_note(unsigned c, bool borrowed) {
  struct fm_class *k = &fm_pool.cls[c];
  fm_lock(&k->lock);
  if (borrowed) k->borrows++;
  else k->exhausted++;
  fm_unlock(&k->lock);
}

/* Fork child: a class whose lock was held at fork may be mid-change; the child abandons its
 * spans (new epoch: blocks freed into them are left alone) and starts afresh. */
void class_after_fork(void) {
  for (unsigned c = 0; c < fm_pool.nclass; c++) {
    struct fm_class *k = &fm_pool.cls[c];
    if (pthread_mutex_trylock(&k->lock) == 0) {
      pthread_mutex_unlock(&k->lock);
      continue;
    }
    pthread_mutex_init(&k->lock, NULL);
    k->epoch++;
    k->bucket_map = 0;
    k->spare = 0;
    k->xfer_n = 0;   /* their blocks stay CACHED: the child leaves them */
    memset(k->bucket, 0, sizeof k->bucket);
  }
}

void class_stats(unsigned c, struct class_stats *s) {
  struct fm_class *k = &fm_pool.cls[c];
  fm_lock(&k->lock);
  *s = (struct class_stats){.out = k->out - (uint64_t)k->xfer_n * k->batch, .peak = k->peak, .spans = k->spans, .spans_peak = k->spans_peak,
                            .reserve = k->reserve, .borrows = k->borrows, .exhausted = k->exhausted};
  fm_unlock(&k->lock);
}

/* Whole-class validator (threads quiet): every span in a bucket belongs to the class and sits
 * in the right bucket, its FREE state bytes agree with its count and with the summary. */
int class_check(unsigned c) {
  struct fm_class *k = &fm_pool.cls[c];
  int faults = 0;
  fm_lock(&k->lock);
  for (uint32_t b = 0; b < FM_BUCKETS; b++) {
    if (!!k->bucket[b] != !!(k->bucket_map & (1u << b))) faults++;
    uint32_t seen = 0;
    for (uint32_t h = k->bucket[b]; h && seen <= k->spans; h = span_rec(h - 1)->next, seen++) {
      uint32_t head = h - 1;
      struct fm_run *r = span_rec(head);
      if ((fm_pool.line[head].e & 0xff) != c + 1 || r->bucket != b || bucket_of(k, r->nfree) != b) faults++;
      uint32_t nfree = 0;
      for (uint32_t q = 0; q < k->nblocks; q++) {
        uint8_t s = *state_of(k, head, q);
        if (s > ST_ZERO) faults++;
        if (s == ST_FREE) {
          nfree++;
          if (!(summary(head)[q / 512] >> (q / 8 % 64) & 1)) faults++;
        }
      }
      if (nfree != r->nfree) faults++;
    }
    if (seen > k->spans) faults++;
  }
  fm_unlock(&k->lock);
  return faults;
}
