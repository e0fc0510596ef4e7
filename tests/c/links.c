/* links: a block another thread freed waits for its owner in the owner's inbox (a ring of
 * FM_INBOX slots below the heap) or, when that is full, on a stack of carriers: the first
 * block of each batch holds a link to the next carrier and the addresses of the blocks after it.
 * Thread A allocates FM_INBOX + n blocks of 64 B, each followed by one it keeps (a slot lists a
 * run of blocks that follow each other in their span: these take one slot each), thread B
 * frees them (each sent by B's next refill), so the first FM_INBOX fill A's inbox and the last
 * n go on its remote stack, the first of them (p1) carrying the others.
 *
 *   inbox     the allocator writes nothing into the blocks in the inbox: all 64 bytes of each
 *             still read as A left them (0x5a)
 *   key       one read of a carrier gives away no key: p1 lists p2 and p3 in its words 1 and
 *             2; masked with one value per block (a key, or a key and the block's address: the
 *             old scheme), word 1 ^ p2 and word 2 ^ p3 were both that value. They must differ
 *             (20 rounds); p2 and p3 themselves are not written
 *   damaged   a write of zeros into p1's link, or into its list, after B freed it (a write
 *             after free): A's drain stops the program with one line "a block freed by
 *             another thread was damaged (written after free)" before it follows either
 *             (forked child, SIGABRT)
 *
 * Reading a freed block is what an attacker with a read primitive does; the test does it on
 * purpose. */
#include <pthread.h>
#include <signal.h>
#include <sys/wait.h>

#include "fmtest.h"

static pthread_barrier_t step;
static void *volatile blocks[FM_INBOX + 3], *kept[FM_INBOX + 3];

/* B: frees what A allocated (its outbox goes to A's inbox 32 blocks at a time, which the first
 * FM_INBOX fill), then mallocs a size it never used: a refill, which sends the last n from its
 * outbox to A's remote stack in one chain of carriers. */
static void *thread_b(void *arg)
{
    size_t n = (size_t)(uintptr_t)arg;
    pthread_barrier_wait(&step);   /* A allocated */
    for (size_t i = 0; i < FM_INBOX + n; i++)
        free(blocks[i]);
    void *q = malloc(fmt_opaque(2000));
    CHECK(q, "malloc failed");
    __asm__ volatile("" : : "r"(q) : "memory");
    free(q);
    pthread_barrier_wait(&step);   /* freed */
    pthread_barrier_wait(&step);   /* main looked */
    return NULL;
}

/* A: allocates FM_INBOX + n blocks of 64 B and one more after each, which it keeps, waits
 * while B frees the first ones, then takes every block others freed home (malloc_trim does,
 * as the statistics do). */
static void *thread_a(void *arg)
{
    size_t n = (size_t)(uintptr_t)arg;
    for (size_t i = 0; i < FM_INBOX + n; i++) {
        blocks[i] = malloc(fmt_opaque(64));
        kept[i] = malloc(fmt_opaque(64));
        CHECK(blocks[i] && kept[i], "malloc failed");
        memset(blocks[i], 0x5a, 64);
    }
    pthread_barrier_wait(&step);
    pthread_barrier_wait(&step);
    pthread_barrier_wait(&step);   /* main looked (and wrote) */
    malloc_trim(0);
    for (size_t i = 0; i < FM_INBOX + n; i++)
        free(kept[i]);
    return NULL;
}

static uint64_t word(const void *p)
{
    uint64_t w;
    memcpy(&w, (const void *)p, 8);
    return w;
}

/* Runs A and B over n blocks; between B's frees and A's refill, look(blocks) runs in main. */
static void run(size_t n, void (*look)(void))
{
    pthread_t a, b;
    pthread_barrier_init(&step, NULL, 3);
    CHECK(pthread_create(&a, NULL, thread_a, (void *)(uintptr_t)n) == 0, "pthread_create");
    CHECK(pthread_create(&b, NULL, thread_b, (void *)(uintptr_t)n) == 0, "pthread_create");
    pthread_barrier_wait(&step);
    pthread_barrier_wait(&step);
    look();
    pthread_barrier_wait(&step);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    pthread_barrier_destroy(&step);
}

static uint64_t seen[2];
static size_t written;   /* of p2 and p3's 64 bytes, those that no longer read 0x5a */

static void look_key(void)
{
    void *p1 = blocks[FM_INBOX], *p2 = blocks[FM_INBOX + 1], *p3 = blocks[FM_INBOX + 2];
    seen[0] = word((char *)p1 + 8) ^ (uintptr_t)p2;
    seen[1] = word((char *)p1 + 16) ^ (uintptr_t)p3;
    written = 0;
    for (size_t j = 0; j < 64; j++)
        written += (((unsigned char *)p2)[j] != 0x5a) + (((unsigned char *)p3)[j] != 0x5a);
}

static size_t untouched;

static void look_inbox(void)
{
    untouched = 0;
    for (size_t i = 0; i < FM_INBOX; i++) {
        const unsigned char *p = blocks[i];
        size_t j = 0;
        while (j < 64 && p[j] == 0x5a)
            j++;
        untouched += j == 64;
    }
}

static void case_inbox(void)
{
    run(2, look_inbox);
    CHECK(untouched == FM_INBOX, "%zu of the %d blocks in the owner's inbox still read as the owner left them",
          untouched, FM_INBOX);
    printf("ok inbox: %d blocks freed by another thread, none written by the allocator\n", FM_INBOX);
}

static void case_key(void)
{
    for (int round = 0; round < 20; round++) {
        run(3, look_key);
        CHECK(seen[0] != seen[1], "round %d: two words of a carrier give the same value %#llx once the addresses "
              "they hold are taken out: the words are masked with one value per block",
              round, (unsigned long long)seen[0]);
        CHECK(written == 0, "round %d: %zu bytes of the two blocks a carrier lists were written", round, written);
    }
    printf("ok key: 20 rounds, no two words of a carrier give one value, the blocks it lists untouched\n");
}

static size_t damage_at;   /* the byte of p1 the damage starts at */
static void look_damage(void) { memset((char *)blocks[FM_INBOX] + damage_at, 0, 8); }

/* Zeros 8 bytes of p1 at byte `at` (0: its link, 8: the first block it lists). */
static void damaged(size_t at)
{
    damage_at = at;
    fflush(stdout);
    int err[2];
    CHECK(pipe(err) == 0, "pipe");
    pid_t pid = fork();
    CHECK(pid >= 0, "fork");
    if (pid == 0) {
        dup2(err[1], 2);
        run(2, look_damage);
        _exit(0);
    }
    close(err[1]);
    char buf[512];
    size_t len = 0;
    ssize_t r;
    while (len < sizeof buf - 1 && (r = read(err[0], buf + len, sizeof buf - 1 - len)) > 0)
        len += (size_t)r;
    buf[len] = 0;
    int status;
    CHECK(waitpid(pid, &status, 0) == pid, "waitpid");
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGABRT, "the child was not stopped by abort() (status %#x), stderr: %s",
          status, buf);
    const char *want = "flatmalloc: a block freed by another thread was damaged (written after free)";
    CHECK(strncmp(buf, want, strlen(want)) == 0 && strchr(buf, '\n') == buf + len - 1,
          "stderr is not one line starting with \"%s\": %s", want, buf);
    printf("ok damaged (byte %zu): %s", at, buf);
}

static void case_damaged(void)
{
    damaged(0);
    damaged(8);
}

int main(int argc, char **argv)
{
    fmt_init("links", argc, argv);
    const char *only = argc > 1 ? argv[1] : NULL;
    if (!only || !strcmp(only, "inbox"))
        case_inbox();
    if (!only || !strcmp(only, "key"))
        case_key();
    if (!only || !strcmp(only, "damaged"))
        case_damaged();
    return 0;
}
