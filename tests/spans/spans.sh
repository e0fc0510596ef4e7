#!/usr/bin/env bash
# Shared pool (suite 'spans'): every size may use the whole pool, freed memory serves any size,
# and pages go back to the system. Each case of spans.c runs under glibc and under flatmalloc;
# the figures are compared (RSS from /proc/self/status, page faults from getrusage; no timings).
#
# usage: spans.sh PATH/TO/libflatmalloc.so PATH/TO/spans
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/../sh/lib.sh"
fm_setup "$1"
SPANS=$2

# run LABEL ENV... -- ARGS: runs spans ARGS with ENV, output in $FM_TMP/LABEL
run() {
  local label=$1
  shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done
  shift
  if ! env "${envs[@]}" "$SPANS" "$@" >"$FM_TMP/$label" 2>"$FM_TMP/$label.err"; then
    fm_show "$FM_TMP/$label.err" "stderr"
    fm_fail "spans $* ($label) failed"
  fi
}
val() { sed -n "s/^$2 //p" "$FM_TMP/$1"; }
# le A B FACTOR: A <= B * FACTOR
le() { awk -v a="$1" -v b="$2" -v f="$3" 'BEGIN { exit !(a <= b * f) }'; }

FM=(LD_PRELOAD="$FM_SO")

for fill in "32 40000000" "1000 2000000" "4000 1000000" "8192 300000" "100 10000000"; do
  set -- $fill
  fm_check "$2 blocks of $1 B: all allocated, peak RSS within 1.25 x glibc's"
  run glibc -- fill "$1" "$2"
  run fm "${FM[@]}" -- fill "$1" "$2"
  [ "$(val fm null)" = 0 ] || fm_fail "flatmalloc returned NULL $(val fm null) times (glibc: $(val glibc null))"
  le "$(val fm fill_peak_mib)" "$(val glibc fill_peak_mib)" 1.25 ||
    fm_fail "peak $(val fm fill_peak_mib) MiB, glibc $(val glibc fill_peak_mib) MiB"
  fm_ok "peak $(val fm fill_peak_mib) MiB, glibc $(val glibc fill_peak_mib) MiB"
done

fm_check "size mix drifts 64 B -> 512 B -> 4 KiB -> 64 B (1 GiB each, freed): peak within 1.25 x glibc's, at most 128 MiB resident after malloc_trim(0)"
run glibc -- drift
run fm "${FM[@]}" -- drift
le "$(val fm drift_peak_mib)" "$(val glibc drift_peak_mib)" 1.25 ||
  fm_fail "peak $(val fm drift_peak_mib) MiB, glibc $(val glibc drift_peak_mib) MiB"
le "$(val fm drift_rss_mib)" 128 1 || fm_fail "$(val fm drift_rss_mib) MiB resident after the last free and malloc_trim(0)"
fm_ok "peak $(val fm drift_peak_mib) MiB (glibc $(val glibc drift_peak_mib)), $(val fm drift_rss_mib) MiB left"

fm_check "10,000 blocks of 200 KB, all freed, FLATMALLOC_RETAIN_DELAY=0: at most 256 MiB resident without malloc_trim"
run fm "${FM[@]}" FLATMALLOC_RETAIN_DELAY=0 -- release
le "$(val fm release_rss_mib)" 256 1 || fm_fail "$(val fm release_rss_mib) MiB resident after freeing them all"
fm_ok "$(val fm release_rss_mib) MiB left of a $(val fm release_peak_mib) MiB peak"

# The kept peak is dropped at most two delays after the pages went over the rest of the budget,
# whatever the machine's load; the sleep only has to be longer than that.
MiB=$((1 << 20))
fm_check "200 MiB of 1 KiB blocks, all freed: their pages stay for FLATMALLOC_RETAIN_DELAY (60 s here), through 200 runs taken and freed"
run fm "${FM[@]}" FLATMALLOC_RETAIN=16M FLATMALLOC_RETAIN_DELAY=60000 -- delay 0
[ "$(val fm returned_at_free)" = 0 ] || fm_fail "$(val fm returned_at_free) bytes went back at the frees"
[ "$(val fm returned_end)" = 0 ] || fm_fail "$(val fm returned_end) bytes went back within the delay"
le $((190 * MiB)) "$(val fm kept_end)" 1 || fm_fail "only $(val fm kept_end) bytes of free memory kept their pages"
fm_ok "none went back; $(val fm kept_end) bytes of free memory hold pages after $(val fm calls) calls"

fm_check "the same with FLATMALLOC_RETAIN_DELAY=50 and a 300 ms sleep: the next calls give the pages back, down to FLATMALLOC_RETAIN (16M)"
run fm "${FM[@]}" FLATMALLOC_RETAIN=16M FLATMALLOC_RETAIN_DELAY=50 -- delay 300
le "$(val fm kept_end)" $((16 * MiB)) 1 || fm_fail "$(val fm kept_end) bytes of free memory still hold pages after $(val fm calls) calls"
le $((180 * MiB)) "$(val fm returned_end)" 1 || fm_fail "only $(val fm returned_end) bytes went back"
fm_ok "$(val fm returned_end) bytes went back, $(val fm calls) calls after the sleep"

fm_check "the same with FLATMALLOC_RETAIN_DELAY=0: the pages go back at the frees"
run fm "${FM[@]}" FLATMALLOC_RETAIN=16M FLATMALLOC_RETAIN_DELAY=0 -- delay 0
le $((180 * MiB)) "$(val fm returned_at_free)" 1 || fm_fail "only $(val fm returned_at_free) bytes went back at the frees"
fm_ok "$(val fm returned_at_free) bytes went back at the frees, $(val fm kept_at_free) kept"

fm_check "20 buffers of 5-25 MiB, one replaced at random 2,000 times: no more page faults than glibc (x 1.25)"
run glibc -- buffers
run fm "${FM[@]}" -- buffers
le "$(val fm minor_faults)" "$(val glibc minor_faults)" 1.25 ||
  fm_fail "$(val fm minor_faults) minor faults, glibc $(val glibc minor_faults): freed pages go back and fault in again"
fm_ok "$(val fm minor_faults) minor faults, glibc $(val glibc minor_faults)"

fm_check "64 MiB pool: one size fills it (NULL only when it is full); then another size, then large blocks, reuse the freed spans"
run fm "${FM[@]}" FLATMALLOC_POOL=64M -- reuse
small=$(val fm small_bytes) other=$(val fm other_bytes) large=$(val fm large_bytes)
le $((60 << 20)) "$small" 1 || fm_fail "NULL after $small bytes of 64 B blocks in a 64 MiB pool"
le "$small" "$other" 1.05 || fm_fail "1000 B blocks got $other bytes after 64 B blocks had $small"
le "$small" "$large" 1.10 || fm_fail "96 KiB blocks got $large bytes after 64 B blocks had $small"
fm_ok "64 B: $small bytes; then 1000 B: $other; then 96 KiB: $large"

fm_check "a reserved class (256:25) still allocates its 25 % after a runaway size got ENOMEM"
run fm "${FM[@]}" FLATMALLOC_POOL=64M FLATMALLOC_CLASSES=16,64,256:25,1024 -- reserve
runaway=$(val fm runaway_bytes) reserved=$(val fm reserved_bytes)
le $((64 << 20)) "$reserved" 4.2 || fm_fail "the reserved class got only $reserved bytes after the runaway size"
le "$runaway" $((64 << 20)) 0.75 || fm_fail "the runaway size took $runaway bytes, into the reservation"
fm_ok "runaway 16 B: $runaway bytes until ENOMEM; reserved 256 B: $reserved bytes after it"
fm_check "chunks are 16 KiB in every pool; a large block is whole chunks"
for pc in "64M 16384 114688" "2G 16384 114688" "16G 16384 114688" "1T 16384 114688"; do
  set -- $pc
  run fm "${FM[@]}" FLATMALLOC_POOL="$1" -- chunk
  [ "$(val fm chunk)" = "$2" ] || fm_fail "FLATMALLOC_POOL=$1: chunk $(val fm chunk), expected $2"
  [ "$(val fm usable_100000)" = "$3" ] || fm_fail "FLATMALLOC_POOL=$1: malloc_usable_size of 100,000 bytes is $(val fm usable_100000), expected $3"
done
fm_ok "64M, 2G, 16G and 1T: 16 KiB chunks, 100,000 bytes use 114,688"

fm_check "a free run that holds pages is taken before a better fit that gave its pages back"
run fm "${FM[@]}" FLATMALLOC_RETAIN=1G -- warm
[ "$(val fm x2_is_x)" = 1 ] || fm_fail "the 6 MiB block did not reuse the 6 MiB run: $(tr '\n' ' ' <"$FM_TMP/fm")"
[ "$(val fm w_is_x)" = 1 ] || fm_fail "the 4 MiB block did not land in the run with pages: $(tr '\n' ' ' <"$FM_TMP/fm")"
[ "$(val fm w_resident_kb)" = 4096 ] || fm_fail "the 4 MiB block has $(val fm w_resident_kb) KiB resident before it is written, expected 4096"
fm_ok "a 4 MiB block after a 4 MiB run without pages and a 6 MiB run with: in the 6 MiB run, 4096 KiB resident"

fm_check "a block from untouched memory gives back the pages of a freed block that did not fit it, freed for over a 32nd of FLATMALLOC_RETAIN_DELAY (FLATMALLOC_RETAIN=1G)"
run fm "${FM[@]}" FLATMALLOC_RETAIN=1G FLATMALLOC_RETAIN_DELAY=320 FLATMALLOC_HUGEPAGES=0 -- grow 100
[ "$(val fm freed_resident_kb)" -ge 16000 ] || fm_fail "the freed 16 MiB block kept only $(val fm freed_resident_kb) KiB"
[ "$(val fm after_resident_kb)" = 0 ] || fm_fail "100 ms after its free (a 32nd of the delay: 10 ms), a 32 MiB block left it $(val fm after_resident_kb) KiB"
fm_ok "base pages: freed 16 MiB: $(val fm freed_resident_kb) KiB resident; 100 ms later a 32 MiB block from untouched memory: 0"
# on huge pages its ends stay: they lie in huge pages that blocks still in use share
run fm "${FM[@]}" FLATMALLOC_RETAIN=1G FLATMALLOC_RETAIN_DELAY=320 -- grow 100
[ "$(val fm freed_resident_kb)" -ge 16000 ] || fm_fail "the freed 16 MiB block kept only $(val fm freed_resident_kb) KiB"
[ "$(val fm after_resident_kb)" -lt 4096 ] ||
  fm_fail "100 ms after its free, a 32 MiB block left it $(val fm after_resident_kb) KiB: more than its ends in two huge pages in use"
fm_ok "huge pages: 100 ms later $(val fm after_resident_kb) KiB of it left (its ends, in huge pages in use)"
run fm "${FM[@]}" FLATMALLOC_RETAIN=1G FLATMALLOC_RETAIN_DELAY=60000 -- grow 0
[ "$(val fm after_resident_kb)" = "$(val fm freed_resident_kb)" ] ||
  fm_fail "at once (a 32nd of the delay: 1.9 s), the 32 MiB block took $(val fm freed_resident_kb) -> $(val fm after_resident_kb) KiB of the freed one"
fm_ok "at once, with FLATMALLOC_RETAIN_DELAY=60000: the freed block keeps its $(val fm after_resident_kb) KiB"

fm_check "malloc_trim(0) empties the caller's cache, and again only a FLATMALLOC_RETAIN_DELAY later"
run fm "${FM[@]}" -- trims
[ "$(val fm cached_1)" = 0 ] || fm_fail "after the first malloc_trim(0) $(val fm cached_1) bytes stay cached"
[ "$(val fm cached_2)" -gt 0 ] || fm_fail "a second malloc_trim(0) at once emptied the cache too"
kept=$(val fm cached_2)
run fm "${FM[@]}" FLATMALLOC_RETAIN_DELAY=0 -- trims
[ "$(val fm cached_1)" = 0 ] && [ "$(val fm cached_2)" = 0 ] ||
  fm_fail "FLATMALLOC_RETAIN_DELAY=0: $(val fm cached_1) and $(val fm cached_2) bytes cached after the two trims"
fm_ok "the first empties it, a second at once leaves $kept of the 6400 bytes just freed; with FLATMALLOC_RETAIN_DELAY=0 both empty it"

echo "spans: all checks passed"
