#!/usr/bin/env bash
# sort under flatmalloc (suite 'programs').
#
# usage: programs_sort.sh PATH/TO/libflatmalloc.so
#
# A deterministic file of over 50 MB (seeded awk) is sorted by GNU sort three ways: default
# settings, -S 100M (all in memory), and -S 8M with keys (temporary files and merges; sort runs
# threads). Under flatmalloc (FLATMALLOC_STATS=1) each output must be byte-identical to glibc's,
# and each run must print a valid statistics report (on stderr, which sort closes before exit:
# the library has to keep a descriptor of its own for the report).
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"

fm_check "generate the input (seeded awk, > 50 MB)"
data=$FM_TMP/data.txt
awk 'BEGIN {
  srand(42)
  split("alpha beta gamma delta epsilon zeta eta theta iota kappa lambda mu", w, " ")
  for (i = 0; i < 1600000; i++)
    printf "%08d %s-%d %s %.3f\n", int(rand() * 100000000), w[1 + int(rand() * 12)],
      int(rand() * 1000), w[1 + (i % 12)], rand() * 1000
}' >"$data"
size=$(wc -c <"$data")
[ "$size" -gt 50000000 ] || fm_fail "the input is only $size bytes"
fm_ok "$size bytes, $(wc -l <"$data") lines"

mkdir -p "$FM_TMP/sorttmp"
variant() {
  local name=$1
  shift
  fm_check "sort ${*:-(default settings)} (glibc, then flatmalloc)"
  fm_run "$name" glibc sort "$@" "$data"
  # the comparison means something only if glibc's run sorted every line
  sort -c "$@" "$FM_TMP/$name.glibc.out" || fm_fail "glibc's output is not sorted"
  [ "$(wc -l <"$FM_TMP/$name.glibc.out")" -eq "$(wc -l <"$data")" ] || fm_fail "glibc's sort lost lines"
  fm_run "$name" fm sort "$@" "$data"
  fm_compare_output "$name"
}
variant default
variant s100 -S 100M
variant s8keys -S 8M -T "$FM_TMP/sorttmp" --parallel=2 -k2,2 -k1,1n

# Checked after every output comparison, so a missing report does not hide a wrong output.
for name in default s100 s8keys; do
  fm_check "statistics report of sort ($name)"
  fm_stats_verify "$FM_TMP/$name.fm.err"
done

echo "programs_sort: all checks passed"
