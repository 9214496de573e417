// Philox4x32-10: a counter-based random number generator (Salmon et al., "Parallel random
// numbers: as easy as 1, 2, 3", SC 2011). The output is a pure function of (key, counter), so
// a sampled sequence depends only on the seed and the step, never on threads or run order.
// docs/sampling.md documents how dynvm's Sample op uses it.
#ifndef DYNVM_KERNELS_REFERENCE_PHILOX_H_
#define DYNVM_KERNELS_REFERENCE_PHILOX_H_

#include <array>
#include <cstdint>

namespace dynvm::reference {

inline std::array<uint32_t, 4> Philox4x32(std::array<uint32_t, 4> ctr,
                                          std::array<uint32_t, 2> key) {
  constexpr uint32_t kM0 = 0xD2511F53u, kM1 = 0xCD9E8D57u;
  constexpr uint32_t kW0 = 0x9E3779B9u, kW1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      key[0] += kW0;
      key[1] += kW1;
    }
    const uint64_t p0 = static_cast<uint64_t>(kM0) * ctr[0];
    const uint64_t p1 = static_cast<uint64_t>(kM1) * ctr[2];
    ctr = {static_cast<uint32_t>(p1 >> 32) ^ ctr[1] ^ key[0], static_cast<uint32_t>(p1),
           static_cast<uint32_t>(p0 >> 32) ^ ctr[3] ^ key[1], static_cast<uint32_t>(p0)};
  }
  return ctr;
}

// A uniform double in [0, 1) with 53 random bits for (seed, step, row).
inline double PhiloxUniform(uint64_t seed, uint64_t step, uint64_t row) {
  const std::array<uint32_t, 4> x =
      Philox4x32({static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32),
                  static_cast<uint32_t>(row), static_cast<uint32_t>(row >> 32)},
                 {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  const uint64_t bits = ((static_cast<uint64_t>(x[0]) << 32) | x[1]) >> 11;
  return static_cast<double>(bits) * (1.0 / 9007199254740992.0);  // 2^-53
}

}  // namespace dynvm::reference

#endif  // DYNVM_KERNELS_REFERENCE_PHILOX_H_
