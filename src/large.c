/* The large area: blocks above the largest class, managed by a two-level segregated fit index
 * (TLSF): free lists by size range, one bitmap over first levels and one per first level over
 * second levels, so finding a good fit, splitting and coalescing are O(1).
 *
 * Memory layout. [base, top) is cut into physically adjacent blocks; [top, end) was never
 * handed out (or came back) and costs nothing until touched. Each block starts with
 *
 *     prev_size  size of the block before, valid only when L_PREV_FREE is set
 *     size       whole block in bytes (header included, multiple of 16) | flags
 *     ... user's bytes, or for a free block: next, prev links of its free list
 *
 * Invariants: no two free blocks are adjacent; no free block ends at top (it rejoins the
 * untouched space instead); every free block is at least L_MIN bytes. */
#include <pthread.h>
#include <string.h>

#include "internal.h"
#include "os.h"

#define L_FREE 1u
#define L_PREV_FREE 2u
#define L_CLEAN 4u      /* free, and its pages past the first were given back */
#define L_FLAGS 15u
#define L_HDR 16u
#define L_MIN 1024u     /* smallest free block: smaller remainders stay with their block */
#define SL_BITS 5u
#define SL_COUNT (1u << SL_BITS)
#define FL_COUNT 64u

struct lblock {
  size_t prev_size;
  size_t size;
  struct lblock *next, *prev;   /* free blocks only */
};

static struct {
  pthread_mutex_t lock;
  uintptr_t base, top, end;
  uintptr_t dirty_end;          /* [top, dirty_end) holds pages touched before */
  uintptr_t committed;          /* end of the accessible part (strict overcommit) */
  uintptr_t quarantine;         /* blocks below this belong to a parent process (see fork) */
  uint64_t fl_map;
  uint32_t sl_map[FL_COUNT];
  struct lblock *heads[FL_COUNT][SL_COUNT];
  size_t in_use, peak, free, dirty, blocks, retain;
} L = {.lock = PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP};

/* ---- tiny accessors ---------------------------------------------------------------------- */
static size_t bsize(const struct lblock *b) { return b->size & ~(size_t)L_FLAGS; }
static bool bfree(const struct lblock *b) { return b->size & L_FREE; }
static struct lblock *bnext(struct lblock *b) { return (struct lblock *)((char *)b + bsize(b)); }
static struct lblock *bof(const void *p) { return (struct lblock *)((char *)p - L_HDR); }
static void *buser(struct lblock *b) { return (char *)b + L_HDR; }
static bool blast(struct lblock *b) { return (uintptr_t)bnext(b) >= L.top; }

static void bset_prev_free(struct lblock *b, bool is_free, size_t prev_size) {
  if ((uintptr_t)b >= L.top) return;
  if (is_free) {
    b->prev_size = prev_size;
    b->size |= L_PREV_FREE;
  } else {
    b->size &= ~(size_t)L_PREV_FREE;
  }
}

/* ---- index ------------------------------------------------------------------------------- */
static void mapping(size_t size, unsigned *fl, unsigned *sl) {
  unsigned f = 63u - (unsigned)__builtin_clzll(size);
  *fl = f;
  *sl = (unsigned)(size >> (f - SL_BITS)) & (SL_COUNT - 1);
}

static void list_insert(struct lblock *b) {
  unsigned fl, sl;
  mapping(bsize(b), &fl, &sl);
  b->prev = NULL;
  b->next = L.heads[fl][sl];
  if (b->next) b->next->prev = b;
  L.heads[fl][sl] = b;
  L.fl_map |= 1ull << fl;
  L.sl_map[fl] |= 1u << sl;
  L.free += bsize(b);
  if (!(b->size & L_CLEAN)) L.dirty += bsize(b);
}

static void list_remove(struct lblock *b) {
  unsigned fl, sl;
  mapping(bsize(b), &fl, &sl);
  if (b->prev) b->prev->next = b->next;
  else L.heads[fl][sl] = b->next;
  if (b->next) b->next->prev = b->prev;
  if (!L.heads[fl][sl]) {
    L.sl_map[fl] &= ~(1u << sl);
    if (!L.sl_map[fl]) L.fl_map &= ~(1ull << fl);
  }
  L.free -= bsize(b);
  if (!(b->size & L_CLEAN)) L.dirty -= bsize(b);
}

/* A free block of at least size bytes (good fit: the smallest list whose every block fits). */
static struct lblock *list_find(size_t size) {
  unsigned fl, sl;
  size_t rounded = size + ((size_t)1 << (63u - (unsigned)__builtin_clzll(size) - SL_BITS)) - 1;
  mapping(rounded, &fl, &sl);
  if (fl >= FL_COUNT) return NULL;
  uint32_t sm = L.sl_map[fl] & (~0u << sl);
  if (!sm) {
    uint64_t fm = fl + 1 < FL_COUNT ? L.fl_map & (~0ull << (fl + 1)) : 0;
    if (!fm) return NULL;
    fl = (unsigned)__builtin_ctzll(fm);
    sm = L.sl_map[fl];
  }
  struct lblock *b = L.heads[fl][__builtin_ctz(sm)];
  list_remove(b);
  return b;
}

/* ---- giving pages back ------------------------------------------------------------------- */
/* Free memory that still holds pages may reach max(retain, a quarter of the bytes in use); past
 * that each free gives back up to L_RELEASE_MIN bytes of the space above top, and the free of a
 * block of at least L_RELEASE_MIN bytes the pages of the free block it became. Smaller free blocks keep theirs: they sit between live blocks and are reused soon, and
 * giving them back would cost a syscall per free and a fault per page on reuse. A program that
 * frees and reallocates the same big buffer keeps its pages too. */
#define L_RELEASE_MIN (1u << 20)

static void release_pages(uintptr_t from, uintptr_t to) {
  size_t page = os_page_size();
  from = (from + page - 1) & ~(page - 1);
  to &= ~(page - 1);
  if (to > from) os_release((void *)from, to - from);
}

/* Gives back the pages above top, at most `most` bytes of them from the highest down; the
 * rest of top's own page keeps its bytes. */
static void release_top(size_t most) {
  size_t page = os_page_size();
  uintptr_t from = (L.top + page - 1) & ~(uintptr_t)(page - 1);
  uintptr_t to = (L.dirty_end + page - 1) & ~(uintptr_t)(page - 1);   /* nothing lives above top */
  if (to <= from) return;
  if (to - from > most) from = to - most;
  os_release((void *)from, to - from);
  L.dirty_end = from;
}

static void retain_budget(struct lblock *just_freed, size_t freed) {
  size_t budget = L.retain > L.in_use / 4 ? L.retain : L.in_use / 4;
  if (L.dirty + (L.dirty_end - L.top) <= budget) return;
  release_top(L_RELEASE_MIN);   /* bounded: a free gives back at most 1 MiB it did not free */
  if (just_freed && L.dirty > budget && freed >= L_RELEASE_MIN && !(just_freed->size & L_CLEAN)) {
    release_pages((uintptr_t)just_freed + sizeof(struct lblock), (uintptr_t)bnext(just_freed));
    L.dirty -= bsize(just_freed);
    just_freed->size |= L_CLEAN;
  }
}

/* ---- blocks ------------------------------------------------------------------------------ */
/* Makes b (not on any list, its own flags current) free: merges it with free neighbours,
 * returns it to the untouched space when it ends at top, else lists it. */
static struct lblock *release(struct lblock *b) {
  b->size = (b->size & (L_PREV_FREE | ~(size_t)L_FLAGS)) | L_FREE;
  if (!blast(b) && bfree(bnext(b))) {
    struct lblock *n = bnext(b);
    list_remove(n);
    b->size += bsize(n);
  }
  if (b->size & L_PREV_FREE) {
    struct lblock *p = (struct lblock *)((char *)b - b->prev_size);
    list_remove(p);
    p->size = (p->size & ~(size_t)L_CLEAN) + bsize(b);
    b = p;
  }
  if (blast(b)) {
    if (L.dirty_end < (uintptr_t)bnext(b)) L.dirty_end = (uintptr_t)bnext(b);
    L.top = (uintptr_t)b;
    return NULL;
  }
  list_insert(b);
  bset_prev_free(bnext(b), true, bsize(b));
  return b;
}

/* Cuts b (in use, not listed) down to size bytes when the rest is worth a free block. */
static void split(struct lblock *b, size_t size) {
  size_t have = bsize(b);
  if (have - size < L_MIN) return;
  b->size = size | (b->size & L_FLAGS);
  struct lblock *r = bnext(b);
  r->size = have - size;          /* previous block (b) is in use */
  release(r);
}

/* Makes the area accessible up to `to`, 1 MiB at a time (strict overcommit only). */
static bool commit_to(uintptr_t to) {
  if (to <= L.committed) return true;
  uintptr_t want = (to + (1u << 20) - 1) & ~(uintptr_t)((1u << 20) - 1);
  if (want > L.end) want = L.end;
  if (!os_commit((void *)L.committed, want - L.committed)) return false;
  L.committed = want;
  return true;
}

/* A block of exactly `size` bytes or a little more, in use; NULL when the area is full. */
static struct lblock *take(size_t size) {
  struct lblock *b = list_find(size);
  if (b) {
    b->size &= ~(size_t)(L_FREE | L_CLEAN);
    bset_prev_free(bnext(b), false, 0);
    split(b, size);
    return b;
  }
  if (L.end - L.top < size || !commit_to(L.top + size)) return NULL;
  b = (struct lblock *)L.top;
  L.top += size;
  if (L.dirty_end < L.top) L.dirty_end = L.top;
  b->size = size;                 /* the block below top is never free */
  return b;
}

static void account(struct lblock *b, long sign) {
  L.in_use += sign * (long)bsize(b);
  L.blocks += (size_t)sign;
  if (L.in_use > L.peak) L.peak = L.in_use;
}

/* ---- interface --------------------------------------------------------------------------- */
void large_setup(uintptr_t base, uintptr_t end, size_t retain) {
  L.base = L.top = L.dirty_end = L.quarantine = base;
  L.end = end;
  L.committed = fm_pool.lazy_commit ? base : end;
  L.retain = retain;
}

/* A block for size bytes aligned to align; with untouched, also the address above which the
 * area had never been handed out before this call (its pages still read as zero). */
static void *alloc(size_t size, size_t align, uintptr_t *untouched) {
  if (size > L.end - L.base || align > L.end - L.base) return NULL;
  size_t need = (size + L_HDR + FM_ALIGN - 1) & ~(size_t)(FM_ALIGN - 1);
  if (need < L_MIN) need = L_MIN;
  size_t slack = align > FM_ALIGN ? align + L_MIN : 0;
  pthread_mutex_lock(&L.lock);
  if (untouched) *untouched = L.dirty_end;
  struct lblock *b = take(need + slack);
  if (b && slack) {
    /* move the start up to the alignment; the gap before becomes a free block of its own */
    uintptr_t u = ((uintptr_t)buser(b) + L_MIN + align - 1) & ~(uintptr_t)(align - 1);
    struct lblock *a = bof((void *)u);
    size_t gap = (uintptr_t)a - (uintptr_t)b, total = bsize(b);
    b->size = gap | (b->size & L_FLAGS);
    a->size = total - gap;
    release(b);
    a->size |= L_PREV_FREE;
    a->prev_size = gap;
    b = a;
    split(b, need);
  }
  if (b) account(b, 1);
  pthread_mutex_unlock(&L.lock);
  return b ? buser(b) : NULL;
}

void *large_alloc(size_t size, size_t align) { return alloc(size, align, NULL); }

/* calloc of a large block: memory above the highest address ever handed out is still the
 * kernel's zero pages, so only the part below it is cleared (a big sparse calloc stays sparse). */
void *large_calloc(size_t size) {
  uintptr_t untouched;
  uint8_t *p = alloc(size, 0, &untouched);
  if (!p) return NULL;
  uintptr_t end = (uintptr_t)p + size;
  memset(p, 0, (uintptr_t)p >= untouched ? 0 : (end < untouched ? size : untouched - (uintptr_t)p));
  return p;
}

bool large_owns(const void *p) { return (uintptr_t)p - L.base < L.end - L.base; }

/* Always-on checks of a pointer handed to free or realloc. */
static void large_verify(struct lblock *b, const void *p) {
  if (((uintptr_t)p & (FM_ALIGN - 1)) || (uintptr_t)b < L.base)
    check_fault("free of a pointer not allocated by flatmalloc", p, -1);
  if ((uintptr_t)b >= L.top)   /* memory that was handed out and has come back: freed twice */
    check_fault((uintptr_t)b < L.dirty_end ? "double free" : "free of a pointer not allocated by flatmalloc", p, -1);
  if (bfree(b)) check_fault("double free", p, -1);
  if (bsize(b) < L_MIN || (uintptr_t)bnext(b) > L.top) check_fault("free of an interior pointer", p, -1);
}

void large_free(void *p) {
  struct lblock *b = bof(p);
  pthread_mutex_lock(&L.lock);
  if ((uintptr_t)b < L.quarantine) {   /* a parent's block: leave it alone */
    pthread_mutex_unlock(&L.lock);
    return;
  }
  large_verify(b, p);
  account(b, -1);
  size_t freed = bsize(b);
  retain_budget(release(b), freed);
  pthread_mutex_unlock(&L.lock);
}

size_t large_usable(const void *p) { return bsize(bof(p)) - L_HDR; }

/* Grows or shrinks p's block in place when its neighbour allows. */
bool large_resize(void *p, size_t size) {
  struct lblock *b = bof(p);
  size_t need = (size + L_HDR + FM_ALIGN - 1) & ~(size_t)(FM_ALIGN - 1);
  if (need < L_MIN) need = L_MIN;
  if (size > L.end - L.base) return false;
  bool ok = false;
  pthread_mutex_lock(&L.lock);
  if ((uintptr_t)b < L.quarantine) goto out;
  large_verify(b, p);
  size_t have = bsize(b);
  account(b, -1);
  if (need <= have) {
    split(b, need);
    ok = true;
  } else if (blast(b)) {
    if (L.end - (uintptr_t)b >= need && commit_to((uintptr_t)b + need)) {
      L.top = (uintptr_t)b + need;
      if (L.dirty_end < L.top) L.dirty_end = L.top;
      b->size = need | (b->size & L_FLAGS);
      ok = true;
    }
  } else if (bfree(bnext(b)) && have + bsize(bnext(b)) >= need) {
    struct lblock *n = bnext(b);
    list_remove(n);
    b->size += bsize(n);
    bset_prev_free(bnext(b), false, 0);
    split(b, need);
    ok = true;
  }
  account(b, 1);
out:
  pthread_mutex_unlock(&L.lock);
  return ok;
}

/* malloc_trim: the space above top, then up to TRIM_MAX free blocks of at least L_RELEASE_MIN
 * bytes, largest first. Bounded, because programs (stress-ng among them) call it often. */
#define TRIM_MAX 64u

int large_trim(void) {
  pthread_mutex_lock(&L.lock);
  uintptr_t dirty_end = L.dirty_end;
  release_top(SIZE_MAX);
  int released = L.dirty_end != dirty_end;
  unsigned seen = 0, fl_min, sl;
  mapping(L_RELEASE_MIN, &fl_min, &sl);
  for (unsigned fl = FL_COUNT; fl-- > fl_min && seen < TRIM_MAX;)
    for (uint32_t sm = L.sl_map[fl]; sm && seen < TRIM_MAX; sm &= sm - 1)
      for (struct lblock *b = L.heads[fl][__builtin_ctz(sm)]; b && seen < TRIM_MAX; b = b->next, seen++)
        if (!(b->size & L_CLEAN)) {
          release_pages((uintptr_t)b + sizeof *b, (uintptr_t)bnext(b));
          L.dirty -= bsize(b);
          b->size |= L_CLEAN;
          released = 1;
        }
  pthread_mutex_unlock(&L.lock);
  return released;
}

/* In a forked child the lock may have been held by a thread that no longer exists, in the
 * middle of changing the lists. Then the child cannot trust the lists: it abandons them (and
 * the parent's free blocks, a copy-on-write loss only) and carries on above top, where no
 * block was ever handed out. Taking the lock in a prepare handler instead would deadlock
 * against glibc's stdio locks, which fork takes after the prepare handlers. */
void large_after_fork(void) {
  if (pthread_mutex_trylock(&L.lock) == 0) {
    pthread_mutex_unlock(&L.lock);
    return;
  }
  L.lock = (pthread_mutex_t)PTHREAD_ADAPTIVE_MUTEX_INITIALIZER_NP;
  L.top = L.quarantine = (L.top + FM_ALIGN - 1) & ~(uintptr_t)(FM_ALIGN - 1);
  if (L.dirty_end < L.top) L.dirty_end = L.top;
  L.fl_map = 0;
  memset(L.sl_map, 0, sizeof L.sl_map);
  memset(L.heads, 0, sizeof L.heads);
  L.free = L.dirty = 0;
}

void large_stats(struct large_stats *s) {
  pthread_mutex_lock(&L.lock);
  *s = (struct large_stats){L.in_use, L.peak, L.free, L.top - L.base, L.blocks, L.dirty_end, L.base};
  pthread_mutex_unlock(&L.lock);
}

/* Whole-area validator: walks every block and every list; the two must agree. */
int large_check(void) {
  int faults = 0;
  size_t free_walk = 0, free_lists = 0;
  pthread_mutex_lock(&L.lock);
  bool prev_free = false;
  size_t prev_size = 0;
  for (struct lblock *b = (struct lblock *)L.quarantine; (uintptr_t)b < L.top; b = bnext(b)) {
    if (bsize(b) < L_MIN || bsize(b) % FM_ALIGN || (uintptr_t)bnext(b) > L.top) {
      faults++;
      break;
    }
    if (prev_free != !!(b->size & L_PREV_FREE) || (prev_free && b->prev_size != prev_size)) faults++;
    if (bfree(b) && prev_free) faults++;   /* two adjacent free blocks */
    if (bfree(b)) free_walk += bsize(b);
    prev_free = bfree(b);
    prev_size = bsize(b);
  }
  if (prev_free) faults++;   /* a free block ends at top */
  for (unsigned fl = 0; fl < FL_COUNT; fl++)
    for (unsigned sl = 0; sl < SL_COUNT; sl++) {
      bool listed = L.heads[fl][sl] != NULL;
      if (listed != !!(L.sl_map[fl] & (1u << sl))) faults++;
      for (struct lblock *b = L.heads[fl][sl]; b; b = b->next) {
        unsigned f, s;
        mapping(bsize(b), &f, &s);
        if (!bfree(b) || f != fl || s != sl) faults++;
        free_lists += bsize(b);
      }
    }
  if (free_walk != free_lists || free_lists != L.free) faults++;
  pthread_mutex_unlock(&L.lock);
  return faults;
}
