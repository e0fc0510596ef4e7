/* bench/arena_groupby: the mskql write-up's workload in one process. A table sales(id, region,
 * product, quantity, amount) of 5,000 rows, and 500 iterations of
 *     SELECT region, SUM(amount) FROM sales GROUP BY region
 * each of which allocates what an executor does: a parse tree (tokens and nodes), executor
 * state, a hash table of groups (buckets, entries, key copies, grown by rehashing), per-row
 * temporaries (the region's datum, the amount's numeric, each SUM step's new numeric) and
 * result rows with their wire buffers. Then it frees them one by one (mode malloc: whichever
 * allocator LD_PRELOAD puts under malloc) or resets one flatmalloc arena (mode arena: the
 * allocator under malloc keeps the table only).
 *
 *   arena_groupby malloc|arena [iterations] [rows]
 * prints CSV rows: groupby_<mode>,ms,...  ,cpu_ms,...  ,us_per_query,...  ,heap_calls_per_query,...  ,checksum,... */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "flatmalloc.h"

static flatmalloc_arena *arena;   /* mode arena */
static uint64_t calls;            /* malloc and free calls made (mode malloc) */

static inline void *q_alloc(size_t n) {
  if (arena) return flatmalloc_arena_alloc_inline(arena, n, 16);   /* mskql's bump_alloc is inline too */
  calls++;
  return malloc(n);
}
static inline void q_free(void *p) {
  if (arena) return;
  calls++;
  free(p);
}
static char *q_strdup(const char *s, size_t n) {
  char *d = q_alloc(n + 1);
  memcpy(d, s, n);
  d[n] = 0;
  return d;
}

/* ---- the table (kept across queries: plain malloc in both modes) ---------------------------- */
struct row {
  int id, quantity;
  char *region, *product;
  int64_t amount;   /* NUMERIC(10,2) in cents */
};
static const char *const regions[] = {"north", "south", "east", "west", "central", "north-east", "south-west", "overseas"};
static const char *const products[] = {"widget", "gadget", "doohickey", "gizmo", "thingamajig", "whatsit"};

/* ---- a numeric: palloc'd per value, as PostgreSQL's numeric_add returns a new one ---------- */
struct numeric {
  int32_t ndigits, weight, sign, dscale;
  int64_t value;
};
static struct numeric *numeric_make(int64_t v) {
  struct numeric *n = q_alloc(sizeof *n);
  *n = (struct numeric){4, 1, v < 0, 2, v};
  return n;
}

/* ---- parse tree -------------------------------------------------------------------------- */
struct token {
  struct token *next;
  char *text;
  int kind;
};
struct node {
  int type;
  char *name;
  struct node *child[4];
};
static const char query[] = "SELECT region, SUM(amount) FROM sales GROUP BY region";

static struct token *tokenize(const char *s) {
  struct token *head = NULL, **tail = &head;
  while (*s) {
    while (*s == ' ' || *s == ',') s++;
    const char *b = s;
    if (*s == '(' || *s == ')') s++;
    else while (*s && !strchr(" ,()", *s)) s++;
    if (s == b) continue;
    struct token *t = q_alloc(sizeof *t);
    *t = (struct token){NULL, q_strdup(b, (size_t)(s - b)), *b == '(' || *b == ')'};
    *tail = t;
    tail = &t->next;
  }
  return head;
}
static struct node *node_new(int type, const char *name) {
  struct node *n = q_alloc(sizeof *n);
  *n = (struct node){type, name ? q_strdup(name, strlen(name)) : NULL, {NULL}};
  return n;
}
static struct node *parse(struct token *t) {
  struct node *sel = node_new(1, "select"), *targets = node_new(2, "targets");
  sel->child[0] = targets;
  targets->child[0] = node_new(3, t->next->text);                 /* region */
  struct node *fn = node_new(4, t->next->next->text);               /* SUM */
  fn->child[0] = node_new(3, t->next->next->next->next->text);      /* amount */
  targets->child[1] = fn;
  for (; t; t = t->next)
    if (!strcmp(t->text, "FROM")) sel->child[1] = node_new(5, t->next->text);
    else if (!strcmp(t->text, "BY")) sel->child[2] = node_new(6, t->next->text);
  return sel;
}
static void node_free(struct node *n) {
  if (!n) return;
  for (int i = 0; i < 4; i++) node_free(n->child[i]);
  q_free(n->name);
  q_free(n);
}
static void tokens_free(struct token *t) {
  while (t) {
    struct token *next = t->next;
    q_free(t->text);
    q_free(t);
    t = next;
  }
}

/* ---- executor state and the hash table of groups ---------------------------------------- */
struct group {
  struct group *next;
  char *key;
  struct numeric *sum;
  uint64_t hash;
};
struct agg_state {
  struct group **buckets;
  size_t nbuckets, ngroups;
  char *scan_state, *proj_state, *expr_state;
};
static uint64_t hash_str(const char *s) {
  uint64_t h = 1469598103934665603ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
  return h;
}
static void rehash(struct agg_state *st) {
  size_t n = st->nbuckets * 2;
  struct group **b = q_alloc(n * sizeof *b);
  memset(b, 0, n * sizeof *b);
  for (size_t i = 0; i < st->nbuckets; i++)
    for (struct group *g = st->buckets[i], *next; g; g = next) {
      next = g->next;
      g->next = b[g->hash & (n - 1)];
      b[g->hash & (n - 1)] = g;
    }
  q_free(st->buckets);
  st->buckets = b;
  st->nbuckets = n;
}

static uint64_t query_run(const struct row *rows, int nrows) {
  struct token *toks = tokenize(query);
  struct node *tree = parse(toks);
  struct agg_state *st = q_alloc(sizeof *st);
  st->nbuckets = 2;
  st->ngroups = 0;
  st->buckets = q_alloc(st->nbuckets * sizeof *st->buckets);
  memset(st->buckets, 0, st->nbuckets * sizeof *st->buckets);
  st->scan_state = q_alloc(192);
  st->proj_state = q_alloc(128);
  st->expr_state = q_alloc(256);
  memset(st->scan_state, 0, 192);
  for (int r = 0; r < nrows; r++) {
    /* per-row temporaries: the region's datum (a detoasted copy) and the amount's numeric */
    char *key = q_strdup(rows[r].region, strlen(rows[r].region));
    struct numeric *amount = numeric_make(rows[r].amount);
    uint64_t h = hash_str(key);
    struct group *g = st->buckets[h & (st->nbuckets - 1)];
    while (g && (g->hash != h || strcmp(g->key, key))) g = g->next;
    if (!g) {
      g = q_alloc(sizeof *g);
      *g = (struct group){st->buckets[h & (st->nbuckets - 1)], q_strdup(key, strlen(key)), numeric_make(0), h};
      st->buckets[h & (st->nbuckets - 1)] = g;
      if (++st->ngroups > st->nbuckets) rehash(st);
    }
    struct numeric *sum = numeric_make(g->sum->value + amount->value);   /* numeric_add: a new value */
    q_free(g->sum);
    g->sum = sum;
    q_free(amount);
    q_free(key);
  }
  /* result rows and their wire buffers */
  uint64_t check = 0;
  for (size_t i = 0; i < st->nbuckets; i++)
    for (struct group *g = st->buckets[i]; g; g = g->next) {
      char **row = q_alloc(2 * sizeof *row);
      row[0] = q_strdup(g->key, strlen(g->key));
      row[1] = q_alloc(32);
      int n = snprintf(row[1], 32, "%lld.%02lld", (long long)(g->sum->value / 100), (long long)(g->sum->value % 100));
      char *wire = q_alloc(64 + (size_t)n);
      int w = snprintf(wire, 64 + (size_t)n, "D%s|%s", row[0], row[1]);
      for (int k = 0; k < w; k++) check = check * 31 + (unsigned char)wire[k];
      q_free(wire);
      q_free(row[1]);
      q_free(row[0]);
      q_free(row);
    }
  /* the end of the query: everything goes (mode arena: one reset) */
  if (arena) {
    flatmalloc_arena_reset(arena);
    return check;
  }
  for (size_t i = 0; i < st->nbuckets; i++)
    for (struct group *g = st->buckets[i], *next; g; g = next) {
      next = g->next;
      q_free(g->sum);
      q_free(g->key);
      q_free(g);
    }
  q_free(st->buckets);
  q_free(st->scan_state);
  q_free(st->proj_state);
  q_free(st->expr_state);
  q_free(st);
  node_free(tree);
  tokens_free(toks);
  return check;
}

int main(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "malloc";
  int iters = argc > 2 ? atoi(argv[2]) : 500, nrows = argc > 3 ? atoi(argv[3]) : 5000;
  if (strcmp(mode, "malloc") && strcmp(mode, "arena")) {
    fprintf(stderr, "usage: arena_groupby malloc|arena [iterations] [rows]\n");
    return 2;
  }
  struct row *rows = malloc((size_t)nrows * sizeof *rows);
  uint64_t seed = 42;
  for (int i = 0; i < nrows; i++) {
    seed = seed * 6364136223846793005ull + 1442695040888963407ull;
    const char *re = regions[(seed >> 33) % 8], *pr = products[(seed >> 40) % 6];
    rows[i] = (struct row){i, (int)(seed >> 50) % 100, strdup(re), strdup(pr), (int64_t)((seed >> 20) % 100000)};
  }
  if (!strcmp(mode, "arena")) arena = flatmalloc_arena_create(0);
  query_run(rows, nrows);   /* warm: the arena's slabs, the allocator's caches */
  struct flatmalloc_arena_stats s0 = {0}, s1 = {0};
  if (arena) flatmalloc_arena_stats(arena, &s0);
  uint64_t c0 = calls, check = 0;
  struct timespec t0, t1, c0t, c1t;   /* wall, and the process's CPU time (exact, not ticks) for a busy host */
  clock_gettime(CLOCK_MONOTONIC, &t0);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0t);
  for (int i = 0; i < iters; i++) check += query_run(rows, nrows);
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1t);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  if (arena) flatmalloc_arena_stats(arena, &s1);
  double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) / 1e6;
  double heap = (double)(calls - c0 + (s1.runs_taken - s0.runs_taken) + (s1.runs_given - s0.runs_given)) / iters;
  printf("groupby_%s,ms,%.3f\n", mode, ms);
  printf("groupby_%s,cpu_ms,%.3f\n", mode, (double)(c1t.tv_sec - c0t.tv_sec) * 1e3 + (double)(c1t.tv_nsec - c0t.tv_nsec) / 1e6);
  printf("groupby_%s,us_per_query,%.2f\n", mode, ms * 1e3 / iters);
  printf("groupby_%s,heap_calls_per_query,%.1f\n", mode, heap);
  if (arena) printf("groupby_%s,arena_peak_kb,%zu\n", mode, s1.peak >> 10);
  printf("groupby_%s,checksum,%llu\n", mode, (unsigned long long)(check % 1000000007ull));
  return 0;
}
