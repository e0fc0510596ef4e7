#!/usr/bin/env bash
# bench/scale.sh: bench/scale's workloads (threads, batches, a large heap, idle threads; issue 17)
# against glibc, jemalloc, tcmalloc, mimalloc and flatmalloc, one table per workload.
#
#   bench/scale.sh                 5 repetitions (aimed at <= 6 minutes on an idle 2-core machine)
#   bench/scale.sh --quick         3 repetitions of shorter runs (aimed at 1-2 minutes)
#   bench/scale.sh --only own,idle --allocators glibc,mimalloc,flatmalloc --reps 7
#   bench/scale.sh --extra before=/tmp/old/libflatmalloc.so     (one more library, repeatable)
#   options: --reps N  --only W1,W2  --allocators A,B  --extra NAME=PATH  --quick  --out DIR
#            --bin PATH (a built bench/scale: skips the build)  --ref NAME (default flatmalloc)
#            workloads: own batch prodcons falseshare larson map bigheap idle
#
# Same binary, one variable: every run is `scale MODE ...` with only LD_PRELOAD changing. Within
# each repetition every invocation runs once per allocator in turn (a,b,c,d,e, then the next
# invocation), so slow drifts of the machine touch all allocators alike; the tables show medians
# over repetitions, REF's ratio to each allocator and to the best of the four peers, and for `own`
# each allocator's T-thread throughput over its own 1-thread throughput. Then issue 17's targets
# are checked on those medians. raw.csv, summary.csv (median/min/max), tables.txt, machine.txt
# and logs/ (stderr of failed runs) go to bench/results/scale-<date>/.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../scripts/lib.sh
. "$here/../scripts/lib.sh"

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2; exit 2; }
log() { echo "scale: $*" >&2; }

reps='' only='' allocs_arg='' out='' bin='' quick=0 ref=flatmalloc extras=()
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift ;;
    --only) only=$2; shift ;;
    --allocators) allocs_arg=$2; shift ;;
    --extra) extras+=("$2"); shift ;;
    --quick) quick=1 ;;
    --out) out=$2; shift ;;
    --bin) bin=$2; shift ;;
    --ref) ref=$2; shift ;;
    -h|--help) usage ;;
    *) echo "scale: unknown option $1" >&2; usage ;;
  esac
  shift
done
reps=${reps:-$([ "$quick" = 1 ] && echo 3 || echo 5)}
[ "$reps" -ge 1 ] 2>/dev/null || { echo "scale: --reps needs a number >= 1" >&2; exit 2; }
all_workloads=(own batch prodcons falseshare larson map bigheap idle)
workloads=("${all_workloads[@]}")
[ -n "$only" ] && IFS=, read -r -a workloads <<<"$only"
for w in "${workloads[@]}"; do
  [[ " ${all_workloads[*]} " == *" $w "* ]] || { echo "scale: unknown workload $w (${all_workloads[*]})" >&2; exit 2; }
done

# ---------- build ----------
if [ -z "$bin" ]; then
  fm_build_lib >&2 || { log "the project does not build; give --bin PATH to a built bench/scale"; exit 1; }
  bin=$fm_build/bench/scale
fi
[ -x "$bin" ] || { echo "scale: $bin was not built (meson configure -Dbenchmarks=enabled?)" >&2; exit 1; }

# ---------- allocators ----------
fm_peers
if [ -f "$fm_build/preload/libflatmalloc.so" ]; then
  add_alloc flatmalloc "$fm_build/preload/libflatmalloc.so"
else
  log "flatmalloc not built ($fm_build/preload/libflatmalloc.so): left out"
fi
for e in "${extras[@]}"; do
  [ -f "${e#*=}" ] && [ "${e%%=*}" != "$e" ] || { echo "scale: --extra wants NAME=PATH to a library, got $e" >&2; exit 2; }
  add_alloc "${e%%=*}" "$(readlink -f "${e#*=}")"
done
allocs=("${all_allocs[@]}")
if [ -n "$allocs_arg" ]; then
  IFS=, read -r -a allocs <<<"$allocs_arg"
  for a in "${allocs[@]}"; do [ -n "${LIB[$a]+x}" ] || { echo "scale: unknown allocator $a" >&2; exit 2; }; done
fi

# ---------- invocations: WORKLOAD|ARGS (one process each) ----------
q=()
[ "$quick" = 1 ] && q=(--quick)
jobs=()
for w in "${workloads[@]}"; do
  case "$w" in
    own) for t in 1 2 4 16; do jobs+=("own|own --threads $t"); done ;;
    bigheap) jobs+=("bigheap|bigheap --size 64" "bigheap|bigheap --size 1024") ;;
    *) jobs+=("$w|$w") ;;
  esac
done

# ---------- results ----------
stamp=$(date +%Y-%m-%d_%H%M%S)
out=${out:-$fm_top/bench/results/scale-$stamp}
mkdir -p "$out/logs"
raw=$out/raw.csv
echo "rep,allocator,workload,metric,value" >"$raw"
load_start=$(uptime)
{
  echo "date: $(date -Is)"
  echo "mode: $([ "$quick" = 1 ] && echo quick || echo full), reps: $reps, workloads: ${workloads[*]}"
  echo "nproc: $(nproc)"
  echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
  echo "kernel: $(uname -r)"
  echo "commit: $(git -C "$fm_top" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "uptime at start: $load_start"
  for a in "${allocs[@]}"; do echo "allocator: $a ${LIB[$a]:-(none: glibc)}"; done
  echo "allocators: ${allocs[*]}"
} >"$out/machine.txt"
log "uptime at start: $load_start"
if awk -v l="$(cut -d' ' -f1 /proc/loadavg)" 'BEGIN { exit !(l >= 1.0) }'; then
  log "WARNING: load average >= 1 at start: other work is running, expect noisy numbers"
fi
log "results in $out; ${#jobs[@]} invocations x ${#allocs[@]} allocators x $reps repetitions"

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
csv_line='^[A-Za-z0-9_.:+/-]+,[^,]+,-?[0-9.]+([eE][-+]?[0-9]+)?$'
failures=0
t_all=$(date +%s)
declare -A wl_secs # wall seconds per workload, all allocators and repetitions
for rep in $(seq 1 "$reps"); do
  for job in "${jobs[@]}"; do
    wl=${job%%|*}
    read -r -a args <<<"${job#*|}"
    for a in "${allocs[@]}"; do
      pre=(env -u LD_PRELOAD -u FLATMALLOC_BUILD_DIR)
      [ -n "${LIB[$a]}" ] && pre+=("LD_PRELOAD=${LIB[$a]}")
      rc=0 t0=$(date +%s.%N)
      timeout -k 10 600 "${pre[@]}" "$bin" "${args[@]}" "${q[@]}" >"$tmp/out" 2>"$tmp/err" || rc=$?
      wl_secs[$wl]=$(awk -v a="${wl_secs[$wl]:-0}" -v t0="$t0" -v t1="$(date +%s.%N)" 'BEGIN { printf "%.1f", a + t1 - t0 }')
      if [ "$rc" -ne 0 ]; then
        failures=$((failures + 1))
        tag=$(echo "${args[*]}" | tr ' ' '_')
        cp "$tmp/err" "$out/logs/$tag-$a-$rep.err"
        log "FAILED ($rc): ${args[*]} with $a (rep $rep): $(head -c 300 "$tmp/err")"
        echo "$rep,$a,failures,$wl,1" >>"$raw"
        continue
      fi
      grep -E "$csv_line" "$tmp/out" | sed "s/^/$rep,$a,/" >>"$raw" || true
    done
  done
  log "repetition $rep/$reps done ($(( $(date +%s) - t_all )) s)"
done
load_end=$(uptime)
echo "uptime at end: $load_end" >>"$out/machine.txt"

# ---------- tables ----------
python3 - "$out" "$ref" "$here" <<'EOF' | tee "$out/tables.txt"
import csv, os, sys

outdir, ref = sys.argv[1], sys.argv[2]
PEERS = ["glibc", "jemalloc", "tcmalloc", "mimalloc"]
TITLES = {
    "own": "own: T threads, each its own 1,000 slots of 16 B-4 KiB (log-uniform), Mops/s (calls)",
    "batch": "batch: 100,000 mallocs of one size then 100,000 frees in allocation order, Mops/s",
    "prodcons": "prodcons: one thread mallocs, another frees (batches of 256 through a ring), Mops/s",
    "falseshare": "falseshare: 2 threads write their own 8 B objects (active; passive after a handed free), seconds",
    "larson": "larson: 2 lineages of threads replacing 8-1000 B blocks, each handing its array to a successor, Mops/s",
    "map": "map: std::map<int,int>, 1M entries (500k with --quick) in scrambled order, seconds",
    "bigheap": "bigheap: free+malloc pair against 262,144 live blocks, ns per pair (TSC)",
    "idle": "idle: 1,000 threads that allocated and freed 400 blocks of 16 B-4 KiB, now waiting; KiB resident",
}

# raw.csv's rows, their medians and summary.csv as scripts/bench makes them (report.py); runs
# that failed are rows of workload "failures", counted apart
sys.path.insert(0, sys.argv[3])
from report import better, load, write_summary

fails = {}
with open(os.path.join(outdir, "raw.csv")) as f:
    for r in csv.DictReader(f):
        if r["workload"] == "failures":
            fails[(r["metric"], r["allocator"])] = fails.get((r["metric"], r["allocator"]), 0) + 1
allocs, vals, med, order = load(outdir)
order = [k for k in order if k[0] != "failures"]
write_summary(outdir, allocs, vals, order)

def fmt(v):
    if v is None:
        return "-"
    a = abs(v)
    return f"{v:.0f}" if a >= 100 else f"{v:.1f}" if a >= 10 else f"{v:.2f}" if a >= 1 else f"{v:.3g}"

def best_peer(d, m):
    c = {a: d[a] for a in PEERS if a in d and a in allocs}
    if not c:
        return None
    return (max if better(m) == "higher" else min)(c, key=c.get)

def ratio(x, y):
    return "-" if x is None or not y else f"{x / y:.2f}"

for line in open(os.path.join(outdir, "machine.txt")):
    if line.split(":")[0] in ("date", "mode", "nproc", "cpu", "commit", "uptime at start", "uptime at end"):
        print(line.rstrip())
print("values are medians over repetitions (spread in summary.csv). Ratios are of the values:")
print(f"REF = {ref}; on 'higher' rows (Mops/s) >1 means REF is better, on 'lower' rows <1 does.")
print("best = the best of the four peers (glibc, jemalloc, tcmalloc, mimalloc) on that row.")
has_ref = ref in allocs
short = "fm" if ref == "flatmalloc" else ref[:6]
others = [a for a in allocs if a != ref] if has_ref else []
nonpeer = [a for a in allocs if a not in PEERS]
workloads = []
for w, _ in order:
    if w not in workloads:
        workloads.append(w)
for w in workloads:
    keys = [k for k in order if k[0] == w]
    cols = allocs + [f"{short}/{a}" for a in others] + ["best"] + [f"{short if a == ref else a}/best" for a in nonpeer]
    nw = max([len(k[1]) for k in keys] + [8])
    cw = max([len(c) for c in cols] + [8]) + 1
    print(f"\n== {TITLES.get(w, w)}")
    head = f"{'metric':<{nw}} {'better':<6}" + "".join(f"{c:>{cw}}" for c in cols)
    print(head)
    print("-" * len(head))
    for k in keys:
        d = med[k]
        line = f"{k[1]:<{nw}} {better(k[1]):<6}" + "".join(f"{fmt(d.get(a)):>{cw}}" for a in allocs)
        line += "".join(f"{ratio(d.get(ref), d.get(a)):>{cw}}" for a in others)
        b = best_peer(d, k[1])
        line += f"{(b or '-'):>{cw}}"
        line += "".join(f"{ratio(d.get(a), d.get(b) if b else None):>{cw}}" for a in nonpeer)
        print(line)
    if w == "own":
        ts = sorted(int(m[1:].split("_")[0]) for (ww, m) in keys)
        if 1 in ts:
            print(f"\n   own scaling: T threads' Mops/s over the same allocator's 1 thread "
                  "(2.00 = twice the work on 2 cores)")
            print(f"{'':<{nw}} {'':<6}" + "".join(f"{a:>{cw}}" for a in allocs))
            one = med.get(("own", "t1_mops_per_s"), {})
            for t in ts:
                if t == 1:
                    continue
                d = med.get(("own", f"t{t}_mops_per_s"), {})
                print(f"{f't{t}/t1':<{nw}} {'higher':<6}" +
                      "".join(f"{ratio(d.get(a), one.get(a)):>{cw}}" for a in allocs))

if fails:
    print("\n== failures (runs that exited non-zero or timed out; stderr in logs/)")
    for (wl, a), n in sorted(fails.items()):
        print(f"  {wl}: {a} x{n}")

# issue 17's "done when", on this run's medians
if has_ref:
    out = []
    def g(w, m, a):
        return med.get((w, m), {}).get(a)
    def check(name, ok, detail):
        out.append(f"  [{'PASS' if ok else 'MISS'}] {name}: {detail}")
    one = g("own", "t1_mops_per_s", ref)
    for t in (2, 4, 16):
        v = g("own", f"t{t}_mops_per_s", ref)
        if v is None or one is None:
            continue
        check(f"own t{t} >= 1.8 x t1", v >= 1.8 * one, f"{v:.1f} / {one:.1f} = {v / one:.2f}")
        b = best_peer(med.get(("own", f"t{t}_mops_per_s"), {}), "per_s")
        if b:
            bv = g("own", f"t{t}_mops_per_s", b)
            check(f"own t{t} >= 0.9 x best peer", v >= 0.9 * bv, f"{v:.1f} vs {b} {bv:.1f} (x{v / bv:.2f})")
    for s in (16, 64, 256, 1024, 4096):
        v, m = g("batch", f"fifo_{s}_mops_per_s", ref), g("batch", f"fifo_{s}_mops_per_s", "mimalloc")
        if v is not None and m:
            check(f"batch {s} B >= mimalloc", v >= m, f"{v:.1f} vs {m:.1f} Mops/s (x{v / m:.2f})")
    for w, m in [("prodcons", "64_mops_per_s"), ("prodcons", "1024_mops_per_s"), ("falseshare", "active_s"),
                 ("falseshare", "passive_s"), ("larson", "mops_per_s"), ("map", "build_s"), ("map", "total_s")]:
        d = med.get((w, m), {})
        v, b = d.get(ref), best_peer(d, m)
        if v is None or b is None:
            continue
        bv = d[b]
        if better(m) == "higher":
            check(f"{w} {m} within 1.1x best peer", v * 1.1 >= bv, f"{v:.3g} vs {b} {bv:.3g} (x{v / bv:.2f})")
        else:
            check(f"{w} {m} within 1.1x best peer", v <= 1.1 * bv, f"{v:.3g} vs {b} {bv:.3g} (x{v / bv:.2f})")
    for s in (64, 1024):
        v, j = g("bigheap", f"{s}_p50_ns", ref), g("bigheap", f"{s}_p50_ns", "jemalloc")
        if v is not None and j:
            check(f"bigheap {s} B P50 <= 1.25 x jemalloc", v <= 1.25 * j, f"{v:.0f} vs {j:.0f} ns (x{v / j:.2f})")
        d = med.get(("bigheap", f"{s}_p99.99_ns"), {})
        d = {a: x for a, x in d.items() if a in PEERS or a == ref}
        if ref in d and len(d) > 1:
            check(f"bigheap {s} B P99.99 lowest of the five", min(d, key=d.get) == ref,
                  ", ".join(f"{a} {d[a]:.0f}" for a in allocs if a in d) + " ns")
    for m in ("rss_idle_kb", "rss_after_exit_kb"):
        v, gl = g("idle", m, ref), g("idle", m, "glibc")
        if v is not None and gl:
            check(f"idle {m} <= 2 x glibc", v <= 2 * gl, f"{v:.0f} vs {gl:.0f} KiB (x{v / gl:.2f})")
    if out:
        print(f"\n== issue 17 targets, {ref}, on this run's medians (a noisy machine moves them)")
        print("\n".join(out))
EOF
log "seconds per workload (all runs): $(for w in "${workloads[@]}"; do printf '%s %s  ' "$w" "${wl_secs[$w]:-0}"; done)"
log "uptime at start: $load_start"
log "uptime at end:   $load_end"
log "done: $out ($failures failed runs, $(( $(date +%s) - t_all )) s)"
[ "$failures" -eq 0 ]
