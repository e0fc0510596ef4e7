/* The exchange (types.h, ONE WRITER PER STATE): blocks a thread frees for another tag's holder,
 * on their way home. A sender's outbox arrives in one step in the tag's inbox (on its remote
 * stack when the inbox is full); the holder takes them home at its refills (remote_take); a
 * thread that refills while the tag it last sent to has fallen behind (its holder off its CPU)
 * takes the blocks waiting there itself, after a barrier on every thread (remote_adopt_*); the
 * blocks of a tag no thread holds, and what waited there, go back to their spans
 * (remote_send, remote_orphans). One thread at a time takes a tag's blocks: its holder, an
 * adopter or a drainer, whichever holds the tag's `taking` flag. Above class.c, below
 * tcache.c, which puts what the holder and an adopter take into their caches. */
#include <sched.h>
#include <string.h>

#include "internal.h"
#include "os.h"

/* ---- slots and carriers ------------------------------------------------------------------ */
/* A block another thread freed waits in its tag's inbox, a ring of slots (a run of blocks, each
 * the next of its span after the one before: the first's address, the class and the length,
 * the first's state's address): a sender reserves slots by moving the tail (one
 * compare-exchange for a whole outbox) and writes them; a taker takes them from the head, in
 * order, and stops at a slot reserved but not yet written (its sender, once it has written it,
 * looks whether the tag still has a holder: remote_send). A slot is zeroed when taken, before
 * the head passes it, so a reservation always finds its slots empty. When the inbox is full
 * an outbox's blocks go on the tag's remote stack as a chain of carriers: a carrier is one of
 * its blocks whose words (up to FM_OUTBOX, at most the block's size) hold the link to the next
 * carrier, then the addresses of the blocks after it in the outbox, ended by LINK_END when
 * they stop short of its last word. Only the carriers are written and read (one block in 8 of
 * 64 B, one in 32 from 256 B): the others stay in the cache of the thread that last wrote
 * them, and the taker follows one link per carrier, not per block. Each word is masked with
 * its own keyed mix of the carrier's address and the word's place (word_mask), and no word
 * holds a value a reader could know: the end of the stack and of a carrier's list are
 * LINK_END, a per-process value that is no address. So one read of a freed block gives no
 * address and no mask (at 85c21b6 a block's two words were masked with m and ~m and a
 * batch's last hints were 0: such a block gave its mask and its link in plain), and the taker
 * checks a carrier's state before it reads its words and every address it finds there before
 * it trusts it. */
#define INBOX_HOLE 1u   /* a slot a fork's other threads reserved and will never write */

/* Tag t's inbox; slot i (any count: the ring wraps) is inbox(t)[i & (fm_pool.inbox_n - 1)]. */
static struct fm_slot *inbox(const struct fm_tag *t) { return fm_pool.inbox + (size_t)(t - fm_pool.tags) * fm_pool.inbox_n; }

/* The words a carrier of class c holds: its link and the blocks it lists after it. */
static uint32_t carrier_words(unsigned c) {
  uint32_t w = fm_pool.cls[c].size / sizeof(uintptr_t);
  return w < FM_OUTBOX ? w : FM_OUTBOX;
}
/* A carrier's key, a keyed mix of its address, and the mask of its word k. */
static uint64_t carrier_key(const void *p) {
  uint64_t x = ((uintptr_t)p ^ fm_pool.key) * 0x9e3779b97f4a7c15ull;
  return x ^ x >> 29;
}
static uintptr_t word_mask(uint64_t x, uint32_t k) {
  uint64_t a = (x + k) * 0xbf58476d1ce4e5b9ull;
  a = (a ^ a >> 31) * fm_pool.link_key;
  return a ^ a >> 32;
}
/* The end of a stack or of a carrier's list: random, bit 63 set (no address), per process. */
#define LINK_END ((fm_pool.link_key ^ fm_pool.key) | (uintptr_t)1 << 63)

static uintptr_t pending(const struct fm_tag *t) { return __atomic_load_n(&t->pending, __ATOMIC_RELAXED); }

/* REMOTE block k of run v (its state st) comes home: CACHED. A state not REMOTE there was
 * freed twice (two threads at once: the holder's plain store overwrote the exchange). */
static always_inline void arrive(uintptr_t v, uint32_t k, fm_st *st) {
  if (st_load(st) != ST_REMOTE) fault_stop("double free (by two threads at once)", remote_nth(v, k), (int)remote_class(v));
  st_store(st, ST_CACHED);
}

/* REMOTE block p comes home, into b as an inbox slot holds it. */
static void home(struct fm_blk *b, void *p, int c, fm_st *st) {
  uintptr_t v = remote_entry(p, (unsigned)c);
  arrive(v, 0, st);
  *b = (struct fm_blk){(void *)v, st};
}

/* ---- taking ----------------------------------------------------------------------------- */
/* The right to take tag t's blocks: false when another thread has it now (never waited for: it
 * may be off its CPU). */
static bool taking_claim(struct fm_tag *t) {
  if (atomic_load_explicit(&t->taking, memory_order_relaxed)) return false;
  fm_count(CNT_RMW);
  return !atomic_exchange(&t->taking, 1);
}
static void taking_end(struct fm_tag *t) { atomic_store(&t->taking, 0); }

/* Takes up to `most` blocks of tag t's inbox into b as runs (CACHED), from the head up to slot
 * `end`, stopping before the slot whose run holds the block whose state is at `busy` (an
 * adoption); returns the runs, and the blocks in *got. A run longer than the room left is
 * taken in part: the slot keeps the rest. The states of the blocks FM_AHEAD slots on are
 * fetched meanwhile: their lines are most likely in the sender's cache, and each would
 * otherwise be waited for in turn. */
static uint32_t inbox_take(struct fm_tag *t, struct fm_blk *b, uint32_t most, uint32_t end, const fm_st *busy, uint32_t *got) {
  struct fm_slot *box = inbox(t);
  uint32_t mask = fm_pool.inbox_n - 1, head = atomic_load_explicit(&t->head, memory_order_relaxed), n = 0, blocks = 0;
  for (; blocks < most && head != end; head++) {
    struct fm_slot *slot = &box[head & mask];
    uintptr_t v = atomic_load_explicit(&slot->p, memory_order_acquire);
    if (!v) break;
    if (v == INBOX_HOLE) {
      atomic_store_explicit(&slot->p, 0, memory_order_relaxed);
      continue;
    }
    fm_st *st = slot->st;
    uint32_t run = remote_run(v), k = run < most - blocks ? run : most - blocks;
    if ((uintptr_t)busy - (uintptr_t)st < run) break;
    __builtin_prefetch(__atomic_load_n(&box[(head + FM_AHEAD) & mask].st, __ATOMIC_RELAXED), 1);   /* a hint: 0 or stale is harmless */
    for (uint32_t i = 0; i < k; i++) arrive(v, i, st + i);
    b[n++] = (struct fm_blk){(void *)(v - ((uintptr_t)(run - k) << FM_SLOT_RUN)), st};
    blocks += k;
    if (k < run) {   /* the rest stays for the next take */
      slot->st = st + k;
      atomic_store_explicit(&slot->p, v + k * fm_pool.cls[remote_class(v)].size - ((uintptr_t)k << FM_SLOT_RUN), memory_order_relaxed);
      break;
    }
    atomic_store_explicit(&slot->p, 0, memory_order_relaxed);
  }
  atomic_store_explicit(&t->head, head, memory_order_release);
  *got = blocks;
  return n;
}

/* The block at v that carrier w (of class c, -1: none) is, lists or links to: v must start a
 * block of a span, else w was written after its free. Returns v's class, its state in *st. */
static int listed(uintptr_t v, fm_st **st, const void *w, int c) {
  int k = class_find((void *)v, st);
  if (k < 0) fault_stop("a block freed by another thread was damaged (written after free)", w, c);
  return k;
}

/* Takes up to `most` blocks of tag t's remote stack into b: the blocks a carrier lists, then
 * the carrier itself (its words read before it goes home), then the next carrier, whose line
 * was fetched when this one was begun. A carrier left part-way is resumed at its word
 * t->pending_at. */
static uint32_t stack_take(struct fm_tag *t, struct fm_blk *b, uint32_t most) {
  uint32_t n = 0;
  while (n < most) {
    if (!pending(t)) {
      if (!atomic_load_explicit(&t->remote, memory_order_relaxed)) break;
      fm_count(CNT_RMW);
      __atomic_store_n(&t->pending, atomic_exchange_explicit(&t->remote, 0, memory_order_acquire), __ATOMIC_RELAXED);
      t->pending_at = 1;
    }
    uintptr_t *w = (uintptr_t *)pending(t);
    fm_st *st;
    int c = listed((uintptr_t)w, &st, w, class_at(w));
    if (st_load(st) != ST_REMOTE) fault_stop("double free (by two threads at once)", w, c);   /* before its words are read */
    uint64_t x = carrier_key(w);
    uint32_t words = carrier_words((unsigned)c), k = t->pending_at;
    uintptr_t next = w[0] ^ word_mask(x, 0);
    if (k == 1 && next != LINK_END) __builtin_prefetch((void *)next);   /* (checked before it is followed) */
    for (; k < words && n < most; k++) {
      uintptr_t v = w[k] ^ word_mask(x, k);
      if (v == LINK_END) {
        k = words;
        break;
      }
      fm_st *vst;
      int vc = listed(v, &vst, w, c);
      home(&b[n++], (void *)v, vc, vst);
    }
    t->pending_at = k;
    if (k < words || n == most) break;
    fm_st *nst;
    if (next != LINK_END) listed(next, &nst, w, c);
    home(&b[n++], w, c, st);
    __atomic_store_n(&t->pending, next == LINK_END ? 0 : next, __ATOMIC_RELAXED);
    t->pending_at = 1;
  }
  return n;
}

/* Inbox first, then the stack: up to `most` blocks into b as runs (the stack's of one);
 * returns the runs. */
static uint32_t take(struct fm_tag *t, struct fm_blk *b, uint32_t most) {
  uint32_t got, n = inbox_take(t, b, most, atomic_load_explicit(&t->tail, memory_order_relaxed), NULL, &got);
  if (got < most) n += stack_take(t, b + n, most - got);
  return n;
}

bool remote_behind(const struct fm_tag *t) { return pending(t) || atomic_load_explicit(&t->remote, memory_order_relaxed); }

/* Whether a taker would find a block of tag t now (a slot reserved and not yet written does not
 * count: its sender looks again once it has written it). */
static bool waiting(const struct fm_tag *t) {
  uint32_t head = atomic_load_explicit(&t->head, memory_order_relaxed);
  return remote_behind(t) || atomic_load_explicit(&inbox(t)[head & (fm_pool.inbox_n - 1)].p, memory_order_relaxed);
}

/* An inbox its holder finds empty goes back to its first slot: both ends move on to the next
 * multiple of its size (the slots skipped were all taken), so the ring touches as many slots
 * as wait at once, not all of them (128 KiB a tag) as it goes round. Only when the head is at
 * least FM_REWIND_AT slots on (one compare-exchange per that many blocks at most): a sender
 * that reads the old head with the new tail then still finds room for an outbox, and one whose
 * tail is older than the head it reads reads the tail again (remote_send). An adopter's `end`
 * is then behind the head: it takes nothing. */
static void rewind(struct fm_tag *t) {
  uint32_t mask = fm_pool.inbox_n - 1, head = atomic_load_explicit(&t->head, memory_order_relaxed), tail = head;
  if ((head & mask) < FM_REWIND_AT || atomic_load_explicit(&t->tail, memory_order_relaxed) != head) return;
  fm_count(CNT_RMW);
  if (atomic_compare_exchange_strong_explicit(&t->tail, &tail, (head | mask) + 1, memory_order_relaxed, memory_order_relaxed))
    atomic_store_explicit(&t->head, (head | mask) + 1, memory_order_release);
}

uint32_t remote_take(struct fm_tag *t, struct fm_blk *b, uint32_t most) {
  if (!waiting(t) || !taking_claim(t)) return 0;   /* (claimed by an adopter: these blocks are on their way) */
  uint32_t n = take(t, b, most);
  rewind(t);
  taking_end(t);
  return n;
}

/* The blocks of the n runs e[] (an outbox's: FM_OUTBOX blocks at most) one by one into b;
 * returns how many. */
static uint32_t runs_apart(const struct fm_blk *e, uint32_t n, struct fm_blk *b) {
  uint32_t m = 0;
  for (uint32_t i = 0; i < n; i++) {
    uintptr_t v = (uintptr_t)e[i].p;
    for (uint32_t k = 0; k < remote_run(v); k++) b[m++] = (struct fm_blk){(void *)remote_entry(remote_nth(v, k), remote_class(v)), e[i].st + k};
  }
  return m;
}

/* Gives the n runs b[] of a tag no thread holds (CACHED, as inbox slots hold them) back to
 * their spans, up to FM_OUTBOX blocks of one class at a time. */
static void give_all(const struct fm_blk *b, uint32_t n) {
  struct fm_blk run[FM_OUTBOX];
  uint32_t m = 0;
  unsigned cur = 0;
  for (uint32_t i = 0; i < n; i++) {
    uintptr_t v = (uintptr_t)b[i].p;
    unsigned c = remote_class(v);
    for (uint32_t k = 0; k < remote_run(v); k++) {
      if (m && (m == FM_OUTBOX || c != cur)) {
        class_home(cur, run, m);
        m = 0;
      }
      cur = c;
      run[m++] = (struct fm_blk){remote_nth(v, k), b[i].st + k};
    }
  }
  if (m) class_home(cur, run, m);
}

/* A tag no thread holds has no holder to take its blocks home: whoever finds blocks there
 * gives them back to their spans, one thread at a time. It never waits: for a slot reserved and
 * not yet written its sender looks again once it has written it, and while another thread
 * drains, that one looks again when it is done (each side writes, then reads what the other
 * writes: sequentially consistent). */
void remote_orphans(struct fm_tag *o) {
  struct fm_blk b[FM_OUTBOX];
  while (!atomic_load(&o->live) && waiting(o)) {
    if (!taking_claim(o)) return;
    if (!atomic_load(&o->live))
      for (uint32_t n; (n = take(o, b, FM_OUTBOX));) give_all(b, n);
    taking_end(o);
  }
}

/* ---- adoption --------------------------------------------------------------------------- */
/* A holder frees its own blocks with a plain load and store of the state, and a racing free's
 * compare-exchange (LIVE -> REMOTE) may fall between them: the holder's CACHED then overwrites
 * REMOTE and the block is in its cache and in the inbox at once. The holder finds that when it
 * takes the block from its inbox (not REMOTE: it stops the program). Another thread may take
 * blocks from the inbox only once no free of them by the holder can be in flight: the holder
 * publishes the state it is about to load (fm_tcache.busy, a plain store, release, before the
 * load: fast.h), and an adopter takes only slots written before a membarrier and stops at the
 * slot of the state the holder publishes after it. membarrier puts a full barrier in every
 * thread of the process between its start and its return (a thread off its CPU passed one when
 * it left). So each free of the holder's either published its state before that barrier, and
 * the adopter reads that state or a later one (then, by the release, the free's CACHED is
 * visible and the adopter finds the state not REMOTE and stops the program as the holder
 * would), or loads the state after the barrier and sees REMOTE (then it takes the slow path,
 * whose compare-exchange fails: "double free"). A stale published state only holds an adopter
 * back. */
static bool barrier_ok;   /* membarrier(PRIVATE_EXPEDITED) is registered: adoption is on (relaxed atomics) */

void remote_setup(void) {
  /* not in the real-time profile (a system call on the allocation path), nor under a Valgrind
   * tool (every call is on the slow path and one at a time there anyway) */
  if (fm_pool.realtime || fm_pool.valgrind) return;
  __atomic_store_n(&barrier_ok, os_membarrier(true), __ATOMIC_RELAXED);
}

/* Starts taking the blocks that wait for tag t, not being its holder (up to FM_COLLECT_BEHIND of
 * them, as a refill takes): when t's holder has fallen behind (at least FM_ADOPT_AT blocks wait
 * in written slots), the slots written now, after a barrier (above). False (nothing started)
 * when it has not, t has no holder, another thread takes its blocks now, or the barrier fails. No
 * `taking` is held across the barrier, nor between the takes: a thread preempted there would
 * keep t's holder from its blocks while senders push them on the stack. The slots seen written
 * before the barrier stay so until taken: a slot is reused only after the head has passed it,
 * and a take starts at the head of its time. */
bool remote_adopt_begin(struct fm_tag *t, struct remote_adoption *a) {
  uint32_t mask = fm_pool.inbox_n - 1, at = fm_pool.inbox_n / 2 < FM_ADOPT_AT ? fm_pool.inbox_n / 2 : FM_ADOPT_AT;
  uint32_t head = atomic_load_explicit(&t->head, memory_order_relaxed), slots = (at + FM_OUTBOX - 1) / FM_OUTBOX;   /* (a slot lists FM_OUTBOX blocks at most) */
  if (!__atomic_load_n(&barrier_ok, __ATOMIC_RELAXED) || atomic_load_explicit(&t->tail, memory_order_relaxed) - head < slots ||
      !atomic_load_explicit(&inbox(t)[(head + slots - 1) & mask].p, memory_order_relaxed) ||
      atomic_load_explicit(&t->taking, memory_order_relaxed) || !atomic_load_explicit(&t->live, memory_order_relaxed))
    return false;   /* (another thread takes them now; no holder: they go to their spans) */
  uint32_t end = head, blocks = 0, most = fm_pool.inbox_n < FM_COLLECT_BEHIND ? fm_pool.inbox_n : FM_COLLECT_BEHIND;
  for (uintptr_t v; blocks < most && (v = atomic_load_explicit(&inbox(t)[end & mask].p, memory_order_acquire)); end++)
    if (v != INBOX_HOLE) blocks += remote_run(v);
  if (blocks < at) return false;
  if (!os_membarrier(false)) {
    __atomic_store_n(&barrier_ok, false, __ATOMIC_RELAXED);   /* (a fork child the kernel did not register: holders take their own) */
    return false;
  }
  *a = (struct remote_adoption){t, end};
  return true;
}

/* Up to `most` of the adopted blocks, CACHED, into b (0: no more): from the head up to the end
 * seen before the barrier, stopping at the block whose state t's holder publishes now (read
 * after the barrier, under `taking`, which the holder's release waits for: its cache stays). */
uint32_t remote_adopt_take(struct remote_adoption *a, struct fm_blk *b, uint32_t most) {
  struct fm_tag *t = a->t;
  if (!taking_claim(t)) return 0;
  struct fm_tcache *h = t->holder;
  uint32_t head = atomic_load_explicit(&t->head, memory_order_relaxed);
  uint32_t got, n = h && (int32_t)(a->end - head) > 0 ? inbox_take(t, b, most, a->end, __atomic_load_n(&h->busy, __ATOMIC_ACQUIRE), &got) : 0;
  taking_end(t);
  return n;
}

/* ---- sending ---------------------------------------------------------------------------- */
/* Writes the n blocks b[] (runs of one, as inbox slots hold them) as a chain of carriers, b[0]
 * the first; returns the last, whose link the caller writes. */
static uintptr_t *carry(const struct fm_blk *b, uint32_t n) {
  uintptr_t *w = NULL;
  uint64_t wx = 0;
  for (uint32_t i = 0; i < n;) {
    uintptr_t *cw = remote_block((uintptr_t)b[i].p);
    uint64_t x = carrier_key(cw);
    uint32_t words = carrier_words(remote_class((uintptr_t)b[i].p)), k = 1;
    if (w) w[0] = (uintptr_t)cw ^ word_mask(wx, 0);
    for (i++; k < words && i < n; k++, i++) cw[k] = (uintptr_t)remote_block((uintptr_t)b[i].p) ^ word_mask(x, k);
    if (k < words) cw[k] = LINK_END ^ word_mask(x, k);
    w = cw;
    wx = x;
  }
  return w;
}

/* Sends the n runs b[] of REMOTE blocks (an outbox's entries, as inbox slots hold them) to
 * owner's inbox, or, when it has no room for them, pushes their blocks on its remote stack as
 * one chain of carriers. A tag no thread holds gets nothing: the blocks, and what waits there,
 * go back to their spans. */
void remote_send(struct fm_tag *owner, struct fm_blk *b, uint32_t n) {
  if (!atomic_load(&owner->live) && taking_claim(owner)) {
    if (!atomic_load(&owner->live)) {   /* (remote_hold waits for `taking`: no holder comes meanwhile) */
      for (uint32_t i = 0; i < n; i++) {
        uintptr_t v = (uintptr_t)b[i].p;
        for (uint32_t k = 0; k < remote_run(v); k++)
          arrive(v, k, b[i].st + k);
      }
      give_all(b, n);
      taking_end(owner);
      remote_orphans(owner);
      return;
    }
    taking_end(owner);
  }
  uint32_t tail = atomic_load_explicit(&owner->tail, memory_order_relaxed);
  for (;;) {
    uint32_t head = atomic_load_explicit(&owner->head, memory_order_acquire);
    if ((int32_t)(tail - head) < 0) {   /* the taker passed the tail read: read it again */
      tail = atomic_load_explicit(&owner->tail, memory_order_relaxed);
      continue;
    }
    if (tail + n - head > fm_pool.inbox_n) {
      struct fm_blk one[FM_OUTBOX];   /* (carriers list blocks one by one) */
      uintptr_t *last = carry(one, runs_apart(b, n, one)), h = atomic_load_explicit(&owner->remote, memory_order_relaxed);
      uintptr_t last_mask = word_mask(carrier_key(last), 0);
      do {
        fm_count(CNT_RMW);
        *last = (h ? h : LINK_END) ^ last_mask;
      } while (!atomic_compare_exchange_weak(&owner->remote, &h, (uintptr_t)remote_block((uintptr_t)one[0].p)));
      break;
    }
    fm_count(CNT_RMW);
    if (atomic_compare_exchange_weak_explicit(&owner->tail, &tail, tail + n, memory_order_relaxed, memory_order_relaxed)) {
      struct fm_slot *box = inbox(owner);
      uint32_t mask = fm_pool.inbox_n - 1;
      for (uint32_t j = 0; j < n; j++) {
        struct fm_slot *slot = &box[(tail + j) & mask];
        __atomic_store_n(&slot->st, b[j].st, __ATOMIC_RELAXED);
        atomic_store_explicit(&slot->p, (uintptr_t)b[j].p, memory_order_release);
      }
      break;
    }
  }
  /* the slots written, then `live` read (remote_orphans): a full barrier between, or, while
   * membarrier works, the one remote_release makes this thread take (the stack's push above is
   * a full barrier of its own) */
  if (__atomic_load_n(&barrier_ok, __ATOMIC_RELAXED)) __atomic_signal_fence(__ATOMIC_SEQ_CST);
  else atomic_thread_fence(memory_order_seq_cst);
  if (!atomic_load(&owner->live)) remote_orphans(owner);
}

/* ---- holders ---------------------------------------------------------------------------- */
/* tc becomes tag t's holder; false (tc stays without it) while another thread takes t's blocks:
 * a thread start does not wait for one that may be off its CPU. */
bool remote_hold(struct fm_tag *t, struct fm_tcache *tc) {
  if (!taking_claim(t)) return false;
  t->holder = tc;
  atomic_store(&t->live, 1);
  taking_end(t);
  return true;
}

/* t's holder lets it go (at its exit): what other threads free for it from now on, and what
 * waits, goes back to the spans. It waits for an adopter that is reading the holder's published
 * state (the cache it reads is given back next). A sender writes its slots and then reads
 * `live` with no barrier between (remote_send): when slots were reserved and not taken, a
 * membarrier puts one in every sender, so one that still read 1 has its slots written for the
 * drain below, and one that reads after it reads 0 and drains itself. A sender that reserves
 * after `live` is 0 (its reservation is a full barrier) reads 0 too. */
void remote_release(struct fm_tag *t) {
  while (!taking_claim(t)) sched_yield();
  t->holder = NULL;
  atomic_store(&t->live, 0);
  taking_end(t);
  if (__atomic_load_n(&barrier_ok, __ATOMIC_RELAXED) &&
      atomic_load(&t->tail) != atomic_load_explicit(&t->head, memory_order_relaxed) && !os_membarrier(false))
    __atomic_store_n(&barrier_ok, false, __ATOMIC_RELAXED);   /* (senders fence again; the next drain finds what this one misses) */
  remote_orphans(t);
}

/* Fork child: only the calling thread goes on, holding tag `mine` (or NULL). In its inbox the
 * slots other threads reserved and had not written are holes its takes step over; every other
 * tag's blocks are abandoned (a take a parent's thread was in the middle of cannot be
 * finished) and the tag is free again. */
void remote_after_fork(struct fm_tag *mine, uint32_t used) {
  if (mine) {
    atomic_store_explicit(&mine->taking, 0, memory_order_relaxed);
    for (uint32_t i = mine->head; i != mine->tail; i++)
      if (!inbox(mine)[i & (fm_pool.inbox_n - 1)].p) inbox(mine)[i & (fm_pool.inbox_n - 1)].p = INBOX_HOLE;
  }
  for (uint32_t i = 0; i < used; i++) {
    struct fm_tag *t = &fm_pool.tags[i];
    if (t == mine) continue;
    atomic_store_explicit(&t->remote, 0, memory_order_relaxed);
    atomic_store_explicit(&t->live, 0, memory_order_relaxed);
    atomic_store_explicit(&t->taking, 0, memory_order_relaxed);
    t->holder = NULL;
    t->pending = 0;
    if (t->head != t->tail) memset(inbox(t), 0, fm_pool.inbox_n * sizeof *fm_pool.inbox);
    t->head = t->tail = 0;
  }
}
