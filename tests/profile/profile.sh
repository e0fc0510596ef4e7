#!/usr/bin/env bash
# Recording mode and the class proposal (suite 'profile').
#
# usage: profile.sh PATH/TO/libflatmalloc.so PATH/TO/sizes PATH/TO/scripts/flatmalloc
#
# sizes (sizes.c) allocates from known sizes. Checked, with exact values:
#   - FLATMALLOC_PROFILE=F writes F.PID with the requests and peaks of each 16-byte size;
#     `flatmalloc classes -k 5` gives back exactly the five sizes rounded to 16, with the waste
#     of the default classes; --reserve gives the expected percents; the PNG is written
#   - 4 threads: every request counted, the peak across threads within the documented bound
#   - 200 threads one after another: one table passed on, every request counted
#   - fork: one file per process, a child counts only its own blocks, the merge adds them, also
#     when another thread of the parent holds blocks at the fork;
#     `flatmalloc profile -o F -- CMD` merges the parts into F
#   - a missing, empty, truncated, other-version or foreign file: exit 1 and exactly one line
#   - a path that cannot be created: one line, the program's exit status unchanged
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/../sh/lib.sh"
fm_setup "$@"
SIZES=${2:?sizes program}
FM=${3:?scripts/flatmalloc}
export FM_LIBRARY=$FM_SO
T=$FM_TMP

# expect_eq WHAT GOT WANT
expect_eq() {
  [ "$2" = "$3" ] || { printf -- '---- got ----\n%s\n---- wanted ----\n%s\n' "$2" "$3" >&2; fm_fail "$1 differs"; }
  fm_ok "$1"
}

parts() {   # the FILE.PID files of prefix $1
  local f
  for f in "$1".*; do [[ "$f" =~ \.[0-9]+$ ]] && echo "$f"; done
  return 0
}
body() { sed -n '/^columns /,/^end /p' "$1" | sed '1d;$d'; }

fm_check "sizes plain: the profile has each size's requests and peak"
fm_preload env FLATMALLOC_PROFILE="$T/plain" "$SIZES" plain || fm_fail "sizes plain exited with $?"
[ "$(parts "$T/plain" | wc -l)" -eq 1 ] || fm_fail "expected one file $T/plain.PID, found: $(parts "$T/plain")"
f=$(parts "$T/plain")
[ "$(head -n 1 "$f")" = "flatmalloc-profile 1" ] || fm_fail "first line: $(head -n 1 "$f")"
expect_eq "buckets of $f" "$(body "$f")" "32 10 1
48 20 2
144 30 3
1008 40 4
5008 50 5"

fm_check "flatmalloc classes -k 5: exactly the five sizes, rounded to 16"
out=$("$FM" classes -k 5 --png "$T/plain.png" "$f")
expect_eq "proposal" "$(head -n 1 <<<"$out")" "FLATMALLOC_CLASSES=32,48,144,1008,5008"
grep -qxF '# waste at the peak: proposal 0 B (0.00 %), default classes 672 B (2.27 %)' <<<"$out" ||
  fm_fail "waste line missing or wrong: $out"
fm_ok "waste: proposal 0 B, default classes 672 B (144->160, 1008->1024, 5008->5120)"
[ "$(head -c 4 "$T/plain.png" | od -An -c | tr -d ' ')" = "211PNG" ] || fm_fail "no PNG written: $out"
fm_ok "PNG written"
out=$("$FM" classes --no-png "$T/plain")   # the prefix stands for its FILE.PID parts; default k
expect_eq "default k (one class per size seen)" "$(head -n 1 <<<"$out")" "FLATMALLOC_CLASSES=32,48,144,1008,5008"
out=$("$FM" classes --reserve --no-png "$f")
expect_eq "--reserve" "$(head -n 1 <<<"$out")" "FLATMALLOC_CLASSES=32:0.05,48:0.16,144:0.72,1008:6.8,5008:42.25"
out=$("$FM" classes -k 3 --no-png "$f")
expect_eq "-k 3" "$(head -n 1 <<<"$out")" "FLATMALLOC_CLASSES=144,1008,5008"
grep -qxF '# waste at the peak: proposal 304 B (1.03 %), default classes 672 B (2.27 %)' <<<"$out" ||
  fm_fail "-k 3 waste line missing or wrong: $out"
fm_ok "-k 3 waste 304 B (32->144 once, 48->144 twice)"

fm_check "sizes threads: requests of 4 threads all counted, peak across threads"
fm_preload env FLATMALLOC_PROFILE="$T/thr" "$SIZES" threads || fm_fail "sizes threads exited with $?"
line=$(body "$(parts "$T/thr")" | grep '^80 ') || fm_fail "no 80-byte bucket"
read -r _ req peak <<<"$line"
[ "$req" -eq 4256 ] || fm_fail "80-byte requests: $req, expected 4256"
# every thread holds 1000 blocks, then (after a barrier) allocates 64 more: its 1025th allocation
# re-reads the other tables (every 64th does), which hold at least 3000 then, so the peak is at
# least 3000 + 1025; no estimate exceeds the true count, at most 4256
if [ "$peak" -lt 4025 ] || [ "$peak" -gt 4256 ]; then fm_fail "80-byte peak $peak, expected 4025-4256"; fi
fm_ok "80 B: 4256 requests, peak $peak"

fm_check "sizes fork: one file per process, the merge counts parent and children"
fm_preload env FLATMALLOC_PROFILE="$T/fork" "$SIZES" fork || fm_fail "sizes fork exited with $?"
[ "$(parts "$T/fork" | wc -l)" -eq 4 ] || fm_fail "expected 4 files (parent, 3 children): $(parts "$T/fork")"
n20=0
for f in $(parts "$T/fork"); do
  b=$(body "$f")
  if [ "$b" = "208 10 10" ]; then continue; fi
  [ "$b" = "$(printf '208 20 20\n3008 5 5')" ] || fm_fail "child file $f: $b"
  n20=$((n20 + 1))
done
[ "$n20" -eq 3 ] || fm_fail "expected 3 child files with 20 blocks of 208 and 5 of 3008"
fm_ok "parent: 10 x 208; each child: 20 x 208 and 5 x 3008 (inherited blocks not counted again)"
expect_eq "merged" "$("$FM" classes --dump "$T/fork")" "208 70 70 exact
3008 15 15 exact"

fm_check "sizes churn: 200 threads one after another reuse one table, nothing lost"
fm_preload env FLATMALLOC_PROFILE="$T/churn" "$SIZES" churn || fm_fail "sizes churn exited with $?"
f=$(parts "$T/churn")
expect_eq "96-byte bucket" "$(body "$f" | grep '^96 ')" "96 2000 10"
expect_eq "tables (main thread and the one the 200 threads pass on)" "$(grep '^tables ' "$f")" "tables 2"

fm_check "sizes forkthreads: fork while another thread holds blocks"
fm_preload env FLATMALLOC_PROFILE="$T/ft" "$SIZES" forkthreads || fm_fail "sizes forkthreads exited with $?"
[ "$(parts "$T/ft" | wc -l)" -eq 2 ] || fm_fail "expected 2 files: $(parts "$T/ft")"
child=$(for f in $(parts "$T/ft"); do grep -q '^400 30 ' "$f" || echo "$f"; done)
[ -n "$child" ] || fm_fail "no child file (both have the parent's 400 30 30)"
expect_eq "child: its own 5 + its thread's 7 blocks, not the 30 inherited" "$(body "$child" | grep '^400 ')" "400 12 12"
expect_eq "child: the vanished thread's table reused by the new thread" "$(grep '^tables ' "$child")" "tables 2"
expect_eq "merged 400-byte bucket" "$("$FM" classes --dump "$T/ft" | grep '^400 ')" "400 42 42 exact"

fm_check "flatmalloc profile -o F -- sizes fork: parts merged into F"
"$FM" profile -o "$T/wrapped" -- "$SIZES" fork 2>"$T/wrapped.err" || fm_fail "exit $?: $(cat "$T/wrapped.err")"
[ -z "$(parts "$T/wrapped")" ] || fm_fail "parts left: $(parts "$T/wrapped")"
expect_eq "merged file" "$(body "$T/wrapped")" "208 70 70
3008 15 15"
grep -q '^processes 4$' "$T/wrapped" || fm_fail "no 'processes 4' line in $T/wrapped"
expect_eq "classes of the merged file" "$("$FM" classes --no-png "$T/wrapped" | head -n 1)" "FLATMALLOC_CLASSES=208,3008"

fm_check "bad profiles: one line and exit status 1"
good=$(parts "$T/plain")
: >"$T/empty"
head -n 8 "$good" >"$T/truncated"           # cut after a size line: no end line
head -c 30 "$good" >"$T/cut"                # cut in the middle of a line
sed '1s/ 1$/ 2/' "$good" >"$T/v2"
printf 'hello\n' >"$T/foreign"
sed '$s/end 5/end 7/' "$good" >"$T/short"
bad() {   # bad FILE LINE
  local rc=0
  "$FM" classes --no-png "$1" >"$T/bad.out" 2>"$T/bad.err" || rc=$?
  [ "$rc" -eq 1 ] || fm_fail "$1: exit status $rc, expected 1"
  [ ! -s "$T/bad.out" ] || fm_fail "$1: printed to stdout: $(cat "$T/bad.out")"
  expect_eq "$(basename "$1")" "$(cat "$T/bad.err")" "$2"
}
bad "$T/missing" "flatmalloc classes: $T/missing: no such file (nor $T/missing.PID files)"
bad "$T/empty" "flatmalloc classes: $T/empty: empty file, not a flatmalloc profile"
bad "$T/truncated" "flatmalloc classes: $T/truncated: truncated profile (no end line: did the process exit normally?)"
bad "$T/cut" "flatmalloc classes: $T/cut: truncated profile (no end line: did the process exit normally?)"
bad "$T/short" "flatmalloc classes: $T/short: truncated profile (end says 7 size lines, found 5)"
bad "$T/v2" "flatmalloc classes: $T/v2: profile format version 2, this script reads version 1"
bad "$T/foreign" "flatmalloc classes: $T/foreign: not a flatmalloc profile"

fm_check "a profile path that cannot be created: one line, the program's status kept"
rc=0
fm_preload env FLATMALLOC_PROFILE=/nonexistent/dir/p "$SIZES" plain 2>"$T/nc.err" || rc=$?
[ "$rc" -eq 0 ] || fm_fail "sizes exited with $rc"
pid_line=$(cat "$T/nc.err")
[[ "$pid_line" =~ ^flatmalloc:\ FLATMALLOC_PROFILE:\ cannot\ create\ /nonexistent/dir/p\.[0-9]+$ ]] ||
  fm_fail "stderr: $pid_line"
fm_ok "$pid_line"
echo "PASS"
