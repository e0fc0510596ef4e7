/* Helpers shared by the C tests: failure reporting, the "are we running under flatmalloc" proof,
 * a seeded generator and tag-derived block patterns.
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
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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

#endif
