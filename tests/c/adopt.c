/* adopt: blocks freed for a holder that has fallen behind are taken home by another thread
 * (issue 53; src/remote.c), and a racing double free still never hands a block out twice,
 * also when the holder is stopped between its load of the block's state and its store. Links
 * the core and calls flatmalloc_* directly (no preload), so it can find a block's state byte.
 *
 *   behind    thread O allocates 2,000 blocks of 2 KiB and waits; thread R frees them all, then
 *             allocates 2,000 of 2 KiB: while O waits, R's refills take O's blocks (at least
 *             half of R's blocks are O's old ones)
 *   rewind    this thread (O, holding a tag) allocates 192 blocks of 2 KiB, thread R checks and
 *             frees them, 521 times: the 100,032 blocks pass through O's inbox, whose ring goes
 *             back to its first slot whenever O finds it empty, so at most 4 of its pages are
 *             resident (all of them when the ring goes round). Run first: O's tag is new
 *   stopped   O frees block b of 700 of its blocks while R frees b too: O's store of b's state
 *             faults (the page holding the state made read-only; the handler makes it writable
 *             again), and in the handler, between O's load and its store, R frees the other
 *             699 (350 before b, 349 after it) and allocates 700 (its refills adopt what waits
 *             for O); then O's store completes and O allocates on. In each of N processes (100),
 *             no block is handed to both: R gets none of b, and the process either stops with
 *             "double free (by two threads at once)" when O takes b home, or ends cleanly
 *             (checking mode: O marked b's header freed before its load, so R's free of b stops
 *             with "double free" first)
 * Default mode only: checking mode's quarantine holds freed blocks back (up to 8 MiB of them)
 * and the state store of a free happens when the quarantine lets the block go, in whichever
 * thread frees then, so neither case can be staged there; owner-race-checking-mode covers
 * checking mode's racing frees.
 *
 *   adopt [rewind | behind | stopped [N]] */
#include "fmtest.h"

#include <flatmalloc.h>
#include <semaphore.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>

#undef FM_TAGS   /* fmtest.h's copy; internal.h has the real one */
#include "internal.h"

#define SIZE 2048   /* a class whose states sit in the chunks' lines */

/* ---- behind ----------------------------------------------------------------------------- */
#define NB 2000
static void *ob[NB];
static pthread_barrier_t step;

static void *behind_owner(void *arg)
{
    for (int i = 0; i < NB; i++)
        CHECK(ob[i] = flatmalloc_malloc(SIZE), "malloc");
    pthread_barrier_wait(&step);   /* allocated */
    pthread_barrier_wait(&step);   /* R is done: O was off its CPU all along */
    return arg;
}

static int cmp_ptr(const void *a, const void *b)
{
    uintptr_t x = *(const uintptr_t *)a, y = *(const uintptr_t *)b;
    return x < y ? -1 : x > y;
}

static void case_behind(void)
{
    pthread_barrier_init(&step, NULL, 2);
    pthread_t o;
    CHECK(pthread_create(&o, NULL, behind_owner, NULL) == 0, "pthread_create");
    pthread_barrier_wait(&step);
    for (int i = 0; i < NB; i++)
        flatmalloc_free(ob[i]);
    static void *rb[NB];
    for (int i = 0; i < NB; i++)
        CHECK(rb[i] = flatmalloc_malloc(SIZE), "malloc");
    qsort(ob, NB, sizeof *ob, cmp_ptr);
    int reused = 0;
    for (int i = 0; i < NB; i++)
        reused += bsearch(&rb[i], ob, NB, sizeof *ob, cmp_ptr) != NULL;
    pthread_barrier_wait(&step);
    pthread_join(o, NULL);
    CHECK(reused >= NB / 2, "only %d of %d blocks allocated while their owner waited were the owner's blocks freed", reused,
          NB);
    for (int i = 0; i < NB; i++)
        flatmalloc_free(rb[i]);
    printf("ok  behind: %d of %d blocks a waiting owner's, freed by another thread, were that thread's again\n", reused,
           NB);
}

/* ---- rewind ----------------------------------------------------------------------------- */
#define NR 192   /* whole outboxes: R sends them all without a refill of its own */
#define ROUNDS 521
static void *rw[NR];

static void *rewind_remote(void *arg)
{
    for (int r = 0; r < ROUNDS; r++) {
        pthread_barrier_wait(&step);   /* O allocated round r */
        for (int i = 0; i < NR; i++) {
            CHECK(*(uint64_t *)rw[i] == ((uint64_t)r << 32 | (uint64_t)i), "round %d, block %d: contents changed", r, i);
            flatmalloc_free(rw[i]);
        }
        pthread_barrier_wait(&step);   /* R freed them */
    }
    return arg;
}

static void case_rewind(void)
{
    flatmalloc_free(flatmalloc_malloc(SIZE));   /* O's cache and tag */
    struct fm_tag *t = fm_tc->t;
    CHECK(t, "this thread holds no tag");
    uint32_t tail0 = atomic_load(&t->tail);
    pthread_barrier_init(&step, NULL, 2);
    pthread_t r;
    CHECK(pthread_create(&r, NULL, rewind_remote, NULL) == 0, "pthread_create");
    for (int k = 0; k < ROUNDS; k++) {
        for (int i = 0; i < NR; i++) {
            CHECK(rw[i] = flatmalloc_malloc(SIZE), "malloc");
            *(uint64_t *)rw[i] = (uint64_t)k << 32 | (uint64_t)i;
        }
        pthread_barrier_wait(&step);
        pthread_barrier_wait(&step);
    }
    pthread_join(r, NULL);
    uint32_t sent = atomic_load(&t->tail) - tail0;
    CHECK(sent >= NR * ROUNDS, "%u blocks reached the inbox, %d were freed by R", sent, NR * ROUNDS);
    size_t page = 4096, bytes = (size_t)fm_pool.inbox_n * sizeof(struct fm_slot), pages = bytes / page, resident = 0;
    unsigned char vec[bytes / page];
    void *box = fm_pool.inbox + (size_t)(t - fm_pool.tags) * fm_pool.inbox_n;
    CHECK(mincore(box, bytes, vec) == 0, "mincore: %s", strerror(errno));
    for (size_t i = 0; i < pages; i++)
        resident += vec[i] & 1;
    CHECK(resident <= 4, "%zu of the inbox's %zu pages are resident after %d blocks passed through it in rounds of %d",
          resident, pages, NR * ROUNDS, NR);
    printf("ok  rewind: %d blocks through the inbox in rounds of %d, %zu of its %zu pages resident\n", NR * ROUNDS, NR,
           resident, pages);
}

/* ---- stopped ---------------------------------------------------------------------------- */
#define NS 700
#define AT 350   /* b's index */
static void *sb[NS], *rgot[NS];
static void *volatile page;
static sem_t go, done;

/* O's store of b's state: the page is made writable again, and O waits there (between its load
 * and its store) while R frees and allocates. */
static void on_fault(int sig, siginfo_t *si, void *uc)
{
    (void)sig, (void)uc;
    uintptr_t a = (uintptr_t)si->si_addr, pg = (uintptr_t)page;
    if (!pg || a - pg >= 4096) {
        signal(SIGSEGV, SIG_DFL);
        return;   /* a real fault: it comes again and kills the process */
    }
    mprotect(page, 4096, PROT_READ | PROT_WRITE);
    page = NULL;
    sem_post(&go);
    while (sem_wait(&done) != 0) {}
}

static void *stopped_remote(void *arg)
{
    while (sem_wait(&go) != 0) {}
    for (int i = 0; i < NS; i++)   /* b the 351st: O's load of its state came first */
        flatmalloc_free(sb[i]);
    for (int i = 0; i < NS; i++) {
        rgot[i] = flatmalloc_malloc(SIZE);
        if (rgot[i] == sb[AT]) {
            fprintf(stderr, "block %p adopted while its owner was between its load and its store\n", sb[AT]);
            _exit(2);
        }
    }
    sem_post(&done);
    return arg;
}

/* One process: O is this thread (it holds a tag), R another; b is freed by R first, by O
 * "at once" (O's load came first). */
static int stopped_once(int a, int b)
{
    (void)a, (void)b;
    for (int i = 0; i < NS; i++)
        CHECK(sb[i] = flatmalloc_malloc(SIZE), "malloc");
    fm_st *st;
    void *under = fm_pool.opt.check ? (char *)sb[AT] - 2 * FM_ALIGN : sb[AT];   /* checking mode: the block under its header */
    CHECK(class_find(under, &st) >= 0 && st_live(*st) && *st != ST_LIVE, "the block's state (%p): not a tag's LIVE", (void *)st);
    sem_init(&go, 0, 0);
    sem_init(&done, 0, 0);
    pthread_t r;
    CHECK(pthread_create(&r, NULL, stopped_remote, NULL) == 0, "pthread_create");
    struct sigaction sa = {.sa_sigaction = on_fault, .sa_flags = SA_SIGINFO};
    sigaction(SIGSEGV, &sa, NULL);
    page = (void *)((uintptr_t)st & ~(uintptr_t)4095);
    CHECK(mprotect(page, 4096, PROT_READ) == 0, "mprotect: %s", strerror(errno));
    flatmalloc_free(sb[AT]);   /* the fast path's load; its store faults; the handler lets R go */
    pthread_join(r, NULL);
    /* O allocates on: b comes back from its cache, and its refills take its inbox home */
    for (int i = 0; i < 4 * NS; i++)
        CHECK(flatmalloc_malloc(SIZE), "malloc");
    return 0;
}

static void case_stopped(int procs)
{
    int stopped = 0, clean = 0;
    for (int i = 0; i < procs; i++) {
        char msg[512];
        int st = fmt_in_child(stopped_once, 0, 0, msg, sizeof msg);
        if (WIFSIGNALED(st)) {
            CHECK(WTERMSIG(st) == SIGABRT, "process %d died of signal %d: %s", i, WTERMSIG(st), msg);
            CHECK(strstr(msg, "flatmalloc: double free (by two threads at once): pointer ") ||
                      (fm_pool.opt.check && strstr(msg, "flatmalloc: double free: pointer ")),
                  "process %d stopped with: %s", i, msg);
            stopped++;
        } else {
            CHECK(WEXITSTATUS(st) == 0, "process %d exited with %d: %s", i, WEXITSTATUS(st), msg);
            clean++;
        }
    }
    printf("ok  stopped: %d processes, %d stopped with \"double free%s\", %d ended cleanly; "
           "no block adopted while its owner was between load and store\n",
           procs, stopped, fm_pool.opt.check ? "\" (R's free finds b's header freed) or \"double free (by two threads at once)"
                                             : " (by two threads at once)", clean);
}

int main(int argc, char **argv)
{
    int a = 1;
    const char *only = argc > a ? argv[a] : NULL;
    if (!only || !strcmp(only, "rewind"))
        case_rewind();
    if (!only || !strcmp(only, "behind"))
        case_behind();
    if (!only || !strcmp(only, "stopped"))
        case_stopped(argc > a + 1 ? atoi(argv[a + 1]) : 100);
    return 0;
}
