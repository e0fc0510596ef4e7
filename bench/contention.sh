#!/usr/bin/env bash
# bench/contention.sh: threads against the middle layer (issue 31). For T threads, bench/scale's
# own (private working sets) and xchg (one block in eight freed by another thread) under glibc,
# jemalloc, tcmalloc, mimalloc and flatmalloc, alternating within each repetition; then, for
# flatmalloc, one run of an instrumented build (meson -Dcounters=true) that counts, per million
# calls, the acquisitions of locks threads share, the acquisitions that had to wait, and the
# atomic read-modify-writes on lines other threads write.
#
#   bench/contention.sh                       T = 1 2 64 300 1000 4000, 3 repetitions
#   bench/contention.sh --threads "2 400" --reps 5 --ops 1000000 --allocators glibc,flatmalloc
#   bench/contention.sh --load 2             with two busy processes beside every run (fm_load_start)
#
# Medians go to stdout as a table; raw.csv to bench/results/contention-<date>/ (--out DIR: there
# instead). Each run has a 40 s limit (a run past it counts as failed and is shown as "-").
# --ops is per thread up to 256 threads, shared out past that (bench/scale.c). Before and after
# each run, `scale xcpu` measures how long a cache line takes to go between two CPUs and back
# (xcpu_ns and xcpu_after_ns in raw.csv): this host has two speeds, about 100 and 400 ns, that
# change within seconds, and the exchanged rows follow them; a second table gives the medians of
# the runs at each speed (fast: both under 250 ns; slow: both over; a run with one of each is in
# neither).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../scripts/lib.sh
. "$here/../scripts/lib.sh"

threads="1 2 64 300 1000 4000" reps=3 ops=400000 allocs_arg='' load=0 out=
while [ $# -gt 0 ]; do
  case "$1" in
    --threads) threads=$2; shift ;;
    --reps) reps=$2; shift ;;
    --ops) ops=$2; shift ;;
    --allocators) allocs_arg=$2; shift ;;
    --load) load=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2 ;;
    *) echo "contention: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done
[ "$load" -ge 0 ] 2>/dev/null || { echo "contention: --load needs a number >= 0" >&2; exit 2; }

fm_need_packages libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 >&2
fm_build_lib >&2
counters=$fm_build-counters
if [ ! -f "$counters/build.ninja" ]; then
  CC=${CC:-clang} meson setup "$counters" "$fm_top" -Dcounters=true -Dbenchmarks=disabled >/dev/null
fi
meson compile -C "$counters" flatmalloc >/dev/null   # the library (its file is libflatmalloc.so.VERSION)

fm_peers
add_alloc flatmalloc "$fm_build/preload/libflatmalloc.so"
allocs=("${all_allocs[@]}")
[ -n "$allocs_arg" ] && IFS=, read -r -a allocs <<<"$allocs_arg"

[ -n "$out" ] || out=$fm_top/bench/results/contention-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out"
echo "rep,threads,mode,allocator,mops,rss_kb,hwm_kb,xcpu_ns,xcpu_after_ns" >"$out/raw.csv"
{ uptime; nproc; echo "load: $load busy processes during the runs (--load)"; } >"$out/machine.txt"
echo "contention: load $(cut -d' ' -f1-3 /proc/loadavg), results in $out" >&2

trap fm_load_stop EXIT
fm_load_start "$load"

for r in $(seq 1 "$reps"); do
  for t in $threads; do
    for mode in own xchg; do
      for a in "${allocs[@]}"; do
        xcpu=$(fm_xcpu)
        res=$(env ${LIB[$a]:+LD_PRELOAD=${LIB[$a]}} timeout 40 "$fm_build/bench/scale" "$mode" --threads "$t" --ops "$ops" 2>/dev/null) || res=''
        mops=$(sed -n "s/^$mode,t${t}_mops_per_s,//p" <<<"$res")
        rss=$(sed -n "s/^$mode,t${t}_rss_kb,//p" <<<"$res")
        hwm=$(sed -n "s/^$mode,t${t}_hwm_kb,//p" <<<"$res")
        after=$(fm_xcpu)
        echo "$r,$t,$mode,$a,${mops:-},${rss:-},${hwm:-},${xcpu:-},${after:-}" >>"$out/raw.csv"
      done
    done
  done
done

fm_load_stop
echo "threads,mode,calls,locks,waits,shared_rmw,heap_locks" >"$out/counters.csv"
for t in $threads; do
  for mode in own xchg; do
    res=$(LD_PRELOAD=$counters/preload/libflatmalloc.so timeout 40 "$fm_build/bench/scale" "$mode" --threads "$t" --ops "$ops" 2>&1) || true
    calls=$(( t > 256 ? ops / 2 * 2 * 256 : ops / 2 * 2 * t ))   # as scale.c shares --ops out
    c=$(sed -n 's/.*flatmalloc counters: locks=\([0-9]*\) waits=\([0-9]*\) shared_rmw=\([0-9]*\) heap_locks=\([0-9]*\).*/\1,\2,\3,\4/p' <<<"$res")
    echo "$t,$mode,$calls,${c:-,,,}" >>"$out/counters.csv"
  done
done

python3 - "$out" <<'EOF'
import csv, statistics, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(out + "/raw.csv")))
allocs = list(dict.fromkeys(r["allocator"] for r in rows))
keys = list(dict.fromkeys((int(r["threads"]), r["mode"]) for r in rows))
def med(t, m, a, f):
    v = [float(r[f]) for r in rows if int(r["threads"]) == t and r["mode"] == m and r["allocator"] == a and r[f]]
    return statistics.median(v) if v else None
print("Mops/s, median of %d (min-max of flatmalloc), and flatmalloc over the best peer" % max(int(r["rep"]) for r in rows))
print("| threads | mode | " + " | ".join(allocs) + " | flat / best peer | flat slowest / median |")
print("|---|---|" + "---|" * len(allocs) + "---|---|")
for t, m in keys:
    ms = {a: med(t, m, a, "mops") for a in allocs}
    peers = [v for a, v in ms.items() if a != "flatmalloc" and v]
    fl = [float(r["mops"]) for r in rows if int(r["threads"]) == t and r["mode"] == m and r["allocator"] == "flatmalloc" and r["mops"]]
    ratio = "%.2f" % (ms["flatmalloc"] / max(peers)) if peers and ms.get("flatmalloc") else "-"
    low = "%.2f" % (min(fl) / statistics.median(fl)) if fl else "-"
    print("| %d | %s | " % (t, m) + " | ".join("%.1f" % ms[a] if ms[a] else "-" for a in allocs) + " | %s | %s |" % (ratio, low))
print()
FAST = 250   # ns: the host's fast speed is about 100, its slow one about 400 (scale xcpu)
def speed_med(t, m, a, fast):
    v = [float(r["mops"]) for r in rows if int(r["threads"]) == t and r["mode"] == m and r["allocator"] == a and r["mops"]
         and r["xcpu_ns"] and r["xcpu_after_ns"] and (float(r["xcpu_ns"]) < FAST) == fast and (float(r["xcpu_after_ns"]) < FAST) == fast]
    return (statistics.median(v), len(v)) if v else (None, 0)
print("The same runs by the host's speed before and after each (scale xcpu under %d ns: fast), Mops/s, median (runs)" % FAST)
print("| threads | mode | speed | " + " | ".join(allocs) + " | flat / best peer |")
print("|---|---|---|" + "---|" * len(allocs) + "---|")
for t, m in keys:
    for fast in (True, False):
        ms = {a: speed_med(t, m, a, fast) for a in allocs}
        if not any(n for _, n in ms.values()):
            continue
        peers = [v for a, (v, _) in ms.items() if a != "flatmalloc" and v]
        f = ms.get("flatmalloc", (None, 0))[0]
        ratio = "%.2f" % (f / max(peers)) if peers and f else "-"
        print("| %d | %s | %s | " % (t, m, "fast" if fast else "slow") +
              " | ".join("%.1f (%d)" % (v, n) if v else "-" for v, n in ms.values()) + " | %s |" % ratio)
print()
print("Peak RSS (VmHWM) / RSS after the threads exited, MiB, medians; flatmalloc's peak over glibc's")
print("| threads | mode | " + " | ".join(allocs) + " | flat / glibc peak |")
print("|---|---|" + "---|" * len(allocs) + "---|")
for t, m in keys:
    cell = lambda a: "%.0f / %.0f" % (med(t, m, a, "hwm_kb") / 1024, med(t, m, a, "rss_kb") / 1024) if med(t, m, a, "hwm_kb") else "-"
    g, f = med(t, m, "glibc", "hwm_kb") if "glibc" in allocs else None, med(t, m, "flatmalloc", "hwm_kb")
    print("| %d | %s | " % (t, m) + " | ".join(cell(a) for a in allocs) + " | %s |" % ("%.2f" % (f / g) if g and f else "-"))
print()
print("flatmalloc, instrumented build, per million calls")
print("| threads | mode | shared-lock acquisitions | of them the heap's | waits | atomic RMWs on shared lines |")
print("|---|---|---|---|---|---|")
for r in csv.DictReader(open(out + "/counters.csv")):
    if not r["locks"]:
        print("| %s | %s | - | - | - | - |" % (r["threads"], r["mode"])); continue
    n = int(r["calls"]) / 1e6
    print("| %s | %s | %.0f | %.1f | %.1f | %.0f |" % (r["threads"], r["mode"], int(r["locks"]) / n, int(r["heap_locks"]) / n,
                                                    int(r["waits"]) / n, int(r["shared_rmw"]) / n))
EOF
