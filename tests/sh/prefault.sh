#!/usr/bin/env bash
# FLATMALLOC_PREFAULT=1 with a small pool (suite 'pool').
#
# usage: prefault.sh PATH/TO/libflatmalloc.so [PATH/TO/mixed]
#
# FLATMALLOC_PREFAULT=1 FLATMALLOC_POOL=256M: mixed (5000 operations on 8 slots, blocks up to
# 8 MiB) runs, succeeds and prints glibc's result; and the whole pool is resident from the
# start: the peak RSS of an idle program (mixed 0) is at least 90 % of 256 MiB, and without
# PREFAULT it is not. Without FLATMALLOC_POOL it stops at start-up with one line naming both.
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
MIXED=$(fm_helper mixed "${2:-}")
[ -x /usr/bin/time ] || fm_fail "/usr/bin/time is not installed (Debian package time)"

same_output() {
  cmp -s "$FM_TMP/$1.out" "$FM_TMP/$2.out" || {
    fm_show "$FM_TMP/$1.out" "$1 stdout"
    fm_show "$FM_TMP/$2.out" "$2 stdout"
    fm_fail "mixed printed different results in $1 and $2"
  }
}

fm_check "FLATMALLOC_PREFAULT=1 FLATMALLOC_POOL=256M: mixed runs and gives glibc's results"
args=(5000 8 8388608 12345)
"$MIXED" "${args[@]}" >"$FM_TMP/glibc_small.out"
rc=0
fm_preload env FLATMALLOC_PREFAULT=1 FLATMALLOC_POOL=256M "$MIXED" "${args[@]}" >"$FM_TMP/fm_small.out" 2>"$FM_TMP/fm_small.err" || rc=$?
[ $rc -eq 0 ] || {
  fm_show "$FM_TMP/fm_small.err" "stderr"
  fm_fail "mixed ${args[*]} exited with status $rc"
}
same_output glibc_small fm_small
fm_ok "$(cat "$FM_TMP/fm_small.out")"

fm_check "FLATMALLOC_PREFAULT=1 FLATMALLOC_POOL=256M: the pool is resident from the start"
maxrss() { # KiB
  /usr/bin/time -f %M -o "$FM_TMP/rss" env LD_PRELOAD="$FM_SO" "$@" "$MIXED" 0 >/dev/null ||
    fm_fail "mixed 0 with $* failed"
  tail -n 1 "$FM_TMP/rss"
}
rss_pre=$(maxrss FLATMALLOC_PREFAULT=1 FLATMALLOC_POOL=256M)
rss_lazy=$(maxrss FLATMALLOC_PREFAULT=0 FLATMALLOC_POOL=256M)
echo "  peak RSS of an idle program: PREFAULT=1 ${rss_pre} KiB, PREFAULT=0 ${rss_lazy} KiB"
[ "$rss_pre" -ge $((256 * 1024 * 9 / 10)) ] || fm_fail "with PREFAULT=1 peak RSS is only $rss_pre KiB"
[ "$rss_lazy" -lt $((256 * 1024 * 9 / 10)) ] || fm_fail "with PREFAULT=0 peak RSS is already $rss_lazy KiB"
fm_ok "prefaulted"

fm_check "FLATMALLOC_PREFAULT=1 without FLATMALLOC_POOL: stops at start-up naming both"
rc=0
fm_preload env FLATMALLOC_PREFAULT=1 "$MIXED" 0 >/dev/null 2>"$FM_TMP/nopool.err" || rc=$?
cat "$FM_TMP/nopool.err"
[ $rc -eq 1 ] || fm_fail "exit status $rc, expected 1"
want='flatmalloc: FLATMALLOC_PREFAULT=1: needs FLATMALLOC_POOL: the whole pool is made resident at start-up'
[ "$(cat "$FM_TMP/nopool.err")" = "$want" ] || fm_fail "expected exactly: $want"
fm_ok "stopped"

echo "prefault: all checks passed"
