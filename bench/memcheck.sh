#!/usr/bin/env bash
# bench/memcheck.sh: how much slower programs run under Valgrind memcheck with flatmalloc
# preloaded than under memcheck with glibc (memcheck's own malloc): the target is a median
# ratio <= 1.15 on allocation-heavy programs.
#
#   bench/memcheck.sh                  5 rounds of every program (~5 minutes on the 2-core VM)
#   bench/memcheck.sh --reps 1 --only churn,loop
#   options: --reps N (rounds, default 5)  --only P1,P2  --out DIR  --lib PATH (default
#            build/preload/libflatmalloc.so)  --extra NAME=PATH (another libflatmalloc build,
#            e.g. an older one, run like flatmalloc; repeatable)  --cpu (the table shows CPU
#            seconds, user + system, rather than elapsed: steadier on a shared machine)
#            programs for --only: churn loop batch realloc python sqlite git true
#
# Variants, the same program and arguments in each, stdout to /dev/null:
#   glibc        valgrind -q PROG ARGS
#   flatmalloc   LD_PRELOAD=$LIB valgrind -q --soname-synonyms=somalloc=nouserintercepts PROG ARGS
#   NAME         the same with LD_PRELOAD=PATH of --extra NAME=PATH
# Programs: churn (tests/valgrind/churn.c, cc -O2: 400,000 mixed malloc/calloc/realloc/free,
# 1,000 live blocks); loop (bench/memcheck/loop.c: 3M malloc(48)+free); batch
# (bench/memcheck/batch.c: 3M malloc(48) into an array, then 3M frees); realloc
# (bench/memcheck/realloc.c: 500,000 malloc(128), realloc to 300, free; the three -O2
# -fno-builtin);
# python (/usr/bin/python3.11 -s -c, PYTHONMALLOC=malloc: a 100,000-entry dict of lists and
# tuples, its items sorted by a key); sqlite (/usr/bin/sqlite3 :memory: reading a script:
# 20,000 rows of random hex text from a recursive CTE, an index, a GROUP BY); git (git log --stat
# of this repository's 300 commits up to f46a97c, pager off); true (/bin/true: start-up alone).
# The C programs are built into a scratch directory at each run; every library is copied there at
# the start, so all rounds run the same build even if build/ is rebuilt meanwhile.
#
# Each program runs its variants alternately (glibc, flatmalloc, extras, glibc, ...) for N rounds;
# each run is timed as elapsed wall time (date +%s%N around the valgrind command). The table shows
# min and median seconds per variant and their ratios to glibc's min and median, then one line per
# program: ok when flatmalloc's median ratio is <= 1.15, MISS otherwise. Output dir (default
# bench/results/memcheck-<date>_<time>/): raw.csv (rep,variant,program,seconds,cpu), table.md,
# machine.txt, logs/ (stderr of failed runs). Exits 0 on MISS; 1 if any run exited non-zero (its
# stderr is printed and kept in logs/), 2 on bad usage.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../scripts/lib.sh
. "$here/../scripts/lib.sh"

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2; exit 2; }
log() { echo "memcheck-bench: $*" >&2; }
die() { echo "memcheck-bench: $*" >&2; exit 2; }

all_progs=(churn loop batch realloc python sqlite git true)
col=4 reps=5 only='' out='' lib=$fm_build/preload/libflatmalloc.so extras=()
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) [ $# -ge 2 ] || usage; reps=$2; shift ;;
    --only) [ $# -ge 2 ] || usage; only=$2; shift ;;
    --out) [ $# -ge 2 ] || usage; out=$2; shift ;;
    --lib) [ $# -ge 2 ] || usage; lib=$2; shift ;;
    --extra) [ $# -ge 2 ] || usage; extras+=("$2"); shift ;;
    --cpu) col=5 ;;
    -h|--help) usage ;;
    *) echo "memcheck-bench: unknown option $1" >&2; usage ;;
  esac
  shift
done
if ! [[ $reps =~ ^[0-9]+$ ]] || [ "$reps" -lt 1 ]; then die "--reps needs a number >= 1"; fi
progs=("${all_progs[@]}")
if [ -n "$only" ]; then
  IFS=, read -r -a progs <<<"$only"
  for p in "${progs[@]}"; do
    [[ " ${all_progs[*]} " == *" $p "* ]] || die "unknown program $p (${all_progs[*]})"
  done
fi
has_prog() { [[ " ${progs[*]} " == *" $1 "* ]]; }

# ---------- variants: glibc, flatmalloc, extras ----------
[ -f "$lib" ] || die "no library at $lib (build it: ninja -C build), or give --lib PATH"
variants=(glibc flatmalloc)
declare -A SRC=([flatmalloc]=$(readlink -f "$lib"))
for e in "${extras[@]}"; do
  name=${e%%=*} path=${e#*=}
  if [ "$name" = "$e" ] || ! [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || [ ! -f "$path" ]; then
    die "--extra wants NAME=PATH to a library, got $e"
  fi
  if [ -n "${SRC[$name]+x}" ] || [ "$name" = glibc ]; then die "--extra: the name $name is taken"; fi
  variants+=("$name"); SRC[$name]=$(readlink -f "$path")
done

# ---------- packages and programs ----------
pkgs=(valgrind gcc time)
has_prog sqlite && pkgs+=(sqlite3)
has_prog git && pkgs+=(git)
if has_prog python && [ ! -x /usr/bin/python3.11 ] && [ ! -x /usr/bin/python3 ]; then pkgs+=(python3); fi
fm_need_packages "${pkgs[@]}" || exit 1
# the interpreter itself: a pyenv shim in PATH is a script, which Valgrind does not follow
python=/usr/bin/python3.11
[ -x "$python" ] || python=/usr/bin/python3

tmp=$(mktemp -d "${TMPDIR:-/tmp}/flatmalloc-memcheck.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
declare -A LIB=([glibc]='')
for v in "${variants[@]:1}"; do # a snapshot of each library: one build for every round
  mkdir -p "$tmp/lib/$v"
  cp "${SRC[$v]}" "$tmp/lib/$v/"
  LIB[$v]=$tmp/lib/$v/$(basename "${SRC[$v]}")
done
has_prog churn && cc -O2 "$fm_top/tests/valgrind/churn.c" -o "$tmp/churn"
has_prog loop && cc -O2 -fno-builtin "$here/memcheck/loop.c" -o "$tmp/loop"
has_prog realloc && cc -O2 -fno-builtin "$here/memcheck/realloc.c" -o "$tmp/realloc"
has_prog batch && cc -O2 -fno-builtin "$here/memcheck/batch.c" -o "$tmp/batch"
cat >"$tmp/dict.py" <<'EOF'
d = {str(i): [i, str(i), (i, i * 2)] for i in range(100000)}
items = sorted(d.items(), key=lambda kv: (kv[1][2][1] % 977, kv[0]))
assert len(items) == 100000
EOF
cat >"$tmp/groupby.sql" <<'EOF'
CREATE TABLE t(id INTEGER PRIMARY KEY, grp INTEGER, txt TEXT);
WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c WHERE i < 20000)
INSERT INTO t(grp, txt) SELECT abs(random()) % 100, hex(randomblob(8 + abs(random()) % 56)) FROM c;
CREATE INDEX t_txt ON t(txt);
SELECT grp, count(*), sum(length(txt)), min(txt), max(txt) FROM t GROUP BY grp ORDER BY grp;
EOF
# cmd_for PROGRAM : sets cmd (the program and its arguments) and penv (its environment)
cmd_for() {
  penv=()
  case "$1" in
    churn|loop|batch|realloc) cmd=("$tmp/$1") ;;
    python) cmd=("$python" -s -c "$(cat "$tmp/dict.py")"); penv=(PYTHONMALLOC=malloc) ;;
    sqlite) cmd=(/usr/bin/sqlite3 :memory: ".read $tmp/groupby.sql") ;;
    git) cmd=(/usr/bin/git -C "$fm_top" --no-pager log --stat -n 300 f46a97c) ;;
    true) cmd=(/bin/true) ;;
  esac
}

# ---------- results directory ----------
stamp=$(date +%Y-%m-%d_%H%M%S)
out=${out:-$fm_top/bench/results/memcheck-$stamp}
mkdir -p "$out/logs"
raw=$out/raw.csv
echo "rep,variant,program,seconds,cpu" >"$raw"
{
  echo "date: $(date -Is)"
  echo "reps: $reps, programs: ${progs[*]}, table: $([ "$col" = 5 ] && echo "CPU seconds (user + system)" || echo "elapsed seconds")"
  echo "nproc: $(nproc)"
  echo "load at start: $(cut -d' ' -f1 /proc/loadavg) (1-minute average)"
  echo "commit: $(git -C "$fm_top" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "valgrind: $(valgrind --version)"
  echo "python: $python ($("$python" --version 2>&1))"
  has_prog sqlite && echo "sqlite3: $(/usr/bin/sqlite3 --version | cut -d' ' -f1)"
  for v in "${variants[@]:1}"; do
    echo "variant: $v ${SRC[$v]} sha256 $(sha256sum "${LIB[$v]}" | cut -d' ' -f1)"
  done
} >"$out/machine.txt"
log "results in $out"

# ---------- runs ----------
failed=0
declare -A FAILS # program -> runs that exited non-zero
run_one() { # REP VARIANT PROGRAM: one timed run, its seconds appended to raw.csv
  local rep=$1 v=$2 p=$3 rc=0 t0 t1
  local pre=(env -u LD_PRELOAD -u FM_BUILD_DIR -u FLATMALLOC_BUILD_DIR "${penv[@]}")
  local vg=(valgrind -q)
  if [ -n "${LIB[$v]}" ]; then
    pre+=("LD_PRELOAD=${LIB[$v]}")
    vg+=(--soname-synonyms=somalloc=nouserintercepts)
  fi
  t0=$(date +%s%N)
  /usr/bin/time -f "%U %S" -o "$tmp/cpu" timeout -k 10 900 "${pre[@]}" "${vg[@]}" "${cmd[@]}" </dev/null >/dev/null 2>"$tmp/err" || rc=$?
  t1=$(date +%s%N)
  if [ "$rc" -ne 0 ]; then
    failed=$((failed + 1)) FAILS[$p]=$((${FAILS[$p]:-0} + 1))
    cp "$tmp/err" "$out/logs/$p-$v-$rep.err"
    log "FAILED (exit $rc): $p with $v (round $rep); its stderr (logs/$p-$v-$rep.err):"
    tail -n 30 "$tmp/err" | sed 's/^/    /' >&2
    return 0
  fi
  # valgrind -q prints nothing unless memcheck found errors: those are worth knowing about
  if [ -s "$tmp/err" ]; then
    cp "$tmp/err" "$out/logs/$p-$v-$rep.err"
    log "WARNING: $p with $v (round $rep) wrote to stderr: logs/$p-$v-$rep.err"
  fi
  echo "$rep,$v,$p,$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.3f", (b - a) / 1e9 }'),$(awk 'END { printf "%.2f", $1 + $2 }' "$tmp/cpu")" >>"$raw"
}
for p in "${progs[@]}"; do
  cmd_for "$p"
  log "$p: ${cmd[0]##*/}, ${#variants[@]} variants x $reps rounds"
  for rep in $(seq 1 "$reps"); do
    for v in "${variants[@]}"; do run_one "$rep" "$v" "$p"; done
  done
done

# ---------- table ----------
stat() { # PROGRAM VARIANT -> "min median", or "- -" without runs
  awk -F, -v p="$1" -v v="$2" -v c="$col" 'NR > 1 && $2 == v && $3 == p { print $c }' "$raw" | sort -g |
    awk '{ x[NR] = $1 } END {
      if (NR == 0) { print "- -"; exit }
      m = (NR % 2) ? x[(NR + 1) / 2] : (x[NR / 2] + x[NR / 2 + 1]) / 2
      printf "%.2f %.2f\n", x[1], m }'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (a == "-" || b == "-" || b == 0) print "-"; else printf "%.2f\n", a / b }'; }
{
  head='| program |' sep='|---|'
  for v in "${variants[@]}"; do head+=" $v+memcheck min / median s |"; sep+='---|'; done
  for v in "${variants[@]:1}"; do
    pfx=''; [ ${#variants[@]} -gt 2 ] && pfx="$v "
    head+=" ${pfx}ratio (min) | ${pfx}ratio (median) |"; sep+='---|---|'
  done
  echo "$head"; echo "$sep"
  verdicts=()
  for p in "${progs[@]}"; do
    line="| $p |"
    read -r gmin gmed <<<"$(stat "$p" glibc)"
    for v in "${variants[@]}"; do read -r mn md <<<"$(stat "$p" "$v")"; line+=" $mn / $md |"; done
    for v in "${variants[@]:1}"; do
      read -r mn md <<<"$(stat "$p" "$v")"
      line+=" $(ratio "$mn" "$gmin") | $(ratio "$md" "$gmed") |"
      if [ "$v" = flatmalloc ]; then
        r=$(ratio "$md" "$gmed")
        if [ "$r" = - ]; then vd="$p: FAILED (no runs to compare)"
        elif awk -v r="$r" 'BEGIN { exit !(r <= 1.15) }'; then vd="$p: ok (flatmalloc median ratio $r <= 1.15)"
        else vd="$p: MISS (flatmalloc median ratio $r > 1.15)"; fi
        [ -z "${FAILS[$p]:-}" ] || vd+="; ${FAILS[$p]} run(s) FAILED, see logs/"
        verdicts+=("$vd")
      fi
    done
    echo "$line"
  done
  echo
  printf '%s\n' "${verdicts[@]}"
} | tee "$out/table.md"
log "done: $out (load average at end $(cut -d' ' -f1 /proc/loadavg))"
if [ "$failed" -gt 0 ]; then
  log "$failed run(s) FAILED: see the stderr above and $out/logs/"
  exit 1
fi
