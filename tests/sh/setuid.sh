#!/usr/bin/env bash
# Settings are ignored in setuid programs (suite 'setuid').
#
# usage: setuid.sh PATH/TO/libflatmalloc.so [PATH/TO/setuid_probe]
#
# A set-user-ID-root copy of setuid_probe, started by user nobody (65534) with the library
# preloaded, runs in secure mode (AT_SECURE): every FLATMALLOC_* variable must be ignored. The
# dynamic loader preloads a library into such a program only by a bare name, from a standard
# library directory, and only if the file is itself set-user-ID (ld.so(8)); so the test copies
# the library there (mode 4755, a name of its own) and removes it at exit.
# The same settings given to a plain (not setuid) copy, with the same library, must take effect:
# that shows the test passes the settings through. Needs root (CI runs as root); as any other
# user it fails, saying why: a skipped test proves nothing.
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"

fm_check "running as root"
if [ "$(id -u)" -ne 0 ]; then
  fm_fail "this test must run as root (uid $(id -u) here): it installs a set-user-ID copy of the library in the system's library directory and a setuid-root program, then runs them as nobody. Run it as root, as CI does"
fi
command -v setpriv >/dev/null || fm_fail "setpriv (util-linux) is missing"
fm_ok "uid 0"

PROBE=$(fm_helper setuid_probe "${2:-}")
libc=$(ldd "$PROBE" | awk '$1 == "libc.so.6" { print $3 }')
[ -n "$libc" ] || fm_fail "cannot find the probe's libc.so.6 with ldd"
libdir=$(dirname "$libc") # a standard directory: the loader found libc there
libname=libfm-setuid-test-$$.so
syslib=$libdir/$libname
# a directory every user can reach, on a file system that honours the set-user-ID bit
base=
for d in /tmp /var/tmp /usr/local/src; do
  if [ -d "$d" ] && ! findmnt -n -o OPTIONS -T "$d" 2>/dev/null | grep -qw nosuid; then
    base=$d
    break
  fi
done
[ -n "$base" ] || fm_fail "/tmp, /var/tmp and /usr/local/src are all on nosuid mounts: no place for a setuid program"
dir=$(mktemp -d "$base/flatmalloc-setuid.XXXXXX")
trap 'rm -f "$syslib"; rm -rf "$dir" "$FM_TMP"' EXIT
trap 'exit 1' INT TERM HUP
chmod 755 "$dir"
cp "$PROBE" "$dir/setuid_probe"
cp "$PROBE" "$dir/plain_probe"
chown root:root "$dir/setuid_probe" "$dir/plain_probe"
chmod 4755 "$dir/setuid_probe"
chmod 755 "$dir/plain_probe"
cp "$FM_SO" "$syslib"
chown root:root "$syslib"
chmod 4755 "$syslib"
echo "library copy: $syslib (mode 4755); programs in $dir"

VARS=(FLATMALLOC_POOL FLATMALLOC_STATS FLATMALLOC_CLASSES FLATMALLOC_CHECK FLATMALLOC_PREFAULT FLATMALLOC_HEAP FLATMALLOC_HEAP_SAMPLE FLATMALLOC_HEAP_SIGNAL FLATMALLOC_FOO MALLOC_PERTURB_ MALLOC_TRIM_THRESHOLD_ MALLOC_ARENA_MAX GLIBC_TUNABLES)
out=$FM_TMP/out
err=$FM_TMP/err

# run_as_nobody PROGRAM SETTING=VALUE...: PROGRAM (setuid_probe or plain_probe) as user nobody,
# the library preloaded by its bare name; sets rc, stdout in $out, stderr in $err.
run_as_nobody() {
  local prog=$1
  shift
  rc=0
  setpriv --reuid=65534 --regid=65534 --clear-groups \
    env -i PATH=/usr/bin:/bin "$@" LD_PRELOAD="$libname" "$dir/$prog" "${VARS[@]}" >"$out" 2>"$err" || rc=$?
}

field() { sed -n "s/^$1 //p" "$out"; }

# secure SETTING=VALUE...: the setuid probe runs, in secure mode, under flatmalloc, sees each
# setting in its environment, prints nothing on stderr and has the default pool.
default_pool=
secure() {
  local desc="(no settings)"
  [ $# -eq 0 ] || desc=$(printf '%q ' "$@")
  fm_check "setuid-root program run by nobody ignores: $desc"
  run_as_nobody setuid_probe "$@"
  if [ "$rc" -ne 0 ]; then
    fm_show "$out" stdout
    fm_show "$err" stderr
    fm_fail "the setuid program exited with status $rc"
  fi
  [ "$(field ids)" = "ruid=65534 euid=0 secure=1" ] || {
    fm_show "$out" stdout
    fm_fail "not a setuid-root run in secure mode: $(field ids) (is $dir on a nosuid mount, or no_new_privs set?)"
  }
  [ "$(field flatmalloc)" != none ] && [ "$(field maps)" = yes ] || {
    fm_show "$out" stdout
    fm_fail "the program did not run under flatmalloc (the loader did not preload $syslib)"
  }
  [ "$(field alloc)" = ok ] || fm_fail "allocation failed: $(cat "$out")"
  local s
  for s in "$@"; do
    [[ $s == *$'\n'* ]] && s=${s%%$'\n'*} # the probe prints a value's first line
    grep -qxF "env $s" "$out" || fm_fail "the program does not see $(printf %q "$s") in its environment"
  done
  if [ -s "$err" ]; then
    fm_show "$err" stderr
    fm_fail "something was printed on stderr"
  fi
  local pool
  pool=$(field pool)
  [ -n "$pool" ] && [ "$pool" -gt 0 ] || fm_fail "no pool size reported"
  if [ -z "$default_pool" ]; then
    default_pool=$pool
  else
    [ "$pool" = "$default_pool" ] || fm_fail "pool=$pool, not the default pool ($default_pool)"
  fi
  fm_ok "exit 0, nothing on stderr, pool=$pool, flatmalloc $(field flatmalloc)"
}

# plain_rejects LINE SETTING=VALUE...: the plain copy, same user and library, is stopped with LINE.
plain_rejects() {
  local want=$1
  shift
  fm_check "the same settings stop a program that is not setuid: $*"
  run_as_nobody plain_probe "$@"
  [ "$rc" -eq 1 ] && printf '%s\n' "$want" | cmp -s - "$err" || {
    fm_show "$out" stdout
    fm_show "$err" stderr
    fm_fail "exit status $rc, expected 1 and exactly the line: $want"
  }
  fm_ok "$want"
}

echo "== the settings reach the program and work when it is not setuid =="
fm_check "plain program as nobody: FLATMALLOC_STATS=1 prints the report"
run_as_nobody plain_probe FLATMALLOC_STATS=1
[ "$rc" -eq 0 ] || { fm_show "$err" stderr; fm_fail "exit status $rc"; }
grep -q "^ids ruid=65534 euid=65534 secure=0$" "$out" || fm_fail "unexpected ids: $(field ids)"
fm_stats_verify "$err"
plain_rejects "flatmalloc: FLATMALLOC_POOL=1K: pool too small (it needs room for its tables and one span of the largest class)" \
  FLATMALLOC_POOL=1K
plain_rejects "flatmalloc: FLATMALLOC_CLASSES=16:50,24: class sizes must be multiples of 16" FLATMALLOC_CLASSES=16:50,24
plain_rejects "flatmalloc: FLATMALLOC_FOO=1: unknown setting (known: FLATMALLOC_POOL, FLATMALLOC_CLASSES, FLATMALLOC_LARGE, FLATMALLOC_RETAIN, FLATMALLOC_RETAIN_DELAY, FLATMALLOC_PREFAULT, FLATMALLOC_HUGEPAGES, FLATMALLOC_STATS, FLATMALLOC_CHECK, FLATMALLOC_PROFILE, FLATMALLOC_HEAP, FLATMALLOC_HEAP_SAMPLE, FLATMALLOC_HEAP_SIGNAL)" \
  FLATMALLOC_FOO=1

echo "== in the setuid program every FLATMALLOC_* setting is ignored =="
secure
secure FLATMALLOC_STATS=1
secure FLATMALLOC_POOL=1K
secure FLATMALLOC_POOL=64M
secure FLATMALLOC_CLASSES=16:50,24
secure $'FLATMALLOC_CLASSES=\n\x1b[2Jbad'
secure FLATMALLOC_FOO=1
secure FLATMALLOC_CHECK=yes FLATMALLOC_PREFAULT=1
secure FLATMALLOC_STATS=1 FLATMALLOC_POOL=1K FLATMALLOC_CLASSES=x FLATMALLOC_CHECK=1 FLATMALLOC_FOO=1
secure FLATMALLOC_HEAP="$dir/heap" FLATMALLOC_HEAP_SAMPLE=1 FLATMALLOC_HEAP_SIGNAL=KILL
fm_check "the setuid program wrote no heap profile"
[ -z "$(ls "$dir" | grep '^heap')" ] || fm_fail "FLATMALLOC_HEAP wrote $(ls "$dir" | grep '^heap')"
fm_ok "no $dir/heap.*"

echo "== glibc's settings too (docs/glibc.md): perturb byte and checking mode =="
fm_check "a plain program: MALLOC_PERTURB_=85 fills freed blocks with 0x55, MALLOC_CHECK_=3 is checking mode"
run_as_nobody plain_probe MALLOC_PERTURB_=85 MALLOC_CHECK_=3
[ "$rc" -eq 0 ] && [ "$(field freed)" = 55 ] && [ "$(field usable1)" = 1 ] || {
  fm_show "$out" stdout
  fm_show "$err" stderr
  fm_fail "status $rc, freed=$(field freed) (expected 55), usable1=$(field usable1) (expected 1)"
}
fm_ok "freed=55 usable1=1"
# (glibc erases MALLOC_CHECK_ and glibc.malloc.check from a setuid program's environment itself;
# the perturb byte and the others stay there, and flatmalloc ignores them)
secure MALLOC_PERTURB_=85 GLIBC_TUNABLES=glibc.malloc.perturb=85:glibc.malloc.trim_threshold=-1 MALLOC_TRIM_THRESHOLD_=-1 MALLOC_ARENA_MAX=1
fm_check "the setuid program's freed block is not perturbed"
[ "$(field freed)" = 11 ] && [ "$(field usable1)" -gt 1 ] || fm_fail "freed=$(field freed) (expected 11), usable1=$(field usable1)"
fm_ok "freed=11 usable1=$(field usable1)"
secure MALLOC_PERTURB_=abc GLIBC_TUNABLES=glibc.malloc.perturb=999
echo "setuid: all checks passed"
