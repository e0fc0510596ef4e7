#!/usr/bin/env bash
# The man pages (suite 'readme').
#
# usage: man.sh SOURCE_DIR BUILD_DIR
#
# Checked: flatmalloc(1)'s ENVIRONMENT has an entry (a `.TP` tag `.BI FLATMALLOC_X=` or
# `.BR FLATMALLOC_X=`) for every setting of src/options.c's table, in the same order, and names the wrapper's four
# commands; both .TH lines name meson.build's version; `man --warnings -l` renders both pages with nothing on stderr; `meson install
# --destdir` (from the test's own build, no rebuild) installs both under PREFIX/share/man.
set -euo pipefail
export LC_ALL=C.UTF-8 MANWIDTH=80
src=${1:?SOURCE_DIR}
build=${2:?BUILD_DIR}
fail() { echo "FAIL: $*" >&2; exit 1; }
command -v man >/dev/null || fail "man is not installed (man-db; scripts/test installs it)"
unset LD_PRELOAD DESTDIR

page1=$src/man/flatmalloc.1
page3=$src/man/flatmalloc.3
code=$(grep -oE '^ *\{"FLATMALLOC_[A-Z_]+"' "$src/src/options.c" | grep -oE 'FLATMALLOC_[A-Z_]+')
inman=$(sed -n '/^\.SH ENVIRONMENT/,/^\.SH EXIT/p' "$page1" | grep -A1 '^\.TP' |
  grep -oE '^\.B[IR] FLATMALLOC_[A-Z_]+=' | grep -oE 'FLATMALLOC_[A-Z_]+')
[ -n "$code" ] || fail "no settings found in src/options.c"
if [ "$code" != "$inman" ]; then
  diff <(echo "$code") <(echo "$inman") >&2 || true
  fail "flatmalloc(1)'s ENVIRONMENT (right) differs from the options table of src/options.c (left)"
fi
echo "  ok: flatmalloc(1) lists the $(echo "$code" | wc -l) settings of src/options.c, in order"
for c in run profile heap classes; do
  grep -qE "^\.B $c\$" "$page1" || fail "flatmalloc(1) has no entry for the '$c' command"
done
echo "  ok: flatmalloc(1) describes run, profile, heap and classes"
version=$(meson introspect --projectinfo "$build" | python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
for p in "$page1" "$page3"; do
  grep -qE "^\.TH FLATMALLOC [13] [0-9-]+ \"flatmalloc $version\"" "$p" || fail "$p's .TH does not name flatmalloc $version (meson.build)"
done
echo "  ok: both pages' .TH name flatmalloc $version, meson.build's version"

tmp=$(mktemp -d /tmp/fm-man.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
for p in "$page1" "$page3"; do
  man --warnings -E UTF-8 -l "$p" >"$tmp/out" 2>"$tmp/err" || fail "man -l $p failed: $(cat "$tmp/err")"
  [ ! -s "$tmp/err" ] || { cat "$tmp/err" >&2; fail "man --warnings -l $p warns"; }
  [ "$(wc -l <"$tmp/out")" -gt 50 ] || fail "man -l $p rendered less than 50 lines"
done
echo "  ok: man --warnings -l renders both pages without a warning"

meson install -C "$build" --no-rebuild --destdir "$tmp/dest" >"$tmp/install.log" 2>&1 ||
  { tail -n 30 "$tmp/install.log" >&2; fail "meson install --destdir failed"; }
mandir=$(meson introspect --buildoptions "$build" |
  python3 -c 'import json,sys,os; o={x["name"]:x["value"] for x in json.load(sys.stdin)}; print(os.path.join(o["prefix"], o["mandir"]))')
for p in man1/flatmalloc.1 man3/flatmalloc.3; do
  f=$tmp/dest$mandir/$p
  [ -f "$f" ] || fail "meson install --destdir did not install $mandir/$p"
  cmp -s "$f" "$src/man/${p#*/}" || fail "$mandir/$p differs from man/${p#*/}"
  man --warnings -E UTF-8 -l "$f" >/dev/null 2>"$tmp/err" && [ ! -s "$tmp/err" ] || fail "the installed $p does not render cleanly"
done
echo "  ok: meson install --destdir installs flatmalloc.1 and flatmalloc.3 under $mandir"
echo "man: all checks passed"
