# Shared by the tests in tests/sh/. Sourced, not run.
#
# Every script takes the path of libflatmalloc.so as its first argument and preloads it itself,
# only into the program under test (never into bash, strace, cmp and the like).
#   fm_setup "$@"        checks the library, clears FLATMALLOC_* from the environment, makes
#                        $FM_TMP (removed at exit) and sets FM_SO
#   fm_check TEXT        names the check that follows (printed; fm_fail repeats it)
#   fm_fail MESSAGE      prints "FAIL: <check>: MESSAGE" and exits 1
#   fm_ok MESSAGE        prints a passed detail
#   fm_preload CMD...    runs CMD with the library preloaded
#   fm_stats_verify FILE [MIN_PIDS]
#                        checks the FLATMALLOC_STATS=1 report in FILE (see below)
#   fm_strip_stats FILE  prints FILE without the report's lines
#   fm_helper NAME PATH  a helper program: PATH if given, else NAME.c compiled into $FM_TMP

fm_sh_dir=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
FM_CHECK="setup"

fm_check() {
  FM_CHECK=$1
  echo "check: $1"
}

fm_ok() {
  echo "  ok: $1"
}

fm_fail() {
  echo "FAIL: $FM_CHECK: $1" >&2
  exit 1
}

# fm_show FILE LABEL: the first lines of a file, for a failure message.
fm_show() {
  {
    echo "---- $2 ($1) ----"
    head -c 4000 "$1" 2>/dev/null || true
    echo "---- end of $2 ----"
  } >&2
}

fm_setup() {
  if [ $# -lt 1 ] || [ -z "$1" ]; then
    echo "usage: $0 PATH/TO/libflatmalloc.so [helper programs...]" >&2
    exit 1
  fi
  FM_SO=$(readlink -f "$1")
  [ -f "$FM_SO" ] || fm_fail "library $1 does not exist (build it first)"
  # The tests choose their settings; none may leak in from the caller's environment.
  local v
  for v in $(env | sed -n 's/^\(FLATMALLOC_[A-Za-z0-9_]*\)=.*/\1/p'); do
    unset "$v"
  done
  # Baselines run on glibc's malloc as it comes (meson test sets MALLOC_PERTURB_).
  unset LD_PRELOAD MALLOC_PERTURB_ MALLOC_CHECK_ GLIBC_TUNABLES
  FM_TMP=$(mktemp -d "${TMPDIR:-/tmp}/flatmalloc-sh.XXXXXX")
  trap 'rm -rf "$FM_TMP"' EXIT
  echo "library: $FM_SO"
}

fm_preload() {
  env LD_PRELOAD="$FM_SO" "$@"
}

fm_helper() {
  local name=$1 path=${2:-}
  if [ -n "$path" ]; then
    [ -x "$path" ] || fm_fail "helper program $path is missing"
    echo "$path"
    return
  fi
  cc -O2 -std=gnu11 -fno-builtin -pthread -o "$FM_TMP/$name" "$fm_sh_dir/$name.c" >&2 ||
    fm_fail "could not compile $fm_sh_dir/$name.c"
  echo "$FM_TMP/$name"
}

fm_strip_stats() {
  grep -v '^flatmalloc\[[0-9]*\]: ' "$1" || true
}

# fm_stats_verify FILE [MIN_PIDS]
# FILE holds a program's stderr, run with FLATMALLOC_STATS=1. Checks that:
#  - every line that starts with "flatmalloc" is a report line of the documented form
#    (header, class line, "large ..." line, "threads ..." line, "arenas ..." line when the
#    program made arenas, "pool ..." line) and nothing else (no error line);
#  - every process (PID) that printed a header printed a "pool" line and a "large" line, each
#    once, after its header, and a class line only between them;
#  - class lines: size a multiple of 16, in_use <= peak, share% within 0..100;
#    large: in_use <= peak; pool: committed <= reserved, reserved > 0;
#  - at least one pool line, at least one class line with a nonzero peak, and at least
#    MIN_PIDS (default 1) processes reporting.
# Prints a summary: processes, class lines, the largest class peak.
fm_stats_verify() {
  local file=$1 min_pids=${2:-1} out
  if ! out=$(awk -v min_pids="$min_pids" '
    function bad(msg) { print "line " NR ": " msg ": " $0; failed = 1; exit 1 }
    /^flatmalloc/ {
      if (!match($0, /^flatmalloc\[[0-9]+\]: /)) bad("not a statistics line")
      pid = substr($0, 12, RLENGTH - 14)
      rest = substr($0, RLENGTH + 1)
      n = split(rest, f, " ")
      if (rest ~ /^class +size +in_use +peak +spans +peak_spans +reserved +borrows +exhausted$/) {
        if (pid in header) bad("second header from the same process")
        header[pid] = 1; state[pid] = "classes"; pids++
        next
      }
      if (!(pid in header)) bad("report line before its header")
      if (rest ~ /^ *[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+ +[0-9]+$/) {
        if (state[pid] != "classes") bad("class line after the large line")
        size = f[2] + 0; in_use = f[3] + 0; peak = f[4] + 0; spans = f[5] + 0; peak_spans = f[6] + 0
        if (size <= 0 || size % 16 != 0) bad("class size is not a positive multiple of 16")
        if (in_use > peak) bad("class in_use above peak")
        if (spans > peak_spans) bad("class spans above peak_spans")
        if (in_use > 0 && spans == 0) bad("class has blocks in use but no span")
        classes++
        if (peak > 0) peaked++
        if (peak > maxpeak) { maxpeak = peak; maxsize = size }
        next
      }
      if (rest ~ /^large in_use=[0-9]+$/) {
        if (state[pid] != "classes") bad("large line out of place")
        state[pid] = "large"
        next
      }
      if (rest ~ /^threads with_cache=[0-9]+ with_tag=[0-9]+ caches_bytes=[0-9]+ most_moved=[0-9]+$/) {
        if (state[pid] != "large") bad("threads line out of place")
        split(f[2], tc, "="); split(f[3], tg, "=")
        if (tg[2] + 0 > tc[2] + 0) bad("more threads with a tag than with a cache")
        next
      }
      if (rest ~ /^arenas live=[0-9]+ created=[0-9]+ held=[0-9]+ peak=[0-9]+ runs_taken=[0-9]+ runs_given=[0-9]+ resets=[0-9]+$/) {
        if (state[pid] != "large") bad("arenas line out of place")
        next
      }
      if (rest ~ /^pool reserved=[0-9]+ in_use=[0-9]+ peak=[0-9]+ free_with_pages=[0-9]+ committed=[0-9]+ returned=[0-9]+ huge=[0-9]+$/) {
        if (state[pid] != "large") bad("pool line without a large line before it")
        split(f[2], a, "="); split(f[3], u, "="); split(f[4], pk, "="); split(f[6], b, "=")
        if (a[2] + 0 <= 0) bad("pool reserved is zero")
        if (b[2] + 0 > a[2] + 0) bad("pool committed above reserved")
        if (u[2] + 0 > pk[2] + 0) bad("pool in_use above peak")
        state[pid] = "done"; pools++
        next
      }
      bad("not a statistics line")
    }
    END {
      if (failed) exit 1
      for (p in state) if (state[p] != "done") { print "process " p " printed an incomplete report"; exit 1 }
      if (pools < 1) { print "no \"flatmalloc[PID]: pool reserved=N ...\" line"; exit 1 }
      if (peaked < 1) { print "no class line with a nonzero peak"; exit 1 }
      if (pids < min_pids) { print "only " pids " process(es) reported statistics, expected at least " min_pids; exit 1 }
      print pids " process(es) reported; " classes " class lines, " peaked " with a nonzero peak; largest peak " maxpeak " blocks of " maxsize " B"
    }' "$file"); then
    fm_show "$file" "stderr"
    fm_fail "statistics report: $out"
  fi
  fm_ok "statistics: $out"
}

# fm_run NAME MODE CMD...: runs CMD with stdout in $FM_TMP/NAME.MODE.out and stderr in
# $FM_TMP/NAME.MODE.err. MODE glibc: as it is; MODE fm: with the library preloaded and
# FLATMALLOC_STATS=1 (put more settings in front of CMD with env). Fails if CMD exits non-zero.
fm_run() {
  local name=$1 mode=$2
  shift 2
  local rc=0 base="$FM_TMP/$name.$mode"
  case $mode in
    glibc) "$@" >"$base.out" 2>"$base.err" || rc=$? ;;
    fm) env LD_PRELOAD="$FM_SO" FLATMALLOC_STATS=1 "$@" >"$base.out" 2>"$base.err" || rc=$? ;;
    *) fm_fail "fm_run: bad mode $mode" ;;
  esac
  if [ $rc -ne 0 ]; then
    fm_show "$base.err" "stderr"
    fm_fail "$* ($mode) exited with status $rc"
  fi
}

# fm_same FILE1 FILE2 WHAT: the two files must be identical.
fm_same() {
  if ! cmp -s "$1" "$2"; then
    diff "$1" "$2" 2>/dev/null | head -20 >&2 || true
    fm_fail "$3 differs with flatmalloc ($2) from glibc ($1)"
  fi
}

# fm_compare NAME [MIN_PIDS]: after fm_run NAME glibc ... and fm_run NAME fm ...: the same
# stdout, the same stderr apart from the statistics report, and a valid report.
fm_compare() {
  fm_compare_output "$1"
  fm_stats_verify "$FM_TMP/$1.fm.err" "${2:-1}"
}

# fm_compare_output NAME: fm_compare without the statistics check.
fm_compare_output() {
  local b="$FM_TMP/$1.glibc" f="$FM_TMP/$1.fm"
  fm_same "$b.out" "$f.out" "stdout"
  fm_strip_stats "$f.err" >"$f.err.stripped"
  fm_same "$b.err" "$f.err.stripped" "stderr (without the statistics report)"
  fm_ok "same output as with glibc ($(wc -c <"$f.out") bytes on stdout)"
}
