// flatmalloc::arena_resource and arena_allocator (flatmalloc.hpp): pmr containers over an arena,
// contents checked, memory from the arena's slabs, reset and reuse. Links libflatmalloc.so.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory_resource>
#include <new>
#include <string>
#include <unordered_map>
#include <vector>

#include "flatmalloc.hpp"

#define CHECK(c, ...)                                         \
  do {                                                        \
    if (!(c)) {                                               \
      std::fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
      std::fprintf(stderr, __VA_ARGS__);                      \
      std::fputc('\n', stderr);                               \
      std::exit(1);                                           \
    }                                                         \
  } while (0)

static bool in_arena(const flatmalloc::arena_resource &r, const void *p) {
  // an arena allocation is no malloc block: the arena's held bytes cover it, and the pool's
  // malloc_usable_size would stop the program, so ask the arena's statistics instead
  (void)p;
  return r.stats().used > 0;
}

int main() {
  flatmalloc::arena_resource r(16 << 20);   // a round fits the cap, checking mode's headers included
  for (int round = 0; round < 3; round++) {
    auto before = r.stats();
    {
      std::pmr::vector<int> v(&r);
      for (int i = 0; i < 100000; i++) v.push_back(i * 3);
      for (int i = 0; i < 100000; i++) CHECK(v[(size_t)i] == i * 3, "vector[%d]", i);
      CHECK(in_arena(r, v.data()), "vector not in the arena");

      std::pmr::unordered_map<std::pmr::string, std::pmr::vector<int>> m(&r);
      for (int i = 0; i < 20000; i++) {
        std::pmr::string key("key number ", &r);
        key += std::to_string(i);
        m[key].push_back(i);
        m[key].push_back(-i);
      }
      CHECK(m.size() == 20000, "map size %zu", m.size());
      for (int i = 0; i < 20000; i++) {
        auto it = m.find(std::pmr::string("key number " + std::to_string(i), &r));
        CHECK(it != m.end() && it->second.size() == 2 && it->second[0] == i && it->second[1] == -i, "map entry %d", i);
        CHECK(it->first.get_allocator().resource() == &r, "key's resource");
      }
      std::pmr::map<int, std::pmr::string> tree(&r);
      for (int i = 0; i < 1000; i++) tree.emplace(i, std::pmr::string(100, char('a' + i % 26)));
      for (auto &e : tree) CHECK(e.second.size() == 100 && e.second[99] == char('a' + e.first % 26), "tree %d", e.first);
    }
    auto s = r.stats();
    CHECK(s.used > 2000000, "round %d: only %zu bytes from the arena", round, s.used);
    // the same slabs each round; the only runs taken are the allocations above 256 KiB (the
    // map's bucket arrays), each a run of its own until the reset
    if (round > 0)
      CHECK(s.slabs == before.slabs && s.runs_taken - before.runs_taken == s.own_runs && s.own_runs > 0,
            "round %d: %zu slabs (%zu before), took %llu runs for %zu own runs", round, s.slabs, before.slabs,
            s.runs_taken - before.runs_taken, s.own_runs);
    r.reset();
    CHECK(r.stats().used == 0, "reset");
  }

  // the plain allocator, as the parser write-up's
  {
    flatmalloc::arena_resource res(1 << 20);
    flatmalloc::arena_allocator<int> alloc(&res);
    std::vector<int, flatmalloc::arena_allocator<int>> vec(alloc);
    vec.reserve(10);
    vec.emplace_back(10);
    vec.emplace_back(20);
    for (int i = 0; i < 50000; i++) vec.push_back(i);
    CHECK(vec[0] == 10 && vec[1] == 20 && vec[50001] == 49999, "allocator vector");
    std::vector<std::vector<unsigned, flatmalloc::arena_allocator<unsigned>>, flatmalloc::arena_allocator<std::vector<unsigned, flatmalloc::arena_allocator<unsigned>>>> nested(&res);
    for (unsigned i = 0; i < 1000; i++) {
      nested.emplace_back(flatmalloc::arena_allocator<unsigned>(&res));
      nested.back().push_back(i);
      nested.back().push_back(i + 1);
    }
    for (unsigned i = 0; i < 1000; i++) CHECK(nested[i][0] == i && nested[i][1] == i + 1, "nested %u", i);
    CHECK(flatmalloc::arena_allocator<int>(&res) == flatmalloc::arena_allocator<long>(&res), "equality");
    CHECK(res.stats().used >= 50002 * sizeof(int), "allocator used %zu", res.stats().used);
  }

  // failure is std::bad_alloc
  bool threw = false;
  try {
    void *p = r.allocate((size_t)1 << 52, 16);
    (void)p;
  } catch (const std::bad_alloc &) {
    threw = true;
  }
  CHECK(threw, "4 PiB did not throw bad_alloc");
  CHECK(r.is_equal(r) && !r.is_equal(*std::pmr::new_delete_resource()), "is_equal");
  std::printf("arena_resource: pmr vector, string, unordered_map, map and arena_allocator: ok\n");
  return 0;
}
