/* glibc's own malloc controls under flatmalloc (issue 46, and mallopt for issue 43): the perturb
 * byte from MALLOC_PERTURB_, GLIBC_TUNABLES and mallopt(M_PERTURB); MALLOC_CHECK_ and
 * glibc.malloc.check; every glibc 2.36 tunable and MALLOC_* variable, malformed ones included;
 * the trim threshold as the retained budget; mallopt's return values; glibc's real-time recipe;
 * malloc_info's XML.
 *
 *   glibc [--libc] [GROUP]   runs every group (or one), each in a child process started with an
 *                            environment of its own (the caller's MALLOC_*, GLIBC_TUNABLES and
 *                            FLATMALLOC_* variables removed, meson's MALLOC_PERTURB_ among them).
 * With --libc the same checks run against glibc 2.36 where they describe glibc too (the perturb
 * pattern of a block malloc hands out first, how the environment is read, mallopt's return
 * values, malloc_info's totals, the recipe's refill): the values asserted here are glibc's own. */
#include "fmtest.h"

#include <limits.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/wait.h>

extern char **environ;
static bool libc_run;   /* --libc */
static const char *self;

/* ---- children ------------------------------------------------------------------------------
 * run(out, role, arg, VAR=VALUE..., NULL): this program again as `role arg`, with the caller's
 * environment less every MALLOC_*, GLIBC_TUNABLES and FLATMALLOC_* variable, plus the given
 * ones; returns its wait status, its stderr in out. */
static int run(char *out, size_t outsz, const char *role, const char *arg, ...)
{
    char *env[256];
    int n = 0;
    for (char **e = environ; *e && n < 200; e++)
        if (strncmp(*e, "MALLOC_", 7) && strncmp(*e, "GLIBC_TUNABLES=", 15) && strncmp(*e, "FLATMALLOC_", 11))
            env[n++] = *e;
    va_list ap;
    va_start(ap, arg);
    for (char *v; (v = va_arg(ap, char *)) && n < 250;)
        env[n++] = v;
    va_end(ap);
    env[n] = NULL;
    int fd[2];
    CHECK(pipe(fd) == 0, "pipe");
    fflush(stdout);
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fd[1], 2);
        close(fd[0]);
        close(fd[1]);
        char *argv[] = {(char *)self, libc_run ? "--libc" : "--child", (char *)role, (char *)arg, NULL};
        execve("/proc/self/exe", argv, env);
        _exit(127);
    }
    close(fd[1]);
    size_t len = 0;
    for (ssize_t r; (r = read(fd[0], out + len, outsz - 1 - len)) > 0;)
        len += (size_t)r;
    out[len] = 0;
    close(fd[0]);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    return st;
}

/* The child must exit 0 with nothing on stderr. */
#define RUN_OK(what, role, arg, ...)                                                             \
    do {                                                                                         \
        char err_[8192];                                                                         \
        int st_ = run(err_, sizeof err_, role, arg, __VA_ARGS__, NULL);                          \
        CHECK(WIFEXITED(st_) && WEXITSTATUS(st_) == 0 && !err_[0], "%s: status 0x%x, stderr: %s", \
              what, st_, err_);                                                                  \
        printf("  ok: %s\n", what);                                                              \
    } while (0)

/* ---- the perturb byte ---- */

/* First offset in [0, n) of p whose byte is not want, or SIZE_MAX (volatile: p may be freed). */
static size_t not_all(const volatile uint8_t *p, size_t n, uint8_t want)
{
    for (size_t i = 0; i < n; i++)
        if (p[i] != want)
            return i;
    return SIZE_MAX;
}

#define CHECK_BYTES(p, n, want, what)                                                            \
    do {                                                                                         \
        size_t at_ = not_all((const volatile uint8_t *)(p), (n), (uint8_t)(want));               \
        CHECK(at_ == SIZE_MAX, "%s: byte %zu of %zu is 0x%02x, expected 0x%02x", (what), at_,    \
              (size_t)(n), ((const volatile uint8_t *)(p))[at_ == SIZE_MAX ? 0 : at_],           \
              (unsigned)(uint8_t)(want));                                                        \
    } while (0)

/* A child: every way a block is handed out reads ~n over the bytes asked for, a freed block n
 * (flatmalloc: every block; glibc spares those of its thread cache and reads only the first
 * block of a size here), calloc 0. n -1: the child sets it with mallopt(M_PERTURB, 0x5a). */
static void perturb_child(int n)
{
    if (n < 0)
        CHECK(mallopt(M_PERTURB, n = 0x5a) == 1, "mallopt(M_PERTURB, 0x5a)");
    uint8_t fresh = (uint8_t)(n ^ 0xff), freed = (uint8_t)n;
    static const size_t sizes[] = {1, 24, 100, 1000, 3000, 5000, 70000, 1 << 20, 3 << 20};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t s = sizes[i];
        uint8_t *p = malloc(s);
        CHECK(p, "malloc(%zu)", s);
        CHECK_BYTES(p, s, fresh, "a fresh block");
        if (libc_run)
            continue;   /* glibc: its thread cache's blocks stay as they are; large ones are unmapped */
        memset(p, 0x11, s);
        free(p);
        CHECK_BYTES(p, s, freed, "a freed block");
        p = malloc(s);   /* the same block again, from the thread cache for the small ones */
        CHECK_BYTES(p, s, fresh, "a block handed out again");
        free(p);
    }
    uint8_t *c = calloc(10, 100), *C = calloc(1, 2 << 20);
    CHECK(c && C, "calloc");
    CHECK_BYTES(c, 1000, 0, "calloc(10, 100)");
    CHECK_BYTES(C, 2 << 20, 0, "calloc(1, 2 MiB)");
    free(c);
    free(C);
    if (libc_run)
        return;
    void *a[5];
    CHECK((a[0] = memalign(64, 300)), "memalign");
    CHECK(posix_memalign(&a[1], 256, 1000) == 0, "posix_memalign");
    CHECK((a[2] = aligned_alloc(4096, 8192)), "aligned_alloc");
    CHECK((a[3] = valloc(5000)), "valloc");
    CHECK((a[4] = pvalloc(100)), "pvalloc");
    static const size_t asz[] = {300, 1000, 8192, 5000, 100};
    for (int i = 0; i < 5; i++) {
        CHECK_BYTES(a[i], asz[i], fresh, "an aligned block");
        free(a[i]);
        CHECK_BYTES(a[i], asz[i], freed, "a freed aligned block");
    }
    /* realloc: the old bytes kept, the new part filled; moved (small) and grown in place (large) */
    /* (realloc copies the old block's usable bytes, as glibc's does: the new part starts there) */
    uint8_t *r = malloc(100);
    size_t us = malloc_usable_size(r);
    memset(r, 'A', us);
    r = realloc(r, 3000);
    CHECK(r, "realloc to 3000");
    CHECK_BYTES(r, us, 'A', "realloc's old bytes");
    CHECK_BYTES(r + us, 3000 - us, fresh, "realloc's new part");
    uint8_t *L = malloc(1 << 20);
    us = malloc_usable_size(L);
    memset(L, 'B', us);
    uint8_t *L2 = realloc(L, 2 << 20);
    CHECK(L2, "realloc to 2 MiB");
    printf("a large block grown %s\n", L2 == L ? "in place" : "by a move");
    CHECK_BYTES(L2, us, 'B', "a large realloc's old bytes");
    CHECK_BYTES(L2 + us, (2 << 20) - us, fresh, "a large realloc's new part");
    free(r);
    free(L2);
    /* mallopt(M_PERTURB, 0) turns it off: a freed block keeps the program's bytes (checking
     * mode: its quarantine's fill, 0xdf) */
    CHECK(mallopt(M_PERTURB, 0) == 1, "mallopt(M_PERTURB, 0)");
    const char *check = getenv("FLATMALLOC_CHECK");
    uint8_t *q = malloc(200);
    memset(q, 0x33, 200);
    free(q);
    CHECK_BYTES(q, 200, check && !strcmp(check, "1") ? 0xdf : 0x33, "a block freed with perturb off again");
}

static void test_perturb(void)
{
    RUN_OK("MALLOC_PERTURB_=85: fresh blocks 0xaa, freed 0x55, calloc 0", "perturb", "85", "MALLOC_PERTURB_=85");
    RUN_OK("GLIBC_TUNABLES=glibc.malloc.perturb=85", "perturb", "85", "GLIBC_TUNABLES=glibc.malloc.perturb=85");
    RUN_OK("mallopt(M_PERTURB, 0x5a)", "perturb", "-1", "MALLOC_PERTURB_=0");
    /* read as glibc reads it (each also holds under --libc) */
    RUN_OK("MALLOC_PERTURB_=0x22 (hex)", "perturb", "34", "MALLOC_PERTURB_=0x22");
    RUN_OK("MALLOC_PERTURB_=042 (octal)", "perturb", "34", "MALLOC_PERTURB_=042");
    RUN_OK("MALLOC_PERTURB_=' 34xyz' (blanks, trailing text)", "perturb", "34", "MALLOC_PERTURB_= 34xyz");
    RUN_OK("GLIBC_TUNABLES wins over MALLOC_PERTURB_", "perturb", "34", "MALLOC_PERTURB_=17",
           "GLIBC_TUNABLES=glibc.malloc.perturb=34");
    RUN_OK("GLIBC_TUNABLES wins, given first", "perturb", "34", "GLIBC_TUNABLES=glibc.malloc.perturb=34",
           "MALLOC_PERTURB_=17");
    RUN_OK("an out-of-range tunable (300) leaves MALLOC_PERTURB_'s", "perturb", "34",
           "GLIBC_TUNABLES=glibc.malloc.perturb=300", "MALLOC_PERTURB_=34");
    RUN_OK("the last valid tunable wins", "perturb", "34",
           "GLIBC_TUNABLES=glibc.malloc.perturb=17:glibc.malloc.perturb=-1:bogus:glibc.malloc.perturb=34:glibc.malloc.perturb=256");
    RUN_OK("MALLOC_PERTURB_=255", "perturb", "255", "MALLOC_PERTURB_=255");
    if (fmt_flatmalloc) {
        RUN_OK("MALLOC_PERTURB_=85 in checking mode", "perturb", "85", "MALLOC_PERTURB_=85", "FLATMALLOC_CHECK=1");
        RUN_OK("mallopt(M_PERTURB) in checking mode", "perturb", "-1", "FLATMALLOC_CHECK=1");
    }
}

/* ---- MALLOC_CHECK_ ---- */

static void overrun_child(void)
{
    char *p = malloc(fmt_opaque(24));
    printf("usable %zu\n", malloc_usable_size(p));
    fflush(stdout);
    p[fmt_opaque(24)] = 'x';   /* one byte past the end */
    free(p);
}

static void expect_stop(const char *what, const char *var, const char *var2)
{
    char err[8192];
    int st = run(err, sizeof err, "overrun", "", var, var2, NULL);
    CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s: status 0x%x, not SIGABRT; stderr: %s", what, st, err);
    CHECK(strncmp(err, "flatmalloc: write past the end of a block: pointer 0x", 53) == 0 && strstr(err, "(class ") &&
              strchr(err, '\n') == err + strlen(err) - 1,
          "%s: stderr is not checking mode's one line: %s", what, err);
    printf("  ok: %s: %s", what, err);
}

static void test_check(void)
{
    if (!fmt_flatmalloc)
        return;   /* glibc 2.36 checks only with libc_malloc_debug.so preloaded */
    expect_stop("MALLOC_CHECK_=3", "MALLOC_CHECK_=3", NULL);
    expect_stop("MALLOC_CHECK_=1", "MALLOC_CHECK_=1", NULL);
    expect_stop("GLIBC_TUNABLES=glibc.malloc.check=2", "GLIBC_TUNABLES=glibc.malloc.check=2", NULL);
    expect_stop("MALLOC_CHECK_=0 then glibc.malloc.check=3", "MALLOC_CHECK_=0", "GLIBC_TUNABLES=glibc.malloc.check=3");
    RUN_OK("MALLOC_CHECK_=0: no checking mode", "overrun", "", "MALLOC_CHECK_=0");
    RUN_OK("MALLOC_CHECK_=4 (out of range) is ignored", "overrun", "", "MALLOC_CHECK_=4");
    RUN_OK("FLATMALLOC_CHECK=0 wins over MALLOC_CHECK_=3", "overrun", "", "MALLOC_CHECK_=3", "FLATMALLOC_CHECK=0");
}

/* ---- every tunable and variable, good and malformed ---- */

static void workload_child(void)
{
    void *v[256];
    for (int i = 0; i < 256; i++) {
        size_t n = (size_t)1 << (i % 17);
        CHECK((v[i] = malloc(n)), "malloc(%zu)", n);
        memset(v[i], i, n);
    }
    for (int i = 0; i < 256; i++)
        free(v[i]);
    malloc_trim(0);
}

static void test_accepted(void)
{
    static const char *const names[] = {"check", "top_pad", "perturb", "mmap_threshold", "trim_threshold", "mmap_max",
                                        "arena_max", "arena_test", "tcache_max", "tcache_count",
                                        "tcache_unsorted_limit", "mxfast", "hugetlb"};
    static const char *const aliases[] = {"MALLOC_CHECK_", "MALLOC_TOP_PAD_", "MALLOC_PERTURB_", "MALLOC_MMAP_THRESHOLD_",
                                          "MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_MAX_", "MALLOC_ARENA_MAX",
                                          "MALLOC_ARENA_TEST"};
    static const char *const values[] = {"0", "1", "3", "65536", "-1", "0x10", "0777", "", "abc", "12abc", "-",
                                         "99999999999999999999999", "4294967296", " 7", "\x1b[2J", "1:2"};
    /* per value, one child with every variable set to it, one with every tunable */
    char vars[sizeof aliases / sizeof aliases[0]][128], tun[2048], what[200];
    for (size_t k = 0; k < sizeof values / sizeof values[0]; k++) {
        char *v[sizeof aliases / sizeof aliases[0]];
        for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++)
            snprintf(v[i] = vars[i], sizeof vars[i], "%s=%s", aliases[i], values[k]);
        snprintf(what, sizeof what, "every MALLOC_* variable = '%s'", values[k]);
        RUN_OK(what, "workload", "", v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]);
        size_t len = (size_t)snprintf(tun, sizeof tun, "GLIBC_TUNABLES=");
        for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
            len += (size_t)snprintf(tun + len, sizeof tun - len, "%sglibc.malloc.%s=%s", i ? ":" : "", names[i], values[k]);
        snprintf(what, sizeof what, "every glibc.malloc.* tunable = '%s'", values[k]);
        RUN_OK(what, "workload", "", tun);
    }
    _Static_assert(sizeof aliases / sizeof aliases[0] == 8, "the variables, one argument each above");
    static const char *const odd[] = {"GLIBC_TUNABLES=", "GLIBC_TUNABLES=:::", "GLIBC_TUNABLES=glibc.malloc.",
                                      "GLIBC_TUNABLES=glibc.malloc.nonesuch=1", "GLIBC_TUNABLES=glibc.malloc.check",
                                      "GLIBC_TUNABLES=glibc.malloc.mxfast=1=2", "GLIBC_TUNABLES=glibc.cpu.hwcaps=-AVX2",
                                      "GLIBC_TUNABLES=glibc.malloc.arena_max=2:glibc.malloc.tcache_count=0:glibc.malloc.trim_threshold=0",
                                      "MALLOC_NONESUCH_=1", "MALLOC_CHECK", "MALLOC_PERTURB"};
    for (size_t i = 0; i < sizeof odd / sizeof odd[0]; i++)
        RUN_OK(odd[i], "workload", "", odd[i]);
}

/* ---- the trim threshold: the retained budget ---- */

/* A child: frees 96 MiB of large blocks and calls malloc_trim(0); prints how many bytes went
 * back to the system meanwhile (flatmalloc's statistics). how: "mallopt" first calls
 * mallopt(M_TRIM_THRESHOLD, -1). */
static void trim_child(const char *how)
{
    if (!strcmp(how, "mallopt"))
        CHECK(mallopt(M_TRIM_THRESHOLD, -1) == 1, "mallopt(M_TRIM_THRESHOLD, -1)");
    enum { N = 24 };
    void *v[N];
    for (int i = 0; i < N; i++) {
        CHECK((v[i] = malloc(4 << 20)), "malloc(4 MiB)");
        memset(v[i], 1, 4 << 20);
    }
    uint64_t before = fmt_stat("\"returned\":");
    for (int i = 0; i < N; i++)
        free(v[i]);
    malloc_trim(0);
    printf("returned %llu\n", (unsigned long long)(fmt_stat("\"returned\":") - before));
}

static uint64_t trim_returned(const char *how, const char *var, const char *var2)
{
    char out[8192];
    int fd[2];
    CHECK(pipe(fd) == 0, "pipe");
    int saved = dup(1);
    dup2(fd[1], 1);
    close(fd[1]);
    int st = run(out, sizeof out, "trim", how, var, var2, NULL);
    dup2(saved, 1);
    close(saved);
    char text[256] = "";
    ssize_t r = read(fd[0], text, sizeof text - 1);
    close(fd[0]);
    text[r > 0 ? r : 0] = 0;
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0 && !out[0], "trim child: status 0x%x, stderr %s", st, out);
    const char *s = strstr(text, "returned ");
    CHECK(s, "trim child printed: %s", text);
    return strtoull(s + 9, NULL, 10);
}

static void test_trim(void)
{
    if (!fmt_flatmalloc)
        return;   /* flatmalloc's statistics */
    uint64_t plain = trim_returned("", NULL, NULL);
    CHECK(plain >= (64u << 20), "without a threshold malloc_trim gave back only %llu bytes", (unsigned long long)plain);
    printf("  ok: no threshold: %llu bytes went back\n", (unsigned long long)plain);
    static const char *const keep[][2] = {{"MALLOC_TRIM_THRESHOLD_=-1", NULL},
                                          {"GLIBC_TUNABLES=glibc.malloc.trim_threshold=-1", NULL},
                                          {"MALLOC_TRIM_THRESHOLD_=0xffffffffffffffff", NULL},
                                          {"FLATMALLOC_PREFAULT=1", "FLATMALLOC_POOL=256M"}};
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        uint64_t r = trim_returned("", keep[i][0], keep[i][1]);
        CHECK(r == 0, "%s: %llu bytes went back", keep[i][0], (unsigned long long)r);
        printf("  ok: %s: no page went back\n", keep[i][0]);
    }
    uint64_t r = trim_returned("mallopt", NULL, NULL);
    CHECK(r == 0, "mallopt(M_TRIM_THRESHOLD, -1): %llu bytes went back", (unsigned long long)r);
    printf("  ok: mallopt(M_TRIM_THRESHOLD, -1): no page went back\n");
    r = trim_returned("", "MALLOC_TRIM_THRESHOLD_=-1", "FLATMALLOC_RETAIN=0");
    CHECK(r >= (64u << 20), "FLATMALLOC_RETAIN=0 with MALLOC_TRIM_THRESHOLD_=-1: only %llu bytes went back",
          (unsigned long long)r);
    printf("  ok: FLATMALLOC_RETAIN wins over MALLOC_TRIM_THRESHOLD_\n");
}

/* ---- mallopt's return values ---- */

static void mallopt_child(void)
{
    /* param, value, glibc 2.36's return (checked against glibc by the --libc run) */
    static const int cases[][3] = {
        {M_MXFAST, 0, 1}, {M_MXFAST, 64, 1}, {M_MXFAST, 160, 1}, {M_MXFAST, 161, 0}, {M_MXFAST, -1, 0},
        {M_MXFAST, INT_MAX, 0}, {M_MXFAST, 128, 1},
        {M_TRIM_THRESHOLD, 0, 1}, {M_TRIM_THRESHOLD, 128 << 10, 1}, {M_TRIM_THRESHOLD, INT_MAX, 1}, {M_TRIM_THRESHOLD, -1, 1},
        {M_TOP_PAD, 0, 1}, {M_TOP_PAD, 1 << 20, 1}, {M_TOP_PAD, -1, 1},
        {M_MMAP_THRESHOLD, 0, 1}, {M_MMAP_THRESHOLD, 32 << 20, 1}, {M_MMAP_THRESHOLD, (32 << 20) + 1, 1},
        {M_MMAP_THRESHOLD, INT_MAX, 1}, {M_MMAP_THRESHOLD, -1, 1}, {M_MMAP_THRESHOLD, 128 << 10, 1},
        {M_MMAP_MAX, 0, 1}, {M_MMAP_MAX, 65536, 1}, {M_MMAP_MAX, -1, 1},
        {M_CHECK_ACTION, 0, 1}, {M_CHECK_ACTION, 1, 1}, {M_CHECK_ACTION, 3, 1}, {M_CHECK_ACTION, -7, 1},
        {M_PERTURB, 0x55, 1}, {M_PERTURB, 256, 1}, {M_PERTURB, -1, 1}, {M_PERTURB, 0, 1},
        {M_ARENA_TEST, 8, 1}, {M_ARENA_TEST, 0, 1}, {M_ARENA_TEST, -1, 1},
        {M_ARENA_MAX, 1, 1}, {M_ARENA_MAX, 0, 1}, {M_ARENA_MAX, -1, 1},
        {2 /* M_NLBLKS */, 1, 1}, {3 /* M_GRAIN */, 1, 1}, {4 /* M_KEEP */, 1, 1}, {5, 0, 1}, {42, 7, 1},
        {-9, 1, 1}, {-100, 1, 1}, {INT_MIN, 0, 1}, {INT_MAX, 0, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int r = mallopt(cases[i][0], cases[i][1]);
        CHECK(r == cases[i][2], "mallopt(%d, %d) returned %d, glibc 2.36 returns %d", cases[i][0], cases[i][1], r,
              cases[i][2]);
        void *p = malloc(100);   /* and the allocator still works */
        CHECK(p, "malloc after mallopt(%d, %d)", cases[i][0], cases[i][1]);
        free(p);
    }
    printf("%zu mallopt calls returned glibc 2.36's values\n", sizeof cases / sizeof cases[0]);
}

/* ---- glibc's real-time recipe: no page fault on a refill ---- */

static long minflt(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_minflt;
}

/* A child: 400 MB of 1 KiB blocks, written, freed, filled again (and, under flatmalloc, freed,
 * malloc_trim(0) and filled once more): each refill takes no page fault. */
static void recipe_child(void)
{
    CHECK(mallopt(M_TRIM_THRESHOLD, -1) == 1, "mallopt(M_TRIM_THRESHOLD, -1)");
    CHECK(mallopt(M_MMAP_MAX, 0) == 1, "mallopt(M_MMAP_MAX, 0)");
    enum { N = 400000, SZ = 1000 };
    static void *v[N];
    memset(v, 0, sizeof v);   /* the array's own pages, before the count */
    for (int i = 0; i < N; i++) {
        CHECK((v[i] = malloc(SZ)), "malloc %d", i);
        memset(v[i], i, SZ);
    }
    int rounds = fmt_flatmalloc ? 2 : 1;
    for (int round = 0; round < rounds; round++) {
        for (int i = 0; i < N; i++)
            free(v[i]);
        if (round == 1)
            malloc_trim(0);
        long before = minflt();
        for (int i = 0; i < N; i++) {
            CHECK((v[i] = malloc(SZ)), "malloc %d", i);
            memset(v[i], i, SZ);
        }
        long faults = minflt() - before;
        CHECK(faults == 0, "the refill%s took %ld page faults", round ? " after malloc_trim(0)" : "", faults);
        printf("refill%s: 0 page faults\n", round ? " after malloc_trim(0)" : "");
    }
}

/* ---- malloc_info ---- */

/* A well-formedness check of the XML malloc_info writes: elements nest and close, attributes
 * are name="value"; fills the totals asked for. */
struct xml {
    const char *s;
    int depth;
    char stack[16][32];
};

static void xml_fail(struct xml *x, const char *why)
{
    FAIL("malloc_info's XML: %s at: %.60s", why, x->s);
}

static void xml_blank(struct xml *x)
{
    while (*x->s == ' ' || *x->s == '\n' || *x->s == '\t')
        x->s++;
}

static size_t xml_name(struct xml *x, char *out, size_t n)
{
    size_t k = 0;
    while ((*x->s >= 'a' && *x->s <= 'z') || (*x->s >= 'A' && *x->s <= 'Z') || *x->s == '_' ||
           (k && ((*x->s >= '0' && *x->s <= '9') || *x->s == '-' || *x->s == '.'))) {
        if (k + 1 < n)
            out[k++] = *x->s;
        x->s++;
    }
    out[k] = 0;
    return k;
}

/* Parses the document; for each element calls seen(name, attributes as "a=v a=v"). */
static void xml_parse(const char *text, void (*seen)(const char *name, const char *attrs))
{
    struct xml x = {text, 0, {{0}}};
    int roots = 0;
    for (;;) {
        xml_blank(&x);
        if (!*x.s)
            break;
        if (*x.s != '<')
            xml_fail(&x, "text outside a tag");
        x.s++;
        if (*x.s == '/') {
            x.s++;
            char name[32];
            xml_name(&x, name, sizeof name);
            if (!x.depth || strcmp(name, x.stack[x.depth - 1]))
                xml_fail(&x, "a closing tag that closes no open element");
            if (*x.s++ != '>')
                xml_fail(&x, "expected >");
            x.depth--;
            continue;
        }
        char name[32], attrs[512] = "";
        if (!xml_name(&x, name, sizeof name))
            xml_fail(&x, "expected an element name");
        if (!x.depth && roots++)
            xml_fail(&x, "a second root element");
        for (;;) {
            xml_blank(&x);
            if (*x.s == '/' || *x.s == '>')
                break;
            char an[32];
            if (!xml_name(&x, an, sizeof an) || *x.s++ != '=' || *x.s++ != '"')
                xml_fail(&x, "expected name=\"value\"");
            const char *v = x.s;
            while (*x.s && *x.s != '"' && *x.s != '<' && *x.s != '&')
                x.s++;
            if (*x.s != '"')
                xml_fail(&x, "an attribute value not closed");
            size_t len = strlen(attrs);
            snprintf(attrs + len, sizeof attrs - len, "%s%s=%.*s", len ? " " : "", an, (int)(x.s - v), v);
            x.s++;
        }
        seen(name, attrs);
        if (*x.s == '/') {
            if (*++x.s != '>')
                xml_fail(&x, "expected />");
            x.s++;
        } else {
            x.s++;
            if (x.depth == 16)
                xml_fail(&x, "too deep");
            snprintf(x.stack[x.depth++], 32, "%s", name);
        }
    }
    if (x.depth)
        xml_fail(&x, "elements left open");
    if (roots != 1)
        xml_fail(&x, "no root element");
}

static int xml_depth_seen;
static unsigned long long rest_count, rest_size, fast_size, mmap_count, mmap_size, sys_current, size48;
static bool root_ok, heap_ok;

static unsigned long long attr(const char *attrs, const char *name)
{
    char key[40];
    snprintf(key, sizeof key, "%s=", name);
    const char *a = strstr(attrs, key);
    return a ? strtoull(a + strlen(key), NULL, 10) : ~0ull;
}

static void on_element(const char *name, const char *attrs)
{
    xml_depth_seen++;
    if (!strcmp(name, "malloc"))
        root_ok = !strcmp(attrs, "version=1");
    if (!strcmp(name, "heap"))
        heap_ok = heap_ok || !strcmp(attrs, "nr=0");
    if (!strcmp(name, "size") && attr(attrs, "from") == 48)
        size48 = attr(attrs, "count");
    /* the last totals are the whole process's (after every heap) */
    if (!strcmp(name, "total") && strstr(attrs, "type=rest"))
        rest_count = attr(attrs, "count"), rest_size = attr(attrs, "size");
    if (!strcmp(name, "total") && strstr(attrs, "type=fast"))
        fast_size = attr(attrs, "size");
    if (!strcmp(name, "total") && strstr(attrs, "type=mmap"))
        mmap_count = attr(attrs, "count"), mmap_size = attr(attrs, "size");
    if (!strcmp(name, "system") && strstr(attrs, "type=current"))
        sys_current = attr(attrs, "size");
}

static void info_child(void)
{
    enum { N = 1000 };
    static void *v[N];
    for (int i = 0; i < N; i++)
        CHECK((v[i] = malloc(48)), "malloc(48)");
    for (int i = 0; i < N; i += 2)
        free(v[i]);
    void *big = malloc(8 << 20);
    CHECK(big, "malloc(8 MiB)");
    static char text[1 << 16];
    FILE *f = fmemopen(text, sizeof text - 1, "w");
    CHECK(f, "fmemopen");
    static char iobuf[1 << 16];
    setvbuf(f, iobuf, _IOFBF, sizeof iobuf);   /* a buffer of ours: printing allocates nothing */
    int r = malloc_info(0, f);
    struct mallinfo2 m = mallinfo2();
    fflush(f);
    long end = ftell(f);
    fclose(f);
    CHECK(r == 0, "malloc_info(0, f) returned %d", r);
    text[end > 0 ? end : 0] = 0;
    xml_parse(text, on_element);
    CHECK(root_ok && heap_ok, "malloc_info's XML lacks glibc's <malloc version=\"1\"> or <heap nr=\"0\">:\n%s", text);
    /* glibc adds each binned chunk's size with its in-use bit (its own <size from="65">): up to one
     * byte a block more than mallinfo2 counts */
    unsigned long long slack = libc_run ? rest_count : 0;
    CHECK(rest_count == m.ordblks && rest_size + fast_size >= m.fordblks && rest_size + fast_size - m.fordblks <= slack &&
              sys_current == m.arena &&
              mmap_count == m.hblks && mmap_size == m.hblkhd,
          "malloc_info's totals (rest %llu blocks %llu B, fast %llu B, mmap %llu %llu B, system %llu B) differ from "
          "mallinfo2's (ordblks %zu, fordblks %zu, hblks %zu, hblkhd %zu, arena %zu):\n%s",
          rest_count, rest_size, fast_size, mmap_count, mmap_size, sys_current, m.ordblks, m.fordblks, m.hblks,
          m.hblkhd, m.arena, text);
    if (fmt_flatmalloc)   /* it is flatmalloc's report: its 48-byte class holds the 500 freed blocks */
        CHECK(size48 != ~0ull && size48 >= N / 2, "no <size from=\"48\"> line with 500 free blocks:\n%s", text);
    printf("malloc_info: %d elements, well formed; totals equal mallinfo2's (rest %llu blocks, %llu bytes)\n",
           xml_depth_seen, rest_count, rest_size);
    errno = 0;
    r = malloc_info(1, stdout);
    CHECK(r == EINVAL && errno == 0, "malloc_info(1, stdout) returned %d, errno %d: glibc 2.36 returns EINVAL (%d), "
          "errno untouched", r, errno, EINVAL);
    printf("malloc_info(1, f) returns EINVAL, errno untouched\n");
    free(big);
    for (int i = 1; i < N; i += 2)
        free(v[i]);
}

/* ---- driver ---- */

static void child(const char *role, const char *arg)
{
    if (!strcmp(role, "perturb"))
        perturb_child(atoi(arg));
    else if (!strcmp(role, "overrun"))
        overrun_child();
    else if (!strcmp(role, "workload"))
        workload_child();
    else if (!strcmp(role, "trim"))
        trim_child(arg);
    else if (!strcmp(role, "mallopt"))
        mallopt_child();
    else if (!strcmp(role, "recipe"))
        recipe_child();
    else if (!strcmp(role, "info"))
        info_child();
    else
        FAIL("unknown role %s", role);
    exit(0);
}

int main(int argc, char **argv)
{
    self = argv[0];
    if (argc >= 4 && (!strcmp(argv[1], "--child") || !strcmp(argv[1], "--libc")) && argc == 4) {
        libc_run = !strcmp(argv[1], "--libc");
        fmt_flatmalloc = fmt_sym("flatmalloc_version") != NULL;
        setvbuf(stdout, NULL, _IOLBF, 0);
        child(argv[2], argv[3]);
    }
    int skip = fmt_init("glibc", argc, argv);
    libc_run = skip;
    const char *group = argc > 1 + skip ? argv[1 + skip] : "all";
    bool all = !strcmp(group, "all");
    if (all || !strcmp(group, "perturb")) {
        printf("== the perturb byte\n");
        test_perturb();
    }
    if (all || !strcmp(group, "check")) {
        printf("== MALLOC_CHECK_ and glibc.malloc.check\n");
        test_check();
    }
    if (all || !strcmp(group, "accepted")) {
        printf("== every glibc tunable and variable, good and malformed: no stop, no message\n");
        test_accepted();
    }
    if (all || !strcmp(group, "trim")) {
        printf("== the trim threshold is the retained budget\n");
        test_trim();
    }
    if (all || !strcmp(group, "mallopt")) {
        printf("== mallopt's return values\n");
        RUN_OK("mallopt: glibc 2.36's return value for every parameter", "mallopt", "", "MALLOC_PERTURB_=0");
    }
    if (all || !strcmp(group, "recipe")) {
        printf("== glibc's real-time recipe\n");
        RUN_OK("mallopt(M_TRIM_THRESHOLD, -1), mallopt(M_MMAP_MAX, 0): refilling 400 MB takes no page fault", "recipe", "",
               "MALLOC_PERTURB_=0");
    }
    if (all || !strcmp(group, "info")) {
        printf("== malloc_info\n");
        RUN_OK("malloc_info: glibc's XML, totals of mallinfo2", "info", "", "MALLOC_PERTURB_=0");
    }
    printf("glibc: all checks passed\n");
    return 0;
}
