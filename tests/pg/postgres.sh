#!/usr/bin/env bash
# tests/pg/postgres.sh LIBRARY : PostgreSQL under LD_PRELOAD=LIBRARY, compared with glibc.
#
# Runs the same thing in four passes, each on a fresh cluster (initdb, start, checks, clean stop):
#   glibc      no preload: the reference output
#   flatmalloc LD_PRELOAD=LIBRARY with FLATMALLOC_STATS=1
#   check      LD_PRELOAD=LIBRARY with FLATMALLOC_CHECK=1 (faults print `flatmalloc: ...`, abort)
#   pool2g     LD_PRELOAD=LIBRARY with FLATMALLOC_POOL=2G and FLATMALLOC_STATS=1
# In each pass: initdb and the server run with the pass's environment; the postmaster, every
# process it forked and a live client backend (pid from SELECT pg_backend_pid()) must map
# LIBRARY (glibc pass: must not); workload.sql, plans.sql, pgbench -i and a 4-client pgbench run;
# the server log must show spills to temporary files, no crash, no `flatmalloc:` fault line and a
# clean shutdown. The psql output of workload.sql and pgbench_check.sql must equal the glibc pass
# byte for byte. The flatmalloc and pool2g passes must log statistics lines (`flatmalloc[PID]:
# pool reserved=`) for several PIDs, among them the postmaster and the live backend (pool2g: of a
# 2 GiB pool). FM_PG_STATS_DIR=DIR saves the server logs of the passes there (for the README's
# sizing figures).
#
# FM_PG_STANDIN=1 (development only) runs with a stand-in allocator (jemalloc...) as LIBRARY and
# skips the assertions about flatmalloc's own output. FM_PG_KEEP=1 keeps the temporary directory.
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 LIBRARY" >&2; exit 2; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=pg-lib.sh
. "$here/pg-lib.sh"
# Each pass sets exactly what it tests. (The library rejects unknown FLATMALLOC_* names, so a
# stray FM_BUILD_DIR in the caller's environment would stop every preloaded process.)
unset LD_PRELOAD
while read -r v; do unset "$v"; done < <(compgen -e | grep '^FLATMALLOC_' || true)

lib_arg=$1
standin=${FM_PG_STANDIN:-0}
[ -f "$lib_arg" ] || { echo "FAIL: library $lib_arg not found" >&2; exit 1; }
if ! pg_find_bin; then
  if [ "$(id -u)" -eq 0 ]; then
    echo "FAIL: no PostgreSQL server in /usr/lib/postgresql/*/bin (scripts/test-packages installs it)" >&2
    exit 1
  fi
  echo "SKIP: PostgreSQL is not installed (apt-get install postgresql)"; exit 77
fi
echo "postgres: server binaries $PGBIN ($("$PGBIN/postgres" --version))"

tmp=$(pg_mktemp)
port=$(pg_port)
passes=()
session_pid=
bpid=
status=1

cleanup() {
  local p
  [ -z "$session_pid" ] || kill "$session_pid" 2>/dev/null || true
  for p in "${passes[@]}"; do
    pg_stop "$tmp/$p" immediate || true
  done
  if [ "$status" -ne 0 ]; then
    for p in "${passes[@]}"; do
      [ -f "$tmp/$p/server.log" ] || continue
      echo "----- the $p pass's server log ($tmp/$p/server.log): last lines, without statistics and temporary files" >&2
      grep -vE '^flatmalloc\[|LOG:  temporary file|STATEMENT:  |^	' "$tmp/$p/server.log" | tail -n 25 >&2 || true
    done
  fi
  if [ "${FM_PG_KEEP:-0}" = 1 ]; then
    echo "postgres: kept $tmp" >&2
  else
    rm -rf "$tmp"
  fi
}
trap cleanup EXIT
trap 'exit 130' INT TERM

fail() { echo "FAIL: $*" >&2; exit 1; }

lib=$(pg_readable_lib "$lib_arg" "$tmp")
lib_real=$(readlink -f "$lib")
echo "postgres: library $lib_real"

# check_mapped DIR WANT PID... : every PID maps the library (WANT=yes) or none does (WANT=no).
check_mapped() {
  local dir=$1 want=$2 pid maps
  shift 2
  for pid in "$@"; do
    maps=$(cat "/proc/$pid/maps" 2>/dev/null) || continue
    [ -n "$maps" ] || continue                    # exiting meanwhile: a zombie maps nothing
    if grep -qF "$lib_real" <<<"$maps"; then
      [ "$want" = yes ] || fail "process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline")) maps $lib_real in the glibc pass"
    else
      [ "$want" = no ] || fail "process $pid ($(tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null)) does not map $lib_real"
    fi
  done
}

# check_children DIR WANT : the postmaster and every process it has forked right now.
check_children() {
  local dir=$1 want=$2 pm kids
  pm=$(pg_postmaster_pid "$dir")
  mapfile -t kids < <(pgrep -P "$pm" || true)
  [ "${#kids[@]}" -ge 3 ] || fail "the postmaster $pm has only ${#kids[@]} children"
  check_mapped "$dir" "$want" "$pm" "${kids[@]}"
  echo "  postmaster $pm and its ${#kids[@]} processes: library mapped=$want"
}

# live_backend DIR WANT : opens a session, gets its backend's pid from SELECT pg_backend_pid(),
# checks that backend's /proc/PID/maps while the session is open, closes the session. Sets bpid.
live_backend() {
  local dir=$1 want=$2 fd
  bpid=
  mkfifo "$dir/session.in"
  : >"$dir/session.out"   # (psql's redirect opens it only after the fifo: head below must find it)
  timeout 60 "$PGBIN/psql" -X -At -h "$dir" -p "$port" -U postgres -d postgres \
    <"$dir/session.in" >"$dir/session.out" 2>&1 &
  session_pid=$!
  exec {fd}>"$dir/session.in"
  # (each write in a subshell: if psql died, SIGPIPE ends the subshell, not this script)
  (echo 'SELECT pg_backend_pid();' >&"$fd") || fail "the live session's psql is gone: $(cat "$dir/session.out")"
  for _ in $(seq 100); do
    bpid=$(head -n 1 "$dir/session.out")
    [ -n "$bpid" ] && break
    sleep 0.1
  done
  [[ "$bpid" =~ ^[0-9]+$ ]] || fail "no backend pid from the live session: $(cat "$dir/session.out")"
  grep -q . "/proc/$bpid/maps" 2>/dev/null || fail "backend $bpid of the live session is gone"
  check_mapped "$dir" "$want" "$bpid"
  (echo "SELECT 'session done';"; echo '\q') >&"$fd" || fail "the live session's psql is gone"
  exec {fd}>&-
  wait "$session_pid" || fail "the live session failed: $(cat "$dir/session.out")"
  session_pid=
  grep -q '^session done$' "$dir/session.out" || fail "the live session did not finish: $(cat "$dir/session.out")"
  echo "  live backend $bpid: library mapped=$want"
}

# run_pass NAME [VAR=VALUE...] : one whole pass; LD_PRELOAD among the variables, or none for glibc.
run_pass() {
  local name=$1 dir=$tmp/$1 want=no t0 t1 pm v
  shift
  for v in "$@"; do [[ "$v" != LD_PRELOAD=* ]] || want=yes; done
  passes+=("$name")
  echo "postgres: pass $name: ${*:-(no preload)}"
  t0=$(date +%s.%N)
  pg_env=("$@")
  pg_init "$dir" "$port" "fsync = off" "max_connections = 20" \
      "log_temp_files = 0" ||
    fail "initdb failed in the $name pass"
  pg_start "$dir" || fail "the server did not start in the $name pass"
  pm=$(pg_postmaster_pid "$dir")
  # the postmaster (and so every process it forks) has exactly this pass's settings
  local penv
  penv=$(tr '\0' '\n' <"/proc/$pm/environ")
  for v in "$@"; do
    grep -qxF "$v" <<<"$penv" || fail "the postmaster's environment lacks $v"
  done
  if grep -E '^(LD_PRELOAD|FLATMALLOC_[A-Z_]*)=' <<<"$penv" | grep -vxF -f <(printf '%s\n' "$@"); then
    fail "the postmaster's environment has settings the $name pass did not set (above)"
  fi
  check_children "$dir" "$want"
  live_backend "$dir" "$want"

  timeout 240 "$PGBIN/psql" -X -a -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
      -f "$here/workload.sql" >"$dir/workload.out" 2>"$dir/workload.err" ||
    fail "workload.sql failed in the $name pass: $(tail -n 5 "$dir/workload.err")"
  check_children "$dir" "$want"
  timeout 120 "$PGBIN/psql" -X -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
      -f "$here/plans.sql" >"$dir/plans.out" 2>&1 ||
    fail "plans.sql failed in the $name pass: $(tail -n 5 "$dir/plans.out")"
  grep -q 'Disk Usage: [1-9]' "$dir/plans.out" || fail "no hash aggregate spilled to disk ($dir/plans.out)"
  grep -q 'Sort Method: external merge' "$dir/plans.out" || fail "no sort spilled to disk"
  grep -q 'Batches: [1-9][0-9]' "$dir/plans.out" || fail "no hash join ran in batches"
  grep -q 'Workers Launched: [1-9]' "$dir/plans.out" || fail "no parallel worker was launched"
  grep -q '^ JIT:' "$dir/plans.out" || fail "no query was JIT-compiled (llvmjit.so)"

  timeout 120 "$PGBIN/pgbench" -h "$dir" -p "$port" -U postgres -i -s 2 -q postgres \
      >"$dir/pgbench-init.log" 2>&1 || fail "pgbench -i failed: $(tail -n 5 "$dir/pgbench-init.log")"
  timeout 120 "$PGBIN/pgbench" -h "$dir" -p "$port" -U postgres -c 4 -j 2 -t 200 --random-seed=5432 \
      postgres >"$dir/pgbench.log" 2>&1 || fail "pgbench failed: $(tail -n 5 "$dir/pgbench.log")"
  grep -q 'number of transactions actually processed: 800/800' "$dir/pgbench.log" ||
    fail "pgbench did not process 800 transactions: $(cat "$dir/pgbench.log")"
  timeout 60 "$PGBIN/psql" -X -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 \
      -f "$here/pgbench_check.sql" >"$dir/pgbench.out" 2>&1 || fail "pgbench_check.sql failed"
  grep -Eq '^ t +\| t +\| t$' "$dir/pgbench.out" ||
    fail "pgbench balances disagree with the history: $(cat "$dir/pgbench.out")"

  pg_stop "$dir" fast || fail "the server did not stop cleanly in the $name pass"
  # (a zombie is fine: the postmaster's new parent, init or a subreaper, may not have reaped it yet;
  # pg_ctl returns once the pid file is gone, which the postmaster removes before its exit
  # handlers, the statistics report among them, have run: give those up to 10 s)
  for _ in $(seq 100); do
    [ -e "/proc/$pm" ] && [ "$(awk '{ print $3 }' "/proc/$pm/stat" 2>/dev/null)" != Z ] || break
    sleep 0.1
  done
  if [ -e "/proc/$pm" ] && [ "$(awk '{ print $3 }' "/proc/$pm/stat" 2>/dev/null)" != Z ] &&
     [ -e "/proc/$pm" ]; then
    fail "the postmaster $pm is still running after pg_ctl stop"
  fi
  t1=$(date +%s.%N)

  local log=$dir/server.log
  grep -q 'database system is shut down' "$log" || fail "no clean shutdown in the $name pass's log"
  if grep -E 'terminated by signal|PANIC:|server process .* exited with exit code|all server processes terminated|terminating any other active server processes' "$log"; then
    fail "a server process crashed in the $name pass (lines above)"
  fi
  if grep -E '^flatmalloc:' "$log" "$dir/initdb.log"; then
    fail "flatmalloc reported a fault in the $name pass (lines above)"
  fi
  local temps
  temps=$(grep -c 'LOG:  temporary file' "$log" || true)
  [ "$temps" -ge 10 ] || fail "only $temps temporary files logged: the workload did not spill"
  echo "  workload, plans, pgbench 800/800, clean stop; $temps temporary files; $(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }') s"
  echo "$bpid" >"$dir/backend.pid"
  echo "$pm" >"$dir/postmaster.pidnum"
}

# compare NAME : the pass's query results equal the glibc pass's.
compare() {
  local f
  for f in workload.out workload.err pgbench.out; do
    if ! diff -u "$tmp/glibc/$f" "$tmp/$1/$f" >"$tmp/$1/$f.diff"; then
      head -n 60 "$tmp/$1/$f.diff" >&2
      fail "$f of the $1 pass differs from glibc's (diff above)"
    fi
  done
  echo "  results identical to glibc's ($(wc -l <"$tmp/$1/workload.out") lines of workload output)"
}

# check_stats NAME : statistics lines for several PIDs, including the postmaster and the backend.
check_stats() {
  local log=$tmp/$1/server.log pids n pm bpid
  pm=$(cat "$tmp/$1/postmaster.pidnum")
  bpid=$(cat "$tmp/$1/backend.pid")
  pids=$({ grep -oE '^flatmalloc\[[0-9]+\]: pool reserved=' "$log" || true; } | grep -oE '[0-9]+' | sort -un || true)
  n=$(echo "$pids" | grep -c . || true)
  [ "$n" -ge 5 ] || fail "statistics lines for only $n PIDs in the $1 pass's log (want >= 5)"
  echo "$pids" | grep -qx "$pm" || fail "no statistics line from the postmaster ($pm)"
  echo "$pids" | grep -qx "$bpid" || fail "no statistics line from the live backend ($bpid)"
  echo "  statistics from $n processes, among them the postmaster $pm and backend $bpid"
}

run_pass glibc
run_pass flatmalloc LD_PRELOAD="$lib" FLATMALLOC_STATS=1
compare flatmalloc
if [ "$standin" = 1 ]; then
  echo "  (stand-in allocator: statistics not checked)"
else
  check_stats flatmalloc
fi
run_pass check LD_PRELOAD="$lib" FLATMALLOC_CHECK=1
compare check
if [ "$standin" != 1 ]; then
  # control: under the same settings a double free is reported, so a clean log means something
  rc=0
  control=$(env LD_PRELOAD="$lib" FLATMALLOC_CHECK=1 python3 -c '
import ctypes
libc = ctypes.CDLL(None)
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
p = libc.malloc(40)
libc.free(p)
libc.free(p)' 2>"$tmp/check-control.err") || rc=$?
  if ! grep -q '^flatmalloc: ' "$tmp/check-control.err" || [ "$rc" -ne 134 ]; then
    fail "FLATMALLOC_CHECK=1 did not catch a deliberate double free (exit $rc: $control $(cat "$tmp/check-control.err"))"
  fi
  echo "  control: a deliberate double free under the same settings: $(head -n 1 "$tmp/check-control.err")"
fi
run_pass pool2g LD_PRELOAD="$lib" FLATMALLOC_POOL=2G FLATMALLOC_STATS=1
compare pool2g
if [ "$standin" != 1 ]; then
  check_stats pool2g
  grep -E '^flatmalloc\[[0-9]+\]: pool reserved=2147483648 ' "$tmp/pool2g/server.log" >/dev/null ||
    fail "the pool2g pass's statistics do not show a 2 GiB pool: $(grep -m1 'pool reserved' "$tmp/pool2g/server.log")"
fi
status=0
if [ -n "${FM_PG_STATS_DIR:-}" ]; then
  mkdir -p "$FM_PG_STATS_DIR"
  for p in "${passes[@]}"; do cp "$tmp/$p/server.log" "$FM_PG_STATS_DIR/$p-server.log"; done
fi
echo "postgres: all passes agree with glibc"
