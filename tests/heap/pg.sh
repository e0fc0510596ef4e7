#!/usr/bin/env bash
# tests/heap/pg.sh LIBRARY : PostgreSQL under FLATMALLOC_HEAP writes one heap profile per process,
# and google-pprof reads each (suite 'heap').
#
# A fresh cluster (tests/pg/pg-lib.sh) runs with LD_PRELOAD=LIBRARY and FLATMALLOC_HEAP=DIR/pg,
# with a sampling interval of 64K so that short-lived processes have samples too. A client
# sorts and aggregates in one session (whose backend PID it records), a second session runs
# beside it; then the server stops (fast). Checked: a profile DIR/pg.PID for the postmaster and
# for the recorded backend, at least four processes in all, each in the heap_v2 format with its
# MAPPED_LIBRARIES; google-pprof --text reads every one of them with the server binary (a
# report with a total for each that has samples), and the
# backend's --alloc_space report names PostgreSQL's memory-context functions (AllocSet...).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 LIBRARY" >&2; exit 2; }
. "$(dirname "${BASH_SOURCE[0]}")/../pg/pg-lib.sh"
unset LD_PRELOAD
while read -r v; do unset "$v"; done < <(compgen -e | grep '^FLATMALLOC_' || true)
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v google-pprof >/dev/null || fail "google-pprof is missing (Debian package google-perftools)"
pg_find_bin || fail "no PostgreSQL server in /usr/lib/postgresql/*/bin (scripts/test-packages installs it)"
tmp=$(pg_mktemp)
port=$(pg_port)
trap 'pg_stop "$tmp/db" immediate || true; rm -rf "$tmp"' EXIT
lib=$(pg_readable_lib "$1" "$tmp")
mkdir -p "$tmp/heap"
[ "$(id -u)" -ne 0 ] || chown postgres: "$tmp/heap"

pg_env=(LD_PRELOAD="$lib")
pg_init "$tmp/db" "$port" "work_mem = '64MB'"
pg_env=(LD_PRELOAD="$lib" FLATMALLOC_HEAP="$tmp/heap/pg" FLATMALLOC_HEAP_SAMPLE=64K)
pg_start "$tmp/db"
postmaster=$(pg_postmaster_pid "$tmp/db")
pg_psql "$tmp/db" "$port" -q -c "SELECT pg_sleep(1)" >/dev/null &
other=$!
backend=$(pg_psql "$tmp/db" "$port" -qAt <<'SQL' | sed -n 1p
SELECT pg_backend_pid();
CREATE TEMP TABLE t AS SELECT g AS id, md5(g::text) AS s FROM generate_series(1, 200000) g;
SELECT count(*) FROM (SELECT s FROM t ORDER BY s) x;
SELECT count(DISTINCT s) FROM t;
SQL
)
wait "$other" || fail "the second session failed"
pg_stop "$tmp/db" || fail "the server did not stop cleanly"
[ -n "$backend" ] || fail "no backend PID"

mapfile -t files < <(ls "$tmp/heap" | grep -E '^pg\.[0-9]+$' | sed "s|^|$tmp/heap/|")
echo "profiles: ${#files[@]} (postmaster $postmaster, backend $backend)"
[ ${#files[@]} -ge 4 ] || fail "expected a profile from at least four processes, found ${#files[@]}"
[ -s "$tmp/heap/pg.$postmaster" ] || fail "no profile of the postmaster (pg.$postmaster)"
[ -s "$tmp/heap/pg.$backend" ] || fail "no profile of the client backend (pg.$backend)"
for f in "${files[@]}"; do
  head -n 1 "$f" | grep -Eq '^heap profile: +[0-9]+: +[0-9]+ \[ +[0-9]+: +[0-9]+\] @ heap_v2/65536$' ||
    fail "$f: header $(head -n 1 "$f")"
  grep -q '^MAPPED_LIBRARIES:$' "$f" || fail "$f: no MAPPED_LIBRARIES"
  google-pprof --text "$PGBIN/postgres" "$f" >"$tmp/out" 2>"$tmp/err" || { cat "$tmp/err" >&2; fail "google-pprof cannot read $f"; }
  # a process with no sampled block live at exit (pg_ctl, a short-lived helper, or one whose
  # sampled blocks were all freed) has an empty in-use report
  live=$(head -n 1 "$f" | sed -E 's/^heap profile: *([0-9]+):.*/\1/')
  [ "$live" -eq 0 ] || grep -q '^Total: ' "$tmp/out" || { cat "$tmp/out" "$tmp/err" >&2; fail "google-pprof: no total for $f"; }
done
echo "  ok: google-pprof reads all ${#files[@]} profiles"
google-pprof --text --alloc_space "$PGBIN/postgres" "$tmp/heap/pg.$backend" >"$tmp/out" 2>/dev/null
grep -q 'AllocSet' "$tmp/out" || { head -n 30 "$tmp/out" >&2; fail "the backend's --alloc_space report names no AllocSet function"; }
echo "  ok: the backend's profile: $(sed -n 's/^Total: //p' "$tmp/out") allocated, top: $(sed -n '2p' "$tmp/out" | awk '{ print $6 }')"
echo "heap-postgres: all checks passed"
