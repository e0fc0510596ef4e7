#!/usr/bin/env bash
# The last differences from glibc's run (issue 30): each case of same.c under a Valgrind tool,
# on flatmalloc's heap and on glibc's (the tool's own allocator), must give the same report.
#   same.sh LIB SAME
set -uo pipefail
lib=$1 same=$2
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
errors() { grep -o 'ERROR SUMMARY: [0-9]* errors from [0-9]* contexts'; }
# the stacks of the loss records, frames by name: addresses and the allocators' places left out
records() { grep -A8 "lost in loss record" | grep -E "lost in loss record|(at|by) 0x" \
  | sed -E 's/^==[0-9]*==//; s/0x[0-9A-Fa-f]+//g; s/ \((vg_replace_malloc\.c:[0-9]+|in [^)]*)\)$//'; }

# massif: a block moved by realloc is not live twice (peak 2,000,000 bytes, not 3,000,000)
peak() { grep mem_heap_B= "$1" | sed 's/mem_heap_B=//' | sort -n | tail -1; }
gl --tool=massif --massif-out-file="$work/ms.glibc" "$same" grow >/dev/null
fm --tool=massif --massif-out-file="$work/ms.fm" "$same" grow >/dev/null
pg=$(peak "$work/ms.glibc") pf=$(peak "$work/ms.fm")
if [ -n "$pg" ] && [ "$pg" = "$pf" ]; then ok "massif: malloc(1 MB), realloc to 2 MB peaks at $pf B as with glibc"
else bad "massif realloc peak" "flatmalloc ${pf:-none}, glibc ${pg:-none}"; fi

# memcheck, leak reports compared whole: summary, error count, each loss record's stack
for c in one-site cycles shrink; do
  gout=$(gl --leak-check=full "$same" "$c") fout=$(fm --leak-check=full "$same" "$c")
  want=$(summary <<<"$gout"; errors <<<"$gout"; records <<<"$gout")
  got=$(summary <<<"$fout"; errors <<<"$fout"; records <<<"$fout")
  if grep -q "definitely lost: [1-9]" <<<"$want" && [ "$want" = "$got" ]; then ok "memcheck $c: leak summary, errors and loss records as with glibc"
  else bad "memcheck $c" "glibc:" "$want" "flatmalloc:" "$got"; fi
done

# memcheck: malloc_usable_size of a freed block, and mallinfo's counts (also natively)
for c in usable-freed mallinfo; do
  want=$(gl "$same" "$c" | grep -E "^(usable|mallinfo):") got=$(fm "$same" "$c" | grep -E "^(usable|mallinfo):")
  if [ -n "$want" ] && [ "$want" = "$got" ]; then ok "memcheck $c: $got, as with glibc"
  else bad "memcheck $c" "glibc: $want" "flatmalloc: $got"; fi
done
want=$("$same" mallinfo) got=$(LD_PRELOAD=$lib "$same" mallinfo)
if [ "$want" = "mallinfo: 0" ] && [ "$want" = "$got" ]; then ok "mallinfo's counts agree (Valgrind's mallinfo test): $got"
else bad "mallinfo" "glibc: $want" "flatmalloc: $got"; fi
exit $fail
