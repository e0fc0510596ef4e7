#!/usr/bin/env bash
# stress-ng's allocation stressors under flatmalloc (suite 'programs').
#
# usage: programs_stressng.sh PATH/TO/libflatmalloc.so
#
# Bounded runs with --verify and --metrics-brief, under flatmalloc with FLATMALLOC_STATS=1:
#   --malloc 2 --malloc-pthreads 2 --malloc-touch   (10 s)
#   --tsearch 1 --hsearch 1                          (10 s)
#   --malloc 1 --malloc-pthreads 2 --malloc-touch in a 256 MiB pool, far too small for it (5 s)
#   --bigheap 1 (grows to 256 MiB by realloc, 4096 steps of 64 KiB, in a 2 GiB pool)
# Each must exit 0, print "successful run completed", no line with "fail" other than a
# "failed: 0" tally, and a metrics line with nonzero bogo ops for each stressor; the statistics
# report (stress-ng forks: several processes may print one) must be valid and show a used class.
# (stress-ng's workers end with _exit, so the report comes from the parent; the workers are its
# forks, the same process image, so their malloc is the same preloaded flatmalloc.)
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
command -v stress-ng >/dev/null || fm_fail "stress-ng is not installed"
echo "stress-ng: $(stress-ng --version)"

# run NAME STRESSORS -- STRESS-NG ARGS... (settings may come first as NAME=VALUE with env)
run() {
  local name=$1 stressors=$2
  shift 2
  fm_check "$* under flatmalloc"
  fm_run "$name" fm "$@" --verify --metrics-brief
  local log="$FM_TMP/$name.log" s
  # stress-ng logs to stderr (and stdout, by version): read both, without the report
  { cat "$FM_TMP/$name.fm.out"; fm_strip_stats "$FM_TMP/$name.fm.err"; } >"$log"
  grep -q 'successful run completed' "$log" || {
    fm_show "$log" "stress-ng output"
    fm_fail "no 'successful run completed' line"
  }
  if grep -i 'fail' "$log" | grep -vE 'failed: 0$' >&2; then
    fm_show "$log" "stress-ng output"
    fm_fail "stress-ng reported a failure (line above)"
  fi
  if grep -iE 'skipped: [1-9]|skipping|not implemented|no stressors' "$log" >&2; then
    fm_fail "a stressor was skipped (line above)"
  fi
  for s in $stressors; do
    grep -qE "metrc: \[[0-9]+\] $s +[1-9][0-9]* " "$log" || {
      fm_show "$log" "stress-ng output"
      fm_fail "no metrics line with nonzero bogo ops for $s"
    }
  done
  fm_ok "bogo ops: $(grep -oE "metrc: \[[0-9]+\] [a-z]+ +[0-9]+ " "$log" | awk '{ printf "%s%s=%s", (NR > 1 ? ", " : ""), $3, $4 }')"
  fm_stats_verify "$FM_TMP/$name.fm.err"
}

run malloc malloc stress-ng --malloc 2 --malloc-pthreads 2 --malloc-touch --timeout 10s
run search "tsearch hsearch" stress-ng --tsearch 1 --hsearch 1 --timeout 10s
# A pool far smaller than the stressor asks for (two threads keep up to 64K blocks of up to
# 64 KiB each): allocations fail once it is full, and the stressor must carry on and verify.
run smallpool malloc env FLATMALLOC_POOL=256M stress-ng --malloc 1 --malloc-pthreads 2 --malloc-touch --timeout 5s
run bigheap bigheap env FLATMALLOC_POOL=2G stress-ng --bigheap 1 --bigheap-growth 64K --bigheap-ops 4096 --timeout 20s

echo "programs_stressng: all checks passed"
