// flatmalloc.hpp: C++17 over flatmalloc's arenas (flatmalloc.h), header only, so that the
// library itself needs no C++ runtime.
//
//   flatmalloc::arena_resource  a std::pmr::memory_resource over one arena: for std::pmr::vector,
//                               std::pmr::string, std::pmr::unordered_map, ...; deallocate does
//                               nothing, reset() releases everything at once.
//   flatmalloc::arena_allocator<T>  a plain allocator over an arena_resource, for containers
//                               that take an allocator type (std::vector<int, arena_allocator<int>>).
//
// One thread at a time uses an arena, so one thread at a time uses a resource (checking mode
// stops two at once). Allocation failure throws std::bad_alloc.
#ifndef FLATMALLOC_HPP
#define FLATMALLOC_HPP

#include <cstddef>
#include <memory_resource>
#include <new>

#include "flatmalloc.h"

namespace flatmalloc {

class arena_resource : public std::pmr::memory_resource {
 public:
  // keep: bytes of slabs kept across reset() (0: flatmalloc's default, 4 MiB).
  explicit arena_resource(std::size_t keep = 0) : arena_(flatmalloc_arena_create(keep)) {
    if (!arena_) throw std::bad_alloc();
  }
  arena_resource(const arena_resource &) = delete;
  arena_resource &operator=(const arena_resource &) = delete;
  ~arena_resource() override { flatmalloc_arena_destroy(arena_); }

  // Releases every allocation; the containers that used them must be gone or never touched again.
  void reset() noexcept { flatmalloc_arena_reset(arena_); }
  flatmalloc_arena *get() const noexcept { return arena_; }
  struct flatmalloc_arena_stats stats() const noexcept {
    struct flatmalloc_arena_stats s;
    ::flatmalloc_arena_stats(arena_, &s);
    return s;
  }

 private:
  void *do_allocate(std::size_t bytes, std::size_t align) override {
    void *p = flatmalloc_arena_alloc_inline(arena_, bytes, align);
    if (!p) throw std::bad_alloc();
    return p;
  }
  void do_deallocate(void *, std::size_t, std::size_t) noexcept override {}
  bool do_is_equal(const std::pmr::memory_resource &other) const noexcept override { return this == &other; }

  flatmalloc_arena *arena_;
};

// The parser write-up's allocator: holds a pointer to the resource; deallocate does nothing.
template <class T>
class arena_allocator {
 public:
  using value_type = T;
  arena_allocator(arena_resource *r) noexcept : r_(r) {}   // NOLINT: implicit, as polymorphic_allocator's
  template <class U>
  arena_allocator(const arena_allocator<U> &o) noexcept : r_(o.resource()) {}
  T *allocate(std::size_t n) {
    if (n > static_cast<std::size_t>(-1) / sizeof(T)) throw std::bad_array_new_length();
    void *p = flatmalloc_arena_alloc_inline(r_->get(), n * sizeof(T), alignof(T));
    if (!p) throw std::bad_alloc();
    return static_cast<T *>(p);
  }
  void deallocate(T *, std::size_t) noexcept {}
  arena_resource *resource() const noexcept { return r_; }
  template <class U>
  bool operator==(const arena_allocator<U> &o) const noexcept { return r_ == o.resource(); }
  template <class U>
  bool operator!=(const arena_allocator<U> &o) const noexcept { return r_ != o.resource(); }

 private:
  arena_resource *r_;
};

}  // namespace flatmalloc
#endif
