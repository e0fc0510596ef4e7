#!/usr/bin/env bash
# bench/pg/classes.sh [--rounds N] [--configs LIST] LIBFLATMALLOC : profile -> classes -> run on
# PostgreSQL's GROUP BY workload (the table and query of bench/pg/run.sh: 500 times
# SELECT region, SUM(amount) FROM sales GROUP BY region in one psql session).
#
#  1. a server with FLATMALLOC_PROFILE: one warm-up and one timed session; stopping the server
#     makes every process (postmaster, background processes, backends) write its FILE.PID
#  2. scripts/flatmalloc-classes on those files: the proposal and a second proposal with
#     --class-cost 32768 (fewer classes: each costs a batch), both run as printed
#  3. N rounds (5 by default), alternating default classes / proposal / proposal with the class
#     cost / profiling (FLATMALLOC_PROFILE set, to time the recording): each starts
#     the server, runs a warm-up session and a timed one, reads the session backend's VmHWM and
#     RssAnon from /proc/self/status at the end, stops the server. Prints every value and the
#     medians. --configs picks the configurations and their order in a round (comma-separated;
#     default default,proposal,proposal-cc,profiling).
# Everything runs as bench/pg/run.sh does (private socket, no TCP, fsync off); only the server
# gets the library.
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/../.." && pwd)
# shellcheck source-path=SCRIPTDIR source=../../tests/pg/pg-lib.sh
. "$top/tests/pg/pg-lib.sh"
rounds=5
configs=default,proposal,proposal-cc,profiling
lib=
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift ;;
    --configs) configs=$2; shift ;;
    *) lib=$1 ;;
  esac
  shift
done
[ -f "$lib" ] || { echo "usage: $0 [--rounds N] [--configs LIST] LIBFLATMALLOC" >&2; exit 2; }
unset LD_PRELOAD FM_BUILD_DIR
for v in $(env | sed -n 's/^\(FLATMALLOC_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
py=$(command -v /usr/bin/python3 || command -v python3)
log() { echo "pg-classes: $*" >&2; }

pg_find_bin || { log "no PostgreSQL server"; exit 1; }
tmp=$(pg_mktemp)
dir=$tmp/pg
port=$(pg_port)
cleanup() { pg_stop "$dir" immediate 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
trap 'exit 130' INT TERM
lib=$(pg_readable_lib "$lib" "$tmp")
prof=$tmp/prof
mkdir -p "$prof" "$tmp/scratch"
chmod 777 "$prof" "$tmp/scratch"

pg_init "$dir" "$port" "shared_buffers = 128MB" "fsync = off" "synchronous_commit = off" \
  "full_page_writes = off" "autovacuum = off" "max_wal_size = 4GB" "max_connections = 20" \
  "log_min_messages = warning"
psql_() { timeout 600 "$PGBIN/psql" -X -q -h "$dir" -p "$port" -U postgres -d postgres -v ON_ERROR_STOP=1 "$@"; }
pg_start "$dir"
psql_ <"$here/sales.sql"
pg_stop "$dir" fast
{
  echo '\o /dev/null'
  for _ in $(seq 500); do echo 'SELECT region, SUM(amount) FROM sales GROUP BY region;'; done
  echo '\o'
  echo "SELECT pg_read_file('/proc/self/status');"
} >"$tmp/groupby.sql"

# session ENV... : starts the server with ENV, warm-up session, timed session, stop.
# Prints "seconds vmhwm_kb rss_anon_kb".
session() {
  # shellcheck disable=SC2034  # read by pg_start
  pg_env=("LD_PRELOAD=$lib" "$@")
  pg_start "$dir"
  psql_ -f "$tmp/groupby.sql" >/dev/null
  local t0 t1
  t0=$(date +%s%N)
  psql_ -At -f "$tmp/groupby.sql" >"$tmp/status"
  t1=$(date +%s%N)
  pg_stop "$dir" fast
  if grep -E 'terminated by signal|PANIC|^flatmalloc:' "$dir/server.log" >&2; then
    log "the server crashed or flatmalloc reported a fault"; exit 1
  fi
  awk -v a="$t0" -v b="$t1" '$1 == "VmHWM:" { h = $2 } $1 == "RssAnon:" { r = $2 }
    END { printf "%.4f %d %d\n", (b - a) / 1e9, h, r }' "$tmp/status"
}

log "profile run"
read -r s h r < <(session FLATMALLOC_PROFILE="$prof/pg")
log "profiling session: $s s, backend VmHWM $h kB, RssAnon $r kB"
echo "== profile: $(ls "$prof" | wc -l) process files =="
"$py" "$top/scripts/flatmalloc-classes" --png "$top/bench/plots/pg_groupby_classes.png" "$prof/pg" | tee "$tmp/proposal"
proposal=$(head -n 1 "$tmp/proposal")
"$py" "$top/scripts/flatmalloc-classes" --no-png --class-cost 32768 "$prof/pg" | tee "$tmp/proposal-cc"
proposal_cc=$(head -n 1 "$tmp/proposal-cc")

echo "== $rounds rounds, alternating =="
echo "round config seconds vmhwm_kb rss_anon_kb"
declare -A S H R
for i in $(seq "$rounds"); do
  for cfg in ${configs//,/ }; do
    case $cfg in
      default) read -r s h r < <(session) ;;
      proposal) read -r s h r < <(session "$proposal") ;;
      proposal-cc) read -r s h r < <(session "$proposal_cc") ;;
      profiling) read -r s h r < <(session FLATMALLOC_PROFILE="$tmp/scratch/p$i") ;;
      *) log "unknown configuration $cfg"; exit 2 ;;
    esac
    echo "$i $cfg $s $h $r"
    S[$cfg]+="$s "; H[$cfg]+="$h "; R[$cfg]+="$r "
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "== medians =="
for cfg in ${configs//,/ }; do
  # shellcheck disable=SC2086
  echo "$cfg: $(median ${S[$cfg]}) s, backend VmHWM $(median ${H[$cfg]}) kB, RssAnon $(median ${R[$cfg]}) kB"
done
