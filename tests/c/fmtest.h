/* Helpers shared by the C tests: failure reporting, the "are we running under flatmalloc" proof,
 * a seeded generator, tag-derived block patterns and blocks that carry them, the statistics
 * (bytes in use, a number of flatmalloc_stats_json, the heap check), threads, and threads that
 * hold every owner tag.
 *
 * Every test runs with libflatmalloc.so preloaded and fails when flatmalloc_version() cannot be
 * resolved. `--libc` as the first argument runs a test against the system allocator instead (to
 * check the test itself against glibc); checks that only flatmalloc promises are then skipped. */
#ifndef FMTEST_H
#define FMTEST_H

#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <dlfcn.h>
#include <errno.h>
#include <malloc.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

/* Failure messages go to stderr, which is unbuffered: reporting must not need malloc (the
 * exhaustion test fails while the pool is full) and must survive _exit() in a child. */
__attribute__((format(printf, 3, 4), noreturn, unused))
static void fmt_fail(const char *file, int line, const char *fmt, ...)
{
    va_list ap;
    fflush(stdout);
    fprintf(stderr, "FAIL %s:%d [pid %d]: ", file, line, (int)getpid());
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    _exit(1);
}

#define FAIL(...) fmt_fail(__FILE__, __LINE__, __VA_ARGS__)
#define CHECK(cond, ...)                                                                        \
    do {                                                                                        \
        if (!(cond))                                                                            \
            FAIL(__VA_ARGS__);                                                                  \
    } while (0)

/* true when the process runs under flatmalloc (set by fmt_init). */
static bool fmt_flatmalloc;

/* Sizes the compiler cannot see through, so it neither folds nor warns about huge requests. */
__attribute__((noinline, unused)) static size_t fmt_opaque(size_t n)
{
    __asm__ volatile("" : "+r"(n));
    return n;
}

/* Returns the number of leading arguments consumed (0 or 1). */
__attribute__((unused)) static int fmt_init(const char *name, int argc, char **argv)
{
    bool libc = argc > 1 && strcmp(argv[1], "--libc") == 0;
    const char *(*version)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "flatmalloc_version");
    fmt_flatmalloc = version != NULL;
    setvbuf(stdout, NULL, _IOLBF, 0); /* nothing pending when a test forks or fails */
    if (!fmt_flatmalloc && !libc)
        FAIL("%s: flatmalloc_version is not resolvable: not running under libflatmalloc.so "
             "(LD_PRELOAD missing?); pass --libc to run against the system allocator", name);
    printf("%s: running under %s%s\n", name, fmt_flatmalloc ? "flatmalloc " : "the system allocator",
           fmt_flatmalloc ? version() : "");
    fflush(stdout);
    return libc ? 1 : 0;
}

/* Looks up an optional flatmalloc_* entry point (NULL without the library). */
__attribute__((unused)) static void *fmt_sym(const char *name)
{
    return dlsym(RTLD_DEFAULT, name);
}

/* ---- seeded generator (splitmix64) ---- */

static inline uint64_t fmt_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

typedef struct { uint64_t s; } fmt_rng;

static inline uint64_t fmt_next(fmt_rng *r)
{
    r->s += 0x9e3779b97f4a7c15ULL;
    return fmt_mix(r->s);
}

/* Uniform in [0, n). */
static inline uint64_t fmt_below(fmt_rng *r, uint64_t n)
{
    return (uint64_t)(((unsigned __int128)fmt_next(r) * n) >> 64);
}

/* ---- block patterns ----
 * Byte i of a block tagged t is byte (i % 8) of the word fmt_word(t, i / 8), so any byte knows
 * its expected value and two blocks with different tags disagree almost everywhere. */

static inline uint64_t fmt_word(uint64_t tag, uint64_t k)
{
    uint64_t w = tag ^ (k * 0x9e3779b97f4a7c15ULL);
    return w ^ (w >> 29) ^ (k << 7);
}

static inline uint8_t fmt_byte(uint64_t tag, size_t i)
{
    return (uint8_t)(fmt_word(tag, i >> 3) >> ((i & 7) * 8));
}

/* Fills bytes [from, to) of p. */
__attribute__((unused)) static void fmt_fill(void *p, size_t from, size_t to, uint64_t tag)
{
    uint8_t *b = p;
    size_t i = from;
    for (; i < to && (i & 7); i++)
        b[i] = fmt_byte(tag, i);
    for (; i + 8 <= to; i += 8) {
        uint64_t w = fmt_word(tag, i >> 3);
        memcpy(b + i, &w, 8);
    }
    for (; i < to; i++)
        b[i] = fmt_byte(tag, i);
}

/* Returns the first offset in [from, to) whose byte is wrong, or SIZE_MAX. */
__attribute__((unused)) static size_t fmt_find_bad(const void *p, size_t from, size_t to, uint64_t tag)
{
    const uint8_t *b = p;
    size_t i = from;
    for (; i < to && (i & 7); i++)
        if (b[i] != fmt_byte(tag, i))
            return i;
    for (; i + 8 <= to; i += 8) {
        uint64_t w = fmt_word(tag, i >> 3), have;
        memcpy(&have, b + i, 8);
        if (have != w)
            for (size_t j = i; j < i + 8; j++)
                if (b[j] != fmt_byte(tag, j))
                    return j;
    }
    for (; i < to; i++)
        if (b[i] != fmt_byte(tag, i))
            return i;
    return SIZE_MAX;
}

/* Fails naming what was checked when bytes [from, to) of p do not hold tag's pattern. */
#define CHECK_PATTERN(p, from, to, tag, what)                                                    \
    do {                                                                                        \
        size_t bad_ = fmt_find_bad((p), (from), (to), (tag));                                   \
        if (bad_ != SIZE_MAX)                                                                   \
            FAIL("corrupted block %p: byte %zu of [%zu, %zu) is 0x%02x, expected 0x%02x (%s)",   \
                 (void *)(p), bad_, (size_t)(from), (size_t)(to), ((const uint8_t *)(p))[bad_], \
                 fmt_byte((tag), bad_), (what));                                            \
    } while (0)

/* ---- blocks that carry their pattern ---- */

typedef struct {
    unsigned char *p;
    size_t size;
    uint64_t tag;
} fmt_blk;

/* malloc(size) into b, filled with tag's pattern; fails naming who asked. */
__attribute__((unused)) static void fmt_blk_new(fmt_blk *b, size_t size, uint64_t tag, const char *who)
{
    b->p = malloc(size);
    CHECK(b->p != NULL, "%s: malloc(%zu) returned NULL", who, size);
    b->size = size;
    b->tag = tag;
    fmt_fill(b->p, 0, size, tag);
}

/* Checks b's pattern (who: whose block, for the message), frees it and clears b. */
__attribute__((unused)) static void fmt_blk_free(fmt_blk *b, const char *who)
{
    CHECK_PATTERN(b->p, 0, b->size, b->tag, who);
    free(b->p);
    b->p = NULL;
}

/* ---- statistics ---- */

/* Bytes in use as mallinfo2 counts them (flatmalloc also takes the calling thread's remotely
 * freed blocks home first). */
__attribute__((unused)) static size_t fmt_in_use(void)
{
    return mallinfo2().uordblks;
}

/* The number after the first `key` (e.g. "\"with_cache\":") in flatmalloc_stats_json's text.
 * One caller at a time (a static buffer). */
__attribute__((unused)) static uint64_t fmt_stat(const char *key)
{
    static char buf[64 << 10];
    size_t (*json)(char *, size_t) = (size_t (*)(char *, size_t))fmt_sym("flatmalloc_stats_json");
    CHECK(json, "flatmalloc_stats_json not found");
    json(buf, sizeof buf);
    const char *c = strstr(buf, key);
    CHECK(c, "no %s in the statistics: %.300s", key, buf);
    return strtoull(c + strlen(key), NULL, 10);
}

/* flatmalloc_heap_check() must find no fault (nothing to check without flatmalloc). */
__attribute__((unused)) static void fmt_heap_ok(const char *when)
{
    int (*heap_check)(void) = (int (*)(void))fmt_sym("flatmalloc_heap_check");
    if (heap_check)
        CHECK(heap_check() == 0, "flatmalloc_heap_check found faults %s", when);
}

/* ---- threads ---- */

/* Starts fn(arg) on a thread with a stack of `stack` bytes (0: the default). */
__attribute__((unused)) static pthread_t fmt_thread(void *(*fn)(void *), void *arg, size_t stack)
{
    pthread_attr_t a;
    pthread_t t;
    pthread_attr_init(&a);
    if (stack)
        CHECK(pthread_attr_setstacksize(&a, stack) == 0, "pthread_attr_setstacksize(%zu)", stack);
    int e = pthread_create(&t, &a, fn, arg);
    CHECK(e == 0, "pthread_create: %s", strerror(e));
    pthread_attr_destroy(&a);
    return t;
}

__attribute__((unused)) static void fmt_join(pthread_t t)
{
    int e = pthread_join(t, NULL);
    CHECK(e == 0, "pthread_join: %s", strerror(e));
}

/* ---- threads that hold every owner tag ---- */
#define FM_TAGS 250 /* src/types.h: threads whose blocks carry their own LIVE value at once */
#define FM_INBOX 8192 /* src/types.h: FM_INBOX_MAX, a tag's inbox in pools of 2 GiB and more (meson runs links so) */
#define WITH_TAG() (fmt_flatmalloc ? fmt_stat("\"with_tag\":") : 0)
#define FMT_HOLDERS_MAX 300
static pthread_t fmt_holder[FMT_HOLDERS_MAX];
static int fmt_nholders, fmt_hold_started, fmt_hold_release;
static pthread_mutex_t fmt_hold_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t fmt_hold_cv = PTHREAD_COND_INITIALIZER;

__attribute__((unused)) static void *fmt_holder_thread(void *arg)
{
    free(malloc(16)); /* a cache, and a tag while one is free */
    pthread_mutex_lock(&fmt_hold_mu);
    fmt_hold_started++;
    pthread_cond_broadcast(&fmt_hold_cv);
    while (!fmt_hold_release)
        pthread_cond_wait(&fmt_hold_cv, &fmt_hold_mu);
    pthread_mutex_unlock(&fmt_hold_mu);
    return arg;
}

/* Starts threads (64 KiB stacks) until `tags` tags are held, so that threads started next have
 * none (under --libc: 250 threads). */
__attribute__((unused)) static void fmt_hold_tags(uint64_t tags)
{
    fmt_hold_release = 0;
    for (uint64_t held; (held = fmt_flatmalloc ? WITH_TAG() : (uint64_t)fmt_nholders) < tags;) {
        CHECK(fmt_nholders + (int)(tags - held) <= FMT_HOLDERS_MAX, "%d threads started, %llu tags held, wanted %llu",
              fmt_nholders, (unsigned long long)held, (unsigned long long)tags);
        for (uint64_t k = held; k < tags; k++)
            fmt_holder[fmt_nholders++] = fmt_thread(fmt_holder_thread, NULL, 32 << 10);
        pthread_mutex_lock(&fmt_hold_mu);
        while (fmt_hold_started < fmt_nholders)
            pthread_cond_wait(&fmt_hold_cv, &fmt_hold_mu);
        pthread_mutex_unlock(&fmt_hold_mu);
    }
}

/* Lets the holders exit and joins them. */
__attribute__((unused)) static void fmt_release_tags(void)
{
    pthread_mutex_lock(&fmt_hold_mu);
    fmt_hold_release = 1;
    pthread_cond_broadcast(&fmt_hold_cv);
    pthread_mutex_unlock(&fmt_hold_mu);
    for (int i = 0; i < fmt_nholders; i++)
        fmt_join(fmt_holder[i]);
    fmt_nholders = fmt_hold_started = 0;
}

/* Runs child(a, b) in a forked process with its stderr captured into msg; returns its wait
 * status. */
__attribute__((unused)) static int fmt_in_child(int (*child)(int, int), int a, int b, char *msg, size_t cap)
{
    int fds[2];
    CHECK(pipe(fds) == 0, "pipe");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        dup2(fds[1], 2);
        _exit(child(a, b));
    }
    close(fds[1]);
    memset(msg, 0, cap);
    ssize_t n = read(fds[0], msg, cap - 1), m;
    while (n > 0 && (m = read(fds[0], msg + n, cap - 1 - (size_t)n)) > 0)
        n += m;
    close(fds[0]);
    int st;
    CHECK(waitpid(pid, &st, 0) == pid, "waitpid");
    return st;
}

#endif
