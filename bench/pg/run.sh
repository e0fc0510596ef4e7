#!/usr/bin/env bash
# bench/pg/run.sh [--quick] PRELOAD : PostgreSQL with LD_PRELOAD=PRELOAD for the server ("" = glibc).
#
# Starts a throw-away server (tests/pg/pg-lib.sh: Debian's binaries, as the `postgres` user when
# run as root, Unix socket in a private directory, no TCP) tuned for benchmarking
# (shared_buffers 128MB, fsync off, synchronous_commit off, autovacuum off, max_wal_size 4GB),
# with PRELOAD in the server's environment only: psql and pgbench run with plain glibc, so only
# the server's allocator changes between runs. Prints CSV lines `workload,metric,value`:
#
#   pg_groupby  seconds              wall-clock of one psql session sending
#                                    SELECT region, SUM(amount) FROM sales GROUP BY region
#                                    500 times (table of the seeds, 5,000 deterministic rows);
#                                    median of 3 sessions (1 with --quick), after one warm-up
#   pg_select   tps                  pgbench -S -c 4 -j 2 -T 10 (-T 5 with --quick), scale 10
#   pg_tpcb     tps                  pgbench (TPC-B-like) -c 4 -j 2 -T 10 (-T 5 with --quick)
#   each        backend_vmhwm_kb     peak RSS (VmHWM) of the client backends: for pg_groupby read
#                                    by the session itself at its end (pg_read_file of
#                                    /proc/self/status), for pgbench the largest of the values
#                                    sampled every 0.2 s while it runs. VmHWM counts the shared
#                                    buffers a backend touched, so for pgbench it is dominated by
#                                    shared memory, the same under every allocator.
#   each        backend_rss_anon_kb  RssAnon (private memory: the heap) sampled the same way;
#                                    the largest value seen.
#
# scripts/bench calls it once per allocator, alternating; bench/pg/compare.sh does the same alone.
# Progress goes to stderr. Everything is bounded (timeouts on every client) and stops by itself.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source-path=SCRIPTDIR source=../../tests/pg/pg-lib.sh
. "$here/../../tests/pg/pg-lib.sh"

quick=0
preload=
have_preload=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    -h|--help) sed -n '2,25p' "$0"; exit 0 ;;
    *) [ "$have_preload" = 0 ] || { echo "usage: $0 [--quick] PRELOAD" >&2; exit 2; }
       preload=$a; have_preload=1 ;;
  esac
done
[ "$have_preload" = 1 ] || { echo "usage: $0 [--quick] PRELOAD   (\"\" for glibc)" >&2; exit 2; }
# scripts/bench also puts the allocator in our own environment: only the server gets it.
# FM_BUILD_DIR is scripts/lib.sh's; the library would reject it as an unknown setting.
# Other FLATMALLOC_* settings (FLATMALLOC_POOL...) reach the server.
unset LD_PRELOAD FM_BUILD_DIR

if [ "$quick" = 1 ]; then runs=1 secs=5; else runs=3 secs=10; fi
log() { echo "pg-bench: $*" >&2; }

pg_find_bin || { echo "pg-bench: no PostgreSQL server in /usr/lib/postgresql/*/bin (apt-get install postgresql)" >&2; exit 1; }
tmp=$(pg_mktemp)
dir=$tmp/pg
port=$(pg_port)
sampler=
cleanup() {
  [ -z "$sampler" ] || kill "$sampler" 2>/dev/null || true
  pg_stop "$dir" immediate 2>/dev/null || true
  rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# every library in PRELOAD (':' or ' ' separated) readable by the server's owner
libs=()
IFS=': ' read -r -a parts <<<"$preload"
for p in "${parts[@]}"; do
  [ -n "$p" ] || continue
  [ -f "$p" ] || { echo "pg-bench: $p not found" >&2; exit 1; }
  libs+=("$(pg_readable_lib "$p" "$tmp")")
done

log "server $PGBIN, preload: ${libs[*]:-(none: glibc)}, $([ "$quick" = 1 ] && echo quick || echo full)"
pg_env=()
pg_init "$dir" "$port" "shared_buffers = 128MB" "fsync = off" "synchronous_commit = off" \
  "full_page_writes = off" "autovacuum = off" "max_wal_size = 4GB" "max_connections = 20" \
  "log_min_messages = warning"
# shellcheck disable=SC2034  # read by pg_start
[ "${#libs[@]}" -eq 0 ] || pg_env=("LD_PRELOAD=$(IFS=:; echo "${libs[*]}")")
pg_start "$dir"
pm=$(pg_postmaster_pid "$dir")
if [ "${#libs[@]}" -gt 0 ]; then
  grep -qF "${libs[0]}" "/proc/$pm/maps" || { echo "pg-bench: the postmaster does not map ${libs[0]}" >&2; exit 1; }
fi

psql_() { timeout 600 "$PGBIN/psql" -X -q -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }
pgbench_() { timeout 900 "$PGBIN/pgbench" -h "$dir" -p "$port" -U postgres "$@" postgres; }

# status_kb FIELD FILE : the kB value of FIELD in a /proc/PID/status text.
status_kb() { awk -v f="$1:" '$1 == f { print $2 }' "$2"; }

# ---------------------------------------------------------------- GROUP BY, 500 times, one session
psql_ <"$here/sales.sql"
{
  echo '\o /dev/null'
  for _ in $(seq 500); do echo 'SELECT region, SUM(amount) FROM sales GROUP BY region;'; done
  echo '\o'
  echo "SELECT pg_read_file('/proc/self/status');"
} >"$tmp/groupby.sql"
psql_ -f "$tmp/groupby.sql" >/dev/null                   # warm-up: caches, page cache
times=()
for _ in $(seq "$runs"); do
  t0=$(date +%s%N)
  psql_ -At -f "$tmp/groupby.sql" >"$tmp/groupby.status"
  t1=$(date +%s%N)
  times+=("$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.4f", (b - a) / 1e9 }')")
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
log "pg_groupby: ${times[*]} s"
echo "pg_groupby,seconds,$(median "${times[@]}")"
echo "pg_groupby,backend_vmhwm_kb,$(status_kb VmHWM "$tmp/groupby.status")"
echo "pg_groupby,backend_rss_anon_kb,$(status_kb RssAnon "$tmp/groupby.status")"

# ---------------------------------------------------------------- pgbench
# sample_backends OUT : every 0.2 s, the largest VmHWM and RssAnon among the client backends
# (children of the postmaster whose title names a [local] connection), until killed.
sample_backends() {
  local out=$1 hwm=0 anon=0 pid v snap=$tmp/status.snapshot
  set +e
  while :; do
    for pid in $(pgrep -P "$pm"); do
      grep -q 'local\]' "/proc/$pid/cmdline" 2>/dev/null || continue
      cat "/proc/$pid/status" >"$snap" 2>/dev/null || continue
      v=$(status_kb VmHWM "$snap"); [ -z "$v" ] || [ "$v" -le "$hwm" ] || hwm=$v
      v=$(status_kb RssAnon "$snap"); [ -z "$v" ] || [ "$v" -le "$anon" ] || anon=$v
    done
    echo "$hwm $anon" >"$out.tmp" && mv "$out.tmp" "$out"
    sleep 0.2
  done
}

log "pgbench -i -s 10"
pgbench_ -i -s 10 -q >"$tmp/init.log" 2>&1 || { cat "$tmp/init.log" >&2; exit 1; }
psql_ -c 'CHECKPOINT'

run_pgbench() {   # run_pgbench NAME ARGS...
  local name=$1 tps
  shift
  sample_backends "$tmp/$name.rss" &
  sampler=$!
  pgbench_ -c 4 -j 2 -T "$secs" "$@" >"$tmp/$name.log" 2>&1 || { cat "$tmp/$name.log" >&2; exit 1; }
  kill "$sampler" 2>/dev/null || true
  wait "$sampler" 2>/dev/null || true
  sampler=
  tps=$(sed -n 's/^tps = \([0-9.]*\) (without initial connection time)$/\1/p' "$tmp/$name.log")
  [ -n "$tps" ] || { cat "$tmp/$name.log" >&2; exit 1; }
  grep -q 'number of failed transactions: 0 ' "$tmp/$name.log" ||
    { echo "pg-bench: $name had failed transactions" >&2; cat "$tmp/$name.log" >&2; exit 1; }
  [ -f "$tmp/$name.rss" ] || echo "0 0" >"$tmp/$name.rss"
  read -r hwm anon <"$tmp/$name.rss"
  log "$name: $tps tps, backend VmHWM $hwm kB, RssAnon $anon kB"
  echo "$name,tps,$tps"
  echo "$name,backend_vmhwm_kb,$hwm"
  echo "$name,backend_rss_anon_kb,$anon"
}
run_pgbench pg_select -S
psql_ -c 'CHECKPOINT'
run_pgbench pg_tpcb

pg_stop "$dir" fast
if grep -E 'terminated by signal|PANIC|^flatmalloc:' "$dir/server.log" >&2; then
  echo "pg-bench: the server crashed or flatmalloc reported a fault (lines above)" >&2
  exit 1
fi
