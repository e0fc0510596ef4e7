/* mixed: N mixed allocations (16 B to 8 MiB, random) with frees and reallocs, touching every
 * page of every block and verifying the contents survive (realloc keeps the old bytes).
 * Used by one_pool.sh to show that the number of mmap/munmap/mremap/brk calls does not depend
 * on N under flatmalloc.
 *
 * usage: mixed N [SLOTS [MAX_BYTES [SEED [THREADS]]]]
 * Each of THREADS threads (default 1; with 1 the work runs in the main thread) makes N
 * operations on its own SLOTS slots with its own seed; after the threads end, the main thread
 * checks and frees the blocks they left (frees from another thread). Prints one line,
 * "mixed: ops=N ... checksum=X", the same for the same arguments whatever the allocator.
 * Exits 1 (with a message on stderr) on an allocation failure or damaged contents. */
#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PAGE 4096u

struct slot {
    unsigned char *p;
    size_t size;
    unsigned char tag;
};

struct worker {
    pthread_t thread;
    uint64_t rng; /* xorshift64* state */
    size_t n, nslots;
    struct slot *slots;
    uint64_t checksum;
    size_t nmalloc, nfree, nrealloc, peak_live;
};

static __thread struct worker *self;

static uint64_t rnd(void)
{
    uint64_t x = self->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    self->rng = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static size_t max_bytes = 8u << 20;

/* Log-uniform sizes: about as many 16-byte blocks as 4 MiB ones, plus the exact maximum now and then. */
static size_t pick_size(void)
{
    if (rnd() % 64 == 0)
        return max_bytes;
    unsigned bits = 4 + (unsigned)(rnd() % 20); /* 16 B .. 8 MiB */
    size_t s = 16 + (size_t)(rnd() % ((uint64_t)1 << bits));
    return s > max_bytes ? max_bytes : s;
}

static void die(const char *what, size_t i, size_t size)
{
    fprintf(stderr, "mixed: %s (op %zu, size %zu, errno %d)\n", what, i, size, errno);
    exit(1);
}

/* Byte expected at offset off of a block with this tag. */
static unsigned char pat(unsigned char tag, size_t off)
{
    return (unsigned char)(tag ^ (off >> 12) ^ (off & 0xff));
}

/* Offsets that are written and checked: the first 64 bytes, one byte per page, the last byte. */
static void fill(struct slot *s, size_t from)
{
    size_t off;
    for (off = from; off < s->size && off < 64; off++)
        s->p[off] = pat(s->tag, off);
    for (off = (from + PAGE - 1) & ~(size_t)(PAGE - 1); off < s->size; off += PAGE)
        s->p[off] = pat(s->tag, off);
    if (s->size > 0)
        s->p[s->size - 1] = pat(s->tag, s->size - 1);
}

/* Checks the written offsets below upto; the last byte too when full (the block as filled). */
static uint64_t verify(const struct slot *s, size_t upto, int full, size_t i)
{
    uint64_t sum = 0;
    size_t off, n = upto < s->size ? upto : s->size;
    for (off = 0; off < n && off < 64; off++) {
        if (s->p[off] != pat(s->tag, off))
            die("contents damaged (head)", i, s->size);
        sum += s->p[off];
    }
    for (off = 0; off < n; off += PAGE) {
        if (s->p[off] != pat(s->tag, off))
            die("contents damaged (page)", i, s->size);
        sum += s->p[off];
    }
    if (full && s->size > 0 && s->p[s->size - 1] != pat(s->tag, n - 1))
        die("contents damaged (tail)", i, s->size);
    return sum;
}

static void *work(void *arg)
{
    struct worker *w = self = arg;
    size_t live = 0;
    for (size_t i = 0; i < w->n; i++) {
        struct slot *s = &w->slots[rnd() % w->nslots];
        unsigned op = (unsigned)(rnd() % 4);
        if (s->p && op == 0) { /* free */
            w->checksum += verify(s, s->size, 1, i);
            free(s->p);
            live -= s->size;
            s->p = NULL;
            w->nfree++;
        } else if (s->p && op == 1) { /* realloc: old bytes must survive */
            size_t old = s->size, size = pick_size();
            w->checksum += verify(s, size, 0, i);
            unsigned char *q = realloc(s->p, size);
            if (!q)
                die("realloc returned NULL", i, size);
            s->p = q;
            s->size = size;
            w->checksum += verify(s, old, 0, i);
            fill(s, old < size ? old : size);
            live = live - old + size;
            w->nrealloc++;
        } else { /* (re)allocate, a quarter of them with calloc */
            if (s->p) {
                w->checksum += verify(s, s->size, 1, i);
                free(s->p);
                live -= s->size;
                w->nfree++;
            }
            size_t size = pick_size();
            int zeroed = rnd() % 4 == 0;
            s->p = zeroed ? calloc(1, size) : malloc(size);
            if (!s->p)
                die(zeroed ? "calloc returned NULL" : "malloc returned NULL", i, size);
            s->size = size;
            s->tag = (unsigned char)rnd();
            if (zeroed)
                for (size_t off = 0; off <= size; off += PAGE) {
                    size_t at = off < size ? off : size - 1;
                    if (s->p[at]) {
                        fprintf(stderr, "mixed: calloc(1, %zu) = %p: byte %zu is 0x%02x, not 0\n", size,
                                (void *)s->p, at, s->p[at]);
                        die("calloc memory not zero", i, size);
                    }
                }
            fill(s, 0);
            live += size;
            w->nmalloc++;
        }
        if (live > w->peak_live)
            w->peak_live = live;
    }
    return NULL;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: mixed N [SLOTS [MAX_BYTES [SEED [THREADS]]]]\n");
        return 2;
    }
    size_t n = strtoull(argv[1], NULL, 10);
    size_t nslots = argc > 2 ? strtoull(argv[2], NULL, 10) : 64;
    if (argc > 3)
        max_bytes = strtoull(argv[3], NULL, 10);
    uint64_t seed = argc > 4 ? strtoull(argv[4], NULL, 10) : 0x9E3779B97F4A7C15ULL;
    size_t nthreads = argc > 5 ? strtoull(argv[5], NULL, 10) : 1;
    if (nslots == 0 || max_bytes < 16 || seed == 0 || nthreads == 0 || nthreads > 64) {
        fprintf(stderr, "mixed: bad arguments\n");
        return 2;
    }
    struct worker *workers = calloc(nthreads, sizeof *workers);
    if (!workers)
        die("calloc of the worker table failed", 0, nthreads * sizeof *workers);
    for (size_t t = 0; t < nthreads; t++) {
        struct worker *w = &workers[t];
        w->rng = seed + t * 0x9E3779B97F4A7C15ULL;
        if (w->rng == 0)
            w->rng = 1;
        w->n = n;
        w->nslots = nslots;
        w->slots = calloc(nslots, sizeof *w->slots);
        if (!w->slots)
            die("calloc of a slot table failed", 0, nslots * sizeof *w->slots);
    }
    if (nthreads == 1) {
        work(&workers[0]);
    } else {
        for (size_t t = 0; t < nthreads; t++)
            if (pthread_create(&workers[t].thread, NULL, work, &workers[t]) != 0)
                die("pthread_create failed", 0, t);
        for (size_t t = 0; t < nthreads; t++)
            pthread_join(workers[t].thread, NULL);
    }
    /* the main thread frees what the workers left */
    uint64_t checksum = 0;
    size_t nmalloc = 0, nfree = 0, nrealloc = 0, peak_live = 0;
    for (size_t t = 0; t < nthreads; t++) {
        struct worker *w = &workers[t];
        for (size_t k = 0; k < nslots; k++)
            if (w->slots[k].p) {
                w->checksum += verify(&w->slots[k], w->slots[k].size, 1, n);
                free(w->slots[k].p);
                w->nfree++;
            }
        free(w->slots);
        checksum = checksum * 31 + w->checksum;
        nmalloc += w->nmalloc;
        nfree += w->nfree;
        nrealloc += w->nrealloc;
        peak_live += w->peak_live;
    }
    free(workers);
    printf("mixed: threads=%zu ops=%zu malloc=%zu realloc=%zu free=%zu peak_live=%zu checksum=%llu\n",
           nthreads, n * nthreads, nmalloc, nrealloc, nfree, peak_live, (unsigned long long)checksum);
    return 0;
}
