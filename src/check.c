/* Checking mode (FLATMALLOC_CHECK=1) and memcheck support share one block layout:
 *
 *     b                    h = user - 16     user                  user + size        end
 *     | allocator links    | check header    | the program's bytes | canary ......... |
 *       (16 B: store and     size, magic,                            at least 8 bytes
 *        free-list words)    offset of h from b
 *
 * b is an ordinary class or large block. The magic encodes h's address and the state
 * (allocated or freed), so a stray or interior pointer, a second free and a damaged canary
 * are all told apart. In checking mode a fault aborts with one line; under memcheck the
 * block is described with client requests and memcheck reports the fault itself. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fmt.h"
#include "internal.h"
#include "os.h"

#include "vg.h"

#define CANARY_MIN 8u
#define CANARY_MAX 64u

struct check_hdr {
  uint64_t size;
  uint32_t magic;
  uint32_t off16;   /* (h - b) / 16 */
};

/* ---- layout helpers ---------------------------------------------------------------------- */
static uint32_t magic(const struct check_hdr *h, bool live) {
  uint32_t m = (uint32_t)(fm_pool.key >> 32) ^ (uint32_t)((uintptr_t)h >> 4) ^ 0xa110c8edu;
  return live ? m : ~m;
}

static uint8_t canary_byte(const uint8_t *at) { return (uint8_t)(0xa5u ^ ((uintptr_t)at & 0xffu)); }

/* End of the underlying block b. */
static uint8_t *block_end(uint8_t *b, int cls) {
  return b + (cls >= 0 ? fm_pool.cls[cls].size : large_usable(b));
}

static size_t canary_len(uint8_t *user, size_t size, uint8_t *end) {
  size_t room = (size_t)(end - (user + size));
  return room < CANARY_MAX ? room : CANARY_MAX;
}

/* ---- allocation -------------------------------------------------------------------------- */
static void *check_alloc(size_t size, size_t align) {
  size_t lead = align > FM_ALIGN ? align + FM_ALIGN : 2 * FM_ALIGN, total;
  if (__builtin_add_overflow(size, lead + CANARY_MIN, &total)) {
    errno = ENOMEM;
    return NULL;
  }
  VALGRIND_DISABLE_ERROR_REPORTING;
  uint8_t *b = block_alloc(total);
  uint8_t *user = NULL;
  if (b) {
    int cls = class_at(b);
    uint8_t *end = block_end(b, cls);
    user = (uint8_t *)(((uintptr_t)b + 2 * FM_ALIGN + align - 1) & ~(uintptr_t)(align - 1));
    if (align <= FM_ALIGN) user = b + 2 * FM_ALIGN;
    struct check_hdr *h = (struct check_hdr *)(user - FM_ALIGN);
    *h = (struct check_hdr){size, magic(h, true), (uint32_t)(((uint8_t *)h - b) / FM_ALIGN)};
    size_t n = canary_len(user, size, end);
    for (size_t i = 0; i < n; i++) user[size + i] = canary_byte(user + size + i);
    VALGRIND_MAKE_MEM_NOACCESS(b, (size_t)(user - b));
    VALGRIND_MAKE_MEM_NOACCESS(user + size, (size_t)(end - user - size));
    profile_alloc(size);
  }
  VALGRIND_ENABLE_ERROR_REPORTING;
  if (user) VALGRIND_MALLOCLIKE_BLOCK(user, size, 0, 0);
  return user;
}

void *check_malloc(size_t size, size_t align) { return check_alloc(size, align < FM_ALIGN ? FM_ALIGN : align); }

/* ---- validation -------------------------------------------------------------------------- */
enum verdict { V_OK, V_FREED, V_FOREIGN, V_INTERIOR, V_MISALIGNED, V_OVERRUN };

struct found {
  struct check_hdr *h;
  uint8_t *b;
  int cls;
  size_t size;   /* the size the program asked for, read while memcheck looks away */
};

static enum verdict check_find(void *p, struct found *f) {
  f->cls = class_at(p);
  if (f->cls < 0 && (uintptr_t)p - fm_pool.heap_base >= fm_pool.heap_size) return V_FOREIGN;
  if ((uintptr_t)p & (FM_ALIGN - 1)) return V_MISALIGNED;
  struct check_hdr *h = (struct check_hdr *)((uint8_t *)p - FM_ALIGN);
  f->h = h;
  bool live = h->magic == magic(h, true);
  if (!live) return h->magic == magic(h, false) ? V_FREED : V_INTERIOR;
  f->b = (uint8_t *)h - (size_t)h->off16 * FM_ALIGN;
  if (f->cls >= 0) {
    /* the header must sit inside the block that p's address belongs to */
    if (class_block((uint8_t *)p - 1, (unsigned)f->cls, NULL) != f->b) return V_INTERIOR;
  } else if (class_at(f->b) >= 0 || !large_owns(f->b)) {
    return V_INTERIOR;
  }
  if (!live) return V_FREED;
  f->size = h->size;
  uint8_t *user = p, *end = block_end(f->b, f->cls);
  if (h->size > (size_t)(end - user)) return V_INTERIOR;
  size_t n = canary_len(user, h->size, end);
  for (size_t i = 0; i < n; i++)
    if (user[h->size + i] != canary_byte(user + h->size + i)) return V_OVERRUN;
  return V_OK;
}

static const char *const verdict_text[] = {
  [V_FREED] = "double free",
  [V_FOREIGN] = "free of a pointer not allocated by flatmalloc",
  [V_INTERIOR] = "free of an interior pointer",
  [V_MISALIGNED] = "free of a misaligned pointer",
  [V_OVERRUN] = "write past the end of a block",
};

/* Validates p for free (or realloc, which names itself). Returns true when p may be released;
 * under memcheck alone a bad pointer is left for memcheck to report. */
static bool check_take(void *p, struct found *f, bool realloc_call) {
  VALGRIND_DISABLE_ERROR_REPORTING;
  enum verdict v = check_find(p, f);
  VALGRIND_ENABLE_ERROR_REPORTING;
  if (v == V_OK) return true;
  if (fm_pool.opt.check) {
    const char *what = verdict_text[v];
    if (realloc_call && v == V_FREED) what = "realloc of a freed block";
    else if (realloc_call && v != V_OVERRUN) what = "realloc of a pointer flatmalloc did not hand out";
    fault_stop(what, p, v == V_FOREIGN ? -1 : f->cls);
  }
  return false;
}

static void check_release(void *p, struct found *f) {
  VALGRIND_FREELIKE_BLOCK(p, 0);
  VALGRIND_DISABLE_ERROR_REPORTING;
  f->h->magic = magic(f->h, false);
  profile_free(f->size);
  block_free(f->b);
  VALGRIND_ENABLE_ERROR_REPORTING;
}

void check_free(void *p) {
  struct found f;
  if (boot_owns(p)) return;
  if (check_take(p, &f, false)) check_release(p, &f);
  else VALGRIND_FREELIKE_BLOCK(p, 0);   /* memcheck: "Invalid free()" */
}

size_t check_usable(void *p) {
  struct found f;
  if (boot_owns(p)) return boot_usable(p);
  if (!check_take(p, &f, false)) return 0;
  return f.size;
}

void *check_realloc(void *p, size_t size) {
  struct found f;
  if (boot_owns(p)) {
    void *q = check_malloc(size, 0);
    if (q) memcpy(q, p, boot_usable(p) < size ? boot_usable(p) : size);
    return q;
  }
  if (!check_take(p, &f, true)) {
    VALGRIND_FREELIKE_BLOCK(p, 0);
    return NULL;
  }
  size_t old = f.size;
  VALGRIND_DISABLE_ERROR_REPORTING;
  uint8_t *end = block_end(f.b, f.cls), *user = p;
  VALGRIND_ENABLE_ERROR_REPORTING;
  if (size <= old && size + CANARY_MIN <= (size_t)(end - user)) {   /* shrink in place */
    VALGRIND_RESIZEINPLACE_BLOCK(p, old, size, 0);
    VALGRIND_DISABLE_ERROR_REPORTING;
    f.h->size = size;
    profile_free(old);
    profile_alloc(size);
    size_t n = canary_len(user, size, end);
    for (size_t i = 0; i < n; i++) user[size + i] = canary_byte(user + size + i);
    VALGRIND_MAKE_MEM_NOACCESS(user + size, (size_t)(end - user - size));
    VALGRIND_ENABLE_ERROR_REPORTING;
    return p;
  }
  void *q = check_malloc(size, 0);
  if (!q) return NULL;
  memcpy(q, p, old < size ? old : size);
  check_release(p, &f);
  return q;
}

/* Under memcheck the pool starts inaccessible: blocks become addressable as they are handed
 * out, and memcheck's leak search does not wade through untouched gigabytes. */
void check_pool_start(void) {
  if (!fm_pool.valgrind) return;
  VALGRIND_MAKE_MEM_NOACCESS((void *)fm_pool.heap_base, fm_pool.heap_size);
}
