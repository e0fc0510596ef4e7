# gen_c.awk: writes a C translation unit for programs_gcc.sh: NF (-v nf=N, default 80) functions
# of about 20 lines each, with static tables, switches, loops, recursion and an inline helper.
BEGIN {
  n = (nf ? nf : 80)
  print "#include <stddef.h>\n#include <string.h>\n#include <stdint.h>\n"
  print "struct rec { int a; long b; double c; char name[24]; struct rec *next; };"
  print "static inline uint32_t mix(uint32_t x) { x ^= x >> 16; x *= 0x7feb352dU; x ^= x >> 15; x *= 0x846ca68bU; return x ^ (x >> 16); }"
  for (f = 0; f < n; f++) {
    printf "static int table_%d[%d] = {", f, 16 + f % 17
    for (k = 0; k < 16 + f % 17; k++) printf "%s%d", (k ? ", " : ""), (f * 131 + k * 17) % 1009
    print "};"
    printf "int func_%d(struct rec *r, int n, const char *s) {\n", f
    print "  int acc = 0; double d = 0.0; size_t len = s ? strlen(s) : 0;"
    printf "  for (int i = 0; i < n; i++) {\n"
    printf "    switch ((i + %d) %% 7) {\n", f
    for (c = 0; c < 7; c++) {
      printf "    case %d: acc += table_%d[(i * %d) %% %d] * %d; d += r[i].c * %d.5; break;\n", c, f, c + 1, 16 + f % 17, (c * 7 + f) % 13 + 1, c
    }
    print "    }"
    printf "    if (acc > %d) acc = (int)mix((uint32_t)acc) %% %d;\n", 100000 + f, 9973 + f
    print "    r[i].a += acc; r[i].b ^= (long)acc << (i % 13);"
    printf "    if (len && s[i %% len] == '%c') { memcpy(r[i].name, s, len < 23 ? len : 23); r[i].name[23] = 0; }\n", 97 + f % 26
    print "  }"
    print "  for (struct rec *p = r; p && n-- > 0; p = p->next) acc += p->a + (int)p->c;"
    if (f > 0) printf "  if (acc %% 3 == 0 && n > 1) acc += func_%d(r + 1, n / 2, s);\n", f - 1
    print "  return acc + (int)d;"
    print "}"
    print ""
  }
  print "int run_all(struct rec *r, int n, const char *s) {\n  int t = 0;"
  for (f = 0; f < n; f++) printf "  t ^= func_%d(r, n, s);\n", f
  print "  return t;\n}"
}
