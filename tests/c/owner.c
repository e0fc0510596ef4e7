/* owner: the middle layer's promises about who owns a block.
 *
 *   remote     blocks one thread allocates and another frees go home to their owner: contents
 *              intact, none handed out twice, and once the owner asks (mallinfo2), in use is
 *              back where it started
 *   orphans    blocks whose owner thread has exited, freed by another thread, are free again
 *   race       two threads free one block at the same instant, then each mallocs once, in 1,000
 *              processes: the block is never handed to both (each process either stops with
 *              "double free" or gets two different blocks); the block owned by one of the two,
 *              and by a third thread
 *   overflow   1, 8 and 1,984 bytes of 0x00 past every block of a class (a terminating NUL and
 *              longer): no malloc then returns a block the program holds; 0x01 bytes, then a
 *              real double free, still stop with "double free" (in checking mode the damaged
 *              canary may stop it first)
 *   uncached   (run with FLATMALLOC_POOL=64M: 16 slots) 40 threads at once, most without a cache
 *              of their own, allocate, exchange and free blocks: contents intact, no stop
 *   budget     200 threads (and main), each having allocated and freed 400 blocks of 16 B - 4 KiB
 *              while all were live, then idle: their caches hold at most 16 MiB shared out
 *              (64 KiB at the least each); after they exit, next to nothing
 *
 * Every case checks block contents where it keeps blocks. `--libc` runs the cases glibc also
 * passes (remote, orphans). */
#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "fmtest.h"

#define KiB 1024u
#define MiB (1024u * KiB)

typedef struct {
    void *p;
    size_t size;
    uint64_t tag;
} block;

static size_t in_use(void)
{
    struct mallinfo2 m = mallinfo2();
    return m.uordblks;
}

/* ---- remote ----------------------------------------------------------------------------- */
#define NREMOTE 20000
static block rb[NREMOTE];
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
    size_t base = in_use();
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
        size_t now = in_use();
        if (fmt_flatmalloc)
            CHECK(now == base, "round %d: in use %zu after the other thread freed everything, %zu before", round,
                  now, base);
    }
    printf("ok  remote: blocks freed by another thread go home, in use back to its start\n");
}

/* ---- orphans ---------------------------------------------------------------------------- */
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
    size_t base = in_use();
    for (int round = 0; round < 5; round++) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, alloc_and_exit, NULL) == 0, "pthread_create");
        CHECK(pthread_join(t, NULL) == 0, "pthread_join");
        for (int i = 0; i < NREMOTE; i++) {
            CHECK_PATTERN(rb[i].p, 0, rb[i].size, rb[i].tag, "its thread exited");
            free(rb[i].p);
        }
        size_t now = in_use();
        if (fmt_flatmalloc)
            CHECK(now <= base, "round %d: in use %zu after freeing an exited thread's blocks, %zu before", round, now,
                  base);
    }
    printf("ok  orphans: an exited thread's blocks, freed by another, are free again\n");
}

/* ---- race ------------------------------------------------------------------------------- */
static void *volatile race_block;
static void *race_got[2];
static pthread_barrier_t race_bar;

static void *race_thread(void *arg)
{
    int me = (int)(intptr_t)arg;
    free(malloc(64));   /* both threads running and set up before the race, none reusing the other's slot */
    if (me == 0 && !race_block)
        race_block = malloc(64);   /* owned by this thread */
    pthread_barrier_wait(&race_bar);
    free(race_block);
    race_got[me] = malloc(64);
    return NULL;
}

/* One process: 0 when the two mallocs returned different blocks, 2 when the same. */
static int race_once(bool owned_by_racer)
{
    race_block = owned_by_racer ? NULL : malloc(64);
    pthread_barrier_init(&race_bar, NULL, 2);
    pthread_t t[2];
    pthread_create(&t[0], NULL, race_thread, (void *)0);
    pthread_create(&t[1], NULL, race_thread, (void *)1);
    pthread_join(t[0], NULL);
    pthread_join(t[1], NULL);
    return race_got[0] && race_got[0] == race_got[1] ? 2 : 0;
}

/* Runs child(a, b) in a forked process with its stderr captured into msg; returns its wait
 * status. */
static int in_child(int (*child)(int, int), int a, int b, char *msg, size_t cap)
{
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fds[1], 2);
        _exit(child(a, b));
    }
    close(fds[1]);
    memset(msg, 0, cap);
    ssize_t n = read(fds[0], msg, cap - 1), m;
    while (n > 0 && (m = read(fds[0], msg + n, cap - 1 - (size_t)n)) > 0)
        n += m;
    close(fds[0]);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    return st;
}

static int race_child(int owned, int unused)
{
    (void)unused;
    return race_once(owned);
}

static void case_race(int procs)
{
    for (int owned = 0; owned < 2; owned++) {
        int stopped = 0, clean = 0;
        for (int i = 0; i < procs; i++) {
            char msg[512];
            int st = in_child(race_child, owned, 0, msg, sizeof msg);
            if (WIFSIGNALED(st)) {
                CHECK(WTERMSIG(st) == SIGABRT, "process %d died of signal %d", i, WTERMSIG(st));
                CHECK(strstr(msg, "double free"), "process %d stopped with: %s", i, msg);
                stopped++;
            } else {
                CHECK(WEXITSTATUS(st) != 2, "process %d: both threads got block %p from malloc after freeing it at once",
                      i, race_got[0]);
                CHECK(WEXITSTATUS(st) == 0, "process %d exited with %d: %s", i, WEXITSTATUS(st), msg);
                clean++;
            }
        }
        printf("ok  race (%s): %d processes, %d stopped with \"double free\", %d got two different blocks\n",
               owned ? "block owned by one of the two" : "block owned by a third thread", procs, stopped, clean);
    }
}

/* ---- overflow --------------------------------------------------------------------------- */
/* In a child: fill with blocks of `size`, write `len` bytes of `byte` past every one of them,
 * then malloc as many again: none may be a block still held. */
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
    for (int i = 1; i < N; i += 2)
        memset(held[i] + malloc_usable_size(held[i]), byte, len);   /* over neighbours, held or not */
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
            int st = in_child(overflow_case, (int)s, (int)l, msg, sizeof msg);
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

/* ---- uncached -------------------------------------------------------------------------- */
#define NUNC 40
static pthread_barrier_t unc_bar;
static block unc[NUNC][64];

static void *uncached_thread(void *arg)
{
    int me = (int)(intptr_t)arg;
    fmt_rng r = {(uint64_t)me * 1000003 + 7};
    for (int i = 0; i < 64; i++) {
        block *b = &unc[me][i];
        b->size = 1 + fmt_below(&r, 3000);
        b->tag = fmt_next(&r);
        CHECK(b->p = malloc(b->size), "malloc(%zu)", b->size);
        fmt_fill(b->p, 0, b->size, b->tag);
    }
    pthread_barrier_wait(&unc_bar);   /* all hold blocks at once: more threads than slots */
    block *theirs = unc[(me + 1) % NUNC];
    for (int i = 0; i < 64; i++) {
        CHECK_PATTERN(theirs[i].p, 0, theirs[i].size, theirs[i].tag, "allocated by another thread");
        free(theirs[i].p);
    }
    return NULL;
}

static void case_uncached(void)
{
    pthread_t t[NUNC];
    pthread_barrier_init(&unc_bar, NULL, NUNC);
    for (int i = 0; i < NUNC; i++)
        CHECK(pthread_create(&t[i], NULL, uncached_thread, (void *)(intptr_t)i) == 0, "pthread_create %d", i);
    for (int i = 0; i < NUNC; i++)
        pthread_join(t[i], NULL);
    printf("ok  uncached: %d threads at once, blocks made and freed by threads with and without a cache\n", NUNC);
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

static size_t json_cached(void)
{
    size_t (*json)(char *, size_t) = (size_t(*)(char *, size_t))fmt_sym("flatmalloc_stats_json");
    static char buf[64 * KiB];
    CHECK(json, "flatmalloc_stats_json not found");
    json(buf, sizeof buf);
    char *c = strstr(buf, "\"cached\":");
    CHECK(c, "no \"cached\" in the statistics: %.200s", buf);
    return strtoull(c + 9, NULL, 10);
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
    size_t cached = json_cached(), live = NIDLE + 1, share = 16 * MiB / live;
    size_t bound = live * (share > 64 * KiB ? share : 64 * KiB);
    CHECK(cached <= bound, "%d idle threads hold %zu bytes in their caches, more than %zu", NIDLE, cached, bound);
    pthread_barrier_wait(&leave);
    for (int i = 0; i < NIDLE; i++)
        pthread_join(t[i], NULL);
    size_t after = json_cached();
    CHECK(after <= 2 * MiB, "after the threads exited the caches hold %zu bytes", after);
    printf("ok  budget: %d idle threads cache %zu bytes (bound %zu); %zu after they exit\n", NIDLE, cached, bound,
           after);
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
    if (!only || !strcmp(only, "race"))
        case_race(argc > a + 1 ? atoi(argv[a + 1]) : 1000);
    if (!only || !strcmp(only, "overflow"))
        case_overflow();
    if (only && !strcmp(only, "uncached"))
        case_uncached();
    if (!only || !strcmp(only, "budget"))
        case_budget();
    return 0;
}
