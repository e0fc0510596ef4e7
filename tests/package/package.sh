#!/usr/bin/env bash
# The Debian packages (suite 'package').
#
# usage: package.sh SOURCE_DIR VERSION
#
# Builds the three packages with `dpkg-buildpackage -us -uc -b` in a scratch copy of the source
# (the files git tracks or would track; nothing of the source tree is written), unpacks them
# with `dpkg -x` into a scratch root (nothing is installed on the machine), and checks: the
# package version is meson.build's VERSION; lintian reports no error and no warning; the
# library's soname is libflatmalloc.so.0 and a program preloaded by that name
# (LD_LIBRARY_PATH to the root) is served by flatmalloc (its FLATMALLOC_STATS report); the
# unpacked wrapper prints the version and runs a command with the unpacked library; pkg-config
# reads the unpacked flatmalloc.pc, and a program built with its flags calls
# flatmalloc_version(); man renders the unpacked pages without a warning.
set -euo pipefail
export LC_ALL=C.UTF-8 MANWIDTH=80
src=${1:?SOURCE_DIR}
version=${2:?VERSION}
fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "  ok: $*"; }
unset LD_PRELOAD   # the packages are built and checked under the system's malloc
for t in dpkg-buildpackage dh lintian readelf pkg-config man cc; do
  command -v "$t" >/dev/null || fail "$t is not installed (scripts/test installs scripts/test-packages)"
done

tmp=$(mktemp -d /tmp/fm-package.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/src" "$tmp/root"
# the source as a clone would have it, with this checkout's uncommitted changes (outside a git
# checkout: everything but the build directories)
if git -C "$src" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  git -C "$src" ls-files -z --cached --others --exclude-standard |
    (cd "$src" && tar --null -T - --ignore-failed-read -cf - 2>/dev/null) | tar -x -C "$tmp/src"
else
  tar -C "$src" --exclude='./build*' --exclude='./obj-*' --exclude=./debian/.debhelper -cf - . | tar -x -C "$tmp/src"
fi

# ------------------------------------------------------------------ build
deb_version=$(cd "$tmp/src" && dpkg-parsechangelog -S Version)
[ "$deb_version" = "$version" ] || fail "debian/changelog's version is $deb_version, meson.build's $version"
start=$SECONDS
(cd "$tmp/src" && DEB_BUILD_OPTIONS="nocheck parallel=2" dpkg-buildpackage -us -uc -b >"$tmp/build.log" 2>&1) ||
  { tail -n 40 "$tmp/build.log" >&2; fail "dpkg-buildpackage -us -uc -b failed"; }
arch=$(dpkg-architecture -qDEB_HOST_ARCH)
multiarch=$(dpkg-architecture -qDEB_HOST_MULTIARCH)
debs=("$tmp/libflatmalloc0_${version}_$arch.deb" "$tmp/libflatmalloc-dev_${version}_$arch.deb" "$tmp/flatmalloc_${version}_all.deb")
for d in "${debs[@]}"; do [ -f "$d" ] || fail "dpkg-buildpackage made no ${d##*/} (made: $(cd "$tmp" && echo *.deb))"; done
step "dpkg-buildpackage -us -uc -b built ${debs[*]##*/} in $((SECONDS - start)) s"

lintian --fail-on error,warning "$tmp"/flatmalloc_*.changes >"$tmp/lintian.log" 2>&1 ||
  { cat "$tmp/lintian.log" >&2; fail "lintian reports errors or warnings"; }
step "lintian: no error, no warning"

for d in "${debs[@]}"; do dpkg -x "$d" "$tmp/root"; done
libdir=$tmp/root/usr/lib/$multiarch
step "unpacked into $tmp/root: $(cd "$tmp/root" && find . -type f -o -type l | sort | tr '\n' ' ')"

# ------------------------------------------------------------------ the library by its soname
soname=$(readelf -d "$libdir/libflatmalloc.so.0" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libflatmalloc.so.0 ] || fail "the library's SONAME is '$soname', not libflatmalloc.so.0"
[ "$(readlink "$libdir/libflatmalloc.so")" = libflatmalloc.so.0 ] || fail "libflatmalloc.so does not link to libflatmalloc.so.0"
step "SONAME libflatmalloc.so.0; libflatmalloc.so -> libflatmalloc.so.0 -> $(readlink "$libdir/libflatmalloc.so.0")"

served() {   # served FILE : FILE holds a statistics report in which some class handed out blocks
  grep -qE '^flatmalloc\[[0-9]+\]: class +size +in_use +peak' "$1" &&
    awk '/^flatmalloc\[[0-9]+\]: +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ / && $5 > 0 { ok = 1 } END { exit !ok }' "$1"
}
seq 20000 | LD_LIBRARY_PATH=$libdir LD_PRELOAD=libflatmalloc.so.0 FLATMALLOC_STATS=1 sort -n -r >"$tmp/sorted" 2>"$tmp/stats" ||
  { cat "$tmp/stats" >&2; fail "sort with LD_PRELOAD=libflatmalloc.so.0 failed"; }
[ "$(head -n 1 "$tmp/sorted")" = 20000 ] || fail "sort under the unpacked library printed $(head -n 1 "$tmp/sorted") first"
served "$tmp/stats" || { cat "$tmp/stats" >&2; fail "no flatmalloc report from sort under LD_PRELOAD=libflatmalloc.so.0"; }
step "LD_PRELOAD=libflatmalloc.so.0 (LD_LIBRARY_PATH to the root): sort served by flatmalloc"

# ------------------------------------------------------------------ the wrapper
wrapper=$tmp/root/usr/bin/flatmalloc
out=$("$wrapper" --version) || fail "flatmalloc --version failed"
[ "$out" = "flatmalloc $version" ] || fail "flatmalloc --version printed '$out', not 'flatmalloc $version'"
maps=$("$wrapper" run -- cat /proc/self/maps) || fail "flatmalloc run -- cat failed"
grep -qF "$libdir/libflatmalloc.so.0" <<<"$maps" || fail "flatmalloc run did not preload $libdir/libflatmalloc.so.0"
seq 2000 | "$wrapper" run --stats -- sort -n >/dev/null 2>"$tmp/stats" || fail "flatmalloc run --stats -- sort failed"
served "$tmp/stats" || { cat "$tmp/stats" >&2; fail "no flatmalloc report from flatmalloc run --stats"; }
step "the unpacked wrapper: --version prints '$out'; run preloads the unpacked library"

# ------------------------------------------------------------------ pkg-config
export PKG_CONFIG_LIBDIR=$libdir/pkgconfig PKG_CONFIG_SYSROOT_DIR=$tmp/root
pcversion=$(pkg-config --modversion flatmalloc) || fail "pkg-config finds no flatmalloc.pc in $PKG_CONFIG_LIBDIR"
[ "$pcversion" = "$version" ] || fail "pkg-config --modversion says $pcversion, not $version"
flags=$(pkg-config --cflags --libs flatmalloc)
cat >"$tmp/v.c" <<'C'
#include <stdio.h>
#include <string.h>
#include <flatmalloc.h>
int main(void) {
  const char *v = flatmalloc_version();
  void *p = flatmalloc_malloc(100);
  flatmalloc_free(p);
  printf("flatmalloc %s\n", v);
  return strcmp(v, FLATMALLOC_VERSION) != 0 || p == NULL;
}
C
# shellcheck disable=SC2086
cc -o "$tmp/v" "$tmp/v.c" $flags || fail "cc $flags failed"
out=$(LD_LIBRARY_PATH=$libdir "$tmp/v") || fail "the program built with pkg-config's flags failed ('$out')"
[ "$out" = "flatmalloc $version" ] || fail "the program printed '$out'"
ldd_out=$(LD_LIBRARY_PATH=$libdir ldd "$tmp/v")
grep -qF "libflatmalloc.so.0 => $libdir/" <<<"$ldd_out" || fail "the program does not need libflatmalloc.so.0 from the root: $ldd_out"
step "pkg-config --modversion $pcversion; a program built with '$flags' calls flatmalloc_version()"
unset PKG_CONFIG_LIBDIR PKG_CONFIG_SYSROOT_DIR

# ------------------------------------------------------------------ man
for p in man1/flatmalloc man1/flatmalloc-classes man3/flatmalloc; do
  sect=${p%%/*}; sect=${sect#man}
  out=$(man --warnings -E UTF-8 -M "$tmp/root/usr/share/man" "$sect" "${p#*/}" 2>"$tmp/err") ||
    fail "man -M ROOT/usr/share/man $sect ${p#*/} failed: $(cat "$tmp/err")"
  [ ! -s "$tmp/err" ] || { cat "$tmp/err" >&2; fail "man $sect ${p#*/} warns"; }
  [ "$(wc -l <<<"$out")" -gt 50 ] || fail "man $sect ${p#*/} rendered less than 50 lines"
done
step "man renders flatmalloc(1), flatmalloc-classes(1) and flatmalloc(3) from the root without a warning"
echo "package: all checks passed"
