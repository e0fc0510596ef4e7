#!/usr/bin/env bash
# bench/programs.sh: real programs under glibc, jemalloc, tcmalloc, mimalloc and flatmalloc
# (issue 28). Seven workloads of 3-8 s each under glibc on a 2-core machine:
#
#   python  PYTHONMALLOC=malloc python3 bench/programs/dict_churn.py 150000 3 (dicts and objects)
#   perl    perl bench/programs/hash_strings.pl 200000 5 (hashes, split, join, sort)
#   map     bench/programs/stdmap.cc (g++ -O2) 1000000 2: std::map build, lookups, erase, teardown
#   gawk    gawk -f bench/programs/assoc.awk, n=150000, 3 rounds (associative arrays)
#   sqlite  sqlite3 :memory: on bench/programs/sqlite.sql, 500,000 rows (inserts, indexes, joins)
#   gcc     gcc -O2 -c on a C file of 500 functions (bench/programs/gen_c.py)
#   git     git gc --aggressive (pack.threads=1) on a fresh copy of a generated repository
#           (bench/programs/gen_git.py: 400 files, 2,500 commits); only the gc is timed
#
#   bench/programs.sh                        all seven, 5 repetitions (~15 minutes on a quiet machine)
#   bench/programs.sh --reps 1 --only python,map --allocators glibc,mimalloc,flatmalloc
#   bench/programs.sh --profile              the breakdown of issue 28 (~15 minutes, below)
#   bench/programs.sh --report DIR           the tables again from DIR's files (a timing run's
#                                            raw.csv, or a --profile run's callgrind/strace/time files)
#   options: --reps N  --only P1,P2  --allocators A,B  --out DIR  --small
#            --extra NAME=PATH (one more allocator to preload, e.g. an earlier libflatmalloc.so)
#            --small: the inputs of --profile (0.2-1 s each under glibc), for a quick look
#
# The rule is scripts/bench's: same binaries, only LD_PRELOAD changes (for every process the
# program starts: gcc's cc1 and as, git's pack-objects). Each repetition runs every allocator once
# per program, round-robin; tables show medians of wall time (relative to glibc), of CPU time
# (user + sys: a check when other work shares the machine) and of peak RSS (/usr/bin/time
# -f '%e %M': the largest process of the run), flatmalloc over the best peer (glibc included) and
# the geometric mean of the programs per allocator. Hash seeds are fixed (PYTHONHASHSEED,
# PERL_HASH_SEED), so every run does the same work; each program prints a checksum and runs whose
# output differs are reported. Inputs are generated once in ${TMPDIR:-/tmp}/flatmalloc-programs.
# Results: raw.csv (one line a run), summary.csv, tables.txt, machine.txt, logs/ (stderr of
# failed runs) in bench/results/programs-<date>/.
#
# --profile (python, perl, map, gawk unless --only; flatmalloc, mimalloc, tcmalloc unless
# --allocators), in bench/results/programs-profile-<date>/: for each program and allocator,
# once, with the --small inputs,
#   valgrind --tool=callgrind --cache-sim=yes (caches fixed: 48 KiB 12-way D1, LL as a 1 MiB
#     8-way L2): instructions and D1/LL misses of the whole program and of the allocator (its
#     own functions, and with what they call: memcpy in realloc), calls into it from outside,
#     its top functions with calls and cost a call (profile.md; cg-PROG-ALLOC.PID.out, one per
#     process, and callgrind_annotate --inclusive=yes of each in cg-PROG-ALLOC.PID.txt);
# and with the benchmark's inputs, glibc too: strace -c -f -e trace=memory (mmap, munmap,
# madvise, brk counts; strace-PROG-ALLOC.txt) and /usr/bin/time -v (page faults, peak RSS;
# timev-PROG-ALLOC.txt). Callgrind counts do not depend on the machine's load; RSS may (see
# bench/README.md, "Real programs").
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../scripts/lib.sh
. "$here/../scripts/lib.sh"

usage() { awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "${BASH_SOURCE[0]}" >&2; exit 2; }

reps=5 only='' allocs_arg='' out='' small=0 profile=0 report_dir='' extras=()
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift ;;
    --only) only=$2; shift ;;
    --allocators) allocs_arg=$2; shift ;;
    --out) out=$2; shift ;;
    --small) small=1 ;;
    --profile) profile=1; small=1 ;;
    --report) report_dir=$2; shift ;;
    --extra) extras+=("$2"); shift ;;
    -h|--help) usage ;;
    *) echo "programs: unknown option $1" >&2; usage ;;
  esac
  shift
done
[ "$reps" -ge 1 ] 2>/dev/null || { echo "programs: --reps needs a number >= 1" >&2; exit 2; }
log() { echo "programs: $*" >&2; }

all_programs=(python perl map gawk sqlite gcc git)
if [ -n "$only" ]; then IFS=, read -r -a programs <<<"$only"
elif [ "$profile" = 1 ]; then programs=(python perl map gawk)
else programs=("${all_programs[@]}"); fi
for p in "${programs[@]}"; do
  [[ " ${all_programs[*]} " == *" $p "* ]] || { echo "programs: unknown program $p (${all_programs[*]})" >&2; exit 2; }
done

# ---------- packages and build ----------
pkgs=(gcc g++ time python3 perl gawk sqlite3 git libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0)
[ "$profile" = 1 ] && pkgs+=(valgrind strace)
py=/usr/bin/python3 # Debian's: the same interpreter for the workload and the report
have_fm=1
if [ -z "$report_dir" ]; then   # a report reads files only
  fm_need_packages "${pkgs[@]}" >&2
  fm_build_lib >&2 || { log "WARNING: the project does not build; running without flatmalloc"; have_fm=0; }
fi

# ---------- allocators ----------
fm_peers
if [ "$have_fm" = 1 ] && [ -f "$fm_build/preload/libflatmalloc.so" ]; then
  add_alloc flatmalloc "$fm_build/preload/libflatmalloc.so"
fi
for e in "${extras[@]}"; do
  [ -f "${e#*=}" ] && [ "${e%%=*}" != "$e" ] || { echo "programs: --extra wants NAME=PATH to a library, got $e" >&2; exit 2; }
  add_alloc "${e%%=*}" "$(readlink -f "${e#*=}")"
done
allocs=("${all_allocs[@]}")
[ "$profile" = 1 ] && allocs=(flatmalloc mimalloc tcmalloc)
[ -n "$allocs_arg" ] && IFS=, read -r -a allocs <<<"$allocs_arg"
for a in "${allocs[@]}"; do [ -n "${LIB[$a]+x}" ] || { echo "programs: unknown or missing allocator $a" >&2; exit 2; }; done

# ---------- inputs, made once ----------
scratch=${TMPDIR:-/tmp}/flatmalloc-programs
mkdir -p "$scratch"
src=$here/programs
# sizes small|full: the programs' inputs; make_inputs: writes those not made yet
sizes() {
  if [ "$1" = small ]; then
    py_args=(30000 2) pl_args=(100000 2) map_args=(500000 1) awk_n=60000 awk_rounds=2
    sq_rows=60000 c_funcs=60 git_files=100 git_commits=500
  else
    py_args=(150000 3) pl_args=(200000 5) map_args=(1000000 2) awk_n=150000 awk_rounds=3
    sq_rows=500000 c_funcs=500 git_files=400 git_commits=2500
  fi
  git_repo=$scratch/git-${git_files}x$git_commits
}
need() { [[ " ${programs[*]} " == *" $1 "* ]]; }
make_inputs() {
  if need map && { [ ! -x "$scratch/stdmap" ] || [ "$src/stdmap.cc" -nt "$scratch/stdmap" ]; }; then
    g++ -O2 -o "$scratch/stdmap" "$src/stdmap.cc"
  fi
  if need sqlite; then sed "s/@ROWS@/$sq_rows/g" "$src/sqlite.sql" >"$scratch/sqlite-$sq_rows.sql"; fi
  if need gcc && { [ ! -s "$scratch/gen-$c_funcs.c" ] || [ "$src/gen_c.py" -nt "$scratch/gen-$c_funcs.c" ]; }; then
    "$py" "$src/gen_c.py" "$c_funcs" >"$scratch/gen-$c_funcs.c"
  fi
  if need git && { [ ! -f "$git_repo/.done" ] || [ "$src/gen_git.py" -nt "$git_repo/.done" ]; }; then
    log "generating $git_repo (git fast-import, $git_commits commits)"
    rm -rf "$git_repo"
    git init -q -b main "$git_repo"
    "$py" "$src/gen_git.py" "$git_files" "$git_commits" | git -C "$git_repo" fast-import --quiet
    touch "$git_repo/.done"
  fi
  return 0
}
if [ "$small" = 1 ]; then sizes small; else sizes full; fi
[ -n "$report_dir" ] || make_inputs

# prog_cmd PROGRAM: its environment in the array envs (VAR=value words), its command line in cmd
prog_cmd() {
  envs=()
  case "$1" in
    python) envs=(PYTHONMALLOC=malloc PYTHONHASHSEED=0); cmd=("$py" "$src/dict_churn.py" "${py_args[@]}") ;;
    perl) envs=(PERL_HASH_SEED=0 PERL_PERTURB_KEYS=0); cmd=(perl "$src/hash_strings.pl" "${pl_args[@]}") ;;
    map) cmd=("$scratch/stdmap" "${map_args[@]}") ;;
    gawk) cmd=(gawk -v n="$awk_n" -v rounds="$awk_rounds" -f "$src/assoc.awk") ;;
    sqlite) cmd=(sqlite3 :memory: ".read $scratch/sqlite-$sq_rows.sql") ;;
    gcc) cmd=(gcc -O2 -c "$scratch/gen-$c_funcs.c" -o "$scratch/gen.o") ;;
    git) cmd=(git -C "$scratch/git-run" -c pack.threads=1 gc --aggressive --quiet) ;;
  esac
}
# prep PROGRAM: untimed set-up before each run
prep() {
  if [ "$1" = git ]; then rm -rf "$scratch/git-run"; cp -a "$git_repo" "$scratch/git-run"; fi
}
# pre_env ALLOC: the env command that sets the allocator and the program's variables, and drops
# the caller's preloads and any stale FLATMALLOC_* name
pre_env() { pre=(env -u LD_PRELOAD -u FLATMALLOC_BUILD_DIR "${envs[@]}"); [ -n "${LIB[$1]}" ] && pre+=("LD_PRELOAD=${LIB[$1]}"); return 0; }

# ---------- results directory ----------
stamp=$(date +%Y-%m-%d_%H%M%S)
load1() { cut -d' ' -f1 /proc/loadavg; }
load_start=$(load1)
if [ -n "$report_dir" ]; then out=$report_dir
elif [ "$profile" = 1 ]; then out=${out:-$fm_top/bench/results/programs-profile-$stamp}
else out=${out:-$fm_top/bench/results/programs-$stamp}; fi
mkdir -p "$out/logs"
[ -n "$report_dir" ] || {
  echo "date: $(date -Is)"
  echo "mode: $([ "$profile" = 1 ] && echo profile || echo timing), reps: $reps, inputs: $([ "$small" = 1 ] && echo small || echo full)"
  echo "programs: ${programs[*]}"
  echo "nproc: $(nproc)"
  echo "cpu: $(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -n 1)"
  echo "kernel: $(uname -r)"
  echo "load at start: $load_start (1-minute average)"
  echo "commit: $(git -C "$fm_top" describe --always --dirty 2>/dev/null || echo unknown)"
  for a in "${allocs[@]}"; do echo "allocator: $a ${LIB[$a]:-(none: glibc)}"; done
  echo "versions: python $("$py" -c 'import sys; print(sys.version.split()[0])'), perl $(perl -e 'print $^V'),"\
       "gawk $(gawk --version | sed -n '1s/GNU Awk \([^,]*\),.*/\1/p'), sqlite $(sqlite3 --version | cut -d' ' -f1),"\
       "gcc $(gcc -dumpfullversion), git $(git --version | cut -d' ' -f3)"
  echo "allocators: ${allocs[*]}"
} >"$out/machine.txt"
awk -v l="$load_start" 'BEGIN { exit !(l >= 1.0) }' && log "WARNING: load average $load_start at start: expect noisy numbers"
log "results in $out"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$scratch/git-run"' EXIT

# ---------- timing ----------
# timing_report: tables.txt and summary.csv from $out/raw.csv
timing_report() {
  "$py" - "$out" <<'EOF' | tee "$out/tables.txt"
import csv, math, statistics, sys
out = sys.argv[1]
rows = list(csv.DictReader(open(out + "/raw.csv")))
for r in rows:   # CPU seconds, less disturbed than wall time by other work on the machine
    r["cpu_s"] = "%.2f" % (float(r["user_s"]) + float(r["sys_s"])) if r["user_s"] and r["sys_s"] else ""
allocs = list(dict.fromkeys(r["allocator"] for r in rows))
progs = list(dict.fromkeys(r["program"] for r in rows))
base = "glibc" if "glibc" in allocs else allocs[0]
reps = max(int(r["rep"]) for r in rows)
def vals(p, a, f):
    return [float(r[f]) for r in rows if r["program"] == p and r["allocator"] == a and r["rc"] == "0" and r[f]]
def med(p, a, f):
    v = vals(p, a, f)
    return statistics.median(v) if v else None
def gmean(v):
    v = [x for x in v if x]
    return math.exp(sum(map(math.log, v)) / len(v)) if v else None
fmt = lambda x, f="%.2f": f % x if x is not None else "-"
peers = [a for a in allocs if a != "flatmalloc"]
with open(out + "/summary.csv", "w") as s:
    s.write("program,allocator,runs,median_wall_s,min_wall_s,max_wall_s,median_cpu_s,median_peak_rss_kb\n")
    for p in progs:
        for a in allocs:
            w = vals(p, a, "wall_s")
            s.write("%s,%s,%d,%s,%s,%s,%s,%s\n" % (p, a, len(w), fmt(med(p, a, "wall_s"), "%.3f"),
                    fmt(min(w) if w else None), fmt(max(w) if w else None), fmt(med(p, a, "cpu_s")),
                    fmt(med(p, a, "peak_rss_kb"), "%.0f")))

def table(title, field, scale, unit):
    print(title)
    print("| program | %s %s | " % (base, unit) + " | ".join(a for a in allocs if a != base) +
          (" | flat / best peer | best peer |" if "flatmalloc" in allocs and peers else " |"))
    print("|---|---|" + "---|" * (len(allocs) - 1) + ("---|---|" if "flatmalloc" in allocs and peers else ""))
    ratios = {a: [] for a in allocs}
    for p in progs:
        m = {a: med(p, a, field) for a in allocs}
        rel = {a: (m[a] / m[base] if m[a] and m[base] else None) for a in allocs}
        for a in allocs: ratios[a].append(rel[a])
        cells = [fmt(m[base] / scale if m[base] else None, "%.2f" if scale == 1 else "%.0f")]
        cells += [fmt(rel[a]) for a in allocs if a != base]
        if "flatmalloc" in allocs and peers:
            pm = {a: m[a] for a in peers if m[a]}
            best = min(pm, key=pm.get) if pm else None
            cells += [fmt(m["flatmalloc"] / pm[best] if best and m["flatmalloc"] else None), best or "-"]
        print("| %s | " % p + " | ".join(cells) + " |")
    g = {a: gmean(ratios[a]) for a in allocs}
    cells = ["1.00"] + [fmt(g[a]) for a in allocs if a != base]
    if "flatmalloc" in allocs and peers:
        gp = {a: g[a] for a in peers if g[a]}
        best = min(gp, key=gp.get) if gp else None
        cells += [fmt(g["flatmalloc"] / gp[best] if best and g["flatmalloc"] else None), best or "-"]
    print("| geometric mean (ratio to %s) | " % base + " | ".join(cells) + " |")
    print()

table("Wall time, median of %d: %s's seconds, the others relative to %s; flatmalloc over the fastest peer (%s included)"
      % (reps, base, base, base), "wall_s", 1, "s")
table("CPU time (user + sys), median of %d: %s's seconds, the others relative to %s (a check on a busy machine)"
      % (reps, base, base), "cpu_s", 1, "s")
table("Peak RSS (/usr/bin/time %%M), median of %d: %s's MiB, the others relative to %s; flatmalloc over the peer with the lowest"
      % (reps, base, base), "peak_rss_kb", 1024, "MiB")
fails = [r for r in rows if r["rc"] != "0"]
sums = {}
for r in rows:
    if r["rc"] == "0": sums.setdefault(r["program"], {}).setdefault(r["checksum"], []).append(r["allocator"])
odd = {p: v for p, v in sums.items() if len(v) > 1}
print("failed runs: %d%s" % (len(fails), "".join("\n  %s %s rep %s rc %s" % (r["program"], r["allocator"], r["rep"], r["rc"]) for r in fails)))
print("output differs between runs: %s" % ("; ".join("%s: %s" % (p, v) for p, v in odd.items()) if odd else "none"))
EOF
}

if [ -n "$report_dir" ] && [ -f "$report_dir/raw.csv" ]; then
  timing_report
  exit 0
fi
if [ -n "$report_dir" ]; then profile=1; fi
if [ "$profile" = 0 ]; then
  raw=$out/raw.csv
  echo "rep,program,allocator,wall_s,peak_rss_kb,user_s,sys_s,rc,checksum" >"$raw"
  failures=0
  t0=$(date +%s)
  for rep in $(seq 1 "$reps"); do
    for p in "${programs[@]}"; do
      prog_cmd "$p"
      for a in "${allocs[@]}"; do
        prep "$p"
        pre_env "$a"
        rc=0
        /usr/bin/time -f '%e %M %U %S' -o "$tmp/time" timeout -k 10 600 "${pre[@]}" "${cmd[@]}" \
          >"$tmp/out" 2>"$tmp/err" || rc=$?
        read -r wall rss user sys < <(tail -n 1 "$tmp/time")
        sum=$(md5sum <"$tmp/out" | cut -c1-12)
        if [ "$rc" -ne 0 ]; then
          failures=$((failures + 1)) wall='' rss=''
          cp "$tmp/err" "$out/logs/$p-$a-$rep.err"
          log "FAILED ($rc): $p with $a (rep $rep), stderr in logs/$p-$a-$rep.err"
        fi
        echo "$rep,$p,$a,$wall,$rss,$user,$sys,$rc,$sum" >>"$raw"
      done
      log "rep $rep/$reps $p done ($(( $(date +%s) - t0 )) s, load $(load1))"
    done
  done

  timing_report
  log "done: $out ($failures failed runs; load at start $load_start, at end $(load1))"
  exit 0
fi

# ---------- profile ----------
if [ -z "$report_dir" ]; then
  # Caches as this machine's core has them (AMD EPYC: 32 KiB I1, 48 KiB 12-way D1), and LL as its
  # 1 MiB 8-way L2: valgrind reads a 512 MiB 2-way LL from the virtual CPU here, in which nothing
  # but first touches miss. Fixed, so runs on other machines count the same.
  # shellcheck disable=SC2054
  cache=(--I1=32768,8,64 --D1=49152,12,64 --LL=1048576,8,64)
  for p in "${programs[@]}"; do
    prog_cmd "$p"
    for a in "${allocs[@]}"; do
      [ -n "${LIB[$a]}" ] || { log "callgrind: $a has no object of its own to count; skipped"; continue; }
      prep "$p"
      pre_env "$a"
      log "callgrind: $p with $a"
      t0=$(date +%s)
      # callgrind replaces no malloc; the synonym keeps the preloaded one should that change (as
      # scripts/bench); one file per process (gcc's cc1, git's pack-objects), summed in the report
      "${pre[@]}" valgrind --tool=callgrind --cache-sim=yes "${cache[@]}" --trace-children=yes \
        --soname-synonyms=somalloc=nouserintercepts --callgrind-out-file="$out/cg-$p-$a.%p.out" \
        "${cmd[@]}" >"$tmp/out" 2>"$out/logs/cg-$p-$a.err" ||
        log "FAILED: callgrind $p with $a (logs/cg-$p-$a.err)"
      md5sum <"$tmp/out" | cut -c1-12 >"$out/logs/cg-$p-$a.checksum"
      for f in "$out/cg-$p-$a".*.out; do
        callgrind_annotate --inclusive=yes --threshold=99.9 "$f" >"${f%.out}.txt" 2>/dev/null || true
      done
      echo "$p,$a,$(( $(date +%s) - t0 ))" >>"$out/logs/cg-seconds.csv"
    done
  done

  # strace and time -v with the benchmark's inputs, every allocator of the run and glibc
  sizes full
  make_inputs
  sys_allocs=(glibc)
  for a in "${allocs[@]}"; do [ "$a" = glibc ] || sys_allocs+=("$a"); done
  for p in "${programs[@]}"; do
    prog_cmd "$p"
    for a in "${sys_allocs[@]}"; do
      pre_env "$a"
      log "strace -c, time -v: $p with $a"
      prep "$p"
      strace -c -f -e trace=memory -o "$out/strace-$p-$a.txt" "${pre[@]}" "${cmd[@]}" >/dev/null 2>&1 ||
        log "FAILED: strace $p with $a"
      prep "$p"
      /usr/bin/time -v -o "$out/timev-$p-$a.txt" "${pre[@]}" "${cmd[@]}" >/dev/null 2>&1 ||
        log "FAILED: time -v $p with $a"
    done
  done
fi

libs=(); for a in "${allocs[@]}"; do [ -n "${LIB[$a]}" ] && libs+=("${LIB[$a]}" "$(readlink -f "${LIB[$a]}")"); done
"$py" - "$out" "${libs[@]}" <<'EOF' | tee "$out/profile.md"
import glob, os, re, sys
out = sys.argv[1]
libs = {os.path.basename(l) for l in sys.argv[2:] if l}
EV = ["Ir", "Dr", "Dw", "I1mr", "D1mr", "D1mw", "ILmr", "DLmr", "DLmw"]
ALLOC = re.compile(r"^(malloc|calloc|realloc|reallocarray|posix_memalign|aligned_alloc|memalign|valloc|pvalloc|__libc_(malloc|calloc|realloc|memalign)|_Znwm.*|_Znam.*|operator new.*)$")
FREE = re.compile(r"^(free|cfree|free_sized|free_aligned_sized|__libc_free|_ZdlPv.*|_ZdaPv.*|operator delete.*)$")

def mine(ob, fn):
    """The allocator's code: its object's functions, and named functions of no object (valgrind
    puts tcmalloc's malloc and free, in their own ELF section, in object '???')."""
    b = os.path.basename(ob)
    return b in libs or (b == "???" and not fn.startswith("0x"))

def parse(path):
    """Self cost per (object, function); calls into allocator entry points from outside; the
    inclusive cost of calls the allocator's functions make to other objects (memcpy, memset)."""
    names = {"ob": {}, "fn": {}, "fl": {}}
    events, ob, fn, cob, cfn = None, "?", "?", None, None
    selfc, calls, outcalls, ncalls = {}, {"alloc": 0, "free": 0}, {}, {}
    in_call = None
    def name(kind, v):
        m = re.match(r"\((\d+)\)(?: (.*))?", v)
        if not m: return v
        if m.group(2) is not None: names[kind][m.group(1)] = m.group(2)
        return names[kind].get(m.group(1), v)
    for line in open(path, errors="replace"):
        line = line.rstrip("\n")
        if not line: continue
        c = line[0]
        if c.isdigit() or c in "+-*":
            v = line.split()[1:]
            cost = [int(x) for x in v] + [0] * (len(events) - len(v))
            if in_call is not None:
                caller_ob, callee_ob, callee_fn, n = in_call
                if not mine(caller_ob, fn) and mine(callee_ob, callee_fn):
                    if ALLOC.match(callee_fn): calls["alloc"] += n
                    elif FREE.match(callee_fn): calls["free"] += n
                if mine(caller_ob, fn) and not mine(callee_ob, callee_fn):
                    acc = outcalls.setdefault(callee_fn, [0] * len(events))
                    for i, x in enumerate(cost): acc[i] += x
                in_call = None
            else:
                acc = selfc.setdefault((ob, fn), [0] * len(events))
                for i, x in enumerate(cost): acc[i] += x
            continue
        if line.startswith("events:"): events = line.split()[1:]; continue
        k, _, v = line.partition("=")
        if k == "ob": ob = name("ob", v)
        elif k == "fn": fn = name("fn", v)
        elif k == "cob": cob = name("ob", v)
        elif k == "cfn": cfn = name("fn", v)
        elif k in ("fl", "fi", "fe", "cfi", "cfl"): name("fl", v)
        elif k == "calls":
            in_call = (ob, cob if cob is not None else ob, cfn, int(v.split()[0]))
            ncalls[(in_call[1], cfn)] = ncalls.get((in_call[1], cfn), 0) + in_call[3]
            cob = None
    return events, selfc, calls, outcalls, ncalls

def get(ev, cost, e):
    return cost[ev.index(e)] if e in ev else 0
def summ(ev, costs):
    t = [0] * len(ev)
    for c in costs:
        for i, x in enumerate(c): t[i] += x
    return t
M = lambda x: "%.1f M" % (x / 1e6)
runs = {}
for f in sorted(glob.glob(out + "/cg-*.out")):
    prog, alloc = re.match(r"cg-([^-]+)-(.+)\.\d+\.out$", os.path.basename(f)).groups()
    runs.setdefault((prog, alloc), []).append(parse(f))
def merge(parts):
    """one program's processes: costs added per function"""
    ev = parts[0][0]
    selfc, calls, outcalls, ncalls = {}, {"alloc": 0, "free": 0}, {}, {}
    for e, s, c, o, nc in parts:
        assert e == ev, "processes with different events"
        for src, dst in ((s, selfc), (o, outcalls)):
            for k, v in src.items():
                acc = dst.setdefault(k, [0] * len(ev))
                for i, x in enumerate(v): acc[i] += x
        for k in calls: calls[k] += c[k]
        for k, n in nc.items(): ncalls[k] = ncalls.get(k, 0) + n
    return ev, selfc, calls, outcalls, ncalls
rows = []
for (prog, alloc), parts in runs.items():
    ev, selfc, calls, outcalls, ncalls = merge(parts)
    total = summ(ev, selfc.values())
    mine_fns = {k: v for k, v in selfc.items() if mine(*k)}
    al = summ(ev, mine_fns.values())
    ext = summ(ev, outcalls.values())
    d1 = lambda c: get(ev, c, "D1mr") + get(ev, c, "D1mw")
    ll = lambda c: get(ev, c, "DLmr") + get(ev, c, "DLmw")
    rows.append((prog, alloc, total, al, ext, calls, mine_fns, outcalls, ev, d1, ll, ncalls))

print("## Breakdown under callgrind --cache-sim=yes (small inputs)\n")
print("Allocator = the self cost of every function in the allocator's own object; + callees = with")
print("what those functions call in other objects (memcpy in realloc, memset in calloc). Calls =")
print("calls into the allocator's malloc/calloc/realloc/new (alloc) and free/delete (free) from")
print("outside its object. D1 and LL = simulated data-cache misses (reads + writes; LL modelled as")
print("a 1 MiB 8-way L2); rest = the program's own code and libraries.\n")
print("| program | allocator | program Ir | allocator Ir | + callees | alloc calls | free calls | Ir per call | D1 misses: program / allocator / rest | LL misses: program / allocator / rest |")
print("|---|---|---|---|---|---|---|---|---|---|")
for prog, alloc, total, al, ext, calls, mine_fns, outcalls, ev, d1, ll, ncalls in rows:
    n = calls["alloc"] + calls["free"]
    print("| %s | %s | %s | %s | %s | %d | %d | %.1f | %.2f / %.2f / %.2f M | %.2f / %.2f / %.2f M |" % (
        prog, alloc, M(get(ev, total, "Ir")), M(get(ev, al, "Ir")), M(get(ev, al, "Ir") + get(ev, ext, "Ir")),
        calls["alloc"], calls["free"], get(ev, al, "Ir") / n if n else 0,
        d1(total) / 1e6, d1(al) / 1e6, (d1(total) - d1(al)) / 1e6, ll(total) / 1e6, ll(al) / 1e6, (ll(total) - ll(al)) / 1e6))
print()
for prog, alloc, total, al, ext, calls, mine_fns, outcalls, ev, d1, ll, ncalls in rows:
    print("### %s, %s: the allocator's functions by self Ir (D1 / LL misses)\n" % (prog, alloc))
    top = sorted(mine_fns.items(), key=lambda kv: -get(ev, kv[1], "Ir"))[:8]
    for (ob, fn), c in top:
        nc = ncalls.get((ob, fn), 0)
        print("- %s: %s Ir in %d calls (%.0f a call), %.3f M D1, %.3f M LL" % (fn, M(get(ev, c, "Ir")), nc,
              get(ev, c, "Ir") / nc if nc else 0, d1(c) / 1e6, ll(c) / 1e6))
    for fn, c in sorted(outcalls.items(), key=lambda kv: -get(ev, kv[1], "Ir"))[:3]:
        if get(ev, c, "Ir") > 0: print("- (calls out) %s: %s Ir" % (fn, M(get(ev, c, "Ir"))))
    print()

print("## Memory system calls (strace -c -f -e trace=memory) and /usr/bin/time -v, benchmark inputs\n")
print("| program | allocator | mmap | munmap | madvise | brk | mprotect | minor faults | major faults | peak RSS MiB | wall s |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for f in sorted(glob.glob(out + "/timev-*.txt")):
    prog, alloc = os.path.basename(f)[6:-4].split("-", 1)
    tv = open(f).read()
    g = lambda k: (re.search(re.escape(k) + r":\s*(\S+)", tv) or [None, "-"])[1]
    sc = {}
    sf = out + "/strace-%s-%s.txt" % (prog, alloc)
    if os.path.exists(sf):
        for line in open(sf):
            m = re.match(r"\s*[\d.]+\s+[\d.]+\s+\d+\s+(\d+)\s+(?:\d+\s+)?(\w+)\s*$", line)
            if m: sc[m.group(2)] = int(m.group(1))
    w = g("Elapsed (wall clock) time (h:mm:ss or m:ss)")
    print("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %.0f | %s |" % (prog, alloc, sc.get("mmap", 0), sc.get("munmap", 0),
          sc.get("madvise", 0), sc.get("brk", 0), sc.get("mprotect", 0), g("Minor (reclaiming a frame) page faults"),
          g("Major (requiring I/O) page faults"), int(g("Maximum resident set size (kbytes)")) / 1024, w))
EOF
log "done: $out (load at start $load_start, at end $(load1))"
