#!/usr/bin/env bash
# bench/largeheap.sh: large heaps and small programs, for huge pages (issue 52). Large heaps
# (the time of the timed part, peak RSS, AnonHugePages of /proc/self/smaps_rollup at exit):
#
#   chase   bench/largeheap/chase.c: 8M blocks of 64 B (512 MiB) in one random cycle, 3M steps
#           followed; ns a step
#   map     bench/largeheap/mapfind.cc: std::map<uint64_t,uint64_t> of 4M entries, 2M random
#           finds; s
#   python  PYTHONMALLOC=malloc PYTHONHASHSEED=0 bench/largeheap/dict.py: a dict of 3M string
#           keys, 2M lookups of keys made afresh; s
#   sqlite  sqlite3 -readonly on a database of 3M rows with an index (made once), cache_size 1 GB
#           filled by two scans, then 1M index lookups with their rows (.timer); s
# and small programs (wall ms by hyperfine, the median of many runs, and the median peak RSS):
#   true    /bin/true            pypass  python3 -c pass
#   idle    bench/scale idle: 1,000 threads that allocated, freed and wait (the build's scale);
#           3 runs (1 with --small) of /usr/bin/time only: each takes 1-10 s on 2 cores
#
#   bench/largeheap.sh                           everything, 3 repetitions (25-40 minutes here)
#   bench/largeheap.sh --small                   inputs of about 1 s each: a check of the script
#   bench/largeheap.sh --extra new=/tmp/new/libflatmalloc.so --env new-nohuge=new:FLATMALLOC_HUGEPAGES=0
#   options: --reps N (3)  --only W1,W2  --allocators A,B  --out DIR  --small
#            --extra NAME=PATH   one more library to preload (e.g. another libflatmalloc.so)
#            --env NAME=[ALLOC:]VAR=VALUE   a column NAME: ALLOC's library (default flatmalloc)
#                                with VAR=VALUE set; repeat with the same NAME for more variables
#            --scale PATH        a built bench/scale for `idle` (default: the build's, else
#                                the first --extra's build tree)
#
# Columns: glibc, jemalloc, tcmalloc, mimalloc (Debian's, as scripts/lib.sh's fm_peers finds them),
# flatmalloc (build/preload/libflatmalloc.so, built with fm_build_lib, when it is among
# --allocators or none is given), jemalloc-thp (MALLOC_CONF=thp:always,metadata_thp:always),
# mimalloc-large (MIMALLOC_LARGE_OS_PAGES=1, the name mimalloc 2.0.9 reads), then --extra's and
# --env's. Same binary, one variable: only LD_PRELOAD (and a column's variables) change; each
# repetition runs every column once per workload, round-robin; tables show medians. Every large
# program prints a checksum that must not depend on the allocator: mismatches are reported, and
# the timed part's wall clock and its thread's CPU time (sqlite: the statement's user + sys), which
# time-slicing with other work on the machine does not inflate. For the small programs hyperfine
# and /usr/bin/time themselves run with the column's preload and variables (the child inherits
# them), so times and peak RSS are the program's alone, not env's. Results: raw.csv, summary.csv,
# tables.txt, machine.txt (uptime, load, THP settings), logs/ in bench/results/largeheap-<date>/.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../scripts/lib.sh
. "$here/../scripts/lib.sh"

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2; exit 2; }
die() { echo "largeheap: $*" >&2; exit 2; }
log() { echo "largeheap: $*" >&2; }

reps=3 only='' allocs_arg='' out='' small=0 scale_bin='' extras=() envs_arg=()
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift ;;
    --only) only=$2; shift ;;
    --allocators) allocs_arg=$2; shift ;;
    --out) out=$2; shift ;;
    --small) small=1 ;;
    --extra) extras+=("$2"); shift ;;
    --env) envs_arg+=("$2"); shift ;;
    --scale) scale_bin=$2; shift ;;
    -h|--help) usage ;;
    *) echo "largeheap: unknown option $1" >&2; usage ;;
  esac
  shift
done
[ "$reps" -ge 1 ] 2>/dev/null || die "--reps needs a number >= 1"

all_workloads=(chase map python sqlite true pypass idle)
if [ -n "$only" ]; then IFS=, read -r -a workloads <<<"$only"; else workloads=("${all_workloads[@]}"); fi
for w in "${workloads[@]}"; do
  [[ " ${all_workloads[*]} " == *" $w "* ]] || die "unknown workload $w (${all_workloads[*]})"
done
need() { [[ " ${workloads[*]} " == *" $1 "* ]]; }

# ---------- packages, allocators and their variables ----------
fm_need_packages gcc g++ time python3 sqlite3 hyperfine libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 >&2
py=/usr/bin/python3
fm_peers
declare -A ENVS=()   # column -> its variables, space-separated VAR=VALUE words
[ -n "${LIB[jemalloc]+x}" ] && { add_alloc jemalloc-thp "${LIB[jemalloc]}"; ENVS[jemalloc-thp]="MALLOC_CONF=thp:always,metadata_thp:always"; }
[ -n "${LIB[mimalloc]+x}" ] && { add_alloc mimalloc-large "${LIB[mimalloc]}"; ENVS[mimalloc-large]="MIMALLOC_LARGE_OS_PAGES=1"; }
want_fm=0   # main's library is built only when a column uses it (others may be mid-edit there)
[ -z "$allocs_arg" ] || [[ ",$allocs_arg," == *,flatmalloc,* ]] && want_fm=1
for e in "${envs_arg[@]}"; do v=${e#*=}; v=${v%%=*}; [[ "$v" == *:* ]] || want_fm=1; done
if [ "$want_fm" = 1 ]; then
  if fm_build_lib >&2 && [ -f "$fm_build/preload/libflatmalloc.so" ]; then
    add_alloc flatmalloc "$fm_build/preload/libflatmalloc.so"
  else log "WARNING: the project does not build; no flatmalloc column"; fi
fi
for e in "${extras[@]}"; do
  [ -f "${e#*=}" ] && [ "${e%%=*}" != "$e" ] || die "--extra wants NAME=PATH to a library, got $e"
  add_alloc "${e%%=*}" "$(readlink -f "${e#*=}")"
done
for e in "${envs_arg[@]}"; do
  name=${e%%=*} spec=${e#*=} base=flatmalloc
  [ "$name" != "$e" ] && [[ "$spec" == *=* ]] || die "--env wants NAME=[ALLOC:]VAR=VALUE, got $e"
  v=${spec%%=*}
  if [[ "$v" == *:* ]]; then base=${v%%:*}; spec=${spec#*:}; fi
  [ -n "${LIB[$base]+x}" ] || die "--env $e: no allocator $base (give --extra first, or build flatmalloc)"
  [ -n "${LIB[$name]+x}" ] || add_alloc "$name" "${LIB[$base]}"
  ENVS[$name]="${ENVS[$name]:-} $spec"
done
allocs=("${all_allocs[@]}")
[ -n "$allocs_arg" ] && IFS=, read -r -a allocs <<<"$allocs_arg"
for a in "${allocs[@]}"; do [ -n "${LIB[$a]+x}" ] || die "unknown or missing allocator $a (${all_allocs[*]})"; done

# ---------- inputs, made once ----------
scratch=${TMPDIR:-/tmp}/flatmalloc-largeheap
mkdir -p "$scratch"
src=$here/largeheap
seed=52
if [ "$small" = 1 ]; then
  chase_args=(1048576 2000000) map_args=(500000 1000000) py_args=(300000 200000) sq_rows=200000 sq_lookups=100000
  hf_runs=10 rss_runs=5 idle_runs=1
else
  chase_args=(8388608 3000000) map_args=(4194304 2097152) py_args=(3000000 2000000) sq_rows=3000000 sq_lookups=1000000
  hf_runs=40 rss_runs=10 idle_runs=3
fi
build_if_old() { # OUT SRC COMPILER...
  local o=$1 s=$2; shift 2
  if [ ! -x "$o" ] || [ "$s" -nt "$o" ] || [ "$src/smaps.h" -nt "$o" ]; then "$@" -O2 -o "$o" "$s"; fi
}
need chase && build_if_old "$scratch/chase" "$src/chase.c" cc
need map && build_if_old "$scratch/mapfind" "$src/mapfind.cc" g++
db=$scratch/sqlite-$sq_rows.db
if need sqlite && { [ ! -f "$db" ] || [ "$src/sqlite-build.sql" -nt "$db" ]; }; then
  log "making $db ($sq_rows rows)"
  rm -f "$db"
  sed "s/@ROWS@/$sq_rows/g" "$src/sqlite-build.sql" | env -u LD_PRELOAD sqlite3 "$db" >/dev/null
fi
need sqlite && sed "s/@ROWS@/$sq_rows/g; s/@LOOKUPS@/$sq_lookups/g; s/@SEED@/$seed/g" \
  "$src/sqlite-lookup.sql" >"$scratch/lookup-$sq_rows.sql"
if need idle && [ -z "$scale_bin" ]; then
  scale_bin=$fm_build/bench/scale
  for e in "${extras[@]}"; do
    [ -x "$scale_bin" ] || scale_bin=$(dirname "$(dirname "$(readlink -f "${e#*=}")")")/bench/scale
  done
fi
need idle && { [ -x "$scale_bin" ] || die "no bench/scale for idle (give --scale PATH)"; }

# prog_cmd WORKLOAD: its variables in envs, its command line in cmd
prog_cmd() {
  envs=()
  case "$1" in
    chase) cmd=("$scratch/chase" "${chase_args[@]}" "$seed") ;;
    map) cmd=("$scratch/mapfind" "${map_args[@]}" "$seed") ;;
    python) envs=(PYTHONMALLOC=malloc PYTHONHASHSEED=0); cmd=("$py" "$src/dict.py" "${py_args[@]}" "$seed") ;;
    sqlite) cmd=(sqlite3 -readonly "$db" ".read $scratch/lookup-$sq_rows.sql") ;;
    true) cmd=(/bin/true) ;;
    pypass) cmd=("$py" -c pass) ;;
    idle) cmd=("$scale_bin" idle) ;;
  esac
}
# pre_env ALLOC: env that sets the preload and the column's and program's variables
pre_env() {
  # shellcheck disable=SC2206
  pre=(env -u LD_PRELOAD -u FLATMALLOC_BUILD_DIR -u MALLOC_CONF -u MIMALLOC_LARGE_OS_PAGES ${ENVS[$1]:-} "${envs[@]}")
  [ -n "${LIB[$1]}" ] && pre+=("LD_PRELOAD=${LIB[$1]}")
  return 0
}

# ---------- results directory ----------
stamp=$(date +%Y-%m-%d_%H%M%S)
load1() { cut -d' ' -f1 /proc/loadavg; }
out=${out:-$fm_top/bench/results/largeheap-$stamp}
mkdir -p "$out/logs"
thp=/sys/kernel/mm/transparent_hugepage
{
  echo "date: $(date -Is)"
  echo "uptime: $(uptime)"
  echo "reps: $reps, inputs: $([ "$small" = 1 ] && echo small || echo full)"
  echo "workloads: ${workloads[*]}"
  echo "nproc: $(nproc)"
  echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
  echo "kernel: $(uname -r)"
  echo "thp: enabled $(cat $thp/enabled 2>/dev/null), defrag $(cat $thp/defrag 2>/dev/null), pmd $(cat $thp/hpage_pmd_size 2>/dev/null)," \
       "khugepaged defrag $(cat $thp/khugepaged/defrag 2>/dev/null); nr_hugepages $(cat /proc/sys/vm/nr_hugepages)"
  echo "memory: $(free -m | awk '/^Mem:/ { print $2 " MiB, " $7 " available" }')"
  echo "commit: $(git -C "$fm_top" describe --always --dirty 2>/dev/null || echo unknown)"
  for a in "${allocs[@]}"; do echo "allocator: $a ${LIB[$a]:-(none: glibc)}${ENVS[$a]:+ with ${ENVS[$a]# }}"; done
  echo "versions: python $("$py" -c 'import sys; print(sys.version.split()[0])'), sqlite $(sqlite3 --version | cut -d' ' -f1)," \
       "gcc $(gcc -dumpfullversion), $(hyperfine --version)"
} >"$out/machine.txt"
load_start=$(load1)
awk -v l="$load_start" 'BEGIN { exit !(l >= 1.0) }' && log "WARNING: load average $load_start at start: expect noisy numbers"
log "results in $out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# ---------- runs ----------
raw=$out/raw.csv
echo "rep,workload,allocator,value,cpu,unit,wall_s,peak_rss_kb,anon_huge_kb,rc,checksum" >"$raw"
median() { sort -n | awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2) }'; }
failures=0
for rep in $(seq 1 "$reps"); do
  for w in "${workloads[@]}"; do
    prog_cmd "$w"
    t0=$(date +%s)
    for a in "${allocs[@]}"; do
      pre_env "$a"
      value='' cpu='' unit='' wall='' rss='' huge='' sum='' rc=0
      case "$w" in
        true|pypass|idle)
          # wall: hyperfine's median (ms; idle: /usr/bin/time's, s); peak RSS: the median of
          # /usr/bin/time's runs. Both run under the column's preload, so the measured child is the
          # program alone (under `time env ...` env's own 1.5 MiB would hide /bin/true's).
          if [ "$w" != idle ]; then
            "${pre[@]}" hyperfine -N --style none --warmup 3 --runs "$hf_runs" --export-json "$tmp/hf.json" \
              "${cmd[*]}" >/dev/null 2>"$tmp/err" || rc=$?
            [ "$rc" = 0 ] && value=$("$py" -c 'import json, sys; print("%.3f" % (json.load(open(sys.argv[1]))["results"][0]["median"] * 1e3))' "$tmp/hf.json")
          fi
          n=$rss_runs; [ "$w" = idle ] && n=$idle_runs
          for _ in $(seq 1 "$n"); do
            "${pre[@]}" /usr/bin/time -f '%e %M' -o "$tmp/time" "${cmd[@]}" >/dev/null 2>>"$tmp/err" || rc=$?
            tail -n 1 "$tmp/time" >>"$tmp/rss"
          done
          wall=$(cut -d' ' -f1 "$tmp/rss" | median); rss=$(cut -d' ' -f2 "$tmp/rss" | median); rm -f "$tmp/rss"
          unit=ms; [ "$w" = idle ] && [ "$rc" = 0 ] && value=$(awk -v w="$wall" 'BEGIN { print w * 1000 }')
          sum=- ;;
        *)
          /usr/bin/time -f '%e %M' -o "$tmp/time" "${pre[@]}" "${cmd[@]}" >"$tmp/out" 2>"$tmp/err" || rc=$?
          read -r wall rss < <(tail -n 1 "$tmp/time")
          huge=$(sed -n 's/^AnonHugePages: *\([0-9]*\) kB/\1/p' "$tmp/err" | tail -n 1)
          if [ "$w" = sqlite ]; then
            read -r value cpu < <(awk '/^Run Time: real/ { print $4, $6 + $8 }' "$tmp/out"); unit=s
            sed -i '/^Run Time: /d' "$tmp/out"
          else
            read -r value unit cpu < <(sed -n 's/^timed: \([0-9.]*\) \([^ ]*\) cpu: \([0-9.]*\)$/\1 \2 \3/p' "$tmp/err")
          fi
          sum=$(md5sum <"$tmp/out" | cut -c1-12) ;;
      esac
      if [ "$rc" != 0 ] || [ -z "$value" ]; then
        failures=$((failures + 1)); value=''
        cp "$tmp/err" "$out/logs/$w-$a-$rep.err"
        log "FAILED ($rc): $w with $a (rep $rep), stderr in logs/$w-$a-$rep.err"
      fi
      echo "$rep,$w,$a,$value,$cpu,$unit,$wall,$rss,$huge,$rc,$sum" >>"$raw"
    done
    log "rep $rep/$reps $w done ($(( $(date +%s) - t0 )) s, load $(load1))"
  done
done

# ---------- report ----------
"$py" - "$out" <<'EOF' | tee "$out/tables.txt"
import collections, csv, statistics, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(out + "/raw.csv")))
allocs = list(dict.fromkeys(r["allocator"] for r in rows))
works = list(dict.fromkeys(r["workload"] for r in rows))
DEFAULTS = ["glibc", "jemalloc", "tcmalloc", "mimalloc"]
PEERS = DEFAULTS + ["jemalloc-thp", "mimalloc-large"]
ours = [a for a in allocs if a not in PEERS]
unit = {r["workload"]: r["unit"] for r in rows if r["unit"]}
def vals(w, a, f):
    return [float(r[f]) for r in rows if r["workload"] == w and r["allocator"] == a and r["rc"] == "0" and r["value"] and r[f]]
def med(w, a, f):
    v = vals(w, a, f)
    return statistics.median(v) if v else None
def fmt(x, f="%.2f"):
    if x is None:
        return "-"
    return "%.0f" % x if f == "%.3g" and abs(x) >= 100 else f % x   # 1040, not 1.04e+03
with open(out + "/summary.csv", "w") as s:
    s.write("workload,allocator,runs,median,min,max,median_cpu,unit,median_wall_s,median_peak_rss_kb,median_anon_huge_kb\n")
    for w in works:
        for a in allocs:
            v = vals(w, a, "value")
            s.write("%s,%s,%d,%s,%s,%s,%s,%s,%s,%s,%s\n" % (w, a, len(v), fmt(med(w, a, "value"), "%.4g"),
                    fmt(min(v) if v else None, "%.4g"), fmt(max(v) if v else None, "%.4g"), fmt(med(w, a, "cpu"), "%.4g"), unit.get(w, ""),
                    fmt(med(w, a, "wall_s")), fmt(med(w, a, "peak_rss_kb"), "%.0f"), fmt(med(w, a, "anon_huge_kb"), "%.0f")))

def table(title, f, scale, ff, ws):
    print(title)
    print("| workload | " + " | ".join(allocs) + " |")
    print("|---" * (len(allocs) + 1) + "|")
    for w in ws:
        m = {a: med(w, a, f) for a in allocs}
        print("| %s%s | " % (w, " (%s)" % unit.get(w, "") if f in ("value", "cpu") else "") +
              " | ".join(fmt(m[a] / scale if m[a] is not None else None, ff) for a in allocs) + " |")
    print()
large = [w for w in works if w in ("chase", "map", "python", "sqlite")]
smallw = [w for w in works if w not in large]
reps = max(int(r["rep"]) for r in rows)
if large:
    table("Large heaps: the timed part, wall clock, median of %d (lower is better)" % reps, "value", 1, "%.3g", large)
    table("Large heaps: the timed part, the thread's CPU time, median of %d (less disturbed by other work)" % reps, "cpu", 1, "%.3g", large)
    for f, what in (("value", "wall clock"), ("cpu", "CPU time")) if ours else ():
        print("Ratios of the timed part's %s (below 1: the column is faster); best peer = the fastest of %s in their defaults" % (what, "/".join(DEFAULTS)))
        hdr = ["workload", "best peer"]
        for o in ours:
            hdr += ["%s / best peer" % o, "%s / jemalloc-thp" % o, "%s / mimalloc-large" % o]
        print("| " + " | ".join(hdr) + " |")
        print("|---" * len(hdr) + "|")
        for w in large:
            m = {a: med(w, a, f) for a in allocs}
            d = [(m[a], a) for a in DEFAULTS if m.get(a) is not None]
            best = min(d) if d else (None, "-")
            cells = [w, "%s %s" % (best[1], fmt(best[0], "%.3g"))]
            r = lambda x, y: fmt(x / y if x is not None and y else None)
            for o in ours:
                cells += [r(m[o], best[0]), r(m[o], m.get("jemalloc-thp")), r(m[o], m.get("mimalloc-large"))]
            print("| " + " | ".join(cells) + " |")
        print()
    table("Large heaps: AnonHugePages at exit, MiB (median)", "anon_huge_kb", 1024, "%.0f", large)
    table("Large heaps: peak RSS, MiB (median)", "peak_rss_kb", 1024, "%.0f", large)
if smallw:
    table("Small programs: wall ms, the median of hyperfine's medians", "value", 1, "%.3g", smallw)
    table("Small programs: peak RSS, MiB (median)", "peak_rss_kb", 1024, "%.2f", smallw)
bad = []
for w in large:
    sums = collections.Counter(r["checksum"] for r in rows if r["workload"] == w and r["rc"] == "0" and r["value"])
    if len(sums) > 1:
        common = sums.most_common(1)[0][0]
        bad += ["%s: %s rep %s gave %s (the others %s)" % (w, r["allocator"], r["rep"], r["checksum"], common)
                for r in rows if r["workload"] == w and r["rc"] == "0" and r["value"] and r["checksum"] != common]
print("Checksums: " + ("MISMATCH\n  " + "\n  ".join(bad) if bad else "every run of each workload alike"))
failed = [r for r in rows if r["rc"] != "0" or not r["value"]]
if failed:
    print("Failed runs: " + ", ".join("%s/%s/rep %s" % (r["workload"], r["allocator"], r["rep"]) for r in failed))
EOF
echo "load at end: $(load1); uptime at end: $(uptime)" >>"$out/machine.txt"
log "done: $out ($failures failed runs; load at start $load_start, at end $(load1))"
