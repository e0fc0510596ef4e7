#!/usr/bin/env bash
# tests/pg/install.sh SOURCE_DIR : `meson install` into a temporary prefix and into a DESTDIR.
#
# Configures a separate build of SOURCE_DIR in a temporary directory with --prefix inside it,
# runs `meson install` (which builds) and `meson install --destdir`, then checks:
#   - every file `meson introspect --installed` lists exists under the prefix and the DESTDIR,
#     and the library, flatmalloc.h, flatmalloc.pc and the `flatmalloc` wrapper are among them;
#   - `pkg-config --cflags --libs flatmalloc` works with PKG_CONFIG_PATH pointing into the prefix
#     and names the installed include and library directories; --modversion is the project's;
#   - a program compiled against the installed header and library with those flags calls
#     flatmalloc_version and flatmalloc_malloc/free and runs with the installed library mapped;
#   - a C program using an arena and a C++17 program using flatmalloc.hpp's pmr resource build
#     with those flags and run (the library itself needs no libstdc++);
#   - `$prefix/bin/flatmalloc run -- python3 ...` runs the program with the installed library
#     (its /proc/self/maps shows the installed path, not the build tree's).
set -euo pipefail
[ $# -eq 1 ] || { echo "usage: $0 SOURCE_DIR" >&2; exit 2; }
src=$(cd "$1" && pwd)
unset LD_PRELOAD DESTDIR
tmp=$(mktemp -d /tmp/fm-install.XXXXXX)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix
build=$tmp/build
dest=$tmp/dest

fail() { echo "FAIL: $*" >&2; exit 1; }
step() { echo "install: $*"; }

step "meson setup --prefix=$prefix"
meson setup --prefix="$prefix" -Dbenchmarks=disabled "$build" "$src" >"$tmp/setup.log" 2>&1 ||
  { tail -n 30 "$tmp/setup.log" >&2; fail "meson setup failed"; }
step "meson install (builds the project)"
meson install -C "$build" >"$tmp/install.log" 2>&1 ||
  { tail -n 30 "$tmp/install.log" >&2; fail "meson install failed"; }
step "meson install --destdir $dest"
meson install -C "$build" --no-rebuild --destdir "$dest" >"$tmp/install-destdir.log" 2>&1 ||
  { tail -n 30 "$tmp/install-destdir.log" >&2; fail "meson install --destdir failed"; }

# ------------------------------------------------------------------ the installed files
meson introspect --installed "$build" >"$tmp/installed.json"
mapfile -t installed < <(python3 -c '
import json, sys
for dst in sorted(set(json.load(open(sys.argv[1])).values())):
    print(dst)' "$tmp/installed.json")
[ "${#installed[@]}" -gt 0 ] || fail "meson introspect --installed lists nothing: no install targets"
for f in "${installed[@]}"; do
  case "$f" in "$prefix"/*) ;; *) fail "$f is installed outside the prefix $prefix" ;; esac
  [ -e "$f" ] || fail "$f is not installed"
  [ -e "$dest$f" ] || fail "$f is not installed under the DESTDIR ($dest$f)"
  if [ -f "$f" ] && [ ! -L "$f" ]; then
    # pkg-config files name the prefix; everything else is the same file
    cmp -s "$f" "$dest$f" || [[ "$f" == *.pc ]] || fail "$dest$f differs from $f"
  fi
done
step "${#installed[@]} files installed under the prefix and the DESTDIR"

find_installed() {   # find_installed PATTERN DESCRIPTION : the single installed file matching
  local hits=() f
  for f in "${installed[@]}"; do
    # shellcheck disable=SC2053
    [[ "$(basename "$f")" == $1 ]] && hits+=("$f")
  done
  [ "${#hits[@]}" -ge 1 ] || fail "$2 ($1) is not among the installed files: ${installed[*]}"
  printf '%s\n' "${hits[0]}"
}
libso=$(find_installed 'libflatmalloc.so' 'the library')
header=$(find_installed 'flatmalloc.h' 'the public header')
pcfile=$(find_installed 'flatmalloc.pc' 'the pkg-config file')
wrapper=$(find_installed 'flatmalloc' 'the run wrapper')
[ "$header" = "$prefix/include/flatmalloc.h" ] || fail "flatmalloc.h installed as $header, not in $prefix/include"
[ "$wrapper" = "$prefix/bin/flatmalloc" ] || fail "the wrapper is installed as $wrapper, not in $prefix/bin"
[ -x "$wrapper" ] || fail "$wrapper is not executable"
libdir=$(dirname "$libso")
lib_real=$(readlink -f "$libso")
for f in "$libso" "$header" "$pcfile" "$wrapper"; do
  [ -e "$dest$f" ] || fail "$dest$f missing"
done
step "library $libso, header $header, $pcfile, wrapper $wrapper"

# exported names: the flatmalloc_* API beside the C allocation API
for sym in flatmalloc_version flatmalloc_malloc flatmalloc_free malloc free mlockall; do
  nm -D --defined-only "$lib_real" | grep -qw "$sym" || fail "$lib_real does not export $sym"
done

# ------------------------------------------------------------------ pkg-config
version=$(meson introspect --projectinfo "$build" |
  python3 -c 'import json, sys; print(json.load(sys.stdin)["version"])')
export PKG_CONFIG_PATH
PKG_CONFIG_PATH=$(dirname "$pcfile")
flags=$(pkg-config --cflags --libs flatmalloc) || fail "pkg-config --cflags --libs flatmalloc failed"
step "pkg-config --cflags --libs flatmalloc: $flags"
[[ " $flags " == *" -I$prefix/include "* ]] || fail "pkg-config's flags do not name -I$prefix/include"
[[ " $flags " == *" -L$libdir "* ]] || fail "pkg-config's flags do not name -L$libdir"
[[ " $flags " == *" -lflatmalloc "* ]] || fail "pkg-config's flags do not name -lflatmalloc"
pcversion=$(pkg-config --modversion flatmalloc)
[ "$pcversion" = "$version" ] || fail "pkg-config --modversion says $pcversion, the project $version"

# ------------------------------------------------------------------ a program built against it
cat >"$tmp/prog.c" <<'EOF'
#include <flatmalloc.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char **argv)
{
    const char *v = flatmalloc_version();
    if (v == NULL || strcmp(v, FLATMALLOC_VERSION) != 0) {
        fprintf(stderr, "flatmalloc_version() = %s, header says %s\n", v ? v : "(null)", FLATMALLOC_VERSION);
        return 1;
    }
    for (size_t n = 1; n <= (size_t)1 << 22; n *= 3) {
        unsigned char *p = flatmalloc_malloc(n);
        if (p == NULL) { fprintf(stderr, "flatmalloc_malloc(%zu) = NULL\n", n); return 1; }
        memset(p, 0xa5, n);
        if (flatmalloc_malloc_usable_size(p) < n) { fprintf(stderr, "usable size < %zu\n", n); return 1; }
        p = flatmalloc_realloc(p, 2 * n);
        if (p == NULL || p[n - 1] != 0xa5) { fprintf(stderr, "flatmalloc_realloc lost data\n"); return 1; }
        flatmalloc_free(p);
    }
    int *z = flatmalloc_calloc(1000, sizeof *z);
    for (int i = 0; z != NULL && i < 1000; i++)
        if (z[i] != 0) { fprintf(stderr, "flatmalloc_calloc not zeroed\n"); return 1; }
    flatmalloc_free(z);

    /* the library this process runs with is the installed one */
    char line[4096];
    int mapped = 0;
    FILE *maps = fopen("/proc/self/maps", "r");
    while (maps != NULL && fgets(line, sizeof line, maps) != NULL)
        if (argc > 1 && strstr(line, argv[1]) != NULL)
            mapped = 1;
    if (maps != NULL)
        fclose(maps);
    if (!mapped) { fprintf(stderr, "%s is not mapped\n", argc > 1 ? argv[1] : "(no path given)"); return 1; }
    printf("flatmalloc %s\n", v);
    return 0;
}
EOF
# shellcheck disable=SC2086
cc -std=gnu11 -Wall -Wextra -Werror -o "$tmp/prog" "$tmp/prog.c" $flags -Wl,-rpath,"$libdir" ||
  fail "the program does not compile against the installed header and library"
out=$("$tmp/prog" "$lib_real") || fail "the program built against the installed library failed: $out"
[ "$out" = "flatmalloc $version" ] || fail "the program printed '$out'"
step "program built with pkg-config's flags: $out, $lib_real mapped"

# ------------------------------------------------------------------ arenas: C and C++ (flatmalloc.hpp)
hpp=$(find_installed 'flatmalloc.hpp' 'the C++ header')
[ "$hpp" = "$prefix/include/flatmalloc.hpp" ] || fail "flatmalloc.hpp installed as $hpp, not in $prefix/include"
cat >"$tmp/arena.c" <<'EOF'
#include <flatmalloc.h>
#include <stdio.h>
#include <string.h>

int main(void)
{
    flatmalloc_arena *a = flatmalloc_arena_create(0);
    char *first = NULL;
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 10000; i++) {
            char *p = flatmalloc_arena_alloc(a, 100, 16);
            if (p == NULL) { fprintf(stderr, "flatmalloc_arena_alloc = NULL\n"); return 1; }
            memset(p, i, 100);
            if (i == 0 && round == 0) first = p;
            if (i == 0 && p != first) { fprintf(stderr, "reset did not rewind\n"); return 1; }
        }
        flatmalloc_arena_reset(a);
    }
    flatmalloc_arena_destroy(a);
    printf("arena ok\n");
    return 0;
}
EOF
cat >"$tmp/arena.cc" <<'EOF'
#include <flatmalloc.hpp>
#include <cstdio>
#include <memory_resource>
#include <string>
#include <unordered_map>
#include <vector>

int main()
{
    flatmalloc::arena_resource arena;
    {
        std::pmr::unordered_map<std::pmr::string, std::pmr::vector<int>> m(&arena);
        for (int i = 0; i < 1000; i++) m[std::pmr::string("key " + std::to_string(i), &arena)].push_back(i);
        for (int i = 0; i < 1000; i++)
            if (m[std::pmr::string("key " + std::to_string(i), &arena)].at(0) != i) return 1;
        std::vector<int, flatmalloc::arena_allocator<int>> v(&arena);
        for (int i = 0; i < 1000; i++) v.push_back(i);
        if (v[999] != 999) return 1;
    }
    arena.reset();
    std::printf("pmr ok\n");
    return 0;
}
EOF
# shellcheck disable=SC2086
cc -std=gnu11 -Wall -Wextra -Werror -o "$tmp/arena" "$tmp/arena.c" $flags -Wl,-rpath,"$libdir" ||
  fail "the arena program does not compile against the installed header and library"
out=$("$tmp/arena") || fail "the arena program failed: $out"
[ "$out" = "arena ok" ] || fail "the arena program printed '$out'"
# shellcheck disable=SC2086
c++ -std=c++17 -Wall -Wextra -Werror -o "$tmp/arena-cxx" "$tmp/arena.cc" $flags -Wl,-rpath,"$libdir" ||
  fail "the C++ program does not compile against the installed flatmalloc.hpp"
out=$("$tmp/arena-cxx") || fail "the C++ arena program failed: $out"
[ "$out" = "pmr ok" ] || fail "the C++ arena program printed '$out'"
nm -D --defined-only "$lib_real" | grep -qw flatmalloc_arena_alloc || fail "$lib_real does not export flatmalloc_arena_alloc"
! nm -D "$lib_real" | grep -qE 'GLIBCXX|CXXABI' || fail "$lib_real needs libstdc++"
step "an arena program in C and one in C++ (flatmalloc::arena_resource) built with pkg-config's flags"

# ------------------------------------------------------------------ the installed wrapper
rc=0
out=$(env -u LD_PRELOAD "$wrapper" run -- python3 -c '
import sys
maps = open("/proc/self/maps").read()
print(1)
sys.exit(0 if sys.argv[1] in maps else 3)' "$lib_real" 2>"$tmp/wrapper.err") || rc=$?
if [ "$rc" -ne 0 ]; then
  cat "$tmp/wrapper.err" >&2
  [ "$out" != 1 ] || fail "$wrapper run -- python3: $lib_real is not mapped in python3 (exit $rc)"
  fail "$wrapper run -- python3 -c 'print(1)' exited with $rc, printed '$out'"
fi
[ "$out" = 1 ] || fail "$wrapper run -- python3 printed '$out'"
step "$wrapper run -- python3 -c 'print(1)': printed 1 with $lib_real mapped"
echo "install: all checks passed"
