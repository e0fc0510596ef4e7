/* Programs whose report under a Valgrind tool must read as with glibc (issue 30), one per case:
 *   grow         massif: malloc(1 MB), realloc to 2 MB, free: the peak is 2,000,000 bytes
 *   one-site     memcheck: one malloc call site and one realloc call site leak blocks below
 *                and above the stash's sizes: one loss record each
 *   cycles       memcheck: Valgrind's leak-cycle shape (three-node cycles, linked), whose split
 *                between definitely and indirectly lost follows the blocks' address order
 *   shrink       memcheck: a shrinking and a same-size realloc, then the block is lost: its
 *                stack is realloc's
 *   usable-freed memcheck: malloc_usable_size of a freed block is 0
 *   mallinfo     mallinfo's counts agree with each other, as Valgrind's own mallinfo test asks */
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void *volatile sink;

/* One call site: every block it returns has the same stack. */
static __attribute__((noinline)) void *site(size_t n) { return malloc(n); }
static __attribute__((noinline)) void *resite(void *p, size_t n) { return realloc(p, n); }

struct n { struct n *l, *r; };

static __attribute__((noinline)) struct n *mk(struct n *l, struct n *r) {
  struct n *n = malloc(sizeof *n);
  n->l = l, n->r = r;
  return n;
}

static __attribute__((noinline)) struct n *mkcycle(void) {
  struct n *a = mk(0, 0), *b = mk(a, 0), *c = mk(b, 0);
  a->l = c;
  return a;
}

static int cycles(void) {
  struct n *volatile c1, *volatile c2;
  c1 = mkcycle(), c2 = mkcycle();   /* two cycles */
  c1 = c2 = 0;
  c1 = mkcycle(), c2 = mkcycle();   /* one reaching the other */
  if (c1 < c2) c2->r = c1;
  else c1->r = c2;
  c1 = c2 = 0;
  c1 = mkcycle(), c2 = mkcycle();   /* each reaching the other */
  c1->r = c2, c2->r = c1;
  c1 = c2 = 0;
  return 0;
}

/* Valgrind's memcheck/tests/mallinfo.c's consistency rules: exit 10-16 as it does. */
static int info(void) {
  void *p[64];
  for (int i = 0; i < 64; i++) p[i] = malloc((size_t)(i + 1) * 700);
  for (int i = 0; i < 64; i += 2) free(p[i]);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
  struct mallinfo mi = mallinfo();   /* as Valgrind's test: memcheck replaces mallinfo, not mallinfo2 */
#pragma GCC diagnostic pop
  int rc = 0;
  if ((mi.ordblks == 0) != (mi.fordblks == 0)) rc = 10;
  else if ((mi.smblks == 0) != (mi.fsmblks == 0)) rc = 11;
  else if ((mi.hblks == 0) != (mi.hblkhd == 0)) rc = 12;
  else if (mi.keepcost > mi.fordblks) rc = 13;
  else if (mi.fsmblks > mi.fordblks) rc = 14;
  else if (mi.arena < mi.fordblks + mi.uordblks) rc = 15;
  else if (mi.arena / 5 * 4 > mi.fordblks + mi.uordblks) rc = 16;
  printf("mallinfo: %d\n", rc);
  for (int i = 1; i < 64; i += 2) free(p[i]);
  return 0;
}

int main(int argc, char **argv) {
  const char *c = argc > 1 ? argv[1] : "";
  if (!strcmp(c, "grow")) {
    char *p = malloc(1000000);
    memset(p, 1, 1000000);
    p = realloc(p, 2000000);
    free(p);
    return 0;
  }
  if (!strcmp(c, "one-site")) {
    for (int i = 0; i < 4; i++) sink = site(i & 1 ? 20000 : 100);
    for (int i = 0; i < 4; i++) sink = resite(malloc(8), i & 1 ? 20000 : 100);
    sink = NULL;
    return 0;
  }
  if (!strcmp(c, "cycles")) return cycles();
  if (!strcmp(c, "shrink")) {
    char *p = malloc(100);
    memset(p, 1, 100);
    p = realloc(p, 60);   /* shrinks */
    sink = realloc(p, 60);   /* the same size */
    sink = NULL;
    return 0;
  }
  if (!strcmp(c, "usable-freed")) {
    char *p = malloc(40);
    free(p);
    printf("usable: %zu\n", malloc_usable_size(p));
    return 0;
  }
  if (!strcmp(c, "mallinfo")) return info();
  fprintf(stderr, "usage: same grow|one-site|cycles|shrink|usable-freed|mallinfo\n");
  return 2;
}
