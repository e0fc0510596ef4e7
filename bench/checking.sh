#!/usr/bin/env bash
# bench/checking.sh: what checking mode (FLATMALLOC_CHECK=1) costs real programs: bench/programs.sh's
# python, perl, map, gawk and sqlite, each under glibc, flatmalloc and flatmalloc in checking mode,
# round-robin, REPS times (default 3); medians of CPU time (user + sys, which other work on the
# machine disturbs less than wall time) and of peak RSS (/usr/bin/time -f '%U %S %M'), each over
# flatmalloc's default mode. Inputs: bench/programs.sh's --small ones, or its full ones with --full.
#
#   bench/checking.sh [--full] [--reps N] [--lib PATH]   (PATH: libflatmalloc.so, default build/'s)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/.." && pwd)
reps=3 full=0 lib=$top/build/preload/libflatmalloc.so
while [ $# -gt 0 ]; do
  case $1 in
    --full) full=1 ;;
    --reps) reps=$2; shift ;;
    --lib) lib=$2; shift ;;
    *) echo "usage: bench/checking.sh [--full] [--reps N] [--lib PATH]" >&2; exit 2 ;;
  esac
  shift
done
src=$here/programs scratch=${TMPDIR:-/tmp}/flatmalloc-programs
mkdir -p "$scratch"
if [ "$full" = 1 ]; then
  py_args=(150000 3) pl_args=(200000 5) map_args=(1000000 2) awk_n=150000 awk_rounds=3 sq_rows=500000
else
  py_args=(30000 2) pl_args=(100000 2) map_args=(500000 1) awk_n=60000 awk_rounds=2 sq_rows=60000
fi
[ -x "$scratch/stdmap" ] && [ "$scratch/stdmap" -nt "$src/stdmap.cc" ] || g++ -O2 -o "$scratch/stdmap" "$src/stdmap.cc"
sed "s/@ROWS@/$sq_rows/g" "$src/sqlite.sql" >"$scratch/sqlite-$sq_rows.sql"
run() {   # run PROGRAM MODE: prints "cpu_seconds rss_kb"
  local envs=() cmd=()
  case $1 in
    python) envs=(PYTHONMALLOC=malloc PYTHONHASHSEED=0); cmd=(python3 "$src/dict_churn.py" "${py_args[@]}") ;;
    perl) envs=(PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0); cmd=(perl "$src/hash_strings.pl" "${pl_args[@]}") ;;
    map) cmd=("$scratch/stdmap" "${map_args[@]}") ;;
    gawk) cmd=(gawk -v n="$awk_n" -v rounds="$awk_rounds" -f "$src/assoc.awk") ;;
    sqlite) cmd=(sqlite3 :memory: ".read $scratch/sqlite-$sq_rows.sql") ;;
  esac
  case $2 in
    glibc) ;;
    default) envs+=("LD_PRELOAD=$lib") ;;
    check) envs+=("LD_PRELOAD=$lib" FLATMALLOC_CHECK=1) ;;
  esac
  local t
  t=$(env -u LD_PRELOAD "${envs[@]}" /usr/bin/time -o "$tmp/time" -f '%U %S %M' "${cmd[@]}" >/dev/null 2>&1; tail -1 "$tmp/time")
  echo "$t" | awk '{printf "%.2f %d\n", $1 + $2, $3}'
}
median() { sort -n | awk '{v[NR] = $1} END {print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2}'; }
tmp=$(mktemp -d)
echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$top" rev-parse --short HEAD), load: $(cut -d' ' -f1-3 /proc/loadavg), reps $reps, inputs $([ "$full" = 1 ] && echo full || echo small)"
printf '%-8s %10s %10s %10s %8s %10s %10s %10s %8s\n' program glibc_s default_s check_s check/def glibc_MB default_MB check_MB check/def
programs=(python perl map sqlite)
command -v gawk >/dev/null && programs+=(gawk)
for p in "${programs[@]}"; do
  for r in $(seq "$reps"); do
    for m in glibc default check; do run "$p" "$m" >>"$tmp/$p-$m"; done
  done
  for m in glibc default check; do
    cut -d' ' -f1 "$tmp/$p-$m" | median >"$tmp/$p-$m.cpu"
    cut -d' ' -f2 "$tmp/$p-$m" | median >"$tmp/$p-$m.rss"
  done
  awk -v p="$p" -v g="$(cat "$tmp/$p-glibc.cpu")" -v d="$(cat "$tmp/$p-default.cpu")" -v c="$(cat "$tmp/$p-check.cpu")" \
      -v gr="$(cat "$tmp/$p-glibc.rss")" -v dr="$(cat "$tmp/$p-default.rss")" -v cr="$(cat "$tmp/$p-check.rss")" \
      'BEGIN {printf "%-8s %10.2f %10.2f %10.2f %8.2f %10.1f %10.1f %10.1f %8.2f\n", p, g, d, c, c / d, gr / 1024, dr / 1024, cr / 1024, cr / dr}'
done
rm -rf "$tmp"
