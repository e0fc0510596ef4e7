// mapfind.cc: random finds in a large std::map, for bench/largeheap.sh (issue 52).
// `mapfind ENTRIES FINDS SEED`: builds a std::map<uint64_t, uint64_t> of ENTRIES keys inserted in
// a random order (one 64-byte node each through operator new), then does FINDS finds of random
// keys that are in the map. Prints on stdout a checksum of the values found (the same under every
// allocator), on stderr `timed: S s cpu: S` (clock_gettime around the finds only: CLOCK_MONOTONIC,
// then the thread's CPU time) and the AnonHugePages line of /proc/self/smaps_rollup.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

extern "C" {
#include "../rng.h"
#include "smaps.h"
}

static uint64_t key(uint64_t i) { return i * 0x9e3779b97f4a7c15ull; } // distinct, scattered

static double now(clockid_t c)
{
  timespec t;
  clock_gettime(c, &t);
  return double(t.tv_sec) + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv)
{
  uint64_t n = argc > 1 ? std::strtoull(argv[1], nullptr, 0) : 4u << 20;
  long finds = argc > 2 ? std::atol(argv[2]) : 4L << 20;
  rng_state = argc > 3 ? std::strtoull(argv[3], nullptr, 0) : 52;
  auto *order = new uint64_t[n];
  for (uint64_t i = 0; i < n; i++)
    order[i] = i;
  for (uint64_t i = n - 1; i > 0; i--) {
    uint64_t j = rng() % (i + 1), t = order[i];
    order[i] = order[j];
    order[j] = t;
  }
  auto *m = new std::map<uint64_t, uint64_t>;
  for (uint64_t i = 0; i < n; i++)
    m->emplace(key(order[i]), order[i]);
  delete[] order;

  uint64_t sum = m->size();
  double t0 = now(CLOCK_MONOTONIC), c0 = now(CLOCK_THREAD_CPUTIME_ID);
  for (long f = 0; f < finds; f++)
    sum += m->find(key(rng() % n))->second;
  double t1 = now(CLOCK_MONOTONIC), c1 = now(CLOCK_THREAD_CPUTIME_ID);
  std::printf("%llu\n", static_cast<unsigned long long>(sum));
  std::fprintf(stderr, "timed: %.3f s cpu: %.3f\n", t1 - t0, c1 - c0);
  hugepages_report();
  return 0; // the map stays: its teardown is not what this measures
}
