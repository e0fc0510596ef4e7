#!/usr/bin/env python3
"""Tables and ratios for scripts/bench.

  report.py table RESULTS_DIR [--verbose] [--ref NAME]
      reads RESULTS_DIR/raw.csv (rep,allocator,workload,metric,value), writes summary.csv (median,
      min, max and count per allocator) and prints one table per workload: every allocator's
      median and the reference allocator's (flatmalloc's) ratio to each, then the design targets.
  report.py gbench FILE.json           Google Benchmark JSON -> "micro,metric,value" lines
  report.py stressng FILE.yaml         stress-ng --yaml output -> "stress_ng,metric,value" lines
  report.py callgrind FILE SIZE PAIRS  callgrind.out -> "callgrind,pair_SIZE_instr,value"

Ratios are always REF/x of the metric itself. For a "lower is better" row (times, latencies,
instructions, memory) a ratio below 1 means REF is better; for a "higher is better" row
(throughput: *_per_s) a ratio above 1 means REF is better. Every row says which.
"""
import csv
import json
import math
import os
import re
import statistics
import sys

ALLOCATOR_ORDER = ["glibc", "jemalloc", "tcmalloc", "mimalloc", "flatmalloc"]
SIZES = [16, 64, 256, 1024, 4096, 65536]
PCTS = ["p50", "p99", "p99.9", "p99.99", "max"]


def better(metric):
    """'higher' for throughput-like metrics, 'lower' for everything else."""
    if re.search(r"(per_s|_tps|^tps|throughput|ops_s$|_rate)", metric):
        return "higher"
    return "lower"


# ---------------------------------------------------------------- converters

def cmd_gbench(path):
    """One row per benchmark: the in-process median when it ran with repetitions, else the run."""
    with open(path) as f:
        data = json.load(f)
    benches = data.get("benchmarks", [])
    medians = [b for b in benches
               if b.get("run_type") == "aggregate" and b.get("aggregate_name") == "median"]
    picked = medians or [b for b in benches if b.get("run_type", "iteration") == "iteration"]
    for b in picked:
        if "error_occurred" in b:
            continue
        name = b.get("run_name", b["name"])
        name = re.sub(r"^BM_", "", name)
        name = re.sub(r"/(real_time|process_time|manual_time)$", "", name)
        name = name.replace("/", "_")
        ips = b.get("items_per_second")
        if ips:
            print(f"micro,{name}_ns,{1e9 / ips:.4f}")
            if name.startswith("cross_thread"):
                print(f"micro,{name}_mpairs_per_s,{ips / 1e6:.4f}")
        else:  # no items: time per iteration
            unit = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}[b.get("time_unit", "ns")]
            print(f"micro,{name}_iter_ns,{b['real_time'] * unit:.4f}")


def cmd_stressng(path):
    with open(path) as f:
        text = f.read()
    m = re.search(r"bogo-ops-per-second-real-time:\s*([0-9.eE+-]+)", text)
    if m:
        print(f"stress_ng,bogo_ops_per_s,{float(m.group(1)):.2f}")
    m = re.search(r"bogo-ops-per-second-usr-sys-time:\s*([0-9.eE+-]+)", text)
    if m:
        print(f"stress_ng,bogo_ops_per_cpu_s,{float(m.group(1)):.2f}")


def cmd_callgrind(path, size, pairs):
    total = None
    with open(path) as f:
        for line in f:
            if line.startswith("summary:") or (total is None and line.startswith("totals:")):
                total = int(line.split()[1])
    if total is None:
        sys.exit(f"report.py: no summary in {path}")
    # the loop's own instructions (run_pairs' self cost) are the same for every allocator: take
    # them out so the figure is malloc+free alone
    loop = 0
    try:
        import subprocess
        ann = subprocess.run(["callgrind_annotate", "--threshold=100", path], capture_output=True,
                             text=True, check=True).stdout
        for line in ann.splitlines():
            if re.search(r":run_pairs\b", line):
                loop = int(line.split()[0].replace(",", ""))
                break
    except (OSError, subprocess.CalledProcessError, ValueError):
        loop = 0
    print(f"callgrind,pair_{size}_instr,{(total - loop) / int(pairs):.2f}")


# ---------------------------------------------------------------- tables

def load(outdir):
    rows = []
    with open(os.path.join(outdir, "raw.csv")) as f:
        for r in csv.DictReader(f):
            try:
                rows.append((r["allocator"], r["workload"], r["metric"], float(r["value"])))
            except (ValueError, KeyError):
                pass
    allocs = []
    mpath = os.path.join(outdir, "machine.txt")
    if os.path.exists(mpath):
        with open(mpath) as f:
            for line in f:
                if line.startswith("allocators:"):
                    allocs = line.split(":", 1)[1].split()
    for a, *_ in rows:
        if a not in allocs:
            allocs.append(a)
    vals = {}  # (workload, metric) -> allocator -> [values]
    order = []  # (workload, metric) in first-seen order
    for a, w, m, v in rows:
        key = (w, m)
        if key not in vals:
            vals[key] = {}
            order.append(key)
        vals[key].setdefault(a, []).append(v)
    med = {k: {a: statistics.median(v) for a, v in d.items()} for k, d in vals.items()}
    return allocs, vals, med, order


def write_summary(outdir, allocs, vals, order):
    with open(os.path.join(outdir, "summary.csv"), "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["workload", "metric", "better", "allocator", "n", "median", "min", "max"])
        for key in order:
            for a in allocs:
                v = vals[key].get(a)
                if v:
                    w.writerow([key[0], key[1], better(key[1]), a, len(v),
                                f"{statistics.median(v):.6g}", f"{min(v):.6g}", f"{max(v):.6g}"])


def fmt(v):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-"
    a = abs(v)
    if a >= 100:
        return f"{v:.0f}"
    if a >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


def hot_rows(verbose):
    if verbose:
        return [f"{op}_{s}_{p}" for s in SIZES for op in ("pair", "malloc", "free")
                for p in [x + "_ns" for x in PCTS] + ["mean_ns", "tail_p99.9/p50"]]
    rows = [f"pair_{s}_p50_ns" for s in SIZES if s != 64]
    rows += [f"pair_{s}_p99.9_ns" for s in SIZES if s != 64]
    for op in ("pair", "malloc", "free"):
        rows += [f"{op}_64_{p}" for p in ("p50_ns", "p99.9_ns", "p99.99_ns", "max_ns",
                                          "mean_ns", "tail_p99.9/p50")]
    return rows


def churn_rows(verbose):
    ops = ("all", "malloc", "free")
    ps = PCTS + ["mean"] if verbose else ["p50", "p99", "p99.9", "p99.99", "max"]
    rows = [f"{op}_{p}_ns" for op in ops for p in ps]
    if verbose:
        rows += [f"{op}_tail_p99.9/p50" for op in ops]
    return rows + ["rss_delta_kb"]


def mt_rows(verbose):
    ps = PCTS + ["mean"] if verbose else ["p50", "p99.9", "p99.99", "max"]
    return (["pairs_per_s"] + [f"producer_malloc_{p}_ns" for p in ps]
            + [f"consumer_free_{p}_ns" for p in ps] + ["rss_delta_kb"])


TITLES = {
    "micro": "micro (Google Benchmark): ns per item; item = malloc+free pair, realloc call, or calloc+free",
    "latency_hot": "latency_hot: single calls, ns (malloc alone, free alone, and the pair)",
    "latency_churn": "latency_churn: fragmenting churn, ~100k live blocks 16 B-64 KiB, drifting sizes, ns per call",
    "latency_mt": "latency_mt: one thread mallocs, the other frees (64 B), ns per call",
    "stress_ng": "stress_ng: stress-ng --malloc 1, a fixed number of bogo-ops (bogo-ops per second, wall clock)",
    "peak_rss": "peak_rss: peak resident set of each workload's process, KiB (/usr/bin/time %M)",
    "callgrind": "callgrind: instructions per malloc+free pair, the loop's own excluded (deterministic, one run)",
    "failures": "failures: runs that exited non-zero or timed out (count)",
}
SKIP = {"timer", "churn_window", "pairs"}
SPEED = re.compile(r"(tps|seconds|per_s|_ms$|_ns$|_s$|time)")
OWN = SKIP | {"micro", "latency_hot", "latency_churn", "latency_mt", "stress_ng", "peak_rss",
              "callgrind", "failures"}


def print_table(title, rows, allocs, med, ref, out):
    others = [a for a in allocs if a != ref] if ref else []
    name_w = max([len(r[1]) for r in rows] + [10])
    short = "fm" if ref == "flatmalloc" else (ref or "")[:4]
    cols = allocs + [f"{short}/{a}" for a in others]
    col_w = max([len(c) for c in cols] + [9]) + 1
    print(f"\n== {title}", file=out)
    if ref:
        print(f"   {short}/x = {ref}/x: on rows 'lower' <1 = {ref} better; "
              f"on rows 'higher' >1 = {ref} better", file=out)
    head = f"{'metric':<{name_w}} {'better':<6}" + "".join(f"{a:>{col_w}}" for a in allocs)
    head += "".join(f"{short + '/' + a:>{col_w}}" for a in others)
    print(head, file=out)
    print("-" * len(head), file=out)
    for key in rows:
        d = med.get(key, {})
        line = f"{key[1]:<{name_w}} {better(key[1]):<6}"
        line += "".join(f"{fmt(d.get(a)):>{col_w}}" for a in allocs)
        r = d.get(ref) if ref else None
        for a in others:
            x = d.get(a)
            if r is None or x is None:
                cell = "-"
            elif x == 0:
                cell = "inf" if r > 0 else "1.00"
            else:
                cell = f"{r / x:.2f}"
            line += f"{cell:>{col_w}}"
        print(line, file=out)


def targets(allocs, med, ref, out):
    """The design's targets (design.md, Targets), checked on the medians of this run."""
    if ref not in allocs:
        return
    lines = []

    def get(w, m, a):
        return med.get((w, m), {}).get(a)

    def check(name, ok, detail, ratio=None):
        """ratio: REF/other where 1 is the line; within 3 % of it the two are even (noise)."""
        if ratio is not None and abs(ratio - 1) <= 0.03:
            lines.append(f"  [EVEN] {name}: {detail}")
        elif ok is None:
            lines.append(f"  [ ?? ] {name}: {detail}")
        else:
            lines.append(f"  [{'PASS' if ok else 'MISS'}] {name}: {detail}")

    # 1. pair 16..4096 at least as fast as mimalloc
    if "mimalloc" in allocs:
        worst = None
        for s in (16, 64, 256, 1024, 4096):
            f, m = get("micro", f"pair_{s}_ns", ref), get("micro", f"pair_{s}_ns", "mimalloc")
            if f and m:
                r = f / m
                if worst is None or r > worst[0]:
                    worst = (r, s, f, m)
        if worst:
            check("malloc+free pair 16-4096 B <= mimalloc", worst[0] <= 1.0,
                  f"worst size {worst[1]} B: {worst[2]:.2f} ns vs {worst[3]:.2f} ns (x{worst[0]:.2f})",
                  worst[0])
    # 2. tail at 64 B hot path. An empty timed region already reads P99.9 = e above its median
    # (the counter's step), so the true ratio lies between (P99.9 - e)/P50 and P99.9/P50.
    t = get("latency_hot", "pair_64_tail_p99.9/p50", ref)
    p50, p999 = get("latency_hot", "pair_64_p50_ns", ref), get("latency_hot", "pair_64_p99.9_ns", ref)
    e = get("timer", "empty_p99.9_ns", ref) or 0.0
    if t is not None and p50:
        lo = max(p999 - e, 0.0) / p50
        note = f"P99.9 {p999:.1f} ns / P50 {p50:.1f} ns = {t:.2f}"
        if t <= 2.5:
            check("hot path 64 B P99.9 <= 2.5 x P50", True, note)
        elif lo > 2.5:
            check("hot path 64 B P99.9 <= 2.5 x P50", False, note + f" (at least {lo:.2f} "
                  f"after the timer's own P99.9 of {e:.1f} ns)")
        else:
            check("hot path 64 B P99.9 <= 2.5 x P50", None,
                  note + f"; the timer's own P99.9 is {e:.1f} ns, so the true ratio is "
                  f"roughly between {lo:.2f} and {t:.2f}: not resolved by this counter")
    # 3. churn P99.99 lowest of all
    d = med.get(("latency_churn", "all_p99.99_ns"), {})
    if ref in d and len(d) > 1:
        best = min(d, key=d.get)
        check("churn P99.99 lowest of all allocators", best == ref,
              ", ".join(f"{a} {d[a]:.0f}" for a in allocs if a in d) + " ns")
    # 4. cross-thread not slower than mimalloc
    if "mimalloc" in allocs:
        f, m = get("micro", "cross_thread_64_ns", ref), get("micro", "cross_thread_64_ns", "mimalloc")
        if f and m:
            check("cross-thread free (64 B) not slower than mimalloc", f <= m,
                  f"{f:.1f} vs {m:.1f} ns per pair (x{f / m:.2f})", f / m)
    # 5. peak RSS <= 1.25 x glibc
    if "glibc" in allocs:
        worst = None
        for (w, m), dd in med.items():
            if (w == "peak_rss" or (w not in OWN and m.endswith("_kb"))) and ref in dd \
                    and dd.get("glibc"):
                r = dd[ref] / dd["glibc"]
                if worst is None or r > worst[0]:
                    worst = (r, m if w == "peak_rss" else f"{w} {m}", dd[ref], dd["glibc"])
        if worst:
            check("peak RSS <= 1.25 x glibc on every workload", worst[0] <= 1.25,
                  f"worst {worst[1]}: {worst[2]:.0f} vs {worst[3]:.0f} KiB (x{worst[0]:.2f})")
    # 6. PostgreSQL at least as fast as glibc (bench/pg/run.sh's rows: any workload not ours;
    # its memory rows count in the RSS check above)
    if "glibc" in allocs:
        for (w, m), dd in med.items():
            if w not in OWN and SPEED.search(m) and ref in dd and dd.get("glibc"):
                r = dd[ref] / dd["glibc"]
                ok = r <= 1.0 if better(m) == "lower" else r >= 1.0
                check(f"{w} {m} at least as good as glibc", ok,
                      f"{fmt(dd[ref])} vs {fmt(dd['glibc'])} (x{r:.2f}, {better(m)} is better)", r)
    if lines:
        print(f"\n== targets (design.md), medians of this run, {ref} "
              "(EVEN: within 3 %, inside this machine's noise; ??: not measurable here)", file=out)
        for line in lines:
            print(line, file=out)


def cmd_table(outdir, verbose=False, ref="flatmalloc"):
    allocs, vals, med, order = load(outdir)
    write_summary(outdir, allocs, vals, order)
    if ref not in allocs:
        ref = None
    out = sys.stdout
    mpath = os.path.join(outdir, "machine.txt")
    if os.path.exists(mpath):
        with open(mpath) as f:
            for line in f:
                if line.split(":")[0] in ("date", "mode", "nproc", "cpu", "kernel", "commit", "load at start"):
                    print(line.rstrip(), file=out)
    t = med.get(("timer", "resolution_ns"))
    o = med.get(("timer", "overhead_ns"))
    if t:
        tr = statistics.median(t.values())
        ov = statistics.median(o.values()) if o else float("nan")
        print(f"timer: TSC step {tr:.2f} ns, timed-region overhead {ov:.1f} ns (subtracted); "
              "single-call percentiles are interpolated within a step", file=out)
    print("values are medians over repetitions; raw values in raw.csv, spread in summary.csv",
          file=out)

    workloads = []
    for w, _ in order:
        if w not in workloads:
            workloads.append(w)
    known = ["micro", "latency_hot", "latency_churn", "latency_mt", "stress_ng"]
    tail = ["peak_rss", "callgrind", "failures"]
    seq = [w for w in known if w in workloads]
    seq += [w for w in workloads if w not in known and w not in tail and w not in SKIP]
    seq += [w for w in tail if w in workloads]
    for w in seq:
        present = [k for k in order if k[0] == w]
        if w == "failures":
            print("\n== failures: runs that exited non-zero or timed out (logs/ has their stderr)",
                  file=out)
            for k in present:
                print(f"  {k[1]}: " + ", ".join(f"{a} x{int(sum(vals[k][a]))}" for a in vals[k]),
                      file=out)
            continue
        if w == "latency_hot":
            rows = [(w, m) for m in hot_rows(verbose) if (w, m) in med]
        elif w == "latency_churn":
            rows = [(w, m) for m in churn_rows(verbose) if (w, m) in med]
        elif w == "latency_mt":
            rows = [(w, m) for m in mt_rows(verbose) if (w, m) in med]
        elif w == "stress_ng" and not verbose:
            rows = [k for k in present if k[1] == "bogo_ops_per_s"]
        else:
            rows = present
        if rows:
            print_table(TITLES.get(w, f"{w} (from its own program)"), rows, allocs, med, ref, out)
    if ref:
        targets(allocs, med, ref, out)


def main(argv):
    if len(argv) < 2:
        sys.exit(__doc__)
    cmd = argv[1]
    if cmd == "gbench" and len(argv) == 3:
        cmd_gbench(argv[2])
    elif cmd == "stressng" and len(argv) == 3:
        cmd_stressng(argv[2])
    elif cmd == "callgrind" and len(argv) == 5:
        cmd_callgrind(argv[2], argv[3], argv[4])
    elif cmd == "table" and len(argv) >= 3:
        verbose = "--verbose" in argv[3:]
        ref = "flatmalloc"
        if "--ref" in argv[3:]:
            ref = argv[argv.index("--ref") + 1]
        cmd_table(argv[2], verbose, ref)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
