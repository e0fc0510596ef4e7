/* Heap shapes whose leak kinds memcheck tells apart: a lost tree (one definitely lost root,
 * the rest indirectly lost), a lost list, a lost cycle, a reachable list, and one block lost
 * in main for the suppression test. The LEAK SUMMARY must read the same with glibc. */
#include <stdlib.h>
#include <string.h>

struct node { struct node *l, *r; char pad[24]; };

static struct node *tree(int depth) {
  struct node *n = malloc(sizeof *n);
  memset(n, 0, sizeof *n);
  if (depth) {
    n->l = tree(depth - 1);
    n->r = tree(depth - 1);
  }
  return n;
}

static struct node *list(int len, size_t size) {
  struct node *head = NULL;
  for (int i = 0; i < len; i++) {
    struct node *n = calloc(1, size);
    n->l = head;
    head = n;
  }
  return head;
}

struct node *volatile keep;   /* a root: the list it points to is still reachable */

int main(int argc, char **argv) {
  struct node *volatile t = tree(5);     /* 63 nodes */
  t = NULL;
  struct node *volatile l = list(10, 100);
  l = NULL;
  struct node *a = malloc(sizeof *a), *b = malloc(sizeof *b), *c = malloc(sizeof *c);
  a->l = b, b->l = c, c->l = a;          /* a cycle with no way in */
  a = b = c = NULL;
  keep = list(7, 48);
  char *volatile lost = malloc(1000);    /* lost in main: the suppression test's block */
  lost[0] = (char)argc;
  lost = NULL;
  (void)argv;
  return 0;
}
