/* Checking mode (FLATMALLOC_CHECK=1): the header before each block and the canary after it,
 * and their validation. Described mode (vg.c, under any Valgrind tool) lays its blocks out the
 * same way and calls these; nothing here calls up into vg.c. The layout:
 *
 *     b                    h = user - 16     user                  user + size        end
 *     | allocator links    | check header    | the program's bytes | canary ......... |
 *       (16 B: store and     size, magic,                            at least 8 bytes
 *        free-list words)    offset of h from b, kind
 *
 * b is an ordinary class or large block. A block aligned past a chunk (1 MiB, 1 GiB) is a large
 * block aligned as default mode's: the program's bytes start it, the canary follows them and
 * the header is the block's last 16 bytes. The magic encodes h's address and the state
 * (allocated or freed), so a stray or interior pointer, a second free and a damaged canary
 * are all told apart; the kind (malloc, memalign, new, new[]) catches a release through the
 * wrong function. The canary bytes are keyed with the per-process random key and never 0.
 * In checking mode a fault aborts with one line; under Valgrind the tool reports it. */
#include <errno.h>

#include "fmt.h"
#include "check.h"

#define CANARY_MAX 64u

/* ---- layout helpers ---------------------------------------------------------------------- */
uint32_t check_magic(const struct check_hdr *h, bool live) {
  uint32_t m = (uint32_t)(fm_pool.key >> 32) ^ (uint32_t)((uintptr_t)h >> 4) ^ 0xa110c8edu;
  return live ? m : ~m;
}

/* Canary byte i after a block ending at user + size: keyed (7 random bits a byte), and never
 * an ASCII byte nor 0xff, so an overrun by a string's terminating NUL, by text or by a
 * memset to 0 or -1 always shows, whatever the key. */
static uint64_t canary_seed(const uint8_t *user) {
  uint64_t x = (fm_pool.key ^ (uintptr_t)user) * 0x9e3779b97f4a7c15ull;
  return x ^ (x >> 29);
}
static uint8_t canary_byte(uint64_t seed, size_t i) {
  uint8_t c = (uint8_t)(0x80u | ((uint8_t)(seed >> ((i & 7) * 8)) ^ (uint8_t)(i >> 3)));
  return c == 0xff ? 0xfe : c;
}

/* End of the underlying block b. */
uint8_t *check_block_end(uint8_t *b, int cls) {
  return b + (cls >= 0 ? fm_pool.cls[cls].size : large_usable(b));
}

/* Under Valgrind alone the tool watches the canary's bytes itself (they are no-access): none
 * are written or checked, which keeps memcheck's time near glibc's. */
static size_t canary_len(uint8_t *user, size_t size, uint8_t *end) {
  if (!fm_pool.opt.check || (!size && check_guards())) return 0;   /* malloc(0)'s bytes: a guard */
  size_t room = (size_t)(end - (user + size));
  return room < CANARY_MAX ? room : CANARY_MAX;
}

void check_canary_fill(uint8_t *user, size_t size, uint8_t *end) {
  uint64_t seed = canary_seed(user);
  size_t n = canary_len(user, size, end);
  for (size_t i = 0; i < n; i++) user[size + i] = canary_byte(seed, i);
}

bool check_canary_ok(const uint8_t *user, size_t size, uint8_t *end) {
  uint64_t seed = canary_seed(user);
  size_t n = canary_len((uint8_t *)user, size, end);
  for (size_t i = 0; i < n; i++)
    if (user[size + i] != canary_byte(seed, i)) return false;
  return true;
}

/* Checking mode outside Valgrind guards what no one may touch (malloc(0)'s bytes) and holds
 * freed large blocks inaccessible; under a tool, the tool watches them itself. */
bool check_guards(void) { return fm_pool.opt.check && !fm_pool.valgrind; }

/* ---- a block's header ------------------------------------------------------------------- */
size_t check_block_lead(size_t align) { return align > FM_ALIGN ? align + FM_ALIGN : 2 * FM_ALIGN; }

/* Writes the header of a block of size bytes aligned to align inside underlying block b;
 * returns the program's pointer. */
uint8_t *check_head(uint8_t *b, size_t size, size_t align, enum check_kind kind) {
  uint8_t *user = (uint8_t *)(((uintptr_t)b + 2 * FM_ALIGN + align - 1) & ~(uintptr_t)(align - 1));
  if (align <= FM_ALIGN) user = b + 2 * FM_ALIGN;
  struct check_hdr *h = (struct check_hdr *)(user - FM_ALIGN);
  *h = (struct check_hdr){size, check_magic(h, true), (uint32_t)(((uint8_t *)h - b) / FM_ALIGN), kind};
  return user;
}

/* Where the program's bytes and the canary end in underlying block b holding user: at the
 * block's end, or at the header where it sits there (a block aligned past a chunk). */
uint8_t *check_room_end(uint8_t *b, int cls, const uint8_t *user) {
  uint8_t *end = check_block_end(b, cls);
  return cls < 0 && user == b ? end - FM_ALIGN : end;
}

/* A block for size bytes aligned to align, its header written: the program's pointer, and the
 * underlying block in *bp; NULL when the pool has no room (errno ENOMEM unless direct, native
 * code's own cache). An alignment up to a chunk is found inside a block of size plus the lead;
 * a larger one is a large block aligned as default mode's (no more address space than there),
 * the program's bytes at its start and the header in its last 16 bytes. */
uint8_t *check_alloc(size_t size, size_t align, enum check_kind kind, bool direct, uint8_t **bp) {
  size_t n;
  uint8_t *b;
  if (!size && align <= FM_CHUNK && check_guards()) {   /* malloc(0): its chunk is a guard */
    b = large_alloc(2 * FM_CHUNK, 0);
    if (!b && !direct) errno = ENOMEM;
    if (!b) return NULL;
    *bp = b;
    uint8_t *user = check_head(b, 0, FM_CHUNK, kind);
    (void)large_shade(b, 1, 1, SHADE_GUARD);   /* refused (the kernel's count of mappings): no guard */
    return user;
  }
  if (align > FM_CHUNK) {
    if (__builtin_add_overflow(size, FM_ALIGN + CANARY_MIN, &n)) n = SIZE_MAX;
    b = large_alloc(n, align);
    if (!b && !direct) errno = ENOMEM;
    if (!b) return NULL;
    struct check_hdr *h = (struct check_hdr *)(b + large_usable(b) - FM_ALIGN);
    *h = (struct check_hdr){size, check_magic(h, true), 0, kind};
    *bp = b;
    return b;
  }
  if (__builtin_add_overflow(size, check_block_lead(align) + CANARY_MIN, &n)) {
    if (!direct) errno = ENOMEM;
    return NULL;
  }
  b = direct ? block_alloc_direct(n) : block_alloc(n);
  if (!b) return NULL;
  *bp = b;
  return check_head(b, size, align, kind);
}

/* ---- validation -------------------------------------------------------------------------- */
enum check_verdict check_find(void *p, struct check_block *f) {
  f->cls = pool_opened(p) ? class_at(p) : -1;
  if (f->cls < 0 && !pool_opened(p)) return V_FOREIGN;   /* outside the heap, or above what it handed out */
  if ((uintptr_t)p & (FM_ALIGN - 1)) return V_MISALIGNED;
  f->user = p;
  bool at_run = f->cls < 0 && large_owns(p);   /* aligned past a chunk: the header at the run's end */
  if (f->cls < 0 && !at_run) {   /* no header is read in an inaccessible chunk (quarantine, guards) */
    enum large_shade here = large_shade_at(p), before = large_shade_at((uint8_t *)p - FM_ALIGN);
    if (here == SHADE_HIDDEN) return V_FREED;
    if (before == SHADE_HIDDEN) return V_FOREIGN;   /* p starts the chunk after a freed block: no block */
    if (before == SHADE_GUARD) return V_INTERIOR;
  }
  struct check_hdr *h = (struct check_hdr *)((uint8_t *)p + (at_run ? large_usable(p) : 0) - FM_ALIGN);
  f->h = h;
  bool live = h->magic == check_magic(h, true);
  if (!live && h->magic == check_magic(h, false)) return V_FREED;
  if (!live && f->cls >= 0) return V_INTERIOR;
  if (!live) {   /* its span or run may be gone, and its pages with it */
    enum fault_kind k = large_fault(p);
    return k == FAULT_FREED ? V_FREED : k == FAULT_FOREIGN ? V_FOREIGN : k == FAULT_ARENA ? V_ARENA : V_INTERIOR;
  }
  f->b = at_run ? p : (uint8_t *)h - (size_t)h->off16 * FM_ALIGN;
  if (f->cls >= 0) {
    /* the header must sit inside the block that p's address belongs to */
    if (class_block((uint8_t *)p - 1, (unsigned)f->cls) != f->b) return V_INTERIOR;
  } else if (!large_owns(f->b) || class_at(f->b) >= 0) {
    return V_INTERIOR;
  }
  f->size = h->size;
  f->kind = (enum check_kind)h->kind;
  uint8_t *user = p, *end = check_room_end(f->b, f->cls, user);
  if (h->size > (size_t)(end - user)) return V_INTERIOR;
  if (check_canary_ok(user, h->size, end)) return V_OK;
  /* Another thread's free of this block may have marked it freed and filled it (canary
   * included) since the magic above was read: that is a double free, not an overrun. */
  return __atomic_load_n(&h->magic, __ATOMIC_ACQUIRE) == check_magic(h, false) ? V_FREED : V_OVERRUN;
}

static const char *const verdict_text[] = {
  [V_FREED] = "double free",
  [V_FOREIGN] = "free of a pointer not allocated by flatmalloc",
  [V_INTERIOR] = "free of an interior pointer",
  [V_MISALIGNED] = "free of a misaligned pointer",
  [V_OVERRUN] = "write past the end of a block",
  [V_ARENA] = "free of an arena allocation",
};
static const enum fault_kind verdict_kind[] = {
  [V_FREED] = FAULT_FREED, [V_FOREIGN] = FAULT_FOREIGN, [V_INTERIOR] = FAULT_INTERIOR, [V_MISALIGNED] = FAULT_MISALIGNED, [V_ARENA] = FAULT_ARENA};

/* "free of a block allocated by new[]": the releasing function and the allocating one. */
static const char *const released_by[] = {[KIND_MALLOC] = "free", [KIND_NEW] = "delete", [KIND_NEW_ARRAY] = "delete[]"};
static const char *const allocated_by[] = {
  [KIND_MALLOC] = "malloc", [KIND_ALIGNED] = "memalign", [KIND_NEW] = "new", [KIND_NEW_ARRAY] = "new[]"};

bool check_kind_fits(enum check_kind have, enum check_kind release) {
  return have == release || (have == KIND_ALIGNED && release == KIND_MALLOC);
}

void check_mismatch(void *p, struct check_block *f, enum check_kind release, bool realloc_call) {
  char what[64];
  struct fmt m = {what, sizeof what, 0};
  fmt_str(&m, realloc_call ? "realloc" : released_by[release]);
  fmt_str(&m, " of a block allocated by ");
  fmt_str(&m, allocated_by[f->kind]);
  fmt_end(&m);
  if (fm_pool.opt.check) fault_stop(what, p, f->cls);
  VALGRIND_PRINTF_BACKTRACE("Mismatched free() / delete / delete []: %s\n", what);
}

/* Validates p for a release through the family of kind (realloc names itself). Returns true
 * when p may be released; under Valgrind alone a bad pointer is left for the tool to report. */
bool check_take(void *p, struct check_block *f, int release, bool realloc_call) {
  VALGRIND_DISABLE_ERROR_REPORTING;
  enum check_verdict v = check_find(p, f);
  VALGRIND_ENABLE_ERROR_REPORTING;
  if (v == V_OK) {
    if (release >= 0 && !check_kind_fits(f->kind, (enum check_kind)release)) check_mismatch(p, f, (enum check_kind)release, realloc_call);
    return true;
  }
  if (fm_pool.opt.check) {
    if (realloc_call && v != V_OVERRUN) fault_bad(CALL_REALLOC, verdict_kind[v], p, v == V_FOREIGN ? -1 : f->cls);
    fault_stop(verdict_text[v], p, v == V_FOREIGN ? -1 : v == V_ARENA ? FAULT_CLS_ARENA : f->cls);
  }
  return false;
}

/* Checking mode's fault for a bad pointer handed to malloc_usable_size; 0 under Valgrind alone. */
size_t check_usable_fault(enum check_verdict v, void *p, int cls) {
  if (!fm_pool.opt.check) return 0;
  if (v == V_OVERRUN) fault_stop(verdict_text[v], p, cls);
  fault_bad(CALL_USABLE, verdict_kind[v], p, v == V_FOREIGN ? -1 : cls);
}

/* Checking mode's fault for a bad pointer given to a release; nothing under Valgrind alone. */
void check_fault(enum check_verdict v, void *p, int cls) {
  if (fm_pool.opt.check) fault_stop(verdict_text[v], p, v == V_FOREIGN ? -1 : v == V_ARENA ? FAULT_CLS_ARENA : cls);
}

/* A sized release (free_sized, free_aligned_sized, sized delete) whose size is not the one the
 * block was asked with: checking mode stops. */
void check_size_fault(void *p, const struct check_block *f, size_t size, const char *call) {
  char what[128];
  struct fmt m = {what, sizeof what, 0};
  fmt_str(&m, call);
  fmt_str(&m, " of a block of ");
  fmt_u64(&m, f->size, 0);
  fmt_str(&m, " bytes with size ");
  fmt_u64(&m, size, 0);
  fmt_end(&m);
  fault_stop(what, p, f->cls);
}
