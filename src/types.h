/* flatmalloc core types. Read this first.
 *
 * POOL. At start-up the allocator reserves one contiguous region of address space and never
 * asks the system for memory again:
 *
 *     [ meta | heap: chunk 0 | chunk 1 | ...                                  | chunk N-1 ]
 *       ^ base  ^ heap_base                                     ^ top: never handed out above
 *
 * The heap is cut into chunks of 2^FM_CHUNK_SHIFT bytes (16 KiB in every pool, so that free()
 * shifts by a constant; 128 bytes of meta a chunk, reserved for the whole pool, touched where
 * the heap is used). The reservation is inaccessible and opened as it is used: the heap and
 * its per-chunk tables up to the highest chunk taken, in steps of 1 MiB (span.c's commit_to;
 * whole huge pages where the heap lies on them, HUGE PAGES below), a tag's inbox when a thread
 * first takes the tag, a slot of the cache area when a thread's cache first lies there, the
 * fixed tables at start-up. Until the program's mlockall (the shim's) opening is bookkeeping,
 * those parts accessible from start-up, so the heap's growth changes no mapping; mlockall
 * closes what is not open and openings call mprotect from then on (fm_pool.protect), so it
 * locks what the heap uses, not the pool. fm_pool.chunks_open counts the chunks whose records
 * are open: a pointer into a chunk above is in no block, and no lookup reads its records
 * (free()'s fast path is bounded by it, the slow paths test it). Prefaulted, it is opened and
 * populated whole at start-up; under a Valgrind tool it is the tool's mapping. The meta area
 * holds the blocks' states (BLOCK STATE below) and, per chunk, a line (struct fm_line: the span
 * and class it belongs to), a run record and a bit "may hold pages"; plus the size -> class
 * table, the owner tags, the classes' shards and their transfer caches, and the cache area
 * (thread caches, on base pages: THREAD CACHE below). No allocator metadata lives in free
 * memory: a stray write into a freed block can corrupt nothing but that block. No cache line of
 * meta that malloc() and free() write holds records of two spans, nor does a sector (FM_SECTOR:
 * the two cache lines a CPU fetches together) of chunk records (a chunk's line and its run
 * record are a sector, a chunk's states in a shadow a whole number of cache lines; shards and
 * tags a sector each): spans belong to one shard, and threads that share no shard write no
 * common line, whichever chunks their spans have side by side.
 *
 * HUGE PAGES (pool.c, span.c). Where the kernel offers transparent huge pages, the heap from
 * the first huge page past FM_HUGE_FROM (16 MiB) is cut into huge pages of two zones: DENSE,
 * advised onto huge pages, holds what is written as it is handed out (spans of the classes up
 * to FM_DENSE_MAX, large blocks of a huge page or more, arena slabs); SPARSE, advised off them,
 * the rest (a block of 48 KiB of which a program writes a word would make 2 MiB resident). A
 * free huge page changes zone when the other needs it. The tables and the first 16 MiB stay on
 * base pages (advised off huge pages in "always" mode), so a small program is no bigger; when
 * the heap grows past them, the huge pages it has not used below FM_HUGE_FROM join the rest. In
 * the dense zone the heap is opened in whole aligned huge pages, and a huge page stays whole
 * while any of it is used: a run cut from one marks the rest of it as holding pages (the kernel
 * faulted it in whole), so the next runs fill it first, and pages go back only in whole huge
 * pages; free chunks inside a huge page still in use keep theirs (out of the release FIFO)
 * until a full malloc_trim (one a FLATMALLOC_RETAIN_DELAY at most), which splits it. hugetlb:
 * the whole pool is the kernel's reserved huge pages, opened at start-up.
 *
 * RUN (span.c). The heap is handed out in runs of whole chunks, to a size class (a span) or to
 * one large block. Free runs are indexed by length with TLSF bitmaps (O(1) good fit; those that
 * may hold pages apart, searched first), merge with free neighbours on release (O(1), via the
 * records of a run's first and last chunk), and wait in a FIFO, oldest first, until their pages
 * go back to the system (madvise): as many as a run taken where no page was takes, from runs
 * free for over a 32nd of FLATMALLOC_RETAIN_DELAY (they did not fit it), and once the free
 * memory that still holds pages passes the retained budget (FLATMALLOC_RETAIN, twice the heap
 * in use, or the most in use over the last FLATMALLOC_RETAIN_DELAY: a heap that swings keeps
 * its pages). Any run may become any span or large block: no class owns memory, except that a
 * class (or the large area) may hold a reservation that the others cannot take.
 *
 * SPAN (class.c). A span holds n blocks of one class from its first byte (so a block aligned to
 * its size stays aligned); nothing else lives in it. Where its blocks would fill whole rounds
 * of their offsets in cache lines (64 / gcd(size, 64) blocks a round), it holds one fewer, so
 * the next span starts the round elsewhere in the program's sequence of requests (a program
 * that allocates in a pattern meets each kind of block at every offset, not at one in every
 * span). Each class is split into shards, two per CPU the process may use (sched_getaffinity at
 * start-up, a power of two up to FM_SHARDS_MAX), each with its own lock, its spans with free
 * blocks in occupancy buckets (the fullest span first, so nearly empty spans drain and go back
 * to the pool) and a transfer cache of blocks given back as they came. A refill or flush uses
 * one of the two shards of the CPU the thread runs on now (sched_getcpu, read from the rseq
 * area), the other one when the first's lock is held: threads on different CPUs share no lock,
 * and a lock holder preempted on a 2-core machine with 4,000 threads stops no one. A flush that
 * does not fit the transfer cache goes to the shard of each block's span. A span whose blocks
 * are all free returns to the heap.
 *
 * BLOCK STATE. Every block has a state byte out of the heap (so no overflow from a block
 * reaches it), found from the chunk's line: block q's is at line.st + q. free() finds q by one
 * multiplication by the class's magic (q = high half, and the low half < magic iff the address
 * is a block start). A class of at most 16 blocks a chunk (1 KiB and up) keeps the states of
 * the blocks starting in a chunk in that chunk's line itself, in a sector with the chunk's run
 * record, so a free reads one cache line of meta and two threads whose spans have neighbouring
 * chunks write none in common (with two lines to a cache line two threads churning blocks of
 * 1-4 KiB did 0.9x one thread's work, with a line each but two to a sector 1.5-1.6x). A smaller class's states are packed per span
 * in a shadow, a meta array of one byte per 2^s heap bytes, 2^s being the class's size rounded
 * down to a power of two, at most 256 (a shadow per such scale that a class uses; a chunk's
 * part of one is whole cache lines), from the start of the span's part of it (every line of
 * the span names it). So the pages of a class's states are a 2^s-th of its spans' memory where
 * those lie together, at least a quarter of it states: for blocks of 48 B a 32nd, of 256 B a
 * 256th (one shadow of 1/16 byte per heap byte, as before, took a 16th for every class: 6 % of
 * a program's memory). A large heap's states stay in cache and few pages (262,144 blocks of
 * 64 B: 256 KiB; a page holds the states of 1 MiB of blocks of 256 B). (States in the lines
 * down to 342 B, 48 blocks a chunk, would fill the line; tried, a refill or flush in address
 * order then costs 83-86 instructions a call against 69-71, blocks of 384-768 B, without the
 * shadows' eight states in one store.) A
 * thread cache keeps each cached block's state address beside it, so malloc() writes the state
 * without looking the span up. A state is FREE (in its span; 0, so fresh memory needs no
 * set-up), CACHED (in a thread cache; ZERO when it was never handed out and its pages never
 * written), REMOTE (freed by a thread that does not own it, waiting for its owner) or LIVE:
 * OWNED + tag when a thread holding a tag handed it out, LIVE when a thread without one did.
 *
 * ONE WRITER PER STATE, AND HOW A BLOCK FREED BY ANOTHER THREAD GETS HOME (remote.c). A tag is
 * one of FM_TAGS LIVE values, each with an inbox, in the meta area; a thread holds one while
 * one is free (it takes one at its first call, or at a later refill once one is free; gives it
 * back at exit). The thread holding a LIVE block's tag frees it with a plain load and store:
 * free() of its own block (LIVE -> CACHED) and malloc() (CACHED -> its LIVE), no atomic step on
 * the hot pair. Any other thread frees it with one compare-exchange LIVE -> REMOTE and adds it
 * to its outbox, which goes to the tag's inbox in one step (full, another tag's block, or the
 * freeing thread's refill or exit): a ring of slots (a run of blocks that follow each other in
 * their span: the first's address, the class and the length, the first's state's address; up to
 * FM_INBOX_MAX, by the pool's size), so a taker takes them without reading or looking up the
 * blocks; only when the ring is full do they wait on a stack linked through the blocks. The
 * holder takes up to FM_COLLECT blocks home at each refill (FM_COLLECT_BEHIND while blocks wait
 * on the stack), and a block whose state is no longer REMOTE there was freed twice (two threads
 * at once: the holder's plain store overwrote the exchange) and stops the program before the
 * block is handed out again. A holder off its CPU does not hold its blocks back: a thread that
 * refills while FM_ADOPT_AT blocks wait for the tag it last sent to takes them into its own
 * cache (FM_COLLECT_BEHIND at most), after a membarrier, stopping at the run that holds the
 * block whose state the holder publishes as the one it is freeing (fm_tcache.busy, one plain
 * store on free's fast path): a free of the holder's that loaded the state before the barrier
 * has published it (the adopter stops there) or stored CACHED (the adopter finds the state not
 * REMOTE and stops the program), and one that loads it after sees REMOTE. The blocks of a tag
 * no thread holds (its thread exited), and what waited for it, go back to their spans. One
 * thread at a time takes a tag's blocks (its `taking`: the holder, an adopter or a drainer),
 * and none waits for another to finish. Blocks that a thread without a tag handed out are LIVE
 * for anyone: any thread frees them with one compare-exchange LIVE -> CACHED straight into its
 * own cache (as tcmalloc's and jemalloc's caches take any block), and of two racing frees only
 * one wins. So the first 250 threads alive free their own blocks with no atomic step; every
 * thread beyond pays one compare-exchange per free, none takes a lock per call. Why not
 * mimalloc's per-span thread-free lists: spans are shared by every thread of a shard, which is
 * what keeps a span's blocks and a program's peak low, and the owner of a block, not of a span,
 * is what makes a racing double free harmless. Blocks in spans change state only under their
 * shard's lock.
 *
 * THREAD CACHE (tcache.c, fast paths in fast.h). Every thread gets one at its first call, in
 * the lowest free slot of the cache area (FM_CACHES_MAX slots, 1/32 of the pool at most, none
 * under RLIMIT_AS; on base pages: a thread touches only the rows of the classes it uses, and a
 * cache on a huge page would make all of it resident), or once none is free in a run of the
 * heap; linked in a list
 * the statistics read. A thread that takes an exited one's place gets its salt (the lowest
 * free), and so its shard, where that one's spans are. Per class, an array of free blocks. malloc pops and writes its tag's LIVE;
 * free checks the block's state is its own LIVE, writes CACHED and pushes. A bin's room grows
 * by demand, a batch at a time, to two batches, and past that up to its class's bin_max
 * (FM_BIN_BYTES of blocks, at most FM_BIN_MAX) by a batch each time it must take blocks from
 * the class after it gave some back. A bin starts in a packed row of FM_ROW beside the other
 * classes' (a thread that caches a little of many classes touches a few pages: 1,000 idle
 * threads 102.7 MB, 128.8 MB with every row at full length) and moves to a long row of its own
 * when it grows past it. A program that frees a few hundred small blocks in a row and allocates
 * them again soon keeps them in the thread, one that frees them for good leaves them to the
 * class, whose fullest-span-first refills keep the heap dense (sqlite's peak: 177 MB, 194 MB
 * when every bin grew on its frees). All this within the thread's budget on cached bytes: a new
 * thread may hold FM_TC_START and earns more, doubling each FM_TC_EARN times its bins could not
 * grow, up to its share of FM_TC_PER_CPU a CPU among the threads holding a cache (at least
 * FM_TC_MIN, at most FM_TC_MAX); so a pool of threads that allocated a little and now wait
 * holds little, and a busy thread among thousands still caches what it churns. A full bin gives
 * half to the class (at most FM_BIN_MAX / 2 blocks in one call), an empty one takes a batch. A
 * thread that exits gives everything back, its cache's run or slot included; a slot keeps its pages
 * for the next thread while fewer than FM_WARM_SLOTS others do (a program that keeps starting
 * short threads faults no cache in).
 *
 * LARGE BLOCK (large.c). A request above the largest class is a run of its own: the block
 * starts on a chunk boundary, its size and state are in the run record, never beside it.
 *
 * ARENA (arena.c). For programs that link flatmalloc: bump allocation through slabs, each a
 * run of kind RUN_ARENA taken from the heap as a large block is (64 KiB doubling to 1 MiB;
 * an allocation above 256 KiB is a run of its own). The slabs are chained in their run
 * records, each record naming its arena. The arena's own state (cursor, chain, counters) is a
 * record of FM_ARENA_REC bytes in the meta area, one per FM_ARENA_CHUNKS chunks, found from its
 * first slab's chunk (two first slabs never share one), so no write into the heap reaches it;
 * the handle a program holds is that record's address with a generation in its spare bits,
 * which destroy retires. A reset rewinds to the first slab in
 * O(1) and keeps the chain up to the arena's cap, giving back only the slabs over it and the
 * runs of their own; a run given back is a free run like any other. Its chunks are in no
 * span, so free() of an arena pointer fails the block test and stops in the slow path.
 *
 * REAL-TIME PROFILE (FLATMALLOC_PREFAULT=1, fm_pool.realtime). The pool is populated at start-up
 * and never given back (span_set_retain(UINT64_MAX): malloc_trim included), so no call after
 * start-up faults a page in or makes a system call; batches are of FM_RT_BATCH blocks at most, a
 * bin holds two, so a flush moves one, and a refill takes home at most a batch of blocks other
 * threads freed, never flushing on the way: one call moves at most an outbox (FM_OUTBOX) and
 * three batches, 56 blocks, which the statistics' most_moved records; the locks inherit
 * priority, so a real-time thread that waits for one lends its priority to the holder.
 *
 * Memory flows: heap run -> span -> class buckets (or transfer cache) <-> thread cache <->
 * program, or heap run -> large block -> program, or heap run -> arena slab -> program; a block
 * freed by another thread: -> its tag's inbox -> its owner's cache (owner behind: an adopter's),
 * or (no tag, or its tag's thread gone) -> the freeing thread's cache; and back: a span with no block out, a freed large block, or an
 * arena's slab over its cap at a reset, is a free run again, and its pages go back to the
 * system when the oldest free memory passes the budget or on malloc_trim. */
#ifndef FM_TYPES_H
#define FM_TYPES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* ---- one definition of the compiler vocabulary ------------------------------------------ */
#define likely(x) __builtin_expect(!!(x), 1)
#define unlikely(x) __builtin_expect(!!(x), 0)
#define noinline __attribute__((noinline))
#define always_inline inline __attribute__((always_inline))
#define cold __attribute__((cold))
#define hidden __attribute__((visibility("hidden")))
#define cacheline_aligned __attribute__((aligned(64)))
/* A sector: the two cache lines an x86 CPU fetches together (its adjacent-line prefetcher).
 * Records that two threads write sit in sectors of their own: a line apart is not enough (two
 * threads writing neighbouring lines of one sector ran 1.3x one thread's rate, not 1.9x). */
#define FM_SECTOR 128u
#define sector_aligned __attribute__((aligned(FM_SECTOR)))

/* ---- may be modified --------------------------------------------------------------------- */
#define FM_CLASS_MAX 64              /* most size classes FLATMALLOC_CLASSES may declare */
#define FM_SMALL_MAX (1u << 20)      /* largest class size allowed */
#define FM_BATCH_BYTES (32u << 10)   /* a batch holds about this many bytes ... */
#define FM_BATCH_MIN 4u              /* ... but never fewer blocks than this */
#define FM_BATCH_MAX 32u             /* ... nor more than this */
#define FM_RT_BATCH 8u               /* ... nor, in the real-time profile, more than this */
#define FM_BIN_BYTES (32u << 10)     /* a thread's bin may grow to about this many bytes of blocks, */
#define FM_BIN_MAX 1024u             /* ... but never more blocks than this, nor fewer than two batches */
#define FM_SPAN_MIN (64u << 10)      /* a span covers at least this, ... */
#define FM_SPAN_MIN_BLOCKS 2u        /* ... and at least this many blocks (a big class's span goes
                                        back to the heap once its few blocks are free) */
#define FM_BORROW_STEPS 8u           /* a class that cannot grow takes blocks of the next ones */
#define FM_BOOT_BYTES (256u << 10)   /* bootstrap buffer for calls made before the pool exists */
#define FM_RETAIN_DEFAULT (64ull << 20)
#define FM_HUGE_FROM (16u << 20)     /* the heap above its first this many bytes lies on huge pages */
#define FM_HUGE_MAX (32u << 20)      /* huge pages bigger than this are not used */
#define FM_DENSE_MAX (8u << 10)      /* spans of classes up to this size (and large blocks of a huge
                                        page or more) lie on huge pages, the rest on base pages */
#define FM_TAGS 250u                 /* threads whose blocks carry their own LIVE value at once */
#define FM_TAG_WAIT 8u               /* unused tags that wait before the oldest is taken again (tcache.c) */
#define FM_SHARDS_MAX 64u            /* shards per class: two per CPU the process may use, up to this */
#define FM_STEAL_LOOK 8u             /* other shards a shard with no free block looks at for a span */
#define FM_TC_PER_CPU (8u << 20)     /* bytes all thread caches may hold, per CPU, shared by threads, */
#define FM_TC_MIN (1u << 20)         /* ... but a thread's share is at least this */
#define FM_TC_MAX (2u << 20)         /* ... and never more than this */
#define FM_CACHES_MAX 16384u        /* thread caches the cache area holds at most (1/32 of the pool at most) */
#define FM_WARM_SLOTS 64u            /* exited threads' slots that keep their pages for the next threads */
#define FM_TC_START (32u << 10)      /* a new thread's budget, which doubles by demand up to its share */
#define FM_TC_EARN 256u              /* ... each time its bins could not grow this many times */
#define FM_COLLECT 64u               /* remotely freed blocks one refill takes home at most, */
#define FM_COLLECT_BEHIND 1024u      /* ... or this many while some wait on the remote stack */
#define FM_OUTBOX 32u                /* another thread's blocks a thread gathers before one send */
#define FM_AHEAD 8u                  /* a take fetches the state of the inbox slot this many on */
#define FM_INBOX_MAX 8192u           /* blocks other threads freed that wait in a tag's inbox, at most */
#define FM_REWIND_AT 256u            /* an empty inbox goes back to its first slot once its head is this far on */
#define FM_ADOPT_AT 256u             /* a refill takes the blocks waiting for another tag once this many wait */

/* ---- do not modify ----------------------------------------------------------------------- */
#define FM_ALIGN 16u                 /* every block starts on this boundary */
#define FM_CHUNK_SHIFT 14u          /* chunks of 16 KiB in every pool: free() shifts by a constant */
#define FM_CHUNK ((size_t)1 << FM_CHUNK_SHIFT)
#define FM_ST_SHIFT_MAX 8u           /* the largest scale of a state shadow: a chunk's part is whole cache lines */
#define FM_SHADOWS (FM_ST_SHIFT_MAX + 1)   /* state shadows, by scale 2^s */
#define FM_SPAN_BLOCKS 4096u         /* most blocks in one span (the summary is 512 bits) */
#define FM_POOL_MAX (1ull << 44)
#define FM_NO_CLASS 0u               /* page map: the chunk is not in a span (fresh meta reads 0) */
#define FM_ROW (2 * FM_BATCH_MAX)    /* a bin's first row, packed with the other classes' */
#define FM_XFER (32u * FM_BATCH_MAX) /* blocks a shard keeps as they came (transfer cache), */
#define FM_XFER_BYTES (128u << 10)   /* ... at most this many bytes of them, but at least one batch */

/* A block's state byte (BLOCK STATE above). ZERO is CACHED for a block never handed out whose
 * pages were never written; calloc checks it still reads as zero rather than clearing it. NONE
 * is no state: the bound of the tags' LIVE values. */
enum { ST_FREE = 0, ST_CACHED = 1, ST_ZERO = 2, ST_REMOTE = 3, ST_LIVE = 4, ST_OWNED = 5, ST_NONE = 0xff };
typedef uint8_t fm_st;
static inline int st_cached(unsigned s) { return s == ST_CACHED || s == ST_ZERO; }
static inline int st_live(unsigned s) { return s >= ST_LIVE && s != ST_NONE; }
/* A refill scans a span's states under the shard's lock while the blocks' owners write theirs:
 * those accesses are relaxed atomics (plain moves on x86). */
static inline fm_st st_load(const fm_st *s) { return __atomic_load_n(s, __ATOMIC_RELAXED); }
static inline void st_store(fm_st *s, fm_st v) { __atomic_store_n(s, v, __ATOMIC_RELAXED); }
enum { RUN_FREE = 1, RUN_SPAN = 2, RUN_LARGE = 3, RUN_ARENA = 4 };    /* struct fm_run's kind */
enum { RUN_DIRTY = 1, RUN_WARM = 2, RUN_QUEUED = 4 };  /* struct fm_run's flags */

_Static_assert(FM_CLASS_MAX < 255, "class ids + 1 fit in the page map's byte");
_Static_assert(FM_SPAN_BLOCKS / 64 / 8 <= 8, "the free-group summary fits in 64 bytes");
_Static_assert(ST_OWNED + FM_TAGS <= ST_NONE, "every tag has a LIVE value of its own");
_Static_assert((FM_SHARDS_MAX & (FM_SHARDS_MAX - 1)) == 0, "shards are a power of two");
_Static_assert((FM_INBOX_MAX & (FM_INBOX_MAX - 1)) == 0 && FM_INBOX_MAX >= FM_OUTBOX, "an inbox is a ring that takes an outbox");
_Static_assert(FM_REWIND_AT >= FM_OUTBOX, "after a rewind a sender that read the old head finds room for an outbox");
_Static_assert((FM_ALIGN & (FM_ALIGN - 1)) == 0, "alignment is a power of two");
_Static_assert((FM_POOL_MAX >> FM_CHUNK_SHIFT) < UINT32_MAX, "chunk indexes + 1 fit 32 bits");

/* A chunk's line: all free() reads about a chunk (BLOCK STATE). */
#define FM_LINE_STATES 16u
struct fm_line {
  uint64_t e;                    /* span address (a chunk's: its low byte 0) | (class + 1); 0: not in a span */
  uintptr_t st;                  /* block q starting in this chunk has its state at st + q */
  fm_st own[FM_LINE_STATES];     /* those states, for a class of at most 16 blocks a chunk */
} cacheline_aligned;
_Static_assert(sizeof(struct fm_line) == 64, "a line to a cache line");
_Static_assert((FM_CHUNK >> FM_ST_SHIFT_MAX) % 64 == 0, "a shadow's chunks are whole cache lines");

/* A cached block and its state byte: the cache keeps the state's address so malloc() writes it
 * without looking the span up. */
struct fm_blk {
  void *p;
  fm_st *st;
};

/* A slot of an inbox: a run of blocks another thread freed (one or more, each the next of its
 * span after the one before), their class and the first one's state's address, so its owner
 * takes them home without looking them up. p 0: empty, or reserved and not yet written. */
struct fm_slot {
  _Atomic uintptr_t p;   /* the first block's address | (length - 1) << FM_SLOT_RUN | (class + 1) << FM_SLOT_CLASS */
  fm_st *st;
};
#define FM_SLOT_RUN 48u     /* the pool is mapped with no hint: Linux gives user space below 2^47 (x86-64) or 2^48 (arm64) */
#define FM_SLOT_CLASS 56u
_Static_assert(FM_OUTBOX <= 256, "a run's length fits the slot's 8 bits");

/* Arenas (arena.c): a record of the arena's state per FM_ARENA_CHUNKS chunks of the heap, in the
 * meta area (fm_pool.arenas); an arena's first slab, at least FM_ARENA_CHUNKS chunks, picks it. */
#define FM_ARENA_CHUNKS 4u
#define FM_ARENA_REC 192u

/* An owner tag (ONE WRITER PER STATE): a LIVE value a thread holds while it runs, and where
 * other threads free the blocks handed out with it: its inbox, a ring of fm_pool.inbox_n
 * blocks in the meta area (the holder takes them without reading the blocks or looking them up,
 * four to a line), and, when the inbox is full, a stack of carriers (blocks that list others).
 * FM_TAGS of them, recycled oldest first once FM_TAG_WAIT wait (tcache.c). */
struct fm_tag {
  _Atomic uintptr_t remote;   /* the first carrier of the blocks freed when the inbox was full */
  _Atomic uint32_t tail;      /* inbox slots reserved by freeing threads */
  _Atomic uint32_t head;      /* first inbox slot not yet taken */
  _Atomic uint32_t live;      /* a thread holds the tag; 0: its blocks go to their classes */
  _Atomic uint32_t taking;    /* a thread takes its blocks: the holder, an adopter or a drainer (remote.c) */
  uintptr_t pending;          /* the carrier taken off the stack, not yet home (remote.c) */
  uint32_t pending_at;        /* ... and its next word to read */
  bool opened;                /* its inbox is open (tcache.c's tag_pop); a fork child reuses only these */
  struct fm_tcache *holder;   /* the cache of the thread holding it (written under `taking`) */
} sector_aligned;

/* A thread cache: per class (indexed by class + 1, as the page map and the size table name
 * classes), its free blocks b[c1][base..top), newest last, each beside its state byte.
 * free() pushes while top < lim; an empty cache (NULL, NULL, NULL) sends every call to the
 * slow path. Every thread gets one, in a slot of the cache area or a run of the heap, when the
 * thread first calls (only the rows of the classes it uses are ever touched); the caches are linked in a list that
 * the statistics read without the threads' help. */
#define FM_BINS (FM_CLASS_MAX + 1)
struct fm_tcache {
  fm_st tag;             /* the LIVE value malloc writes: its tag's, or ST_LIVE without a tag */
  fm_st own;             /* the LIVE value free() may change with a plain store: tag, or ST_NONE */
  fm_st *busy;           /* the state free() tests against own, published before it loads it (remote.c) */
  uint16_t salt;         /* which of its CPU's two shards the thread uses */
  uint32_t victim;       /* next bin a budget shortfall shrinks */
  struct fm_tag *t;      /* its tag, or NULL */
  uint32_t run;          /* the heap run holding this cache (first chunk + 1; 0: none) */
  uint32_t slot;         /* the cache area's slot holding it (+ 1; 0: none; neither: static) */
  uint64_t cap_bytes;    /* room of all bins, in bytes */
  uint64_t budget;       /* what they may hold (tcache.c's budget) while live_seen threads hold a cache */
  uint32_t live_seen;
  uint32_t pressure;     /* times the bins could not grow since the budget last doubled */
  uint64_t flushed;      /* bit c: bin c gave blocks back since its last refill */
  uint64_t earned;       /* the budget it earned by demand */
  uint32_t moved;        /* blocks moved by the slow call under way (tcache.c's work_note) */
  bool taking;           /* a refill is under way: the frees it makes are part of its work */
  struct fm_tcache *next, *prev;   /* the list of caches */
  struct fm_tag *out_to;      /* outbox: blocks of tag out_to freed here (as inbox slots hold them), sent in one step */
  fm_st out_tag;              /* out_to's LIVE value (when out_n) */
  uint32_t out_n;             /* its entries (runs) */
  uint32_t out_k;             /* and blocks: FM_OUTBOX at most */
  uint32_t out_run;           /* the last entry's length, not yet in its address (run_end) */
  uintptr_t out_up, out_down;     /* the entries (remote_entry) of the blocks after and before the last run (0: none) */
  uintptr_t out_up_st, out_down_st;   /* and their states' addresses */
  uintptr_t out_size;         /* the last run's block size */
  struct fm_blk out[FM_OUTBOX];
  struct fm_blk *top[FM_BINS];
  struct fm_blk *lim[FM_BINS];
  struct fm_blk *base[FM_BINS];
  uint16_t row[FM_BINS];              /* the length of the row bin c1 is in now */
  uint16_t grow[FM_BINS];             /* the room bin c1 may grow to now (up to its class's bin_max) */
  struct fm_blk *wide;                /* the long rows, after the packed ones (NULL: none) */
  cacheline_aligned struct fm_blk b[];   /* packed rows of FM_ROW, classes 0..nclass-1; then the
                                            long rows of the classes whose bin_max is more */
};

/* A shard of a class: its spans with free blocks (by occupancy), its transfer cache's count
 * (the blocks themselves are apart, in the meta area, so that set-up and a small program touch
 * a few pages of shards, not a page per shard), counters. In the meta area: the classes'
 * shards side by side, fm_pool.nshards a class. */
#define FM_BUCKETS 8u
struct fm_shard {
  pthread_mutex_t lock;
  uint32_t epoch;                     /* spans of an older epoch were abandoned by fork */
  uint32_t bucket_map;                /* bit b: bucket b has a span */
  uint32_t bucket[FM_BUCKETS];        /* first span (chunk index + 1) of each bucket, 0: none */
  uint32_t spare;                     /* one span with every block free, kept back (chunk + 1) */
  uint32_t xfer_n;                    /* blocks in the transfer cache */
  uint32_t steal;                     /* the shard span_steal looked at last */
  uint64_t out;                       /* blocks taken from this shard's spans, not given back */
  uint64_t peak, spans, spans_peak, borrows, exhausted;
} sector_aligned;   /* zero is its start (an unlocked mutex, epoch 0): set-up writes none of it */

/* One size class: geometry and its shards. */
struct fm_class {
  uint32_t size, batch, nblocks, span_chunks;
  uint32_t bin_max;                   /* blocks a thread's bin holds at most (a long row when over FM_ROW) */
  uint32_t xfer_max;                  /* blocks a shard's transfer cache holds */
  uint32_t states;                    /* state bytes of a span: one per multiple of size below its end */
  bool line_states;                   /* the states sit in the chunks' lines (16 or fewer blocks a chunk) */
  uint8_t st_shift;                   /* else in shadow st_shift (fm_st_shift) */
  uint64_t bucket_mul;                /* 2^32 * FM_BUCKETS / nblocks, rounded up (bucket_of) */
  uint64_t reserve;                   /* chunks held for this class (FLATMALLOC_CLASSES percent) */
  struct fm_shard *sh;                /* fm_pool.nshards of them */
};

/* Run record, one per chunk (span.c). Meaningful in the first chunk of a run, and 'head' in
 * its last. A span keeps its free-word summary in the record of its second chunk. */
struct fm_run {
  uint32_t len;        /* chunks in the run */
  uint8_t kind;        /* RUN_FREE, RUN_SPAN, RUN_LARGE, RUN_ARENA */
  uint8_t cls;
  uint16_t flags;      /* spans: RUN_DIRTY when a chunk held pages at the span's making; free runs: RUN_WARM, listed with
                          those that may hold pages, RUN_QUEUED, in the release FIFO (it has pages it may give back) */
  uint32_t head;       /* in a run's last chunk: index of its first */
  uint32_t next, prev; /* free runs: TLSF list; spans: bucket list; arena runs: chain (chunk index + 1) */
  uint32_t older, newer;  /* free runs with pages: the release FIFO (chunk index + 1) */
  uint32_t dirty;      /* free runs: chunks that may hold pages */
  uint32_t nfree;      /* spans: blocks in state FREE */
  uint32_t epoch;      /* spans: the class epoch they were made in */
  uint32_t bucket;     /* spans: occupancy bucket, FM_BUCKETS when full */
  uint32_t hw;         /* spans: blocks below this were handed out at least once */
  uint32_t clean;      /* free runs: chunks below this hold no pages (a release stopped here) */
  uint32_t shard;      /* spans: the shard of its class that owns it; arena runs: the arena's record + 1 */
  uint32_t since;      /* free runs with pages: when they joined the release FIFO (ms, truncated) */
  uint32_t pad;
};
_Static_assert(sizeof(struct fm_run) == 64, "one run record per cache line");

/* One per chunk, in the meta area: its line and its run record, a sector of their own (no two
 * spans' chunks write one), found by one shift. */
struct fm_chunk {
  struct fm_line line;
  struct fm_run rec;
} sector_aligned;
_Static_assert(sizeof(struct fm_chunk) == FM_SECTOR, "a chunk's records are a sector");

enum { HUGE_AUTO, HUGE_OFF, HUGE_TLB };   /* struct fm_options's huge */

/* Settings, read once from the environment (options.c). */
struct fm_options {
  size_t pool;              /* 0: physical memory, halved until the reservation succeeds */
  const char *pool_text;    /* FLATMALLOC_POOL as written, for messages */
  const char *classes_text; /* FLATMALLOC_CLASSES as written */
  unsigned nclass;
  uint32_t class_size[FM_CLASS_MAX];
  uint32_t class_bp[FM_CLASS_MAX];   /* reservation, hundredths of a percent of the pool */
  uint32_t large_bp;                 /* the large area's reservation, likewise */
  bool large_set;
  size_t retain;
  uint32_t retain_delay;    /* FLATMALLOC_RETAIN_DELAY: ms the recent peak in use stays in the budget */
  bool prefault, stats, check;
  uint8_t huge;             /* FLATMALLOC_HUGEPAGES (glibc.malloc.hugetlb): HUGE_AUTO, HUGE_OFF or HUGE_TLB */
  bool huge_strict;         /* HUGE_TLB asked by FLATMALLOC_HUGEPAGES: stop when the reserved pages cannot hold the pool */
  int perturb;              /* glibc's perturb byte (MALLOC_PERTURB_, mallopt(M_PERTURB)); 0: off (slow.c) */
  const char *profile;      /* FLATMALLOC_PROFILE: record request sizes into this path's FILE.PID */
  const char *heap;         /* FLATMALLOC_HEAP: heap profiles of sampled stacks into FILE.PID (heap.c) */
  size_t heap_sample;       /* FLATMALLOC_HEAP_SAMPLE: mean bytes between samples */
  int heap_signal;          /* FLATMALLOC_HEAP_SIGNAL: this signal writes a profile; 0: none */
};

/* Everything the fast paths read sits in the first cache line. */
struct fm_pool {
  uintptr_t heap_base;
  size_t heap_chunks;        /* chunks free() looks up (at most chunks_open); 0 sends every free to the slow path */
  size_t small_lim;          /* sizes below this take the fast path; 0 before start-up */
  const uint8_t *cls_of;     /* (size + 15) / 16 -> class + 1 */
  struct fm_chunk *chunk;    /* per chunk: its line (span, class, where its blocks' states are) and run record */
  uint64_t key;              /* random, per process */

  uint64_t link_key;         /* random, odd: mangles remote stacks' links (tcache.c) */
  uintptr_t base;
  size_t size;
  size_t heap_size;
  size_t small_max;          /* largest class size */
  unsigned nclass;
  bool valgrind;             /* running under a Valgrind tool: described mode */
  bool checked;              /* checking or described mode: every call takes the slow path */
  bool lazy_commit;          /* the heap is opened as it is used (not prefaulted, not a Valgrind tool's map) */
  bool protect;              /* lazy_commit: what is not open yet is inaccessible, opened by
                              * mprotect (strict overcommit, RLIMIT_DATA, or since the program's
                              * mlockall); else the parts opened as used are accessible from
                              * start-up and opening is bookkeeping */
  bool realtime;             /* the real-time profile (FLATMALLOC_PREFAULT=1): pages kept, one batch a move */
  bool native;               /* check.c's native call under memcheck is running (fm_lock) */
  bool count_lockers;        /* check.c's native calls are on: fm_lock counts in lockers */
  _Atomic uint32_t lockers;  /* program threads holding or waiting for a class's or the heap's lock */
  uint32_t chunks_open;      /* chunks whose records (line, run record) are accessible: only grows (span.c, __atomic) */
  _Atomic int state;         /* pool.c: none, starting, ready */
  unsigned nshards;          /* shards per class: a power of two */
  unsigned cpus;             /* CPUs the process may run on (sched_getaffinity) */
  struct fm_blk *xfer;       /* the shards' transfer caches, FM_XFER blocks each (class.c) */
  struct fm_tag *tags;       /* FM_TAGS of them */
  struct fm_slot *inbox;     /* their inboxes, inbox_n slots each */
  void *arenas;              /* the arenas' records, FM_ARENA_REC bytes each, 64-aligned (arena.c) */
  uint32_t inbox_n;          /* a power of two: 1/64 of the pool for all, within [FM_OUTBOX, FM_INBOX_MAX] */
  uint32_t huge_chunks;      /* chunks in a huge page where the heap lies on them (pool.c), 0: base pages only */
  uint32_t huge_from;        /* the first chunk on huge pages (one starts there) */
  bool hugetlb;              /* the pool is the kernel's reserved huge pages (FLATMALLOC_HUGEPAGES=hugetlb) */
  uintptr_t huge_table;      /* the chunks' records lie on huge pages from this address on (0: none) */
  uintptr_t caches;          /* the cache area: caches_n slots of cache_bytes, each a thread cache (tcache.c) */
  uint32_t caches_n;
  uint32_t cache_bytes;
  _Atomic uint32_t tags_used;
  _Atomic uint32_t tags_free;     /* unused tags waiting in tcache.c's FIFO */
  _Atomic uint32_t caches_live;   /* threads holding a cache: they share tc_total */
  uint64_t tc_total;              /* what all caches may hold: FM_TC_PER_CPU a CPU */
  struct fm_options opt;
  struct fm_class cls[FM_CLASS_MAX];
  uintptr_t st_bias[FM_SHADOWS];   /* shadow s: a span's states start at st_bias[s] + span address >> s (0: no shadow) */
};

hidden extern struct fm_pool fm_pool;
hidden extern __thread struct fm_tcache *fm_tc __attribute__((tls_model("initial-exec")));
hidden extern struct fm_tcache fm_tc_empty;

/* A class's magic, ceil(2^64 / size), indexed by the page map's byte (class + 1); entry
 * FM_NO_CLASS has magic 0, so "is a block start" fails for every address outside a span. A span
 * has a state byte for every multiple of the size below its end: those past the last block are
 * never LIVE, so the multiplication alone tells a block start. The magics sit in the meta area
 * right below the lines (pool.c), so free() reads one at an offset from the lines' address it
 * already holds. */
#define FM_MAGICS 256u
static inline uint64_t fm_magic(unsigned c1) { return ((const uint64_t *)fm_pool.chunk - FM_MAGICS)[c1]; }

/* Does a class of this size keep its states in the chunks' lines (at most FM_LINE_STATES blocks
 * start in a chunk), rather than in a shadow? */
static inline bool fm_line_states(size_t size) { return (FM_CHUNK + size - 1) / size <= FM_LINE_STATES; }
/* The scale of the shadow that holds a class's states: its size rounded down to a power of two,
 * at most 2^FM_ST_SHIFT_MAX. */
static inline unsigned fm_st_shift(size_t size) {
  unsigned s = 63u - (unsigned)__builtin_clzll(size);
  return s < FM_ST_SHIFT_MAX ? s : FM_ST_SHIFT_MAX;
}
/* The state byte of block q of class k's span at span_addr, in its shadow (BLOCK STATE above). */
static inline fm_st *fm_st_q(const struct fm_class *k, uintptr_t span_addr, uint64_t q) {
  return (fm_st *)(fm_pool.st_bias[k->st_shift] + (span_addr >> k->st_shift) + q);
}

#endif
