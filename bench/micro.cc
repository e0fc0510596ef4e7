// micro: Google Benchmark microbenchmarks of plain malloc/free/realloc/calloc.
//
// One binary, run once per allocator with only LD_PRELOAD changing. Built with -fno-builtin so
// the compiler cannot pair up and drop malloc/free; every pointer also goes through
// benchmark::DoNotOptimize. Every benchmark counts "items" (one item = one malloc+free pair, one
// realloc call or one calloc+free pair), so 1e9/items_per_second is nanoseconds per item.
// Single-threaded benchmarks use the thread's CPU time (the same as wall-clock time on an idle
// machine, and robust when the shared machine is busy); the two-thread one uses wall-clock time.
//
//   BM_pair/SIZE             malloc+free of one size, 16 B .. 64 KiB
//   BM_batch_lifo/N          N mallocs of 64 B then N frees, newest first
//   BM_batch_random/N        N mallocs of 64 B then N frees in a fixed random order
//   BM_realloc_growth        malloc(16) then realloc doubling to 1 MiB, free (item = one realloc)
//   BM_calloc/SIZE           calloc(1, SIZE)+free
//   BM_cross_thread/SIZE     producer mallocs, a second thread frees, through a ring (item = pair)
#include <benchmark/benchmark.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

namespace {

void BM_pair(benchmark::State &state)
{
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void *p = malloc(size);
    benchmark::DoNotOptimize(p);
    free(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_pair)->Arg(16)->Arg(64)->Arg(256)->Arg(1024)->Arg(4096)->Arg(65536);

std::vector<size_t> shuffled(size_t n)
{
  std::vector<size_t> order(n);
  for (size_t i = 0; i < n; i++)
    order[i] = i;
  uint64_t x = 0x2545f4914f6cdd1dull; // fixed seed: the same order for every allocator
  for (size_t i = n - 1; i > 0; i--) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    std::swap(order[i], order[x % (i + 1)]);
  }
  return order;
}

void BM_batch_lifo(benchmark::State &state)
{
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<void *> ptrs(n);
  for (auto _ : state) {
    for (size_t i = 0; i < n; i++) {
      ptrs[i] = malloc(64);
      benchmark::DoNotOptimize(ptrs[i]);
    }
    for (size_t i = n; i-- > 0;)
      free(ptrs[i]);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
}
BENCHMARK(BM_batch_lifo)->Arg(1000);

void BM_batch_random(benchmark::State &state)
{
  const size_t n = static_cast<size_t>(state.range(0));
  std::vector<void *> ptrs(n);
  const std::vector<size_t> order = shuffled(n);
  for (auto _ : state) {
    for (size_t i = 0; i < n; i++) {
      ptrs[i] = malloc(64);
      benchmark::DoNotOptimize(ptrs[i]);
    }
    for (size_t i = 0; i < n; i++)
      free(ptrs[order[i]]);
    benchmark::ClobberMemory();
  }
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(n));
}
BENCHMARK(BM_batch_random)->Arg(1000);

void BM_realloc_growth(benchmark::State &state)
{
  int64_t reallocs = 0;
  for (auto _ : state) {
    size_t size = 16;
    char *p = static_cast<char *>(malloc(size));
    p[0] = 1;
    while (size < (1u << 20)) {
      size *= 2;
      p = static_cast<char *>(realloc(p, size));
      benchmark::DoNotOptimize(p);
      p[size - 1] = 1; // the program writes its new tail
      reallocs++;
    }
    free(p);
  }
  state.SetItemsProcessed(reallocs);
}
BENCHMARK(BM_realloc_growth);

void BM_calloc(benchmark::State &state)
{
  const size_t size = static_cast<size_t>(state.range(0));
  for (auto _ : state) {
    void *p = calloc(1, size);
    benchmark::DoNotOptimize(p);
    free(p);
  }
  state.SetItemsProcessed(state.iterations());
}
BENCHMARK(BM_calloc)->Arg(16)->Arg(256)->Arg(4096)->Arg(65536);

// Single-producer single-consumer ring; the consumer thread frees what the producer allocated.
constexpr size_t kRing = 4096;
constexpr size_t kBatch = 1024; // pairs per benchmark iteration

// Spin briefly, then yield: on a 2-core machine shared with other work the other side may not be
// running, and pure spinning would then measure the scheduler, not the allocator.
inline void backoff(unsigned &spins)
{
  if (++spins < 2000) {
    __builtin_ia32_pause();
  } else {
    std::this_thread::yield();
  }
}

struct Ring {
  alignas(64) std::atomic<size_t> head{0};
  alignas(64) std::atomic<size_t> tail{0};
  alignas(64) std::atomic<bool> stop{false};
  alignas(64) void *slot[kRing];
};

void BM_cross_thread(benchmark::State &state)
{
  const size_t size = static_cast<size_t>(state.range(0));
  Ring *r = new Ring();
  std::thread consumer([r] {
    size_t tail = 0;
    unsigned spins = 0;
    for (;;) {
      size_t head = r->head.load(std::memory_order_acquire);
      if (head == tail) {
        if (r->stop.load(std::memory_order_acquire) && r->head.load(std::memory_order_acquire) == tail)
          return;
        backoff(spins);
        continue;
      }
      spins = 0;
      while (tail != head) {
        free(r->slot[tail & (kRing - 1)]);
        tail++;
      }
      r->tail.store(tail, std::memory_order_release);
    }
  });
  size_t head = 0;
  for (auto _ : state) {
    for (size_t i = 0; i < kBatch; i++) {
      void *p = malloc(size);
      benchmark::DoNotOptimize(p);
      unsigned spins = 0;
      while (head - r->tail.load(std::memory_order_acquire) >= kRing)
        backoff(spins);
      r->slot[head & (kRing - 1)] = p;
      r->head.store(++head, std::memory_order_release);
    }
  }
  r->stop.store(true, std::memory_order_release);
  consumer.join();
  delete r;
  state.SetItemsProcessed(state.iterations() * static_cast<int64_t>(kBatch));
}
BENCHMARK(BM_cross_thread)->Arg(64)->Arg(1024)->UseRealTime();

} // namespace

BENCHMARK_MAIN();
