// bench/programs/stdmap.cc: C++ std::map build and teardown for bench/programs.sh, built by it
// with g++ -O2. `stdmap N ROUNDS`: each round builds a std::map<uint32_t, std::string> of N
// entries in a scrambled key order (one node and, for every third entry, a string buffer past
// the small-string size: both reach malloc through operator new), looks every key up, erases
// half in another order, inserts N/2 new keys and tears the map down in its post-order.
// Prints a checksum that must not depend on the allocator. With STDMAP_LAYOUT set, after each
// build it prints on stderr how many nodes have the bytes a lookup reads (the child links and the
// key, node bytes 16-35) across two cache lines, and the nodes' offsets in their lines.
// STDMAP_SHIFT=N allocates N blocks of 72 bytes (a node's size) first and keeps them, which
// moves where the program's rounds of allocations fall in the allocator's blocks.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>

static uint32_t scramble(uint32_t x, uint32_t k)
{
  x ^= k;
  x *= 0x9e3779b1u;
  x ^= x >> 16;
  x *= 0x85ebca6bu;
  x ^= x >> 13;
  return x;
}

// libstdc++'s node: colour, parent, left, right (32 bytes), then the pair; a lookup reads the
// links and the key.
static void layout(const std::map<uint32_t, std::string> &m, long round)
{
  unsigned long across = 0, off[4] = {0, 0, 0, 0};
  for (const auto &kv : m) {
    uintptr_t node = reinterpret_cast<uintptr_t>(&kv) - 32;
    across += (node + 16) / 64 != (node + 35) / 64;
    off[node % 64 / 16]++;
  }
  std::fprintf(stderr, "stdmap: round %ld: %lu of %zu nodes read across two lines; nodes at offsets 0/16/32/48: %lu %lu %lu %lu\n",
               round, across, m.size(), off[0], off[1], off[2], off[3]);
}

int main(int argc, char **argv)
{
  bool show = std::getenv("STDMAP_LAYOUT") != nullptr;
  const char *shift = std::getenv("STDMAP_SHIFT");
  for (long j = 0, k = shift ? std::atol(shift) : 0; j < k; j++) {
    void *volatile kept = ::operator new(72);
    (void)kept;
  }
  long n = argc > 1 ? std::atol(argv[1]) : 1000000;
  long rounds = argc > 2 ? std::atol(argv[2]) : 3;
  unsigned long long sum = 0;
  for (long r = 0; r < rounds; r++) {
    auto *m = new std::map<uint32_t, std::string>;
    for (long i = 0; i < n; i++) {
      uint32_t key = scramble(static_cast<uint32_t>(i), static_cast<uint32_t>(r));
      (*m)[key] = i % 3 == 0 ? std::string("a value long enough for the heap #") + std::to_string(i)
                             : std::to_string(i);
    }
    if (show)
      layout(*m, r);
    for (long i = 0; i < n; i++)
      sum += m->find(scramble(static_cast<uint32_t>(i), static_cast<uint32_t>(r)))->second.size();
    for (long i = 0; i < n; i += 2)
      m->erase(scramble(static_cast<uint32_t>(i), static_cast<uint32_t>(r)));
    for (long i = 0; i < n / 2; i++)
      m->emplace(scramble(static_cast<uint32_t>(n + i), static_cast<uint32_t>(r)), std::to_string(i));
    sum += m->size();
    delete m;
  }
  std::printf("%llu\n", sum);
  return 0;
}
