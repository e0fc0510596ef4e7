#!/usr/bin/env bash
# Settings validation (suite 'options').
#
# usage: options.sh PATH/TO/libflatmalloc.so [PATH/TO/mainran]
#
# A malformed or inconsistent FLATMALLOC_* value, or an unknown FLATMALLOC_ name, must stop the
# program before main: exit status 1, nothing on stdout, exactly one line on stderr of the form
#   flatmalloc: NAME=VALUE: reason
# Each rejected setting is tried with /bin/true, /bin/echo and mainran (which writes "main ran"
# and creates a marker file first thing in main). Good settings must be accepted: exit 0, main
# runs, nothing on stderr (or only the statistics report when FLATMALLOC_STATS=1).
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
MAINRAN=$(fm_helper mainran "${2:-}")
marker=$FM_TMP/marker
out=$FM_TMP/out
err=$FM_TMP/err

# run_prog KIND ENV...: runs program KIND (true, echo, mainran) with the library preloaded and the
# given settings; sets rc, leaves stdout in $out and stderr in $err.
run_prog() {
  local kind=$1
  shift
  rm -f "$marker"
  local cmd
  case $kind in
    true) cmd=(/bin/true) ;;
    echo) cmd=(/bin/echo "main ran") ;;
    mainran) cmd=("$MAINRAN" "$marker") ;;
  esac
  rc=0
  env "$@" LD_PRELOAD="$FM_SO" "${cmd[@]}" >"$out" 2>"$err" || rc=$?
}

# reject NAME VALUE [OTHER_SETTING=VALUE...]: NAME=VALUE must stop every program before main.
reject() {
  local name=$1 value=$2
  shift 2
  local desc="$name=$value"
  [ $# -gt 0 ] && desc="$desc (with $*)"
  fm_check "rejected: $desc"
  local kind line reason prefix="flatmalloc: $name=$value: "
  for kind in true echo mainran; do
    run_prog "$kind" "$@" "$name=$value"
    if [ "$rc" -ne 1 ]; then
      fm_show "$out" "stdout"
      fm_show "$err" "stderr"
      fm_fail "$kind exited with status $rc, expected 1"
    fi
    if [ -s "$out" ]; then
      fm_show "$out" "stdout"
      fm_fail "$kind printed to stdout: main ran or something else was printed"
    fi
    [ ! -e "$marker" ] || fm_fail "$kind: main ran (the marker file was created)"
    if [ "$(wc -l <"$err")" -ne 1 ]; then
      fm_show "$err" "stderr"
      fm_fail "$kind: stderr has $(wc -l <"$err") lines, expected exactly one"
    fi
    line=$(head -n 1 "$err")
    if [ "$(wc -c <"$err")" -ne $((${#line} + 1)) ]; then
      fm_show "$err" "stderr"
      fm_fail "$kind: stderr holds more than the one line"
    fi
    if [[ "$line" != "$prefix"* ]]; then
      fm_fail "$kind: the line does not start with '$prefix' (naming the variable and the rejected value): $line"
    fi
    reason=${line#"$prefix"}
    [[ "$reason" =~ [A-Za-z] ]] || fm_fail "$kind: the line gives no reason: $line"
  done
  fm_ok "$line"
}

# reject_exact LINE SETTING=VALUE...: the settings must stop every program before main with
# exactly LINE (and its newline) on stderr.
reject_exact() {
  local want=$1 kind
  shift
  fm_check "rejected with the exact line: $want"
  for kind in true echo mainran; do
    run_prog "$kind" "$@"
    [ "$rc" -eq 1 ] || {
      fm_show "$err" "stderr"
      fm_fail "$kind exited with status $rc, expected 1"
    }
    [ ! -s "$out" ] || fm_fail "$kind printed to stdout"
    [ ! -e "$marker" ] || fm_fail "$kind: main ran (the marker file was created)"
    if ! printf '%s\n' "$want" | cmp -s - "$err"; then
      fm_show "$err" "stderr"
      fm_fail "$kind: stderr is not exactly the line (and a newline): $want"
    fi
  done
  fm_ok "exactly that line"
}

# accept SETTING=VALUE...: the settings must be accepted by every program.
accept() {
  fm_check "accepted: ${*:-(no settings)}"
  local kind stats=0 s
  for s in "$@"; do
    [ "$s" = FLATMALLOC_STATS=1 ] && stats=1
  done
  for kind in true echo mainran; do
    run_prog "$kind" "$@"
    if [ "$rc" -ne 0 ]; then
      fm_show "$out" "stdout"
      fm_show "$err" "stderr"
      fm_fail "$kind exited with status $rc, expected 0"
    fi
    case $kind in
      true) [ ! -s "$out" ] || fm_fail "/bin/true printed to stdout" ;;
      *)
        [ "$(cat "$out")" = "main ran" ] || {
          fm_show "$out" "stdout"
          fm_fail "$kind: stdout is not 'main ran'"
        }
        ;;
    esac
    if [ "$kind" = mainran ] && [ ! -e "$marker" ]; then
      fm_fail "mainran did not create its marker file"
    fi
    if [ $stats -eq 0 ] && [ -s "$err" ]; then
      fm_show "$err" "stderr"
      fm_fail "$kind wrote to stderr"
    fi
    if [ $stats -eq 1 ]; then
      [ -z "$(fm_strip_stats "$err")" ] || {
        fm_show "$err" "stderr"
        fm_fail "$kind: stderr holds more than the statistics report"
      }
      # mainran allocates, so its report must show a class with a nonzero peak
      [ "$kind" != mainran ] || fm_stats_verify "$err"
    fi
  done
  fm_ok "exit 0, main ran"
}

# reserved SETTING=VALUE...: the pool's reserved bytes from mainran's statistics report.
reserved() {
  run_prog mainran FLATMALLOC_STATS=1 "$@"
  [ "$rc" -eq 0 ] || {
    fm_show "$err" "stderr"
    fm_fail "mainran with $* exited with status $rc"
  }
  local r
  r=$(sed -n 's/^flatmalloc\[[0-9]*\]: pool reserved=\([0-9]*\) .*$/\1/p' "$err")
  [ -n "$r" ] || {
    fm_show "$err" "stderr"
    fm_fail "no pool line in the statistics report"
  }
  echo "$r"
}

echo "== malformed or inconsistent settings stop the program before main =="
# FLATMALLOC_CLASSES
reject FLATMALLOC_CLASSES 64:50,16:50 # not ascending
reject FLATMALLOC_CLASSES 16:50,16:50 # the same size twice
reject FLATMALLOC_CLASSES 24:100 # not a multiple of 16
reject FLATMALLOC_CLASSES 16:50,40:50 # second size not a multiple of 16
reject FLATMALLOC_CLASSES 16:50,64:60 # reservations sum to 110
reject FLATMALLOC_CLASSES 16:30,64:30 FLATMALLOC_LARGE=50 # with the large area's, 110
reject FLATMALLOC_CLASSES 16:50,32 FLATMALLOC_LARGE=60 # with the large area's, 110
reject FLATMALLOC_CLASSES 16:-10,64:110 # negative percent
reject FLATMALLOC_CLASSES 16:x # garbage percent
reject FLATMALLOC_CLASSES x:100 # garbage size
reject FLATMALLOC_CLASSES 16:,32 # a colon without a percent
reject FLATMALLOC_CLASSES '' # empty
# FLATMALLOC_POOL
reject FLATMALLOC_POOL 10Q # unknown suffix
reject FLATMALLOC_POOL abc # not a number
reject FLATMALLOC_POOL 1GG # trailing garbage
reject FLATMALLOC_POOL -1G # negative
reject FLATMALLOC_POOL '' # empty
reject FLATMALLOC_POOL 0 # zero pool
reject FLATMALLOC_POOL 0M # zero pool with a suffix
reject FLATMALLOC_POOL 99999999999999999999 # overflows 64 bits
reject FLATMALLOC_POOL 99999999T # overflows 64 bits once scaled
reject FLATMALLOC_POOL 64K # too small for the (default) classes
reject FLATMALLOC_POOL 32K FLATMALLOC_CLASSES=16:20,64:50,256:30 # too small for one span of these classes
# FLATMALLOC_LARGE
reject FLATMALLOC_LARGE 150
reject FLATMALLOC_LARGE 101
reject FLATMALLOC_LARGE -1
reject FLATMALLOC_LARGE abc
# FLATMALLOC_PREFAULT, FLATMALLOC_STATS, FLATMALLOC_CHECK: 0 or 1
reject FLATMALLOC_PREFAULT 2
reject FLATMALLOC_PREFAULT yes
reject FLATMALLOC_PREFAULT ''
reject FLATMALLOC_STATS 2
reject FLATMALLOC_CHECK x
# FLATMALLOC_PROFILE: a path
reject FLATMALLOC_PROFILE ""
# FLATMALLOC_RETAIN
reject FLATMALLOC_RETAIN abc
reject FLATMALLOC_RETAIN 10Q
# FLATMALLOC_RETAIN_DELAY: whole milliseconds, up to a day
reject FLATMALLOC_RETAIN_DELAY ''
reject FLATMALLOC_RETAIN_DELAY 1s
reject FLATMALLOC_RETAIN_DELAY -1
reject FLATMALLOC_RETAIN_DELAY 1.5
reject FLATMALLOC_RETAIN_DELAY 86400001
reject FLATMALLOC_RETAIN_DELAY 99999999999999999999
reject_exact 'flatmalloc: FLATMALLOC_RETAIN_DELAY=10ms: expected milliseconds (a whole number, 0 for none)' FLATMALLOC_RETAIN_DELAY=10ms
# unknown names
reject FLATMALLOC_FOO 1
reject FLATMALLOC_pool 1G
# one bad setting among good ones: the line names the bad one; no report even with STATS=1
reject FLATMALLOC_CLASSES 24:100 FLATMALLOC_POOL=1G FLATMALLOC_LARGE=40
reject FLATMALLOC_PREFAULT 2 FLATMALLOC_STATS=1
reject FLATMALLOC_FOO 1 FLATMALLOC_STATS=1 FLATMALLOC_POOL=512M

echo "== the line keeps its reason for a long value, and shows control characters escaped =="
nines=$(printf '9%.0s' {1..64})
reject_exact "flatmalloc: FLATMALLOC_POOL=$nines: size too large" "FLATMALLOC_POOL=$nines"
reject_exact "flatmalloc: FLATMALLOC_POOL=$nines...: size too large" "FLATMALLOC_POOL=${nines}9"
reject_exact "flatmalloc: FLATMALLOC_POOL=$nines...: size too large" "FLATMALLOC_POOL=$(printf '9%.0s' {1..5000})"
long_classes=$(for i in $(seq 1 100); do printf '%d:1,' $((i * 16)); done)
reject_exact "flatmalloc: FLATMALLOC_CLASSES=${long_classes:0:64}...: too many classes (at most 64)" \
  "FLATMALLOC_CLASSES=$long_classes"
reject_exact 'flatmalloc: FLATMALLOC_STATS=1\n\t\x1b[31m\r\\\x7f\xc3\xa9: expected 0 or 1' \
  $'FLATMALLOC_STATS=1\n\t\x1b[31m\r\\\x7f\xc3\xa9'
reject_exact 'flatmalloc: FLATMALLOC_POOL=\n\nflatmalloc: all good\n: not a size (expected a number with an optional K, M, G or T suffix)' \
  $'FLATMALLOC_POOL=\n\nflatmalloc: all good\n'
reject_exact 'flatmalloc: FLATMALLOC_\x1b]0;x\x07=1: unknown setting (known: FLATMALLOC_POOL, FLATMALLOC_CLASSES, FLATMALLOC_LARGE, FLATMALLOC_RETAIN, FLATMALLOC_RETAIN_DELAY, FLATMALLOC_PREFAULT, FLATMALLOC_HUGEPAGES, FLATMALLOC_STATS, FLATMALLOC_CHECK, FLATMALLOC_PROFILE, FLATMALLOC_HEAP, FLATMALLOC_HEAP_SAMPLE, FLATMALLOC_HEAP_SIGNAL)' \
  $'FLATMALLOC_\x1b]0;x\x07=1'
# escaping counts the value's bytes, not the line's: 64 control bytes show as 256 characters, then ...
esc64=$(printf '\\x01%.0s' {1..64})
reject_exact "flatmalloc: FLATMALLOC_CHECK=$esc64...: expected 0 or 1" "FLATMALLOC_CHECK=$(printf '\001%.0s' {1..65})"

echo "== settings that would harm the program are refused (issue 30) =="
sig_why='expected USR1 (10), USR2 (12), PROF (27) or a real-time signal from 34 to 64 (the others belong to the program, the system or glibc)'
# glibc's own signals (32, 33), the program's (INT, PIPE, TERM, HUP, ALRM, CHLD, WINCH, job
# control), a fault's (ABRT, SEGV, BUS, FPE, ILL, TRAP), those that cannot be caught, and no signal
for sig in 32 33 2 13 15 6 1 3 4 5 7 8 9 11 14 17 18 19 20 28 SIGINT TERM SIGABRT KILL 0 65 99 '' USR3 10x; do
  reject_exact "flatmalloc: FLATMALLOC_HEAP_SIGNAL=$sig: $sig_why" "FLATMALLOC_HEAP_SIGNAL=$sig"
done
reject_exact "flatmalloc: FLATMALLOC_POOL=64Mb: b is bits, not bytes (expected K, M, G or T, optionally followed by B or iB)" FLATMALLOC_POOL=64Mb
reject_exact "flatmalloc: FLATMALLOC_POOL=1gb: b is bits, not bytes (expected K, M, G or T, optionally followed by B or iB)" FLATMALLOC_POOL=1gb
reject_exact "flatmalloc: FLATMALLOC_POOL=64Mib: unknown size suffix (expected K, M, G or T)" FLATMALLOC_POOL=64Mib
reject_exact "flatmalloc: FLATMALLOC_HEAP_SAMPLE=128Kb: b is bits, not bytes (expected K, M, G or T, optionally followed by B or iB)" FLATMALLOC_HEAP_SAMPLE=128Kb
reject_exact "flatmalloc: FLATMALLOC_CLASSES=16:100,: a trailing comma (expected size[:percent],...)" FLATMALLOC_CLASSES=16:100,
reject_exact "flatmalloc: FLATMALLOC_CLASSES=16,32,: a trailing comma (expected size[:percent],...)" FLATMALLOC_CLASSES=16,32,
reject_exact "flatmalloc: FLATMALLOC_CLASSES=16,,32: expected size[:percent],..." FLATMALLOC_CLASSES=16,,32
# the signals that stay the profiler's, and the byte spellings of a size
for sig in USR1 SIGUSR2 10 12 PROF SIGPROF 27 34 50 64; do
  accept FLATMALLOC_HEAP_SIGNAL=$sig
done
accept FLATMALLOC_POOL=64MB
accept FLATMALLOC_POOL=64MiB

echo "== settings that leave a class no room for one span are refused (issue 18) =="
reject_exact "flatmalloc: FLATMALLOC_LARGE=100: the large area's reservation leaves no room for a span of the 16 B class" \
  FLATMALLOC_LARGE=100
reject_exact "flatmalloc: FLATMALLOC_LARGE=100: the large area's reservation leaves no room for a span of the 16 B class" \
  FLATMALLOC_CLASSES=16:50,32:50 FLATMALLOC_LARGE=100 # the older syntax: shares of nothing
reject_exact "flatmalloc: FLATMALLOC_CLASSES=16:0,32:100: the reservations leave no room for a span of the 16 B class" \
  FLATMALLOC_CLASSES=16:0,32:100
reject_exact "flatmalloc: FLATMALLOC_CLASSES=16:99.9,65536: the reservations leave no room for a span of the 65536 B class" \
  FLATMALLOC_POOL=64M FLATMALLOC_CLASSES=16:99.9,65536 # 64 KiB left, a span of 64 KiB blocks is 8 of them
reject_exact "flatmalloc: FLATMALLOC_CLASSES=16:50,65536: the reservations and FLATMALLOC_LARGE leave no room for a span of the 65536 B class" \
  FLATMALLOC_POOL=64M FLATMALLOC_CLASSES=16:50,65536 FLATMALLOC_LARGE=49.9
accept FLATMALLOC_POOL=64M FLATMALLOC_CLASSES=16:90,65536 # 6.4 MiB left for the 64 KiB class and large blocks

echo "== good settings are accepted =="
accept
accept FLATMALLOC_POOL=512M
accept FLATMALLOC_POOL=1G
accept FLATMALLOC_POOL=1073741824
accept FLATMALLOC_POOL=524288K
accept FLATMALLOC_POOL=1T
accept FLATMALLOC_CLASSES=16:20,64:50,256:30
accept FLATMALLOC_CLASSES=16:33.5,32:33.25,48:33.25
accept FLATMALLOC_CLASSES=4096:100
accept FLATMALLOC_CLASSES=16 # sizes alone: classes without reservations
accept FLATMALLOC_CLASSES=16,64,256,4096
accept FLATMALLOC_CLASSES=16:20,64,256:30 # reservations for two classes
accept FLATMALLOC_CLASSES=16:50,64:40 # 90 % reserved
accept FLATMALLOC_CLASSES=16:33.3,64:66.6 # 99.9 % reserved
accept FLATMALLOC_CLASSES=16:20,64:20 FLATMALLOC_LARGE=60
accept FLATMALLOC_CLASSES=16:10,32:10,48:10,64:10,128:10,256:10,512:10,1024:10,2048:10,4096:10
accept FLATMALLOC_LARGE=50
accept FLATMALLOC_LARGE=25
accept FLATMALLOC_LARGE=75
accept FLATMALLOC_PREFAULT=0
accept FLATMALLOC_PREFAULT=1 FLATMALLOC_POOL=256M
accept FLATMALLOC_STATS=0
accept FLATMALLOC_STATS=1
accept FLATMALLOC_CHECK=0
accept FLATMALLOC_CHECK=1
accept FLATMALLOC_PROFILE="$FM_TMP/profile"
accept FLATMALLOC_RETAIN=0
accept FLATMALLOC_RETAIN=64M
accept FLATMALLOC_RETAIN=1G
accept FLATMALLOC_RETAIN_DELAY=0
accept FLATMALLOC_RETAIN_DELAY=1000
accept FLATMALLOC_RETAIN_DELAY=86400000
accept FLATMALLOC_POOL=1G FLATMALLOC_CLASSES=16:20,64:50,256:30 FLATMALLOC_LARGE=40 \
  FLATMALLOC_PREFAULT=0 FLATMALLOC_STATS=1 FLATMALLOC_CHECK=1 FLATMALLOC_RETAIN=32M

echo "== sizes are binary: K, M, G, T and plain bytes name the same pool =="
fm_check "FLATMALLOC_POOL=512M, 524288K and 536870912 reserve the same pool of at least 512 MiB"
r1=$(reserved FLATMALLOC_POOL=512M)
r2=$(reserved FLATMALLOC_POOL=524288K)
r3=$(reserved FLATMALLOC_POOL=536870912)
{ [ "$r1" = "$r2" ] && [ "$r1" = "$r3" ]; } || fm_fail "reserved differs: 512M=$r1 524288K=$r2 536870912=$r3"
[ "$r1" -ge 536870912 ] || fm_fail "512M reserved only $r1 bytes (M must mean MiB)"
fm_ok "reserved=$r1 for all three"
fm_check "FLATMALLOC_POOL=1G and 1073741824 reserve the same pool, bigger than 512M's"
r4=$(reserved FLATMALLOC_POOL=1G)
r5=$(reserved FLATMALLOC_POOL=1073741824)
[ "$r4" = "$r5" ] || fm_fail "reserved differs: 1G=$r4 1073741824=$r5"
[ "$r4" -ge 1073741824 ] || fm_fail "1G reserved only $r4 bytes (G must mean GiB)"
[ "$r4" -gt "$r1" ] || fm_fail "1G reserved $r4, not more than 512M's $r1"
fm_ok "reserved=$r4 for both"
fm_check "FLATMALLOC_POOL=1T, 1024G and 1048576M reserve the same pool of at least 1 TiB"
r6=$(reserved FLATMALLOC_POOL=1T)
r7=$(reserved FLATMALLOC_POOL=1024G)
r8=$(reserved FLATMALLOC_POOL=1048576M)
{ [ "$r6" = "$r7" ] && [ "$r6" = "$r8" ]; } || fm_fail "reserved differs: 1T=$r6 1024G=$r7 1048576M=$r8"
[ "$r6" -ge 1099511627776 ] || fm_fail "1T reserved only $r6 bytes (T must mean TiB)"
fm_ok "reserved=$r6 for all three"

echo "options: all checks passed"
