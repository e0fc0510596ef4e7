#!/usr/bin/env bash
# The blocks' states take memory by block size (suite 'pool').
#
# usage: states.sh PATH/TO/libflatmalloc.so [PATH/TO/states]
#
# A class below 1 KiB (16 KiB chunks) keeps its blocks' states in a shadow of one byte per 2^s
# heap bytes, 2^s its size rounded down to a power of two; with the chunks' lines and run
# records (96 bytes a chunk, 1/170 of the heap) that is all the tables hold for a
# heap of one size. The helper counts the resident pages below the lowest block (mincore) after
# allocating, filling and checking the blocks:
# 1. 1,048,576 blocks of 48 B (48 MiB): at most 1/20 of them (states 1/32, lines 1/170; one
#    shadow of 1/16 for every class, as before, made 1/13).
# 2. 262,144 blocks of 256 B (64 MiB): at most 1/40 (states 1/256; before: 1/10).
# 3. 2,097,152 blocks of 16 B (32 MiB): at most 1/12 (states 1/16, the densest shadow).
# 4. 1,000 blocks of 64 B: at most 128 KiB (no table is touched beyond what they use).
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
STATES=$(fm_helper states "${2:-}")

# run N SIZE: the helper under the library, FLATMALLOC_POOL=1G; prints its line
run() {
  local rc=0
  fm_preload env FLATMALLOC_POOL=1G "$STATES" "$@" >"$FM_TMP/out" 2>"$FM_TMP/err" || rc=$?
  if [ $rc -ne 0 ] || ! grep -q 'data=ok' "$FM_TMP/out"; then
    fm_show "$FM_TMP/err" "stderr"
    fm_fail "states $* exited with status $rc"
  fi
  cat "$FM_TMP/out"
}
field() { sed -n "s/.*$1=\([0-9]*\).*/\1/p" <<<"$2"; }

# check N SIZE DIVISOR: the tables' resident KiB at most the blocks' KiB / DIVISOR
check() {
  local out meta blocks
  fm_check "$1 blocks of $2 B: the tables take at most 1/$3 of them"
  out=$(run "$1" "$2")
  meta=$(field meta_kb "$out") blocks=$(field blocks_kb "$out")
  [ "$meta" -le $((blocks / $3)) ] || fm_fail "$out (more than $((blocks / $3)) KiB)"
  fm_ok "$out"
}
check 1048576 48 20
check 262144 256 40
check 2097152 16 12

fm_check "1,000 blocks of 64 B: the tables take at most 128 KiB"
out=$(run 1000 64)
[ "$(field meta_kb "$out")" -le 128 ] || fm_fail "$out"
fm_ok "$out"
echo "PASS"
