/* Settings: one table, read from environ directly (getenv may not be safe this early and
 * nothing here may allocate). A bad value stops the program with one line naming it. In secure
 * mode (setuid, setgid) every setting is ignored. */
#include <signal.h>
#include <unistd.h>

#include "fmt.h"
#include "internal.h"
#include "os.h"

extern char **environ;

typedef const char *(*parse_fn)(const char *v, struct fm_options *o);

struct option {
  const char *name;
  const char *def;    /* what an unset variable means, for the README */
  parse_fn parse;     /* returns NULL when v is good, else why it is not */
  const char *help;
};

/* Parses "123", "64K", "2G" (binary units). */
static const char *parse_size(const char *v, uint64_t *out) {
  uint64_t n = 0;
  const char *s = v;
  if (*s < '0' || *s > '9') return "not a size (expected a number with an optional K, M, G or T suffix)";
  for (; *s >= '0' && *s <= '9'; s++) {
    if (n > (UINT64_MAX - 9) / 10) return "size too large";
    n = n * 10 + (uint64_t)(*s - '0');
  }
  unsigned shift = 0;
  switch (*s) {
    case 0: break;
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    case 't': case 'T': shift = 40; break;
    default: return "unknown size suffix (expected K, M, G or T)";
  }
  if (*s && s[1] == 'b') return "b is bits, not bytes (expected K, M, G or T, optionally followed by B or iB)";
  if (*s && s[1] && !(s[1] == 'B' && !s[2]) && !(s[1] == 'i' && s[2] == 'B' && !s[3]))
    return "unknown size suffix (expected K, M, G or T)";
  if (shift && n > (UINT64_MAX >> shift)) return "size too large";
  *out = n << shift;
  return NULL;
}

static const char *parse_bool(const char *v, bool *out) {
  if (v[0] && !v[1] && (v[0] == '0' || v[0] == '1')) {
    *out = v[0] == '1';
    return NULL;
  }
  return "expected 0 or 1";
}

/* Parses a percentage with up to two decimals into hundredths ("12.5" -> 1250). */
static const char *parse_centi(const char **sp, uint32_t *out) {
  const char *s = *sp;
  uint64_t n = 0;
  if (*s < '0' || *s > '9') return "expected a percentage";
  for (; *s >= '0' && *s <= '9'; s++)
    if ((n = n * 10 + (uint64_t)(*s - '0')) > 100) return "percentage above 100";
  n *= 100;
  if (*s == '.') {
    s++;
    if (*s < '0' || *s > '9') return "expected a percentage";
    n += (uint64_t)(*s++ - '0') * 10;
    if (*s >= '0' && *s <= '9') n += (uint64_t)(*s++ - '0');
    if (*s >= '0' && *s <= '9') return "at most two decimals in a percentage";
  }
  if (n > 10000) return "percentage above 100";
  *out = (uint32_t)n;
  *sp = s;
  return NULL;
}

static const char *opt_pool(const char *v, struct fm_options *o) {
  uint64_t n;
  const char *why = parse_size(v, &n);
  if (why) return why;
  if (n == 0) return "the pool cannot be empty";
  if (n > FM_POOL_MAX) return "larger than the largest pool (16T)";
  o->pool = n;
  o->pool_text = v;
  return NULL;
}

/* "size[:percent],...": the sizes define the classes; a percent reserves that part of the pool
 * for the class (options_reserve turns the percents into reservations). */
static const char *opt_classes(const char *v, struct fm_options *o) {
  const char *s = v;
  unsigned n = 0;
  uint32_t sum = 0;
  while (*s) {
    uint64_t size = 0;
    if (n == FM_CLASS_MAX) return "too many classes (at most 64)";
    if (*s < '0' || *s > '9') return "expected size[:percent],...";
    for (; *s >= '0' && *s <= '9'; s++)
      if ((size = size * 10 + (uint64_t)(*s - '0')) > FM_SMALL_MAX) return "class size above 1048576";
    if (size == 0 || size % FM_ALIGN) return "class sizes must be multiples of 16";
    if (n && size <= o->class_size[n - 1]) return "class sizes must be ascending";
    o->class_bp[n] = 0;
    if (*s == ':') {
      s++;
      const char *why = parse_centi(&s, &o->class_bp[n]);
      if (why) return why;
    }
    sum += o->class_bp[n];
    o->class_size[n++] = (uint32_t)size;
    if (*s == ',') {
      if (!*++s) return "a trailing comma (expected size[:percent],...)";
    } else if (*s) {
      return "expected size[:percent],...";
    }
  }
  if (n == 0) return "no classes";
  if (sum > 10000) return "reservations add up to more than 100 % of the pool";
  o->nclass = n;
  return NULL;
}

static const char *opt_large(const char *v, struct fm_options *o) {
  const char *s = v;
  uint32_t c;
  const char *why = parse_centi(&s, &c);
  if (why) return why;
  if (*s) return "expected a percentage";
  o->large_bp = c;
  o->large_set = true;
  return NULL;
}

/* Percents that add up to exactly 100 are the older syntax, shares of the part of the pool the
 * large area does not take (FLATMALLOC_LARGE, 50 by default there): each becomes a reservation
 * of its share of that part, so an old setting keeps the room it gave each class. Otherwise a
 * percent is a part of the whole pool, and the reservations must fit in it. */
static void options_reserve(struct fm_options *o, const char *classes_text) {
  uint32_t sum = 0;
  for (unsigned c = 0; c < o->nclass; c++) sum += o->class_bp[c];
  if (sum == 10000) {
    if (!o->large_set) o->large_bp = 5000;
    for (unsigned c = 0; c < o->nclass; c++) o->class_bp[c] = (uint32_t)((uint64_t)o->class_bp[c] * (10000 - o->large_bp) / 10000);
  } else if (sum + o->large_bp > 10000) {
    options_fail("FLATMALLOC_CLASSES", classes_text, "reservations and FLATMALLOC_LARGE add up to more than 100 % of the pool");
  }
}

static const char *opt_retain(const char *v, struct fm_options *o) {
  uint64_t n;
  const char *why = parse_size(v, &n);
  if (!why) o->retain = n;
  return why;
}

/* Milliseconds, a whole number up to a day. */
static const char *opt_retain_delay(const char *v, struct fm_options *o) {
  uint32_t n = 0;
  const char *s = v;
  for (; *s >= '0' && *s <= '9'; s++)
    if ((n = n * 10 + (uint32_t)(*s - '0')) > 86400000) return "longer than a day (86400000)";
  if (!*v || *s) return "expected milliseconds (a whole number, 0 for none)";
  o->retain_delay = n;
  return NULL;
}

static const char *opt_prefault(const char *v, struct fm_options *o) { return parse_bool(v, &o->prefault); }

static const char *opt_hugepages(const char *v, struct fm_options *o) {
  if (__builtin_strcmp(v, "auto") == 0) o->huge = HUGE_AUTO;
  else if (__builtin_strcmp(v, "0") == 0) o->huge = HUGE_OFF;
  else if (__builtin_strcmp(v, "hugetlb") == 0) o->huge = HUGE_TLB;
  else return "expected auto, 0 or hugetlb";
  o->huge_strict = o->huge == HUGE_TLB;
  return NULL;
}
static const char *opt_stats(const char *v, struct fm_options *o) { return parse_bool(v, &o->stats); }
static const char *opt_check(const char *v, struct fm_options *o) { return parse_bool(v, &o->check); }
/* Ignored in a setuid or setgid program (AT_SECURE): it would create files with the program's
 * privileges wherever the caller names. */
static const char *opt_profile(const char *v, struct fm_options *o) {
  if (!*v) return "expected a file path";
  if (!os_secure()) o->profile = v;
  return NULL;
}

/* Ignored in a setuid or setgid program, as FLATMALLOC_PROFILE. */
static const char *opt_heap(const char *v, struct fm_options *o) {
  if (!*v) return "expected a file path";
  if (!os_secure()) o->heap = v;
  return NULL;
}

static const char *opt_heap_sample(const char *v, struct fm_options *o) {
  uint64_t n;
  const char *why = parse_size(v, &n);
  if (why) return why;
  if (n == 0) return "the mean interval must be at least 1 byte";
  if (n > (1ull << 40)) return "larger than 1T";
  o->heap_sample = n;
  return NULL;
}

/* The signals the profiler may take: USR1, USR2, PROF and the real-time signals from SIGRTMIN
 * (34 with glibc). The others mean something to the program or the system (INT, TERM, PIPE,
 * HUP, ALRM, CHLD, WINCH, job control: the program would no longer stop, hang up or reap), to
 * a fault (SEGV, BUS, FPE, ILL, ABRT, TRAP: a profile written from inside a crash), or to glibc
 * itself (32 and 33, below SIGRTMIN: its threads' cancellation and setxid), or cannot be caught
 * (KILL, STOP). Named with or without SIG, or by number. */
static const char *opt_heap_signal(const char *v, struct fm_options *o) {
  static char why[160];
  static const struct { const char *name; int sig; } named[] = {{"USR1", SIGUSR1}, {"USR2", SIGUSR2}, {"PROF", SIGPROF}};
  const char *s = v[0] == 'S' && v[1] == 'I' && v[2] == 'G' ? v + 3 : v;
  int n = -1;
  for (size_t i = 0; i < sizeof named / sizeof named[0]; i++)
    if (!__builtin_strcmp(s, named[i].name)) n = named[i].sig;
  if (n < 0 && *v >= '0' && *v <= '9') {
    n = 0;
    for (s = v; *s >= '0' && *s <= '9' && n < 1000; s++) n = n * 10 + (*s - '0');
    if (*s) n = -1;
  }
  if (n == SIGUSR1 || n == SIGUSR2 || n == SIGPROF || (n >= SIGRTMIN && n <= SIGRTMAX)) {
    o->heap_signal = n;
    return NULL;
  }
  struct fmt f = {why, sizeof why, 0};
  fmt_str(&f, "expected USR1 (10), USR2 (12), PROF (27) or a real-time signal from ");
  fmt_u64(&f, (uint64_t)SIGRTMIN, 0);
  fmt_str(&f, " to ");
  fmt_u64(&f, (uint64_t)SIGRTMAX, 0);
  fmt_str(&f, " (the others belong to the program, the system or glibc)");
  fmt_end(&f);
  return why;
}

static const struct option options[] = {
  {"FLATMALLOC_POOL", "physical memory, halved until it can be reserved", opt_pool,
   "size of the one pool reserved at start-up (K, M, G, T suffixes)"},
  {"FLATMALLOC_CLASSES", "16 B to 64 KiB, no reservations, see README", opt_classes,
   "size classes, each with an optional reservation in percent of the pool: size[:percent],..."},
  {"FLATMALLOC_LARGE", "0", opt_large, "percent of the pool reserved for blocks above the largest class"},
  {"FLATMALLOC_RETAIN", "64M", opt_retain, "free large memory kept resident before pages go back"},
  {"FLATMALLOC_RETAIN_DELAY", "1000", opt_retain_delay, "ms the pages of a shrinking heap stay before going back"},
  {"FLATMALLOC_PREFAULT", "0", opt_prefault, "1: the real-time profile: every page of the pool resident at start-up and kept (needs FLATMALLOC_POOL)"},
  {"FLATMALLOC_HUGEPAGES", "auto", opt_hugepages, "auto: a heap past 16 MiB on transparent huge pages; 0: base pages only; hugetlb: the pool from the kernel's reserved huge pages"},
  {"FLATMALLOC_STATS", "0", opt_stats, "1: print statistics to stderr at exit"},
  {"FLATMALLOC_CHECK", "0", opt_check, "1: checking mode (headers, canaries, abort on misuse)"},
  {"FLATMALLOC_PROFILE", "unset", opt_profile, "record request sizes and peaks into FILE.PID at exit"},
  {"FLATMALLOC_HEAP", "unset", opt_heap, "sampling heap profiler: pprof profiles into FILE.PID at exit"},
  {"FLATMALLOC_HEAP_SAMPLE", "512K", opt_heap_sample, "mean bytes allocated between two heap samples"},
  {"FLATMALLOC_HEAP_SIGNAL", "unset", opt_heap_signal, "this signal (USR1, USR2, PROF or SIGRTMIN-SIGRTMAX) writes FILE.PID.N"},
};

/* Text from the environment, made one printable line: control characters, DEL, bytes above
 * 0x7f and the backslash escaped, and cut after OPT_SHOWN bytes, so the reason after it always
 * shows. */
#define OPT_SHOWN 64
static void options_quote(struct fmt *f, const char *s) {
  size_t i = 0;
  for (; s[i] && i < OPT_SHOWN; i++) {
    unsigned char c = (unsigned char)s[i];
    const char *esc = c == '\n' ? "\\n" : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '\\' ? "\\\\" : NULL;
    if (esc) {
      fmt_str(f, esc);
    } else if (c < 0x20 || c >= 0x7f) {
      char x[4] = {'\\', 'x', "0123456789abcdef"[c >> 4], "0123456789abcdef"[c & 15]};
      fmt_mem(f, x, 4);
    } else {
      fmt_mem(f, (const char *)&c, 1);
    }
  }
  if (s[i]) fmt_str(f, "...");
}

void options_fail(const char *name, const char *value, const char *why) {
  char buf[1024];   /* room for name and value at four bytes per escaped byte, and the reason */
  struct fmt f = {buf, sizeof buf, 0};
  fmt_str(&f, "flatmalloc: ");
  options_quote(&f, name);
  fmt_str(&f, "=");
  options_quote(&f, value);
  fmt_str(&f, ": ");
  fmt_str(&f, why);
  size_t n = fmt_end(&f);
  if (n > sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  os_write(2, buf, n);
  _exit(1);
}

/* Four classes per doubling from 128 B (16-byte steps below), up to 64 KiB, but eight from 4 to
 * 16 KiB, where buffers of any length are common and a quarter rounds a block up by 1-4 KiB (git's
 * delta search: bench/README.md); no reservations. */
static const char default_classes[] =
    "16,32,48,64,80,96,112,128,160,192,224,256,320,384,448,512,640,768,896,1024,1280,1536,1792,2048,"
    "2560,3072,3584,4096,4608,5120,5632,6144,6656,7168,7680,8192,9216,10240,11264,12288,13312,"
    "14336,15360,16384,20480,24576,28672,32768,40960,49152,57344,65536";

/* The value of a setting in the environment, for a message about it ("" when unset). */
static const char *options_value(const char *name) {
  size_t n = __builtin_strlen(name);
  for (char **e = environ; e && *e; e++)
    if (__builtin_strncmp(*e, name, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  return "";
}

/* Called once the classes' spans are sized: every class must get one span while all other
 * owners keep their reservations (span.c lets an owner take a run only then), else its small
 * requests could never be served. Names FLATMALLOC_LARGE when the large area holds more of what
 * is missing than the classes, otherwise FLATMALLOC_CLASSES. */
void options_check_room(const struct fm_options *o, uint32_t heap_chunks) {
  uint64_t large = (uint64_t)heap_chunks * o->large_bp / 10000, classes = 0;
  for (unsigned c = 0; c < o->nclass; c++) classes += fm_pool.cls[c].reserve;
  for (unsigned c = 0; c < o->nclass; c++) {
    const struct fm_class *k = &fm_pool.cls[c];
    if (heap_chunks - (large + classes - k->reserve) >= k->span_chunks) continue;
    char why[128];
    struct fmt f = {why, sizeof why, 0};
    bool by_large = o->large_set && large > classes - k->reserve;
    fmt_str(&f, by_large ? "the large area's reservation leaves"
                : o->large_set && o->large_bp ? "the reservations and FLATMALLOC_LARGE leave"
                : "the reservations leave");
    fmt_str(&f, " no room for a span of the ");
    fmt_u64(&f, k->size, 0);
    fmt_str(&f, " B class");
    fmt_end(&f);
    if (by_large) options_fail("FLATMALLOC_LARGE", options_value("FLATMALLOC_LARGE"), why);
    options_fail("FLATMALLOC_CLASSES", o->classes_text ? o->classes_text : "", why);
  }
}

/* ---- glibc's settings --------------------------------------------------------------------
 * glibc 2.36's malloc tunables, given in GLIBC_TUNABLES (glibc.malloc.NAME=VALUE, separated by
 * ':') or by their older names (MALLOC_PERTURB_ and the others), read as glibc's dynamic loader
 * reads them (elf/dl-tunables.c), so a value glibc takes means the same here and one it ignores
 * is ignored here: never a stop, never a message. A value is a number as _dl_strtoul reads it
 * (blanks, a sign, decimal, 0x hex, 0 octal, anything after the digits dropped, no digit at all
 * reads as 0) and must lie within the tunable's bounds (an INT_32 compared signed, a SIZE_T
 * unsigned: -1 is SIZE_MAX); the first valid MALLOC_* variable sets a tunable that
 * GLIBC_TUNABLES has not set yet, and GLIBC_TUNABLES sets it whatever came before. Those that
 * mean something here set the flatmalloc setting of the same meaning before the FLATMALLOC_*
 * variables are read, so a FLATMALLOC_* setting given too wins. docs/glibc.md has the table. */
struct glibc_tunable {
  const char *name;    /* glibc.malloc.NAME */
  const char *alias;   /* its environment variable, or NULL */
  bool size;           /* SIZE_T (unsigned bounds), else INT_32 (signed) */
  int64_t min, max;
  void (*apply)(struct fm_options *o, int64_t v);   /* NULL: accepted, no effect here */
};

static void glibc_check(struct fm_options *o, int64_t v) { o->check = v != 0; }
static void glibc_perturb(struct fm_options *o, int64_t v) { o->perturb = (int)v; }
static void glibc_trim(struct fm_options *o, int64_t v) { o->retain = (size_t)v; }   /* -1: SIZE_MAX, pages kept */
/* As glibc's do_set_hugetlb: 1 is transparent huge pages, 2 the reserved huge pages of the
 * default size, a larger value those of that size (here only the default size is used; glibc
 * uses none for a size the kernel lacks); glibc falls back to ordinary pages when the reserved
 * ones run out, so here too: never a stop (pool.c). */
static void glibc_hugetlb(struct fm_options *o, int64_t v) {
  uint64_t free;
  if (v == 0) o->huge = HUGE_OFF;
  else if (v == 1) o->huge = HUGE_AUTO;
  else if (v == 2 || (uint64_t)v == os_hugetlb_size(&free)) o->huge = HUGE_TLB;
}

#define INT32 false, INT32_MIN, INT32_MAX
#define SIZE(min) true, min, -1
static const struct glibc_tunable glibc_tunables[] = {
  {"check", "MALLOC_CHECK_", false, 0, 3, glibc_check},
  {"top_pad", "MALLOC_TOP_PAD_", SIZE(0), NULL},
  {"perturb", "MALLOC_PERTURB_", false, 0, 0xff, glibc_perturb},
  {"mmap_threshold", "MALLOC_MMAP_THRESHOLD_", SIZE(0), NULL},
  {"trim_threshold", "MALLOC_TRIM_THRESHOLD_", SIZE(0), glibc_trim},
  {"mmap_max", "MALLOC_MMAP_MAX_", false, 0, INT32_MAX, NULL},
  {"arena_max", "MALLOC_ARENA_MAX", SIZE(1), NULL},
  {"arena_test", "MALLOC_ARENA_TEST", SIZE(1), NULL},
  {"tcache_max", NULL, SIZE(0), NULL},
  {"tcache_count", NULL, SIZE(0), NULL},
  {"tcache_unsorted_limit", NULL, SIZE(0), NULL},
  {"mxfast", NULL, SIZE(0), NULL},
  {"hugetlb", NULL, SIZE(0), glibc_hugetlb},
};
#undef INT32
#undef SIZE
#define GLIBC_N (sizeof glibc_tunables / sizeof glibc_tunables[0])

/* glibc's _dl_strtoul. */
static uint64_t glibc_number(const char *s) {
  uint64_t n = 0;
  bool neg = false;
  while (*s == ' ' || *s == '\t') s++;
  if (*s == '-' || *s == '+') neg = *s++ == '-';
  if (*s < '0' || *s > '9') return 0;
  unsigned base = 10, top = 9;
  if (*s == '0') {
    if (s[1] == 'x' || s[1] == 'X') base = 16, s += 2;
    else base = 8, top = 7;
  }
  for (;; s++) {
    unsigned d;
    if (*s >= '0' && *s <= (char)('0' + top)) d = (unsigned)(*s - '0');
    else if (base == 16 && *s >= 'a' && *s <= 'f') d = (unsigned)(*s - 'a' + 10);
    else if (base == 16 && *s >= 'A' && *s <= 'F') d = (unsigned)(*s - 'A' + 10);
    else break;
    if (n >= (UINT64_MAX - d) / base) return UINT64_MAX;
    n = n * base + d;
  }
  return neg ? -n : n;
}

/* glibc's tunable_initialize: value v is kept when it lies within t's bounds. */
static bool glibc_take(const struct glibc_tunable *t, const char *v, int64_t *out) {
  int64_t n = (int64_t)glibc_number(v);
  bool in = t->size ? (uint64_t)n >= (uint64_t)t->min && (uint64_t)n <= (uint64_t)t->max : n >= t->min && n <= t->max;
  if (in) *out = n;
  return in;
}

/* The name at s (ended by '=') is `name`. */
static bool glibc_is(const char *name, const char *s) {
  size_t n = __builtin_strlen(name);
  return __builtin_strncmp(s, name, n) == 0 && s[n] == '=';
}

/* GLIBC_TUNABLES's value: name=value pairs separated by ':'; a piece without '=' is skipped,
 * and the text stops at a name with no value (glibc's parse_tunables). */
static void glibc_tunables_read(const char *p, bool *set, int64_t *val) {
  for (;;) {
    const char *name = p;
    size_t len = 0;
    while (p[len] != '=' && p[len] != ':' && p[len]) len++;
    if (!p[len]) return;
    p += len + 1;
    if (p[-1] == ':') continue;
    len = 0;
    while (p[len] != ':' && p[len]) len++;
    if (__builtin_strncmp(name, "glibc.malloc.", 13) == 0)
      for (size_t i = 0; i < GLIBC_N; i++)
        if (glibc_is(glibc_tunables[i].name, name + 13)) {
          if (glibc_take(&glibc_tunables[i], p, &val[i])) set[i] = true;
          break;
        }
    p += len;
    if (*p) p++;
  }
}

static void glibc_read(struct fm_options *o) {
  bool set[GLIBC_N] = {0};
  int64_t val[GLIBC_N];
  for (char **e = environ; e && *e; e++) {
    const char *kv = *e;
    if (glibc_is("GLIBC_TUNABLES", kv)) {
      glibc_tunables_read(kv + 15, set, val);
      continue;
    }
    if (kv[0] != 'M' || __builtin_strncmp(kv, "MALLOC_", 7) != 0) continue;
    for (size_t i = 0; i < GLIBC_N; i++)
      if (glibc_tunables[i].alias && glibc_is(glibc_tunables[i].alias, kv)) {
        if (!set[i]) set[i] = glibc_take(&glibc_tunables[i], kv + __builtin_strlen(glibc_tunables[i].alias) + 1, &val[i]);
        break;
      }
  }
  for (size_t i = 0; i < GLIBC_N; i++)
    if (set[i] && glibc_tunables[i].apply) glibc_tunables[i].apply(o, val[i]);
}

void options_read(struct fm_options *o) {
  *o = (struct fm_options){.retain = FM_RETAIN_DEFAULT, .retain_delay = 1000, .heap_sample = 512u << 10};
  if (opt_classes(default_classes, o)) options_fail("FLATMALLOC_CLASSES", default_classes, "bad default");
  /* In a setuid or setgid program the environment is the caller's: no setting of theirs may
   * change the pool, print the heap's layout or stop the program (glibc ignores its tunables
   * there too), glibc's included. */
  if (os_secure()) return;
  glibc_read(o);   /* before the FLATMALLOC_* settings, which win */
  for (char **e = environ; e && *e; e++) {
    const char *kv = *e;
    if (kv[0] != 'F' || __builtin_strncmp(kv, "FLATMALLOC_", 11) != 0) continue;
    const char *eq = kv;
    while (*eq && *eq != '=') eq++;
    const struct option *opt = NULL;
    for (size_t i = 0; i < sizeof options / sizeof options[0]; i++) {
      size_t n = __builtin_strlen(options[i].name);
      if ((size_t)(eq - kv) == n && __builtin_memcmp(kv, options[i].name, n) == 0) opt = &options[i];
    }
    char name[OPT_SHOWN + 2];   /* one byte more than shown: a longer name gets its "..." */
    size_t n = (size_t)(eq - kv) < sizeof name - 1 ? (size_t)(eq - kv) : sizeof name - 1;
    __builtin_memcpy(name, kv, n);
    name[n] = 0;
    const char *value = *eq ? eq + 1 : "";
    if (!opt)
      options_fail(name, value,
                   "unknown setting (known: FLATMALLOC_POOL, FLATMALLOC_CLASSES, FLATMALLOC_LARGE, "
                   "FLATMALLOC_RETAIN, FLATMALLOC_RETAIN_DELAY, FLATMALLOC_PREFAULT, FLATMALLOC_HUGEPAGES, FLATMALLOC_STATS, "
                   "FLATMALLOC_CHECK, FLATMALLOC_PROFILE, FLATMALLOC_HEAP, FLATMALLOC_HEAP_SAMPLE, "
                   "FLATMALLOC_HEAP_SIGNAL)");
    const char *why = opt->parse(value, o);
    if (why) options_fail(name, value, why);
    if (opt->parse == opt_classes) o->classes_text = value;
  }
  options_reserve(o, o->classes_text);
}
