#!/usr/bin/env bash
# bench/mibench.sh: mimalloc-bench's programs (daanx/mimalloc-bench, bench/) under glibc, jemalloc,
# tcmalloc, mimalloc and flatmalloc, with the arguments and thread counts of its bench.sh
# (N = nproc). The sources are not kept here: --src names a mimalloc-bench checkout or a git dir
# of one (its HEAD's bench/ is extracted), and the programs are built with gcc/g++ -O2 into
# ${TMPDIR:-/tmp}/flatmalloc-mibench.
#
#   bench/mibench.sh --src DIR                       every program, 5 repetitions (~40 min on 2 cores)
#   bench/mibench.sh --src DIR --reps 1 --only larsonN,xmalloc-testN --allocators glibc,flatmalloc
#   bench/mibench.sh --src DIR --load 2             the same with two busy processes beside every run
#   options: --reps N (5)  --only P1,P2  --allocators A,B  --timeout SECS (300, per run)  --out DIR
#            --load N (0: busy processes running through the whole measurement, fm_load_start)
#            --list (the programs and their commands, then exit)
#            --live (each run with liblive.so in front of the allocator: the program's own peak of
#            bytes held, live_kb, and peak RSS over it; its counting changes the timings a little)
#            --extra NAME=PATH (one more library to preload, e.g. another commit's libflatmalloc.so;
#            repeatable; not a peer in 'flat / best peer')
#
# The score is the wall time, except where bench.sh takes the program's own figure and turns it
# into a time: larson's "relative time" (1e9 / operations per second), xmalloc-test's rtime,
# rptest's 2,000,000 / (memory ops per CPU second), glibc-thread's 1e9 / iterations. Peak RSS is
# /usr/bin/time's %M. Within each repetition every program runs under every allocator in turn.
# Medians go to stdout as tables (with flatmalloc over the best peer and the geometric mean of
# each allocator's time over glibc's); raw.csv, tables.txt and the logs of failed runs go to
# bench/results/mibench-<date>/. Before and after each run `scale xcpu` times a cache line's
# round trip between two CPUs (xcpu_ns, xcpu_after_ns; this host has two speeds, about 100 and
# 400 ns): a last table gives the medians of the runs at each speed.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../scripts/lib.sh
. "$here/../scripts/lib.sh"

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2; exit 2; }
log() { echo "mibench: $*" >&2; }
die() { log "$*"; exit 2; }

src='' reps=5 only='' allocs_arg='' limit=300 out='' list=0 load=0 live=0 extras=()
while [ $# -gt 0 ]; do
  case "$1" in
    --src) src=$2; shift ;;
    --reps) reps=$2; shift ;;
    --only) only=$2; shift ;;
    --allocators) allocs_arg=$2; shift ;;
    --timeout) limit=$2; shift ;;
    --out) out=$2; shift ;;
    --load) load=$2; shift ;;
    --extra) extras+=("$2"); shift ;;
    --list) list=1 ;;
    --live) live=1 ;;
    -h|--help) usage ;;
    *) log "unknown option $1"; usage ;;
  esac
  shift
done
[ -n "$src" ] || { log "--src DIR is required (a mimalloc-bench checkout or its git dir)"; usage; }
[ "$reps" -ge 1 ] 2>/dev/null || die "--reps needs a number >= 1"
[ "$limit" -ge 1 ] 2>/dev/null || die "--timeout needs a number of seconds >= 1"
[ "$load" -ge 0 ] 2>/dev/null || die "--load needs a number >= 0"

# ---------- the programs ----------
# As bench.sh runs them ("procs" is nproc). sh6bench and sh8bench are left out: their sources are
# not in mimalloc-bench (its build script downloads them). rbstress runs only where ruby is.
procs=$(nproc)
all_progs=(cfrac espresso barnes larsonN-sized mstressN rptestN alloc-test1 alloc-testN
           xmalloc-testN cache-scratch1 cache-scratchN glibc-simple glibc-thread larsonN
           malloc-large mleak10 mleak100 rbstress1 rbstressN cache-thrash1 cache-thrashN)
if [ "$procs" = 1 ]; then # bench.sh runs the N variants only on more than one CPU
  all_progs=(cfrac espresso barnes larsonN-sized mstressN rptestN alloc-test1 xmalloc-testN
             cache-scratch1 glibc-simple glibc-thread larsonN malloc-large mleak10 mleak100
             rbstress1 cache-thrash1)
fi

# program_cmd NAME : sets cmd (the command, binaries relative to $bin), input (its stdin) and
# score (how its time is read: wall, or the name of the program whose output says it)
program_cmd() {
  input=/dev/null score=wall
  case "$1" in
    cfrac) cmd=("$bin/cfrac" 17545186520507317056371138836327483792789528) ;;
    espresso) cmd=("$bin/espresso" "$srcdir/espresso/largest.espresso") ;;
    barnes) cmd=("$bin/barnes"); input=$srcdir/barnes/input ;;
    larsonN) cmd=("$bin/larson" 5 8 1000 5000 100 4141 "$procs"); score=larson ;;
    larsonN-sized) cmd=("$bin/larson-sized" 5 8 1000 5000 100 4141 "$procs"); score=larson ;;
    mstressN) cmd=("$bin/mstress" "$procs" 50 25) ;;
    rptestN) cmd=("$bin/rptest" "$procs" 0 1 2 500 1000 100 8 16000); score=rptest ;;
    alloc-test1) cmd=("$bin/alloc-test" 1) ;;
    alloc-testN) cmd=("$bin/alloc-test" $((procs > 16 ? 16 : procs))) ;; # 16 is the test's maximum
    xmalloc-testN) cmd=("$bin/xmalloc-test" -w "$procs" -t 5 -s 64); score=xmalloc ;;
    cache-scratch1) cmd=("$bin/cache-scratch" 1 1000 1 2000000 "$procs") ;;
    cache-scratchN) cmd=("$bin/cache-scratch" "$procs" 1000 1 2000000 "$procs") ;;
    cache-thrash1) cmd=("$bin/cache-thrash" 1 1000 1 2000000 "$procs") ;;
    cache-thrashN) cmd=("$bin/cache-thrash" "$procs" 1000 1 2000000 "$procs") ;;
    glibc-simple) cmd=("$bin/glibc-simple") ;;
    glibc-thread) cmd=("$bin/glibc-thread" "$procs"); score=glibc-thread ;;
    malloc-large) cmd=("$bin/malloc-large") ;;
    mleak10) cmd=("$bin/mleak" 5) ;;
    mleak100) cmd=("$bin/mleak" 50) ;;
    rbstress1) cmd=(ruby "$srcdir/rbstress/stress_mem.rb" 1) ;;
    rbstressN) cmd=(ruby "$srcdir/rbstress/stress_mem.rb" "$procs") ;;
    *) return 1 ;;
  esac
}

# score_of KIND OUTPUT WALL : the time bench.sh records for the run
score_of() {
  case "$1" in
    wall) echo "$3" ;;
    larson) sed -n 's/.*relative time: \([0-9.]*\)s.*/\1/p' "$2" | tail -n 1 ;;
    xmalloc) sed -n 's/^rtime: \([0-9.]*\).*/\1/p' "$2" | tail -n 1 ;;
    rptest) sed -n 's/.*[^0-9]\([0-9][0-9]*\) memory ops.*/\1/p' "$2" | tail -n 1 |
              awk '$1 > 0 { printf "%.3f\n", 2000000 / $1 }' ;;
    glibc-thread) sed -n 's/^\([0-9][0-9]*\) iterations.*/\1/p' "$2" | tail -n 1 |
                    awk '$1 > 0 { printf "%.3f\n", 1e9 / $1 }' ;;
  esac
}

progs=("${all_progs[@]}")
bin='<bin>' srcdir='<src>/bench' # shown by --list; set for real once the sources are found
if [ -n "$only" ]; then IFS=, read -r -a progs <<<"$only"; fi
for p in "${progs[@]}"; do
  program_cmd "$p" || die "unknown program $p (${all_progs[*]})"
done
if [ "$list" = 1 ]; then
  for p in "${all_progs[@]}"; do program_cmd "$p"; echo "$p: ${cmd[*]}$([ "$input" = /dev/null ] || echo " < $input")"; done
  exit 0
fi

fm_need_packages gcc g++ time python3 libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 >&2

# ---------- sources ----------
# A checkout is read in place; a git dir gives its HEAD's bench/, extracted once per commit.
work=${TMPDIR:-/tmp}/flatmalloc-mibench
[ -d "$src" ] || die "--src $src: no such directory"
src=$(cd "$src" && pwd)
if [ -f "$src/bench/larson/larson.cpp" ]; then
  srcdir=$src/bench
  key=checkout-$(printf '%s' "$src" | md5sum | cut -c1-12)
  src_id="$src ($(git -C "$src" describe --always --dirty 2>/dev/null || echo 'not a git checkout'))"
elif commit=$(git -C "$src" rev-parse --verify -q 'HEAD^{commit}' 2>/dev/null); then
  key=git-${commit:0:12}
  srcdir=$work/$key/src/bench
  if [ ! -f "$srcdir/larson/larson.cpp" ]; then
    rm -rf "$work/$key/src"
    mkdir -p "$work/$key/src"
    git -C "$src" archive HEAD bench | tar -x -C "$work/$key/src"
  fi
  src_id="$src at $commit"
else
  die "--src $src: neither a mimalloc-bench checkout (bench/larson/larson.cpp) nor a git dir"
fi
bin=$work/$key/bin
mkdir -p "$bin"

# ---------- build ----------
# The flags of mimalloc-bench's bench/CMakeLists.txt, at -O2: its old C programs need the
# permissive C dialect and the warnings off.
cflags=(-O2 -DNDEBUG -w -Wno-implicit-function-declaration -Wno-implicit-int -Wno-int-conversion
        -Wno-incompatible-pointer-types -Wno-return-mismatch)
cxxflags=(-O2 -DNDEBUG -w -std=c++17)
needed=" "
for p in "${progs[@]}"; do program_cmd "$p"; needed+="${cmd[0]##*/} "; done
built=()
# build NAME FLAGS DIR FILE... : compiles NAME from DIR/FILE... under $srcdir if the programs
# asked for need it and it is not up to date; a program that does not build is left out
build() {
  local name=$1 flags=$2 dir=$3 srcs=() f cc=gcc std=("${cflags[@]}")
  shift 3
  [[ $needed == *" $name "* ]] || return 0
  for f in "$@"; do srcs+=("$srcdir/$dir/$f"); done
  case "$1" in *.cpp) cc=g++ std=("${cxxflags[@]}") ;; esac
  if [ -x "$bin/$name" ] && [ -z "$(find "${srcs[@]}" -newer "$bin/$name")" ]; then
    built+=("$name"); return 0
  fi
  # shellcheck disable=SC2086 # flags is a list of words
  if "$cc" "${std[@]}" $flags -o "$bin/$name" "${srcs[@]}" -lpthread -lm >"$bin/$name.log" 2>&1; then
    built+=("$name"); rm -f "$bin/$name.log"
  else
    log "WARNING: $name does not build (log: $bin/$name.log); left out"
  fi
}
log "building in $bin"
build cfrac "-std=gnu89 -DNOMEMOPT=1" cfrac cfrac.c pops.c pconst.c pio.c pabs.c pneg.c pcmp.c \
  podd.c phalf.c padd.c psub.c pmul.c pdivmod.c psqrt.c ppowmod.c atop.c ptoa.c itop.c utop.c \
  ptou.c errorp.c pfloat.c pidiv.c pimod.c picmp.c primes.c pcfrac.c pgcd.c
build espresso -std=gnu89 espresso cofactor.c cols.c compl.c contain.c cubestr.c cvrin.c cvrm.c \
  cvrmisc.c cvrout.c dominate.c equiv.c espresso.c essen.c exact.c expand.c gasp.c getopt.c \
  gimpel.c globals.c hack.c indep.c irred.c main.c map.c matrix.c mincov.c opo.c pair.c part.c \
  primes.c reduce.c rows.c set.c setc.c sharp.c sminterf.c solution.c sparse.c unate.c \
  utility.c verify.c
build barnes -std=gnu89 barnes code.c code_io.c load.c grav.c getparam.c util.c
build larson -DCPP=1 larson larson.cpp
build larson-sized "-DCPP=1 -DSIZED=1 -fsized-deallocation" larson larson.cpp
build alloc-test -DBENCH=4 alloc-test test_common.cpp allocator_tester.cpp
build cache-scratch '' cache-scratch cache-scratch.cpp
build cache-thrash '' cache-thrash cache-thrash.cpp
build xmalloc-test '' xmalloc-test xmalloc-test.c
build malloc-large '' malloc-large malloc-large.cpp
build mstress '' mstress mstress.c
build mleak '' mleak mleak.c
build rptest "-I$srcdir/rptest" rptest rptest.c thread.c timer.c
build glibc-simple '' glibc-bench bench-malloc-simple.c
build glibc-thread '' glibc-bench bench-malloc-thread.c

# the programs whose binary (or ruby) is there
runnable=()
for p in "${progs[@]}"; do
  program_cmd "$p"
  case "${cmd[0]}" in
    ruby) command -v ruby >/dev/null || { log "$p skipped: ruby is not installed"; continue; } ;;
    *) [[ " ${built[*]} " == *" ${cmd[0]##*/} "* ]] || { log "$p skipped: not built"; continue; } ;;
  esac
  runnable+=("$p")
done
[ ${#runnable[@]} -gt 0 ] || die "nothing to run"

# ---------- allocators ----------
fm_lib=''
if fm_build_lib >&2 && [ -f "$fm_build/preload/libflatmalloc.so" ]; then
  fm_lib=$fm_build/preload/libflatmalloc.so
else
  log "WARNING: flatmalloc does not build: left out of this run"
fi
live_lib=''
if [ "$live" = 1 ]; then
  live_lib=$fm_build/bench/liblive.so
  [ -f "$live_lib" ] || die "--live needs $live_lib (built with the benchmarks: meson setup without -Dbenchmarks=disabled)"
fi
fm_peers
[ -n "$fm_lib" ] && add_alloc flatmalloc "$fm_lib"
for e in "${extras[@]}"; do
  [ -f "${e#*=}" ] && [ "${e%%=*}" != "$e" ] || die "--extra wants NAME=PATH to a library, got $e"
  add_alloc "${e%%=*}" "$(readlink -f "${e#*=}")"
done
allocs=("${all_allocs[@]}")
if [ -n "$allocs_arg" ]; then
  IFS=, read -r -a allocs <<<"$allocs_arg"
  for a in "${allocs[@]}"; do [ -n "${LIB[$a]+x}" ] || die "unknown or missing allocator $a (${all_allocs[*]})"; done
fi

# ---------- results directory ----------
out=${out:-$fm_top/bench/results/mibench-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out/logs"
raw=$out/raw.csv
echo "rep,program,allocator,time_s,wall_s,rss_kb,rc,load1,xcpu_ns,xcpu_after_ns,live_kb" >"$raw"
{
  echo "date: $(date -Is)"
  echo "uptime: $(uptime)"
  echo "nproc: $procs"
  echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
  echo "kernel: $(uname -r)"
  echo "flatmalloc commit: $(git -C "$fm_top" describe --always --dirty 2>/dev/null || echo unknown)"
  echo "mimalloc-bench: $src_id"
  echo "compilers: $(gcc --version | head -n 1); flags: ${cflags[*]} / ${cxxflags[*]}"
  echo "reps: $reps, timeout: ${limit}s, programs: ${runnable[*]}"
  echo "load: $load busy processes during the runs (--load)"
  echo "live: $([ "$live" = 1 ] && echo "every run with $live_lib in front (--live)" || echo no)"
  for a in "${allocs[@]}"; do echo "allocator: $a ${LIB[$a]:-(none: glibc)}"; done
} >"$out/machine.txt"
log "load $(cut -d' ' -f1-3 /proc/loadavg), results in $out"

# ---------- runs ----------
# Each run starts in an empty directory of its own (rptest writes a file where it runs).
tmp=$(mktemp -d)
trap 'fm_load_stop; rm -rf "$tmp"' EXIT
failures=0
run_one() { # run_one REP PROGRAM ALLOCATOR
  local rep=$1 p=$2 a=$3 rc=0 wall='' kb='' t='' live_kb=''
  local lib=${LIB[$a]} load xb xa
  [ -n "$live_lib" ] && lib=$live_lib${lib:+:$lib}
  load=$(cut -d' ' -f1 /proc/loadavg) # at the start: a busy machine shows up in every figure
  xb=$(fm_xcpu)
  program_cmd "$p"
  rm -rf "$tmp/cwd" "$tmp/live"; mkdir "$tmp/cwd"
  # the allocator rejects FLATMALLOC_* names it does not know: drop the old build-dir variable
  (cd "$tmp/cwd" && /usr/bin/time -f '%e %M' -o "$tmp/time" timeout -k 5 "$limit" \
     env -u LD_PRELOAD -u FLATMALLOC_BUILD_DIR ${lib:+LD_PRELOAD=$lib} ${live_lib:+LIVE_OUT=$tmp/live} "${cmd[@]}" \
     <"$input" >"$tmp/out" 2>"$tmp/err") || rc=$?
  xa=$(fm_xcpu)
  read -r wall kb < <(tail -n 1 "$tmp/time") || true
  # the largest of the program's processes
  [ -f "$tmp/live" ] && live_kb=$(awk '$1 == "live_peak_kb" && $2 > m { m = $2 } END { print m + 0 }' "$tmp/live")
  [ "$rc" = 0 ] && t=$(score_of "$score" "$tmp/out" "$wall")
  if [ "$rc" != 0 ] || [ -z "$t" ]; then
    failures=$((failures + 1))
    cat "$tmp/out" "$tmp/err" >"$out/logs/$p-$a-$rep.log"
    log "FAILED (exit $rc$([ "$rc" = 124 ] && echo ": timed out after ${limit}s")): $p with $a, rep $rep; output in logs/$p-$a-$rep.log"
  fi
  echo "$rep,$p,$a,$t,$wall,$kb,$rc,$load,$xb,$xa,$live_kb" >>"$raw"
}

fm_load_start "$load"
t0=$(date +%s)
for rep in $(seq 1 "$reps"); do
  for p in "${runnable[@]}"; do
    for a in "${allocs[@]}"; do
      run_one "$rep" "$p" "$a"
    done
  done
  log "repetition $rep of $reps done ($(( $(date +%s) - t0 )) s)"
done
fm_load_stop

# ---------- report ----------
python3 - "$raw" <<'EOF' | tee "$out/tables.txt"
import csv, math, statistics, sys
rows = list(csv.DictReader(open(sys.argv[1])))
for r in rows:   # (--live) peak RSS over the program's own peak of bytes held, each run
    live = float(r.get("live_kb") or 0)
    r["rss_per_live"] = "%.3f" % (float(r["rss_kb"]) / live) if live and r["rss_kb"] else ""
progs = list(dict.fromkeys(r["program"] for r in rows))
allocs = list(dict.fromkeys(r["allocator"] for r in rows))
reps = max(int(r["rep"]) for r in rows)
PEERS = ("glibc", "jemalloc", "tcmalloc", "mimalloc")

def med(p, a, f):
    v = [float(r[f]) for r in rows if r["program"] == p and r["allocator"] == a and r["rc"] == "0" and r[f]]
    return statistics.median(v) if v else None

def table(title, field, scale, fmt):
    m = {(p, a): med(p, a, field) for p in progs for a in allocs}
    print(title)
    flat = "flatmalloc" in allocs and len(allocs) > 1
    print("| program | " + " | ".join(allocs) + (" | flat / best peer |" if flat else " |"))
    print("|---|" + "---:|" * (len(allocs) + flat))
    for p in progs:
        cells = [fmt % (m[p, a] * scale) if m[p, a] is not None else "fail" for a in allocs]
        if flat:
            peers = [m[p, a] for a in allocs if a in PEERS and m[p, a]]
            f = m[p, "flatmalloc"]
            cells.append("%.2f" % (f / min(peers)) if f and peers else "-")
        print("| %s | " % p + " | ".join(cells) + " |")
    if "glibc" in allocs:
        geo = []
        for a in allocs:
            r = [m[p, a] / m[p, "glibc"] for p in progs if m[p, a] and m[p, "glibc"]]
            n = "" if len(r) == len(progs) else " (%d)" % len(r)
            geo.append("%.2f%s" % (math.exp(sum(map(math.log, r)) / len(r)), n) if r else "-")
        print("| geomean / glibc | " + " | ".join(geo) + (" | |" if flat else " |"))
    print()

table("Time, seconds, median of %d (larson, xmalloc-test, rptest, glibc-thread: the time bench.sh "
      "derives from the program's own score); flat / best peer < 1 is flatmalloc faster" % reps,
      "time_s", 1, "%.2f")
table("Peak RSS, MiB, median of %d; flat / best peer < 1 is flatmalloc smaller" % reps,
      "rss_kb", 1 / 1024, "%.1f")

if any(r["rss_per_live"] for r in rows):
    table("The program's own peak of bytes held (liblive.so: usable sizes), MiB, median of %d" % reps,
          "live_kb", 1 / 1024, "%.1f")
    table("Peak RSS over the program's own peak of bytes held in the same run, median of %d; "
          "flat / best peer < 1 is flatmalloc smaller" % reps, "rss_per_live", 1, "%.2f")

FAST = 250   # ns: scale xcpu's fast speed here is about 100, the slow one about 400
def speed(r):
    try:
        b, a = float(r["xcpu_ns"]), float(r["xcpu_after_ns"])
    except (KeyError, ValueError):
        return None
    return "fast" if b < FAST and a < FAST else "slow" if b >= FAST and a >= FAST else None
print("Time by the host's speed before and after each run (scale xcpu under %d ns: fast), seconds, median (runs)" % FAST)
print("| program | speed | " + " | ".join(allocs) + " | flat / best peer |")
print("|---|---|" + "---:|" * (len(allocs) + 1))
for p in progs:
    for sp in ("fast", "slow"):
        v = {a: [float(r["time_s"]) for r in rows if r["program"] == p and r["allocator"] == a and r["rc"] == "0"
                 and r["time_s"] and speed(r) == sp] for a in allocs}
        if not any(v.values()):
            continue
        m = {a: statistics.median(x) if x else None for a, x in v.items()}
        peers = [m[a] for a in allocs if a in PEERS and m[a]]
        f = m.get("flatmalloc")
        print("| %s | %s | " % (p, sp) + " | ".join("%.2f (%d)" % (m[a], len(v[a])) if m[a] else "-" for a in allocs) +
              " | %s |" % ("%.2f" % (f / min(peers)) if f and peers else "-"))
EOF
echo "load at end: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$out/machine.txt"
log "done: $out ($failures failed runs; load $(cut -d' ' -f1-3 /proc/loadavg))"
