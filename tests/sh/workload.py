"""Threaded allocation workload for programs_python.sh: 4 threads build and drop large dicts,
lists of strings and big byte buffers. Prints one checksum line per thread and a total, all
independent of scheduling and of the hash seed, so runs with and without flatmalloc compare
equal. usage: python3 workload.py [ROUNDS] [THREADS]"""
import sys
import threading
import zlib

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 4
THREADS = int(sys.argv[2]) if len(sys.argv) > 2 else 4


def work(tid, results):
    crc = 0
    kept = []  # a few survivors per round, so blocks outlive the round that made them
    for rnd in range(ROUNDS):
        d = {f"k{tid}-{rnd}-{i}": i * 7 + tid for i in range(200_000)}
        words = [str(i * 31 + rnd) * (1 + i % 7) for i in range(100_000)]
        index = {w: n for n, w in enumerate(words[::3])}
        nested = [[j * rnd for j in range(i % 50)] for i in range(20_000)]
        buf = bytearray((1 << 20) * (1 + (tid + rnd) % 8))  # 1 to 8 MiB
        for off in range(0, len(buf), 4096):
            buf[off] = (off >> 12) & 0xFF
        total = sum(d.values()) + sum(len(w) for w in words) + len(index)
        total += sum(sum(x) for x in nested) + sum(buf[::4096])
        text = "|".join(words[::997]) + ":" + str(total)
        crc = zlib.crc32(text.encode(), crc)
        # grow and shrink a list (realloc of its item array)
        grow = []
        for i in range(300_000):
            grow.append(i)
        del grow[1000:]
        crc = zlib.crc32(repr(grow[-5:]).encode(), crc)
        kept.append(words[rnd::5000])
        if len(kept) > 2:
            kept.pop(0)
        del d, words, index, nested, buf, grow
    crc = zlib.crc32(repr(kept).encode(), crc)
    results[tid] = crc


def main():
    results = [None] * THREADS
    threads = [threading.Thread(target=work, args=(t, results)) for t in range(THREADS)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for tid, crc in enumerate(results):
        print(f"thread {tid}: crc32 {crc:08x}")
    print(f"total: crc32 {zlib.crc32(repr(results).encode()):08x}")


if __name__ == "__main__":
    main()
