// Counter-based randomness: draws that are a pure function of a tuple (seed, step, row, ...), so any one of them
// can be recomputed on its own, on any rank, after any restart.
#pragma once
#include <cstdint>
#include <initializer_list>

namespace inkstone {

// The splitmix64 output function (Steele, Lea & Flood, "Fast Splittable Pseudorandom Number Generators",
// OOPSLA 2014): a bijection on 64-bit words in which every output bit depends on every input bit.
inline uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Hash of an ordered tuple: each part is folded in through splitmix64, so (a, b) and (b, a) differ.
inline uint64_t counter_hash(std::initializer_list<uint64_t> parts) {
  uint64_t hash = 0;
  for (uint64_t part : parts) hash = splitmix64(hash ^ part);
  return hash;
}

// A uniform integer in [0, n) from a 64-bit hash by multiply-shift (Lemire 2019); the bias is below n / 2^64.
inline uint64_t hash_below(uint64_t hash, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(hash) * n) >> 64);
}

}  // namespace inkstone
