#!/usr/bin/env bash
# The pool under RLIMIT_AS and RLIMIT_DATA (suite 'pool').
#
# usage: rlimit.sh PATH/TO/libflatmalloc.so [PATH/TO/aslimit]
#
# - With a limit set before start-up (ulimit -v), the default pool takes at most half of it, and
#   the program keeps room for threads, mappings and blocks (aslimit room); under 100 MiB eight
#   threads with default (8 MiB) stacks run at once (aslimit threads).
# - An explicit FLATMALLOC_POOL is taken as given: one that fits is reserved whole, one the
#   limit refuses stops the program with the documented line.
# - Lowering the limit after start-up changes nothing for malloc (the pool is reserved) while
#   other mappings are refused (aslimit lower).
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
ASLIMIT=$(fm_helper aslimit "${2:-}")
out=$FM_TMP/out
err=$FM_TMP/err

# run_limited KIB ENV... -- ARGS: runs aslimit ARGS under `ulimit -v KIB` (unlimited for "-"),
# preloaded with ENV; sets rc and pool (from the "pool=N" line).
run_limited() {
  local kib=$1
  shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  rc=0
  (
    [ "$kib" = - ] || ulimit -v "$kib"
    exec env "${envs[@]}" LD_PRELOAD="$FM_SO" "$ASLIMIT" "$@"
  ) >"$out" 2>"$err" || rc=$?
  pool=$(sed -n 's/^pool=\([0-9]*\)$/\1/p' "$out")
}

fm_check "no limit: the default pool"
run_limited - -- room
[ "$rc" -eq 0 ] && [ -n "$pool" ] || { fm_show "$out" stdout; fm_show "$err" stderr; fm_fail "aslimit room exited with $rc"; }
unlimited=$pool
fm_ok "pool=$unlimited"

# limits that are not powers of two: halving the pool until it fits would stop above half
for mib in 1536 768 400; do
  limit=$((mib << 20))
  fm_check "ulimit -v of $mib MiB: the default pool takes at most half, the program keeps room"
  run_limited $((mib << 10)) -- room
  [ "$rc" -eq 0 ] || { fm_show "$out" stdout; fm_show "$err" stderr; fm_fail "aslimit room exited with $rc"; }
  [ -n "$pool" ] && [ "$pool" -gt 0 ] || fm_fail "no pool size reported"
  [ "$pool" -le $((limit / 2)) ] || fm_fail "pool=$pool is more than half the limit ($((limit / 2)))"
  if [ "$unlimited" -gt $((limit / 2)) ]; then
    [ "$pool" -gt $((limit / 4)) ] || fm_fail "pool=$pool: not even a quarter of the limit (the halving went too far)"
  fi
  grep -q '^ok ' "$out" || fm_fail "no ok line from aslimit"
  fm_ok "pool=$pool; $(grep '^ok ' "$out")"
done

# issue 18: half of 100 MiB left no room for eight 8 MiB stacks
fm_check "ulimit -v 102400: eight threads with default stacks run at once"
run_limited 102400 -- threads
[ "$rc" -eq 0 ] || { fm_show "$out" stdout; fm_show "$err" stderr; fm_fail "aslimit threads exited with $rc"; }
[ ! -s "$err" ] || { fm_show "$err" stderr; fm_fail "aslimit threads wrote to stderr"; }
fm_ok "pool=$pool; $(grep '^ok ' "$out")"

fm_check "ulimit -v of 512 MiB: FLATMALLOC_POOL=300M is reserved whole (an explicit size is taken as given)"
run_limited $((512 << 10)) FLATMALLOC_POOL=300M -- room
[ "$rc" -eq 0 ] || { fm_show "$err" stderr; fm_fail "aslimit room exited with $rc"; }
[ "$pool" -eq $((300 << 20)) ] || fm_fail "pool=$pool, expected $((300 << 20))"
fm_ok "pool=$pool"

fm_check "ulimit -v of 512 MiB: FLATMALLOC_POOL=1G is refused with one line"
run_limited $((512 << 10)) FLATMALLOC_POOL=1G -- room
want="flatmalloc: FLATMALLOC_POOL=1G: the system refused to reserve a pool of this size"
[ "$rc" -eq 1 ] || { fm_show "$err" stderr; fm_fail "exit status $rc, expected 1"; }
printf '%s\n' "$want" | cmp -s - "$err" || { fm_show "$err" stderr; fm_fail "stderr is not exactly: $want"; }
[ ! -s "$out" ] || fm_fail "main ran"
fm_ok "$want"

fm_check "the limit lowered after start-up: malloc goes on from the pool, other mappings are refused"
run_limited - FLATMALLOC_POOL=512M -- lower
[ "$rc" -eq 0 ] || { fm_show "$out" stdout; fm_show "$err" stderr; fm_fail "aslimit lower exited with $rc"; }
[ ! -s "$err" ] || { fm_show "$err" stderr; fm_fail "aslimit lower wrote to stderr"; }
fm_ok "$(grep '^ok ' "$out")"

# VmData counts private writable memory: the pool opened ahead at start-up (docs/memory.md) is
# writable whole, unless RLIMIT_DATA refuses it, when the pool is opened as used.
vmdata() { sed -n 's/^VmData:[[:space:]]*\([0-9]*\) kB/\1/p' "$1"; }
fm_check "ulimit -d of 1 GiB: the pool is opened as used and the program runs"
strict=$(cat /proc/sys/vm/overcommit_memory)
( ulimit -d $((1 << 20)); LD_PRELOAD=$FM_SO cat /proc/self/status ) > "$out" 2> "$err" && rc=0 || rc=$?
[ "$rc" -eq 0 ] && [ ! -s "$err" ] || { fm_show "$err" stderr; fm_fail "cat under ulimit -d exited with $rc"; }
limited=$(vmdata "$out")
[ -n "$limited" ] && [ "$limited" -lt $((1 << 20)) ] || fm_fail "VmData $limited kB under a 1 GiB RLIMIT_DATA"
LD_PRELOAD=$FM_SO cat /proc/self/status > "$out"
open=$(vmdata "$out")
if [ "$strict" = 2 ]; then
  [ "$open" -lt $((1 << 20)) ] || fm_fail "strict overcommit: VmData $open kB, the pool opened ahead"
else
  [ "$open" -gt $((limited + (1 << 20))) ] || fm_fail "no limit: VmData $open kB, the pool not opened ahead (limited: $limited kB)"
fi
fm_ok "VmData $limited kB under the limit, $open kB without it (overcommit_memory $strict)"

echo "rlimit: all checks passed"
