# shellcheck shell=bash
# tests/pg/pg-lib.sh: a throw-away PostgreSQL server for tests/pg/postgres.sh and bench/pg/run.sh.
# Sourced, not run. Uses Debian's server binaries (/usr/lib/postgresql/VERSION/bin, the newest
# version installed), never whatever pg_ctl or psql comes first in PATH. As root the server runs
# as the unprivileged `postgres` user (initdb refuses root); otherwise as the caller. The data
# directory and the Unix socket live in a private temporary directory; no TCP (listen_addresses
# is empty), so nothing outside this machine, or even outside that directory, can reach it.

# pg_find_bin : sets PGBIN to Debian's newest server binary directory; returns 1 when none.
pg_find_bin() {
  local d
  PGBIN=
  for d in $(printf "%s\n" /usr/lib/postgresql/*/bin | sort -V); do
    [ -x "$d/postgres" ] && [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ] && [ -x "$d/psql" ] &&
      [ -x "$d/pgbench" ] && PGBIN=$d
  done
  [ -n "$PGBIN" ]
}

# pg_owner : the user that runs the server.
pg_owner() { if [ "$(id -u)" -eq 0 ]; then echo postgres; else id -un; fi; }

# pg_as_owner CMD... : runs CMD as the server's owner, keeping the environment.
pg_as_owner() {
  if [ "$(id -u)" -eq 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

# pg_mktemp : prints a new private directory that the server's owner can use. Short path: the
# Unix socket path must fit in 107 bytes.
pg_mktemp() {
  local d
  d=$(mktemp -d /tmp/fm-pg.XXXXXX) || return 1
  chmod 755 "$d"
  [ "$(id -u)" -ne 0 ] || chown postgres: "$d"
  echo "$d"
}

# pg_readable_lib LIB DIR : prints a path to LIB that the server's owner can read: LIB itself
# when it can, else a copy in DIR (a build tree under a private home is not traversable).
pg_readable_lib() {
  local lib=$1 dir=$2 copy
  if pg_as_owner test -r "$lib"; then
    readlink -f "$lib"
  else
    copy=$dir/$(basename "$(readlink -f "$lib")")
    cp "$lib" "$copy" && chmod 644 "$copy" && echo "$copy"
  fi
}

# pg_port : a private port number (it only names the socket file in our own directory).
pg_port() { echo $((20000 + $$ % 20000)); }

# pg_env : VAR=VALUE words (LD_PRELOAD, FLATMALLOC_*) put in the environment of initdb and of
# the server by pg_init and pg_start, hence of every process the postmaster forks. Empty: glibc.
pg_env=()

# pg_init DIR PORT [CONF_LINE...] : initdb into DIR/data with a socket in DIR, then appends the
# given lines to postgresql.conf. initdb's output (and that of the bootstrap backend it runs)
# goes to DIR/initdb.log.
pg_init() {
  local dir=$1 port=$2 line
  shift 2
  mkdir -p "$dir"
  [ "$(id -u)" -ne 0 ] || chown postgres: "$dir"
  if ! (cd "$dir" && pg_as_owner env "${pg_env[@]}" "$PGBIN/initdb" -D "$dir/data" -A trust -U postgres --no-sync \
          --locale=C -E UTF8) >"$dir/initdb.log" 2>&1; then
    echo "pg-lib: initdb failed:" >&2
    tail -n 30 "$dir/initdb.log" >&2
    return 1
  fi
  {
    echo "# added by flatmalloc's tests/pg/pg-lib.sh"
    echo "listen_addresses = ''"
    echo "unix_socket_directories = '$dir'"
    echo "port = $port"
    echo "logging_collector = off"
    echo "log_line_prefix = '%m [%p] '"
    echo "lc_messages = 'C'"
    for line in "$@"; do echo "$line"; done
  } >>"$dir/data/postgresql.conf"
}

# pg_start DIR : starts the server of DIR with pg_env in the environment of pg_ctl. The
# server's stderr goes to DIR/server.log. Prints nothing; returns pg_ctl's status.
pg_start() {
  local dir=$1
  if ! (cd "$dir" && pg_as_owner env "${pg_env[@]}" "$PGBIN/pg_ctl" -D "$dir/data" -l "$dir/server.log" \
          -w -t 60 start) >"$dir/pg_ctl.log" 2>&1; then
    echo "pg-lib: the server did not start:" >&2
    tail -n 30 "$dir/pg_ctl.log" "$dir/server.log" >&2 2>/dev/null
    return 1
  fi
}

# pg_postmaster_pid DIR : the postmaster's PID (first line of postmaster.pid).
pg_postmaster_pid() { head -n 1 "$1/data/postmaster.pid"; }

# pg_stop DIR [MODE] : stops the server of DIR (fast by default) and waits for it.
pg_stop() {
  local dir=$1 mode=${2:-fast}
  [ -f "$dir/data/postmaster.pid" ] || return 0
  (cd "$dir" && pg_as_owner "$PGBIN/pg_ctl" -D "$dir/data" -m "$mode" -w -t 60 stop) \
    >>"$dir/pg_ctl.log" 2>&1
}

# pg_psql DIR PORT ARGS... : psql (without ~/.psqlrc) connected to the server of DIR as postgres.
pg_psql() {
  local dir=$1 port=$2
  shift 2
  "$PGBIN/psql" -X -h "$dir" -p "$port" -U postgres -d postgres "$@"
}

# pg_pgbench DIR PORT ARGS... : pgbench against the server of DIR.
pg_pgbench() {
  local dir=$1 port=$2
  shift 2
  "$PGBIN/pgbench" -h "$dir" -p "$port" -U postgres "$@" postgres
}
