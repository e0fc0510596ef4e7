/* Leak checks in the middle of a run (VALGRIND_DO_LEAK_CHECK, as vgdb's "monitor leak_check"):
 * a block dropped at once, a leaked two-block cycle, then a leaked tree, each counted right
 * after it was made. Built with -O0, so that nothing but the allocator's own leftovers (a
 * block's pointer left in a register after malloc returned) can keep the blocks reachable. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <valgrind/memcheck.h>

struct node { struct node *a, *b; char pad[32]; };

/* A macro: the request is made in main's own code, which touches few registers. */
#define report(what)                                                                           \
  do {                                                                                         \
    unsigned long leaked = 0, dubious = 0, reachable = 0, suppressed = 0;                      \
    VALGRIND_DO_LEAK_CHECK;                                                                    \
    VALGRIND_COUNT_LEAKS(leaked, dubious, reachable, suppressed);                              \
    (void)suppressed;                                                                          \
    printf("%s: leaked %lu dubious %lu\n", what, leaked, dubious);                             \
    printf("%s reachable: %lu\n", what, reachable);                                            \
  } while (0)

static struct node *tree(int depth) {
  struct node *n = malloc(sizeof *n);
  n->a = depth ? tree(depth - 1) : NULL;
  n->b = depth ? tree(depth - 1) : NULL;
  return n;
}

/* malloc(48) called from assembly, which then saves the scratch registers: the number of them
 * still holding a copy of the block's pointer (any copy keeps a leaked block reachable for a
 * leak check made before the program reuses that register). */
static int copies_left(void) {
  unsigned long r[8];
  void *p;
  __asm__ volatile("movl $48, %%edi\n\tcall malloc@PLT\n\t"
                   "movq %%rcx, 0(%%rbx)\n\tmovq %%rdx, 8(%%rbx)\n\tmovq %%rsi, 16(%%rbx)\n\t"
                   "movq %%rdi, 24(%%rbx)\n\tmovq %%r8, 32(%%rbx)\n\tmovq %%r9, 40(%%rbx)\n\t"
                   "movq %%r10, 48(%%rbx)\n\tmovq %%r11, 56(%%rbx)"
                   : "=a"(p)
                   : "b"(r)
                   : "rcx", "rdx", "rsi", "rdi", "r8", "r9", "r10", "r11", "memory", "cc", "xmm0", "xmm1",
                     "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7");
  int n = 0;
  for (int i = 0; i < 8; i++) n += r[i] == (unsigned long)p || r[i] == ~(unsigned long)p;
  free(p);
  return n;
}

/* Valgrind's leak-cases-full shape in mid-run: a quick check, then a full one with its loss
 * records (run with --leak-check=full), then the counts of bytes and blocks. */
static struct node *kept;
static __attribute__((noinline)) void records(void) {
  kept = malloc(sizeof *kept);   /* still reachable */
  kept->a = malloc(100);
  (void)malloc(200);             /* definitely lost */
  tree(2);                       /* one definitely lost block, six indirectly lost */
  struct node *x = malloc(sizeof *x), *y = malloc(sizeof *y);
  x->a = y, y->a = x;            /* a cycle */
  kept->b = (struct node *)((char *)malloc(64) + 8);   /* possibly lost (an interior pointer) */
}

int main(int argc, char **argv) {
  if (argc > 1 && !strcmp(argv[1], "records")) {
    records();
    VALGRIND_DO_QUICK_LEAK_CHECK;
    VALGRIND_DO_LEAK_CHECK;
    unsigned long leaked = 0, dubious = 0, reachable = 0, suppressed = 0;
    VALGRIND_COUNT_LEAKS(leaked, dubious, reachable, suppressed);
    printf("bytes: leaked %lu dubious %lu reachable %lu suppressed %lu\n", leaked, dubious, reachable, suppressed);
    VALGRIND_COUNT_LEAK_BLOCKS(leaked, dubious, reachable, suppressed);
    printf("blocks: leaked %lu dubious %lu reachable %lu suppressed %lu\n", leaked, dubious, reachable, suppressed);
    return 0;
  }
  if (argc > 1) {
    printf("registers: %d copies\n", copies_left());
    return 0;
  }
  (void)malloc(sizeof(struct node));   /* the pointer is dropped at once */
  report("single");
  struct node *x = malloc(sizeof *x), *y = malloc(sizeof *y);
  x->a = y, y->a = x;
  x = y = NULL;
  report("cycle");
  tree(3);
  report("tree");
  return 0;
}
