#!/usr/bin/env bash
# The sampling heap profiler (suite 'heap').
#
# usage: heap.sh PATH/TO/libflatmalloc.so PATH/TO/sites PATH/TO/scripts/flatmalloc
#
# sites (sites.c) has three known call sites: one keeps 64 MiB live, one 8 MiB (posix_memalign),
# one allocates 1 GiB and frees it. At one sample per 128 KiB, google-pprof must rank them:
#   --inuse_space: site_keep64 first with 80-95 %, site_keep8 second;
#   --alloc_space: site_churn first.
# Checked through `flatmalloc heap -o F --sample 128K -- sites plain` (the program's output
# unchanged, one F.PID, --svg and --collapsed work; without --sample the profile's header names
# the default interval, 512 KiB), in a forked child (one file per process; the child's
# ranks as above, the parent's holds none of the sites), across threads (blocks one thread
# allocates and another frees leave the in-use report), after flatmalloc_heap_dump (the dump
# ranks site_keep64 first; the exit profile, after site_keep64's blocks are freed, site_keep8),
# after realloc grew a buffer to 40 MiB in place (counted at its size, between the two),
# and after FLATMALLOC_HEAP_SIGNAL's signal (FILE.PID.1 as the dump). Bad settings stop the
# program with one line. The ranks are statistical: at 128 KiB the 8 MiB site has about 64
# samples (sd 12 %) and the 64 MiB site's 1,024 blocks of 64 KiB about 400 (sd 4 %), so
# site_keep64's share (89 % expected) leaves 80-95 % about once in 10^5 checks. (At the
# default 512 KiB it did in about 1.4 % of checks: 16 and 120 samples, sd 25 % and 9 %.)
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/../sh/lib.sh"
fm_setup "$@"
SITES=${2:?sites program}
FM=${3:?scripts/flatmalloc}
export FM_LIBRARY=$FM_SO
T=$FM_TMP
command -v google-pprof >/dev/null || fm_fail "google-pprof is missing (Debian package google-perftools)"

parts() {   # the FILE.PID files of prefix $1
  local f
  for f in "$1".*; do [[ "$f" =~ \.[0-9]+$ ]] && echo "$f"; done
  return 0
}

# report KIND FILE: google-pprof --text --KIND's lines after "Total:" (flat, flat%, sum%, cum, cum%, name)
report() {
  google-pprof --text "--$1" "$SITES" "$2" 2>"$T/pprof.err" >"$T/pprof.out" ||
    { fm_show "$T/pprof.err" "pprof stderr"; fm_fail "google-pprof --text --$1 $2 failed"; }
  sed -n '/^Total:/,$p' "$T/pprof.out" | sed 1d
}

# ranks FILE: site_keep64 first in use with 80-95 %, site_keep8 second; site_churn first allocated
ranks() {
  local f=$1 first second share
  report inuse_space "$f" >"$T/inuse"
  first=$(awk 'NR == 1 { print $6 }' "$T/inuse")
  second=$(awk 'NR == 2 { print $6 }' "$T/inuse")
  share=$(awk 'NR == 1 { sub("%", "", $2); print int($2) }' "$T/inuse")
  if [ "$first" != site_keep64 ] || [ "$second" != site_keep8 ] || [ "$share" -lt 80 ] || [ "$share" -gt 95 ]; then
    fm_show "$T/inuse" "--inuse_space"
    fm_fail "--inuse_space: expected site_keep64 first with 80-95 %, then site_keep8; got $first ($share %), $second"
  fi
  fm_ok "--inuse_space: site_keep64 $share %, then site_keep8"
  report alloc_space "$f" >"$T/alloc"
  first=$(awk 'NR == 1 { print $6 }' "$T/alloc")
  [ "$first" = site_churn ] || { fm_show "$T/alloc" "--alloc_space"; fm_fail "--alloc_space: expected site_churn first, got $first"; }
  fm_ok "--alloc_space: site_churn first ($(awk 'NR == 1 { print $1 " MB" }' "$T/alloc"))"
}

fm_check "flatmalloc heap -o F --sample 128K -- sites plain: output unchanged, one profile that pprof ranks"
"$SITES" plain >"$T/want" || fm_fail "sites plain without the library failed"
"$FM" heap -o "$T/plain" --sample 128K -- "$SITES" plain >"$T/got" 2>"$T/err" || { fm_show "$T/err" stderr; fm_fail "exit status $?"; }
cmp -s "$T/want" "$T/got" || { fm_show "$T/got" stdout; fm_fail "the program's output changed"; }
grep -q "google-pprof --text" "$T/err" || { fm_show "$T/err" stderr; fm_fail "no hint to google-pprof on stderr"; }
mapfile -t files < <(parts "$T/plain")
[ ${#files[@]} -eq 1 ] || fm_fail "expected one profile, found ${#files[@]}"
head -n 1 "${files[0]}" | grep -Eq '^heap profile: +[0-9]+: +[0-9]+ \[ +[0-9]+: +[0-9]+\] @ heap_v2/131072$' ||
  fm_fail "header: $(head -n 1 "${files[0]}")"
"$FM" heap -o "$T/default" -- "$SITES" plain >/dev/null 2>&1 || fm_fail "without --sample: exit status $?"
mapfile -t dfiles < <(parts "$T/default")
[ ${#dfiles[@]} -eq 1 ] && head -n 1 "${dfiles[0]}" | grep -Eq ' @ heap_v2/524288$' ||
  fm_fail "without --sample: expected one profile whose header names 524288, got ${dfiles[*]:-none}: $(head -n 1 "${dfiles[0]:-/dev/null}")"
grep -q '^MAPPED_LIBRARIES:$' "${files[0]}" || fm_fail "no MAPPED_LIBRARIES section"
ranks "${files[0]}"

fm_check "google-pprof --svg and --collapsed read the profile"
google-pprof --svg "$SITES" "${files[0]}" >"$T/svg" 2>/dev/null || fm_fail "--svg failed"
grep -q '<svg' "$T/svg" && grep -q site_keep64 "$T/svg" || fm_fail "--svg: no graph naming site_keep64"
google-pprof --collapsed --inuse_space "$SITES" "${files[0]}" >"$T/collapsed" 2>/dev/null || fm_fail "--collapsed failed"
grep -Eq '(^|;)site_keep64(<[0-9a-f]+>)? [0-9]+$' "$T/collapsed" || { fm_show "$T/collapsed" collapsed; fm_fail "--collapsed: no stack ending in site_keep64"; }
fm_ok "svg and collapsed stacks name site_keep64"

export FLATMALLOC_HEAP_SAMPLE=128K   # the runs below rank the sites at one sample per 128 KiB

fm_check "fork: one profile per process; the child's ranks the sites, the parent's has none"
fm_preload env FLATMALLOC_HEAP="$T/fork" "$SITES" fork >"$T/got" || fm_fail "sites fork exited with $?"
mapfile -t files < <(parts "$T/fork")
[ ${#files[@]} -eq 2 ] || fm_fail "expected two profiles, found ${#files[@]}"
child=$(grep -l . "${files[@]}" | while read -r f; do report inuse_space "$f" | grep -q site_keep64 && echo "$f"; done)
[ "$(echo "$child" | grep -c .)" = 1 ] || fm_fail "expected exactly one profile with site_keep64, got: $child"
ranks "$child"
for f in "${files[@]}"; do
  [ "$f" = "$child" ] && continue
  report alloc_space "$f" | grep -q site_ || fm_ok "the parent's profile ($(basename "$f")) holds no site"
  report alloc_space "$f" | grep -q site_ && fm_fail "the parent's profile holds a site's blocks"
done

fm_check "threads: each site in its own thread, blocks freed by another thread leave the in-use report"
fm_preload env FLATMALLOC_HEAP="$T/threads" "$SITES" threads >"$T/got" || fm_fail "sites threads exited with $?"
mapfile -t files < <(parts "$T/threads")
[ ${#files[@]} -eq 1 ] || fm_fail "expected one profile, found ${#files[@]}"
ranks "${files[0]}"
if awk '$6 == "site_passed" && $1 + 0 > 0.5 { found = 1 } END { exit !found }' "$T/inuse"; then
  fm_show "$T/inuse" "--inuse_space"
  fm_fail "site_passed's blocks, freed by the main thread, are still in use"
fi
grep -q ' site_passed$' "$T/alloc" || fm_fail "--alloc_space does not show site_passed"
fm_ok "site_passed: in the allocated report, not in use"

fm_check "flatmalloc_heap_dump: the dump ranks as above; at exit site_keep64 is freed"
fm_preload env FLATMALLOC_HEAP="$T/dump" "$SITES" dump "$T/on-demand" >"$T/got" || fm_fail "sites dump exited with $?"
[ -s "$T/on-demand" ] || fm_fail "no dump at $T/on-demand"
ranks "$T/on-demand"
mapfile -t files < <(parts "$T/dump")
[ ${#files[@]} -eq 1 ] || fm_fail "expected one profile at exit, found ${#files[@]}"
report inuse_space "${files[0]}" >"$T/inuse"
[ "$(awk 'NR == 1 { print $6 }' "$T/inuse")" = site_keep8 ] || { fm_show "$T/inuse" inuse; fm_fail "at exit site_keep8 is not first"; }
fm_ok "at exit: site_keep8 first, site_keep64's sampled blocks were released"

fm_check "realloc: a buffer grown from 1 MiB to 40 MiB (in place) is counted at its size"
fm_preload env FLATMALLOC_HEAP="$T/grow" "$SITES" grow >"$T/got" || fm_fail "sites grow exited with $?"
mapfile -t files < <(parts "$T/grow")
[ ${#files[@]} -eq 1 ] || fm_fail "expected one profile, found ${#files[@]}"
report inuse_space "${files[0]}" >"$T/inuse"
order=$(awk 'NR <= 3 { printf "%s ", $6 }' "$T/inuse")
grow=$(awk '$6 == "site_grow" { print int($1) }' "$T/inuse")
if [ "$order" != "site_keep64 site_grow site_keep8 " ] || [ "${grow:-0}" -lt 20 ] || [ "$grow" -gt 60 ]; then
  fm_show "$T/inuse" "--inuse_space"
  fm_fail "expected site_keep64, site_grow (20-60 MB), site_keep8; got $order(site_grow ${grow:-0} MB)"
fi
fm_ok "--inuse_space: $order(site_grow $grow MB)"

fm_check "FLATMALLOC_HEAP_SIGNAL=USR2: the signal writes FILE.PID.1"
fm_preload env FLATMALLOC_HEAP="$T/sig" FLATMALLOC_HEAP_SIGNAL=USR2 "$SITES" signal >"$T/got" || fm_fail "sites signal exited with $?"
mapfile -t files < <(ls "$T"/sig.*.1 2>/dev/null)
[ ${#files[@]} -eq 1 ] || fm_fail "expected one FILE.PID.1, found ${#files[@]}"
ranks "${files[0]}"

fm_check "bad settings stop the program with one line"
for kv in FLATMALLOC_HEAP= FLATMALLOC_HEAP_SAMPLE=0 FLATMALLOC_HEAP_SAMPLE=1x FLATMALLOC_HEAP_SIGNAL=KILL FLATMALLOC_HEAP_SIGNAL=99 FLATMALLOC_HEAP_SIGNAL=; do
  rc=0
  fm_preload env "$kv" /bin/true 2>"$T/err" || rc=$?
  [ "$rc" = 1 ] && [ "$(wc -l <"$T/err")" = 1 ] && grep -q "^flatmalloc: ${kv%%=*}=" "$T/err" ||
    { fm_show "$T/err" stderr; fm_fail "$kv: exit $rc"; }
  fm_ok "$(cat "$T/err")"
done

fm_check "FLATMALLOC_HEAP with FLATMALLOC_CHECK: ignored, saying so"
fm_preload env FLATMALLOC_HEAP="$T/checked" FLATMALLOC_CHECK=1 /bin/true 2>"$T/err" || fm_fail "exit $?"
grep -q "FLATMALLOC_HEAP is ignored" "$T/err" || fm_fail "no line saying the profiler is off"
[ -z "$(parts "$T/checked")" ] || fm_fail "a profile was written"
fm_ok "$(cat "$T/err")"

echo "heap: all checks passed"
