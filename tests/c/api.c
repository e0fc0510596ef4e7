/* Every edge of the C allocation API, with glibc 2.36's semantics, through the preloaded library.
 *
 * The expected values were taken from the system glibc (run `api --libc` to see them hold there):
 * notably glibc 2.36's aligned_alloc accepts alignment 0 and rounds a non-power-of-two alignment up
 * (EINVAL only above SIZE_MAX/2+1), and pvalloc(0) returns a page-aligned minimal block.
 * Each group of checks runs in its own child process; the test fails if any group fails. */
#include "fmtest.h"

#include <malloc.h>
#include <stdint.h>
#include <sys/resource.h>
#include <sys/wait.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)

static size_t page;

static bool aligned_to(const void *p, size_t a)
{
    return ((uintptr_t)p & (a - 1)) == 0;
}

static size_t in_use(void)
{
    struct mallinfo2 mi = mallinfo2();
    return mi.uordblks;
}

/* glibc counts mmapped chunks in hblkhd, not uordblks; flatmalloc counts everything in uordblks. */
static size_t in_use_all(void)
{
    struct mallinfo2 mi = mallinfo2();
    return fmt_flatmalloc ? mi.uordblks : mi.uordblks + mi.hblkhd;
}

/* Fills p's whole usable size with tag's pattern. */
static size_t fill_usable(void *p, uint64_t tag)
{
    size_t us = malloc_usable_size(p);
    fmt_fill(p, 0, us, tag);
    return us;
}

/* ---- malloc(0) and friends ---- */

static void test_zero_sizes(void)
{
    enum { N = 100 };
    void *p[3 * N];
    int n = 0;
    for (int i = 0; i < N; i++) {
        p[n] = malloc(fmt_opaque(0));
        CHECK(p[n] != NULL, "malloc(0) call %d returned NULL", i);
        n++;
        p[n] = calloc(fmt_opaque(0), 16);
        CHECK(p[n] != NULL, "calloc(0, 16) call %d returned NULL", i);
        n++;
        p[n] = realloc(NULL, fmt_opaque(0));
        CHECK(p[n] != NULL, "realloc(NULL, 0) call %d returned NULL", i);
        n++;
    }
    for (int i = 0; i < n; i++) {
        CHECK(aligned_to(p[i], 16), "zero-size block %p is not 16-aligned", p[i]);
        for (int j = 0; j < i; j++)
            CHECK(p[i] != p[j], "zero-size allocations %d and %d returned the same pointer %p", j, i, p[i]);
    }
    for (int i = 0; i < n; i++)
        free(p[i]);

    void *q = calloc(16, fmt_opaque(0));
    CHECK(q != NULL, "calloc(16, 0) returned NULL");
    free(q);
    q = calloc(fmt_opaque(0), fmt_opaque(0));
    CHECK(q != NULL, "calloc(0, 0) returned NULL");
    free(q);
    q = reallocarray(NULL, 0, 0);
    CHECK(q != NULL, "reallocarray(NULL, 0, 0) returned NULL");
    free(q);
    q = aligned_alloc(64, fmt_opaque(0));
    CHECK(q != NULL && aligned_to(q, 64), "aligned_alloc(64, 0) returned %p", q);
    free(q);
    q = memalign(4096, fmt_opaque(0));
    CHECK(q != NULL && aligned_to(q, 4096), "memalign(4096, 0) returned %p", q);
    free(q);
    q = NULL;
    int r = posix_memalign(&q, 256, fmt_opaque(0));
    CHECK(r == 0 && q != NULL && aligned_to(q, 256), "posix_memalign(256, 0) returned %d, %p", r, q);
    free(q);
    puts("ok  malloc(0), calloc(0, n), realloc(NULL, 0) return unique freeable pointers");
}

/* ---- huge requests ---- */

#define EXPECT_NOMEM(call, desc)                                                                \
    do {                                                                                        \
        errno = 0;                                                                              \
        void *r_ = (call);                                                                      \
        CHECK(r_ == NULL, "%s returned %p, expected NULL", desc, r_);                           \
        CHECK(errno == ENOMEM, "%s set errno %d (%s), expected ENOMEM", desc, errno,            \
              strerror(errno));                                                                 \
    } while (0)

static void test_huge(void)
{
    size_t huge[] = {SIZE_MAX, SIZE_MAX - 1, SIZE_MAX - 4095, SIZE_MAX / 2, (size_t)PTRDIFF_MAX + 1,
                     (size_t)PTRDIFF_MAX - 4095, ((size_t)1 << 44) /* 16 TiB: larger than any pool */};
    int nhuge = sizeof huge / sizeof huge[0];
    if (!fmt_flatmalloc)
        nhuge--; /* glibc may overcommit 16 TiB */
    char desc[128];
    for (int i = 0; i < nhuge; i++) {
        size_t n = fmt_opaque(huge[i]);
        snprintf(desc, sizeof desc, "malloc(%#zx)", n);
        EXPECT_NOMEM(malloc(n), desc);
        snprintf(desc, sizeof desc, "calloc(1, %#zx)", n);
        EXPECT_NOMEM(calloc(1, n), desc);
        snprintf(desc, sizeof desc, "calloc(%#zx, 1)", n);
        EXPECT_NOMEM(calloc(n, 1), desc);
        snprintf(desc, sizeof desc, "realloc(NULL, %#zx)", n);
        EXPECT_NOMEM(realloc(NULL, n), desc);
        snprintf(desc, sizeof desc, "aligned_alloc(64, %#zx)", n);
        EXPECT_NOMEM(aligned_alloc(64, n), desc);
        snprintf(desc, sizeof desc, "memalign(2 MiB, %#zx)", n);
        EXPECT_NOMEM(memalign(2 * MiB, n), desc);
        snprintf(desc, sizeof desc, "valloc(%#zx)", n);
        EXPECT_NOMEM(valloc(n), desc);
        snprintf(desc, sizeof desc, "pvalloc(%#zx)", n);
        EXPECT_NOMEM(pvalloc(n), desc);
        void *sentinel = (void *)0x5a5a5a5a5a5a5a50;
        void *q = sentinel;
        errno = 0;
        int r = posix_memalign(&q, 4096, n);
        CHECK(r == ENOMEM, "posix_memalign(4096, %#zx) returned %d, expected ENOMEM", n, r);
        CHECK(errno == ENOMEM, "failed posix_memalign(4096, %#zx) left errno %d; glibc 2.36 sets ENOMEM",
              n, errno);
        CHECK(q == sentinel, "failed posix_memalign(4096, %#zx) changed *memptr to %p", n, q);
    }
    puts("ok  huge malloc/calloc/realloc/aligned_alloc/memalign/valloc/pvalloc/posix_memalign give ENOMEM");
}

static void test_overflow(void)
{
    size_t half = SIZE_MAX / 2 + 1;
    EXPECT_NOMEM(calloc(fmt_opaque(half), 2), "calloc(SIZE_MAX/2+1, 2)");
    EXPECT_NOMEM(calloc(2, fmt_opaque(half)), "calloc(2, SIZE_MAX/2+1)");
    EXPECT_NOMEM(calloc(fmt_opaque(SIZE_MAX), fmt_opaque(SIZE_MAX)), "calloc(SIZE_MAX, SIZE_MAX)");
    EXPECT_NOMEM(calloc(fmt_opaque((size_t)1 << 32), (size_t)1 << 32), "calloc(2^32, 2^32)");
    EXPECT_NOMEM(calloc(fmt_opaque(((size_t)1 << 32) + 1), ((size_t)1 << 32) - 1),
                 "calloc(2^32+1, 2^32-1)");
    EXPECT_NOMEM(reallocarray(NULL, fmt_opaque(half), 2), "reallocarray(NULL, SIZE_MAX/2+1, 2)");

    for (size_t sz = 100; sz <= 2 * MiB; sz *= 80) {
        uint64_t tag = 0xabc0 + sz;
        char *p = malloc(sz);
        CHECK(p != NULL, "malloc(%zu) failed", sz);
        fmt_fill(p, 0, sz, tag);
        EXPECT_NOMEM(reallocarray(p, fmt_opaque(half), 2), "reallocarray(p, SIZE_MAX/2+1, 2)");
        CHECK_PATTERN(p, 0, sz, tag, "block after a failed reallocarray (overflow)");
        EXPECT_NOMEM(reallocarray(p, 2, fmt_opaque(SIZE_MAX)), "reallocarray(p, 2, SIZE_MAX)");
        CHECK_PATTERN(p, 0, sz, tag, "block after a failed reallocarray (overflow)");
        char *q = reallocarray(p, 3, sz);
        CHECK(q != NULL, "reallocarray(p, 3, %zu) failed", sz);
        CHECK_PATTERN(q, 0, sz, tag, "block grown by reallocarray");
        fmt_fill(q, sz, 3 * sz, tag);
        CHECK(malloc_usable_size(q) >= 3 * sz, "reallocarray(p, 3, %zu): usable size %zu", sz,
              malloc_usable_size(q));
        free(q);
    }
    /* reallocarray(p, 0, n) is realloc(p, 0): frees and returns NULL. */
    void *p = malloc(100);
    CHECK(p != NULL, "malloc(100) failed");
    CHECK(reallocarray(p, 0, 5) == NULL, "reallocarray(p, 0, 5) did not return NULL");
    puts("ok  calloc/reallocarray overflow gives ENOMEM and leaves the block intact");
}

/* ---- realloc ---- */

static void test_realloc_edges(void)
{
    /* realloc(NULL, n) is malloc(n). */
    size_t sizes[] = {1, 100, 4096, 40000, 3 * MiB};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        char *p = realloc(NULL, sizes[i]);
        CHECK(p != NULL, "realloc(NULL, %zu) returned NULL", sizes[i]);
        CHECK(aligned_to(p, 16), "realloc(NULL, %zu) = %p not 16-aligned", sizes[i], (void *)p);
        CHECK(malloc_usable_size(p) >= sizes[i], "realloc(NULL, %zu): usable size %zu", sizes[i],
              malloc_usable_size(p));
        memset(p, 0x11, sizes[i]);
        free(p);
    }

    /* realloc(p, 0) frees p and returns NULL. */
    size_t zsizes[] = {1, 1000, 100000, 4 * MiB};
    for (unsigned i = 0; i < sizeof zsizes / sizeof zsizes[0]; i++) {
        size_t before = in_use_all();
        void *p = malloc(zsizes[i]);
        CHECK(p != NULL, "malloc(%zu) failed", zsizes[i]);
        memset(p, 1, zsizes[i]);
        size_t during = in_use_all();
        errno = 0;
        void *q = realloc(p, fmt_opaque(0));
        CHECK(q == NULL, "realloc(p of %zu bytes, 0) returned %p, expected NULL (glibc frees)",
              zsizes[i], q);
        size_t after = in_use_all();
        if (fmt_flatmalloc) { /* glibc's tcache blocks already count as in use */
            CHECK(during >= before + zsizes[i], "mallinfo2 in use grew by %zd for malloc(%zu)",
                  (ssize_t)(during - before), zsizes[i]);
            CHECK(after == before, "realloc(p of %zu bytes, 0) did not free it: uordblks %zu before "
                  "malloc, %zu after realloc", zsizes[i], before, after);
        }
    }

    /* A failed realloc returns NULL with ENOMEM and leaves the block as it was. */
    size_t keep[] = {24, 5000, 32768, 200000, 9 * MiB};
    size_t fail[] = {SIZE_MAX, SIZE_MAX - 15, (size_t)PTRDIFF_MAX + 1, SIZE_MAX / 2, (size_t)1 << 44};
    int nfail = fmt_flatmalloc ? 5 : 4;
    for (unsigned i = 0; i < sizeof keep / sizeof keep[0]; i++) {
        uint64_t tag = 0x7700 + i;
        char *p = malloc(keep[i]);
        CHECK(p != NULL, "malloc(%zu) failed", keep[i]);
        fmt_fill(p, 0, keep[i], tag);
        for (int j = 0; j < nfail; j++) {
            errno = 0;
            void *q = realloc(p, fmt_opaque(fail[j]));
            CHECK(q == NULL, "realloc(p of %zu, %#zx) returned %p, expected NULL", keep[i], fail[j], q);
            CHECK(errno == ENOMEM, "realloc(p of %zu, %#zx) set errno %d, expected ENOMEM", keep[i],
                  fail[j], errno);
            CHECK_PATTERN(p, 0, keep[i], tag, "block after a failed realloc");
        }
        free(p);
    }
    puts("ok  realloc(NULL, n) = malloc, realloc(p, 0) frees, failed realloc keeps the block");
}

/* Walks one block through a chain of sizes, checking that each move keeps min(old, new) bytes. */
static void realloc_chain(const size_t *chain, int n, uint64_t tag, const char *what)
{
    char *p = malloc(chain[0]);
    CHECK(p != NULL, "%s: malloc(%zu) failed", what, chain[0]);
    fmt_fill(p, 0, chain[0], tag);
    for (int i = 1; i < n; i++) {
        size_t old = chain[i - 1], new = chain[i];
        char *q = realloc(p, new);
        CHECK(q != NULL, "%s: realloc(%zu -> %zu) failed", what, old, new);
        CHECK(aligned_to(q, 16), "%s: realloc(%zu -> %zu) = %p not 16-aligned", what, old, new, (void *)q);
        CHECK(malloc_usable_size(q) >= new, "%s: realloc(%zu -> %zu): usable size %zu", what, old, new,
              malloc_usable_size(q));
        size_t keep = old < new ? old : new;
        size_t bad = fmt_find_bad(q, 0, keep, tag);
        if (bad != SIZE_MAX)
            FAIL("%s: realloc(%zu -> %zu) lost contents: byte %zu is 0x%02x, expected 0x%02x", what, old,
                 new, bad, (uint8_t)q[bad], fmt_byte(tag, bad));
        if (new > old)
            fmt_fill(q, old, new, tag);
        p = q;
    }
    CHECK_PATTERN(p, 0, chain[n - 1], tag, what);
    free(p);
}

static void test_realloc_contents(void)
{
    /* 65536 is the largest default small class: beyond it blocks come from the large area. */
    static const size_t chain[] = {
        1, 7, 16, 17, 100, 128, 129, 1000, 1024, 4096, 5000, 20000, 32768, /* small -> small */
        32769, 100000, 1 * MiB, 8 * MiB, 8 * MiB + 1, 12 * MiB,            /* -> large, large -> large */
        3 * MiB, 65536, 40000, 32768, 32767, 5000, 100, 1, 40, 1,           /* shrink, large -> small */
        2 * MiB, 24, 8 * MiB, 48, 33000, 32000, 33000,                      /* jumps both ways */
        100, 100, 99, 98, 97, 96, 95, 200, 199, 198,                        /* same class, in place */
    };
    realloc_chain(chain, sizeof chain / sizeof chain[0], 0x5eed0001, "fixed chain");

    /* Random walks: many transitions between small and large, both directions. */
    fmt_rng rng = {42};
    size_t walk[400];
    for (int w = 0; w < 20; w++) {
        for (int i = 0; i < 400; i++) {
            uint64_t r = fmt_below(&rng, 100);
            if (r < 60)
                walk[i] = 1 + fmt_below(&rng, 4096);
            else if (r < 85)
                walk[i] = 4096 + fmt_below(&rng, 32768 - 4096 + 1);
            else if (r < 99)
                walk[i] = 32769 + fmt_below(&rng, 2 * MiB);
            else
                walk[i] = 8 * MiB + fmt_below(&rng, MiB);
        }
        realloc_chain(walk, 400, 0x5eed0100 + w, "random chain");
    }

    /* Blocks from the aligned allocators realloc like any other. */
    size_t als[] = {64, 4096, 65536, 2 * MiB};
    for (unsigned i = 0; i < sizeof als / sizeof als[0]; i++) {
        for (size_t sz = 10; sz <= 3 * MiB; sz *= 31) {
            uint64_t tag = 0xa119 + sz + als[i];
            char *p = aligned_alloc(als[i], sz);
            CHECK(p != NULL, "aligned_alloc(%zu, %zu) failed", als[i], sz);
            fmt_fill(p, 0, sz, tag);
            char *q = realloc(p, 2 * sz + 5000);
            CHECK(q != NULL, "realloc of an aligned_alloc(%zu, %zu) block failed", als[i], sz);
            CHECK_PATTERN(q, 0, sz, tag, "aligned block grown by realloc");
            q = realloc(q, sz / 2 + 1);
            CHECK(q != NULL, "shrinking realloc of an aligned block failed");
            CHECK_PATTERN(q, 0, sz / 2 + 1, tag, "aligned block shrunk by realloc");
            free(q);
        }
    }
    puts("ok  realloc keeps contents across small->small, small->large, large->large, large->small");
}

/* ---- alignment ---- */

static void test_alignment(void)
{
    static const size_t sizes[] = {1, 17, 4096, 100000};
    /* Each request several times: where a block lands decides whether a wrong alignment shows. */
    enum { NS = sizeof sizes / sizeof sizes[0], REPS = 4 };
    for (size_t a = 1; a <= 64 * MiB; a *= 2) { /* above 2 MiB: larger than the pool's own alignment */
        void *blk[3 * NS * REPS];
        const char *fn[3 * NS * REPS];
        int n = 0;
        for (int s = 0; s < NS * REPS; s++) {
            size_t sz = sizes[s % NS];
            size_t want = a < 16 ? 16 : a; /* every block is at least 16-aligned */

            blk[n] = aligned_alloc(a, sz);
            fn[n] = "aligned_alloc";
            CHECK(blk[n] != NULL, "aligned_alloc(%zu, %zu) returned NULL", a, sz);
            n++;

            blk[n] = memalign(a, sz);
            fn[n] = "memalign";
            CHECK(blk[n] != NULL, "memalign(%zu, %zu) returned NULL", a, sz);
            n++;

            void *sentinel = (void *)0x1234560, *q = sentinel;
            int r = posix_memalign(&q, a, sz);
            if (a < sizeof(void *)) {
                CHECK(r == EINVAL, "posix_memalign(%zu, %zu) returned %d, expected EINVAL (alignment "
                      "below sizeof(void *))", a, sz, r);
                CHECK(q == sentinel, "posix_memalign(%zu, %zu) failed but changed *memptr", a, sz);
            } else {
                CHECK(r == 0 && q != NULL && q != sentinel, "posix_memalign(%zu, %zu) returned %d", a, sz, r);
                blk[n] = q;
                fn[n] = "posix_memalign";
                n++;
            }
            for (int i = n - (a < sizeof(void *) ? 2 : 3); i < n; i++) {
                CHECK(aligned_to(blk[i], want), "%s(%zu, %zu) = %p is not %zu-aligned", fn[i], a, sz,
                      blk[i], want);
                CHECK(malloc_usable_size(blk[i]) >= sz, "%s(%zu, %zu): usable size %zu < requested",
                      fn[i], a, sz, malloc_usable_size(blk[i]));
            }
        }
        /* All live at once, each filled to its usable size: no two overlap. */
        for (int i = 0; i < n; i++)
            fill_usable(blk[i], a * 64 + i);
        for (int i = 0; i < n; i++) {
            CHECK_PATTERN(blk[i], 0, malloc_usable_size(blk[i]), a * 64 + i, "aligned block");
            free(blk[i]);
        }
    }

    /* Bad alignments for posix_memalign: EINVAL, *memptr untouched. */
    size_t bad[] = {0, 1, 2, 3, 4, 12, 24, 40, 48, 100, 4097, 3 * 4096, SIZE_MAX, SIZE_MAX / 2,
                    (SIZE_MAX / 2 + 1) + 8};
    for (unsigned i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        void *sentinel = (void *)0xdeadbee0, *q = sentinel;
        errno = 1234;
        int r = posix_memalign(&q, fmt_opaque(bad[i]), 64);
        CHECK(r == EINVAL, "posix_memalign(&p, %#zx, 64) returned %d, expected EINVAL", bad[i], r);
        CHECK(errno == 1234, "posix_memalign(&p, %#zx, 64) changed errno to %d (glibc leaves it)", bad[i],
              errno);
        CHECK(q == sentinel, "posix_memalign(&p, %#zx, 64) failed but changed *memptr to %p", bad[i], q);
    }

    /* glibc 2.36 aligned_alloc/memalign: alignment 0 means "no constraint", a non-power-of-two is
     * rounded up to the next power of two, above SIZE_MAX/2+1 is EINVAL. */
    struct { size_t a, want; } odd[] = {{0, 16}, {3, 16}, {24, 32}, {48, 64}, {96, 128}, {100, 128},
                                         {3000, 4096}, {5000, 8192}, {(1 << 20) + 1, 2 * MiB}};
    for (unsigned i = 0; i < sizeof odd / sizeof odd[0]; i++) {
        errno = 0;
        void *p = aligned_alloc(fmt_opaque(odd[i].a), 1000);
        CHECK(p != NULL, "aligned_alloc(%zu, 1000) returned NULL (errno %d); glibc 2.36 rounds the "
              "alignment up to %zu", odd[i].a, errno, odd[i].want);
        CHECK(aligned_to(p, odd[i].want), "aligned_alloc(%zu, 1000) = %p is not %zu-aligned (glibc "
              "rounds the alignment up)", odd[i].a, p, odd[i].want);
        fill_usable(p, 1);
        free(p);
        p = memalign(fmt_opaque(odd[i].a), 1000);
        CHECK(p != NULL, "memalign(%zu, 1000) returned NULL (errno %d)", odd[i].a, errno);
        CHECK(aligned_to(p, odd[i].want), "memalign(%zu, 1000) = %p is not %zu-aligned", odd[i].a, p,
              odd[i].want);
        free(p);
    }
    size_t too_big[] = {SIZE_MAX, SIZE_MAX / 2 + 2, (SIZE_MAX / 2 + 1) + 4096};
    for (unsigned i = 0; i < sizeof too_big / sizeof too_big[0]; i++) {
        errno = 0;
        void *p = aligned_alloc(fmt_opaque(too_big[i]), 16);
        CHECK(p == NULL && errno == EINVAL, "aligned_alloc(%#zx, 16) returned %p errno %d, expected "
              "NULL/EINVAL", too_big[i], p, errno);
        errno = 0;
        p = memalign(fmt_opaque(too_big[i]), 16);
        CHECK(p == NULL && errno == EINVAL, "memalign(%#zx, 16) returned %p errno %d, expected "
              "NULL/EINVAL", too_big[i], p, errno);
    }
    errno = 0;
    void *p = aligned_alloc(fmt_opaque(SIZE_MAX / 2 + 1), 16);
    CHECK(p == NULL && errno == ENOMEM, "aligned_alloc(2^63, 16) returned %p errno %d, expected "
          "NULL/ENOMEM", p, errno);
    puts("ok  aligned_alloc/memalign/posix_memalign alignments 1 B..2 MiB, bad alignments");
}

static void test_valloc_pvalloc(void)
{
    size_t sizes[] = {1, 100, 4095, 4096, 4097, 5000, 65536, 100000, MiB + 1};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t sz = sizes[i], rounded = (sz + page - 1) / page * page;
        char *v = valloc(sz);
        CHECK(v != NULL && aligned_to(v, page), "valloc(%zu) = %p is not page-aligned", sz, (void *)v);
        CHECK(malloc_usable_size(v) >= sz, "valloc(%zu): usable size %zu", sz, malloc_usable_size(v));
        char *pv = pvalloc(sz);
        CHECK(pv != NULL && aligned_to(pv, page), "pvalloc(%zu) = %p is not page-aligned", sz, (void *)pv);
        CHECK(malloc_usable_size(pv) >= rounded, "pvalloc(%zu): usable size %zu < page-rounded %zu", sz,
              malloc_usable_size(pv), rounded);
        size_t uv = fill_usable(v, 0x7a11 + i), upv = fill_usable(pv, 0x7b11 + i);
        CHECK_PATTERN(v, 0, uv, 0x7a11 + i, "valloc block");
        CHECK_PATTERN(pv, 0, upv, 0x7b11 + i, "pvalloc block");
        free(v);
        free(pv);
    }
    void *z[8];
    for (int i = 0; i < 8; i++) {
        z[i] = pvalloc(fmt_opaque(0));
        CHECK(z[i] != NULL && aligned_to(z[i], page), "pvalloc(0) = %p is not a page-aligned block", z[i]);
        fill_usable(z[i], 0);
        for (int j = 0; j < i; j++)
            CHECK(z[i] != z[j], "pvalloc(0) returned %p twice", z[i]);
    }
    for (int i = 0; i < 8; i++)
        free(z[i]);
    void *v0 = valloc(fmt_opaque(0));
    CHECK(v0 != NULL && aligned_to(v0, page), "valloc(0) = %p is not page-aligned", v0);
    free(v0);
    puts("ok  valloc page alignment, pvalloc page rounding, pvalloc(0)");
}

/* ---- usable size, alignment of malloc ---- */

static void test_usable_size(void)
{
    CHECK(malloc_usable_size(NULL) == 0, "malloc_usable_size(NULL) = %zu", malloc_usable_size(NULL));

    /* Sizes 1..4096 all live at once, each filled to its whole usable size: all reported bytes are
     * the block's own. */
    enum { N = 4096 };
    static void *blk[N + 1];
    for (size_t n = 1; n <= N; n++) {
        blk[n] = malloc(n);
        CHECK(blk[n] != NULL, "malloc(%zu) failed", n);
        CHECK(aligned_to(blk[n], 16), "malloc(%zu) = %p is not 16-aligned", n, blk[n]);
        CHECK(malloc_usable_size(blk[n]) >= n, "malloc_usable_size(malloc(%zu)) = %zu", n,
              malloc_usable_size(blk[n]));
        fill_usable(blk[n], n);
    }
    for (size_t n = 1; n <= N; n++) {
        CHECK_PATTERN(blk[n], 0, malloc_usable_size(blk[n]), n, "block filled to its usable size");
        free(blk[n]);
    }

    size_t large[] = {4097, 8191, 32767, 32768, 32769, 65535, 65536, 100001, 131072, 250000, MiB - 1,
                      MiB, MiB + 1, 3 * MiB + 5, 8 * MiB, 8 * MiB + 17, 33 * MiB};
    enum { NL = sizeof large / sizeof large[0] };
    void *lb[NL];
    for (int i = 0; i < NL; i++) {
        lb[i] = malloc(large[i]);
        CHECK(lb[i] != NULL, "malloc(%zu) failed", large[i]);
        CHECK(aligned_to(lb[i], 16), "malloc(%zu) = %p is not 16-aligned", large[i], lb[i]);
        CHECK(malloc_usable_size(lb[i]) >= large[i], "malloc_usable_size(malloc(%zu)) = %zu", large[i],
              malloc_usable_size(lb[i]));
        fill_usable(lb[i], 0x1a000 + i);
    }
    for (int i = 0; i < NL; i++) {
        CHECK_PATTERN(lb[i], 0, malloc_usable_size(lb[i]), 0x1a000 + i, "large block filled to usable size");
        free(lb[i]);
    }
    puts("ok  malloc_usable_size(NULL) == 0, usable bytes all writable, malloc results 16-aligned");
}

/* ---- free and errno ---- */

static void test_free_errno(void)
{
    size_t sizes[] = {0, 1, 100, 4096, 32768, 40000, MiB, 8 * MiB, 64 * MiB};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = malloc(sizes[i]);
        CHECK(p != NULL, "malloc(%zu) failed", sizes[i]);
        memset(p, 3, sizes[i]);
        errno = 1234;
        free(p);
        CHECK(errno == 1234, "free of a %zu-byte block changed errno to %d", sizes[i], errno);
        p = memalign(65536, sizes[i]);
        CHECK(p != NULL, "memalign(65536, %zu) failed", sizes[i]);
        errno = 1234;
        free(p);
        CHECK(errno == 1234, "free of a memalign(65536, %zu) block changed errno to %d", sizes[i], errno);
    }
    errno = 1234;
    free(NULL);
    CHECK(errno == 1234, "free(NULL) changed errno to %d", errno);
    /* Freeing a block allocated and released in bulk (a thread cache flush) keeps errno too. */
    static void *many[20000];
    for (int i = 0; i < 20000; i++) {
        many[i] = malloc(64 + (i % 7) * 16);
        CHECK(many[i] != NULL, "malloc failed");
    }
    for (int i = 0; i < 20000; i++) {
        errno = 1234;
        free(many[i]);
        CHECK(errno == 1234, "free of block %d of 20000 changed errno to %d", i, errno);
    }
    puts("ok  free preserves errno (also free(NULL))");
}

/* ---- calloc zeroes recycled blocks ---- */

static void test_calloc_zero(void)
{
    size_t sizes[] = {1, 16, 24, 100, 1000, 4000, 32768, 40000, 100000, MiB, 8 * MiB};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        size_t sz = sizes[i];
        int reps = sz >= MiB ? 10 : 50;
        for (int r = 0; r < reps; r++) {
            unsigned char *p = malloc(sz);
            CHECK(p != NULL, "malloc(%zu) failed", sz);
            memset(p, 0xAA, malloc_usable_size(p));
            free(p);
            /* Alternate the ways of asking for sz bytes. */
            unsigned char *q = (r & 1) ? calloc(1, sz) : calloc(sz, 1);
            CHECK(q != NULL, "calloc for %zu bytes failed", sz);
            for (size_t k = 0; k < sz; k++)
                if (q[k])
                    FAIL("calloc(%zu) after free of a 0xAA-filled block: byte %zu is 0x%02x (iteration %d)",
                         sz, k, q[k], r);
            memset(q, 0xAA, malloc_usable_size(q));
            free(q);
        }
        /* Many recycled at once (whole thread-cache batches). */
        enum { M = 200 };
        static unsigned char *b[M];
        int m = sz >= MiB ? 8 : M;
        for (int k = 0; k < m; k++) {
            b[k] = malloc(sz);
            CHECK(b[k] != NULL, "malloc(%zu) failed", sz);
            memset(b[k], 0xAA, malloc_usable_size(b[k]));
        }
        for (int k = 0; k < m; k++)
            free(b[k]);
        for (int k = 0; k < m; k++) {
            b[k] = calloc(sz / 8 ? sz / 8 : 1, 8);
            CHECK(b[k] != NULL, "calloc for %zu bytes failed", sz);
            size_t len = (sz / 8 ? sz / 8 : 1) * 8;
            for (size_t j = 0; j < len; j++)
                if (b[k][j])
                    FAIL("calloc(%zu, 8) block %d of %d recycled: byte %zu is 0x%02x", len / 8, k, m, j, b[k][j]);
        }
        for (int k = 0; k < m; k++)
            free(b[k]);
    }
    puts("ok  calloc zeroes recycled blocks, small and large");
}

/* calloc of blocks of another class laid over memory a freed class wrote (its spans went back
 * to the pool with their pages): never handed out in their new span, yet not zero. And calloc
 * of fresh memory must not write it (outside checking mode and Valgrind): 2,000 blocks of 60,000 bytes
 * fault in about one page each, not fifteen. */
/* Blocks take flatmalloc's thread-cache path: not checking mode, not under a Valgrind tool
 * (which puts its vgpreload library in LD_PRELOAD), not the heap profiler (tests/heap samples
 * every few KiB, and a sampled block takes another path). */
static bool cache_path(void)
{
    const char *check = getenv("FLATMALLOC_CHECK"), *pre = getenv("LD_PRELOAD");
    return fmt_flatmalloc && !(check && strcmp(check, "0")) && !(pre && strstr(pre, "vgpreload")) &&
           !getenv("FLATMALLOC_HEAP");
}

static void test_calloc_reused_spans(void)
{
    enum { N = 40000, M = 2000 };
    static unsigned char *v[N];
    for (int i = 0; i < N; i++) {
        v[i] = malloc(1000);
        CHECK(v[i] != NULL, "malloc(1000) #%d failed", i);
        memset(v[i], 0xAA, 1000);
    }
    for (int i = 0; i < N; i++)
        free(v[i]);
    for (int i = 0; i < N / 4; i++) {   /* 40 MB of 4000 B blocks over the freed 1000 B spans */
        v[i] = calloc(1, 4000);
        CHECK(v[i] != NULL, "calloc(1, 4000) #%d failed", i);
        for (int k = 0; k < 4000; k++)
            if (v[i][k])
                FAIL("calloc(1, 4000) #%d over freed 1000 B spans: byte %d is 0x%02x", i, k, v[i][k]);
    }
    for (int i = 0; i < N / 4; i++)
        free(v[i]);
    /* checking mode and Valgrind's tools clear every block; so does the heap profiler for a
     * sampled block that reuses a run freed earlier (nearly every block here) */
    if (cache_path()) {
        struct rusage r0, r1;
        getrusage(RUSAGE_SELF, &r0);
        for (int i = 0; i < M; i++) {
            v[i] = calloc(60000, 1);
            CHECK(v[i] != NULL, "calloc(60000, 1) #%d failed", i);
            CHECK(v[i][0] == 0 && v[i][59999] == 0, "calloc(60000, 1) #%d not zero", i);
        }
        getrusage(RUSAGE_SELF, &r1);
        long faults = r1.ru_minflt - r0.ru_minflt;
        CHECK(faults < 4 * M, "%d fresh calloc(60000) blocks, two bytes read each, took %ld page faults (a memset takes 15 a block)", M, faults);
        /* the pages calloc read are the program's to write without a second fault (a read alone
         * would have mapped the shared zero page) */
        getrusage(RUSAGE_SELF, &r0);
        for (int i = 0; i < M; i++)
            v[i][0] = v[i][59999] = 1;
        getrusage(RUSAGE_SELF, &r1);
        faults = r1.ru_minflt - r0.ru_minflt;
        CHECK(faults < M / 4, "writing the two bytes calloc read of %d fresh blocks took %ld page faults", M, faults);
        for (int i = 0; i < M; i++)
            free(v[i]);
    }
    puts("ok  calloc zeroes blocks over freed spans of another class; fresh blocks are not written, and take no second fault when the program writes them");
}

/* ---- address order ---- */

/* n blocks of size in a row into v, each filled with its index's low byte; then checked, freed. */
static void run_of(char **v, int n, size_t size)
{
    for (int i = 0; i < n; i++) {
        v[i] = malloc(size);
        CHECK(v[i] != NULL, "malloc(%zu) #%d failed", size, i);
        memset(v[i], i & 0xff, size);
    }
}

static void run_free(char **v, int n, size_t size)
{
    for (int i = 0; i < n; i++) {
        CHECK((unsigned char)v[i][size - 1] == (i & 0xff), "block #%d of %zu B was overwritten", i, size);
        free(v[i]);
    }
}

/* A run of mallocs of one size hands blocks out in address order (a program that fills them in
 * turn walks memory forwards): in a fresh process, all but the steps from one span to the next.
 * Runs first, while the class has no freed blocks. */
static void test_address_order(void)
{
    enum { N = 4000 };
    static char *v[N];
    int up = 0;
    run_of(v, N, 150);
    for (int i = 1; i < N; i++)
        up += v[i] > v[i - 1];
    run_free(v, N, 150);
    if (cache_path())
        CHECK(up >= N - 1 - N / 100, "%d of %d consecutive blocks of 150 B came at a higher address", up, N - 1);
    puts("ok  consecutive blocks of one size come in address order");
}

/* ---- line phase ---- */

/* Blocks of 80 B repeat their offsets in cache lines every 4 blocks. Were a span a whole number
 * of such periods, a program allocating in a pattern of 4 (a buffer and three nodes, say) would
 * find each kind of block at one offset in every span: all of them across two lines, or none.
 * A span holds one block fewer, so the phase moves from span to span: of 6,000 blocks of 72 B in
 * a row (six spans), the first of each 4 meets all four offsets. */
static void test_line_phase(void)
{
    enum { N = 6000 };
    static char *v[N];
    unsigned seen = 0;
    run_of(v, N, 72);
    for (int i = 0; i < N; i += 4)
        seen |= 1u << ((uintptr_t)v[i] % 64 / 16);
    run_free(v, N, 72);
    if (cache_path())
        CHECK(seen == 15, "the first of each 4 blocks of 72 B met line offsets %#x (a bit per 16 B), not all four", seen);
    puts("ok  blocks of 80 B meet every line offset at the same place in a pattern of 4");
}

/* ---- free_sized, free_aligned_sized ---- */

static void test_free_sized(void)
{
    void (*fs)(void *, size_t) = (void (*)(void *, size_t))dlsym(RTLD_DEFAULT, "free_sized");
    void (*fas)(void *, size_t, size_t) =
        (void (*)(void *, size_t, size_t))dlsym(RTLD_DEFAULT, "free_aligned_sized");
    if (fmt_flatmalloc) {
        CHECK(fs != NULL, "free_sized is not exported by the preloaded library");
        CHECK(fas != NULL, "free_aligned_sized is not exported by the preloaded library");
    } else if (!fs || !fas) {
        puts("--  free_sized/free_aligned_sized: absent from the system libc (checked under flatmalloc)");
        return;
    }
    size_t base = in_use_all();
    size_t sizes[] = {1, 64, 1000, 32768, 40000, 2 * MiB};
    for (unsigned i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        void *p = malloc(sizes[i]);
        CHECK(p != NULL, "malloc failed");
        memset(p, 1, sizes[i]);
        fs(p, sizes[i]);
        p = calloc(sizes[i], 1);
        CHECK(p != NULL, "calloc failed");
        fs(p, sizes[i]);
        size_t al[] = {16, 64, 4096, 65536};
        for (unsigned j = 0; j < 4; j++) {
            /* C23: the size passed to aligned_alloc; keep it a multiple of the alignment. */
            size_t sz = (sizes[i] + al[j] - 1) / al[j] * al[j];
            p = aligned_alloc(al[j], sz);
            CHECK(p != NULL && aligned_to(p, al[j]), "aligned_alloc(%zu, %zu) failed", al[j], sz);
            memset(p, 2, sz);
            fas(p, al[j], sz);
        }
    }
    fs(NULL, 0);
    fas(NULL, 64, 0);
    size_t after = in_use_all();
    if (fmt_flatmalloc)
        CHECK(after == base, "free_sized/free_aligned_sized did not release their blocks: uordblks %zu "
              "before, %zu after", base, after);
    puts("ok  free_sized, free_aligned_sized");
}

/* ---- trim, stats, mallinfo, mallopt ---- */

static void test_trim_stats(void)
{
    enum { N = 300 };
    static char *b[N];
    static size_t sz[N];
    fmt_rng rng = {7};
    for (int i = 0; i < N; i++) {
        sz[i] = (i % 10 == 0) ? 40000 + fmt_below(&rng, 3 * MiB) : 1 + fmt_below(&rng, 8000);
        b[i] = malloc(sz[i]);
        CHECK(b[i] != NULL, "malloc(%zu) failed", sz[i]);
        fmt_fill(b[i], 0, sz[i], 0x7e1000 + i);
    }
    for (int i = 0; i < N; i += 2) {
        free(b[i]);
        b[i] = NULL;
    }
    size_t pads[] = {0, 4096, MiB};
    for (unsigned k = 0; k < 3; k++) {
        int r = malloc_trim(pads[k]);
        CHECK(r == 0 || r == 1, "malloc_trim(%zu) returned %d", pads[k], r);
        for (int i = 1; i < N; i += 2)
            CHECK_PATTERN(b[i], 0, sz[i], 0x7e1000 + i, "live block after malloc_trim");
    }
    fflush(stdout);
    malloc_stats();
    for (int i = 1; i < N; i += 2) {
        CHECK_PATTERN(b[i], 0, sz[i], 0x7e1000 + i, "live block after malloc_stats");
        free(b[i]);
    }
    puts("ok  malloc_trim returns 0/1 and keeps live blocks, malloc_stats runs");
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
static void test_mallinfo(void)
{
    enum { N = 1024, SZ = 4000 }; /* small blocks: glibc counts them in uordblks too */
    static void *b[N];
    size_t before = in_use();
    struct mallinfo old_before = mallinfo();
    for (int i = 0; i < N; i++) {
        b[i] = malloc(SZ);
        CHECK(b[i] != NULL, "malloc failed");
        memset(b[i], 5, SZ);
    }
    size_t during = in_use();
    struct mallinfo old_during = mallinfo();
    CHECK(during >= before + (size_t)N * SZ, "mallinfo2().uordblks grew by %zd after allocating %zu bytes",
          (ssize_t)(during - before), (size_t)N * SZ);
    CHECK(old_during.uordblks >= old_before.uordblks + N * SZ,
          "mallinfo().uordblks grew by %d after allocating %d bytes", old_during.uordblks - old_before.uordblks,
          N * SZ);
    struct mallinfo2 mi = mallinfo2();
    CHECK(mi.arena >= mi.uordblks || mi.hblkhd > 0 || fmt_flatmalloc,
          "mallinfo2: arena %zu < uordblks %zu", mi.arena, mi.uordblks);
    for (int i = 0; i < N; i++)
        free(b[i]);
    size_t after = in_use();
    if (fmt_flatmalloc)
        CHECK(after == before, "mallinfo2().uordblks is %zu after freeing everything, %zu before", after,
              before);
    else /* glibc counts its tcache as in use */
        CHECK(after < before + (size_t)N * SZ / 8, "mallinfo2().uordblks did not shrink back: %zu before, "
              "%zu during, %zu after", before, during, after);

    /* Large blocks count too (glibc: in hblkhd). */
    before = in_use_all();
    void *l[4];
    for (int i = 0; i < 4; i++) {
        l[i] = malloc(3 * MiB);
        CHECK(l[i] != NULL, "malloc(3 MiB) failed");
        memset(l[i], 1, 3 * MiB);
    }
    during = in_use_all();
    CHECK(during >= before + 12 * MiB, "in-use bytes grew by %zd after allocating 12 MiB in large blocks",
          (ssize_t)(during - before));
    for (int i = 0; i < 4; i++)
        free(l[i]);
    after = in_use_all();
    if (fmt_flatmalloc)
        CHECK(after == before, "mallinfo2().uordblks is %zu after freeing 4 large blocks, %zu before",
              after, before);
    else
        CHECK(after < during, "in-use bytes did not shrink after freeing large blocks");
    puts("ok  mallinfo/mallinfo2 in-use bytes grow by what was allocated and shrink back");
}
#pragma GCC diagnostic pop

static void test_mallopt(void)
{
    struct { int param, value; const char *name; } opts[] = {
        {M_ARENA_MAX, 4, "M_ARENA_MAX"},        {M_ARENA_TEST, 8, "M_ARENA_TEST"},
        {M_MMAP_THRESHOLD, 256 * 1024, "M_MMAP_THRESHOLD"}, {M_TRIM_THRESHOLD, 256 * 1024, "M_TRIM_THRESHOLD"},
        {M_TOP_PAD, 65536, "M_TOP_PAD"},        {M_MMAP_MAX, 65536, "M_MMAP_MAX"},
        {M_MXFAST, 64, "M_MXFAST"},
    };
    for (unsigned i = 0; i < sizeof opts / sizeof opts[0]; i++) {
        int r = mallopt(opts[i].param, opts[i].value);
        CHECK(r == 1, "mallopt(%s, %d) returned %d, expected 1", opts[i].name, opts[i].value, r);
    }
    void *p = malloc(300000);
    CHECK(p != NULL, "malloc after mallopt failed");
    memset(p, 1, 300000);
    free(p);
    puts("ok  mallopt returns 1 for M_ARENA_MAX, M_ARENA_TEST, M_MMAP_THRESHOLD, ...");
}

/* ---- every entry point is the library's ---- */

static void test_entry_points(void)
{
    if (!fmt_flatmalloc) {
        puts("--  entry points: checked under flatmalloc only");
        return;
    }
    Dl_info self;
    CHECK(dladdr(dlsym(RTLD_DEFAULT, "flatmalloc_version"), &self) && self.dli_fbase,
          "dladdr(flatmalloc_version) failed");
    static const char *const must[] = {
        "malloc", "free", "calloc", "realloc", "reallocarray", "posix_memalign", "aligned_alloc",
        "memalign", "valloc", "pvalloc", "malloc_usable_size", "free_sized", "free_aligned_sized",
        "malloc_trim", "malloc_stats", "mallinfo", "mallinfo2", "mallopt",
        /* glibc exports these; a program calling one must not get glibc's heap */
        "__libc_malloc", "__libc_free", "__libc_calloc", "__libc_realloc", "__libc_memalign",
        "__libc_valloc", "__libc_pvalloc",
    };
    for (unsigned i = 0; i < sizeof must / sizeof must[0]; i++) {
        void *s = dlsym(RTLD_DEFAULT, must[i]);
        CHECK(s != NULL, "%s is not resolvable", must[i]);
        Dl_info info;
        CHECK(dladdr(s, &info), "dladdr(%s) failed", must[i]);
        CHECK(info.dli_fbase == self.dli_fbase, "%s resolves to %s, not to the preloaded %s", must[i],
              info.dli_fname, self.dli_fname);
    }
    /* Blocks cross between the __libc_ names and the plain ones. */
    void *(*lm)(size_t) = (void *(*)(size_t))dlsym(RTLD_DEFAULT, "__libc_malloc");
    void (*lf)(void *) = (void (*)(void *))dlsym(RTLD_DEFAULT, "__libc_free");
    void *(*lr)(void *, size_t) = (void *(*)(void *, size_t))dlsym(RTLD_DEFAULT, "__libc_realloc");
    for (size_t sz = 8; sz <= 4 * MiB; sz *= 4) {
        char *p = lm(sz);
        CHECK(p != NULL, "__libc_malloc(%zu) failed", sz);
        fmt_fill(p, 0, sz, sz);
        CHECK(malloc_usable_size(p) >= sz, "malloc_usable_size of a __libc_malloc block");
        p = realloc(p, sz * 2);
        CHECK(p != NULL, "realloc of a __libc_malloc block failed");
        CHECK_PATTERN(p, 0, sz, sz, "__libc_malloc block after realloc");
        free(p);
        p = malloc(sz);
        CHECK(p != NULL, "malloc failed");
        fmt_fill(p, 0, sz, sz);
        p = lr(p, sz + 1);
        CHECK(p != NULL, "__libc_realloc failed");
        CHECK_PATTERN(p, 0, sz, sz, "block after __libc_realloc");
        lf(p);
    }
    puts("ok  every allocation entry point resolves into the preloaded library");
}

/* Each group runs in a child process, so one failure does not hide the next group's. */
static int failed_groups;

static void run(const char *name, void (*group)(void))
{
    pid_t pid = fork();
    CHECK(pid >= 0, "fork failed: %s", strerror(errno));
    if (pid == 0) {
        group();
        _exit(0);
    }
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid failed");
    if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
        return;
    failed_groups++;
    if (WIFSIGNALED(status))
        fprintf(stderr, "FAILED group %s: killed by signal %d (%s)\n", name, WTERMSIG(status),
                strsignal(WTERMSIG(status)));
    else
        fprintf(stderr, "FAILED group %s (exit status %d)\n", name, WEXITSTATUS(status));
}

int main(int argc, char **argv)
{
    fmt_init("api", argc, argv);
    page = (size_t)sysconf(_SC_PAGESIZE);
    run("address order", test_address_order);
    run("line phase", test_line_phase);
    run("entry points", test_entry_points);
    run("zero sizes", test_zero_sizes);
    run("huge sizes", test_huge);
    run("calloc/reallocarray overflow", test_overflow);
    run("realloc edges", test_realloc_edges);
    run("realloc contents", test_realloc_contents);
    run("alignment", test_alignment);
    run("valloc/pvalloc", test_valloc_pvalloc);
    run("usable size", test_usable_size);
    run("free and errno", test_free_errno);
    run("calloc zeroes recycled blocks", test_calloc_zero);
    run("calloc over freed spans, and of fresh memory", test_calloc_reused_spans);
    run("free_sized", test_free_sized);
    run("malloc_trim/malloc_stats", test_trim_stats);
    run("mallinfo", test_mallinfo);
    run("mallopt", test_mallopt);
    if (failed_groups) {
        fprintf(stderr, "api: %d group(s) failed\n", failed_groups);
        return 1;
    }
    puts("api: all checks passed");
    return 0;
}
