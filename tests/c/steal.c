/* steal: a shard whose thread sleeps lends its nearly empty spans to a busy one (class.c,
 * span_steal). The main thread fills 64 spans of 512 B blocks and frees all but one block in 16
 * (the kept ones spread over every span), then sleeps in pthread_join while a new thread, on a
 * shard of its own, allocates half as many blocks as were freed. Links the core and calls
 * flatmalloc_* directly, so it can read the class's spans. Checked:
 *
 *   spans     the class holds at most 2 spans more after the new thread's allocations than
 *             before (it opened 32 when each shard kept its spans) and at least 28 of them are
 *             spans that held the main thread's blocks
 *   contents  every kept block and every new block still holds its own pattern */
#include "fmtest.h"

#include <flatmalloc.h>

#undef FM_TAGS   /* fmtest.h's copy; internal.h has the real one */
#include "internal.h"

#define SIZE 512
#define SPANS 64

static void **kept, **fresh;
static size_t n_all, n_fresh;
static unsigned cls;

/* The first chunk of the span holding p. */
static uint32_t span_of(const void *p)
{
    uint64_t e = fm_pool.chunk[((uintptr_t)p - fm_pool.heap_base) >> FM_CHUNK_SHIFT].line.e;
    CHECK((e & 0xff) == cls + 1, "%p is not in a span of the %d B class", p, SIZE);
    return (uint32_t)(((e & ~0xffull) - fm_pool.heap_base) >> FM_CHUNK_SHIFT);
}

static uint64_t spans_now(void)
{
    uint64_t n = 0;
    for (unsigned s = 0; s < fm_pool.nshards; s++) n += fm_pool.cls[cls].sh[s].spans;
    return n;
}

static void *work(void *arg)
{
    (void)arg;
    for (size_t i = 0; i < n_fresh; i++) {
        CHECK((fresh[i] = flatmalloc_malloc(SIZE)), "malloc failed");
        fmt_fill(fresh[i], 0, SIZE, 2 * i + 1);
    }
    return NULL;
}

int main(void)
{
    flatmalloc_free(flatmalloc_malloc(1));   /* the pool exists */
    cls = (unsigned)fm_pool.cls_of[SIZE / FM_ALIGN] - 1;
    CHECK(fm_pool.cls[cls].size == SIZE && fm_pool.nshards >= 2, "a %d B class and two shards", SIZE);
    n_all = (size_t)SPANS * fm_pool.cls[cls].nblocks;
    CHECK((kept = calloc(n_all, sizeof *kept)) && (fresh = calloc(n_all, sizeof *fresh)), "calloc");
    for (size_t i = 0; i < n_all; i++) {
        CHECK((kept[i] = flatmalloc_malloc(SIZE)), "malloc failed");
        fmt_fill(kept[i], 0, SIZE, 2 * i);
    }
    uint8_t *mine = calloc(fm_pool.heap_size >> FM_CHUNK_SHIFT, 1);   /* spans of the main thread's blocks */
    CHECK(mine, "calloc");
    for (size_t i = 0; i < n_all; i++) {
        mine[span_of(kept[i])] = 1;
        if (i % 16) {
            flatmalloc_free(kept[i]);
            kept[i] = NULL;
        }
    }
    uint64_t before = spans_now();
    n_fresh = n_all * 15 / 16 / 2;
    pthread_t th;
    CHECK(pthread_create(&th, NULL, work, NULL) == 0, "pthread_create");
    CHECK(pthread_join(th, NULL) == 0, "pthread_join");
    uint64_t after = spans_now();
    uint8_t *seen = calloc(fm_pool.heap_size >> FM_CHUNK_SHIFT, 1);
    CHECK(seen, "calloc");
    size_t lent = 0;
    for (size_t i = 0; i < n_fresh; i++) {
        uint32_t s = span_of(fresh[i]);
        if (mine[s] && !seen[s]) lent++;
        seen[s] = 1;
    }
    printf("%zu blocks of %d B, 1 in 16 kept: %llu spans; %zu blocks by another thread: %llu spans, %zu of them "
           "the first thread's\n", n_all, SIZE, (unsigned long long)before, n_fresh, (unsigned long long)after, lent);
    CHECK(after <= before + 2, "the new thread opened %llu spans beside %llu nearly empty ones",
          (unsigned long long)(after - before), (unsigned long long)before);
    CHECK(lent >= 28, "the new thread's blocks lie in %zu of the first thread's spans", lent);
    for (size_t i = 0; i < n_all; i += 16)
        CHECK(fmt_find_bad(kept[i], 0, SIZE, 2 * i) == SIZE_MAX, "kept block %zu was overwritten", i);
    for (size_t i = 0; i < n_fresh; i++)
        CHECK(fmt_find_bad(fresh[i], 0, SIZE, 2 * i + 1) == SIZE_MAX, "new block %zu was overwritten", i);
    for (size_t i = 0; i < n_fresh; i++) flatmalloc_free(fresh[i]);
    for (size_t i = 0; i < n_all; i += 16) flatmalloc_free(kept[i]);
    puts("steal: all checks passed");
    return 0;
}
