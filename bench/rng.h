/* rng.h: splitmix64, one stream per program, for latency.c and rt.c (static; set rng_state to
 * seed it). */
#ifndef BENCH_RNG_H
#define BENCH_RNG_H
#include <stdint.h>

static uint64_t rng_state;

static inline uint64_t rng(void) /* splitmix64 */
{
  uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
#endif
