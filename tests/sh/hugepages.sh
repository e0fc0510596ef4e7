#!/usr/bin/env bash
# The state table on transparent huge pages (suite 'pool').
#
# usage: hugepages.sh PATH/TO/libflatmalloc.so [PATH/TO/thp]
#
# The blocks' state table (1/16 of the heap, below it) asks for huge pages (madvise
# MADV_HUGEPAGE) past its first 2 MiB, the states of the heap's first 32 MiB:
# 1. FLATMALLOC_POOL=1G (a 64 MiB table): one range of exactly 62 MiB is marked (VmFlags hg).
# 2. A small heap (1,000 blocks of 64 B) has no huge page there.
# 3. A large one (524,288 blocks of 256 B, 128 MiB; bigger blocks keep their states in the
#    chunks' lines) has, when the kernel offers transparent huge pages
#    (/sys/kernel/mm/transparent_hugepage/enabled not "[never]"); when it does not, the range
#    is still marked and the blocks keep their contents.
# 4. FLATMALLOC_POOL=64M (a 4 MiB table): nothing is marked.
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
THP=$(fm_helper thp "${2:-}")

# run LABEL ENV... -- ARGS: thp under the library; prints its line
run() {
  local label=$1 envs=() rc=0
  shift
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  fm_preload env "${envs[@]}" "$THP" "$@" >"$FM_TMP/$label.out" 2>"$FM_TMP/$label.err" || rc=$?
  if [ $rc -ne 0 ] || ! grep -q 'data=ok' "$FM_TMP/$label.out"; then
    fm_show "$FM_TMP/$label.err" "stderr"
    fm_fail "thp $* exited with status $rc"
  fi
  cat "$FM_TMP/$label.out"
}
field() { sed -n "s/.*$1=\([0-9]*\).*/\1/p" <<<"$2"; }

fm_check "FLATMALLOC_POOL=1G: the state table past its first 2 MiB (62 MiB) is marked for huge pages"
out=$(run small FLATMALLOC_POOL=1G -- 1000 64)
[ "$(field hg_kb "$out")" = $((62 * 1024)) ] || fm_fail "marked: $out (expected hg_kb=$((62 * 1024)))"
fm_ok "$out"

fm_check "a small heap has no huge page in the marked range"
[ "$(field huge_kb "$out")" = 0 ] || fm_fail "$out"
fm_ok "huge_kb=0"

fm_check "524,288 blocks of 256 B: the marked range holds huge pages"
out=$(run big FLATMALLOC_POOL=1G -- 524288 256)
[ "$(field hg_kb "$out")" = $((62 * 1024)) ] || fm_fail "marked: $out"
if grep -q '\[never\]' /sys/kernel/mm/transparent_hugepage/enabled 2>/dev/null || \
   [ ! -e /sys/kernel/mm/transparent_hugepage/enabled ]; then
  fm_ok "this kernel offers no transparent huge pages: marked, blocks intact ($out)"
else
  [ "$(field huge_kb "$out")" -gt 0 ] || fm_fail "no huge page: $out"
  fm_ok "$out"
fi

fm_check "FLATMALLOC_POOL=64M (a 4 MiB table): nothing is marked"
out=$(run tiny FLATMALLOC_POOL=64M -- 1000 64)
[ "$(field hg_kb "$out")" = 0 ] || fm_fail "$out"
fm_ok "$out"
echo "PASS"
