#!/usr/bin/env bash
# The real-time profile and mlockall, seen from outside (suite 'realtime').
#
# usage: realtime.sh PATH/TO/libflatmalloc.so PATH/TO/test-realtime
#
# 1. FLATMALLOC_PREFAULT=1: test-realtime's `pages` sequence under strace: between its two
#    getppid() markers (after start-up and mlockall; the threads' stacks mapped before) no
#    thread makes a memory system call (mmap, munmap, mprotect, madvise, mremap, brk, mlock...),
#    nor any system call but the program's own (its sleeps, getrusage, the threads' start, exit
#    and join) and futex (a wait for a lock another thread holds), and the program passes its
#    own checks (no page fault, no page given back).
# 2. Default settings: `mlock` (mlockall after the first malloc) leaves resident memory within
#    the documented slack of glibc's run of the same program: at most 4 MiB + 2 MiB per CPU
#    more; the writes into blocks handed out afterwards take no page fault.
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
RT=${2:?test-realtime}
command -v strace >/dev/null || fm_fail "strace is not installed (Debian package strace)"

fm_check "FLATMALLOC_PREFAULT=1: no memory system call after start-up, no system call but the program's own"
rc=0
strace -f -qq -o "$FM_TMP/all.trace" -E LD_PRELOAD="$FM_SO" -E FLATMALLOC_PREFAULT=1 -E FLATMALLOC_POOL=256M \
  -E FLATMALLOC_RETAIN_DELAY=10 "$RT" pages >/dev/null 2>&1 || fm_fail "test-realtime pages under strace (every call) failed"
own='clock_nanosleep|getrusage|clone3?|set_robust_list|rseq|rt_sigprocmask|rt_sigaction|exit|futex'
other=$(sed -E 's/^[0-9]+ +//' "$FM_TMP/all.trace" | awk '/^getppid\(/ { m++; next } m == 1' | grep -v '^<\.\.\.' |
  grep -vE "^($own)\(" || true)
[ -z "$other" ] || { echo "$other" | head -20; fm_fail "system calls after start-up that the program did not make (above)"; }
fm_ok "only the program's own calls and lock waits (futex)"
strace -f -qq -o "$FM_TMP/pages.trace" -e trace=%memory,getppid -E LD_PRELOAD="$FM_SO" -E FLATMALLOC_PREFAULT=1 \
  -E FLATMALLOC_POOL=256M -E FLATMALLOC_RETAIN_DELAY=10 "$RT" pages >"$FM_TMP/pages.out" 2>&1 || rc=$?
cat "$FM_TMP/pages.out"
[ $rc -eq 0 ] || fm_fail "test-realtime pages exited with status $rc"
markers=$(grep -c 'getppid()' "$FM_TMP/pages.trace" || true)
[ "$markers" -eq 2 ] || fm_fail "expected the two getppid() markers in strace's output, found $markers"
between=$(sed -E 's/^[0-9]+ +//' "$FM_TMP/pages.trace" | awk '/^getppid\(/ { m++; next } m == 1' | grep -v '^<\.\.\.\|resumed>' || true)
before=$(sed -E 's/^[0-9]+ +//' "$FM_TMP/pages.trace" | awk '/^getppid\(/ { m++ } !m { n++ } END { print n + 0 }')
echo "  memory system calls before the marker: $before; between the markers:"
[ -z "$between" ] || { echo "$between" | head -20; fm_fail "memory system calls after start-up (above)"; }
fm_ok "none"

fm_check "default settings: mlockall locks what the heap uses, not the pool"
cpus=$(nproc)
"$RT" --libc mlock >"$FM_TMP/glibc.out" 2>&1 || { cat "$FM_TMP/glibc.out"; fm_fail "test-realtime --libc mlock failed"; }
fm_preload "$RT" mlock >"$FM_TMP/fm.out" 2>&1 || { cat "$FM_TMP/fm.out"; fm_fail "test-realtime mlock failed"; }
cat "$FM_TMP/glibc.out" "$FM_TMP/fm.out" | grep 'realtime mlock'
g=$(sed -n 's/.*resident after mlockall \([0-9]*\) KiB/\1/p' "$FM_TMP/glibc.out")
f=$(sed -n 's/.*resident after mlockall \([0-9]*\) KiB/\1/p' "$FM_TMP/fm.out")
slack=$(( (4 + 2 * cpus) * 1024 ))
echo "  resident after mlockall: glibc $g KiB, flatmalloc $f KiB (slack allowed: $slack KiB on $cpus CPUs)"
[ "$f" -le $((g + slack)) ] || fm_fail "flatmalloc's resident memory after mlockall is $f KiB, over glibc's $g KiB + $slack KiB"
fm_ok "within the slack"
echo "realtime: all checks passed"
