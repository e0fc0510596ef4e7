/* Exhaustion of a small pool (run with FLATMALLOC_POOL=64M).
 *
 * For one small size at a time, one large size (1 MiB) and a seeded mix: allocate until NULL.
 * The failure must be NULL with errno ENOMEM, later requests keep failing cleanly, every block
 * handed out before holds its pattern, and one size got nearly the whole pool. After freeing
 * everything another size gets as many bytes (at least 95 %): spans went back to the pool. A request larger than the whole
 * pool fails with ENOMEM at once. The test's own bookkeeping lives in mmap'ed memory, so it does
 * not consume the pool it measures.
 *
 * `exhaust --libc` runs against glibc with the address space limited to 64 MiB more than at start. */
#include "fmtest.h"

#include <malloc.h>
#include <sys/mman.h>
#include <sys/resource.h>

#define KiB ((size_t)1 << 10)
#define MiB ((size_t)1 << 20)
#define POOL (64 * MiB)
#define MAX_BLOCKS (POOL / 16 + 1)

static void **blocks;  /* MAX_BLOCKS pointers, mmap'ed */
static size_t *sizes; /* size of each block in the mixed run */

static void *map(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(p != MAP_FAILED, "mmap of %zu bytes for the test's bookkeeping failed", bytes);
    return p;
}

/* The pattern fill of large blocks covers their ends and one word per 4 KiB: every page. */
static void fill(void *p, size_t n, uint64_t tag)
{
    if (n <= 8192) {
        fmt_fill(p, 0, n, tag);
        return;
    }
    fmt_fill(p, 0, 4096, tag);
    for (size_t o = 4096; o + 4096 < n; o += 4096)
        fmt_fill(p, o, o + 8, tag);
    fmt_fill(p, n - 4096, n, tag);
}

static void verify(const void *p, size_t n, uint64_t tag, const char *what)
{
    if (n <= 8192) {
        CHECK_PATTERN(p, 0, n, tag, what);
        return;
    }
    CHECK_PATTERN(p, 0, 4096, tag, what);
    for (size_t o = 4096; o + 4096 < n; o += 4096)
        CHECK_PATTERN(p, o, o + 8, tag, what);
    CHECK_PATTERN(p, n - 4096, n, tag, what);
}

static void expect_enomem(void *p, int err, const char *what)
{
    CHECK(p == NULL, "%s: expected NULL after exhaustion, got %p", what, p);
    CHECK(err == ENOMEM, "%s returned NULL with errno %d (%s), expected ENOMEM", what, err, strerror(err));
}

/* Allocates `size` until NULL; returns the count. `pass` names the run in messages. */
static size_t fill_until_null(size_t size, const char *pass)
{
    size_t n = 0;
    for (;;) {
        CHECK(n < MAX_BLOCKS, "%s: %zu blocks of %zu bytes without NULL: the pool is not 64 MiB", pass, n, size);
        errno = 0;
        void *p = malloc(size);
        int err = errno;
        if (p == NULL) {
            expect_enomem(p, err, pass);
            break;
        }
        fill(p, size, n * 0x9e3779b97f4a7c15ULL + size);
        blocks[n++] = p;
    }
    /* Nothing was freed: more requests of the same size keep failing, cleanly. */
    for (int k = 0; k < 10; k++) {
        errno = 0;
        void *p = malloc(size);
        int err = errno;
        expect_enomem(p, err, "malloc again right after the first NULL");
    }
    errno = 0;
    void *c = calloc(1, size);
    expect_enomem(c, errno, "calloc of the exhausted size");
    for (size_t i = 0; i < n; i++)
        verify(blocks[i], size, i * 0x9e3779b97f4a7c15ULL + size, "block allocated before exhaustion");
    return n;
}

static void free_all(size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(blocks[i]);
}

static void one_size(size_t size)
{
    char pass[96];
    snprintf(pass, sizeof pass, "malloc(%zu) until NULL, first pass", size);
    size_t first = fill_until_null(size, pass);
    CHECK(first > 0, "%s: the first malloc(%zu) already failed", pass, size);
    size_t usable = malloc_usable_size(blocks[0]);
    CHECK(!fmt_flatmalloc || first * usable <= POOL, "%s: %zu blocks of %zu usable bytes exceed the 64 MiB pool", pass, first, usable);
    /* One size may fill the pool: NULL only when (nearly) every byte of the heap is in use. */
    CHECK(!fmt_flatmalloc || first * usable >= POOL / 100 * 88, "%s: NULL after %zu blocks of %zu usable bytes, "
          "less than 88 %% of the 64 MiB pool", pass, first, usable);
    free_all(first);
    /* The freed memory serves another size: spans go back to the pool, not to the class. */
    size_t other = size == 64 ? 1000 : 64;
    snprintf(pass, sizeof pass, "malloc(%zu) until NULL, after freeing the %zu-byte blocks", other, size);
    size_t second = fill_until_null(other, pass);
    size_t other_usable = malloc_usable_size(blocks[0]);
    printf("exhaust: %zu-byte blocks: %zu until NULL; then %zu-byte blocks: %zu\n", size, first, other, second);
    CHECK(!fmt_flatmalloc || second * other_usable * 100 >= first * usable * 95, "after freeing all %zu blocks of %zu bytes only %zu "
          "blocks of %zu bytes could be allocated (less than 95 %% of the bytes)", first, size, second, other);
    free_all(second);
}

static size_t mix_size(fmt_rng *r)
{
    uint64_t x = fmt_below(r, 100);
    if (x < 60)
        return 1 + fmt_below(r, 512);
    if (x < 90)
        return 513 + fmt_below(r, 32768 - 512);
    return 32769 + fmt_below(r, 256 * KiB);
}

static size_t mixed_pass(uint64_t seed, const char *pass)
{
    fmt_rng r = {seed};
    size_t n = 0;
    for (;;) {
        CHECK(n < MAX_BLOCKS, "%s: too many blocks without NULL", pass);
        size_t sz = mix_size(&r);
        errno = 0;
        void *p = malloc(sz);
        int err = errno;
        if (p == NULL) {
            char what[128];
            snprintf(what, sizeof what, "%s: malloc(%zu) (block %zu)", pass, sz, n);
            expect_enomem(p, err, what);
            break;
        }
        fill(p, sz, n ^ seed);
        sizes[n] = sz;
        blocks[n++] = p;
    }
    for (size_t i = 0; i < n; i++)
        verify(blocks[i], sizes[i], i ^ seed, "mixed block allocated before exhaustion");
    return n;
}

static void mixed(void)
{
    uint64_t seed = 0xe4a5;
    size_t first = mixed_pass(seed, "mixed sizes until NULL, first pass");
    free_all(first);
    size_t second = mixed_pass(seed, "the same mixed sizes after freeing everything");
    printf("exhaust: mixed sizes: %zu until NULL, %zu again\n", first, second);
    CHECK(second * 100 >= first * 95, "mixed sizes: %zu blocks before NULL, only %zu after freeing them all",
          first, second);
    free_all(second);
}

static void larger_than_pool(void)
{
    size_t huge[] = {POOL + 1, POOL + MiB, 2 * POOL, 1024 * MiB, (size_t)64 << 30};
    char what[96];
    for (unsigned i = 0; i < sizeof huge / sizeof huge[0]; i++) {
        size_t n = fmt_opaque(huge[i]);
        errno = 0;
        void *p = malloc(n);
        snprintf(what, sizeof what, "malloc(%zu), larger than the pool", n);
        expect_enomem(p, errno, what);
        errno = 0;
        p = calloc(1, n);
        snprintf(what, sizeof what, "calloc(1, %zu)", n);
        expect_enomem(p, errno, what);
        errno = 0;
        p = aligned_alloc(4096, n);
        snprintf(what, sizeof what, "aligned_alloc(4096, %zu)", n);
        expect_enomem(p, errno, what);
        void *q = (void *)0x4242;
        int rc = posix_memalign(&q, 64, n);
        CHECK(rc == ENOMEM && q == (void *)0x4242, "posix_memalign(64, %zu) returned %d, *memptr %p", n, rc, q);
        unsigned char *b = malloc(1000);
        CHECK(b != NULL, "malloc(1000) failed");
        fmt_fill(b, 0, 1000, 77);
        errno = 0;
        p = realloc(b, n);
        snprintf(what, sizeof what, "realloc(p, %zu)", n);
        expect_enomem(p, errno, what);
        CHECK_PATTERN(b, 0, 1000, 77, "block after a realloc larger than the pool failed");
        free(b);
    }
    puts("exhaust: requests larger than the pool fail with ENOMEM");
}

int main(int argc, char **argv)
{
    int libc = fmt_init("exhaust", argc, argv);
    const char *pool = getenv("FLATMALLOC_POOL");
    if (fmt_flatmalloc)
        CHECK(pool && strcmp(pool, "64M") == 0, "run with FLATMALLOC_POOL=64M (it is %s)", pool ? pool : "unset");
    int (*heap_check)(void) = (int (*)(void))fmt_sym("flatmalloc_heap_check"); /* dlsym may allocate */
    blocks = map(MAX_BLOCKS * sizeof(void *));
    sizes = map(MAX_BLOCKS * sizeof(size_t));
    if (libc) { /* stand-in for a 64 MiB pool */
        FILE *f = fopen("/proc/self/statm", "r");
        unsigned long vm = 0;
        CHECK(f && fscanf(f, "%lu", &vm) == 1, "cannot read /proc/self/statm");
        fclose(f);
        struct rlimit rl = {vm * 4096 + POOL, vm * 4096 + POOL};
        CHECK(setrlimit(RLIMIT_AS, &rl) == 0, "setrlimit failed");
    }

    larger_than_pool();
    one_size(64);
    one_size(1000);
    one_size(32768);
    one_size(MiB);
    mixed();
    larger_than_pool();
    if (heap_check) {
        int faults = heap_check();
        CHECK(faults == 0, "flatmalloc_heap_check() found %d faults after exhaustion", faults);
        puts("exhaust: flatmalloc_heap_check() == 0");
    }
    puts("exhaust: all checks passed");
    return 0;
}
