/* Thousands of short-lived threads: exited threads hand back what they cached.
 *
 * 5000 threads in waves of 50. Each does one of:
 *   first-malloc  allocates one block and exits at once (main frees it later);
 *   free-all      frees blocks main gave it, allocates a mix, reallocs some, frees everything;
 *   hand-off      allocates a mix, frees part, hands the rest to main;
 *   churn         frees main's blocks, cycles one size class through its cache, hands some off.
 * Every block carries a tag pattern, checked by whoever frees it. After each wave main checks and
 * frees what it was handed; then the bytes in use (mallinfo2().uordblks) must be back at the level
 * measured after a warm-up wave, and the resident size must not keep growing from wave to wave
 * (memory cached by exited threads that never came back would show up there). Then waves of
 * short threads (short_threads) must fault no cache in. */
#include "fmtest.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define WAVES 100
#define WAVE 50
#define GIVEN 6
#define HANDED 64

enum kind { FIRST_MALLOC, FREE_ALL, HAND_OFF, CHURN, KINDS };
static const char *const kind_name[KINDS] = {"first-malloc", "free-all", "hand-off", "churn"};

typedef struct {
    unsigned char *p;
    size_t size;
    uint64_t tag;
} blk;

typedef struct {
    int index;
    enum kind kind;
    uint64_t seed;
    int ngiven, nhanded;
    blk given[GIVEN];   /* allocated by main, freed by the thread */
    blk handed[HANDED]; /* allocated by the thread, freed by main */
} job;

static job jobs[WAVE];

static size_t pick_size(fmt_rng *r)
{
    uint64_t x = fmt_below(r, 1000);
    if (x < 700)
        return 1 + fmt_below(r, 512);
    if (x < 950)
        return 513 + fmt_below(r, 32768 - 512);
    if (x < 998)
        return 32769 + fmt_below(r, 512 * KiB);
    return 2 * MiB + fmt_below(r, 4096);
}

static void new_block(blk *b, size_t size, fmt_rng *r, const char *who)
{
    b->p = malloc(size);
    CHECK(b->p != NULL, "%s: malloc(%zu) returned NULL", who, size);
    b->size = size;
    b->tag = fmt_next(r);
    fmt_fill(b->p, 0, size, b->tag);
}

static void free_block(blk *b, const char *who)
{
    CHECK_PATTERN(b->p, 0, b->size, b->tag, who);
    free(b->p);
    b->p = NULL;
}

static void *thread_main(void *arg)
{
    job *j = arg;
    fmt_rng r = {j->seed};
    blk mine[200];
    int n;
    switch (j->kind) {
    case FIRST_MALLOC:
        new_block(&j->handed[0], pick_size(&r), &r, "first-malloc thread");
        j->nhanded = 1;
        return NULL; /* no free at all: the thread's cache holds whatever its first malloc fetched */
    case FREE_ALL:
        for (int i = 0; i < j->ngiven; i++)
            free_block(&j->given[i], "block from main freed by a free-all thread");
        n = 20 + (int)fmt_below(&r, 180);
        for (int i = 0; i < n; i++)
            new_block(&mine[i], pick_size(&r), &r, "free-all thread");
        for (int i = 0; i < n; i += 3) {
            CHECK_PATTERN(mine[i].p, 0, mine[i].size, mine[i].tag, "free-all block before realloc");
            size_t m = pick_size(&r);
            unsigned char *q = realloc(mine[i].p, m);
            CHECK(q != NULL, "free-all thread: realloc to %zu failed", m);
            CHECK_PATTERN(q, 0, m < mine[i].size ? m : mine[i].size, mine[i].tag, "free-all block after realloc");
            fmt_fill(q, 0, m, mine[i].tag);
            mine[i].p = q;
            mine[i].size = m;
        }
        for (int i = 0; i < n; i++)
            free_block(&mine[i], "free-all thread's own block");
        return NULL;
    case HAND_OFF:
        n = 10 + (int)fmt_below(&r, 2 * HANDED - 10);
        for (int i = 0; i < n; i++)
            new_block(&mine[i], pick_size(&r), &r, "hand-off thread");
        for (int i = 0; i < n; i++) {
            if (j->nhanded < HANDED && fmt_below(&r, 2))
                j->handed[j->nhanded++] = mine[i];
            else
                free_block(&mine[i], "hand-off thread's own block");
        }
        return NULL;
    default: /* CHURN */
        for (int i = 0; i < j->ngiven; i++)
            free_block(&j->given[i], "block from main freed by a churn thread");
        {
            size_t sz = 16 * (1 + fmt_below(&r, 64));
            for (int round = 0; round < 10; round++) {
                for (int i = 0; i < 100; i++)
                    new_block(&mine[i], sz, &r, "churn thread");
                for (int i = 0; i < 100; i++) {
                    if (round == 9 && i < 8)
                        j->handed[j->nhanded++] = mine[i];
                    else
                        free_block(&mine[i], "churn thread's own block");
                }
            }
        }
        return NULL;
    }
}

static size_t in_use(void)
{
    return mallinfo2().uordblks;
}

/* A short thread, as mimalloc-bench's mleak starts them by the thousand: one block, freed. */
static void *short_main(void *arg)
{
    unsigned char *p = calloc(16, 8);
    CHECK(p != NULL && p[127] == 0, "calloc(16, 8) in a short thread");
    p[0] = (unsigned char)(uintptr_t)arg;
    free(p);
    return NULL;
}

static long faults(void)
{
    struct rusage u;
    CHECK(getrusage(RUSAGE_SELF, &u) == 0, "getrusage");
    return u.ru_minflt + u.ru_majflt;
}

/* Waves of SHORT_WAVE short threads (within flatmalloc's FM_WARM_SLOTS): after the first, a wave
 * takes the caches the last one left, pages and all, and faults none in (glibc reuses the
 * stacks): fewer page faults over SHORT_WAVES waves than one per SHORT_WAVE threads. */
#define SHORT_WAVES 20
#define SHORT_WAVE 40
static void short_threads(pthread_attr_t *attr)
{
    pthread_t tid[SHORT_WAVE];
    long before = 0;
    for (int w = 0; w <= SHORT_WAVES; w++) {
        if (w == 1)
            before = faults();
        for (int i = 0; i < SHORT_WAVE; i++)
            CHECK(pthread_create(&tid[i], attr, short_main, (void *)(uintptr_t)i) == 0, "pthread_create (short)");
        for (int i = 0; i < SHORT_WAVE; i++)
            CHECK(pthread_join(tid[i], NULL) == 0, "pthread_join (short)");
    }
    long n = faults() - before;
    printf("threads: %d waves of %d short threads after the first: %ld page faults\n", SHORT_WAVES, SHORT_WAVE, n);
    if (fmt_flatmalloc)
        CHECK(n < SHORT_WAVES, "%d waves of %d short threads, each one calloc and free, took %ld page faults: the "
              "exited threads' caches did not keep their pages for the next", SHORT_WAVES, SHORT_WAVE, n);
}

static size_t rss_bytes(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    CHECK(f != NULL, "cannot open /proc/self/statm");
    unsigned long size, resident;
    CHECK(fscanf(f, "%lu %lu", &size, &resident) == 2, "cannot parse /proc/self/statm");
    fclose(f);
    return resident * (size_t)sysconf(_SC_PAGESIZE);
}

int main(int argc, char **argv)
{
    int a = 1 + fmt_init("threads", argc, argv);
    uint64_t seed = argc > a ? strtoull(argv[a], NULL, 0) : 0x7a5e;
    printf("threads: %d threads in waves of %d, seed %#llx\n", WAVES * WAVE, WAVE, (unsigned long long)seed);
    fmt_rng r = {seed};
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, 256 * KiB); /* small stacks: libc caches all 50 between waves */
    pthread_t tid[WAVE];
    long per_kind[KINDS] = {0};
    size_t base = 0, rss10 = 0, arena10 = 0, worst = 0;
    /* glibc counts its own thread caches as in use; flatmalloc counts only blocks handed out */
    size_t noise = fmt_flatmalloc ? 16 * KiB : 2 * MiB;

    for (int w = 0; w < WAVES; w++) {
        for (int i = 0; i < WAVE; i++) {
            job *j = &jobs[i];
            memset(j, 0, sizeof *j);
            j->index = w * WAVE + i;
            j->kind = (enum kind)fmt_below(&r, KINDS);
            j->seed = fmt_next(&r);
            per_kind[j->kind]++;
            if (j->kind == FREE_ALL || j->kind == CHURN) {
                j->ngiven = 1 + (int)fmt_below(&r, GIVEN);
                for (int k = 0; k < j->ngiven; k++)
                    new_block(&j->given[k], pick_size(&r), &r, "main (block for a thread)");
            }
        }
        for (int i = 0; i < WAVE; i++)
            CHECK(pthread_create(&tid[i], &attr, thread_main, &jobs[i]) == 0, "pthread_create failed in wave %d", w);
        for (int i = 0; i < WAVE; i++)
            CHECK(pthread_join(tid[i], NULL) == 0, "pthread_join failed in wave %d", w);
        for (int i = 0; i < WAVE; i++)
            for (int k = 0; k < jobs[i].nhanded; k++)
                free_block(&jobs[i].handed[k], kind_name[jobs[i].kind]);

        size_t now = in_use();
        if (w == 0) {
            base = now;
            continue;
        }
        size_t d = now > base ? now - base : base - now;
        if (d > worst)
            worst = d;
        CHECK(d <= noise, "after wave %d (%d threads exited, every block freed) mallinfo2().uordblks is %zu, "
              "%+zd bytes from the %zu measured after the warm-up wave", w, (w + 1) * WAVE, now,
              (ssize_t)(now - base), base);
        if (w == 10) {
            rss10 = rss_bytes();
            arena10 = mallinfo2().arena;
        }
    }
    size_t rss_end = rss_bytes(), arena_end = mallinfo2().arena;
    printf("threads: kinds: %ld first-malloc, %ld free-all, %ld hand-off, %ld churn\n", per_kind[0], per_kind[1],
           per_kind[2], per_kind[3]);
    printf("threads: uordblks %zu after warm-up, worst deviation %zu bytes over %d waves\n", base, worst, WAVES - 1);
    printf("threads: resident %zu KiB after wave 10, %zu KiB after wave %d; mallinfo2().arena %zu -> %zu\n",
           rss10 / KiB, rss_end / KiB, WAVES - 1, arena10, arena_end);
    /* 90 waves of 50 threads: memory they cached and never gave back would grow by megabytes per
     * wave. A fixed allowance covers page-level noise. */
    CHECK(rss_end <= rss10 + 64 * MiB, "resident size grew from %zu KiB after wave 10 to %zu KiB after wave %d: "
          "exited threads' memory is not reused", rss10 / KiB, rss_end / KiB, WAVES - 1);
    if (fmt_flatmalloc)
        CHECK(arena_end <= arena10 + 64 * MiB, "mallinfo2().arena grew from %zu after wave 10 to %zu after wave %d",
              arena10, arena_end, WAVES - 1);
    short_threads(&attr);
    int (*heap_check)(void) = (int (*)(void))fmt_sym("flatmalloc_heap_check");
    if (heap_check) {
        int faults = heap_check();
        CHECK(faults == 0, "flatmalloc_heap_check() found %d faults after all threads exited", faults);
        puts("threads: flatmalloc_heap_check() == 0");
    }
    puts("threads: all checks passed");
    return 0;
}
