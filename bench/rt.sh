#!/usr/bin/env bash
# bench/rt.sh: the real-time experiment of issue 43 (the PMAD write-up's, on Linux). bench/rt runs
# one sequence per process, pinned, after mallopt(M_TRIM_THRESHOLD, -1), mallopt(M_MMAP_MAX, 0) and
# mlockall(MCL_CURRENT | MCL_FUTURE), each call timed alone: `hot` (malloc+free of 16, 64, 256,
# 1024, 4096 B) and `churn` (262,144 live blocks of 16-1024 B, 2M seeded steps of a free and a
# malloc). Each allocator runs each sequence --reps times (5), the allocators alternating within a
# repetition (the order rotates each time); then, per allocator, `rt merge` gives the percentiles
# of each step's least time over the runs (the allocator's own cost) and of the single runs.
# Finally one run per allocator and sequence under `strace -f` counts the system calls made
# inside the timed part (between the program's access("/rt-timed-begin") and "/rt-timed-end").
#
#   bench/rt.sh                                   glibc jemalloc tcmalloc mimalloc flatmalloc
#   bench/rt.sh --pmad /tmp/PMAD                  ... and PMAD, built from that checkout
#   bench/rt.sh --reps 7 --allocators glibc,flatmalloc --seqs churn --fifo
#
# Options: --reps N; --allocators a,b (glibc jemalloc tcmalloc mimalloc flatmalloc pmad);
# --seqs "hot churn"; --steps N (churn, 2M); --samples N (hot, 200k); --pool SIZE (flatmalloc's
# FLATMALLOC_POOL, 1G; FLATMALLOC_PREFAULT=1 always); --fifo (SCHED_FIFO 10, where permitted);
# --cold (churn: the block is not read before its free); --touch (rt --touch: every page mapped
# at start-up written once, for a virtual machine that backs a page at its first write); --sizes LO-HI (churn's sizes, 16-1024;
# 1024-1024 is the write-up's churn at one size); --no-strace; --keep-raw; --lib PATH (another
# libflatmalloc.so); --pmad DIR (a checkout of github.com/anastassow/PMAD with include/ and src/:
# rt.c is compiled with -DRT_PMAD and its four sources into OUT/rt-pmad; nothing of it is kept in
# this tree). Results go to bench/results/rt-<date>/ (--out DIR): summary.md (the tables), raw/
# (samples), log/ (each run's output), merged/ (rt merge), syscalls.csv, machine.txt.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../scripts/lib.sh
. "$here/../scripts/lib.sh"

reps=5 allocs_arg='' seqs="hot churn" steps=2000000 samples=200000 pool=1G fifo='' cold='' touch=''
do_strace=1 pmad='' lib='' out='' keep_raw=0 sizes=''
while [ $# -gt 0 ]; do
  case "$1" in
    --reps) reps=$2; shift ;;
    --allocators) allocs_arg=$2; shift ;;
    --seqs) seqs=$2; shift ;;
    --steps) steps=$2; shift ;;
    --samples) samples=$2; shift ;;
    --pool) pool=$2; shift ;;
    --fifo) fifo=--fifo ;;
    --cold) cold=--cold ;;
    --touch) touch=--touch ;;
    --no-strace) do_strace=0 ;;
    --keep-raw) keep_raw=1 ;;
    --sizes) sizes=$2; shift ;;
    --pmad) pmad=$2; shift ;;
    --lib) lib=$2; shift ;;
    --out) out=$2; shift ;;
    -h|--help) awk 'NR > 1 && !/^#/ { exit } NR > 1 { sub(/^# ?/, ""); print }' "$0" >&2; exit 2 ;;
    *) echo "rt.sh: unknown option $1" >&2; exit 2 ;;
  esac
  shift
done

fm_need_packages libjemalloc2 libtcmalloc-minimal4 libmimalloc2.0 strace >&2
fm_build_lib >&2
rt=$fm_build/bench/rt
[ -x "$rt" ] || { echo "rt.sh: $rt not built (meson -Dbenchmarks=enabled?)" >&2; exit 1; }

fm_peers
add_alloc flatmalloc "${lib:-$fm_build/preload/libflatmalloc.so}"
out=${out:-$fm_top/bench/results/rt-$(date +%Y%m%d-%H%M%S)}
mkdir -p "$out/raw" "$out/log" "$out/merged"

if [ -n "$pmad" ]; then
  inc=$pmad/include
  srcs=()
  for f in PMAD MemoryPool BlockHeader; do srcs+=("$pmad/src/$f.c"); done
  for f in incPMAD incPmad; do [ -f "$pmad/src/$f.c" ] && srcs+=("$pmad/src/$f.c") && break; done
  for f in "${srcs[@]}" "$inc/incPMAD.h"; do
    [ -f "$f" ] || { echo "rt.sh: --pmad $pmad: no $f (want PMAD's include/ and src/)" >&2; exit 1; }
  done
  # as meson builds bench/rt (release: -O3), PMAD's own sources beside it; PMAD's code is C99 + GNU
  ${CC:-clang} -O3 -std=gnu11 -fno-builtin -fno-omit-frame-pointer -DRT_PMAD -I"$inc" \
    "$here/rt.c" "${srcs[@]}" -lm -o "$out/rt-pmad"
  add_alloc pmad ''
fi

allocs=("${all_allocs[@]}")
[ -n "$allocs_arg" ] && IFS=, read -r -a allocs <<<"$allocs_arg"
for a in "${allocs[@]}"; do
  [ -n "${LIB[$a]+x}" ] || { echo "rt.sh: unknown or missing allocator $a" >&2; exit 1; }
done

# cmd_of ALLOC SEQ ARGS...: the command line of one run; env_of ALLOC: its environment
cmd_of() {
  local a=$1 seq=$2
  shift 2
  case "$a" in
    pmad) echo "$out/rt-pmad $seq $*" ;;
    *) echo "$rt $seq $*" ;;
  esac
}
env_of() {
  case "$1" in
    glibc|pmad) ;;
    flatmalloc) echo "LD_PRELOAD=${LIB[$1]} FLATMALLOC_PREFAULT=1 FLATMALLOC_POOL=$pool" ;;
    *) echo "LD_PRELOAD=${LIB[$1]}" ;;
  esac
}
seq_args() {
  case "$1" in
    hot) echo "--samples $samples $fifo $touch" ;;
    churn) echo "--steps $steps $fifo $cold $touch${sizes:+ --min ${sizes%-*} --max ${sizes#*-}}" ;;
  esac
}

{
  echo "date: $(date -u '+%Y-%m-%d %H:%M UTC')"
  echo "commit: $(git -C "$fm_top" rev-parse --short HEAD)$(git -C "$fm_top" diff --quiet HEAD -- src preload 2>/dev/null || echo ' (src modified)')"
  echo "cpus: $(nproc), $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2-)"
  echo "kernel: $(uname -r)"
  for a in "${allocs[@]}"; do echo "allocator $a: $(env_of "$a") $(cmd_of "$a" SEQ)"; done
  [ -n "$pmad" ] && echo "pmad: $pmad $(git -C "$pmad" log -1 --format='%h %ad' --date=short 2>/dev/null || head -1 "$pmad/PROVENANCE.txt" 2>/dev/null)"
  echo "options: reps=$reps seqs=$seqs steps=$steps samples=$samples pool=$pool sizes=${sizes:-16-1024} $fifo $cold $touch"
} >"$out/machine.txt"
echo "rt.sh: load $(cut -d' ' -f1-3 /proc/loadavg), results in $out" >&2

n=${#allocs[@]}
for r in $(seq 1 "$reps"); do
  echo "rep $r: $(uptime)" >>"$out/machine.txt"
  for seq in $seqs; do
    for k in $(seq 0 $((n - 1))); do
      a=${allocs[$(( (k + r - 1) % n ))]}
      # shellcheck disable=SC2046
      if ! env $(env_of "$a") timeout 300 $(cmd_of "$a" "$seq" $(seq_args "$seq") --out "$out/raw/$a.$seq.$r.bin") \
          >"$out/log/$a.$seq.$r.txt" 2>&1; then
        echo "rt.sh: $a $seq rep $r failed (log/$a.$seq.$r.txt)" >&2
      fi
    done
  done
done
echo "end: $(uptime)" >>"$out/machine.txt"

for a in "${allocs[@]}"; do
  for seq in $seqs; do
    files=("$out/raw/$a.$seq".*.bin)
    [ -f "${files[0]}" ] || continue
    "$rt" merge "${files[@]}" >"$out/merged/$a.$seq.csv"
  done
done
[ "$keep_raw" = 1 ] || rm -rf "$out/raw" # ~25 MB a run; the merged figures and the logs stay

echo "allocator,seq,syscalls,by_name" >"$out/syscalls.csv"
if [ "$do_strace" = 1 ]; then
  mkdir -p "$out/strace"
  for a in "${allocs[@]}"; do
    for seq in $seqs; do
      e=()
      for kv in $(env_of "$a"); do e+=(-E "$kv"); done
      # shellcheck disable=SC2046
      timeout 600 strace -f -qq -o "$out/strace/$a.$seq.txt" "${e[@]}" $(cmd_of "$a" "$seq" $(seq_args "$seq")) \
        >"$out/strace/$a.$seq.out" 2>&1 || echo "rt.sh: strace of $a $seq failed" >&2
      awk -v a="$a" -v s="$seq" '
        /rt-timed-end/ { inside = 0 }
        inside && !/resumed>/ {
          line = $0; sub(/^[0-9]+ +/, "", line)
          if (match(line, /^[a-z_0-9]+\(/)) { name = substr(line, 1, RLENGTH - 1); c[name]++; total++ }
        }
        /rt-timed-begin/ { inside = 1 }
        END {
          by = ""; for (k in c) by = by (by == "" ? "" : " ") k "=" c[k]
          printf "%s,%s,%d,%s\n", a, s, total, by
        }' "$out/strace/$a.$seq.txt" >>"$out/syscalls.csv"
      gzip -f "$out/strace/$a.$seq.txt"
    done
  done
fi

python3 - "$out" "$seqs" "${allocs[@]}" <<'EOF' >"$out/summary.md"
import csv, glob, os, re, statistics, sys
out, seqs, allocs = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
rows = {}   # (alloc, seq, kind, group) -> row
for a in allocs:
    for s in seqs:
        p = f"{out}/merged/{a}.{s}.csv"
        if not os.path.exists(p):
            continue
        for line in open(p):
            f = line.strip().split(",")
            if f[0] == "rt" and f[1] != "single":
                rows[(a, s, f[1], f[3])] = f
def faults(a, s, what):
    v = []
    for p in glob.glob(f"{out}/log/{a}.{s}.*.txt"):
        for line in open(p):
            m = re.match(rf"faults,{s},{what},(-?\d+)", line)
            if m:
                v.append(int(m.group(1)))
    return f"{statistics.median(v):.0f}" if v else "-"
sysc = {}
if os.path.exists(f"{out}/syscalls.csv"):
    for r in list(csv.reader(open(f"{out}/syscalls.csv")))[1:]:
        sysc[(r[0], r[1])] = (r[2], r[3])
def n(x):
    x = float(x)
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"
def cells(f):
    return [n(f[5]), n(f[7]), n(f[8]), n(f[9])]
if "churn" in seqs:
    for kind, title in (("min", "each step's least time over the runs"),
                        ("single_median", "single runs, median over the runs")):
        print(f"### Churn, {title} (ns; all calls, free and malloc pooled)\n")
        print("| allocator | P50 | P99.9 | P99.99 | max | free P99.99 / max | malloc P99.99 / max | max at step (op, size) |")
        print("|---|--:|--:|--:|--:|--:|--:|--|")
        for a in allocs:
            c = rows.get((a, "churn", kind, "calls"))
            if not c:
                continue
            fr, ma = rows[(a, "churn", kind, "free")], rows[(a, "churn", kind, "malloc")]
            where = "-"
            if kind == "min":
                op = "free" if float(fr[9]) >= float(ma[9]) else "malloc"
                w = fr if op == "free" else ma
                where = f"{w[10]} ({op}" + (f", {w[11]} B)" if op == "malloc" else ")")
            print(f"| {a} | " + " | ".join(cells(c)) +
                  f" | {n(fr[8])} / {n(fr[9])} | {n(ma[8])} / {n(ma[9])} | {where} |")
        print()
    print("### Churn: page faults and system calls inside the timed part\n")
    print("| allocator | minor faults (median of runs) | major | involuntary switches | system calls (strace run) |")
    print("|---|--:|--:|--:|--|")
    for a in allocs:
        sc = sysc.get((a, "churn"), ("-", ""))
        print(f"| {a} | {faults(a, 'churn', 'minflt')} | {faults(a, 'churn', 'majflt')} | "
              f"{faults(a, 'churn', 'nivcsw')} | {sc[0]}{' (' + sc[1] + ')' if sc[1] else ''} |")
    print()
if "hot" in seqs:
    sizes = [16, 64, 256, 1024, 4096]
    for kind, title in (("min", "each step's least time over the runs"),
                        ("single_median", "single runs, median over the runs")):
        print(f"### Hot path, {title}: malloc+free pair, P50 / P99.9 / P99.99 / max (ns), P99.9/P50\n")
        print("| allocator | " + " | ".join(f"{s} B" for s in sizes) + " |")
        print("|---|" + "--|" * len(sizes))
        for a in allocs:
            line = []
            for s in sizes:
                f = rows.get((a, "hot", kind, f"pair_{s}"))
                if not f:
                    line.append("-")
                    continue
                p50 = max(float(f[5]), 5.0)  # below half the counter's 10 ns step: taken as 5
                line.append(f"{n(f[5])} / {n(f[7])} / {n(f[8])} / {n(f[9])}, {float(f[7]) / p50:.1f}x")
            print(f"| {a} | " + " | ".join(line) + " |")
        print()
    print("### Hot path: page faults and system calls inside the timed part (all five sizes)\n")
    print("| allocator | minor faults | system calls (strace run) |")
    print("|---|--:|--|")
    for a in allocs:
        sc = sysc.get((a, "hot"), ("-", ""))
        print(f"| {a} | {faults(a, 'hot', 'minflt')} | {sc[0]}{' (' + sc[1] + ')' if sc[1] else ''} |")
    print()
EOF
cat "$out/summary.md"
