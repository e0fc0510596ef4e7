#!/usr/bin/env bash
# Arenas under memcheck (the program links libflatmalloc.so): each case's report must name the
# error as with a block, and the clean program must have none.
set -euo pipefail
cases=$1
fail=0
run() {   # case, then the lines its memcheck report must contain
  local c=$1; shift
  local out
  out=$(valgrind --soname-synonyms=somalloc=nouserintercepts --leak-check=full "$cases" "$c" 2>&1 || true)
  for want in "$@"; do
    if ! grep -qF -- "$want" <<<"$out"; then
      echo "FAIL arena $c: memcheck output lacks: $want"
      echo "$out" | sed 's/^/    /' | head -40
      fail=1
      return
    fi
  done
  echo "ok arena $c"
}
run read-after-reset "Invalid read of size 1" "main (arena_cases.c:" "ERROR SUMMARY: 1 errors"
run overrun "Invalid write of size 1" "0 bytes after a block of size 48" "ERROR SUMMARY: 1 errors"
run undefined "Conditional jump or move depends on uninitialised value(s)" "ERROR SUMMARY: 1 errors"
run clean "clean done" "ERROR SUMMARY: 0 errors"
exit $fail
