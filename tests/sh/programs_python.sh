#!/usr/bin/env bash
# Python 3 under flatmalloc (suite 'programs').
#
# usage: programs_python.sh PATH/TO/libflatmalloc.so
#
# workload.py: 4 threads build and drop dicts of 200k entries, lists of strings, nested lists
# and 1-8 MiB byte buffers; it prints checksums that do not depend on scheduling. Run with
# glibc, then under flatmalloc (FLATMALLOC_STATS=1) three ways: as it is (pymalloc serves small
# objects, flatmalloc the rest), with PYTHONMALLOC=malloc (flatmalloc serves every object), and
# the same with FLATMALLOC_CHECK=1. Each must print exactly glibc's output and a valid
# statistics report with a class that was used.
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
# Debian's interpreter (package python3) when there is one, else the first python3 on PATH.
PYTHON=$(command -v /usr/bin/python3 || command -v python3) || fm_fail "python3 is not installed"
WORKLOAD=$fm_sh_dir/workload.py
echo "python: $PYTHON ($("$PYTHON" --version 2>&1))"

fm_check "python3 workload.py with glibc"
fm_run py glibc "$PYTHON" -s "$WORKLOAD"
grep -q '^total: crc32 ' "$FM_TMP/py.glibc.out" || fm_fail "no total line in the output"
fm_ok "$(tail -n 1 "$FM_TMP/py.glibc.out")"

fm_check "python3 workload.py under flatmalloc: same output, statistics"
fm_run py fm "$PYTHON" -s "$WORKLOAD"
fm_compare py

fm_check "PYTHONMALLOC=malloc python3 workload.py under flatmalloc (every object from flatmalloc)"
cp "$FM_TMP/py.glibc.out" "$FM_TMP/pymalloc.glibc.out"
cp "$FM_TMP/py.glibc.err" "$FM_TMP/pymalloc.glibc.err"
fm_run pymalloc fm env PYTHONMALLOC=malloc "$PYTHON" -s "$WORKLOAD"
fm_compare pymalloc

fm_check "PYTHONMALLOC=malloc FLATMALLOC_CHECK=1 python3 workload.py (checking mode)"
cp "$FM_TMP/py.glibc.out" "$FM_TMP/pycheck.glibc.out"
cp "$FM_TMP/py.glibc.err" "$FM_TMP/pycheck.glibc.err"
fm_run pycheck fm env PYTHONMALLOC=malloc FLATMALLOC_CHECK=1 "$PYTHON" -s "$WORKLOAD"
fm_compare pycheck

echo "programs_python: all checks passed"
