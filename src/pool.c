/* The pool: reserve it, lay it out, and leave a fork child a usable one. slow.c starts it up
 * (reading the settings, then every other file's set-up). */
#include <errno.h>

#include "fmt.h"
#include "internal.h"
#include "os.h"

struct fm_pool fm_pool;

/* ---- layout ----------------------------------------------------------------------------- */
static size_t align_up(size_t v, size_t a) { return (v + a - 1) & ~(a - 1); }

#define POOL_ALIGN (2u << 20)
#define POOL_AS_ROOM (64ull << 20)   /* eight threads with glibc's default 8 MiB stacks */
#define POOL_AS_SMALL (8ull << 20)

static cold __attribute__((noreturn)) void too_small(size_t size) {
  char v[32];
  struct fmt f = {v, sizeof v, 0};
  fmt_u64(&f, size, 0);
  fmt_end(&f);
  options_fail("FLATMALLOC_POOL", fm_pool.opt.pool_text ? fm_pool.opt.pool_text : v,
               "pool too small (it needs room for its tables and one span of the largest class)");
}

/* [ state shadows | class magics | lines | run records | pages bitmap | arenas | size -> class | zones | tags | inboxes | shards | transfer caches | thread caches ] heap
 * The pool is the heap: its tables come on top, in the same reservation, so that a pool of N
 * bytes holds N bytes of blocks. The heap starts on a chunk boundary after them, so every span
 * is aligned to the chunk size. */
struct layout {
  size_t nchunks, nshards, shadow_off[FM_SHADOWS], chunk_off, pages_off, arena_off, tab_off, kinds_off, tag_off, inbox_off, shard_off, xfer_off, cache_off, meta;
  uint32_t inbox_n, caches_n, cache_bytes;
};

static void layout_of(size_t size, struct layout *L) {
  const struct fm_options *o = &fm_pool.opt;
  /* Meta is 128 bytes a chunk (line and run record) and the shadows 1/2^s of the heap for each
   * scale s a class uses (1/8 in all for the default classes; pages of them are touched only
   * where spans of those classes are). */
  const unsigned shift = FM_CHUNK_SHIFT;
  L->nchunks = size >> shift;
  /* two shards a CPU, fewer where their transfer caches would take more than 1/16 of the pool */
  size_t per_shard = sizeof(struct fm_shard) + FM_XFER * sizeof(struct fm_blk);
  L->nshards = 2;
  while (L->nshards < 2 * (size_t)os_cpus() && L->nshards < FM_SHARDS_MAX) L->nshards *= 2;
  while (L->nshards > 1 && L->nshards * o->nclass * per_shard > size / 16) L->nshards /= 2;
  size_t ntab = o->class_size[o->nclass - 1] / FM_ALIGN + 1;
  /* a shadow for each scale a class whose states are not in the lines uses (types.h) */
  size_t off = 0;
  for (unsigned s = 0; s < FM_SHADOWS; s++) L->shadow_off[s] = SIZE_MAX;
  for (unsigned c = 0; c < o->nclass; c++) {
    unsigned s = fm_st_shift(o->class_size[c]);
    if (fm_line_states(o->class_size[c]) || L->shadow_off[s] != SIZE_MAX) continue;
    L->shadow_off[s] = off;
    off = align_up(off + (L->nchunks << shift >> s), FM_SECTOR);
  }
  L->chunk_off = align_up(off, FM_SECTOR) + FM_MAGICS * sizeof(uint64_t);   /* the magics below them (fm_magic) */
  L->pages_off = align_up(L->chunk_off + L->nchunks * sizeof(struct fm_chunk), 64);
  L->arena_off = align_up(L->pages_off + (L->nchunks + 63) / 64 * 8, 64);   /* committed with the per-chunk tables */
  L->tab_off = align_up(L->arena_off + (L->nchunks / FM_ARENA_CHUNKS + 1) * FM_ARENA_REC, 64);
  /* a byte per huge page of the heap (span.c's zones), opened with the size -> class table */
  L->kinds_off = align_up(L->tab_off + ntab, 64);
  size_t hp = fm_pool.huge_chunks ? fm_pool.huge_chunks : 1;
  L->tag_off = align_up(L->kinds_off + L->nchunks / hp + 2, FM_SECTOR);
  /* the tags' inboxes: 1/64 of the pool at most (under a Valgrind tool no thread holds a tag) */
  L->inbox_n = FM_INBOX_MAX;
  while (L->inbox_n > FM_OUTBOX && (fm_pool.valgrind || (size_t)FM_TAGS * L->inbox_n * sizeof(struct fm_slot) > size / 64)) L->inbox_n /= 2;
  L->inbox_off = align_up(L->tag_off + FM_TAGS * sizeof(struct fm_tag), os_page_size());   /* opened a tag at a time */
  L->shard_off = align_up(L->inbox_off + (size_t)FM_TAGS * L->inbox_n * sizeof(struct fm_slot), FM_SECTOR);
  L->xfer_off = align_up(L->shard_off + o->nclass * L->nshards * sizeof(struct fm_shard), FM_SECTOR);
  /* the thread caches: on base pages, opened a cache at a time (under a Valgrind tool no thread
   * holds one); 1/32 of the pool at most, the rest in heap runs; none under RLIMIT_AS, where the
   * program needs the address space it leaves (the caches are then heap runs) */
  L->cache_bytes = (uint32_t)align_up(tcache_bytes(o), os_page_size());
  size_t slots = fm_pool.valgrind || os_address_limit() != UINT64_MAX ? 0 : size / 32 / L->cache_bytes;
  L->caches_n = slots < FM_CACHES_MAX ? (uint32_t)slots : FM_CACHES_MAX;
  L->cache_off = align_up(L->xfer_off + o->nclass * L->nshards * FM_XFER * sizeof(struct fm_blk), os_page_size());
  /* the heap starts on a huge page where all of it lies on them (else huge_from is one) */
  size_t heap_align = fm_pool.huge_chunks && !fm_pool.huge_from ? (size_t)fm_pool.huge_chunks << shift : (size_t)1 << shift;
  L->meta = align_up(L->cache_off + (size_t)L->caches_n * L->cache_bytes, heap_align);
}

static void pool_layout(void *mem, size_t size, const struct layout *L) {
  struct fm_pool *P = &fm_pool;
  struct fm_options *o = &P->opt;
  const unsigned shift = FM_CHUNK_SHIFT;
  size_t meta = L->meta, tab_off = L->tab_off;
  uintptr_t base = (uintptr_t)mem;
  P->base = base;
  P->size = size;
  P->heap_base = base + meta;
  uint32_t heap_chunks = (uint32_t)L->nchunks;
  P->heap_size = (size_t)heap_chunks << shift;
  /* Opened as used (lazy_commit): the size -> class table, tags, shards and transfer caches
   * now; a tag's inbox when a thread first takes the tag and a slot of the cache area when a
   * thread's cache first lies there (tcache.c); the per-chunk tables as the heap grows (span.c). */
  size_t page = os_page_size(), tab_lo = tab_off & ~(page - 1), shard_lo = L->shard_off & ~(page - 1);
  uintptr_t magics = base + L->chunk_off - FM_MAGICS * sizeof(uint64_t);
  if (P->lazy_commit && (!os_commit((void *)(base + tab_lo), L->inbox_off - tab_lo) ||
                         !os_commit((void *)(base + shard_lo), L->cache_off - shard_lo) ||
                         !os_commit((void *)(magics & ~(page - 1)), base + L->chunk_off - (magics & ~(page - 1)))))
    options_fail("FLATMALLOC_POOL", o->pool_text ? o->pool_text : "(default)",
                 "the system refused to open the pool's tables (the commit limit, vm.overcommit_memory=2)");
  P->chunk = (struct fm_chunk *)(base + L->chunk_off);
  for (unsigned s = 0; s < FM_SHADOWS; s++)
    P->st_bias[s] = L->shadow_off[s] == SIZE_MAX ? 0 : base + L->shadow_off[s] - (P->heap_base >> s);
  P->tags = (struct fm_tag *)(base + L->tag_off);
  P->inbox = (struct fm_slot *)(base + L->inbox_off);
  P->inbox_n = L->inbox_n;
  P->arenas = (void *)(base + L->arena_off);
  P->nshards = (unsigned)L->nshards;
  P->cpus = os_cpus();
  P->xfer = (struct fm_blk *)(base + L->xfer_off);
  P->caches = base + L->cache_off;
  P->caches_n = L->caches_n;
  P->cache_bytes = L->cache_bytes;
  for (unsigned c = 0; c < o->nclass; c++) P->cls[c].sh = (struct fm_shard *)(base + L->shard_off) + (size_t)c * L->nshards;
  P->nclass = o->nclass;
  P->small_max = o->class_size[o->nclass - 1];
  P->key = os_random();
  P->link_key = os_random() | 1;
  uint8_t *cls_of = (uint8_t *)(base + tab_off);
  class_setup(o, cls_of, heap_chunks);
  P->cls_of = cls_of;
  for (unsigned c = 0; c < o->nclass; c++)
    if (heap_chunks < P->cls[c].span_chunks) too_small(size);   /* the largest class's, as a rule */
  options_check_room(o, heap_chunks);
  span_setup((uint64_t *)(base + L->pages_off), (uint8_t *)(base + L->kinds_off), heap_chunks, o->retain);
}

/* ---- huge pages ---------------------------------------------------------------------------
 * Where the kernel offers transparent huge pages, the heap above its first FM_HUGE_FROM bytes
 * is advised onto them (all of it in the real-time profile, which makes the pool resident
 * anyway), the heap starts on a huge page and span.c opens, places and gives back memory there
 * in whole huge pages; below, and in the tables, base pages, so a small program is no bigger.
 * In "always" mode the rest is advised off them for the same reason. hugetlb: the whole pool
 * is the kernel's reserved huge pages, opened at once (they are the kernel's to give at mmap). */
static size_t pool_hp;        /* the huge page's size, 0: none */
static bool thp_always;       /* the kernel's mode is "always" */

/* FLATMALLOC_HUGEPAGES=hugetlb and the reserved pages cannot hold a pool of `need` of them. */
static cold __attribute__((noreturn)) void hugetlb_fail(size_t hp, uint64_t need) {
  char why[256];
  struct fmt f = {why, sizeof why, 0};
  uint64_t free, total = os_hugetlb_pages(&free);
  if (!hp) {
    fmt_str(&f, "the kernel offers no reserved huge pages (no hugetlbfs)");
  } else {
    fmt_str(&f, "the pool needs ");
    fmt_u64(&f, need, 0);
    fmt_str(&f, " huge pages of ");
    fmt_u64(&f, hp >> 10, 0);
    fmt_str(&f, "K and ");
    fmt_u64(&f, free, 0);
    fmt_str(&f, " are free: reserve more (sysctl -w vm.nr_hugepages=");
    fmt_u64(&f, total + need - (free < need ? free : need), 0);
    fmt_str(&f, ") or set a smaller FLATMALLOC_POOL");
  }
  fmt_end(&f);
  options_fail("FLATMALLOC_HUGEPAGES", "hugetlb", why);
}

/* A huge page size the heap can use: a power of two, whole chunks, at most FM_HUGE_MAX. */
static bool huge_fits(size_t hp) { return hp >= FM_CHUNK && hp <= FM_HUGE_MAX && !(hp & (hp - 1)); }

static void huge_plan(bool tool) {
  struct fm_options *o = &fm_pool.opt;
  size_t thp = tool ? 0 : os_thp_size(&thp_always);
  pool_hp = 0;
  fm_pool.hugetlb = false;
  if (!tool && o->huge == HUGE_TLB) {
    uint64_t free;
    size_t hp = os_hugetlb_size(&free);
    if (huge_fits(hp) && (free || o->huge_strict)) {
      pool_hp = hp;
      fm_pool.hugetlb = true;
    } else if (o->huge_strict) {
      hugetlb_fail(0, 0);
    }
  }
  if (!pool_hp && o->huge != HUGE_OFF && huge_fits(thp)) pool_hp = thp;
  fm_pool.huge_chunks = (uint32_t)(pool_hp >> FM_CHUNK_SHIFT);
  fm_pool.huge_from = !pool_hp || o->prefault || fm_pool.hugetlb ? 0 : 1;   /* pool_reserve places it */
}

/* The advice for the pool at mem (tables as laid out in L, then the heap): in "always" mode
 * what is not to be on huge pages is advised off them. The chunks' records (128 bytes a chunk)
 * lie on huge pages past their first huge page, which describes 256 MiB of heap: a heap that
 * large pays at most one huge page of records it does not use. */
static void huge_advise(uintptr_t mem, const struct layout *L, size_t heap) {
  size_t meta = L->meta;
  if (fm_pool.hugetlb) return;
  if (fm_pool.huge_chunks && (size_t)fm_pool.huge_from << FM_CHUNK_SHIFT >= heap) fm_pool.huge_chunks = 0;   /* too small a heap */
  uintptr_t end = mem + meta + heap, split = end;
  if (fm_pool.huge_chunks) split = fm_pool.opt.prefault ? mem : mem + meta + ((size_t)fm_pool.huge_from << FM_CHUNK_SHIFT);
  if (split > mem && thp_always) os_advise_huge((void *)mem, split - mem, false);
  if (end > split) os_advise_huge((void *)split, end - split, true);
  uintptr_t t0 = (mem + L->chunk_off + 2 * pool_hp - 1) & ~(uintptr_t)(pool_hp - 1);
  uintptr_t t1 = (mem + L->chunk_off + L->nchunks * sizeof(struct fm_chunk)) & ~(uintptr_t)(pool_hp - 1);
  if (fm_pool.huge_chunks && split > mem && t1 > t0 && os_advise_huge((void *)t0, t1 - t0, true)) fm_pool.huge_table = t0;
}

/* Reserves size bytes starting on a 2 MiB boundary (or the huge page's); the slack before it
 * is never touched. */
static void *(*pool_tool_map)(size_t size);

static void *pool_map(size_t size) {
  if (fm_pool.hugetlb) return os_reserve_hugetlb((size + pool_hp - 1) / pool_hp * pool_hp);   /* aligned by the kernel */
  size_t align = pool_hp > POOL_ALIGN ? pool_hp : POOL_ALIGN;
  uintptr_t mem = (uintptr_t)(pool_tool_map ? pool_tool_map(size + align)
                                            : os_reserve(size + align, !fm_pool.lazy_commit));
  return mem ? (void *)((mem + align - 1) & ~(uintptr_t)(align - 1)) : NULL;
}

/* The pool of o->pool bytes, or of the default size (the most the machine, RLIMIT_AS and, for
 * hugetlb, the free reserved pages allow, halved until the reservation succeeds); NULL when
 * none could be had, with *least the smallest size tried. */
static void *pool_try(size_t *psize, struct layout *L, uint64_t tool_cap, size_t *least) {
  struct fm_options *o = &fm_pool.opt;
  size_t size = o->pool;
  *least = size;
  if (size) {
    layout_of(size, L);
    return pool_map(size + L->meta);
  }
  if (o->prefault)   /* it would make the machine's memory resident */
    options_fail("FLATMALLOC_PREFAULT", "1", "needs FLATMALLOC_POOL: the whole pool is made resident at start-up");
  uint64_t phys = os_physical_memory();
  if (tool_cap && phys > tool_cap) phys = tool_cap;   /* see check.c */
  size = phys > FM_POOL_MAX ? FM_POOL_MAX : (size_t)phys;
  /* Under RLIMIT_AS the program keeps POOL_AS_ROOM for thread stacks and, of the rest, half
   * for libraries and its own mappings; under a limit too small for that the pool takes up to
   * POOL_AS_SMALL, at most half the limit. */
  uint64_t limit = os_address_limit(), cap = limit > POOL_AS_ROOM ? (limit - POOL_AS_ROOM) / 2 : 0;
  uint64_t small = limit / 2 < POOL_AS_SMALL ? limit / 2 : POOL_AS_SMALL;
  if (cap < small) cap = small;
  *least = cap < (64u << 20) ? (size_t)cap : (64u << 20);
  if (fm_pool.hugetlb) {   /* what the free reserved pages hold */
    uint64_t free;
    os_hugetlb_size(&free);
    if (free * pool_hp < cap) cap = free * pool_hp;
  }
  if (size > cap) size = (size_t)cap;
  for (; size && size >= *least; size /= 2) {
    layout_of(size, L);
    if (size + L->meta > cap) {   /* the tables fit under the limit too */
      if (L->meta >= cap) continue;
      layout_of(size = (size_t)cap - L->meta, L);
    }
    void *mem = pool_map(size + L->meta);
    if (mem) {
      *psize = size;
      return mem;
    }
  }
  return NULL;
}

static bool mlock_called;   /* the program called mlockall (pool_before_mlockall) */

void pool_reserve(void *(*tool_map)(size_t size), uint64_t tool_cap) {
  struct fm_options *o = &fm_pool.opt;
  pool_tool_map = tool_map;
  huge_plan(tool_map || tool_cap);
  /* The heap is opened as it is used (mlockall then locks only that), except when prefaulted,
   * on hugetlb pages and under a Valgrind tool (its own map; opened as used only where the
   * kernel counts every writable page anyway, strict overcommit). Opening is bookkeeping, what
   * may be opened accessible from start-up, until the program calls mlockall (or always under
   * strict overcommit, which would charge every accessible page): an mprotect while other
   * threads fault pages in puts them to sleep and wakes them on its caller's CPU. */
  fm_pool.lazy_commit = !o->prefault && !fm_pool.hugetlb && (!tool_cap || os_overcommit_strict());   /* tool_cap: any tool */
  fm_pool.realtime = o->prefault;
  size_t size = o->pool, least;
  struct layout L;
  void *mem = pool_try(&size, &L, tool_cap, &least);
  if (!mem && fm_pool.hugetlb) {
    layout_of(least, &L);
    if (o->huge_strict) hugetlb_fail(pool_hp, (least + L.meta + pool_hp - 1) / pool_hp);
    o->huge = HUGE_AUTO;   /* glibc.malloc.hugetlb=2: ordinary pages, as glibc falls back to */
    huge_plan(false);
    fm_pool.lazy_commit = !o->prefault && !tool_cap;
    mem = pool_try(&size, &L, tool_cap, &least);
  }
  if (!mem && o->pool) {
    errno = ENOMEM;
    options_fail("FLATMALLOC_POOL", o->pool_text, "the system refused to reserve a pool of this size");
  }
  if (!mem) {
    char why[64];
    struct fmt f = {why, sizeof why, 0};
    fmt_str(&f, "could not reserve even ");
    fmt_u64(&f, least >> 10, 0);
    fmt_str(&f, "K of address space");
    fmt_end(&f);
    options_fail("FLATMALLOC_POOL", "(default)", why);
  }
  o->pool = size;
  if (fm_pool.huge_from) {   /* the first chunk past FM_HUGE_FROM that starts a huge page */
    uintptr_t heap = (uintptr_t)mem + L.meta, at = (heap + FM_HUGE_FROM + pool_hp - 1) & ~(uintptr_t)(pool_hp - 1);
    fm_pool.huge_from = (uint32_t)((at - heap) >> FM_CHUNK_SHIFT);
  }
  huge_advise((uintptr_t)mem, &L, (size_t)(size >> FM_CHUNK_SHIFT) << FM_CHUNK_SHIFT);
  if (o->prefault) os_populate(mem, size + L.meta);
  pool_layout(mem, size, &L);
  fm_pool.protect = fm_pool.lazy_commit && (os_overcommit_strict() || __atomic_load_n(&mlock_called, __ATOMIC_ACQUIRE));
  if (fm_pool.lazy_commit && !fm_pool.protect && !(span_open_all() && tcache_open_all())) {
    fm_pool.protect = true;   /* refused (RLIMIT_DATA, the commit limit): opened as used */
    span_close_unopened();
    tcache_close_unopened();
  }
}

/* The shim's mlockall, before the system's: from now on the pool is opened with mprotect as it
 * is used, and what it has not opened is made inaccessible, so mlockall locks only what the
 * heap uses and later openings lock what they open. (A pool reserved after it, when another
 * library's constructor locked memory before flatmalloc's ran, is opened as used from the
 * start: mlock_called.) */
void pool_before_mlockall(void) {
  __atomic_store_n(&mlock_called, true, __ATOMIC_RELEASE);
  if ((!pool_ready() && !pool_init()) || !fm_pool.lazy_commit || pool_protecting()) return;
  __atomic_store_n(&fm_pool.protect, true, __ATOMIC_SEQ_CST);
  span_close_unopened();
  tcache_close_unopened();
}

/* In a forked child only the forking thread exists: other threads' caches and their
 * blocks are left as they were (never reused; copy-on-write makes that free). A class or the
 * heap whose lock another thread held at the fork is abandoned and starts afresh. */
void pool_after_fork(void) {
  span_after_fork();
  class_after_fork();
  atomic_store_explicit(&fm_pool.lockers, 0, memory_order_relaxed);   /* the lockers were other threads */
  tcache_after_fork();
}
