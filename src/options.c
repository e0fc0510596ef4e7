/* Settings: one table, read from environ directly (getenv may not be safe this early and
 * nothing here may allocate). A bad value stops the program with one line naming it. */
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
  if (*s && s[1] && !((s[1] == 'b' || s[1] == 'B') && !s[2]) && !((s[1] == 'i') && (s[2] == 'B') && !s[3]))
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

static const char *opt_classes(const char *v, struct fm_options *o) {
  const char *s = v;
  unsigned n = 0;
  uint32_t sum = 0;
  while (*s) {
    uint64_t size = 0;
    if (n == FM_CLASS_MAX) return "too many classes (at most 64)";
    if (*s < '0' || *s > '9') return "expected size:percent,...";
    for (; *s >= '0' && *s <= '9'; s++)
      if ((size = size * 10 + (uint64_t)(*s - '0')) > FM_SMALL_MAX) return "class size above 1048576";
    if (*s++ != ':') return "expected size:percent,...";
    if (size == 0 || size % FM_ALIGN) return "class sizes must be multiples of 16";
    if (n && size <= o->class_size[n - 1]) return "class sizes must be ascending";
    const char *why = parse_centi(&s, &o->class_bp[n]);
    if (why) return why;
    if (o->class_bp[n] == 0) return "every class needs a share above 0";
    sum += o->class_bp[n];
    o->class_size[n++] = (uint32_t)size;
    if (*s == ',') s++;
    else if (*s) return "expected size:percent,...";
  }
  if (n == 0) return "no classes";
  if (sum != 10000) return "percentages must sum to 100";
  o->nclass = n;
  return NULL;
}

static const char *opt_large(const char *v, struct fm_options *o) {
  const char *s = v;
  uint32_t c;
  const char *why = parse_centi(&s, &c);
  if (why) return why;
  if (*s) return "expected a percentage";
  if (c < 100 || c > 9900) return "expected a percentage from 1 to 99";
  o->large_pct = c / 100;
  return NULL;
}

static const char *opt_retain(const char *v, struct fm_options *o) {
  uint64_t n;
  const char *why = parse_size(v, &n);
  if (!why) o->retain = n;
  return why;
}

static const char *opt_prefault(const char *v, struct fm_options *o) { return parse_bool(v, &o->prefault); }
static const char *opt_stats(const char *v, struct fm_options *o) { return parse_bool(v, &o->stats); }
static const char *opt_check(const char *v, struct fm_options *o) { return parse_bool(v, &o->check); }
/* Ignored in a setuid or setgid program (AT_SECURE): it would create files with the program's
 * privileges wherever the caller names. */
static const char *opt_profile(const char *v, struct fm_options *o) {
  if (!*v) return "expected a file path";
  if (!os_secure()) o->profile = v;
  return NULL;
}

static const struct option options[] = {
  {"FLATMALLOC_POOL", "physical memory, halved until it can be reserved", opt_pool,
   "size of the one pool reserved at start-up (K, M, G, T suffixes)"},
  {"FLATMALLOC_CLASSES", "16 B to 64 KiB, see README", opt_classes,
   "size classes and their shares of the small area: size:percent,..."},
  {"FLATMALLOC_LARGE", "50", opt_large, "percent of the pool for blocks above the largest class"},
  {"FLATMALLOC_RETAIN", "64M", opt_retain, "free large memory kept resident before pages go back"},
  {"FLATMALLOC_PREFAULT", "0", opt_prefault, "1: commit every page of the pool at start-up"},
  {"FLATMALLOC_STATS", "0", opt_stats, "1: print statistics to stderr at exit"},
  {"FLATMALLOC_CHECK", "0", opt_check, "1: checking mode (headers, canaries, abort on misuse)"},
  {"FLATMALLOC_PROFILE", "unset", opt_profile, "record request sizes and peaks into FILE.PID at exit"},
};

void options_fail(const char *name, const char *value, const char *why) {
  char buf[512];
  struct fmt f = {buf, sizeof buf, 0};
  fmt_str(&f, "flatmalloc: ");
  fmt_str(&f, name);
  fmt_str(&f, "=");
  fmt_str(&f, value);
  fmt_str(&f, ": ");
  fmt_str(&f, why);
  size_t n = fmt_end(&f);
  if (n > sizeof buf - 2) n = sizeof buf - 2;
  buf[n++] = '\n';
  os_write(2, buf, n);
  _exit(1);
}

/* Four classes per doubling from 128 B (16-byte steps below), up to 64 KiB. Shares are bytes,
 * so they lean to the larger sizes: 2 % of the small area holds 16M blocks of 16 B in the
 * default pool, far more than programs use, but only 8,000 blocks of 32 KiB. */
static const char default_classes[] =
    "16:2,32:2,48:2,64:2,80:2,96:2,112:2,128:2,"
    "160:2,192:2,224:2,256:2,320:2,384:2,448:2,512:2,"
    "640:2,768:2,896:2,1024:2,1280:2,1536:2,1792:2,2048:2,"
    "2560:2.5,3072:2.5,3584:2.5,4096:2.5,5120:2.5,6144:2.5,7168:2.5,8192:2.5,"
    "10240:2.5,12288:2.5,14336:2.5,16384:2.5,20480:2.5,24576:2.5,28672:2.5,32768:2.5,"
    "40960:3,49152:3,57344:3,65536:3";

void options_read(struct fm_options *o) {
  *o = (struct fm_options){.large_pct = 50, .retain = FM_RETAIN_DEFAULT};
  if (opt_classes(default_classes, o)) options_fail("FLATMALLOC_CLASSES", default_classes, "bad default");
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
    char name[64];
    size_t n = (size_t)(eq - kv) < sizeof name - 1 ? (size_t)(eq - kv) : sizeof name - 1;
    __builtin_memcpy(name, kv, n);
    name[n] = 0;
    const char *value = *eq ? eq + 1 : "";
    if (!opt)
      options_fail(name, value,
                   "unknown setting (known: FLATMALLOC_POOL, FLATMALLOC_CLASSES, FLATMALLOC_LARGE, "
                   "FLATMALLOC_RETAIN, FLATMALLOC_PREFAULT, FLATMALLOC_STATS, FLATMALLOC_CHECK, "
                   "FLATMALLOC_PROFILE)");
    const char *why = opt->parse(value, o);
    if (why) options_fail(name, value, why);
  }
}
