/* realtime: the real-time profile's promises (FLATMALLOC_PREFAULT=1, docs/realtime.md).
 *
 *   pages      after start-up and mlockall(MCL_CURRENT | MCL_FUTURE), as a real-time program
 *              starts (the line "realtime: start" and a getppid() marker for strace), no
 *              allocation call takes a page fault: fill 64 MiB of 1 KiB blocks, free them, light
 *              calls past the retain delay, fill again, malloc_trim(0), realloc growth and
 *              shrink, large blocks, calloc, arenas, threads that start and exit (on stacks the
 *              test mapped before the marker, so the threads' own set-up maps nothing): each
 *              thread's faults (RUSAGE_THREAD) are counted around its calls and must be 0; no
 *              page went back (statistics' "returned" stays 0) and every block keeps its
 *              contents. realtime.sh also runs it under strace: no memory system call after
 *              the marker.
 *   work       a churn of 16 B - 64 KiB blocks by four threads, one block in eight freed by
 *              another thread: the statistics' most blocks moved by one call ("most_moved") is
 *              at most the stated bound, an outbox of 32 and three batches of 8 (56); contents
 *              checked.
 *   pi         priority inheritance: three SCHED_FIFO threads on one CPU, low allocating and
 *              freeing large blocks (the heap's lock) in a loop, medium spinning 20 ms when woken,
 *              high allocating a large block when medium wakes it (so low was stopped wherever
 *              it was, maybe holding the heap's lock); 60 rounds: high's malloc must every time
 *              return before medium's spin ends (else it waited behind low, kept off the CPU by
 *              medium).
 *   pi-control the same without the real-time profile (plain locks): high waits behind low at
 *              least once, which shows the test can tell (exits 0 when it sees it).
 *   mlock      default settings: after a first malloc, mlockall(MCL_CURRENT | MCL_FUTURE); prints
 *              the resident and locked memory (realtime.sh compares them with glibc's run), then
 *              64 MiB of 1 KiB blocks: the writes into them take no page fault (the memory the
 *              heap takes later is locked, so resident, as it is taken).
 *   ahead      default settings, mlockall(MCL_FUTURE) first: after a first malloc the heap is
 *              open one step beyond the step its first span lies in (the mapping holding the
 *              block, read and write, reaches more than 1 MiB past it), and no further than
 *              that (at most 3 MiB past it).
 *   grow       default settings, no mlockall: 8 MiB of blocks in two threads change no mapping
 *              of the process (/proc/self/maps reads the same; under strict overcommit, where
 *              the heap is opened with mprotect as it grows, it changes), and every block keeps
 *              what was written into it.
 * Needs SCHED_FIFO (root or CAP_SYS_NICE) for pi: it fails, naming it, without. */
#include "fmtest.h"

#include <sched.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <time.h>

static long faults(void)
{
    struct rusage r;
    CHECK(getrusage(RUSAGE_THREAD, &r) == 0, "getrusage: %s", strerror(errno));
    return r.ru_minflt + r.ru_majflt;
}

/* ---- pages ---- */
typedef void *(*arena_create_fn)(size_t);
typedef void *(*arena_alloc_fn)(void *, size_t, size_t);
typedef void (*arena_fn)(void *);
static arena_create_fn arena_create;
static arena_alloc_fn arena_alloc;
static arena_fn arena_reset, arena_destroy;

#define NBLK (64 << 10)   /* 64 MiB of 1 KiB blocks */
static char *blk[NBLK];
static long thread_faults[8];

static void fill(uint64_t tag)
{
    for (size_t i = 0; i < NBLK; i++) {
        blk[i] = malloc(1024);
        CHECK(blk[i], "malloc(1024) #%zu: %s", i, strerror(errno));
        memset(blk[i], (int)(tag + i), 1024);
    }
}

static void drop(uint64_t tag)
{
    for (size_t i = 0; i < NBLK; i++) {
        CHECK(blk[i][0] == (char)(tag + i) && blk[i][1023] == (char)(tag + i), "block %zu lost its contents", i);
        free(blk[i]);
    }
}

static void *pages_thread(void *arg)
{
    long f = faults();
    char *p[256];
    for (int r = 0; r < 4; r++) {
        for (int i = 0; i < 256; i++) {
            p[i] = malloc(16 + (size_t)(i * 97 % 4000));
            CHECK(p[i], "a thread's malloc failed");
            p[i][0] = (char)i;
        }
        for (int i = 0; i < 256; i++) {
            CHECK(p[i][0] == (char)i, "a thread's block lost its contents");
            free(p[i]);
        }
    }
    char *big = malloc(3 << 20);
    CHECK(big, "a thread's large malloc failed");
    memset(big, 7, 3 << 20);
    free(big);
    thread_faults[(intptr_t)arg] = faults() - f;
    return NULL;
}

/* The stack the calls below may reach, touched before the marker. */
__attribute__((noinline)) static void touch_stack(void)
{
    volatile char deep[256 << 10];
    memset((char *)deep, 0, sizeof deep);
}

static void pages(void)
{
    CHECK(fmt_flatmalloc, "pages needs flatmalloc (its statistics)");
    arena_create = (arena_create_fn)fmt_sym("flatmalloc_arena_create");
    arena_alloc = (arena_alloc_fn)fmt_sym("flatmalloc_arena_alloc");
    arena_reset = (arena_fn)fmt_sym("flatmalloc_arena_reset");
    arena_destroy = (arena_fn)fmt_sym("flatmalloc_arena_destroy");
    CHECK(arena_create && arena_alloc && arena_reset && arena_destroy, "the arena API is not resolvable");
    /* the threads' stacks, mapped and touched before the marker: glibc maps none for them */
    enum { NT = 8, STACK = 1 << 20 };
    char *stacks = mmap(NULL, (size_t)NT * STACK, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    CHECK(stacks != MAP_FAILED, "mmap of the threads' stacks: %s", strerror(errno));
    pthread_attr_t attr[NT];
    for (int t = 0; t < NT; t++) {
        pthread_attr_init(&attr[t]);
        CHECK(pthread_attr_setstack(&attr[t], stacks + (size_t)t * STACK, STACK) == 0, "pthread_attr_setstack");
    }
    uint64_t returned0 = fmt_stat("\"returned\":");
    memset(blk, 0, sizeof blk);   /* the test's own pages, touched before the marker */
    touch_stack();
    /* as a real-time program does: its code and data resident (the prefaulted pool is already) */
    CHECK(mlockall(MCL_CURRENT | MCL_FUTURE) == 0, "mlockall: %s (needs root or CAP_IPC_LOCK)", strerror(errno));
    printf("realtime: start\n");
    syscall(SYS_getppid);   /* the marker realtime.sh looks for in strace's output */

    long f = faults();
    fill(1);
    drop(1);
    for (int i = 0; i < 300; i++) {   /* light calls past the retain delay (FLATMALLOC_RETAIN_DELAY=10) */
        free(malloc(64));
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    fill(2);
    drop(2);
    malloc_trim(0);
    fill(3);
    char *r = malloc(100);
    CHECK(r, "malloc(100)");
    memset(r, 5, 100);
    for (size_t n = 200; n <= ((size_t)32 << 20); n *= 2) {   /* realloc growth, small to large */
        r = realloc(r, n);
        CHECK(r && r[0] == 5 && r[99] == 5, "realloc to %zu lost the contents", n);
        memset(r + n / 2, 5, n / 2);
    }
    for (size_t n = (size_t)16 << 20; n >= 64; n /= 2) {   /* and shrink */
        r = realloc(r, n);
        CHECK(r && r[0] == 5 && r[n - 1] == 5, "realloc down to %zu lost the contents", n);
    }
    free(r);
    char *z = calloc(1, 8 << 20);
    CHECK(z && z[0] == 0 && z[(8 << 20) - 1] == 0, "calloc of 8 MiB");
    free(z);
    void *a = arena_create(0);
    CHECK(a, "flatmalloc_arena_create");
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 20000; i++) {
            char *q = arena_alloc(a, 16 + (size_t)(i % 200), 16);
            CHECK(q, "flatmalloc_arena_alloc");
            q[0] = 1;
        }
        arena_reset(a);
    }
    arena_destroy(a);
    drop(3);
    malloc_trim(0);
    long main_faults = faults() - f;

    pthread_t th[NT];
    for (int t = 0; t < NT; t++)   /* started in two waves: the second reuses what the first gave back */
        CHECK(pthread_create(&th[t], &attr[t], pages_thread, (void *)(intptr_t)t) == 0, "pthread_create");
    for (int t = 0; t < NT; t++) fmt_join(th[t]);
    syscall(SYS_getppid);   /* the end marker */
    printf("realtime: faults in the main thread's calls %ld, in the threads' %ld %ld %ld %ld %ld %ld %ld %ld\n", main_faults,
           thread_faults[0], thread_faults[1], thread_faults[2], thread_faults[3], thread_faults[4], thread_faults[5],
           thread_faults[6], thread_faults[7]);
    CHECK(main_faults == 0, "%ld page faults after start-up in the main thread's calls", main_faults);
    for (int t = 0; t < NT; t++) CHECK(thread_faults[t] == 0, "thread %d took %ld page faults in its calls", t, thread_faults[t]);
    uint64_t returned = fmt_stat("\"returned\":");
    CHECK(returned == returned0, "%llu bytes were given back to the system", (unsigned long long)(returned - returned0));
    fmt_heap_ok("after the sequence");
    printf("realtime pages: no page fault after start-up, no page given back\n");
}

/* ---- work ---- */
#define WORK_THREADS 4
#define WORK_SLOTS 4096
static char *_Atomic shared[WORK_SLOTS];   /* blocks one thread leaves for another to free */

static void *work_thread(void *arg)
{
    uint64_t id = (uint64_t)(intptr_t)arg;
    fmt_rng g = {0x5eed + id};
    static __thread char *own[2048];
    static __thread size_t len[2048];
    for (int i = 0; i < 2048; i++) own[i] = NULL;
    for (int step = 0; step < 400000; step++) {
        size_t k = fmt_below(&g, 2048);
        if (own[k]) {
            CHECK(own[k][0] == (char)(k ^ id) && own[k][len[k] - 1] == (char)(k ^ id), "a block lost its contents");
            if (fmt_below(&g, 8) == 0) {   /* one in eight goes to another thread */
                char *old = atomic_exchange(&shared[fmt_below(&g, WORK_SLOTS)], own[k]);
                if (old) free(old);
            } else {
                free(own[k]);
            }
        }
        size_t n = fmt_below(&g, 16) == 0 ? 4096 + fmt_below(&g, 60000) : 16 + fmt_below(&g, 2000);
        own[k] = malloc(n);
        CHECK(own[k], "malloc(%zu)", n);
        len[k] = n;
        own[k][0] = own[k][n - 1] = (char)(k ^ id);
    }
    for (int i = 0; i < 2048; i++) free(own[i]);
    return NULL;
}

static void work(void)
{
    CHECK(fmt_flatmalloc, "work needs flatmalloc (its statistics)");
    pthread_t t[WORK_THREADS];
    for (int i = 0; i < WORK_THREADS; i++) t[i] = fmt_thread(work_thread, (void *)(intptr_t)i, 0);
    for (int i = 0; i < WORK_THREADS; i++) fmt_join(t[i]);
    for (int i = 0; i < WORK_SLOTS; i++) free(shared[i]);
    uint64_t most = fmt_stat("\"most_moved\":");
    printf("realtime work: the most blocks one call moved: %llu (bound 56)\n", (unsigned long long)most);
    CHECK(most > 0, "no call moved a block: the record is not kept");
    CHECK(most <= 56, "one call moved %llu blocks, more than the real-time profile's bound of 56", (unsigned long long)most);
    fmt_heap_ok("after the churn");
}

/* ---- pi ---- */
static atomic_int stop, medium_done, high_done;
static atomic_int go_medium, go_high;
static atomic_long low_loops;
static atomic_int ready;   /* threads at their priority, in place */
static int first_inversion;

static void fifo(int prio)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(0, &s);
    CHECK(pthread_setaffinity_np(pthread_self(), sizeof s, &s) == 0, "pthread_setaffinity_np to CPU 0");
    struct sched_param sp = {.sched_priority = prio};
    int e = pthread_setschedparam(pthread_self(), SCHED_FIFO, &sp);
    CHECK(e == 0, "SCHED_FIFO priority %d: %s (the pi test needs root or CAP_SYS_NICE)", prio, strerror(e));
}

static void wait_for(atomic_int *flag, int value)
{
    while (atomic_load(flag) != value && !atomic_load(&stop)) syscall(SYS_futex, flag, 0 /* FUTEX_WAIT */, atomic_load(flag), NULL);
}

static void wake(atomic_int *flag, int value)
{
    atomic_store(flag, value);
    syscall(SYS_futex, flag, 1 /* FUTEX_WAKE */, 1);
}

static void *low_thread(void *arg)
{
    (void)arg;
    fifo(10);
    atomic_fetch_add(&ready, 1);
    while (!atomic_load(&stop)) {
        void *p = malloc(256 << 10);   /* a large block: a run of the heap, under its lock */
        CHECK(p, "low's malloc");
        free(p);
        atomic_fetch_add(&low_loops, 1);
    }
    return NULL;
}

static void *medium_thread(void *arg)
{
    (void)arg;
    fifo(20);
    atomic_fetch_add(&ready, 1);
    for (int r = 1;; r++) {
        wait_for(&go_medium, r);
        if (atomic_load(&stop)) break;
        wake(&go_high, r);   /* high runs at once, on this CPU: low was stopped wherever it was */
        struct timespec a, b;
        clock_gettime(CLOCK_MONOTONIC, &a);
        do clock_gettime(CLOCK_MONOTONIC, &b);
        while ((b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec) < 20000000L);
        atomic_store(&medium_done, r);
    }
    return NULL;
}

static int inversions;
static void *high_thread(void *arg)
{
    (void)arg;
    fifo(30);
    free(malloc(256 << 10));   /* its cache and tag taken before the rounds */
    atomic_fetch_add(&ready, 1);
    for (int r = 1;; r++) {
        wait_for(&go_high, r);
        if (atomic_load(&stop)) break;
        void *p = malloc(256 << 10);
        CHECK(p, "high's malloc");
        if (atomic_load(&medium_done) == r && !inversions++) first_inversion = r;   /* it returned only after medium's spin */
        free(p);
        atomic_store(&high_done, r);
    }
    return NULL;
}

static void pi(bool control)
{
    cpu_set_t s;
    CPU_ZERO(&s);
    CPU_SET(1, &s);
    CHECK(sched_setaffinity(0, sizeof s, &s) == 0, "the main thread to CPU 1 (the pi test needs two CPUs)");
    pthread_t lo = fmt_thread(low_thread, NULL, 0), me = fmt_thread(medium_thread, NULL, 0), hi = fmt_thread(high_thread, NULL, 0);
    enum { ROUNDS = 60 };
    while (atomic_load(&ready) < 3) {
        struct timespec ts = {0, 1000000};
        nanosleep(&ts, NULL);
    }
    for (int r = 1; r <= ROUNDS; r++) {
        struct timespec ts = {0, 3000000};
        nanosleep(&ts, NULL);   /* low runs alone a moment */
        wake(&go_medium, r);
        while (atomic_load(&medium_done) != r || atomic_load(&high_done) != r) nanosleep(&ts, NULL);
        if (control && inversions) break;
    }
    atomic_store(&stop, 1);
    wake(&go_medium, -1);
    wake(&go_high, -1);
    fmt_join(lo);
    fmt_join(me);
    fmt_join(hi);
    printf("realtime pi%s: high waited behind low in %d rounds, the first in round %d (low looped %ld times)\n",
           control ? "-control" : "", inversions, first_inversion, atomic_load(&low_loops));
    if (control)
        CHECK(inversions > 0, "with plain locks high never waited behind low: the test cannot tell");
    else
        CHECK(inversions == 0, "high waited behind a lower-priority holder of the allocator's lock %d times", inversions);
}

/* ---- mlock ---- */
static long status_kib(const char *key)
{
    FILE *f = fopen("/proc/self/status", "r");
    CHECK(f, "/proc/self/status: %s", strerror(errno));
    char line[256];
    long v = -1;
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, strlen(key))) v = atol(line + strlen(key));
    fclose(f);
    CHECK(v >= 0, "no %s in /proc/self/status", key);
    return v;
}

static void mlock_heap(void)
{
    free(malloc(100));
    CHECK(mlockall(MCL_CURRENT | MCL_FUTURE) == 0, "mlockall: %s (needs root, CAP_IPC_LOCK or a lock limit above the "
                                                   "address space)", strerror(errno));
    long rss = status_kib("VmRSS:");
    printf("realtime mlock: resident after mlockall %ld KiB\n", rss);
    enum { N = 64 << 10 };
    static char *p[N];
    long in_writes = 0;
    for (int i = 0; i < N; i++) {
        p[i] = malloc(1024);
        CHECK(p[i], "malloc(1024) #%d", i);
        long f = faults();
        memset(p[i], i, 1024);
        in_writes += faults() - f;
    }
    for (int i = 0; i < N; i++) CHECK(p[i][1023] == (char)i, "block %d lost its contents", i);
    printf("realtime mlock: after 64 MiB of 1 KiB blocks resident %ld KiB, page faults in the writes %ld\n",
           status_kib("VmRSS:"), in_writes);
    CHECK(in_writes == 0, "%ld page faults writing blocks handed out after mlockall", in_writes);
}

/* ---- ahead ---- */
/* /proc/self/maps into buf (NUL-terminated): a mapping's bounds move when part of it changes
 * protection, as the lines' number may not. */
static void maps_text(char *buf, size_t size)
{
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f, "/proc/self/maps: %s", strerror(errno));
    size_t n = fread(buf, 1, size - 1, f);
    CHECK(n < size - 1, "/proc/self/maps is longer than %zu bytes", size - 1);
    buf[n] = 0;
    fclose(f);
}

#define AHEAD_BLOCKS 1024
static void *grow_4m(void *arg)
{
    char **b = arg;
    for (int i = 0; i < AHEAD_BLOCKS; i++) {
        b[i] = malloc(4096);
        CHECK(b[i], "malloc(4096)");
        memset(b[i], i & 0xff, 4096);
    }
    return NULL;
}

static pthread_barrier_t grow_bar;
static void *grow_other(void *arg)
{
    pthread_barrier_wait(&grow_bar);   /* its stack mapped before the count */
    grow_4m(arg);
    pthread_barrier_wait(&grow_bar);   /* and counted again before it is unmapped */
    return NULL;
}

static void grow_still(void)
{
    static char *blocks[2][AHEAD_BLOCKS], before[1 << 16], after[1 << 16];
    free(malloc(100));   /* the start-up's mappings, the first span's */
    pthread_t t;
    CHECK(!pthread_barrier_init(&grow_bar, NULL, 2), "pthread_barrier_init");
    CHECK(!pthread_create(&t, NULL, grow_other, blocks[1]), "pthread_create");
    maps_text(before, sizeof before);
    pthread_barrier_wait(&grow_bar);
    grow_4m(blocks[0]);
    pthread_barrier_wait(&grow_bar);
    maps_text(after, sizeof after);
    CHECK(!pthread_join(t, NULL), "pthread_join");
    char c = 0;
    FILE *oc = fopen("/proc/sys/vm/overcommit_memory", "r");
    if (oc) c = (char)fgetc(oc), fclose(oc);
    int same = !strcmp(before, after);
    printf("realtime grow: /proc/self/maps %s by 8 MiB of blocks in two threads (overcommit_memory %c)\n",
           same ? "unchanged" : "changed", c);
    if (c == '2')
        CHECK(!same, "strict overcommit: the heap's growth opened nothing with mprotect");
    else
        CHECK(same, "the heap's growth changed the process's mappings:\n%s\nthen\n%s", before, after);
    for (int k = 0; k < 2; k++)
        for (int i = 0; i < AHEAD_BLOCKS; i++) {
            CHECK(blocks[k][i][0] == (char)(i & 0xff) && blocks[k][i][4095] == (char)(i & 0xff), "block %d of thread %d", i, k);
            free(blocks[k][i]);
        }
}

static void open_ahead(void)
{
    CHECK(mlockall(MCL_FUTURE) == 0, "mlockall(MCL_FUTURE): %s", strerror(errno));
    char *p = malloc(100);
    CHECK(p, "malloc(100)");
    FILE *f = fopen("/proc/self/maps", "r");
    CHECK(f, "/proc/self/maps: %s", strerror(errno));
    char line[512], perms[8] = "";
    unsigned long lo = 0, hi = 0, a, b;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "%lx-%lx %7s", &a, &b, perms) == 3 && a <= (uintptr_t)p && (uintptr_t)p < b) {
            lo = a, hi = b;
            break;
        }
    fclose(f);
    CHECK(hi, "no mapping in /proc/self/maps holds the block %p", (void *)p);
    unsigned long past = hi - (uintptr_t)p;
    printf("realtime ahead: after mlockall the mapping %lx-%lx (%s) holding the first block reaches %lu KiB past it\n",
           lo, hi, perms, past >> 10);
    CHECK(!strncmp(perms, "rw", 2), "the mapping holding the block is %s, not read and write", perms);
    CHECK(past > (1ul << 20) && past <= (3ul << 20),
          "the heap is open %lu KiB past its first block after mlockall: expected more than 1 MiB (a step opened "
          "ahead) and at most 3 MiB (opened as used)", past >> 10);
    free(p);
    CHECK(munlockall() == 0, "munlockall: %s", strerror(errno));
}

int main(int argc, char **argv)
{
    int skip = fmt_init("realtime", argc, argv);
    const char *mode = argc > 1 + skip ? argv[1 + skip] : "";
    if (!strcmp(mode, "pages")) pages();
    else if (!strcmp(mode, "work")) work();
    else if (!strcmp(mode, "pi")) pi(false);
    else if (!strcmp(mode, "pi-control")) pi(true);
    else if (!strcmp(mode, "mlock")) mlock_heap();
    else if (!strcmp(mode, "ahead")) open_ahead();
    else if (!strcmp(mode, "grow")) grow_still();
    else FAIL("usage: realtime [--libc] pages|work|pi|pi-control|mlock|ahead|grow");
    return 0;
}
