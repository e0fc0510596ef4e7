/* Seeded multi-threaded stress with content checks.
 *
 * Eight threads each run a random mix of malloc, calloc, posix_memalign, realloc and free over
 * sizes in every small class and the large area (up to ~1 MiB, rarely 8 MiB). Blocks travel to
 * other threads through lock-protected mailboxes; the receiver checks them and frees, reallocs or
 * keeps them. Every block carries a pattern derived from its 64-bit tag, checked before every free
 * and after every realloc (and at random while it lives); calloc blocks are checked for zeros.
 *
 *   stress [--libc] [seed [ops-per-thread [threads]]]
 *
 * The seed is printed; passing it back replays each thread's choices (the interleaving differs). */
#include "fmtest.h"

#include <malloc.h>
#include <pthread.h>
#include <time.h>

#define MiB ((size_t)1 << 20)
#define SLOTS 512
#define MAILBOX 1024
#define MAX_THREADS 64
/* Blocks are patterned in full up to DENSE bytes; beyond it, 16 bytes in every 512 and the last
 * 16 bytes: enough to see any overlap of pages without writing megabytes per operation. */
#define DENSE 65536

typedef struct {
    unsigned char *p;
    size_t size;
    uint64_t tag;
} blk;

typedef struct {
    pthread_mutex_t lock;
    int count;
    blk items[MAILBOX];
} mailbox;

typedef struct {
    int id;
    uint64_t seed;
    pthread_t thread;
    blk slot[SLOTS];
    uint64_t ops, frees, reallocs, sent, received, large, huge;
} worker;

static int nthreads = 8;
static long ops_per_thread = 400000;
static worker workers[MAX_THREADS];
static mailbox boxes[MAX_THREADS];

/* ---- patterns over a block ---- */

static void fill(unsigned char *p, size_t from, size_t size, uint64_t tag)
{
    if (from < DENSE)
        fmt_fill(p, from, size < DENSE ? size : DENSE, tag);
    size_t o = from > DENSE ? from & ~(size_t)511 : DENSE;
    for (; o < size; o += 512) {
        size_t a = o < from ? from : o, b = o + 16 < size ? o + 16 : size;
        if (a < b)
            fmt_fill(p, a, b, tag);
    }
    if (size > 0)
        fmt_fill(p, size >= 16 ? size - 16 : 0, size, tag);
}

/* Checks the patterned bytes of a block of `size` bytes that lie below `limit`. */
static void verify(const blk *b, size_t limit, const char *when)
{
    size_t lim = limit < b->size ? limit : b->size;
    CHECK_PATTERN(b->p, 0, lim < DENSE ? lim : DENSE, b->tag, when);
    for (size_t o = DENSE; o < lim; o += 512)
        CHECK_PATTERN(b->p, o, o + 16 < lim ? o + 16 : lim, b->tag, when);
    size_t t = b->size >= 16 ? b->size - 16 : 0;
    if (t < lim)
        CHECK_PATTERN(b->p, t, lim, b->tag, when);
}

/* ---- operations ---- */

static size_t pick_size(fmt_rng *r, worker *w)
{
    uint64_t x = fmt_below(r, 100000);
    if (x < 60000)
        return fmt_below(r, 257); /* 0..256: the 16-byte-step classes */
    if (x < 90000)
        return 257 + fmt_below(r, 4096 - 256);
    if (x < 97500)
        return 4097 + fmt_below(r, 32768 - 4096); /* up to the largest small class */
    if (x < 99985) {
        w->large++;
        return 32769 + fmt_below(r, MiB); /* the large area */
    }
    w->huge++;
    return 8 * MiB + fmt_below(r, 65536);
}

static void new_block(worker *w, fmt_rng *r, blk *b)
{
    size_t n = pick_size(r, w);
    uint64_t kind = fmt_below(r, 100);
    unsigned char *p;
    if (kind < 80) {
        p = malloc(n);
        CHECK(p != NULL, "thread %d: malloc(%zu) returned NULL", w->id, n);
        CHECK(((uintptr_t)p & 15) == 0, "thread %d: malloc(%zu) = %p not 16-aligned", w->id, n, (void *)p);
    } else if (kind < 90) {
        size_t cnt = 1 + fmt_below(r, 4), each = n / cnt;
        n = each * cnt;
        p = calloc(cnt, each);
        CHECK(p != NULL, "thread %d: calloc(%zu, %zu) returned NULL", w->id, cnt, each);
        for (size_t o = 0; o < (n < DENSE ? n : DENSE); o++)
            if (p[o])
                FAIL("thread %d: calloc(%zu, %zu) block %p: byte %zu is 0x%02x, not zero", w->id, cnt, each,
                     (void *)p, o, p[o]);
        for (size_t o = DENSE; o < n; o += 4096)
            CHECK(p[o] == 0, "thread %d: calloc block of %zu bytes: byte %zu is not zero", w->id, n, o);
    } else {
        size_t align = (size_t)8 << fmt_below(r, 10); /* 8 .. 4096 */
        void *q = NULL;
        int rc = posix_memalign(&q, align, n);
        CHECK(rc == 0 && q != NULL, "thread %d: posix_memalign(%zu, %zu) returned %d", w->id, align, n, rc);
        CHECK(((uintptr_t)q & (align - 1)) == 0, "thread %d: posix_memalign(%zu, %zu) = %p misaligned",
              w->id, align, n, q);
        p = q;
    }
    CHECK(malloc_usable_size(p) >= n, "thread %d: usable size %zu < %zu", w->id, malloc_usable_size(p), n);
    b->p = p;
    b->size = n;
    b->tag = fmt_next(r) | 1; /* never 0 */
    fill(p, 0, n, b->tag);
}

static void free_block(worker *w, blk *b, const char *when)
{
    verify(b, SIZE_MAX, when);
    free(b->p);
    b->p = NULL;
    w->frees++;
}

static void realloc_block(worker *w, fmt_rng *r, blk *b, const char *when)
{
    verify(b, SIZE_MAX, when);
    size_t n = fmt_below(r, 4) == 0 ? b->size / 2 + fmt_below(r, 64) : pick_size(r, w);
    if (n == 0)
        n = 1; /* realloc(p, 0) frees: not what this step means */
    unsigned char *q = realloc(b->p, n);
    CHECK(q != NULL, "thread %d: realloc(%p, %zu -> %zu) returned NULL", w->id, (void *)b->p, b->size, n);
    CHECK(((uintptr_t)q & 15) == 0, "thread %d: realloc to %zu gave %p, not 16-aligned", w->id, n, (void *)q);
    size_t old = b->size;
    b->p = q;
    verify(b, n, "contents kept by realloc");
    b->size = n;
    fill(q, old < n ? old : n, n, b->tag);
    w->reallocs++;
}

static void send_block(worker *w, fmt_rng *r, blk *b)
{
    int to = (int)fmt_below(r, (uint64_t)nthreads - 1);
    if (to >= w->id)
        to++;
    mailbox *m = &boxes[to];
    pthread_mutex_lock(&m->lock);
    if (m->count < MAILBOX) {
        m->items[m->count++] = *b;
        pthread_mutex_unlock(&m->lock);
        b->p = NULL;
        w->sent++;
        return;
    }
    pthread_mutex_unlock(&m->lock);
    free_block(w, b, "block freed by its owner (mailbox full)");
}

static void drain_mailbox(worker *w, fmt_rng *r)
{
    blk got[MAILBOX];
    mailbox *m = &boxes[w->id];
    pthread_mutex_lock(&m->lock);
    int n = m->count;
    memcpy(got, m->items, (size_t)n * sizeof(blk));
    m->count = 0;
    pthread_mutex_unlock(&m->lock);
    for (int i = 0; i < n; i++) {
        blk *b = &got[i];
        w->received++;
        verify(b, SIZE_MAX, "block received from another thread");
        uint64_t what = fmt_below(r, 100);
        if (what < 50) {
            free_block(w, b, "block freed by the receiving thread");
            continue;
        }
        if (what < 80)
            realloc_block(w, r, b, "block realloc'd by the receiving thread");
        int s = (int)fmt_below(r, SLOTS);
        if (w->slot[s].p == NULL)
            w->slot[s] = *b; /* adopt it */
        else
            free_block(w, b, "received block freed after realloc");
    }
}

static void *work(void *arg)
{
    worker *w = arg;
    fmt_rng r = {w->seed};
    for (long op = 0; op < ops_per_thread; op++) {
        if ((op & 63) == 0)
            drain_mailbox(w, &r);
        blk *b = &w->slot[fmt_below(&r, SLOTS)];
        w->ops++;
        if (b->p == NULL) {
            new_block(w, &r, b);
            continue;
        }
        uint64_t x = fmt_below(&r, 100);
        if (x < 40)
            free_block(w, b, "block freed by the thread that holds it");
        else if (x < 60)
            realloc_block(w, &r, b, "block before realloc");
        else if (x < 80)
            send_block(w, &r, b);
        else
            verify(b, SIZE_MAX, "live block spot check");
    }
    drain_mailbox(w, &r);
    for (int s = 0; s < SLOTS; s++)
        if (w->slot[s].p)
            free_block(w, &w->slot[s], "block freed at thread end");
    return NULL;
}

int main(int argc, char **argv)
{
    int a = 1 + fmt_init("stress", argc, argv);
    uint64_t seed = (argc > a) ? strtoull(argv[a], NULL, 0) : fmt_mix((uint64_t)time(NULL) ^ ((uint64_t)getpid() << 32));
    if (argc > a + 1)
        ops_per_thread = strtol(argv[a + 1], NULL, 0);
    if (argc > a + 2)
        nthreads = atoi(argv[a + 2]);
    CHECK(nthreads >= 2 && nthreads <= MAX_THREADS, "threads must be 2..%d", MAX_THREADS);
    printf("stress: seed=%#llx threads=%d ops/thread=%ld (reproduce: stress %#llx %ld %d)\n",
           (unsigned long long)seed, nthreads, ops_per_thread, (unsigned long long)seed, ops_per_thread, nthreads);

    size_t base = mallinfo2().uordblks;
    for (int i = 0; i < nthreads; i++) {
        pthread_mutex_init(&boxes[i].lock, NULL);
        workers[i].id = i;
        workers[i].seed = fmt_mix(seed + (uint64_t)i * 0x9e3779b97f4a7c15ULL);
    }
    for (int i = 0; i < nthreads; i++)
        CHECK(pthread_create(&workers[i].thread, NULL, work, &workers[i]) == 0, "pthread_create failed");
    uint64_t ops = 0, frees = 0, reallocs = 0, sent = 0, received = 0, large = 0, huge = 0;
    for (int i = 0; i < nthreads; i++) {
        CHECK(pthread_join(workers[i].thread, NULL) == 0, "pthread_join failed");
        ops += workers[i].ops;
        frees += workers[i].frees;
        reallocs += workers[i].reallocs;
        sent += workers[i].sent;
        received += workers[i].received;
        large += workers[i].large;
        huge += workers[i].huge;
    }
    /* Blocks sent to threads that had already finished: freed here, by yet another thread. */
    uint64_t late = 0;
    for (int i = 0; i < nthreads; i++)
        for (int k = 0; k < boxes[i].count; k++, late++) {
            verify(&boxes[i].items[k], SIZE_MAX, "block left in a mailbox, freed by main");
            free(boxes[i].items[k].p);
        }
    printf("stress: %llu ops, %llu frees, %llu reallocs, %llu blocks sent to other threads (%llu received, "
           "%llu freed by main), %llu large, %llu 8 MiB\n",
           (unsigned long long)ops, (unsigned long long)frees, (unsigned long long)reallocs,
           (unsigned long long)sent, (unsigned long long)received, (unsigned long long)late,
           (unsigned long long)large, (unsigned long long)huge);
    CHECK(received + late == sent, "%llu blocks sent but %llu arrived", (unsigned long long)sent,
          (unsigned long long)(received + late));

    if (fmt_flatmalloc) {
        /* Every block is freed and the threads are gone: in-use bytes are back where they began,
         * give or take what libc itself keeps per thread (dtv). */
        size_t end = mallinfo2().uordblks;
        CHECK(end <= base + MiB, "mallinfo2().uordblks is %zu after every block was freed, %zu at start",
              end, base);
        printf("stress: uordblks %zu at start, %zu at end\n", base, end);
    }
    int (*heap_check)(void) = (int (*)(void))fmt_sym("flatmalloc_heap_check");
    if (heap_check) {
        int faults = heap_check();
        CHECK(faults == 0, "flatmalloc_heap_check() found %d faults after the run (seed %#llx)", faults,
              (unsigned long long)seed);
        puts("stress: flatmalloc_heap_check() == 0");
    }
    puts("stress: all checks passed");
    return 0;
}
