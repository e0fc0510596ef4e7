# dict.py: lookups in a large dict, for bench/largeheap.sh (issue 52), run with
# PYTHONMALLOC=malloc (every object through malloc) and PYTHONHASHSEED fixed.
# `python3 dict.py ENTRIES LOOKUPS SEED`: a dict of ENTRIES string keys ("k<i>") to int values,
# then LOOKUPS lookups of random keys made afresh (equal, not the same objects, so each lookup
# reads the stored key and its value in the heap). Prints on stdout a checksum of the values
# found, on stderr `timed: S s cpu: S` (the lookups only: perf_counter, then thread_time) and the
# AnonHugePages line of /proc/self/smaps_rollup.
import random, sys, time

n, lookups, seed = (int(a) for a in sys.argv[1:4])
rnd = random.Random(seed)
order = list(range(n))
rnd.shuffle(order)
d = {}
for i in order:
    d["k%d" % i] = i * 7 + 100000
del order
keys = ["k%d" % rnd.randrange(n) for _ in range(lookups)]
t0, c0 = time.perf_counter(), time.thread_time()
s = 0
for k in keys:
    s += d[k]
t1, c1 = time.perf_counter(), time.thread_time()
print(s + len(d))
print("timed: %.3f s cpu: %.3f" % (t1 - t0, c1 - c0), file=sys.stderr)
with open("/proc/self/smaps_rollup") as f:
    kb = next((l.split()[1] for l in f if l.startswith("AnonHugePages:")), "0")
print("AnonHugePages: %s kB" % kb, file=sys.stderr)
