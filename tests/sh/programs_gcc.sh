#!/usr/bin/env bash
# gcc under flatmalloc (suite 'programs').
#
# usage: programs_gcc.sh PATH/TO/libflatmalloc.so
#
# gen_c.awk writes a C file of about 3,500 lines; gcc -O2 -c compiles it with glibc and under
# flatmalloc (preloaded into the driver, cc1 and as alike, FLATMALLOC_STATS=1). The object files
# must be identical (bytes, `size`, `objdump -d`), gcc's output the same, and the statistics
# report must come from at least two processes (the driver and the compiler proper or the
# assembler), each complete.
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
CC=$(command -v gcc) || fm_fail "gcc is not installed"
command -v objdump >/dev/null || fm_fail "objdump is not installed (binutils)"

fm_check "generate the C source"
src=$FM_TMP/gen.c
awk -v nf=150 -f "$fm_sh_dir/gen_c.awk" >"$src"
lines=$(wc -l <"$src")
[ "$lines" -gt 3000 ] || fm_fail "only $lines lines generated"
fm_ok "$lines lines"

fm_check "gcc -O2 -c with glibc"
fm_run cc glibc "$CC" -O2 -Wall -c "$src" -o "$FM_TMP/glibc.o"
fm_ok "$(size "$FM_TMP/glibc.o" | tail -n 1)"

fm_check "gcc -O2 -c under flatmalloc: the same object file"
fm_run cc fm "$CC" -O2 -Wall -c "$src" -o "$FM_TMP/fm.o"
fm_compare cc 2
(cd "$FM_TMP" && size glibc.o | sed 's/glibc\.o$/X.o/') >"$FM_TMP/size.glibc"
(cd "$FM_TMP" && size fm.o | sed 's/fm\.o$/X.o/') >"$FM_TMP/size.fm"
fm_same "$FM_TMP/size.glibc" "$FM_TMP/size.fm" "size of the object file"
objdump -d "$FM_TMP/glibc.o" | tail -n +3 >"$FM_TMP/dis.glibc"
objdump -d "$FM_TMP/fm.o" | tail -n +3 >"$FM_TMP/dis.fm"
[ "$(wc -l <"$FM_TMP/dis.glibc")" -gt 10000 ] || fm_fail "objdump -d printed too little"
fm_same "$FM_TMP/dis.glibc" "$FM_TMP/dis.fm" "objdump -d of the object file"
fm_same "$FM_TMP/glibc.o" "$FM_TMP/fm.o" "the object file"
fm_ok "identical object files ($(wc -l <"$FM_TMP/dis.fm") lines of disassembly)"

echo "programs_gcc: all checks passed"
