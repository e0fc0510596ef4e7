# Shared by scripts/flatmalloc, scripts/test and scripts/bench: package installs and the build.
# Sourced, not run. Everything goes through Debian's packages; nothing is fetched otherwise.

fm_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
fm_build=${FM_BUILD_DIR:-$fm_top/build}   # not FLATMALLOC_*: the library rejects names it does not know

# fm_need_packages PKG... : installs the Debian packages that are not installed yet.
fm_need_packages() {
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "flatmalloc: missing Debian packages: ${missing[*]}" >&2
    echo "flatmalloc: install them as root: apt-get install ${missing[*]}" >&2
    return 1
  fi
  echo "flatmalloc: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  if ! apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; then
    apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

# fm_build_lib : configures (once) and builds; ninja does nothing when the library is current.
fm_build_lib() {
  fm_need_packages meson ninja-build gcc clang pkg-config || return 1
  local out
  if [ ! -f "$fm_build/build.ninja" ]; then
    # clang unless CC says otherwise: from the same source it makes the malloc+free pair 50
    # instructions against gcc's 60 (callgrind, bench/pairs 64, at b34fc10)
    out=$(CC=${CC:-clang} meson setup "$fm_build" "$fm_top" 2>&1) || { echo "$out" >&2; return 1; }
  fi
  out=$(ninja -C "$fm_build" 2>&1) || { echo "$out" >&2; return 1; }
}

# fm_peers : LIB (name -> the library to preload, '' for glibc) and all_allocs (the names, in
# order) for glibc and those of jemalloc, tcmalloc and mimalloc that are installed (Debian's
# packages); add_alloc NAME PATH adds one more.
add_alloc() { LIB[$1]=$2; all_allocs+=("$1"); }
fm_peers() {
  local multiarch peer name n d l
  multiarch=$(gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
  declare -gA LIB=()
  all_allocs=()
  add_alloc glibc ''
  for peer in "jemalloc libjemalloc.so.2" "tcmalloc libtcmalloc_minimal.so.4 libtcmalloc.so.4" \
              "mimalloc libmimalloc.so.2 libmimalloc.so.2.0"; do
    read -r name peer <<<"$peer"
    l=''
    for n in $peer; do
      for d in "/usr/lib/$multiarch" /usr/lib64 /usr/lib; do
        [ -z "$l" ] && [ -f "$d/$n" ] && l=$d/$n
      done
    done
    if [ -n "$l" ]; then add_alloc "$name" "$l"; else echo "flatmalloc: $name not found" >&2; fi
  done
}

# fm_xcpu : the host's speed now, `bench/scale xcpu`'s round trip of a cache line between two
# CPUs in ns (empty without the benchmark's build). bench/contention.sh and bench/mibench.sh
# record it before and after each run.
fm_xcpu() {
  [ -x "$fm_build/bench/scale" ] || return 0
  "$fm_build/bench/scale" xcpu 2>/dev/null | sed -n 's/^xcpu,round_trip_ns,//p' || true
}

# fm_load_start N : starts N busy processes (a shell loop each, at the caller's priority) so that
# a measurement sees a loaded machine the same way each time; fm_load_stop ends them (by their
# ids). bench/mibench.sh and bench/contention.sh take --load N.
fm_load_pids=()
fm_load_start() {
  local i
  for ((i = 0; i < $1; i++)); do
    bash -c 'while :; do :; done' &
    fm_load_pids+=($!)
  done
}
fm_load_stop() {
  local p
  for p in "${fm_load_pids[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${fm_load_pids[@]}"; do wait "$p" 2>/dev/null || true; done
  fm_load_pids=()
}
