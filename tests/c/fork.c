/* fork without exec while other threads allocate.
 *
 * (a) 100 forks while 3 other threads allocate, realloc and free continuously (checking their
 *     blocks' patterns); each child checks and frees blocks inherited from the parent, allocates
 *     small and large blocks, starts a thread that allocates, and exits 0.
 * (b) the same while the other threads hold stdio locks as they allocate: getline on fmemopen and
 *     tmpfile streams, fflush(NULL), fopen/fclose, fprintf, and malloc inside flockfile. glibc's fork
 *     runs pthread_atfork prepare handlers before it takes the stdio list lock, so an allocator that
 *     locks in a prepare handler deadlocks here (in the parent's fork() or in the child).
 * (c) children that are themselves multi-threaded fork a grandchild that allocates.
 * A child that does not exit within a few seconds is killed and reported; a fork() that does not
 * return (deadlock in the parent) is reported by a watchdog alarm.
 *
 *   fork [--libc] [abc]     runs the parts named (default all) */
#include "fmtest.h"

#include <malloc.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

#define MiB ((size_t)1 << 20)
#define BG_THREADS 3
#define BG_SLOTS 64
#define PARENT_BLOCKS 32

typedef struct {
    unsigned char *p;
    size_t size;
    uint64_t tag;
} blk;

static atomic_int stop;
static atomic_long bg_ops;
static int stdio_mode;
static const char *phase = "startup";
static FILE *shared_file; /* locked with flockfile by the stdio threads while they allocate */
static char tmpdir[] = "/tmp/fmfork.XXXXXX";

/* ---- watchdog ---- */

static void on_alarm(int sig)
{
    (void)sig;
    static const char a[] = "FAIL fork: watchdog expired in phase \"";
    static const char b[] = "\": did not finish in time (deadlock in the parent?)\n";
    if (write(2, a, sizeof a - 1) < 0 || write(2, phase, strlen(phase)) < 0 || write(2, b, sizeof b - 1) < 0)
        _exit(1);
    _exit(1);
}

static void set_phase(const char *p, unsigned seconds)
{
    phase = p;
    alarm(seconds);
}

static char fork_phase[128];

/* ---- blocks ---- */

static void new_block(blk *b, size_t size, uint64_t tag, const char *who)
{
    b->p = malloc(size);
    CHECK(b->p != NULL, "%s: malloc(%zu) returned NULL", who, size);
    b->size = size;
    b->tag = tag;
    fmt_fill(b->p, 0, size, tag);
}

static void check_block(const blk *b, const char *who)
{
    CHECK_PATTERN(b->p, 0, b->size, b->tag, who);
}

static size_t bg_size(fmt_rng *r)
{
    uint64_t x = fmt_below(r, 1000);
    if (x < 700)
        return 1 + fmt_below(r, 512);
    if (x < 950)
        return 513 + fmt_below(r, 32768);
    if (x < 998)
        return 32769 + fmt_below(r, 256 * 1024);
    return 2 * MiB + fmt_below(r, 4096);
}

/* ---- background threads ---- */

static void stdio_work(int id, fmt_rng *r, long it)
{
    char path[64], *line = NULL;
    size_t cap = 0;
    /* Thread 0 mostly allocates inside flockfile, thread 1 mostly runs fflush(NULL) (which holds the
     * list lock while it waits for each stream's lock), thread 2 opens and closes streams. */
    static const int plan[BG_THREADS][4] = {{3, 3, 3, 0}, {1, 1, 4, 1}, {2, 0, 4, 2}};
    switch (plan[id][it % 4]) {
    case 0: { /* getline on an in-memory stream: realloc under the stream's lock */
        static const char text[] = "first line of some length\nsecond\n"
                                   "a third line that is long enough to make getline grow its buffer "
                                   "a third line that is long enough to make getline grow its buffer\n";
        FILE *f = fmemopen((void *)text, sizeof text - 1, "r");
        CHECK(f != NULL, "fmemopen failed");
        int lines = 0;
        while (getline(&line, &cap, f) > 0)
            lines++;
        CHECK(lines == 3, "getline on fmemopen read %d lines, expected 3", lines);
        fclose(f);
        free(line);
        break;
    }
    case 1: /* the stdio list lock, then every stream's lock */
        fflush(NULL);
        break;
    case 2: { /* fopen/fclose: FILE allocation, list link and unlink */
        snprintf(path, sizeof path, "%s/t%d", tmpdir, id);
        FILE *f = fopen(path, "w+");
        CHECK(f != NULL, "fopen(%s) failed: %s", path, strerror(errno));
        for (int k = 0; k < 20; k++)
            fprintf(f, "thread %d iteration %ld line %d %llx\n", id, it, k, (unsigned long long)fmt_next(r));
        rewind(f);
        int lines = 0;
        while (getline(&line, &cap, f) > 0)
            lines++;
        CHECK(lines == 20, "read back %d of 20 lines from %s", lines, path);
        free(line);
        fclose(f);
        break;
    }
    case 3: { /* allocate while holding a stream's lock: fflush(NULL) elsewhere waits on it */
        flockfile(shared_file);
        blk t[32];
        for (int k = 0; k < 32; k++)
            new_block(&t[k], 1 + fmt_below(r, 2000), fmt_next(r), "allocation under flockfile");
        fprintf(shared_file, "%d %ld\n", id, it);
        for (int k = 0; k < 32; k++) {
            check_block(&t[k], "block allocated under flockfile");
            free(t[k].p);
        }
        funlockfile(shared_file);
        break;
    }
    default: { /* a tmpfile stream with getline: buffer allocation and realloc under its lock */
        FILE *f = tmpfile();
        CHECK(f != NULL, "tmpfile failed");
        for (int k = 0; k < 50; k++)
            fprintf(f, "%0*d\n", (int)(1 + fmt_below(r, 300)), k);
        rewind(f);
        int lines = 0;
        while (getline(&line, &cap, f) > 0)
            lines++;
        CHECK(lines == 50, "getline on tmpfile read %d of 50 lines", lines);
        free(line);
        fclose(f);
        break;
    }
    }
}

static void *background(void *arg)
{
    int id = (int)(intptr_t)arg;
    fmt_rng r = {0xf0c0 + (uint64_t)id};
    /* Lower priority, so children (forked from main at normal priority) are not starved on small
     * machines; the threads still run whenever a core is free. */
    if (setpriority(PRIO_PROCESS, (id_t)gettid(), 10) != 0)
        perror("setpriority");
    blk slot[BG_SLOTS] = {0};
    for (long it = 0; !atomic_load_explicit(&stop, memory_order_relaxed); it++) {
        blk *b = &slot[fmt_below(&r, BG_SLOTS)];
        if (b->p == NULL) {
            new_block(b, bg_size(&r), fmt_next(&r), "background thread");
        } else if (fmt_below(&r, 4) == 0) {
            check_block(b, "background block before realloc");
            size_t n = bg_size(&r);
            unsigned char *q = realloc(b->p, n);
            CHECK(q != NULL, "background thread: realloc to %zu failed", n);
            CHECK_PATTERN(q, 0, n < b->size ? n : b->size, b->tag, "background block after realloc");
            fmt_fill(q, 0, n, b->tag);
            b->p = q;
            b->size = n;
        } else {
            check_block(b, "background block before free");
            free(b->p);
            b->p = NULL;
        }
        if (stdio_mode)
            stdio_work(id, &r, it);
        atomic_fetch_add_explicit(&bg_ops, 1, memory_order_relaxed);
    }
    for (int i = 0; i < BG_SLOTS; i++)
        if (slot[i].p) {
            check_block(&slot[i], "background block at thread end");
            free(slot[i].p);
        }
    return NULL;
}

/* ---- children ---- */

static blk parent_set[PARENT_BLOCKS];

static void *child_thread(void *arg)
{
    uint64_t seed = (uint64_t)(uintptr_t)arg;
    fmt_rng r = {seed};
    blk t[16];
    for (int round = 0; round < 4; round++) {
        for (int k = 0; k < 16; k++)
            new_block(&t[k], bg_size(&r), fmt_next(&r), "thread in a forked child");
        for (int k = 0; k < 16; k++) {
            check_block(&t[k], "block of a thread in a forked child");
            free(t[k].p);
        }
    }
    return NULL;
}

/* What every child (and grandchild) does: use the inherited heap and a fresh one. */
static void child_work(uint64_t seed, int with_thread)
{
    fmt_rng r = {seed};
    /* Inherited blocks are intact; free half, scribble over the other half (copy-on-write: the
     * parent must not see it), realloc some. */
    for (int i = 0; i < PARENT_BLOCKS; i++)
        check_block(&parent_set[i], "parent's block inherited by the child");
    for (int i = 0; i < PARENT_BLOCKS; i += 2)
        free(parent_set[i].p);
    for (int i = 1; i < PARENT_BLOCKS; i += 4) {
        parent_set[i].tag ^= 0xc41d;
        fmt_fill(parent_set[i].p, 0, parent_set[i].size, parent_set[i].tag);
    }
    for (int i = 3; i < PARENT_BLOCKS; i += 4) {
        unsigned char *q = realloc(parent_set[i].p, parent_set[i].size * 2 + 100);
        CHECK(q != NULL, "child: realloc of an inherited block failed");
        CHECK_PATTERN(q, 0, parent_set[i].size, parent_set[i].tag, "inherited block realloc'd in the child");
        parent_set[i].p = q;
    }
    /* Fresh small and large blocks. */
    static const size_t sizes[] = {0, 1, 16, 24, 100, 256, 1000, 4096, 5000, 32768, 40000, 200000, MiB,
                                   8 * MiB};
    enum { NS = sizeof sizes / sizeof sizes[0] };
    blk mine[NS * 2];
    for (int k = 0; k < NS * 2; k++) /* the largest sizes once */
        new_block(&mine[k], sizes[k < NS ? k : k % (NS - 2)] + fmt_below(&r, 16), fmt_next(&r), "child");
    unsigned char *z = calloc(1, MiB);
    CHECK(z != NULL, "child: calloc(1 MiB) failed");
    for (size_t i = 0; i < MiB; i += 512)
        CHECK(z[i] == 0, "child: calloc block not zero at %zu", i);
    free(z);
    if (with_thread) {
        pthread_t t;
        CHECK(pthread_create(&t, NULL, child_thread, (void *)(uintptr_t)fmt_next(&r)) == 0,
              "child: pthread_create failed");
        CHECK(pthread_join(t, NULL) == 0, "child: pthread_join failed");
    }
    for (int k = 0; k < NS * 2; k++) {
        check_block(&mine[k], "child's own block");
        free(mine[k].p);
    }
    for (int i = 1; i < PARENT_BLOCKS; i += 2) {
        check_block(&parent_set[i], "inherited block kept by the child");
        free(parent_set[i].p);
    }
    if (stdio_mode) { /* the child's stdio works too */
        char path[64];
        snprintf(path, sizeof path, "%s/child%d", tmpdir, (int)getpid());
        FILE *f = fopen(path, "w");
        CHECK(f != NULL, "child: fopen failed");
        fprintf(f, "child %d\n", (int)getpid());
        CHECK(fclose(f) == 0, "child: fclose failed");
        unlink(path);
    }
}

/* Waits for pid up to timeout_ms; kills it and fails when it hangs or exits other than 0. */
static void wait_child(pid_t pid, const char *what, int n, int timeout_ms)
{
    int status;
    for (int waited = 0;; waited++) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        CHECK(r >= 0, "waitpid(%d) failed: %s", (int)pid, strerror(errno));
        if (r == pid)
            break;
        if (waited >= timeout_ms) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            FAIL("%s %d (pid %d) did not exit within %d ms: hung (killed it)", what, n, (int)pid,
                 timeout_ms);
        }
        struct timespec ms = {0, 1000000};
        nanosleep(&ms, NULL);
    }
    if (WIFSIGNALED(status))
        FAIL("%s %d (pid %d) was killed by signal %d (%s)%s", what, n, (int)pid, WTERMSIG(status),
             strsignal(WTERMSIG(status)), WTERMSIG(status) == SIGALRM ? ": it hung and its alarm fired" : "");
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "%s %d (pid %d) exited with status %d", what, n,
          (int)pid, WEXITSTATUS(status));
}

static pid_t fork_child(void)
{
    pid_t pid = fork();
    CHECK(pid >= 0, "fork failed: %s", strerror(errno));
    if (pid == 0) {
        signal(SIGALRM, SIG_DFL);
        alarm(10); /* a hung child dies of SIGALRM; the parent reports it */
    }
    return pid;
}

static void make_parent_set(fmt_rng *r)
{
    for (int i = 0; i < PARENT_BLOCKS; i++)
        new_block(&parent_set[i], (i % 8 == 7) ? 40000 + fmt_below(r, MiB) : 1 + fmt_below(r, 3000),
                  fmt_next(r), "parent");
}

static void free_parent_set(void)
{
    for (int i = 0; i < PARENT_BLOCKS; i++) {
        check_block(&parent_set[i], "parent's block after its child exited (children must not write it)");
        free(parent_set[i].p);
    }
}

static void run_forks(const char *name, int forks, int mode_stdio, int grandchildren)
{
    pthread_t bg[BG_THREADS];
    stdio_mode = mode_stdio;
    atomic_store(&stop, 0);
    atomic_store(&bg_ops, 0);
    for (int i = 0; i < BG_THREADS; i++)
        CHECK(pthread_create(&bg[i], NULL, background, (void *)(intptr_t)i) == 0, "pthread_create failed");
    fmt_rng r = {0xf02c + (uint64_t)mode_stdio * 7 + (uint64_t)grandchildren};
    long ops_at_start = atomic_load(&bg_ops);
    for (int n = 0; n < forks; n++) {
        set_phase(name, 40);
        make_parent_set(&r);
        /* let the other threads get going between forks */
        while (atomic_load(&bg_ops) < ops_at_start + (long)(n + 1) * 20)
            sched_yield();
        uint64_t seed = fmt_next(&r);
        snprintf(fork_phase, sizeof fork_phase, "%s: fork() number %d did not return within 10 s", name, n);
        set_phase(fork_phase, 10);
        pid_t pid = fork_child();
        if (pid > 0)
            set_phase(name, 40);
        if (pid == 0) {
            if (!grandchildren) {
                child_work(seed, 1);
                if (mode_stdio)
                    _exit(0);
                exit(0); /* also runs the allocator's and libc's exit paths */
            }
            /* A multi-threaded child forks a grandchild. */
            pthread_t t;
            CHECK(pthread_create(&t, NULL, child_thread, (void *)(uintptr_t)(seed + 1)) == 0,
                  "child: pthread_create failed");
            pid_t gpid = fork_child();
            if (gpid == 0) {
                child_work(seed + 2, 1);
                _exit(0);
            }
            alarm(20); /* outlives the grandchild's own 10 s alarm, so its hang is reported */
            child_work(seed + 3, 0);
            CHECK(pthread_join(t, NULL) == 0, "child: pthread_join failed");
            wait_child(gpid, "grandchild of fork", n, 15000);
            _exit(0);
        }
        wait_child(pid, mode_stdio ? "child (stdio threads)" : "child", n, grandchildren ? 25000 : 15000);
        free_parent_set();
    }
    set_phase(name, 30);
    atomic_store(&stop, 1);
    for (int i = 0; i < BG_THREADS; i++)
        CHECK(pthread_join(bg[i], NULL) == 0, "pthread_join failed");
    alarm(0);
    printf("fork: %s: %d forks passed while 3 threads ran %ld allocation steps\n", name, forks,
           atomic_load(&bg_ops));
}

int main(int argc, char **argv)
{
    int a = 1 + fmt_init("fork", argc, argv);
    signal(SIGALRM, on_alarm);
    CHECK(mkdtemp(tmpdir) != NULL, "mkdtemp failed");
    shared_file = tmpfile();
    CHECK(shared_file != NULL, "tmpfile failed");

    const char *parts = argc > a ? argv[a] : "abc";
    if (strchr(parts, 'a'))
        run_forks("(a) threads allocating", 100, 0, 0);
    if (strchr(parts, 'b'))
        run_forks("(b) threads allocating under stdio locks", 100, 1, 0);
    if (strchr(parts, 'c'))
        run_forks("(c) grandchildren of multi-threaded children", 30, 1, 1);

    fclose(shared_file);
    for (int i = 0; i < BG_THREADS; i++) {
        char path[64];
        snprintf(path, sizeof path, "%s/t%d", tmpdir, i);
        unlink(path);
    }
    rmdir(tmpdir);
    int (*heap_check)(void) = (int (*)(void))fmt_sym("flatmalloc_heap_check");
    if (heap_check) {
        int faults = heap_check();
        CHECK(faults == 0, "flatmalloc_heap_check() found %d faults in the parent", faults);
        puts("fork: flatmalloc_heap_check() == 0");
    }
    puts("fork: all checks passed");
    return 0;
}
