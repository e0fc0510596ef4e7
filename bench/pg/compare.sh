#!/usr/bin/env bash
# bench/pg/compare.sh [--quick] [--rounds N] [--lib LIBFLATMALLOC] [--allocators a,b,...]
#
# Runs bench/pg/run.sh for glibc, jemalloc, tcmalloc, mimalloc and flatmalloc, alternating
# round-robin (a,b,c,d,e,a,b,...) for N rounds (3 by default), and prints per metric the median
# of each allocator and flatmalloc's ratio to each (flatmalloc/x: for tps above 1 means flatmalloc
# is better, for seconds and kB below 1 does). Raw values go to bench/results/pg_<date>/raw.csv
# (`round,allocator,workload,metric,value`) and the table to tables.txt beside it.
# The library defaults to $FM_BUILD_DIR/preload/libflatmalloc.so (built by scripts/lib.sh).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../../scripts/lib.sh
. "$here/../../scripts/lib.sh"

quick=
rounds=3
lib=
allocators=glibc,jemalloc,tcmalloc,mimalloc,flatmalloc
while [ $# -gt 0 ]; do
  case "$1" in
    --quick) quick=--quick ;;
    --rounds) rounds=$2; shift ;;
    --lib) lib=$2; shift ;;
    --allocators) allocators=$2; shift ;;
    *) echo "usage: $0 [--quick] [--rounds N] [--lib PATH] [--allocators a,b,...]" >&2; exit 2 ;;
  esac
  shift
done

fm_need_packages postgresql libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0
if [ -z "$lib" ]; then
  fm_build_lib >&2
  lib=$fm_build/preload/libflatmalloc.so
fi
multiarch=/usr/lib/$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
declare -A LIB=(
  [glibc]=""
  [jemalloc]=$multiarch/libjemalloc.so.2
  [tcmalloc]=$multiarch/libtcmalloc_minimal.so.4
  [mimalloc]=$multiarch/libmimalloc.so.2
  [flatmalloc]=$(readlink -f "$lib")
)
IFS=, read -r -a allocs <<<"$allocators"
for a in "${allocs[@]}"; do
  [ -n "${LIB[$a]+set}" ] || { echo "unknown allocator $a" >&2; exit 2; }
  [ -z "${LIB[$a]}" ] || [ -f "${LIB[$a]}" ] || { echo "$a: ${LIB[$a]} not found" >&2; exit 1; }
done

out=$fm_top/bench/results/pg_$(date +%Y%m%d_%H%M%S)
mkdir -p "$out"
raw=$out/raw.csv
echo "round,allocator,workload,metric,value" >"$raw"
{
  echo "date: $(date -Is)"
  echo "host: $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ //'), $(uname -r)"
  echo "load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "command: $0 ${quick:+$quick }--rounds $rounds --allocators $allocators"
  echo "flatmalloc: ${LIB[flatmalloc]}"
} >"$out/machine.txt"
cat "$out/machine.txt" >&2

failures=0
for r in $(seq "$rounds"); do
  for a in "${allocs[@]}"; do
    echo "pg-compare: round $r/$rounds: $a" >&2
    if timeout -k 10 1800 env -u LD_PRELOAD bash "$here/run.sh" $quick "${LIB[$a]}" >"$out/run.csv" 2>"$out/run.err"; then
      grep -E '^[a-z_]+,[a-z_]+,[0-9.]+$' "$out/run.csv" | sed "s/^/$r,$a,/" >>"$raw"
    else
      failures=$((failures + 1))
      cp "$out/run.err" "$out/failed-$a-$r.err"
      echo "pg-compare: FAILED: $a round $r (stderr in $out/failed-$a-$r.err)" >&2
    fi
  done
done
rm -f "$out/run.csv" "$out/run.err"
echo "load average at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"

python3 - "$raw" "$allocators" <<'EOF' | tee "$out/tables.txt"
import csv, statistics, sys
from collections import defaultdict
raw, allocs = sys.argv[1], sys.argv[2].split(",")
vals, order = defaultdict(list), []
for row in csv.DictReader(open(raw)):
    key = (row["workload"], row["metric"])
    if key not in order:
        order.append(key)
    vals[key, row["allocator"]].append(float(row["value"]))
ref = "flatmalloc"
others = [a for a in allocs if a != ref]
head = f"{'workload,metric':<32}" + "".join(f"{a:>12}" for a in allocs)
if ref in allocs:
    head += "".join(f"{'fm/' + a[:6]:>11}" for a in others)
print(head)
for key in order:
    med = {a: statistics.median(vals[key, a]) for a in allocs if vals[key, a]}
    line = f"{key[0] + ',' + key[1]:<32}" + "".join(
        f"{med[a]:>12.4g}" if a in med else f"{'-':>12}" for a in allocs)
    if ref in med:
        line += "".join(f"{med[ref] / med[a]:>11.3f}" if med.get(a) else f"{'-':>11}" for a in others)
    print(line)
n = {a: len(vals[order[0], a]) for a in allocs} if order else {}
print(f"medians over rounds per allocator: {n}; tps: higher is better; seconds, kB: lower is better")
EOF
echo "pg-compare: results in $out" >&2
[ "$failures" -eq 0 ]
