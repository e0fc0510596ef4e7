#!/usr/bin/env bash
# One pool, reserved once (suite 'pool').
#
# usage: one_pool.sh PATH/TO/libflatmalloc.so [PATH/TO/mixed]
#
# 1. mixed (N random allocations of 16 B to 8 MiB with frees and reallocs, every page touched,
#    contents and calloc's zeroes checked) under strace: with flatmalloc the numbers of mmap,
#    munmap, mremap and brk calls are the same for N and 100*N operations; under glibc they
#    differ (so the count does see a heap that grows). The output (a checksum of the data) is the
#    same as under glibc. The same again with 4 threads (4 x N operations; the main thread frees
#    what the threads leave).
# 2. FLATMALLOC_POOL=4G: exactly one mmap of at least 4 GiB (the pool).
# (FLATMALLOC_PREFAULT is checked by prefault.sh, the big buffer loop by big_buffer.sh.)
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
MIXED=$(fm_helper mixed "${2:-}")
command -v strace >/dev/null || fm_fail "strace is not installed (Debian package strace)"

N=500
N100=$((N * 100))

# traced LABEL PRELOAD(0/1) ARGS -- ENV...: runs mixed ARGS under strace, keeps the trace in
# $FM_TMP/LABEL.trace and stdout in $FM_TMP/LABEL.out; fails the check if mixed fails.
traced() {
  local label=$1 preload=$2 args=$3
  shift 3
  local envopts=() e
  [ "$preload" = 1 ] && envopts+=(-E "LD_PRELOAD=$FM_SO")
  for e in "$@"; do envopts+=(-E "$e"); done
  local rc=0
  # shellcheck disable=SC2086
  strace -f -qq -o "$FM_TMP/$label.trace" -e trace=mmap,munmap,mremap,brk "${envopts[@]}" \
    "$MIXED" $args >"$FM_TMP/$label.out" 2>"$FM_TMP/$label.err" || rc=$?
  if [ $rc -ne 0 ]; then
    fm_show "$FM_TMP/$label.err" "stderr"
    fm_fail "mixed $args ($label) exited with status $rc"
  fi
}

# counts LABEL: "mmap=A munmap=B mremap=C brk=D" from LABEL's trace (calls, failed ones too).
counts() {
  sed -E 's/^[0-9]+ +//' "$FM_TMP/$1.trace" | grep -v '^<\.\.\. ' |
    awk '{ for (s in c) if (index($0, s "(") == 1) c[s]++ }
         BEGIN { c["mmap"] = 0; c["munmap"] = 0; c["mremap"] = 0; c["brk"] = 0 }
         END { printf "mmap=%d munmap=%d mremap=%d brk=%d\n", c["mmap"], c["munmap"], c["mremap"], c["brk"] }'
}

same_output() {
  cmp -s "$FM_TMP/$1.out" "$FM_TMP/$2.out" || {
    fm_show "$FM_TMP/$1.out" "$1 stdout"
    fm_show "$FM_TMP/$2.out" "$2 stdout"
    fm_fail "mixed printed different results in $1 and $2"
  }
}

echo "== mmap/munmap/mremap/brk calls do not depend on the number of allocations =="
fm_check "control: under glibc, mixed $N and mixed $N100 make different numbers of calls"
traced glibc_n 0 "$N"
traced glibc_n100 0 "$N100"
c1=$(counts glibc_n)
c2=$(counts glibc_n100)
echo "  glibc N=$N:    $c1"
echo "  glibc N=$N100: $c2"
[ "$c1" != "$c2" ] || fm_fail "the counts are equal under glibc too: the test could not tell a growing heap"
fm_ok "counts differ under glibc"

fm_check "flatmalloc: mixed $N and mixed $N100 make the same numbers of mmap, munmap, mremap, brk calls"
traced fm_n 1 "$N"
traced fm_n100 1 "$N100"
same_output glibc_n fm_n
same_output glibc_n100 fm_n100
f1=$(counts fm_n)
f2=$(counts fm_n100)
echo "  flatmalloc N=$N:    $f1"
echo "  flatmalloc N=$N100: $f2"
if [ "$f1" != "$f2" ]; then
  diff <(grep -E '^[0-9]+ +(mmap|munmap|mremap|brk)\(' "$FM_TMP/fm_n.trace" | sed -E 's/^[0-9]+ +//; s/0x[0-9a-f]+/ADDR/g') \
    <(grep -E '^[0-9]+ +(mmap|munmap|mremap|brk)\(' "$FM_TMP/fm_n100.trace" | sed -E 's/^[0-9]+ +//; s/0x[0-9a-f]+/ADDR/g') |
    head -40 >&2 || true
  fm_fail "the counts differ: N=$N: $f1; N=$N100: $f2 (calls that differ above)"
fi
fm_ok "same counts, same results as glibc ($(cat "$FM_TMP/fm_n100.out"))"

fm_check "FLATMALLOC_POOL=4G: exactly one mmap of at least 4 GiB"
traced fm_4g 1 "$N" FLATMALLOC_POOL=4G
same_output glibc_n fm_4g
big=$(sed -E 's/^[0-9]+ +//' "$FM_TMP/fm_4g.trace" | grep -E '^mmap\(' |
  awk -F', ' '{ len = $2 + 0 } len >= 4294967296 { n++; print > "/dev/stderr" } END { print n + 0 }')
[ "$big" -eq 1 ] || fm_fail "$big mmap calls of at least 4 GiB, expected exactly one"
fm_ok "one reservation of the pool"

fm_check "control: under glibc, 4 threads x $N and 4 threads x $N100 make different numbers of calls"
traced glibc_t4_n 0 "$N 64 8388608 99 4"
traced glibc_t4_n100 0 "$N100 64 8388608 99 4"
c1=$(counts glibc_t4_n)
c2=$(counts glibc_t4_n100)
echo "  glibc 4 threads N=$N:    $c1"
echo "  glibc 4 threads N=$N100: $c2"
[ "$c1" != "$c2" ] || fm_fail "the counts are equal under glibc too"
fm_ok "counts differ under glibc"

fm_check "flatmalloc: 4 threads (blocks freed by the main thread at the end): same counts for $N and $N100"
traced fm_t4_n 1 "$N 64 8388608 99 4"
traced fm_t4_n100 1 "$N100 64 8388608 99 4"
same_output glibc_t4_n fm_t4_n
same_output glibc_t4_n100 fm_t4_n100
f1=$(counts fm_t4_n)
f2=$(counts fm_t4_n100)
echo "  flatmalloc 4 threads N=$N:    $f1"
echo "  flatmalloc 4 threads N=$N100: $f2"
[ "$f1" = "$f2" ] || fm_fail "the counts differ: N=$N: $f1; N=$N100: $f2"
fm_ok "same counts, same results as glibc ($(cat "$FM_TMP/fm_t4_n100.out"))"

echo "one_pool: all checks passed"
