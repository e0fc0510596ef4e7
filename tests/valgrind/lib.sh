# Shared by valgrind.sh and same.sh (sourced, with $lib the library): a scratch folder, the
# ok/FAIL lines, and valgrind on flatmalloc's heap (fm) and on glibc's (gl).
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
fail=0
ok() { echo "ok $1"; }
bad() { echo "FAIL $1"; shift; for l in "$@"; do echo "$l" | sed 's/^/    /' | head -40; done; fail=1; }
keep=(--soname-synonyms=somalloc=nouserintercepts)   # keep flatmalloc's allocator
fm() { LD_PRELOAD=$lib valgrind "${keep[@]}" "$@" 2>&1; }
gl() { valgrind "$@" 2>&1; }
summary() { sed -n '/LEAK SUMMARY/,/suppressed:/p' | sed 's/^==[0-9]*==//'; }
