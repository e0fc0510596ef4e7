/* Allocation failure in many threads at once (after glibc 2.36's malloc/tst-malloc-thread-fail).
 *
 * The process lowers its RLIMIT_AS to 200 MiB. Then, for each allocation function (malloc,
 * realloc, aligned_alloc, memalign, posix_memalign, valloc, pvalloc, calloc) and each request
 * (144 B and a page unaligned; 512 B, a page and 17 pages aligned to 128), a forked child runs
 * 9 threads that allocate until the allocator says no, all at the same time. Every failure must
 * be a NULL (or ENOMEM from posix_memalign) with errno == ENOMEM, every block must have its
 * alignment and calloc's must read zero. Then every thread frees its blocks, and once all have,
 * each must be able to allocate again.
 *
 * Under flatmalloc the pool is reserved before main, so it must be smaller than the limit:
 * run with FLATMALLOC_POOL=128M; memory then runs out when the pool does. With --libc the same
 * test runs against glibc, where the limit makes mmap and brk fail. */
#include "fmtest.h"

#include <malloc.h>
#include <pthread.h>
#include <sys/resource.h>
#include <sys/wait.h>

enum { THREADS = 8 }; /* plus the main thread */
#define LIMIT ((rlim_t)200 << 20)

enum fn { F_MALLOC, F_REALLOC, F_ALIGNED_ALLOC, F_MEMALIGN, F_POSIX_MEMALIGN, F_VALLOC, F_PVALLOC, F_CALLOC, F_COUNT };
static const char *const fn_name[F_COUNT] = {"malloc", "realloc", "aligned_alloc", "memalign",
                                             "posix_memalign", "valloc", "pvalloc", "calloc"};
static const bool fn_aligned[F_COUNT] = {[F_ALIGNED_ALLOC] = true, [F_MEMALIGN] = true, [F_POSIX_MEMALIGN] = true};

static size_t page;
static enum fn fn;
static size_t size, align;
static pthread_barrier_t started, filled, emptied;

/* One block from the function under test, or NULL after checking how it failed. */
static void *allocate(void)
{
    void *p = NULL;
    size_t want = _Alignof(max_align_t);
    errno = 0;
    switch (fn) {
    case F_MALLOC: p = malloc(size); break;
    case F_REALLOC: {
        void *q = realloc(NULL, 16);
        if (q && !(p = realloc(q, size))) {
            int e = errno;
            free(q);
            errno = e;
        }
        break;
    }
    case F_ALIGNED_ALLOC: p = aligned_alloc(align, size); want = align; break;
    case F_MEMALIGN: p = memalign(align, size); want = align; break;
    case F_POSIX_MEMALIGN: {
        void *sentinel = (void *)0x7e57, *q = sentinel;
        int r = posix_memalign(&q, align, size);
        if (r == 0) {
            p = q;
        } else {
            CHECK(r == ENOMEM, "posix_memalign(%zu, %zu) returned %d, expected 0 or ENOMEM", align, size, r);
            CHECK(q == sentinel, "failed posix_memalign changed *memptr");
        }
        want = align;
        break;
    }
    case F_VALLOC: p = valloc(size); want = page; break;
    case F_PVALLOC: p = pvalloc(size); want = page; break;
    case F_CALLOC: p = calloc(1, size); break;
    default: FAIL("bad function");
    }
    if (!p) {
        CHECK(errno == ENOMEM, "%s(size %zu, alignment %zu) failed with errno %d (%s), expected ENOMEM",
              fn_name[fn], size, align, errno, strerror(errno));
        return NULL;
    }
    CHECK((uintptr_t)p % want == 0, "%s(size %zu, alignment %zu) = %p is not %zu-aligned", fn_name[fn], size,
          align, p, want);
    if (fn == F_CALLOC)
        for (size_t i = 0; i < size; i++)
            CHECK(((volatile unsigned char *)p)[i] == 0, "calloc(1, %zu) = %p: byte %zu is not zero", size, p, i);
    return p;
}

static void wait_all(pthread_barrier_t *b)
{
    int r = pthread_barrier_wait(b);
    CHECK(r == 0 || r == PTHREAD_BARRIER_SERIAL_THREAD, "pthread_barrier_wait: %s", strerror(r));
}

static _Atomic unsigned long total;

static void *fill_and_free(void *arg)
{
    struct node { struct node *next; } *head = NULL, *e;
    unsigned long n = 0;
    wait_all(&started); /* no thread eats the address space before all stacks are mapped */
    while ((e = allocate())) {
        e->next = head;
        head = e;
        n++;
    }
    total += n;
    wait_all(&filled); /* every thread has seen memory run out */
    while (head) {
        e = head->next;
        free(head);
        head = e;
    }
    wait_all(&emptied); /* everything is back */
    void *again = allocate();
    CHECK(again != NULL, "%s(size %zu, alignment %zu) failed after every block was freed", fn_name[fn], size, align);
    free(again);
    return arg;
}

/* One function with the current size and alignment, in a child so each run starts afresh. */
static void run_one(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        pthread_attr_t small;
        pthread_attr_init(&small);
        pthread_attr_setstacksize(&small, 256 * 1024); /* stacks must not eat the limit */
        pthread_t t[THREADS];
        for (int i = 0; i < THREADS; i++) {
            int r = pthread_create(&t[i], &small, fill_and_free, NULL);
            CHECK(r == 0, "pthread_create under the %zu MiB limit: %s", (size_t)(LIMIT >> 20), strerror(r));
        }
        fill_and_free(NULL);
        for (int i = 0; i < THREADS; i++)
            pthread_join(t[i], NULL);
        CHECK(total > 0, "%s(size %zu, alignment %zu): not one block before memory ran out", fn_name[fn], size, align);
        printf("ok  %-14s size %6zu alignment %3zu: %lu blocks, then ENOMEM in all %d threads\n", fn_name[fn], size,
               align, (unsigned long)total, THREADS + 1);
        _exit(0);
    }
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid: %s", strerror(errno));
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s(size %zu, alignment %zu): child %s %d", fn_name[fn], size,
          align, WIFSIGNALED(st) ? "killed by signal" : "exited with status",
          WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
}

static void run_functions(size_t sz, size_t al)
{
    size = sz;
    align = al;
    for (fn = 0; fn < F_COUNT; fn++)
        if (fn_aligned[fn] == (al != 0))
            run_one();
}

int main(int argc, char **argv)
{
    fmt_init("thread_fail", argc, argv);
    page = (size_t)sysconf(_SC_PAGESIZE);
    if (fmt_flatmalloc) {
        const char *pool = getenv("FLATMALLOC_POOL");
        CHECK(pool && strcmp(pool, "128M") == 0, "run with FLATMALLOC_POOL=128M: the pool is reserved "
              "before main and must fit under the %zu MiB limit (FLATMALLOC_POOL=%s)", (size_t)(LIMIT >> 20),
              pool ? pool : "(unset)");
    }
    CHECK(mallopt(M_ARENA_MAX, 2) == 1, "mallopt(M_ARENA_MAX, 2) failed"); /* glibc: arenas must fit too */
    struct rlimit r;
    CHECK(getrlimit(RLIMIT_AS, &r) == 0, "getrlimit: %s", strerror(errno));
    if (r.rlim_cur == RLIM_INFINITY || r.rlim_cur > LIMIT) {
        r.rlim_cur = LIMIT;
        CHECK(setrlimit(RLIMIT_AS, &r) == 0, "setrlimit(RLIMIT_AS, 200 MiB): %s", strerror(errno));
    }
    CHECK(pthread_barrier_init(&started, NULL, THREADS + 1) == 0, "pthread_barrier_init");
    CHECK(pthread_barrier_init(&filled, NULL, THREADS + 1) == 0, "pthread_barrier_init");
    CHECK(pthread_barrier_init(&emptied, NULL, THREADS + 1) == 0, "pthread_barrier_init");
    run_functions(144, 0);
    run_functions(page, 0);
    run_functions(512, 128);
    run_functions(page, 128);
    run_functions(17 * page, 128);
    puts("thread_fail: all checks passed");
    return 0;
}
