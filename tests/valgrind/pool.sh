#!/usr/bin/env bash
# The pool under memcheck (issue 45): what memcheck's reports show of it, each case beside
# glibc's run of the same program (the tool's own allocator). Runs valgrind itself; every check
# can fail and none is skipped. Valgrind's memcheck tests whose shapes these are: badfree,
# big_blocks_freed_list, leak-cases-full (memcheck/tests in Valgrind's source).
#   pool.sh LIB STRAY ARENALEAK MALLOCLEAK MIDLEAK ORIGINS
set -uo pipefail
lib=$1 stray=$2 arenaleak=$3 mallocleak=$4 midleak=$5 origins=$6
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
# the errors: each one's first line, its stacks (frames by name) and the address's description
errs() { grep -E "^==[0-9]*== (Invalid|Conditional| Address| Block| Uninitialised|   (at|by) 0x)|ERROR SUMMARY" \
  | sed -E 's/^==[0-9]*==//; s/0x[0-9A-Fa-f]+//g; s/ \((vg_replace_malloc\.c:[0-9]+|in [^)]*)\)$//'; }
vol=(--freelist-vol=1000000 --freelist-big-blocks=50000)

# ---- addresses that are no block ---------------------------------------------------------------
# a bogus pointer (32-bit garbage) is never inside the pool: memcheck finds nothing there
want=$(gl "$stray" badfree | errs) got=$(fm "$stray" badfree | errs)
if grep -q "is not stack'd, malloc'd or (recently) free'd" <<<"$got" && [ "$want" = "$got" ]; then
  ok "memcheck: free(0x87654321) and free of a stack array reported as with glibc"
else bad "memcheck badfree" "glibc:" "$want" "flatmalloc:" "$got"; fi
# inside the pool, an address no block holds (past a block's red zone, or of a block already
# handed back) is "inside an unallocated block" of memcheck's heap, as glibc's run describes its
# unallocated memory there (the offset and size are the pool's, not those of glibc's heap); every
# other line is as with glibc's. Beside: an overrun past an arena allocation into its slab's part
# not handed out, against the same program with malloc in the arena's place.
unalloc='is [0-9,]+ bytes (before|after|inside) an unallocated block of size [0-9,]+ in arena "client"'
norm() { sed -E "s/$unalloc/is in an unallocated block of memcheck's heap/"; }
for c in big-blocks shrink overrun; do
  if [ $c = overrun ]; then
    graw=$(gl "$mallocleak" overrun | errs) raw=$(fm "$arenaleak" overrun | errs)
  else
    graw=$(gl "${vol[@]}" "$stray" "$c" | errs) raw=$(fm "${vol[@]}" "$stray" "$c" | errs)
  fi
  if [ -n "$graw" ] && [ "$(norm <<<"$graw")" = "$(norm <<<"$raw")" ] && grep -qE "Address +is [0-9,]+ bytes inside an unallocated block of size [0-9,]+ in arena" <<<"$raw" \
     && ! grep -qE "bytes (before|after|inside) a block of size [0-9,]+ in arena" <<<"$raw"; then
    ok "memcheck $c: as with glibc, the address past any block in an unallocated block of memcheck's heap ($(grep -oE "$unalloc" <<<"$raw" | head -1))"
  else bad "memcheck $c" "glibc:" "$graw" "flatmalloc:" "$raw"; fi
done

# Valgrind's walks of its heap (--sanity-level=2 and more, --stats=yes) assert on a heap block
# of 4 GiB or more and would find the marked block on no free list: with them the pool is 2 GiB
# and its block keeps its mark ("inside a block"), and the run completes
for o in --sanity-level=2 --stats=yes; do
  raw=$(fm "$o" "$stray" shrink) d=$(errs <<<"$raw")
  size=$(sed -nE 's/.*inside a block of size ([0-9,]+) in arena "client"$/\1/p' <<<"$d" | tr -d ,)
  if grep -q "stray done" <<<"$raw" && ! grep -qiE "assert|panic" <<<"$raw" && grep -q "ERROR SUMMARY: 1 errors" <<<"$d" \
     && [ -n "$size" ] && [ "$size" -lt $((4 << 30)) ]; then
    ok "memcheck $o: completes, the pool's block of $size bytes (under 4 GiB) unmarked"
  else bad "memcheck $o" "$raw"; fi
done
# there memcheck keeps the pool's block, shrunk to one byte, until exit: a mid-run check counts
# it as still reachable
want=$(gl "$midleak" | grep -E "^[a-z]+ reachable:") got=$(fm --sanity-level=2 "$midleak" | grep -E "^[a-z]+ reachable:")
plus=$(awk '{ print $1, $2, $3 + 1 }' <<<"$want")
if [ -n "$want" ] && [ "$plus" = "$got" ]; then ok "memcheck --sanity-level=2 mid-run checks: still reachable is glibc's + 1 byte (the pool's block): ${got//$'\n'/, }"
else bad "memcheck --sanity-level=2 mid-run reachable" "glibc:" "$want" "flatmalloc:" "$got"; fi

# the new headers go before the pool's first page: with a red zone of 985 bytes or more they do
# not fit, and the pool's block stays as with the options above; with 984 they do
for rz in 984 985; do
  got=$(fm --redzone-size=$rz "$midleak" | grep -E "^single reachable:")
  if { [ $rz = 984 ] && [ "$got" = "single reachable: 0" ]; } || { [ $rz = 985 ] && [ "$got" = "single reachable: 1" ]; }; then
    ok "memcheck --redzone-size=$rz: the pool's block $([ $rz = 984 ] && echo split || echo kept) ($got)"
  else bad "memcheck --redzone-size=$rz" "$got"; fi
done

# ---- leak checks ------------------------------------------------------------------------------
# mid-run: still reachable as with glibc (memcheck forgot the pool's own block of its heap)
want=$(gl "$midleak" | grep -E "^[a-z]+ reachable:") got=$(fm "$midleak" | grep -E "^[a-z]+ reachable:")
if [ -n "$want" ] && [ "$want" = "$got" ]; then ok "memcheck mid-run checks: still reachable as with glibc: ${got//$'\n'/, }"
else bad "memcheck mid-run reachable" "glibc:" "$want" "flatmalloc:" "$got"; fi

# Valgrind's leak-cases-full shape in mid-run: VALGRIND_DO_QUICK_LEAK_CHECK, then a full check
# with its loss records, then the counts (bytes and blocks), then the check at exit: every
# summary, loss record (kind, bytes, blocks, number) and count as glibc's
leakrec() { grep -E "are (definitely|indirectly|possibly) lost in loss record|^==[0-9]+== +(definitely lost|indirectly lost|possibly lost|still reachable|suppressed):|^(bytes|blocks):|ERROR SUMMARY" | sed -E 's/^==[0-9]*==//'; }
want=$(gl --leak-check=full "$midleak" records | leakrec) got=$(fm --leak-check=full "$midleak" records | leakrec)
if [ "$(grep -c "in loss record" <<<"$want")" = 8 ] && [ "$(grep -c "still reachable:" <<<"$want")" = 3 ] && [ "$want" = "$got" ]; then
  ok "memcheck quick then full leak check in mid-run, and at exit, as with glibc: $(grep -E '^(bytes|blocks):' <<<"$got" | tr '\n' ';')"
else bad "memcheck mid-run loss records" "glibc:" "$want" "flatmalloc:" "$got"; fi

# an arena never destroyed (the program links flatmalloc) against the program built with malloc
# in its place: the ten allocations are one loss record as the ten mallocs, the arena's own
# state one definitely lost block allocated by flatmalloc_arena_create, whether or not another
# block is live at exit
records() { grep -E "are definitely lost|definitely lost:|still reachable:|ERROR SUMMARY" | sed -E 's/^==[0-9]*==//; s/[0-9,]+ bytes in 1 blocks are/N bytes in 1 blocks are/; s/lost: [0-9,]+ bytes/lost: N bytes/'; }
for other in "" other; do
  want=$(gl --leak-check=full "$mallocleak" $other | records)
  out=$(fm --leak-check=full "$arenaleak" $other) got=$(records <<<"$out")
  if grep -q "400 bytes in 10 blocks are definitely lost" <<<"$got" && [ "$want" = "$got" ] \
     && grep -A3 "in 1 blocks are definitely lost" <<<"$out" | grep -q "by 0x[0-9A-F]*: leak_arena (arenaleak.c:"; then
    ok "memcheck: a leaked arena${other:+ beside a live block} reported as the same program with malloc (${got//$'\n'/; })"
  else bad "memcheck leaked arena${other:+ beside a live block}" "malloc, glibc:" "$want" "arena, flatmalloc:" "$out"; fi
done

# ---- --track-origins=yes ------------------------------------------------------------------------
# 200 MiB of blocks, past the default pool there (64 MiB): memcheck's heap serves the rest, the
# program's output and the origin as with glibc, peak memory within 2x
out=$( { /usr/bin/time -f "maxrss %M" env LD_PRELOAD="$lib" valgrind "${keep[@]}" --track-origins=yes "$origins" big; } 2>&1)
gout=$( { /usr/bin/time -f "maxrss %M" valgrind --track-origins=yes "$origins" big; } 2>&1)
rss=$(sed -n 's/^maxrss \([0-9]*\)$/\1/p' <<<"$out") grss=$(sed -n 's/^maxrss \([0-9]*\)$/\1/p' <<<"$gout")
want=$(grep -E "^origins:" <<<"$gout"; errs <<<"$gout") got=$(grep -E "^origins:" <<<"$out"; errs <<<"$out")
if grep -q "origins: 200 MiB allocated" <<<"$got" && [ "$want" = "$got" ] && grep -q "created by a heap allocation" <<<"$out" \
   && [ -n "$rss" ] && [ -n "$grss" ] && [ "$rss" -le $((2 * grss)) ]; then
  ok "memcheck --track-origins=yes: 200 MiB allocated, report as with glibc, peak $((rss / 1024)) MB (glibc $((grss / 1024)) MB)"
else bad "memcheck --track-origins=yes, 200 MiB (peak ${rss:-?} KB, glibc ${grss:-?} KB)" "glibc:" "$want" "flatmalloc:" "$out"; fi
exit $fail
