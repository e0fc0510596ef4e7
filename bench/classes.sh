#!/usr/bin/env bash
# bench/classes.sh [--rounds N] [--name NAME] LIBFLATMALLOC -- CMD [ARGS...] : profile -> classes
# -> run for any program (bench/pg/classes.sh does the same for PostgreSQL).
#
#  1. CMD once under FLATMALLOC_PROFILE (every process writes FILE.PID), timed
#  2. scripts/flatmalloc-classes: the proposal (default: one class per size, at most 64) and a
#     second one with --class-cost 32768, run as printed
#  3. N rounds (5 by default), alternating default classes / proposal / proposal with the class
#     cost / profiling: wall-clock seconds and peak RSS (GNU time's %e and %M). Prints every
#     value and the medians.
# The plot goes to bench/plots/NAME_classes.png (NAME: the last argument's base name by default).
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)
rounds=5
name=
lib=
while [ $# -gt 0 ]; do
  case "$1" in
    --rounds) rounds=$2; shift ;;
    --name) name=$2; shift ;;
    --) shift; break ;;
    *) lib=$1 ;;
  esac
  shift
done
[ -f "$lib" ] && [ $# -gt 0 ] || { echo "usage: $0 [--rounds N] [--name NAME] LIBFLATMALLOC -- CMD [ARGS...]" >&2; exit 2; }
lib=$(readlink -f "$lib")
unset LD_PRELOAD FM_BUILD_DIR
for v in $(env | sed -n 's/^\(FLATMALLOC_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
py=$(command -v /usr/bin/python3 || command -v python3)
classes() { "$py" "$top/scripts/flatmalloc-classes" "$@"; }
tmp=$(mktemp -d /tmp/fm-classes.XXXXXX)
trap 'rm -rf "$tmp"' EXIT

# run ENV... CMD... : once with the library (env(1) takes the settings, then the command);
# prints "seconds max_rss_kb".
run() {
  /usr/bin/time -f '%e %M' -o "$tmp/time" env LD_PRELOAD="$lib" "$@" >/dev/null 2>"$tmp/err" || {
    echo "classes: the command failed:" >&2; cat "$tmp/err" >&2; exit 1; }
  if grep -q '^flatmalloc:' "$tmp/err"; then cat "$tmp/err" >&2; exit 1; fi
  cat "$tmp/time"
}

cmd=("$@")
envrun() { run "$@" "${cmd[@]}"; }

echo "== profile: ${cmd[*]} =="
read -r s m < <(envrun FLATMALLOC_PROFILE="$tmp/p")
echo "profiling run: $s s, peak RSS $m kB, $(ls "$tmp" | grep -c '^p\.') process file(s)"
[ -n "$name" ] || name=$(basename "${cmd[-1]}" | tr -c 'A-Za-z0-9\n' _)
classes --png "$top/bench/plots/${name}_classes.png" "$tmp/p"
classes --no-png --class-cost 32768 "$tmp/p" | tee "$tmp/cc"
proposal=$(classes --no-png "$tmp/p" | sed -n 1p)
proposal_cc=$(sed -n 1p "$tmp/cc")
rm -f "$tmp"/p.*

echo "== $rounds rounds, alternating =="
echo "round config seconds max_rss_kb"
declare -A S M
for i in $(seq "$rounds"); do
  for cfg in default proposal proposal-cc profiling; do
    case $cfg in
      default) read -r s m < <(envrun) ;;
      proposal) read -r s m < <(envrun "$proposal") ;;
      proposal-cc) read -r s m < <(envrun "$proposal_cc") ;;
      profiling) read -r s m < <(envrun FLATMALLOC_PROFILE="$tmp/q"); rm -f "$tmp"/q.* ;;
    esac
    echo "$i $cfg $s $m"
    S[$cfg]+="$s "; M[$cfg]+="$m "
  done
done
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }
echo "== medians =="
for cfg in default proposal proposal-cc profiling; do
  # shellcheck disable=SC2086
  echo "$cfg: $(median ${S[$cfg]}) s, peak RSS $(median ${M[$cfg]}) kB"
done
