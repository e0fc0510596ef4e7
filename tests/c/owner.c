/* owner: the middle layer's promises about who owns a block.
 *
 *   remote     blocks one thread allocates and another frees go home to their owner: contents
 *              intact, none handed out twice, and once the owner asks (mallinfo2), in use is
 *              back where it started
 *   orphans    blocks whose owner thread has exited, freed by another thread, are free again,
 *              back in their spans (the freeing thread's cache holds no more than before)
 *   race       two threads free one block at the same instant, then each mallocs once, in 1,000
 *              processes: the block is never handed to both (each process either stops with
 *              "double free" or "double free (by two threads at once)", or gets two different
 *              blocks); the block owned by one of the two, and by a third thread; with tags, and
 *              with 250 other threads holding every tag; both frees come before either malloc
 *              (see race_once; "race-nowait" shows the difference)
 *   overflow   1, 8 and 1,984 bytes of 0x00 past every block of a class (a terminating NUL and
 *              longer): no malloc then returns a block the program holds; 0x01 bytes, then a
 *              real double free, still stop with "double free" (in checking mode the damaged
 *              canary may stop it first)
 *   uncached   320 threads at once allocate, exchange and free blocks: each holds a cache, 250
 *              of them a tag, the others none (statistics say so); contents intact, no stop
 *   budget     200 threads (and main), each having allocated and freed 400 blocks of 16 B - 4 KiB
 *              while all were live, then idle: their caches hold 64 KiB each at most (a new
 *              thread's 32 KiB, doubled once by demand), main 2 MiB; after they exit, next to
 *              nothing
 *   bins       a thread frees 600 blocks of 32 B in a row once: its cache keeps two batches (64);
 *              after 40 rounds of allocating and freeing them it keeps all 600 (statistics) and
 *              its next 600 mallocs hand out those blocks; rounds of 3,000: it keeps 512-1,024
 *
 * Every case checks block contents where it keeps blocks. `--libc` runs the cases glibc also
 * passes (remote, orphans). */
#include <malloc.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/wait.h>

#include "fmtest.h"

#define KiB 1024u
#define MiB (1024u * KiB)


/* ---- remote ----------------------------------------------------------------------------- */
#define NREMOTE 20000
static fmt_blk rb[NREMOTE];
static int nrb;

/* rb[0..NREMOTE) filled with blocks of 1-2048 B, each holding its tag's pattern. */
static void fill_rb(uint64_t seed)
{
    fmt_rng r = {seed};
    for (int i = 0; i < NREMOTE; i++) {
        rb[i].size = 1 + fmt_below(&r, 2048);
        rb[i].tag = fmt_next(&r);
        rb[i].p = malloc(rb[i].size);
        CHECK(rb[i].p, "malloc(%zu) failed", rb[i].size);
        fmt_fill(rb[i].p, 0, rb[i].size, rb[i].tag);
    }
    nrb = NREMOTE;
}

static void *remote_free_all(void *arg)
{
    (void)arg;
    for (int i = 0; i < nrb; i++) {
        CHECK_PATTERN(rb[i].p, 0, rb[i].size, rb[i].tag, "freed by another thread");
        free(rb[i].p);
    }
    return NULL;
}

static void case_remote(void)
{
    pthread_t w;   /* the first thread makes libc keep a few blocks of its own: not counted */
    CHECK(pthread_create(&w, NULL, remote_free_all, NULL) == 0 && pthread_join(w, NULL) == 0, "warm-up thread");
    size_t base = fmt_in_use();
    for (int round = 0; round < 5; round++) {
        fill_rb(0x7e307e + (uint64_t)round);
        pthread_t t;
        CHECK(pthread_create(&t, NULL, remote_free_all, NULL) == 0, "pthread_create");
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
        /* the owner takes them home: allocate again, all distinct, none overlapping a kept one */
        void *keep[256];
        for (int i = 0; i < 256; i++) {
            keep[i] = malloc(64);
            CHECK(keep[i], "malloc(64) after remote frees failed");
            memset(keep[i], 0xa5, 64);
            for (int j = 0; j < i; j++)
                CHECK(keep[j] != keep[i], "malloc returned %p twice", keep[i]);
        }
        for (int i = 0; i < 256; i++) {
            for (int k = 0; k < 64; k++)
                CHECK(((uint8_t *)keep[i])[k] == 0xa5, "block %p was damaged", keep[i]);
            free(keep[i]);
        }
        size_t now = fmt_in_use();
        if (fmt_flatmalloc)
            CHECK(now == base, "round %d: in use %zu after the other thread freed everything, %zu before", round,
                  now, base);
    }
    printf("ok  remote: blocks freed by another thread go home, in use back to its start\n");
}

/* ---- orphans ---------------------------------------------------------------------------- */
static size_t json_cached(void)
{
    return fmt_stat("\"cached\":");
}

static void *alloc_and_exit(void *arg)
{
    (void)arg;
    fill_rb(0x0f0f);
    return NULL;
}

static void case_orphans(void)
{
    nrb = 0;
    pthread_t w;   /* the first thread makes libc keep a few blocks of its own: not counted */
    CHECK(pthread_create(&w, NULL, remote_free_all, NULL) == 0 && pthread_join(w, NULL) == 0, "warm-up thread");
    size_t base = fmt_in_use();
    for (int round = 0; round < 5; round++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, alloc_and_exit, NULL) == 0, "pthread_create");
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
        size_t cached = fmt_flatmalloc ? json_cached() : 0;
        for (int i = 0; i < NREMOTE; i++) {
            CHECK_PATTERN(rb[i].p, 0, rb[i].size, rb[i].tag, "its thread exited");
            free(rb[i].p);
        }
        size_t now = fmt_in_use();
        if (fmt_flatmalloc)
            CHECK(now <= base, "round %d: in use %zu after freeing an exited thread's blocks, %zu before", round, now,
                  base);
        if (fmt_flatmalloc)   /* they went back to their spans, not into this thread's cache */
            CHECK(json_cached() <= cached, "round %d: thread caches hold %zu B after freeing an exited thread's blocks, %zu before",
                  round, (size_t)json_cached(), cached);
    }
    printf("ok  orphans: an exited thread's blocks, freed by another, are free again\n");
}

/* ---- race ------------------------------------------------------------------------------- */
static void *volatile race_block;
static void *race_got[2];
static pthread_barrier_t race_bar, race_freed;
static bool race_wait;   /* both frees before either malloc */

static void *race_thread(void *arg)
{
    int me = (int)(intptr_t)arg;
    free(malloc(64));   /* both threads running and set up before the race, none reusing the other's slot */
    if (me == 0 && !race_block)
        race_block = malloc(64);   /* owned by this thread */
    pthread_barrier_wait(&race_bar);
    free(race_block);
    if (race_wait)
        pthread_barrier_wait(&race_freed);   /* (a free that stops the program never returns) */
    race_got[me] = malloc(64);
    return NULL;
}

static void *race_third(void *arg)
{
    race_block = malloc(64);
    return arg;
}

/* One process: 0 when the two mallocs returned different blocks, 2 when the same. The block's
 * owner: main (a third thread, with a tag), or racer 0; with untagged, 250 threads hold every
 * tag first, so the racers (and the third thread, which makes the block and exits) have none.
 * Both frees come before either malloc: a racer whose malloc returns before the other's free
 * has loaded the block's state may be handed the block again, and the other's free is then one
 * of that new allocation, which no allocator tells from a free by its new holder (free, malloc,
 * free in one thread). Without tags the first free puts the block in the freeing thread's
 * cache, whose next malloc hands it out; with tags the owner's does, and its thread may exit
 * before the other frees it, whose next malloc then takes the block back (a tag no thread
 * holds leaves its blocks with whoever frees them). nowait ("race-nowait", not run by default)
 * shows it: both get the block (issue 31; with tags a few processes in a thousand in checking
 * mode, whose every malloc sends the thread's outbox first). */
static int race_once(bool owned_by_racer, bool untagged, bool nowait)
{
    race_wait = !nowait;
    pthread_barrier_init(&race_freed, NULL, 2);
    if (untagged) {
        fmt_hold_tags(FM_TAGS);
        CHECK(WITH_TAG() == FM_TAGS, "%llu tags held", (unsigned long long)WITH_TAG());
    }
    race_block = NULL;
    if (!owned_by_racer) {
        if (untagged)
            fmt_join(fmt_thread(race_third, NULL, 64 * KiB));
        else
            race_block = malloc(64);
    }
    pthread_barrier_init(&race_bar, NULL, 2);
    pthread_t t[2];
    pthread_create(&t[0], NULL, race_thread, (void *)0);
    pthread_create(&t[1], NULL, race_thread, (void *)1);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    if (untagged)
        CHECK(WITH_TAG() == FM_TAGS, "%llu tags held after the race: a racer had one", (unsigned long long)WITH_TAG());
    if (race_got[0] && race_got[0] == race_got[1]) {
        fprintf(stderr, "block %p handed to both\n", race_got[0]);
        return 2;
    }
    return 0;
}

static int race_child(int owned, int how)
{
    return race_once(owned, how & 1, how & 2);
}

static void case_race(int procs, bool nowait)
{
    for (int v = 0; v < 4; v++) {
        int owned = v & 1, untagged = v >> 1, stopped = 0, clean = 0;
        for (int i = 0; i < procs; i++) {
            char msg[512];
            int st = fmt_in_child(race_child, owned, untagged | nowait << 1, msg, sizeof msg);
            if (WIFSIGNALED(st)) {
                CHECK(WTERMSIG(st) == SIGABRT, "process %d died of signal %d", i, WTERMSIG(st));
                CHECK(strstr(msg, "flatmalloc: double free: pointer ") ||
                          strstr(msg, "flatmalloc: double free (by two threads at once): pointer "),
                      "process %d stopped with: %s", i, msg);
                stopped++;
            } else {
                CHECK(WEXITSTATUS(st) != 2, "process %d: both threads got the block from malloc after freeing it at once: %s",
                      i, msg);
                CHECK(WEXITSTATUS(st) == 0, "process %d exited with %d: %s", i, WEXITSTATUS(st), msg);
                clean++;
            }
        }
        printf("ok  race (%s, %s, %s): %d processes, %d stopped with \"double free\", %d got two different blocks\n",
               owned ? "block owned by one of the two" : "block owned by a third thread",
               untagged ? "without tags" : "with tags", nowait ? "each mallocs after its own free" : "both frees first", procs,
               stopped, clean);
    }
}

/* ---- overflow --------------------------------------------------------------------------- */
/* In a child: fill with blocks of `size`, write `len` bytes of `byte` past every one of them,
 * then malloc as many again: none may be a block still held. A write past the heap's highest
 * block may reach memory the pool has not opened yet, where nothing of the allocator's lies:
 * that one faults and is skipped (the handler is on for those writes only). */
static sigjmp_buf past_top;
static void past_top_fault(int sig)
{
    (void)sig;
    siglongjmp(past_top, 1);
}

static int overflow_child(size_t size, size_t len, uint8_t byte, bool double_free)
{
    enum { N = 3000 };
    static uint8_t *held[N];
    for (int i = 0; i < N; i++)
        CHECK(held[i] = malloc(size), "malloc(%zu)", size);
    /* the gap of len bytes after each block, kept out of the held set: every other block */
    for (int i = 0; i < N; i += 2) {
        free(held[i]);
        held[i] = NULL;
    }
    struct sigaction sa = {.sa_handler = past_top_fault}, old;
    CHECK(sigaction(SIGSEGV, &sa, &old) == 0, "sigaction");
    for (volatile int i = 1; i < N; i += 2)
        if (sigsetjmp(past_top, 1) == 0)
            memset(held[i] + malloc_usable_size(held[i]), byte, len);   /* over neighbours, held or not */
    CHECK(sigaction(SIGSEGV, &old, NULL) == 0, "sigaction");
    if (double_free) {
        free(held[1]);
        free(held[1]);
        return 3;   /* not stopped */
    }
    for (int k = 0; k < N; k++) {
        uint8_t *p = malloc(size);
        CHECK(p, "malloc(%zu)", size);
        for (int i = 1; i < N; i += 2)
            if (p == held[i])
                return 2;
    }
    return 0;
}

/* up to 512 B the states sit in the shadow; from 1 KiB (16 KiB chunks) in the chunks' lines */
static const size_t sizes[] = {16, 32, 48, 64, 96, 128, 160, 256, 320, 336, 384, 512, 1024, 2048, 4096};
static const size_t lens[] = {1, 8, 1984};

/* Size s, overflow l (3: 0x01 bytes, then a double free). */
static int overflow_case(int s, int l)
{
    bool df = l == 3;
    return overflow_child(sizes[s], df ? 8 : lens[l], df ? 1 : 0, df);
}

static void case_overflow(void)
{
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
        for (size_t l = 0; l < 4; l++) {
            bool df = l == 3;
            char msg[512];
            int st = fmt_in_child(overflow_case, (int)s, (int)l, msg, sizeof msg);
            if (df) {
                /* checking mode finds the canary damaged first: stopped as well */
                CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT &&
                          (strstr(msg, "double free") || strstr(msg, "write past the end of a block")),
                      "%zu B: 0x01 written past blocks, then a double free was not stopped as one (status %#x: %s)",
                      sizes[s], st, msg);
            } else {
                CHECK(!(WIFEXITED(st) && WEXITSTATUS(st) == 2),
                      "%zu B: %zu bytes of 0x00 past blocks made malloc return a block the program holds", sizes[s],
                      lens[l]);
                CHECK((WIFEXITED(st) && WEXITSTATUS(st) == 0) ||
                          (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT && strstr(msg, "flatmalloc")),
                      "%zu B, %zu bytes: status %#x: %s", sizes[s], lens[l], st, msg);
            }
        }
    printf("ok  overflow: 1, 8 and 1984 bytes of 0x00 past blocks of 16 B-4 KiB hand out no held block; "
           "0x01 then a double free stops\n");
}

/* ---- uncached ------------------------------------------------------------------------- */
#define NUNC 320
static pthread_barrier_t unc_bar, unc_counted;
static fmt_blk unc[NUNC][32];

static void *uncached_thread(void *arg)
{
    int me = (int)(intptr_t)arg;
    fmt_rng r = {(uint64_t)me * 1000003 + 7};
    for (int i = 0; i < 32; i++)
        fmt_blk_new(&unc[me][i], 1 + fmt_below(&r, 3000), fmt_next(&r), "uncached");
    pthread_barrier_wait(&unc_bar);   /* all hold blocks at once: more threads than tags */
    pthread_barrier_wait(&unc_counted);
    for (int i = 0; i < 32; i++)
        fmt_blk_free(&unc[(me + 1) % NUNC][i], "allocated by another thread");
    return NULL;
}

static void case_uncached(void)
{
    pthread_t t[NUNC];
    pthread_barrier_init(&unc_bar, NULL, NUNC + 1);
    pthread_barrier_init(&unc_counted, NULL, NUNC + 1);
    uint64_t caches0 = fmt_stat("\"with_cache\":");
    for (int i = 0; i < NUNC; i++)
        t[i] = fmt_thread(uncached_thread, (void *)(intptr_t)i, 64 * KiB);
    pthread_barrier_wait(&unc_bar);
    uint64_t caches = fmt_stat("\"with_cache\":"), tags = WITH_TAG();
    CHECK(caches >= caches0 + NUNC && tags == FM_TAGS, "%d threads alive: with_cache=%llu (%llu before), with_tag=%llu "
          "(expected every one of the %d tags held)", NUNC, (unsigned long long)caches, (unsigned long long)caches0,
          (unsigned long long)tags, FM_TAGS);
    pthread_barrier_wait(&unc_counted);
    for (int i = 0; i < NUNC; i++)
        fmt_join(t[i]);
    printf("ok  uncached: %d threads at once, each with a cache, %llu with a tag, exchanged and freed blocks\n", NUNC,
           (unsigned long long)tags);
}

/* ---- budget ----------------------------------------------------------------------------- */
#define NIDLE 200
static pthread_barrier_t created, done, leave;

static void *idle_thread(void *arg)
{
    fmt_rng r = {(uint64_t)(uintptr_t)arg * 77 + 1};
    free(malloc(1));   /* a cache of its own before the others start: all count as live */
    pthread_barrier_wait(&created);
    void *v[400];
    for (int i = 0; i < 400; i++) {
        size_t size = 16u << fmt_below(&r, 9);
        size += fmt_below(&r, size);
        if (size > 4096)
            size = 4096;
        CHECK(v[i] = malloc(size), "malloc(%zu)", size);
        memset(v[i], i, size);
    }
    for (int i = 0; i < 400; i++)
        free(v[i]);
    pthread_barrier_wait(&done);
    pthread_barrier_wait(&leave);
    return NULL;
}

static void case_budget(void)
{
    pthread_t t[NIDLE];
    pthread_attr_t a;
    pthread_attr_init(&a);
    pthread_attr_setstacksize(&a, 128 * KiB);
    pthread_barrier_init(&created, NULL, NIDLE + 1);
    pthread_barrier_init(&done, NULL, NIDLE + 1);
    pthread_barrier_init(&leave, NULL, NIDLE + 1);
    for (int i = 0; i < NIDLE; i++)
        CHECK(pthread_create(&t[i], &a, idle_thread, (void *)(intptr_t)i) == 0, "pthread_create %d", i);
    pthread_barrier_wait(&created);
    pthread_barrier_wait(&done);
    /* a new thread's cache may hold 32 KiB and doubles that each 256 times its bins could not
     * grow: 400 allocations double it once at most. Main may keep what it earned in the cases
     * before (2 MiB at most). */
    size_t cached = json_cached(), bound = NIDLE * 64 * KiB + 2 * MiB;
    CHECK(cached <= bound, "%d idle threads hold %zu bytes in their caches, more than %zu", NIDLE, cached, bound);
    pthread_barrier_wait(&leave);
    for (int i = 0; i < NIDLE; i++)
        pthread_join(t[i], NULL);
    size_t after = json_cached();
    CHECK(after <= 2 * MiB, "after the threads exited the caches hold %zu bytes", after);
    printf("ok  budget: %d idle threads cache %zu bytes (bound %zu); %zu after they exit\n", NIDLE, cached, bound,
           after);
}

/* ---- bins ------------------------------------------------------------------------------- */
#define NBIN 600
#define NBIN_ALL 3000
static pthread_barrier_t bin_step;
static fmt_blk binb[NBIN_ALL];

static void bins_alloc(int from, int to, uint64_t seed)
{
    fmt_rng r = {seed};
    for (int i = from; i < to; i++) {
        binb[i] = (fmt_blk){malloc(32), 32, fmt_next(&r)};
        CHECK(binb[i].p, "malloc(32)");
        fmt_fill(binb[i].p, 0, 32, binb[i].tag);
    }
}

static void bins_free(int n)
{
    for (int i = 0; i < n; i++) {
        CHECK_PATTERN(binb[i].p, 0, 32, binb[i].tag, "bins");
        free(binb[i].p);
    }
}

static void bins_rounds(int n, int rounds)
{
    for (int k = 0; k < rounds; k++) {
        bins_alloc(0, n, 10 + k);
        bins_free(n);
    }
}

static void *bins_thread(void *arg)
{
    (void)arg;
    pthread_barrier_wait(&bin_step);   /* main reads the statistics first */
    bins_rounds(NBIN, 1);              /* one run of frees: the bin keeps two batches */
    pthread_barrier_wait(&bin_step);
    pthread_barrier_wait(&bin_step);
    bins_rounds(NBIN, 40);             /* the same blocks taken back again and again: it grows */
    void *last[NBIN];
    for (int i = 0; i < NBIN; i++)
        last[i] = binb[i].p;
    pthread_barrier_wait(&bin_step);
    pthread_barrier_wait(&bin_step);
    bins_alloc(0, NBIN, 2);            /* the same blocks again, from the thread's own bin */
    for (int i = 0; i < NBIN; i++) {
        int found = 0;
        for (int j = 0; j < NBIN && !found; j++)
            found = binb[i].p == last[j];
        CHECK(found, "block %d of the next round (%p) is not one the thread freed", i, binb[i].p);
    }
    bins_free(NBIN);
    bins_rounds(NBIN_ALL, 40);
    pthread_barrier_wait(&bin_step);
    pthread_barrier_wait(&bin_step);
    return NULL;
}

static void case_bins(void)
{
    pthread_barrier_init(&bin_step, NULL, 2);
    pthread_t t = fmt_thread(bins_thread, NULL, 256 * KiB);
    size_t c0 = json_cached();
    pthread_barrier_wait(&bin_step);
    pthread_barrier_wait(&bin_step);
    size_t once = json_cached() - c0;
    CHECK(once <= 64 * 32, "after one run of %d frees of 32 B the thread caches %zu bytes, more than two batches",
          NBIN, once);
    pthread_barrier_wait(&bin_step);
    pthread_barrier_wait(&bin_step);
    size_t grown = json_cached() - c0;
    CHECK(grown >= NBIN * 32, "after 40 rounds of %d mallocs and frees of 32 B the thread caches %zu bytes", NBIN,
          grown);
    pthread_barrier_wait(&bin_step);
    pthread_barrier_wait(&bin_step);
    size_t most = json_cached() - c0;
    CHECK(most >= 512 * 32 && most <= 1024 * 32, "after rounds of %d the thread caches %zu bytes, not 16-32 KiB",
          NBIN_ALL, most);
    pthread_barrier_wait(&bin_step);
    pthread_join(t, NULL);
    printf("ok  bins: one run of %d frees of 32 B leaves %zu bytes cached; 40 rounds, %zu (all, and they come "
           "back); rounds of %d, %zu (1,024 blocks at most)\n", NBIN, once, grown, NBIN_ALL, most);
}

int main(int argc, char **argv)
{
    int a = 1 + fmt_init("owner", argc, argv);
    const char *only = argc > a ? argv[a] : NULL;
    if (!only || !strcmp(only, "remote"))
        case_remote();
    if (!only || !strcmp(only, "orphans"))
        case_orphans();
    if (!fmt_flatmalloc)
        return 0;   /* the rest is what only flatmalloc promises */
    if (!only || !strcmp(only, "race") || !strcmp(only, "race-nowait"))
        case_race(argc > a + 1 ? atoi(argv[a + 1]) : 1000, only && !strcmp(only, "race-nowait"));
    if (!only || !strcmp(only, "overflow"))
        case_overflow();
    if (only && !strcmp(only, "uncached"))
        case_uncached();
    if (!only || !strcmp(only, "budget"))
        case_budget();
    if (!only || !strcmp(only, "bins"))
        case_bins();
    return 0;
}
