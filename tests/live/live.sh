#!/usr/bin/env bash
# tests/live/live.sh HELD LIBLIVE LIBFLATMALLOC: bench/live.c's count of the bytes held against a
# program whose peak is known (held.cc: 4 MiB of 1 KiB blocks from new[] in two threads that
# delete each other's, between two phases of 2 MiB from malloc), with glibc and in front of
# flatmalloc, whose 1 KiB class holds exactly 1 KiB; both with libstdc++'s blocks (72 KiB).
set -u
held=$1 live=$2 flat=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
run() { # run NAME LD_PRELOAD LOW HIGH (KiB)
  rm -f "$tmp/out"
  if ! LD_PRELOAD=$2 LIVE_OUT=$tmp/out "$held"; then
    echo "FAIL: $1: the program failed"; fail=1; return
  fi
  local kb
  kb=$(awk '$1 == "live_peak_kb" { print $2 }' "$tmp/out" 2>/dev/null)
  if [ -z "$kb" ] || [ "$(wc -l <"$tmp/out")" != 1 ]; then
    echo "FAIL: $1: expected one line 'live_peak_kb N' in LIVE_OUT, got: $(cat "$tmp/out" 2>/dev/null)"; fail=1
  elif [ "$kb" -lt "$3" ] || [ "$kb" -gt "$4" ]; then
    echo "FAIL: $1: peak held $kb KiB, expected $3 to $4"; fail=1
  else
    echo "  ok: $1: peak held $kb KiB ($3 to $4)"
  fi
}
run glibc "$live" 4096 4352             # 1,032 usable bytes a block at most
run flatmalloc "$live:$flat" 4096 4224  # 4 MiB exactly, and the program's other blocks
exit $fail
