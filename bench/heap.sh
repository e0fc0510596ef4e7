#!/usr/bin/env bash
# bench/heap.sh [REPS]: the heap profiler's cost. Each workload runs REPS times (default 5) with
# the same library, alternating without and with FLATMALLOC_HEAP (default sampling, 512K), and
# the table gives the medians and their ratio. Micro benchmarks: nanoseconds per item (thread
# CPU time, Google Benchmark); python (tests/sh/workload.py) and gcc -O2 -c (a 3,500-line file
# from tests/sh/gen_c.awk): user + system CPU seconds. Needs the build (FM_BUILD_DIR or build/).
set -euo pipefail
export LC_ALL=C
top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${FM_BUILD_DIR:-$top/build}
lib=$build/preload/libflatmalloc.so
micro=$build/bench/micro
reps=${1:-5}
tmp=$(mktemp -d /tmp/fm-heapcost.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
[ -f "$lib" ] && [ -x "$micro" ] || { echo "build first: ninja -C $build" >&2; exit 1; }
awk -v nf=150 -f "$top/tests/sh/gen_c.awk" >"$tmp/gen.c"
filter='BM_pair/(64|4096)$|BM_batch_random/1000$|BM_realloc_growth$|BM_calloc/256$|BM_cross_thread/64/'

# run MODE: one repetition of every workload; prints "workload value" lines
run() {
  local e=(LD_PRELOAD="$lib")
  [ "$1" = on ] && e+=(FLATMALLOC_HEAP="$tmp/h")
  env "${e[@]}" "$micro" --benchmark_filter="$filter" --benchmark_min_time=0.3 --benchmark_format=csv 2>/dev/null |
    awk -F, '/^"BM_/ { gsub("\"", "", $1); print $1, 1e9 / $7 }'
  env "${e[@]}" /usr/bin/time -f '%U %S' -o "$tmp/t" /usr/bin/python3 "$top/tests/sh/workload.py" 3 4 >/dev/null
  awk '{ print "python", $1 + $2 }' "$tmp/t"
  env "${e[@]}" /usr/bin/time -f '%U %S' -o "$tmp/t" /usr/bin/gcc -O2 -c "$tmp/gen.c" -o "$tmp/gen.o"
  awk '{ print "gcc", $1 + $2 }' "$tmp/t"
  rm -f "$tmp"/h.*
}

echo "load: $(uptime)"
for r in $(seq "$reps"); do
  run off | sed 's/^/off /' >>"$tmp/all"
  run on | sed 's/^/on /' >>"$tmp/all"
done
echo "load: $(uptime)"
python3 - "$tmp/all" <<'PY'
import sys, statistics
v = {}
for line in open(sys.argv[1]):
    mode, w, x = line.split()
    v.setdefault(w, {}).setdefault(mode, []).append(float(x))
print(f"{'workload':32} {'off':>10} {'on':>10} {'on/off':>7}  (median of {len(next(iter(v.values()))['off'])}; ns per item or CPU s)")
for w, m in v.items():
    a, b = statistics.median(m['off']), statistics.median(m['on'])
    print(f"{w:32} {a:10.3f} {b:10.3f} {b / a:7.3f}")
PY
