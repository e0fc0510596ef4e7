#!/usr/bin/env bash
# Big buffer loop (suite 'pool').
#
# usage: big_buffer.sh PATH/TO/libflatmalloc.so [PATH/TO/bigloop]
#
# bigloop: malloc 10 MiB, touch every page, free; LOOPS times. Under flatmalloc the minor page
# faults of 200 loops must be fewer than those of 20 loops + 2 x 2560 (10 MiB of 4 KiB pages),
# and the growth from 20 to 200 loops at most twice the faults of the first loop (+64, which
# also holds if the pool uses huge pages): the pages of the freed buffer are kept, not given back
# and faulted in again on every loop. Control: glibc with a fixed mmap threshold (it unmaps every
# buffer) must fail the same criterion, so the criterion can fail.
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
BIGLOOP=$(fm_helper bigloop "${2:-}")

# bigloop_faults LOOPS [ENV...]: "first total" minor faults
bigloop_faults() {
  local loops=$1
  shift
  local line
  line=$(env "$@" "$BIGLOOP" "$loops" 10) || fm_fail "bigloop $loops with $* failed"
  echo "$line" | sed -E 's/.* first=([0-9]+) total=([0-9]+) .*/\1 \2/'
}
# keeps_pages LABEL ENV...: returns 0 if faults(200) < faults(20) + 2*2560 and the growth
# from 20 to 200 loops is at most twice one loop's faults (+64); prints the figures.
keeps_pages() {
  local label=$1
  shift
  local a b first20 total20 total200 extra
  read -r first20 total20 <<<"$(bigloop_faults 20 "$@")"
  read -r _ total200 <<<"$(bigloop_faults 200 "$@")"
  extra=$((total200 - total20))
  echo "  $label: minor faults: 20 loops $total20, 200 loops $total200 (first loop $first20); growth $extra" >&2
  a=$((total200 < total20 + 2 * 2560))
  b=$((extra <= 2 * first20 + 64))
  [ $a -eq 1 ] && [ $b -eq 1 ]
}

fm_check "control: glibc with a fixed mmap threshold (unmaps each buffer) fails the criterion"
if keeps_pages "glibc mmap_threshold=128K" GLIBC_TUNABLES=glibc.malloc.mmap_threshold=131072; then
  fm_fail "glibc that unmaps every buffer passed: the measurement cannot see re-faulting"
fi
fm_ok "the criterion catches an allocator that gives the pages back"

fm_check "flatmalloc: faults do not grow with the number of loops"
keeps_pages "flatmalloc" LD_PRELOAD="$FM_SO" ||
  fm_fail "the 10 MiB buffer's pages are faulted in again on later loops (given back at free)"
fm_ok "pages kept"

echo "big_buffer: all checks passed"
