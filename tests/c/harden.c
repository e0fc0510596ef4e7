/* Hardening probes (issue 12): heap corruption an attacker could try, each as the table
 * describes it. Every probe runs in a forked child; the parent accepts exactly two outcomes:
 *
 *   stopped   the child died of SIGABRT and its stderr is exactly one line, which starts with
 *             "flatmalloc: " (with --libc: any one line, glibc's own message);
 *   harmless  the child exited 0 with nothing on stderr, after checking that no allocation
 *             returned the attacker's address, no block was handed out twice (every pointer
 *             is checked against the set of live blocks), and the attacker's targets (a
 *             global and a stack array) were not written to.
 *
 * Anything else fails: another signal (a SIGSEGV inside malloc), harm found by the child
 * (it exits 3 and says what on stdout), extra lines on stderr.
 *
 * usage: harden [--libc] PROBE    (harden --list prints the probe names)
 * Run in default mode and with FLATMALLOC_CHECK=1; meson registers one test per probe and mode
 * (suite 'harden'). */
#include "child.h"
#include "fmtest.h"

#include <malloc.h>
#include <setjmp.h>
#include <signal.h>
#include <sys/wait.h>

#define EXIT_HARM 3

/* ---- what the child checks ---------------------------------------------------------------- */
/* The attacker's targets: 256 bytes each, the address they plant is target + 64. */
static _Alignas(64) unsigned char global_target[256];
static unsigned char *stack_target;

#define CANARY(i) ((unsigned char)(0x5c ^ (i)))

static void target_init(unsigned char *t)
{
    for (int i = 0; i < 256; i++)
        t[i] = CANARY(i);
}

/* Reports harm without stdio or malloc (the heap may be damaged) and exits. */
__attribute__((noreturn, format(printf, 1, 2))) static void harm(const char *fmt, ...)
{
    char buf[512];
    int n = snprintf(buf, sizeof buf, "HARM: ");
    va_list ap;
    va_start(ap, fmt);
    n += vsnprintf(buf + n, sizeof buf - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof buf - 2)
        n = (int)sizeof buf - 2;
    buf[n++] = '\n';
    if (write(1, buf, (size_t)n) < 0)
        _exit(EXIT_HARM);
    _exit(EXIT_HARM);
}

static void target_verify(const unsigned char *t, const char *what)
{
    for (int i = 0; i < 256; i++)
        if (t[i] != CANARY(i))
            harm("the allocator wrote into the %s target: byte %d is 0x%02x", what, i, t[i]);
}

/* The set of blocks the program holds: every new block must be new memory. */
enum { LIVE_MAX = 4096 };
static struct { unsigned char *p; size_t n, from; uint64_t tag; } live[LIVE_MAX]; /* [from, n) hold the tag's pattern */
static int nlive;

static bool overlaps(const void *a, size_t an, const void *b, size_t bn)
{
    return (uintptr_t)a < (uintptr_t)b + bn && (uintptr_t)b < (uintptr_t)a + an;
}

/* Checks a block just returned for n bytes, fills it and adds it to the live set. */
static void *got(void *p, size_t n, const char *call)
{
    if (!p)
        harm("%s returned NULL", call);
    if (overlaps(p, n, global_target, sizeof global_target))
        harm("%s returned %p, inside the attacker's global target %p", call, p, (void *)global_target);
    if (stack_target && overlaps(p, n, stack_target, 256))
        harm("%s returned %p, inside the attacker's stack target %p", call, p, (void *)stack_target);
    for (int i = 0; i < nlive; i++)
        if (overlaps(p, n, live[i].p, live[i].n))
            harm("%s returned %p (%zu bytes), overlapping the live block %p (%zu bytes): handed out twice",
                 call, p, n, (void *)live[i].p, live[i].n);
    if (nlive == LIVE_MAX)
        harm("live set full (test bug)");
    uint64_t tag = (uint64_t)(uintptr_t)p ^ 0x6a09e667f3bcc908ULL;
    fmt_fill(p, 0, n, tag);
    live[nlive].p = p;
    live[nlive].n = n;
    live[nlive].from = 0;
    live[nlive].tag = tag;
    nlive++;
    return p;
}

static void *xmalloc(size_t n)
{
    char call[48];
    snprintf(call, sizeof call, "malloc(%zu)", n);
    return got(malloc(n), n, call);
}

/* Forgets p (about to be freed, or freed by the probe's misuse). */
static void forget(void *p)
{
    for (int i = 0; i < nlive; i++)
        if (live[i].p == p) {
            live[i] = live[--nlive];
            return;
        }
}

/* Frees a block of the live set after checking that nothing else wrote into it. */
static void xfree(void *p)
{
    for (int i = 0; i < nlive; i++)
        if (live[i].p == p) {
            size_t bad = fmt_find_bad(p, live[i].from, live[i].n, live[i].tag);
            if (bad != SIZE_MAX)
                harm("live block %p (%zu bytes) was overwritten at byte %zu: it was handed out twice", p,
                     live[i].n, bad);
            live[i] = live[--nlive];
            free(p);
            return;
        }
    harm("xfree of a block not in the live set (test bug)");
}

/* Every live block still holds its own pattern: none was handed out again meanwhile. */
static void live_verify(void)
{
    for (int i = 0; i < nlive; i++) {
        size_t bad = fmt_find_bad(live[i].p, live[i].from, live[i].n, live[i].tag);
        if (bad != SIZE_MAX)
            harm("live block %p (%zu bytes) was overwritten at byte %zu", (void *)live[i].p, live[i].n, bad);
    }
}

static void *volatile sink;

/* ---- the probes ---------------------------------------------------------------------------- */
/* 1. Free a 64 B block, overwrite its first word with a stack or global address, malloc twice. */
static void uaf_link(unsigned char *target)
{
    void *p = xmalloc(64);
    forget(p);
    free(p);
    *(void **)p = target + 64;
    xmalloc(64);
    xmalloc(64);
}
static void probe_uaf_global(void) { uaf_link(global_target); }
static void probe_uaf_stack(void) { uaf_link(stack_target); }

/* 2. a, b, c = malloc(32); free c, b; a linear overflow from a writes an address into b's first
 * word (the bytes between a's end and b keep their values, as an attacker who knows the layout
 * writes them); malloc twice. */
static void probe_overflow_link(void)
{
    unsigned char *a = xmalloc(32), *b = xmalloc(32), *c = xmalloc(32);
    forget(c);
    free(c);
    forget(b);
    free(b);
    void *addr = global_target + 64;
    if (b > a) {
        for (unsigned char *w = a + 32; w < b; w++)
            *(volatile unsigned char *)w = *w;
    }
    memcpy(b, &addr, sizeof addr);
    xmalloc(32);
    xmalloc(32);
    live_verify();
}

/* 3. 64 bytes of 'A' past a 32 B block, then 100k mixed malloc/free. Without the overflow
 * (probe "clean") the same run must be harmless: the checks themselves raise no false alarm. */
static void churn(bool overflow)
{
    unsigned char *p = xmalloc(32);
    if (overflow)
        memset(p + 32, 'A', 64);
    fmt_rng r = {0x5eed};
    enum { SLOTS = 512 };
    static void *slot[SLOTS];
    for (int i = 0; i < 100000; i++) {
        int s = (int)fmt_below(&r, SLOTS);
        if (slot[s]) {
            xfree(slot[s]);
            slot[s] = NULL;
        } else {
            uint64_t k = fmt_below(&r, 16);
            size_t n = k < 8 ? 16 + 16 * fmt_below(&r, 8) /* 16..128, 32 most of all */
                       : k < 12 ? 32 : k < 15 ? 1 + fmt_below(&r, 2048) : 1 + fmt_below(&r, 100000);
            slot[s] = xmalloc(n);
        }
    }
    live_verify();
}
static void probe_overflow_churn(void) { churn(true); }
static void probe_clean(void) { churn(false); }

/* 4. Large blocks A, B (100000 B: above the largest class, below glibc's mmap threshold);
 * free B; an overflow from A rewrites B's list links (its first two words, where a free block's
 * links would be, get the attacker's address; the bytes between A's end and B keep their
 * values); then malloc, or free A to coalesce. */
static unsigned char *large_setup(unsigned char **a_out)
{
    enum { N = 100000 };
    unsigned char *a = xmalloc(N), *b = xmalloc(N);
    xmalloc(N); /* B does not border the untouched end of the area */
    forget(b);
    free(b);
    if (b > a) {
        for (unsigned char *w = a + N; w < b; w++)
            *(volatile unsigned char *)w = *w;
    }
    void *addr = global_target + 64;
    memcpy(b, &addr, sizeof addr);
    memcpy(b + sizeof addr, &addr, sizeof addr);
    *a_out = a;
    return b;
}
static void probe_large_unlink_malloc(void)
{
    unsigned char *a;
    large_setup(&a);
    xmalloc(100000 - 16384); /* smaller than B: a good fit takes B off its list and splits it */
    xmalloc(100000);
    live_verify();
}
static void probe_large_unlink_coalesce(void)
{
    unsigned char *a;
    large_setup(&a);
    xfree(a);
    xmalloc(150000);
    live_verify();
}

/* Zeroes the first n bytes of live block p (what a fresh block may hold), keeping the rest checked. */
static void zero_head(unsigned char *p, size_t n)
{
    memset(p, 0, n);
    for (int i = 0; i < nlive; i++)
        if (live[i].p == p)
            live[i].from = n;
}

/* 5. free(malloc(64) + 16); the next mallocs of 64 must not overlap the live block. The first
 * 16 bytes hold zeros, so glibc (--libc) reads the same header every run. */
static void probe_free_interior(void)
{
    unsigned char *p = xmalloc(64);
    zero_head(p, 16);
    free(p + 16);
    for (int i = 0; i < 8; i++)
        xmalloc(64);
    live_verify();
}

/* 6. free(malloc(16) + 16384), an address never handed out; then enough malloc(16) to reach it
 * in the ordinary course: it must not come out twice. */
static void probe_free_never_handed_out(void)
{
    unsigned char *p = xmalloc(16);
    free(p + 16384);
    for (int i = 0; i < 3000; i++)
        xmalloc(16);
    live_verify();
}

/* 7. free(p), 4 other frees of the size, free(p); then mallocs of the size. */
static void probe_double_free_after_4(void)
{
    void *p = xmalloc(48), *q[4];
    for (int i = 0; i < 4; i++)
        q[i] = xmalloc(48);
    forget(p);
    free(p);
    for (int i = 0; i < 4; i++) {
        forget(q[i]);
        free(q[i]);
    }
    free(p);
    for (int i = 0; i < 8; i++)
        xmalloc(48);
    live_verify();
}

/* 8. (issue 18) A stray write of 4 MiB past the end of a large block at the top of the heap,
 * into memory never handed out, then calloc of 2 MiB, which lands there: every byte must read
 * as zero. */
/* The stray write stops where the heap is not opened yet (the pool is opened as it is used):
 * it writes what it can reach, a page at a time, and the fault ends it. */
static sigjmp_buf stray_end;
static void stray_fault(int sig)
{
    (void)sig;
    siglongjmp(stray_end, 1);
}

static void probe_calloc_large_fresh(void)
{
    enum { STRAY = 4 << 20, N = 2 << 20 };
    unsigned char *a = xmalloc(200000);
    size_t u = malloc_usable_size(a);
    static volatile size_t written;
    struct sigaction sa = {.sa_handler = stray_fault}, old;
    sigaction(SIGSEGV, &sa, &old);
    if (!sigsetjmp(stray_end, 1))
        for (written = 0; written < STRAY; written += 4096)
            memset(a + u + written, 'A', STRAY - written < 4096 ? STRAY - written : 4096);
    sigaction(SIGSEGV, &old, NULL);
    printf("harden: the stray write reached %zu bytes past the block\n", (size_t)written);
    if (written < N / 4)
        harm("the stray write reached only %zu bytes: the probe tests nothing", (size_t)written);
    live_verify();
    unsigned char *c = calloc(1, N);
    if (!c)
        harm("calloc(1, %d) returned NULL", N);
    for (size_t i = 0; i < N; i++)
        if (c[i])
            harm("calloc(1, %d) returned %p whose byte %zu is 0x%02x", N, (void *)c, i, c[i]);
    if (c < a + u || c >= a + u + STRAY)
        harm("calloc's block %p is not where the stray write went (%p..%p): the probe tests nothing",
             (void *)c, (void *)(a + u), (void *)(a + u + STRAY));
    got(c, N, "calloc");
    live_verify();
}

/* ---- arenas (issue 44): a stray write next to an arena cannot aim its cursor ------------- */
typedef struct flatmalloc_arena flatmalloc_arena;
static struct {
    flatmalloc_arena *(*create)(size_t);
    void *(*alloc)(flatmalloc_arena *, size_t, size_t);
    void (*reset)(flatmalloc_arena *);
    void (*destroy)(flatmalloc_arena *);
} A;

static void arena_api(void)
{
    *(void **)&A.create = dlsym(RTLD_DEFAULT, "flatmalloc_arena_create");
    *(void **)&A.alloc = dlsym(RTLD_DEFAULT, "flatmalloc_arena_alloc");
    *(void **)&A.reset = dlsym(RTLD_DEFAULT, "flatmalloc_arena_reset");
    *(void **)&A.destroy = dlsym(RTLD_DEFAULT, "flatmalloc_arena_destroy");
    if (!A.create || !A.alloc || !A.reset || !A.destroy)
        harm("the flatmalloc_arena_* calls are not exported");
}

/* The arena's first slab right after a large block (the block's usable end is the slab's
 * first byte); then {target, target + 512} written at `at` bytes from that first byte (the
 * block's 16-byte overflow, or 192 bytes below the first allocation), where the arena's cursor
 * was at 85c21b6. Every arena allocation must stay in the first slab, before and after a
 * reset. */
static void arena_stray(long at)
{
    arena_api();
    unsigned char *m = malloc(300000);
    if (!m)
        harm("malloc(300000) returned NULL");
    size_t u = malloc_usable_size(m);
    flatmalloc_arena *a = A.create(0);
    if (!a)
        harm("flatmalloc_arena_create returned NULL");
    unsigned char *first = A.alloc(a, 64, 16);
    /* the slab's first byte: the first allocation's (checking mode: its header's) */
    unsigned char *slab = (unsigned char *)((uintptr_t)first & ~(uintptr_t)(16384 - 1));
    if (!first || slab < m + u || slab - (m + u) >= 16384)
        harm("the arena's first slab (allocation %p) does not start where the block's run ends (usable end %p): the probe tests "
             "nothing", (void *)first, (void *)(m + u));
    memset(first, 1, 64);
    uintptr_t plant[2] = {(uintptr_t)(global_target + 64), (uintptr_t)(global_target + 64 + 512)};
    memcpy(at ? first + at : slab, plant, sizeof plant);
    for (int round = 0; round < 2; round++) {
        for (int i = 0; i < 200; i++) {
            unsigned char *p = A.alloc(a, 64, 16);
            if (!p || p < first || p + 64 > first + (64u << 10))
                harm("flatmalloc_arena_alloc returned %p, outside the arena's first slab %p..%p", (void *)p,
                     (void *)first, (void *)(first + (64u << 10)));
            if (overlaps(p, 64, global_target, sizeof global_target))
                harm("flatmalloc_arena_alloc returned %p, the attacker's target", (void *)p);
            memset(p, 2, 64);
        }
        A.reset(a);
    }
    A.destroy(a);
}
static void probe_arena_overflow(void) { arena_stray(0); }
static void probe_arena_underflow(void) { arena_stray(-192); }

/* ---- the remote stack's words (issue 44): blocks freed by another thread that wait for their
 * owner hold no heap address and no mask that decodes one, at the end of a batch too ---------- */
enum { RS_N = 20000 };
static unsigned char *rs_block[RS_N];
static uintptr_t rs_sorted[RS_N];

static void *rs_free_all(void *arg)
{
    (void)arg;
    for (int i = 0; i < RS_N; i++)
        free(rs_block[i]);
    return NULL;
}
static int cmp_uptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* A heap address: any block's, or anything within 1 MiB of the blocks. */
static bool heapish(uintptr_t v)
{
    return v - (rs_sorted[0] - (1u << 20)) < rs_sorted[RS_N - 1] - rs_sorted[0] + (2u << 20) ||
           bsearch(&v, rs_sorted, RS_N, sizeof v, cmp_uptr);
}

static void probe_remote_stack_words(void)
{
    /* this thread allocates (its blocks carry its tag); another frees them all while this one
     * makes no call, so they wait on this thread's inbox and, past it, its remote stack */
    for (int i = 0; i < RS_N; i++) {
        rs_block[i] = malloc(64);
        if (!rs_block[i])
            harm("malloc(64) returned NULL");
        memset(rs_block[i], 0, 64);
        rs_sorted[i] = (uintptr_t)rs_block[i];
    }
    qsort(rs_sorted, RS_N, sizeof rs_sorted[0], cmp_uptr);
    pthread_t t;
    if (pthread_create(&t, NULL, rs_free_all, NULL) || pthread_join(t, NULL))
        harm("pthread_create");
    int written = 0;
    for (int i = 0; i < RS_N; i++) {
        uintptr_t w[8];
        memcpy(w, rs_block[i], sizeof w);   /* one read of a freed block, all 64 bytes */
        bool any = false;
        for (int j = 0; j < 8; j++)
            any |= w[j] != 0;
        written += any;
        /* the words themselves, and each decoded by anything the same read gives */
        for (int k = 0; k < 17; k++) {
            uintptr_t key = k == 0 ? 0 : k <= 8 ? w[k - 1] : ~w[k - 9];
            for (int j = 0; j < 8; j++)
                if (heapish(w[j] ^ key))
                    harm("freed block %p (of %d freed by another thread) reads %#lx at word %d: decoded with %#lx it gives the heap "
                         "address %#lx", (void *)rs_block[i], RS_N, (unsigned long)w[j], j, (unsigned long)key,
                         (unsigned long)(w[j] ^ key));
        }
    }
    const char *mode = getenv("FLATMALLOC_CHECK");
    if (!(mode && strcmp(mode, "1") == 0) && written < RS_N / 40)
        harm("only %d of %d blocks freed by another thread were written: the probe tests nothing", written, RS_N);
    printf("%d of %d blocks freed by another thread were written (carriers on the remote stack), none reads as a heap address\n", written,
           RS_N);
}

struct probe {
    const char *name;
    void (*run)(void);
};

static const struct probe probes[] = {
    {"clean", probe_clean},
    {"uaf-global", probe_uaf_global},
    {"uaf-stack", probe_uaf_stack},
    {"overflow-link", probe_overflow_link},
    {"overflow-churn", probe_overflow_churn},
    {"large-unlink-malloc", probe_large_unlink_malloc},
    {"large-unlink-coalesce", probe_large_unlink_coalesce},
    {"free-interior", probe_free_interior},
    {"free-never-handed-out", probe_free_never_handed_out},
    {"double-free-after-4", probe_double_free_after_4},
    {"calloc-large-fresh", probe_calloc_large_fresh},
    {"arena-overflow", probe_arena_overflow},
    {"arena-underflow", probe_arena_underflow},
    {"remote-stack-words", probe_remote_stack_words},
};

/* ---- the parent ---------------------------------------------------------------------------- */
static void run_child(const struct probe *p)
{
    _Alignas(64) unsigned char local[256];
    target_init(global_target);
    target_init(local);
    stack_target = local;
    p->run();
    target_verify(global_target, "global");
    target_verify(local, "stack");
    sink = local;
    _exit(0);
}

int main(int argc, char **argv)
{
    int skip = fmt_init("harden", argc, argv);
    argc -= skip;
    argv += skip;
    size_t nprobes = sizeof probes / sizeof probes[0];
    if (argc == 2 && strcmp(argv[1], "--list") == 0) {
        for (size_t i = 0; i < nprobes; i++)
            puts(probes[i].name);
        return 0;
    }
    const struct probe *p = NULL;
    for (size_t i = 0; argc == 2 && i < nprobes; i++)
        if (strcmp(argv[1], probes[i].name) == 0)
            p = &probes[i];
    if (!p) {
        fprintf(stderr, "usage: harden [--libc] PROBE|--list\n");
        return 2;
    }
    const char *mode = getenv("FLATMALLOC_CHECK");
    printf("probe %s (%s)\n", p->name, mode && strcmp(mode, "1") == 0 ? "checking mode" : "default mode");

    int out[2], err[2];
    CHECK(pipe(out) == 0 && pipe(err) == 0, "pipe: %s", strerror(errno));
    pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(out[1], 1);
        dup2(err[1], 2);
        close(out[0]);
        close(err[0]);
        run_child(p);
    }
    close(out[1]);
    close(err[1]);
    static char o[8192], e[8192];
    child_slurp(out[0], o, sizeof o);
    size_t en = child_slurp(err[0], e, sizeof e);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid: %s", strerror(errno));

    const char *nl = strchr(e, '\n');
    bool one_line = en > 0 && nl && nl[1] == 0;
    if (WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT) {
        if (!one_line)
            FAIL("%s: SIGABRT, but stderr is not exactly one line:\n%s", p->name, e);
        if (fmt_flatmalloc && strncmp(e, "flatmalloc: ", 12) != 0)
            FAIL("%s: SIGABRT, but the line does not start with \"flatmalloc: \": %s", p->name, e);
        printf("ok %s: stopped: %s", p->name, e);
        return 0;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) {
        if (en)
            FAIL("%s: exited 0 (harmless) but wrote on stderr:\n%s", p->name, e);
        fputs(o, stdout);   /* what the probe saw */
        printf("ok %s: harmless (no attacker address, no block handed out twice, targets untouched)\n", p->name);
        return 0;
    }
    if (WIFEXITED(st) && WEXITSTATUS(st) == EXIT_HARM)
        FAIL("%s: %s", p->name, o);
    if (WIFSIGNALED(st))
        FAIL("%s: killed by signal %d (%s), stderr: %s", p->name, WTERMSIG(st), strsignal(WTERMSIG(st)),
             en ? e : "(empty)\n");
    FAIL("%s: exit status %d, stdout: %s stderr: %s", p->name, WEXITSTATUS(st), o, e);
}
