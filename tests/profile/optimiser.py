#!/usr/bin/env python3
"""The class optimiser of scripts/flatmalloc-classes against brute force (suite 'profile').

usage: optimiser.py PATH/TO/scripts/flatmalloc-classes PATH/TO/src/options.c

1. 400 random histograms of 1-9 sizes (multiples of 16 up to 4 KiB, peaks 0-50) and every k:
   the optimiser's waste equals the least waste over every class set of at most k sizes that
   contains the largest size, and its classes give that waste; with a cost per class
   (--class-cost), waste + cost * classes is the least over every count up to k.
2. 30 random histograms of 40-80 sizes: equal to a plain O(k n^2) dynamic programme.
3. The script's DEFAULT_CLASSES are the sizes of default_classes in src/options.c.
4. --reserve percents sum to at most 50.
Any mismatch prints FAIL and exits 1."""
import itertools
import random
import re
import sys
from importlib.machinery import SourceFileLoader
from importlib.util import module_from_spec, spec_from_loader

script, options_c = sys.argv[1], sys.argv[2]
loader = SourceFileLoader('fmclasses', script)
fm = module_from_spec(spec_from_loader('fmclasses', loader))
loader.exec_module(fm)


def fail(msg):
    print('FAIL: ' + msg)
    sys.exit(1)


def brute(sizes, weights, k):
    best = None
    rest = sizes[:-1]
    for m in range(0, min(k, len(sizes)) ):
        for combo in itertools.combinations(rest, m):
            w = fm.waste_of(sizes, weights, list(combo) + [sizes[-1]])
            best = w if best is None or w < best else best
    return best


def plain_dp(sizes, weights, k):
    n = len(sizes)
    INF = float('inf')
    cost = lambda a, j: sum(weights[i] * (sizes[j] - sizes[i]) for i in range(a, j + 1))
    f = [[INF] * n for _ in range(k + 1)]
    for j in range(n):
        f[1][j] = cost(0, j)
    for m in range(2, k + 1):
        for j in range(n):
            for a in range(1, j + 1):
                f[m][j] = min(f[m][j], f[m - 1][a - 1] + cost(a, j))
    return min(f[m][n - 1] for m in range(1, k + 1))


rng = random.Random(0x5eed)
checked = 0
for trial in range(400):
    n = rng.randint(1, 9)
    sizes = sorted(rng.sample(range(16, 4097, 16), n))
    weights = [rng.choice([0, 1, 2, 3, 7, 50, rng.randint(0, 50)]) for _ in sizes]
    for k in range(1, n + 1):
        waste, classes, by_count = fm.optimise(sizes, weights, k)
        want = brute(sizes, weights, k)
        if waste != want:
            fail(f'sizes {sizes} peaks {weights} k={k}: optimiser {waste}, brute force {want}')
        if fm.waste_of(sizes, weights, classes) != waste:
            fail(f'sizes {sizes} peaks {weights} k={k}: classes {classes} do not give waste {waste}')
        if not classes or classes[-1] != sizes[-1] or len(classes) > k or classes != sorted(set(classes)):
            fail(f'sizes {sizes} k={k}: bad class list {classes}')
        if any(c % 16 for c in classes):
            fail(f'classes {classes} not multiples of 16')
        checked += 1
        # --class-cost: waste + cost * classes is least over every count up to k
        cc = rng.choice([0, 16, 500, 10 ** 4])
        waste, classes, _ = fm.optimise(sizes, weights, k, cc)
        want = min(brute(sizes, weights, m) + cc * m for m in range(1, k + 1))
        if waste + cc * len(classes) != want or fm.waste_of(sizes, weights, classes) != waste:
            fail(f'sizes {sizes} peaks {weights} k={k} class cost {cc}: {classes} gives '
                 f'{waste} + {cc} * {len(classes)}, brute force {want}')
print(f'ok: {checked} (histogram, k) pairs equal to brute force, also with a cost per class')

for trial in range(30):
    n = rng.randint(40, 80)
    sizes = sorted(rng.sample(range(16, 65537, 16), n))
    weights = [rng.randint(0, 1000) for _ in sizes]
    for k in (1, 2, 5, 17, n - 1):
        waste, _, _ = fm.optimise(sizes, weights, k)
        want = plain_dp(sizes, weights, k)
        if waste != want:
            fail(f'n={n} k={k}: optimiser {waste}, plain dynamic programme {want}')
print('ok: 150 larger cases equal to the plain O(k n^2) dynamic programme')

text = open(options_c).read()
m = re.search(r'default_classes\[\]\s*=\s*((?:\s*"[^"]*")+)\s*;', text)
if not m:
    fail('default_classes not found in ' + options_c)
spec = ''.join(re.findall(r'"([^"]*)"', m.group(1)))
sizes = [int(part.split(':')[0]) for part in spec.split(',')]
if sizes != fm.DEFAULT_CLASSES:
    fail(f'DEFAULT_CLASSES {fm.DEFAULT_CLASSES} differ from src/options.c {sizes}')
print(f'ok: DEFAULT_CLASSES equal the {len(sizes)} sizes of src/options.c')

for trial in range(200):
    n = rng.randint(1, 64)
    classes = sorted(rng.sample(range(16, 1 << 20, 16), n))
    byts = [rng.randint(1, 10 ** rng.randint(1, 9)) for _ in classes]
    res = fm.classes_line(classes, byts, 'reserve')[len('FLATMALLOC_CLASSES='):].split(',')
    pct = [float(p.split(':')[1]) for p in res if ':' in p]
    if sum(pct) > 50.0001 or [int(p.split(':')[0]) for p in res] != classes:
        fail(f'--reserve {res}: percents sum to {sum(pct)}')
print('ok: --reserve sums stay under 50')
