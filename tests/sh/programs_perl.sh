#!/usr/bin/env bash
# perl under flatmalloc (suite 'programs').
#
# usage: programs_perl.sh PATH/TO/libflatmalloc.so
#
# workload.pl generates 60k lines of text, builds hashes of words and word pairs, runs regexes
# (captures, s///e, tr, split) and grows and drops big strings; its output is sorted and
# digested. Under flatmalloc (FLATMALLOC_STATS=1) it must print exactly glibc's output and a
# valid statistics report with a class that was used. Then perl forks without exec a child that
# builds a hash and exits: the child prints its own report under its own PID, the parent too.
set -euo pipefail
export LC_ALL=C
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
fm_setup "$@"
command -v perl >/dev/null || fm_fail "perl is not installed"
WORKLOAD=$fm_sh_dir/workload.pl

fm_check "perl workload.pl with glibc"
fm_run pl glibc perl "$WORKLOAD"
grep -q '^digest: [0-9a-f]\{32\}$' "$FM_TMP/pl.glibc.out" || fm_fail "no digest line in the output"
fm_ok "$(tail -n 1 "$FM_TMP/pl.glibc.out")"

fm_check "perl workload.pl under flatmalloc: same output, statistics"
fm_run pl fm perl "$WORKLOAD"
fm_compare pl

fm_check "perl forks (no exec) a child that builds a hash: each process prints its own report"
cat >"$FM_TMP/fork.pl" <<'PERL'
$| = 1;
my $pid = fork() // die "fork: $!";
if ($pid == 0) {
    my %h = map { ("key$_" => [$_]) } 1 .. 100000;
    print "child $$ built ", scalar(keys %h), "\n";
    exit 0;
}
waitpid($pid, 0);
die "child failed: $?" if $?;
print "parent $$ done\n";
PERL
rc=0
fm_preload env FLATMALLOC_STATS=1 perl "$FM_TMP/fork.pl" >"$FM_TMP/fork.out" 2>"$FM_TMP/fork.err" || rc=$?
[ $rc -eq 0 ] || {
  fm_show "$FM_TMP/fork.err" "stderr"
  fm_fail "perl fork.pl exited with status $rc"
}
child=$(sed -n 's/^child \([0-9]*\) built 100000$/\1/p' "$FM_TMP/fork.out")
parent=$(sed -n 's/^parent \([0-9]*\) done$/\1/p' "$FM_TMP/fork.out")
if [ -z "$child" ] || [ -z "$parent" ]; then
  fm_show "$FM_TMP/fork.out" "stdout"
  fm_fail "unexpected output"
fi
fm_stats_verify "$FM_TMP/fork.err" 2
for p in "$child" "$parent"; do
  grep -q "^flatmalloc\[$p\]: pool reserved=" "$FM_TMP/fork.err" || {
    fm_show "$FM_TMP/fork.err" "stderr"
    fm_fail "no report under PID $p"
  }
done
fm_ok "reports from the parent ($parent) and the child ($child)"

echo "programs_perl: all checks passed"
