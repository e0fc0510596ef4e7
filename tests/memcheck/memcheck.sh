#!/usr/bin/env bash
# memcheck under flatmalloc: with --soname-synonyms=somalloc=nouserintercepts memcheck keeps
# flatmalloc's allocator, and flatmalloc's client requests let memcheck find the program's bugs.
set -euo pipefail
lib=$1 cases=$2
fail=0
run() {   # case, then the lines its memcheck report must contain
  local c=$1; shift
  local out
  out=$(LD_PRELOAD=$lib valgrind --soname-synonyms=somalloc=nouserintercepts --leak-check=full \
        --errors-for-leak-kinds=definite "$cases" "$c" 2>&1 || true)
  grep -q "(in [^)]*libflatmalloc.so[.0-9]*)" <<<"$out" || [ "$c" = clean ] || { echo "FAIL $c: no frame in libflatmalloc.so in the report (memcheck's own malloc ran?)"; fail=1; }
  for want in "$@"; do
    if ! grep -qF -- "$want" <<<"$out"; then
      echo "FAIL $c: memcheck output lacks: $want"
      echo "$out" | sed 's/^/    /' | head -40
      fail=1
      return
    fi
  done
  echo "ok $c"
}
run use-after-free "Invalid read of size 1" "inside a block of size 64 free'd" "ERROR SUMMARY: 1 errors"
run write-past-end "Invalid write of size 1" "0 bytes after a block of size 40 alloc'd" "ERROR SUMMARY: 1 errors"
run leak "1,234 bytes in 1 blocks are definitely lost" "definitely lost: 1,234 bytes in 1 blocks"
run invalid-free "Invalid free()" "ERROR SUMMARY: 1 errors"
run clean "clean done" "ERROR SUMMARY: 0 errors" "All heap blocks were freed"
exit $fail
