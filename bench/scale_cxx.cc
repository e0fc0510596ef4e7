// scale_cxx.cc: the `map` mode of bench/scale (see scale.c): a std::map<int,int> of ENTRIES
// entries built in a scrambled key order, then torn down. Each node is one operator new of a
// ~40 B node (it reaches malloc), so the build is ENTRIES mallocs interleaved with the tree's
// cache misses, and the teardown is ENTRIES frees in the tree's post-order, not allocation order.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <map>

namespace {

double now_s()
{
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// A bijection on 32-bit values: every i gives a distinct key, in an order with no locality.
uint32_t scramble(uint32_t x, uint32_t k)
{
  x ^= k;
  x *= 0x9e3779b1u;
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  return x;
}

} // namespace

extern "C" void scale_map(long entries, unsigned long long seed)
{
  const uint32_t k = static_cast<uint32_t>(seed);
  double t0 = now_s();
  auto *m = new std::map<int, int>;
  for (long i = 0; i < entries; i++)
    (*m)[static_cast<int>(scramble(static_cast<uint32_t>(i), k))] = static_cast<int>(i);
  double t1 = now_s();
  if (static_cast<long>(m->size()) != entries) {
    std::fprintf(stderr, "scale map: %zu entries, expected %ld\n", m->size(), entries);
    std::exit(3);
  }
  long sum = 0;
  for (const auto &e : *m) // reads every node: a corrupted tree crashes or sums wrong here
    sum += e.second;
  if (sum != entries * (entries - 1) / 2) {
    std::fprintf(stderr, "scale map: values sum to %ld, expected %ld\n", sum,
                 entries * (entries - 1) / 2);
    std::exit(3);
  }
  double t2 = now_s();
  delete m;
  double t3 = now_s();
  std::printf("map,build_s,%.4f\n", t1 - t0);
  std::printf("map,teardown_s,%.4f\n", t3 - t2);
  std::printf("map,total_s,%.4f\n", (t1 - t0) + (t3 - t2));
}
