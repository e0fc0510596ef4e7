# bench/programs/gen_c.py N: writes to stdout a C file of N generated functions for
# bench/programs.sh's gcc workload (gcc -O2 -c). Each function has loops, a switch, a struct
# and calls to its neighbours, so the optimiser's passes (inlining, loop and value analysis) all
# have work; the text depends only on N.
import sys

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
out = sys.stdout
out.write("#include <stddef.h>\n#include <string.h>\n\n")
out.write("struct rec { int a, b, c; double d; char name[16]; struct rec *next; };\n\n")
for i in range(n):
    out.write("int f%d(int x, struct rec *r, int *v, size_t len);\n" % i)
for i in range(n):
    k = (i * 7919) % 97
    out.write("""
static inline int g%(i)d(int x) { return (x * %(k)d) ^ (x >> %(s)d); }
int f%(i)d(int x, struct rec *r, int *v, size_t len)
{
  int acc = x + %(k)d;
  for (size_t j = 0; j < len; j++) {
    acc += v[j] * g%(i)d((int)j);
    if (acc > %(lim)d) acc -= v[(j * 3) %% len];
  }
  switch (x & 7) {
  case 0: acc += r ? r->a : 1; break;
  case 1: acc ^= r ? r->b * %(k)d : 2; break;
  case 2: if (r) { r->d = r->d * 1.5 + acc; acc += (int)r->d; } break;
  case 3: if (r && r->next) acc += f%(p)d(x - 1, r->next, v, len / 2); break;
  case 4: if (r) { memcpy(r->name, "f%(i)d", sizeof "f%(i)d" < 16 ? sizeof "f%(i)d" : 16); acc += r->name[1]; } break;
  default: acc = g%(i)d(acc) + (int)len;
  }
  for (int u = 0; u < 8; u++)
    acc = (acc << 1) ^ (acc >> 3) ^ u ^ %(k)d;
  if (x > 0 && %(rec)d)
    acc += f%(q)d(x / 2, r, v, len);
  return acc;
}
""" % {"i": i, "k": k + 1, "s": i % 7 + 1, "lim": 1000 + k * 13, "p": max(i - 1, 0),
       "q": (i * 31 + 7) % n, "rec": 1 if i % 4 == 0 else 0})
