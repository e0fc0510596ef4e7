# bench/programs/dict_churn.py N: Python dict and object churn for bench/programs.sh (run with
# PYTHONMALLOC=malloc so every object reaches malloc). Each round fills a dict with N objects that
# carry their own small dicts, lists and strings, replaces half of them, rebuilds lists and tuples
# from what is left, and drops everything. Prints a checksum that must not depend on the allocator.
import sys


class Node:
    def __init__(self, k, v):
        self.k = k
        self.v = v
        self.attrs = {"id": k, "name": "n%d" % k, "tags": [k & 7, k & 15]}


def one_round(n, r):
    d = {}
    for i in range(n):
        key = "key-%d-%d" % ((i * 7919 + r) % (2 * n), r)
        d[key] = Node(i, [i, str(i), (i, i + 1)])
    for key in list(d)[::2]:
        del d[key]
    for i in range(n // 2):
        d["new-%d" % i] = {"x": i, "y": (str(i), i * 2), "z": [i] * (i & 7)}
    rows = [(k, len(k)) for k in d if k.startswith("key")]
    words = " ".join(k for k, _ in rows[:1000]).split()
    total = sum(l for _, l in rows) + len(words)
    for v in d.values():
        if isinstance(v, Node):
            total += len(v.attrs["name"]) + v.attrs["tags"][1]
        else:
            total += len(v["y"][0])
    return total


def main():
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 200000
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    total = 0
    for r in range(rounds):
        total += one_round(n, r)
    print(total)


main()
