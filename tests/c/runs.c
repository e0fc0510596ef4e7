/* runs: blocks another thread frees in the order they were handed out, or the reverse, reach
 * their holder as runs, one inbox slot for up to an outbox of them (src/remote.c), and come home
 * each once. This thread (O, holding a tag) allocates N blocks and writes its tag into each;
 * thread R checks every block's tag and frees them in address order, ROUNDS times, at 64 B (states in a shadow:
 * a run may be an outbox long) and at 2 KiB (states in the chunks' lines: a run ends with its
 * chunk's 8 blocks), forward and in reverse. Links the core and calls flatmalloc_* directly, so
 * it can read the inbox. Checked, each round:
 *
 *   contents  every block R frees holds the tag O wrote, and O's N blocks are N distinct ones:
 *             a block handed out twice would be written twice
 *   slots     the slots R's frees fill (R's outbox sent, O not yet refilled) are at most N / 16
 *             at 64 B and N / 4 at 2 KiB (one a block: N)
 *   home      after O takes everything home (tcache_collect), its inbox is empty
 *
 * meson runs it again as runs-realtime, under FLATMALLOC_PREFAULT=1, whose refills take 8
 * blocks at most: a slot's run of up to 32 is taken in parts. */
#include "fmtest.h"

#include <flatmalloc.h>

#undef FM_TAGS   /* fmtest.h's copy; internal.h has the real one */
#include "internal.h"

#define N 256
#define ROUNDS 200

static void *blk[N];
static size_t size;
static bool reverse;
static pthread_barrier_t step;

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

/* R frees the blocks in address order (or the reverse): the order a program that got them from
 * fresh spans frees them in, whatever order this round's bins handed them out in. */
static void *remote(void *arg)
{
    static void *order[N];
    for (int r = 0; r < ROUNDS; r++) {
        pthread_barrier_wait(&step);   /* O allocated round r */
        memcpy(order, blk, sizeof order);
        qsort(order, N, sizeof *order, cmp_ptr);
        for (int j = 0; j < N; j++) {
            void *p = order[reverse ? N - 1 - j : j];
            uint64_t tag = *(uint64_t *)p;
            CHECK(tag >> 32 == (uint64_t)r && (tag & 0xffffffff) < N && blk[tag & 0xffffffff] == p,
                  "%zu B, round %d: block %p's contents changed", size, r, p);
            flatmalloc_free(p);
        }
        flatmalloc_free(flatmalloc_malloc(3000));   /* a refill: the outbox goes */
        pthread_barrier_wait(&step);   /* R freed them */
    }
    return arg;
}

static void one_case(size_t sz, bool rev, uint32_t most_slots)
{
    size = sz;
    reverse = rev;
    struct fm_tag *t = fm_tc->t;
    pthread_barrier_init(&step, NULL, 2);
    pthread_t r;
    CHECK(pthread_create(&r, NULL, remote, NULL) == 0, "pthread_create");
    uint32_t worst = 0;
    for (int k = 0; k < ROUNDS; k++) {
        static void *sorted[N];
        for (int i = 0; i < N; i++) {
            CHECK(blk[i] = flatmalloc_malloc(size), "malloc");
            *(uint64_t *)blk[i] = (uint64_t)k << 32 | (uint64_t)i;
            sorted[i] = blk[i];
        }
        qsort(sorted, N, sizeof *sorted, cmp_ptr);
        for (int i = 1; i < N; i++)
            CHECK(sorted[i] != sorted[i - 1], "%zu B, round %d: block %p handed out twice", size, k, sorted[i]);
        pthread_barrier_wait(&step);
        pthread_barrier_wait(&step);
        uint32_t slots = atomic_load(&t->tail) - atomic_load(&t->head);
        CHECK(slots <= most_slots, "%zu B %s, round %d: %u slots for %d blocks freed in address order (at most %u)", size,
              rev ? "in reverse" : "forward", k, slots, N, most_slots);
        if (slots > worst)
            worst = slots;
    }
    pthread_join(r, NULL);
    pthread_barrier_destroy(&step);
    tcache_collect();
    CHECK(atomic_load(&t->tail) == atomic_load(&t->head), "%zu B: blocks wait in the inbox after the holder took them home",
          size);
    printf("ok  %zu B %s: %d rounds of %d blocks, at most %u slots a round\n", size, rev ? "in reverse" : "forward",
           ROUNDS, N, worst);
}

int main(int argc, char **argv)
{
    (void)argc;
    (void)argv;
    flatmalloc_free(flatmalloc_malloc(64));   /* this thread's cache and tag */
    CHECK(fm_tc->t, "this thread holds no tag");
    one_case(64, false, N / 16);
    one_case(64, true, N / 16);
    one_case(2048, false, N / 4);
    one_case(2048, true, N / 4);
    return 0;
}
