/* memcheck's short ways: malloc of a stashed size, free while releases are queued and realloc
 * between the two (see "the stash" and "deferred releases" in vg.c). Under quick.flag, with
 * the requests' arguments in quick's static blocks. malloc and free make no call: every other
 * way out is a tail call to vg.c (its functions of the same names, or the flush of a full
 * queue, or a contended flag), so they need no stack frame, whose every change memcheck
 * instruments, as it instruments every load and store here. A native call finding a lock held
 * (rare: statistics, malloc_trim, validators) spins: memcheck runs one thread at a time and
 * switches when the spinning thread's time slice ends. */
#include <string.h>

#include "internal.h"
#include "vg.h"

#define NAMED(fn) __asm__(fn) noinline __attribute__((used))
static void *named_malloc(size_t size);
static void *told(uintptr_t p, size_t size) NAMED("malloc");
static void named_free(void *p) NAMED("free");
static void *named_realloc(void *p, size_t size);
static void *told_realloc(uintptr_t q, size_t size, void *p, size_t copy) NAMED("realloc");

void *check_malloc(size_t size) { return named_malloc(size); }
void check_free(void *p) { named_free(p); }
void *check_realloc(void *p, size_t size) { return named_realloc(p, size); }

/* false when another thread holds the flag: the caller takes vg.c's way, which waits with
 * sched_yield (a system call, where Valgrind lets the holder run), a call these cannot make */
static bool flag_take(void) { return !atomic_flag_test_and_set_explicit(&quick.flag, memory_order_acquire); }
static void flag_give(void) { atomic_flag_clear_explicit(&quick.flag, memory_order_release); }

static uintptr_t native(uintptr_t (*fn)(uintptr_t, uintptr_t, uintptr_t), uintptr_t a, uintptr_t b) {
  uintptr_t r;
  quick.call_req[1] = (uintptr_t)fn;
  quick.call_req[2] = a;
  quick.call_req[3] = b;
  while ((r = vg_request(quick.call_req, 0)) == NATIVE_BUSY) __builtin_ia32_pause();
  return r;
}

static void *named_malloc(size_t size) {
  if (likely(size < quick.stash_lim) && likely(flag_take())) {   /* memcheck, native calls, no profile */
    unsigned c = vg_stash_class(size);
    unsigned n = quick.nstash[c];
    if (unlikely(!n) && !__atomic_load_n(&vg_spill_run, __ATOMIC_RELAXED)) n = (unsigned)(native(vg_native_fill, c, size + LEAN_LEAD) >> 4);
    if (likely(n)) return told(vg_stash_pop(c, n, size), size);
    flag_give();   /* none left: vg.c's way hands the queue and the stash back and retries */
  }
  return vg_malloc_long(size);
}

/* Reached by tail calls only: memcheck's stack reads malloc (this request), then the program. */
static void *told(uintptr_t p, size_t size) {
  quick.malloc_req[1] = p;
  quick.malloc_req[2] = size;
  vg_request(quick.malloc_req, 0);
  quick.malloc_req[1] = 0;   /* memcheck's leak search reads this as a root */
  flag_give();
  vg_scrub(p);
  return (void *)p;
}

void *vg_malloc_told(uintptr_t p, size_t size) { return told(p, size); }

/* In the heap: neither NULL nor a bootstrap block. A bad pointer is found when the queue is
 * handed over, after memcheck reported it. */
static void named_free(void *p) {
  if (likely(!quick.queue_off) && (uintptr_t)p - fm_pool.heap_base < fm_pool.heap_size && likely(flag_take())) {
    quick.free_req[1] = (uintptr_t)p;
    vg_request(quick.free_req, 0);
    vg_queue_add((uintptr_t)p);
    if (unlikely(quick.nqueue == QUEUE_LEN)) return vg_flush_unlock();
    flag_give();
    return;
  }
  return vg_free_long(p);
}

/* realloc of a block in the heap to a stashed size while releases are queued (no new or new[]
 * block is live: p is a malloc block): one native call, as glibc's realloc under memcheck makes
 * one call into memcheck, and memcheck's memcpy, which carries over which bytes are defined.
 * Under memcheck realloc always moves the block (vg_native_resize), as memcheck's own. A bad
 * pointer takes vg.c's way, which reports it. */
static void *named_realloc(void *p, size_t size) {
  if (likely(!quick.queue_off) && size && size < quick.stash_lim &&
      (uintptr_t)p - fm_pool.heap_base < fm_pool.heap_size && flag_take()) {
    uintptr_t r = native(vg_native_resize, (uintptr_t)p, size);
    size_t old = r >> 8;
    if (likely((r & 15) == 0)) {   /* valid */
      unsigned c = vg_stash_class(size), n = quick.nstash[c];
      if (!n) n = (unsigned)(native(vg_native_fill, c, size + LEAN_LEAD) >> 4);
      if (likely(n)) return told_realloc(vg_stash_pop(c, n, size), size, p, old < size ? old : size);
    }
    flag_give();
  }
  return vg_realloc_long(p, size);
}

/* Reached by tail calls only, with quick.flag held: memcheck's stack reads realloc (this
 * request), then the program, for every size. p is a valid malloc block: its release is
 * queued. This one has a stack frame (memcpy). */
static void *told_realloc(uintptr_t q, size_t size, void *p, size_t copy) {
  quick.malloc_req[1] = q;
  quick.malloc_req[2] = size;
  vg_request(quick.malloc_req, 0);
  quick.malloc_req[1] = 0;
  memcpy((void *)q, p, copy);
  quick.free_req[1] = (uintptr_t)p;
  vg_request(quick.free_req, 0);
  vg_queue_add((uintptr_t)p);
  if (unlikely(quick.nqueue == QUEUE_LEN)) vg_flush_locked();
  flag_give();
  return (void *)q;
}

void *vg_realloc_told(uintptr_t q, size_t size, void *p, size_t copy) { return told_realloc(q, size, p, copy); }
