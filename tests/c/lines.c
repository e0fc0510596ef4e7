/* lines: two threads that share no block write no common cache line of the allocator's records,
 * nor one sector of the chunks' records (issue 48; types.h, BLOCK STATE): a sector is the two
 * cache lines a CPU fetches together (FM_SECTOR), and two threads writing the two lines of one
 * sector did little more than one thread.
 *
 * Two threads each churn a working set of their own (1,000 slots: free a random slot, malloc a
 * random size into it, one byte written), in three rounds: 1-4 KiB (classes whose states sit in
 * the chunks' lines), 256-1023 B (where lines and shadows meet) and 16 B-4 KiB. Links the core
 * and calls flatmalloc_* directly (no preload), so it can read the pool's tables. Checked:
 *
 *   churn     no cache line of meta that both threads' malloc and free wrote (each block's state
 *             byte and its chunk's line, a chunk's records counting as their whole sector) did
 *             so for two different chunks: a line both wrote was
 *             written for one chunk, which went from one thread's span to the other's in between
 *             (a span whose blocks were all free went back to the heap)
 *   spans     then, both threads holding their working sets: no span holds blocks of both (each
 *             thread refills from shards of its own) and no cache line holds records of spans
 *             of both (the chunks' lines, run records and shadow states), wherever their
 *             chunks lie side by side in the heap
 *
 *   lines [--sizes LO-HI] [--steps N] [--seed S]   one round instead of the three */
#include "fmtest.h"

#include <flatmalloc.h>

#undef FM_TAGS   /* fmtest.h's copy; internal.h has the real one */
#include "internal.h"

#define SLOTS 1000

struct worker {
    pthread_t th;
    int cpu;   /* each thread runs on a CPU of its own, so its refills use that CPU's shards */
    fmt_rng rng;
    size_t lo, hi, steps;
    void *p[SLOTS];
    uint32_t *wrote;   /* per cache line of meta: the chunk (+ 1) for which this thread's malloc
                          and free wrote it, UINT32_MAX for several, 0 none */
};

static pthread_barrier_t churned, checked;
static size_t meta_lines;

/* The cache line holding a (in the meta area); for a chunk's records, the first of its sector
 * (*n: the lines to mark, 1 or 2). */
static uintptr_t line_of(const void *a, unsigned *n)
{
    uintptr_t at = (uintptr_t)a, chunks = (uintptr_t)fm_pool.chunk, i;
    *n = 1;
    if (at - chunks < (fm_pool.heap_size >> FM_CHUNK_SHIFT) * sizeof(struct fm_chunk)) {
        at &= ~(uintptr_t)(FM_SECTOR - 1);
        *n = FM_SECTOR / 64;
    }
    i = (at - fm_pool.base) >> 6;
    CHECK(i + *n <= meta_lines, "%p is not in the meta area", a);
    return i;
}

static void mark(uint64_t *bits, const void *a)
{
    unsigned n;
    for (uintptr_t i = line_of(a, &n), e = i + n; i < e; i++) bits[i / 64] |= 1ull << (i % 64);
}

static void mark_for(uint32_t *wrote, const void *a, uint32_t chunk)
{
    unsigned n;
    for (uintptr_t i = line_of(a, &n), e = i + n; i < e; i++)
        wrote[i] = wrote[i] == 0 || wrote[i] == chunk + 1 ? chunk + 1 : UINT32_MAX;
}

/* The records a free or malloc of p writes: its state byte and its chunk's line. */
static void mark_block(uint32_t *wrote, const void *p)
{
    fm_st *st;
    uint32_t chunk = (uint32_t)(((uintptr_t)p - fm_pool.heap_base) >> FM_CHUNK_SHIFT);
    CHECK(class_find(p, &st) >= 0, "%p is not a block of a span", p);
    mark_for(wrote, st, chunk);
    mark_for(wrote, &fm_pool.chunk[chunk].line, chunk);
}

static size_t pick_size(struct worker *w)
{
    size_t n = w->hi - w->lo + 1;
    return w->lo + fmt_below(&w->rng, n);
}

static void *work(void *arg)
{
    struct worker *w = arg;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(w->cpu, &set);
    CHECK(pthread_setaffinity_np(pthread_self(), sizeof set, &set) == 0, "the worker to CPU %d (the test needs two CPUs)", w->cpu);
    for (int i = 0; i < SLOTS; i++) {
        w->p[i] = flatmalloc_malloc(pick_size(w));
        CHECK(w->p[i], "malloc failed");
        *(volatile char *)w->p[i] = 1;
    }
    for (size_t k = 0; k < w->steps; k++) {
        int i = (int)fmt_below(&w->rng, SLOTS);
        mark_block(w->wrote, w->p[i]);
        flatmalloc_free(w->p[i]);
        w->p[i] = flatmalloc_malloc(pick_size(w));
        CHECK(w->p[i], "malloc failed");
        *(volatile char *)w->p[i] = 1;
        mark_block(w->wrote, w->p[i]);
    }
    pthread_barrier_wait(&churned);   /* the main thread looks at both working sets */
    pthread_barrier_wait(&checked);
    for (int i = 0; i < SLOTS; i++) flatmalloc_free(w->p[i]);
    return NULL;
}

/* The first chunk of the span holding p, and its class. */
static uint32_t span_of(const void *p, const struct fm_class **k)
{
    uint64_t e = fm_pool.chunk[((uintptr_t)p - fm_pool.heap_base) >> FM_CHUNK_SHIFT].line.e;
    CHECK((e & 0xff) != FM_NO_CLASS, "%p is in no span", p);
    *k = &fm_pool.cls[(e & 0xff) - 1];
    return (uint32_t)(((e & ~0xffull) - fm_pool.heap_base) >> FM_CHUNK_SHIFT);
}

/* Marks every cache line of the records of the spans holding w's blocks; counts the spans. */
static size_t mark_spans(const struct worker *w, uint64_t *bits, uint8_t *owner, uint8_t me)
{
    size_t spans = 0;
    for (int i = 0; i < SLOTS; i++) {
        const struct fm_class *k;
        uint32_t head = span_of(w->p[i], &k);
        CHECK(owner[head] == 0 || owner[head] == me,
              "a span (chunk %u) holds blocks of both threads: they refilled from one shard", head);
        if (owner[head]) continue;
        owner[head] = me;
        spans++;
        for (uint32_t j = 0; j < k->span_chunks; j++) {
            mark(bits, &fm_pool.chunk[head + j]);
        }
        if (!k->line_states) {
            const fm_st *st = fm_st_q(k, fm_pool.heap_base + ((uintptr_t)head << FM_CHUNK_SHIFT), 0);
            for (uint32_t q = 0; q < k->states; q++) mark(bits, st + q);
        }
    }
    return spans;
}

static size_t common(const uint64_t *a, const uint64_t *b, size_t *na, size_t *nb)
{
    size_t n = 0;
    *na = *nb = 0;
    for (size_t i = 0; i < (meta_lines + 63) / 64; i++) {
        n += (size_t)__builtin_popcountll(a[i] & b[i]);
        *na += (size_t)__builtin_popcountll(a[i]);
        *nb += (size_t)__builtin_popcountll(b[i]);
    }
    return n;
}

/* Names the records on cache line i of meta (for a failure's message). */
static void show_line(size_t i)
{
    uintptr_t chunks = (uintptr_t)fm_pool.chunk;
    {
        uintptr_t at = fm_pool.base + (i << 6);
        if (at - chunks < (fm_pool.heap_size >> FM_CHUNK_SHIFT) * sizeof(struct fm_chunk))
            fprintf(stderr, "  line and run record of chunk %zu (class + 1: %u)\n", (size_t)((at - chunks) / sizeof(struct fm_chunk)),
                    (unsigned)(fm_pool.chunk[(at - chunks) / sizeof(struct fm_chunk)].line.e & 0xff));
        else
            fprintf(stderr, "  meta at offset %zu (a shadow's states)\n", (size_t)(at - fm_pool.base));
    }
}

/* Lines both a and b hold. */
static void show_common(const uint64_t *a, const uint64_t *b)
{
    for (size_t i = 0; i < meta_lines; i++)
        if (a[i / 64] & b[i / 64] & (1ull << (i % 64))) show_line(i);
}

/* Lines both threads' malloc and free wrote, for different chunks (*same: for one chunk). */
static size_t written_both(const uint32_t *a, const uint32_t *b, size_t *na, size_t *nb, size_t *same)
{
    size_t n = 0;
    *na = *nb = *same = 0;
    for (size_t i = 0; i < meta_lines; i++) {
        *na += a[i] != 0;
        *nb += b[i] != 0;
        if (!a[i] || !b[i]) continue;
        if (a[i] == b[i] && a[i] != UINT32_MAX) {
            ++*same;
        } else {
            n++;
            show_line(i);
        }
    }
    return n;
}

static void round_of(size_t lo, size_t hi, size_t steps, uint64_t seed)
{
    static struct worker w[2];
    size_t words = (meta_lines + 63) / 64;
    uint64_t *bits[2];
    uint8_t *owner = calloc((fm_pool.heap_size >> FM_CHUNK_SHIFT), 1);
    CHECK(owner, "calloc");
    pthread_barrier_init(&churned, NULL, 3);
    pthread_barrier_init(&checked, NULL, 3);
    for (int t = 0; t < 2; t++) {
        w[t] = (struct worker){.cpu = t, .rng = {seed * 31 + (uint64_t)t}, .lo = lo, .hi = hi, .steps = steps};
        CHECK((w[t].wrote = calloc(meta_lines, sizeof(uint32_t))) && (bits[t] = calloc(words, 8)), "calloc");
        CHECK(pthread_create(&w[t].th, NULL, work, &w[t]) == 0, "pthread_create");
    }
    pthread_barrier_wait(&churned);
    size_t na, nb, same, shared = written_both(w[0].wrote, w[1].wrote, &na, &nb, &same);
    printf("%zu-%zu B, %zu steps: malloc and free wrote %zu and %zu lines of meta, %zu of them both for two chunks, "
           "%zu for one chunk that changed hands\n", lo, hi, steps, na, nb, shared, same);
    CHECK(na > 0 && nb > 0, "no line of meta marked");
    CHECK(shared == 0, "two threads that share no block wrote %zu common cache lines of meta (%zu-%zu B)", shared, lo,
          hi);
    size_t sa = mark_spans(&w[0], bits[0], owner, 1), sb = mark_spans(&w[1], bits[1], owner, 2);
    shared = common(bits[0], bits[1], &na, &nb);
    printf("%zu-%zu B: the threads' %zu and %zu spans have records on %zu and %zu lines, %zu of them both\n", lo, hi,
           sa, sb, na, nb, shared);
    CHECK(sa > 1 && sb > 1, "too few spans to tell");
    if (shared) show_common(bits[0], bits[1]);
    CHECK(shared == 0, "the spans of two threads that share no block have records on %zu common cache lines", shared);
    pthread_barrier_wait(&checked);
    for (int t = 0; t < 2; t++) {
        pthread_join(w[t].th, NULL);
        free(w[t].wrote);
        free(bits[t]);
    }
    free(owner);
    pthread_barrier_destroy(&churned);
    pthread_barrier_destroy(&checked);
}

int main(int argc, char **argv)
{
    size_t lo = 0, hi = 0, steps = 200000;
    uint64_t seed = 48;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--sizes") && i + 1 < argc) {
            CHECK(sscanf(argv[++i], "%zu-%zu", &lo, &hi) == 2 && lo >= 1 && lo <= hi, "--sizes wants LO-HI");
        } else if (!strcmp(argv[i], "--steps") && i + 1 < argc) {
            steps = strtoull(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
        } else {
            FAIL("usage: lines [--sizes LO-HI] [--steps N] [--seed S]");
        }
    }
    flatmalloc_free(flatmalloc_malloc(1));   /* the pool exists */
    meta_lines = (fm_pool.heap_base - fm_pool.base) >> 6;
    if (lo) {
        round_of(lo, hi, steps, seed);
    } else {
        round_of(1024, 4096, steps, seed);
        round_of(256, 1023, steps, seed);
        round_of(16, 4096, steps, seed);
    }
    printf("lines: ok\n");
    return 0;
}
