#!/usr/bin/env bash
# The README is a user's page (suite 'readme').
#
# usage: readme.sh PATH/TO/README.md PATH/TO/src/options.c
#
# Checked: the settings table has one row for each setting of the options table in
# src/options.c (its {"FLATMALLOC_...", ...} rows) and no other, in the same order; the page is
# at most 250 lines (400 before the guides moved to docs/); the two commands (`scripts/flatmalloc
# run -- CMD` and `scripts/test`) and the settings table appear within its first 80 lines, the
# guarantees before the commands; every docs/ page and man page the README links exists, and
# every docs/*.md is linked from it; bench/README.md (beside it) is at most 400 lines, and every
# bench/results/*.md file is listed in bench/results/README.md.
set -euo pipefail
export LC_ALL=C
readme=${1:?README.md}
options=${2:?src/options.c}
fail() { echo "FAIL: $*" >&2; exit 1; }

code=$(grep -oE '^ *\{"FLATMALLOC_[A-Z_]+"' "$options" | grep -oE 'FLATMALLOC_[A-Z_]+')
table=$(sed -n '/^| variable | default | meaning/,/^$/p' "$readme" | grep -oE '^\| `FLATMALLOC_[A-Z_]+`' | grep -oE 'FLATMALLOC_[A-Z_]+')
[ -n "$code" ] || fail "no settings found in $options"
[ -n "$table" ] || fail "no settings table (| variable | default | meaning ...) in $readme"
if [ "$code" != "$table" ]; then
  diff <(echo "$code") <(echo "$table") >&2 || true
  fail "the README's settings table (right) differs from the options table of src/options.c (left)"
fi
echo "  ok: the settings table has the $(echo "$code" | wc -l) settings of src/options.c, in order"

lines=$(wc -l <"$readme")
[ "$lines" -le 250 ] || fail "the README has $lines lines, more than 250"
echo "  ok: $lines lines"

first() {   # first line number of a fixed string, or 9999
  local n
  n=$(grep -nF -- "$1" "$readme" | head -n 1 | cut -d: -f1) || true
  echo "${n:-9999}"
}
run=$(first '    scripts/flatmalloc run -- CMD')
tst=$(first '    scripts/test')
tab=$(first '| variable | default | meaning')
guar=$(first '## What flatmalloc guarantees')
for v in run tst tab; do
  [ "${!v}" -le 80 ] || fail "$v is on line ${!v}, not within the first 80 lines"
done
[ "$guar" -lt "$run" ] || fail "the guarantees do not come before the commands"
echo "  ok: guarantees on line $guar, commands on lines $run and $tst, settings table on line $tab"

# ------------------------------------------------------------------ the guides and man pages
top=$(cd "$(dirname "$readme")" && pwd)
links=$(grep -oE '\]\((docs|man)/[^)#]*' "$readme" | sed 's/^](//' | sort -u)
n=0
for l in $links; do
  [ -e "$top/$l" ] || fail "the README links $l, which does not exist"
  n=$((n + 1))
done
for m in man/flatmalloc.1 man/flatmalloc.3; do
  grep -qF "]($m)" "$readme" || fail "the README does not link $m"
done
for f in "$top"/docs/*.md; do
  rel=docs/${f##*/}
  grep -qF "]($rel)" "$readme" || fail "the README does not link $rel"
done
echo "  ok: the $n docs/ and man/ pages the README links exist; every docs/*.md is linked"

bench=$top/bench/README.md
blines=$(wc -l <"$bench")
[ "$blines" -le 400 ] || fail "bench/README.md has $blines lines, more than 400"
for f in "$top"/bench/results/*.md; do
  b=${f##*/}
  [ "$b" = README.md ] && continue
  grep -qF "]($b)" "$top/bench/results/README.md" || fail "bench/results/README.md does not list $b"
done
echo "  ok: bench/README.md has $blines lines; bench/results/README.md lists every run"
echo "readme: all checks passed"
