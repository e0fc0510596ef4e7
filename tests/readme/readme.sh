#!/usr/bin/env bash
# The README is a user's page (suite 'readme').
#
# usage: readme.sh PATH/TO/README.md PATH/TO/src/options.c
#
# Checked: the settings table has one row for each setting of the options table in
# src/options.c (its {"FLATMALLOC_...", ...} rows) and no other, in the same order; the page is
# at most 400 lines (350 before the arena API and the thread layer's paragraphs); the two
# commands (`scripts/flatmalloc run -- CMD` and `scripts/test`) and the settings table appear
# within its first 80 lines, the guarantees before the commands.
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
[ "$lines" -le 400 ] || fail "the README has $lines lines, more than 400"
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
echo "readme: all checks passed"
