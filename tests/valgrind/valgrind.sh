#!/usr/bin/env bash
# Valgrind's tools on flatmalloc's heap, each compared with the same tool on glibc's heap (the
# tool's own allocator) or checked for the exact report. Runs valgrind itself; every check can
# fail and none is skipped.
#   valgrind.sh LIB LEAKS UAF CXX THREADS HEAP CANARY STASH RACE FISHY MIDLEAK ORIGINS
set -uo pipefail
lib=$1 leaks=$2 uaf=$3 cxx=$4 threads=$5 heap=$6 canary=$7 stash=$8 race=$9 fishy=${10} midleak=${11} origins=${12}
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

# ---- memcheck: leak kinds, suppressions, stacks ---------------------------------------------
want=$(gl --leak-check=full "$leaks" | summary)
got=$(fm --leak-check=full "$leaks" | summary)
if [ -n "$want" ] && [ "$want" = "$got" ] && grep -q "indirectly lost: [1-9]" <<<"$got"; then ok "memcheck leak kinds (tree, list, cycle) as with glibc"
else bad "memcheck leak kinds" "glibc:" "$want" "flatmalloc:" "$got"; fi

cat >"$work/supp" <<'SUPP'
{
   lost-in-main
   Memcheck:Leak
   match-leak-kinds: definite
   fun:malloc
   fun:main
}
SUPP
want=$(gl --leak-check=full --suppressions="$work/supp" "$leaks" | summary)
out=$(fm --leak-check=full --suppressions="$work/supp" "$leaks")
got=$(summary <<<"$out")
if [ "$want" = "$got" ] && grep -q "suppressed: [1-9]" <<<"$got" \
   && grep -qE "at 0x[0-9A-F]+: malloc \(in [^)]*libflatmalloc\.so[.0-9]*\)" <<<"$out"; then ok "memcheck suppression {fun:malloc, fun:main} matches"
else bad "memcheck suppression" "glibc:" "$want" "flatmalloc:" "$out"; fi

# leak checks in the middle of the run count as glibc's run does (a cycle, then a tree)
want=$(gl "$midleak" | grep -E "^(single|cycle|tree):") got=$(fm "$midleak" | grep -E "^(single|cycle|tree):")
if [ -n "$want" ] && [ "$want" = "$got" ] && grep -q "cycle: leaked [1-9]" <<<"$got"; then ok "memcheck mid-run leak checks as with glibc: ${got//$'\n'/, }"
else bad "memcheck mid-run leak checks" "glibc:" "$want" "flatmalloc:" "$got"; fi
got=$(fm "$midleak" registers | grep "^registers:")   # glibc's memcheck leaves one: not compared
if [ "$got" = "registers: 0 copies" ]; then ok "memcheck: malloc leaves no copy of the block's pointer in a scratch register"
else bad "memcheck: pointer copies left in registers" "$got"; fi

# --track-origins=yes on a 64-byte program: the origin is the heap block, and memcheck's peak
# resident memory stays within 2x glibc's run (the pool's default ceiling is 64 MiB there)
out=$( { /usr/bin/time -f "maxrss %M" env LD_PRELOAD="$lib" valgrind "${keep[@]}" --track-origins=yes "$origins"; } 2>&1)
rss=$(sed -n 's/^maxrss \([0-9]*\)$/\1/p' <<<"$out")
grss=$( { /usr/bin/time -f "maxrss %M" valgrind --track-origins=yes "$origins"; } 2>&1 | sed -n 's/^maxrss \([0-9]*\)$/\1/p')
if grep -A2 "Uninitialised value was created by a heap allocation" <<<"$out" | grep -q "main (origins.c:" \
   && [ -n "$rss" ] && [ -n "$grss" ] && [ "$rss" -le $((2 * grss)) ]; then ok "memcheck --track-origins=yes: heap origin named, peak $((rss / 1024)) MB (glibc $((grss / 1024)) MB)"
else bad "memcheck --track-origins=yes (peak ${rss:-?} KB, glibc ${grss:-?} KB)" "$out"; fi

# ---- memcheck: use after free while the block is held back ------------------------------------
out=$(fm "$uaf")
if grep -q "Invalid read of size 1" <<<"$out" && grep -q "10 bytes inside a block of size 64 free'd" <<<"$out" \
   && grep -q "ERROR SUMMARY: 1 errors" <<<"$out"; then ok "memcheck use after free after 100 more mallocs"
else bad "memcheck use after free" "$out"; fi
out=$(fm --freelist-vol=0 "$uaf")   # glibc's memcheck reuses the block at once too: no error
if grep -q "uaf done" <<<"$out" && grep -q "ERROR SUMMARY: 0 errors" <<<"$out"; then ok "memcheck --freelist-vol honoured"
else bad "memcheck --freelist-vol=0" "$out"; fi

# frees are queued under memcheck (check.c, "deferred releases"); memcheck still sees each mistake
uaf_case() {   # case, the error's first line, the line of uaf.c it must point at
  local out
  out=$(fm "$uaf" "$1")
  if grep -qF "$2" <<<"$out" && grep -A2 -F "$2" <<<"$out" | grep -q "main (uaf.c:$3)" \
     && grep -q "uaf done" <<<"$out" && grep -q "ERROR SUMMARY: 1 errors" <<<"$out"; then ok "memcheck $1"
  else bad "memcheck $1" "$out"; fi
}
uaf_case after-flush "Invalid read of size 1" 28
uaf_case double-free "Invalid free()" 34
uaf_case double-free-later "Invalid free()" 34
uaf_case realloc-after-free "Invalid free()" 39

# ---- memcheck: C++ new and delete served by flatmalloc ----------------------------------------
out=$(fm --leak-check=full --errors-for-leak-kinds=definite "$cxx")
if grep -qE "at 0x[0-9A-F]+: operator new\[\]\(unsigned long\) \(in [^)]*libflatmalloc\.so[.0-9]*\)" <<<"$out" \
   && grep -q "100 bytes in 1 blocks are definitely lost" <<<"$out" && grep -q "cxx done" <<<"$out" \
   && grep -q "ERROR SUMMARY: 1 errors" <<<"$out"; then ok "memcheck C++ operators are flatmalloc's"
else bad "memcheck C++" "$out"; fi

# a release through the wrong family is memcheck's own error, as with glibc: the same report
# (frames by name; the allocating one is flatmalloc's), counted, --error-exitcode fires, and the
# README's suppression matches it
frames_of() {   # the lines of the first report starting with $1, addresses and places left out
  grep -A6 -F "$1" | sed -n '1,/^==[0-9]*== *$/p' | sed -E 's/^==[0-9]*==//; s/0x[0-9A-Fa-f]+//g; s/ \((vg_replace_malloc\.c:[0-9]+|in [^)]*)\)$//'
}
for c in 'free-of-new[]' 'delete-of-malloc' 'delete[]-of-new' 'delete-of-new[]' 'realloc-of-new[]'; do
  want=$(gl "$cxx" "$c" | frames_of "Mismatched free()")
  out=$(fm --error-exitcode=9 "$cxx" "$c"); rc=$?
  got=$(frames_of "Mismatched free()" <<<"$out")
  # glibc's sized delete names itself; flatmalloc hands every delete to the unsized one
  want=${want//operator delete(void\*, unsigned long)/operator delete(void\*)}
  if [ -n "$want" ] && [ "$want" = "$got" ] && [ $rc -eq 9 ] && grep -q "ERROR SUMMARY: 1 errors" <<<"$out"; then ok "memcheck mismatch $c: memcheck's error, as with glibc, exit 9"
  else bad "memcheck mismatch $c (rc $rc)" "glibc:" "$want" "flatmalloc:" "$out"; fi
done
cat >"$work/mismatch.supp" <<'SUPP'
{
   free-of-new-array
   Memcheck:Free
   fun:free
   fun:main
}
SUPP
out=$(fm --error-exitcode=9 --suppressions="$work/mismatch.supp" "$cxx" 'free-of-new[]'); rc=$?
if [ $rc -eq 0 ] && grep -q "ERROR SUMMARY: 0 errors from 0 contexts (suppressed: 1 from 1)" <<<"$out"; then ok "memcheck mismatch: {Memcheck:Free, fun:free, fun:main} suppresses it"
else bad "memcheck mismatch suppression (rc $rc)" "$out"; fi

# fishy (negative) sizes: each call fails, and memcheck reports each as with glibc
fishy_report() { grep -E "fishy|^==[0-9]*== +(at|by) 0x" | sed -E 's/^==[0-9]*==//; s/0x[0-9A-Fa-f]+//g; s/ \((vg_replace_malloc\.c:[0-9]+|in [^)]*)\)$//'; }
gout=$(gl "$fishy") fout=$(fm --error-exitcode=9 "$fishy"); rc=$?
want=$(fishy_report <<<"$gout") got=$(fishy_report <<<"$fout")
if grep -q "fishy: 6 of 6 failed" <<<"$fout" && [ -n "$want" ] && [ "$want" = "$got" ] && [ $rc -eq 9 ] \
   && [ "$(grep -o 'ERROR SUMMARY: [0-9]* errors' <<<"$gout")" = "$(grep -o 'ERROR SUMMARY: [0-9]* errors' <<<"$fout")" ]; then
  ok "memcheck fishy sizes (malloc, calloc(0, -1), calloc(-1, 1), realloc, memalign, posix_memalign) as with glibc"
else bad "memcheck fishy sizes (rc $rc)" "glibc:" "$want" "flatmalloc:" "$fout"; fi

# realloc(NULL, n) and reallocarray(NULL, ...) are malloc to the tool, and posix_memalign calls
# memalign, as with glibc
leak_frames() { grep -A3 "definitely lost in" | grep -E "(at|by) 0x" | sed -E 's/^==[0-9]*==//; s/0x[0-9A-Fa-f]+//g; s/ \((vg_replace_malloc\.c:[0-9]+|in [^)]*)\)$//'; }
want=$(gl --leak-check=full "$fishy" realloc-null | leak_frames) got=$(fm --leak-check=full "$fishy" realloc-null | leak_frames)
if [ -n "$want" ] && [ "$want" = "$got" ]; then ok "memcheck: realloc(NULL, n), reallocarray(NULL, ...) start at malloc, posix_memalign at memalign, as with glibc"
else bad "memcheck realloc(NULL)" "glibc:" "$want" "flatmalloc:" "$got"; fi

# ---- memcheck: threads, while another thread holds the allocator's locks ---------------------
out=$(fm "$threads" trim)
if grep -q "threads done" <<<"$out" && grep -q "ERROR SUMMARY: 0 errors" <<<"$out"; then ok "memcheck: threads beside malloc_trim and mallinfo2"
else bad "memcheck threads trim" "$out"; fi

# ---- memcheck: sizes and counts exact while malloc takes blocks from the stash ------------------
out=$(fm "$stash")   # and its forked child: both summaries must say 0 errors
if grep -q "stash done" <<<"$out" && [ "$(grep -c "ERROR SUMMARY: 0 errors" <<<"$out")" = 2 ] \
   && ! grep -qE "ERROR SUMMARY: [1-9]" <<<"$out"; then
  ok "memcheck: usable sizes, realloc, other threads, mallinfo2, fork and thread exit beside the stash"
else bad "memcheck stash" "$out"; fi
out=$(FLATMALLOC_POOL=64M fm "$stash" exhaust)
if grep -q "stash done" <<<"$out" && grep -q "ERROR SUMMARY: 0 errors" <<<"$out"; then ok "memcheck: a 64M pool exhausted through the stash gives ENOMEM, then serves again after frees"
else bad "memcheck stash exhaust" "$out"; fi

# ---- checking mode: the wrong release function --------------------------------------------------
check_line() {   # case, then the fault's text
  local out rc
  out=$(FLATMALLOC_CHECK=1 LD_PRELOAD=$lib "$cxx" "$1" 2>&1); rc=$?
  if [ $rc -eq 134 ] && grep -qxE "flatmalloc: $2: pointer 0x[0-9a-f]+ \(class [0-9]+, [0-9]+ bytes\)" <<<"$out" \
     && [ "$(wc -l <<<"$out")" -eq 1 ]; then ok "checking mode: $1"
  else bad "checking mode: $1 (rc $rc)" "$out"; fi
}
check_line 'free-of-new[]' 'free of a block allocated by new\[\]'
check_line 'delete-of-malloc' 'delete of a block allocated by malloc'
check_line 'delete[]-of-new' 'delete\[\] of a block allocated by new'
check_line 'delete-of-new[]' 'delete of a block allocated by new\[\]'
out=$(FLATMALLOC_CHECK=1 LD_PRELOAD=$lib "$cxx" 2>&1)
if [ "$out" = "cxx done" ]; then ok "checking mode: every operator pair"; else bad "checking mode: operators" "$out"; fi

# ---- C++ out of memory: nothrow gives NULL, new calls the new_handler, then throws bad_alloc ----
for mode in 0 1; do
  out=$(FLATMALLOC_CHECK=$mode FLATMALLOC_POOL=256M LD_PRELOAD=$lib "$cxx" out-of-memory 2>&1)
  if [ "$out" = $'nothrow: NULL\nbad_alloc\nbad_alloc after 3 new_handler calls' ]; then ok "C++ out of memory (FLATMALLOC_CHECK=$mode)"
  else bad "C++ out of memory (FLATMALLOC_CHECK=$mode)" "$out"; fi
done

# ---- checking mode: the canary ------------------------------------------------------------------
out=$(FLATMALLOC_CHECK=1 LD_PRELOAD=$lib "$canary" 2>&1)
if grep -qx "canary: 0 of 1024 missed" <<<"$out"; then ok "checking mode: p[n] = 0 caught for n = 1..1024"
else bad "checking mode: canary" "$out"; fi
a=$(FLATMALLOC_CHECK=1 LD_PRELOAD=$lib "$canary" show) b=$(FLATMALLOC_CHECK=1 LD_PRELOAD=$lib "$canary" show)
if [ -n "$a" ] && [ "$a" != "$b" ]; then ok "checking mode: canary keyed per process ($a, $b)"
else bad "checking mode: canary is the same in two processes" "$a" "$b"; fi

# ---- helgrind and drd ---------------------------------------------------------------------------
for tool in helgrind drd; do
  out=$(fm --tool=$tool "$threads")
  if grep -q "threads done" <<<"$out" && grep -q "ERROR SUMMARY: 0 errors" <<<"$out"; then ok "$tool: clean threaded program, 0 errors"
  else bad "$tool clean" "$out"; fi
  out=$(fm --tool=$tool "$threads" race)
  if grep -q "threads done" <<<"$out" && grep -qE "Possible data race|Conflicting (load|store)" <<<"$out" \
     && grep -qE "ERROR SUMMARY: [1-9]" <<<"$out"; then ok "$tool: planted race reported"
  else bad "$tool race" "$out"; fi
done

# the allocator orders no two threads: a race masked by a malloc/free pair after it is reported
# in every run, as many times as with glibc, and a racy heap word is described as a heap block
errors() { sed -n 's/.*ERROR SUMMARY: \([0-9]*\) errors.*/\1/p'; }
for tool in helgrind drd; do
  for mode in counter heap; do
    want=$(gl --tool=$tool "$race" $mode | errors) runs=""
    for run in 1 2 3; do runs+=" $(fm --tool=$tool "$race" $mode | errors)"; done
    if [ -n "$want" ] && [ "$want" -gt 0 ] && [ "$runs" = " $want $want $want" ]; then ok "$tool: masked race ($mode) reported in 3 of 3 runs, $want errors as with glibc"
    else bad "$tool masked race ($mode)" "glibc: $want errors, flatmalloc's runs:$runs"; fi
  done
  out=$(fm --tool=$tool "$race" clean)
  if grep -q "race done" <<<"$out" && grep -q "ERROR SUMMARY: 0 errors" <<<"$out"; then ok "$tool: 8 threads reusing each other's blocks, 0 errors"
  else bad "$tool clean 8 threads" "$out"; fi
done
out=$(fm --tool=helgrind "$race" heap)
if grep -A2 "Address 0x[0-9a-f]* is 0 bytes inside a block of size 8 alloc'd" <<<"$out" | grep -q "main (race.c:"; then ok "helgrind: the racy word is described as a heap block with its allocation stack"
else bad "helgrind heap block description" "$out"; fi
out=$(fm --tool=drd "$race" heap)
if grep -A2 "Allocation context:" <<<"$out" | grep -q "main (race.c:"; then ok "drd: the racy word is described as a heap block with its allocation stack"
else bad "drd heap block description" "$out"; fi

# ---- massif and DHAT ----------------------------------------------------------------------------
peak() { grep mem_heap_B= "$1" | sed 's/mem_heap_B=//' | sort -n | tail -1; }
gl --tool=massif --massif-out-file="$work/ms.glibc" "$heap" >/dev/null
fm --tool=massif --massif-out-file="$work/ms.fm" "$heap" >/dev/null
pg=$(peak "$work/ms.glibc") pf=$(peak "$work/ms.fm")
if [ -n "$pg" ] && [ -n "$pf" ] && [ "$pg" -gt 0 ] && [ $((pf * 100 / pg)) -ge 98 ] && [ $((pf * 100 / pg)) -le 102 ] \
   && grep -q "main (heap.c" "$work/ms.fm"; then ok "massif peak $pf B (glibc $pg B)"
else bad "massif peak" "flatmalloc $pf, glibc $pg"; fi
want=$(gl --tool=dhat --dhat-out-file="$work/dh.glibc" "$heap" | grep -E "Total:|t-gmax:" | sed 's/^==[0-9]*==//')
got=$(fm --tool=dhat --dhat-out-file="$work/dh.fm" "$heap" | grep -E "Total:|t-gmax:" | sed 's/^==[0-9]*==//')
# the call sites: the frame tables are equal, frame by frame and in order (with Valgrind's debug
# information installed DHAT leaves its own malloc out of both). A frame without a source line
# (DHAT's malloc in its preload library) is compared by function and object, not by address:
# the tool's replacement is entered at another instruction when flatmalloc hands it the call.
frames() { sed -n '/"ftbl"/,$p' "$1" | sed -E 's/"0x[0-9A-Fa-f]+: ([^"]* \(in [^)"]*\))"/"\1"/'; }
if [ -n "$want" ] && [ "$want" = "$got" ] && grep -q '"0x[0-9A-F]*: main (heap.c' "$work/dh.fm" \
   && [ "$(frames "$work/dh.glibc")" = "$(frames "$work/dh.fm")" ] && ! grep -q "libflatmalloc" "$work/dh.fm"; then
  ok "DHAT totals and call sites as with glibc"
else bad "DHAT" "glibc:" "$want" "$(frames "$work/dh.glibc")" "flatmalloc:" "$got" "$(frames "$work/dh.fm")"; fi
exit $fail
