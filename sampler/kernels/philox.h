// Counter-based random numbers for samplers whose draws must not depend on launch shape or batch composition
// (docs/kernels.md): Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011), the
// generator cuRAND's curandStatePhilox4_32_10_t runs. This host / device copy is the CPU twin of a kernel that
// asks cuRAND for the same block: key = the 64-bit seed, counter = (offset low, offset high, subsequence low,
// subsequence high), as curand_init(seed, subsequence, 4 * offset, &state) sets it.
#pragma once
#include <cstdint>

#include "core/kernels/host_device.h"

namespace inkstone::kernels {

struct PhiloxBlock {
  uint32_t x, y, z, w;
};

INKSTONE_HD inline void philox_multiply(uint32_t a, uint32_t b, uint32_t& high, uint32_t& low) {
  const uint64_t product = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  high = static_cast<uint32_t>(product >> 32);
  low = static_cast<uint32_t>(product);
}

// Ten rounds of the Philox4x32 bijection on `counter` under `key` (the paper's constants).
INKSTONE_HD inline PhiloxBlock philox4x32_10(uint64_t seed, uint64_t subsequence, uint64_t offset) {
  uint32_t c0 = static_cast<uint32_t>(offset), c1 = static_cast<uint32_t>(offset >> 32);
  uint32_t c2 = static_cast<uint32_t>(subsequence), c3 = static_cast<uint32_t>(subsequence >> 32);
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t high0, low0, high1, low1;
    philox_multiply(0xD2511F53u, c0, high0, low0);
    philox_multiply(0xCD9E8D57u, c2, high1, low1);
    const uint32_t next0 = high1 ^ c1 ^ k0, next2 = high0 ^ c3 ^ k1;
    c0 = next0;
    c1 = low1;
    c2 = next2;
    c3 = low0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return {c0, c1, c2, c3};
}

// A double in (0, 1) from two 32-bit words: 53 random bits, offset by half a step so that 0 never occurs.
INKSTONE_HD inline double uniform_from_words(uint32_t high, uint32_t low) {
  const uint64_t bits = (static_cast<uint64_t>(high) << 21) ^ (static_cast<uint64_t>(low) >> 11);
  return (static_cast<double>(bits) + 0.5) * (1.0 / 9007199254740992.0);  // 2^-53
}

// The stream of one token position of one sequence: sequences are numbered globally (prompt x copy), so a
// sequence draws the same numbers in any batch. Positions below 2^24.
INKSTONE_HD inline uint64_t position_subsequence(uint64_t sequence, uint64_t position) {
  return (sequence << 24) | position;
}

// Counter offset of vocabulary pair `pair` (ids 2 pair and 2 pair + 1) at sampler step `step`.
INKSTONE_HD inline uint64_t step_offset(uint32_t step, uint64_t pair) { return (static_cast<uint64_t>(step) << 32) | pair; }

// The CPU's uniforms: Philox blocks computed here, one per vocabulary pair; the serial walk asks for ids in order,
// so the block of the last pair is kept for its second id.
struct PhiloxUniforms {
  uint64_t seed, subsequence;
  uint32_t step;
  uint64_t pair = ~uint64_t{0};
  PhiloxBlock block{};
  double at(int64_t v) {
    const auto wanted = static_cast<uint64_t>(v) / 2;
    if (wanted != pair) {
      pair = wanted;
      block = philox4x32_10(seed, subsequence, step_offset(step, pair));
    }
    return v % 2 == 0 ? uniform_from_words(block.x, block.y) : uniform_from_words(block.z, block.w);
  }
};

}  // namespace inkstone::kernels
