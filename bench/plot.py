#!/usr/bin/env python3
"""Plots for scripts/bench: plot.py RESULTS_DIR  (reads summary.csv, writes PNGs beside it).

  latency_hot.png    percentiles (P50 .. max) of the malloc+free pair per size, per allocator, log
  latency_tails.png  the same for malloc alone / free alone at 64 B, the churn and the two threads
  churn_drift.png    per-window P99.99 and P50 of the drifting churn, per allocator, across the run
  micro.png          Google Benchmark ns per item, per allocator, log
  peak_rss.png       peak RSS of each workload's process, per allocator
All values are medians over the repetitions of one run.
"""
import csv
import os
import re
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

COLORS = {"glibc": "#4c72b0", "jemalloc": "#55a868", "tcmalloc": "#8172b2",
          "mimalloc": "#ccb974", "flatmalloc": "#c44e52"}
PCTS = ["p50", "p99", "p99.9", "p99.99", "max"]
SIZES = [16, 64, 256, 1024, 4096, 65536]


def load(outdir):
    med, allocs = {}, []
    with open(os.path.join(outdir, "summary.csv")) as f:
        for r in csv.DictReader(f):
            med.setdefault((r["workload"], r["metric"]), {})[r["allocator"]] = float(r["median"])
            if r["allocator"] not in allocs:
                allocs.append(r["allocator"])
    order = [a for a in COLORS if a in allocs] + [a for a in allocs if a not in COLORS]
    return med, order


def style(a):
    fm = a == "flatmalloc"
    return dict(color=COLORS.get(a), lw=2.6 if fm else 1.4, marker="o", ms=5 if fm else 3.5,
                zorder=3 if fm else 2, label=a)


def size_label(s):
    return f"{s // 1024} KiB" if s >= 1024 else f"{s} B"


def percentile_panel(ax, med, allocs, workload, prefix, title, floor=None):
    drawn = False
    for a in allocs:
        ys = [med.get((workload, f"{prefix}_{p}_ns"), {}).get(a) for p in PCTS]
        if any(y is None for y in ys):
            continue
        ax.plot(range(len(PCTS)), [max(y, 0.1) for y in ys], **style(a))
        drawn = True
    ax.set_xticks(range(len(PCTS)))
    ax.set_xticklabels(["P50", "P99", "P99.9", "P99.99", "max"])
    ax.set_yscale("log")
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.3)
    if floor:
        ax.axhline(floor, color="grey", ls="--", lw=0.8)
    return drawn


def timer_step(med):
    d = med.get(("timer", "resolution_ns"))
    return sorted(d.values())[len(d) // 2] if d else None


def plot_hot(outdir, med, allocs):
    step = timer_step(med)
    fig, axes = plt.subplots(2, 3, figsize=(14, 8), sharey=True)
    drawn = False
    for ax, s in zip(axes.flat, SIZES):
        drawn |= percentile_panel(ax, med, allocs, "latency_hot", f"pair_{s}",
                                  f"malloc+free pair, {size_label(s)}", step)
    if not drawn:
        plt.close(fig)
        return
    for ax in axes[:, 0]:
        ax.set_ylabel("ns (log)")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("Hot-path latency percentiles per allocator"
                 + (f" (dashed: TSC step {step:.0f} ns)" if step else ""))
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "latency_hot.png"), dpi=110)
    plt.close(fig)


def plot_tails(outdir, med, allocs):
    step = timer_step(med)
    panels = [("latency_hot", "malloc_64", "hot: malloc alone, 64 B"),
              ("latency_hot", "free_64", "hot: free alone, 64 B"),
              ("latency_churn", "malloc", "churn: malloc"),
              ("latency_churn", "free", "churn: free"),
              ("latency_mt", "producer_malloc", "two threads: producer malloc"),
              ("latency_mt", "consumer_free", "two threads: consumer free (cross-thread)")]
    fig, axes = plt.subplots(2, 3, figsize=(14, 8))
    drawn = False
    for ax, (w, p, t) in zip(axes.flat, panels):
        drawn |= percentile_panel(ax, med, allocs, w, p, t, step)
    if not drawn:
        plt.close(fig)
        return
    for ax in axes[:, 0]:
        ax.set_ylabel("ns (log)")
    axes.flat[0].legend(fontsize=8)
    fig.suptitle("Latency percentiles per allocator")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "latency_tails.png"), dpi=110)
    plt.close(fig)


def plot_drift(outdir, med, allocs):
    wins = sorted({int(m[1:4]) for (w, m) in med if w == "churn_window" and re.match(r"w\d{3}_", m)})
    if not wins:
        return
    fig, (ax1, ax2, ax3) = plt.subplots(3, 1, figsize=(11, 10), sharex=True,
                                        gridspec_kw={"height_ratios": [3, 2, 1]})
    xs_any = None
    for a in allocs:
        xs, p9999, p50 = [], [], []
        for i in wins:
            x = med.get(("churn_window", f"w{i:03d}_ops_m"), {}).get(a)
            y = med.get(("churn_window", f"w{i:03d}_p99.99_ns"), {}).get(a)
            z = med.get(("churn_window", f"w{i:03d}_p50_ns"), {}).get(a)
            if x is None or y is None or z is None:
                continue
            xs.append(x)
            p9999.append(max(y, 0.1))
            p50.append(max(z, 0.1))
        if xs:
            ax1.plot(xs, p9999, **style(a))
            ax2.plot(xs, p50, **style(a))
            xs_any = xs_any or xs
    if not xs_any:
        plt.close(fig)
        return
    centers = [med.get(("churn_window", f"w{i:03d}_center_b"), {}) for i in wins]
    cs = [sorted(c.values())[len(c) // 2] if c else None for c in centers]
    xs = [sorted(med.get(("churn_window", f"w{i:03d}_ops_m"), {0: 0}).values())[0] for i in wins]
    ax3.plot(xs, cs, color="grey", marker=".")
    ax3.set_yscale("log", base=2)
    ax3.set_ylabel("size centre\n(B, log2)")
    ax1.set_yscale("log")
    ax2.set_yscale("log")
    ax1.set_ylabel("P99.99 per window, ns")
    ax2.set_ylabel("P50 per window, ns")
    ax3.set_xlabel("operations (millions, middle of each window; a malloc and a free each count)")
    ax1.legend(fontsize=8)
    for ax in (ax1, ax2, ax3):
        ax.grid(True, which="both", alpha=0.3)
    ax1.set_title("Fragmenting churn: per-window tail as the size distribution drifts")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "churn_drift.png"), dpi=110)
    plt.close(fig)


def grouped_bars(ax, labels, allocs, get, log=False):
    n = len(allocs)
    width = 0.8 / max(n, 1)
    for j, a in enumerate(allocs):
        ys = [get(lab, a) for lab in labels]
        xs = [i + (j - (n - 1) / 2) * width for i in range(len(labels))]
        ax.bar([x for x, y in zip(xs, ys) if y is not None], [y for y in ys if y is not None],
               width=width, color=COLORS.get(a), label=a,
               edgecolor="black" if a == "flatmalloc" else None)
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
    if log:
        ax.set_yscale("log")
    ax.grid(True, axis="y", which="both", alpha=0.3)
    ax.legend(fontsize=8)


def plot_micro(outdir, med, allocs):
    labels = [m[:-3] for (w, m) in med if w == "micro" and m.endswith("_ns")]
    if not labels:
        return
    fig, ax = plt.subplots(figsize=(14, 6))
    grouped_bars(ax, labels, allocs, lambda lab, a: med.get(("micro", lab + "_ns"), {}).get(a),
                 log=True)
    ax.set_ylabel("ns per item (log; lower is better)")
    ax.set_title("Google Benchmark microbenchmarks")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "micro.png"), dpi=110)
    plt.close(fig)


def plot_rss(outdir, med, allocs):
    labels = [m[:-3] for (w, m) in med if w == "peak_rss" and m.endswith("_kb")]
    if not labels:
        return
    fig, ax = plt.subplots(figsize=(10, 5))
    grouped_bars(ax, labels, allocs,
                 lambda lab, a: (lambda v: v / 1024 if v is not None else None)(
                     med.get(("peak_rss", lab + "_kb"), {}).get(a)), log=True)
    ax.set_ylabel("peak RSS, MiB (log; lower is better)")
    ax.set_title("Peak resident set per workload process")
    fig.tight_layout()
    fig.savefig(os.path.join(outdir, "peak_rss.png"), dpi=110)
    plt.close(fig)


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    outdir = sys.argv[1]
    med, allocs = load(outdir)
    plot_hot(outdir, med, allocs)
    plot_tails(outdir, med, allocs)
    plot_drift(outdir, med, allocs)
    plot_micro(outdir, med, allocs)
    plot_rss(outdir, med, allocs)
    print(f"plots: {', '.join(sorted(f for f in os.listdir(outdir) if f.endswith('.png')))}",
          file=sys.stderr)


if __name__ == "__main__":
    main()
