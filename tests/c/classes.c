/* Exhaustive size -> class -> size: for every size up to the largest small class, the block
 * flatmalloc_malloc hands out has exactly the size of the smallest class that fits; above it
 * (sampled up to 64 MiB) blocks come from the large area and are at least as large as asked.
 * Links the static core and calls flatmalloc_* directly (no preload).
 *
 *   classes                       expect the default class list
 *   classes --classes 16,64,256   expect these classes (run with FLATMALLOC_CLASSES set to match) */
#include "fmtest.h"

#include <flatmalloc.h>

#define MAX_CLASSES 256
#define MiB ((size_t)1 << 20)

static size_t classes[MAX_CLASSES];
static int nclasses;

/* 16..128 in steps of 16, then four classes per doubling up to 64 KiB, eight from 4 to 16 KiB. */
static void default_classes(void)
{
    for (size_t s = 16; s <= 128; s += 16)
        classes[nclasses++] = s;
    for (size_t base = 128; base < 65536; base *= 2) {
        int steps = base >= 4096 && base < 16384 ? 8 : 4;
        for (int k = 1; k <= steps; k++)
            classes[nclasses++] = base + k * (base / steps);
    }
}

static void parse_classes(const char *list)
{
    char *end;
    while (*list) {
        unsigned long v = strtoul(list, &end, 10);
        CHECK(end != list && v > 0 && v % 16 == 0, "bad --classes list at \"%s\"", list);
        CHECK(nclasses == 0 || v > classes[nclasses - 1], "--classes must ascend");
        CHECK(nclasses < MAX_CLASSES, "too many classes");
        classes[nclasses++] = v;
        list = *end == ',' ? end + 1 : end;
    }
}

static size_t class_for(size_t n)
{
    for (int i = 0; i < nclasses; i++)
        if (classes[i] >= n)
            return classes[i];
    return 0;
}

/* Writes the whole usable size: every byte reported is the block's own. Large blocks are
 * written at their ends and one byte per page in between. */
static void touch(unsigned char *p, size_t us)
{
    if (us <= 65536) {
        memset(p, 0xEE, us);
        return;
    }
    memset(p, 0xEE, 4096);
    memset(p + us - 4096, 0xEE, 4096);
    for (size_t i = 4096; i < us; i += 4096)
        p[i] = 0xEE;
}

static void check_one(size_t n, const char *how)
{
    unsigned char *p = flatmalloc_malloc(n);
    CHECK(p != NULL, "flatmalloc_malloc(%zu) returned NULL (%s)", n, how);
    CHECK(((uintptr_t)p & 15) == 0, "flatmalloc_malloc(%zu) = %p is not 16-aligned", n, (void *)p);
    size_t us = flatmalloc_malloc_usable_size(p);
    size_t want = class_for(n);
    if (want) {
        CHECK(us == want, "size %zu: usable size %zu, expected class size %zu (%s)", n, us, want, how);
    } else {
        CHECK(us >= n, "large size %zu: usable size %zu is smaller (%s)", n, us, how);
        CHECK(us < 2 * n + 65536, "large size %zu: usable size %zu wastes more than half (%s)", n, us, how);
    }
    touch(p, us);
    flatmalloc_free(p);
}

int main(int argc, char **argv)
{
    const char *how = "default classes";
    if (argc > 2 && strcmp(argv[1], "--classes") == 0) {
        parse_classes(argv[2]);
        how = argv[2];
    } else {
        default_classes();
        CHECK(nclasses == 8 + 4 * 7 + 8 * 2 && classes[nclasses - 1] == 65536, "default class list miscomputed");
    }
    const char *env = getenv("FLATMALLOC_CLASSES");
    printf("classes: %d classes expected (%s), FLATMALLOC_CLASSES=%s\n", nclasses, how, env ? env : "(unset)");

    /* Every size from 0 to 64 KiB (all small sizes for the default list). */
    size_t top = classes[nclasses - 1] > 32768 ? classes[nclasses - 1] : 32768;
    for (size_t n = 0; n <= top; n++)
        check_one(n, how);

    /* Every size again with blocks kept alive, so a class's blocks are not just one recycled block:
     * consecutive blocks of one class must not overlap. */
    static unsigned char *live[4096];
    for (size_t n = 0; n <= top; n += 4096) {
        size_t m = 0;
        for (size_t k = n; k < n + 4096 && k <= top; k++, m++) {
            live[m] = flatmalloc_malloc(k);
            CHECK(live[m] != NULL, "flatmalloc_malloc(%zu) returned NULL", k);
            size_t us = flatmalloc_malloc_usable_size(live[m]);
            memset(live[m], (int)(k & 0xff), us < 4096 ? us : 4096);
        }
        for (size_t j = 0; j < m; j++) {
            size_t k = n + j, us = flatmalloc_malloc_usable_size(live[j]);
            for (size_t i = 0; i < (us < 4096 ? us : 4096); i++)
                CHECK(live[j][i] == (k & 0xff), "block of size %zu (live with its neighbours) overwritten "
                      "at byte %zu", k, i);
            flatmalloc_free(live[j]);
        }
    }

    /* Sampled large sizes up to 64 MiB: boundaries of each power of two and random ones. */
    fmt_rng rng = {2024};
    for (size_t pw = 32768; pw <= 64 * MiB; pw *= 2) {
        check_one(pw - 1, how);
        check_one(pw, how);
        check_one(pw + 1, how);
        check_one(pw + 16, how);
        for (int i = 0; i < 20; i++)
            check_one(pw + fmt_below(&rng, pw), how);
    }

    /* calloc and realloc land in the same classes. */
    for (size_t n = 1; n <= top; n += 7) {
        unsigned char *p = flatmalloc_calloc(1, n);
        CHECK(p != NULL, "flatmalloc_calloc(1, %zu) failed", n);
        size_t want = class_for(n);
        if (want)
            CHECK(flatmalloc_malloc_usable_size(p) == want, "calloc size %zu: usable %zu, expected %zu", n,
                  flatmalloc_malloc_usable_size(p), want);
        p = flatmalloc_realloc(p, n + 100);
        CHECK(p != NULL, "flatmalloc_realloc(%zu) failed", n + 100);
        want = class_for(n + 100);
        if (want)
            CHECK(flatmalloc_malloc_usable_size(p) == want, "realloc to %zu: usable %zu, expected %zu", n + 100,
                  flatmalloc_malloc_usable_size(p), want);
        else
            CHECK(flatmalloc_malloc_usable_size(p) >= n + 100, "realloc to %zu: usable %zu", n + 100,
                  flatmalloc_malloc_usable_size(p));
        flatmalloc_free(p);
    }

    int faults = flatmalloc_heap_check();
    CHECK(faults == 0, "flatmalloc_heap_check() found %d faults", faults);
    printf("classes: all sizes 0..%zu map to their class (%s), large sizes sampled to 64 MiB\n", top, how);
    return 0;
}
