#!/usr/bin/env bash
# Huge pages (suite 'pool'): where the kernel offers transparent huge pages, a large heap lies on
# them, keeps them while partly freed, and goes back to glibc's size at malloc_trim(0); a small
# program gets none; FLATMALLOC_HUGEPAGES and glibc.malloc.hugetlb choose; hugetlb takes the pool
# from the kernel's reserved pages (as root: vm.nr_hugepages is set for the check and restored).
#
# usage: hugepages.sh PATH/TO/libflatmalloc.so [PATH/TO/hugepages]
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
HP=$(fm_helper hugepages "${2:-}")
MIB=256
want_huge=$((MIB * 1024 * 9 / 10))   # KiB: 90 % of the heap's blocks

# run LABEL ENV... -- ARGS: the program with the library and ENV; its lines in $FM_TMP/LABEL
run() {
  local label=$1 rc=0
  shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  env "${envs[@]}" "$HP" "$@" >"$FM_TMP/$label" 2>"$FM_TMP/$label.err" || rc=$?
  [ $rc -eq 0 ] || { fm_show "$FM_TMP/$label.err" stderr; fm_fail "hugepages $* ($label) exited with $rc"; }
  [ ! -s "$FM_TMP/$label.err" ] || { fm_show "$FM_TMP/$label.err" stderr; fm_fail "$label wrote to stderr"; }
}
# field LABEL STEP N: field N of STEP's line (2 rss, 3 huge pages of the process, 4 of the pool; KiB)
field() { awk -v s="$2" -v n="$3" '$1 == s { print $n }' "$FM_TMP/$1"; }

mode=$(sed -n 's/.*\[\(.*\)\].*/\1/p' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || true)
echo "transparent huge pages: ${mode:-not offered}"

run glibc -- $MIB
if [ "$mode" = madvise ] || [ "$mode" = always ]; then
  fm_check "a $MIB MiB heap of 64 B blocks: at least 90 % on huge pages, kept while a random half is freed"
  run fm LD_PRELOAD="$FM_SO" -- $MIB
  for step in filled half all; do
    h=$(field fm $step 4)
    [ "$h" -ge "$want_huge" ] || fm_fail "$step: $h KiB of the pool on huge pages, expected at least $want_huge"
  done
  fm_ok "filled $(field fm filled 4) KiB, half freed $(field fm half 4) KiB, all freed $(field fm all 4) KiB on huge pages"
else
  fm_check "no transparent huge pages here ($mode): none in the pool"
  run fm LD_PRELOAD="$FM_SO" -- $MIB
  [ "$(field fm filled 4)" -eq 0 ] || fm_fail "$(field fm filled 4) KiB on huge pages"
  fm_ok "none"
fi

fm_check "all freed and malloc_trim(0): at most glibc's resident memory + 16 MiB"
fm_rss=$(field fm trimmed 2) glibc_rss=$(field glibc trimmed 2)
[ "$fm_rss" -le $((glibc_rss + 16 * 1024)) ] || fm_fail "$fm_rss KiB stay resident, glibc $glibc_rss KiB"
fm_ok "$fm_rss KiB, glibc $glibc_rss KiB (filled: $(field fm filled 2) and $(field glibc filled 2) KiB)"

fm_check "FLATMALLOC_HUGEPAGES=0 and glibc.malloc.hugetlb=0: no huge page in the pool"
for e in FLATMALLOC_HUGEPAGES=0 GLIBC_TUNABLES=glibc.malloc.hugetlb=0; do
  run off LD_PRELOAD="$FM_SO" "$e" -- $MIB
  for step in filled half; do
    [ "$(field off $step 4)" -eq 0 ] || fm_fail "$e: $step: $(field off $step 4) KiB on huge pages"
  done
  [ "$(field off trimmed 2)" -le $((glibc_rss + 16 * 1024)) ] || fm_fail "$e: $(field off trimmed 2) KiB after malloc_trim"
done
fm_ok "none, $(field off trimmed 2) KiB after malloc_trim"

if [ "$mode" = madvise ] || [ "$mode" = always ]; then
  fm_check "glibc.malloc.hugetlb=1, and =2 with no reserved page free (glibc's fallback): transparent huge pages"
  free_tlb=$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages 2>/dev/null || echo 0)
  for v in 1 2; do
    [ "$v" = 2 ] && [ "$free_tlb" -ne 0 ] && continue   # (checked below with the pages reserved)
    run tun LD_PRELOAD="$FM_SO" GLIBC_TUNABLES=glibc.malloc.hugetlb=$v -- $MIB
    [ "$(field tun filled 4)" -ge "$want_huge" ] || fm_fail "hugetlb=$v: $(field tun filled 4) KiB on huge pages"
  done
  fm_ok "$(field tun filled 4) KiB"

  fm_check "blocks of 48 KiB, one word of each written, stay on base pages: at most glibc's resident memory + 16 MiB"
  run sparse_glibc -- sparse $MIB
  run sparse LD_PRELOAD="$FM_SO" -- sparse $MIB
  [ "$(field sparse sparse 2)" -le $(( $(field sparse_glibc sparse 2) + 16 * 1024 )) ] ||
    fm_fail "$(field sparse sparse 2) KiB resident ($(field sparse sparse 3) KiB on huge pages), glibc $(field sparse_glibc sparse 2) KiB"
  fm_ok "$(field sparse sparse 2) KiB resident, $(field sparse sparse 3) KiB of it huge; glibc $(field sparse_glibc sparse 2) KiB"

  fm_check "stress-ng's malloc churn beside 64 MiB of 64 B blocks, malloc_trim(0) one step in eight: those stay on huge pages"
  run churn LD_PRELOAD="$FM_SO" -- churn 64
  [ "$(field churn churned 4)" -ge "$(field churn kept 4)" ] ||
    fm_fail "$(field churn kept 4) KiB of the pool on huge pages before the churn, $(field churn churned 4) KiB after"
  fm_ok "$(field churn kept 4) KiB on huge pages before, $(field churn churned 4) KiB after"

  fm_check "64 MiB of 64 B blocks after a first block of 32 MiB: at least 90 % of them on huge pages too"
  run first LD_PRELOAD="$FM_SO" -- first 64
  got=$(( $(field first after 4) - $(field first block 4) ))
  [ "$got" -ge $((64 * 1024 * 9 / 10)) ] ||
    fm_fail "$got KiB more of the pool on huge pages after the 64 B blocks ($(field first block 4) KiB after the block)"
  fm_ok "$got KiB more on huge pages after the blocks, $(field first block 4) KiB after the block"

  fm_check "a small program gets no huge page; prefaulted, the pool is populated by huge pages"
  run small LD_PRELOAD="$FM_SO" -- 0
  [ "$(field small small 4)" -eq 0 ] || fm_fail "$(field small small 4) KiB on huge pages"
  run pre LD_PRELOAD="$FM_SO" FLATMALLOC_PREFAULT=1 FLATMALLOC_POOL=64M -- 0
  [ "$(field pre small 4)" -ge $((64 * 1024 * 9 / 10)) ] || fm_fail "prefaulted: $(field pre small 4) KiB on huge pages"
  fm_ok "small: $(field small small 2) KiB resident, none huge; prefaulted 64M: $(field pre small 4) KiB huge"
fi

fm_check "FLATMALLOC_HUGEPAGES=yes: stops before main with one line"
rc=0
fm_preload env FLATMALLOC_HUGEPAGES=yes "$HP" 0 >"$FM_TMP/bad" 2>"$FM_TMP/bad.err" || rc=$?
[ $rc -eq 1 ] && [ ! -s "$FM_TMP/bad" ] || fm_fail "exit status $rc, main ran: $(cat "$FM_TMP/bad")"
[ "$(cat "$FM_TMP/bad.err")" = "flatmalloc: FLATMALLOC_HUGEPAGES=yes: expected auto, 0 or hugetlb" ] ||
  fm_fail "stderr: $(cat "$FM_TMP/bad.err")"
fm_ok "$(cat "$FM_TMP/bad.err")"

# hugetlb: with no reserved page free, one line naming the pages needed and what to set; with them,
# the pool is made of them. As root the reservation is set for the check and restored after.
nr=/proc/sys/vm/nr_hugepages
[ -r "$nr" ] && [ -d /sys/kernel/mm/hugepages/hugepages-2048kB ] || fm_fail "the kernel offers no hugetlb pages of 2 MiB"
saved=$(cat "$nr")
restore() { [ "$(id -u)" -ne 0 ] || echo "$saved" >"$nr" 2>/dev/null || true; }
trap 'restore; rm -rf "$FM_TMP"' EXIT
if [ "$(id -u)" -eq 0 ]; then
  used=$(( saved - $(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages) ))
  [ "$used" -eq 0 ] || fm_fail "$used reserved huge pages are in use by other programs: cannot take the reservation away for the check"
  echo 0 >"$nr"
fi
[ "$(cat /sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages)" -eq 0 ] || fm_fail "reserved huge pages are free and this is not root: cannot check the error line"

fm_check "FLATMALLOC_HUGEPAGES=hugetlb with no reserved page free: one line naming the pages and the setting"
rc=0
fm_preload env FLATMALLOC_HUGEPAGES=hugetlb FLATMALLOC_POOL=64M "$HP" 0 >"$FM_TMP/tlb" 2>"$FM_TMP/tlb.err" || rc=$?
line=$(cat "$FM_TMP/tlb.err")
re='^flatmalloc: FLATMALLOC_HUGEPAGES=hugetlb: the pool needs ([0-9]+) huge pages of 2048K and 0 are free: reserve more \(sysctl -w vm.nr_hugepages=([0-9]+)\) or set a smaller FLATMALLOC_POOL$'
[ $rc -eq 1 ] && [ ! -s "$FM_TMP/tlb" ] || fm_fail "exit status $rc, main ran: $(cat "$FM_TMP/tlb")"
[[ "$line" =~ $re ]] || fm_fail "stderr: $line"
need=${BASH_REMATCH[1]}
[ "${BASH_REMATCH[2]}" -eq "$need" ] || fm_fail "the sysctl asks for ${BASH_REMATCH[2]} pages, the pool needs $need"
[ "$need" -ge 32 ] && [ "$need" -le 64 ] || fm_fail "a 64M pool (and its tables) needs $need pages of 2 MiB?"
fm_ok "$line"

if [ "$(id -u)" -eq 0 ]; then
  fm_check "FLATMALLOC_HUGEPAGES=hugetlb and glibc.malloc.hugetlb=2 with $need pages reserved: the pool is made of them"
  echo "$need" >"$nr"
  [ "$(cat "$nr")" -ge "$need" ] || { echo 1 >/proc/sys/vm/compact_memory; echo "$need" >"$nr"; }
  [ "$(cat "$nr")" -ge "$need" ] || fm_fail "the kernel reserved only $(cat "$nr") of $need huge pages"
  for e in FLATMALLOC_HUGEPAGES=hugetlb GLIBC_TUNABLES=glibc.malloc.hugetlb=2; do
    run tlb LD_PRELOAD="$FM_SO" "$e" FLATMALLOC_POOL=64M -- 32
    for step in filled half; do
      [ "$(field tlb $step 3)" -ge $((32 * 1024)) ] || fm_fail "$e: $step: $(field tlb $step 3) KiB on hugetlb pages"
    done
  done
  fm_ok "32 MiB of blocks: $(field tlb filled 3) KiB on hugetlb pages"
  restore
fi
echo "hugepages: all checks passed"
