// Public API. f16 and bf16 element types for host code: storage plus conversions to and from float.
// f32 -> f16 and f32 -> bf16 round to nearest even; NaN stays NaN.
#ifndef DYNVM_COMMON_HALF_H_
#define DYNVM_COMMON_HALF_H_

#include <cstdint>
#include <cstring>

namespace dynvm {

inline float BitsToFloat(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t FloatToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

struct Half {
  uint16_t bits = 0;
  Half() = default;
  explicit Half(float f) : bits(FromFloat(f)) {}
  operator float() const { return ToFloat(bits); }

  static uint16_t FromFloat(float f) {
    const uint32_t x = FloatToBits(f);
    const uint32_t sign = (x >> 16) & 0x8000u;
    const uint32_t abs = x & 0x7FFFFFFFu;
    if (abs >= 0x7F800000u) {  // inf or NaN
      return static_cast<uint16_t>(sign | 0x7C00u | (abs > 0x7F800000u ? 0x200u : 0));
    }
    if (abs >= 0x477FF000u) return static_cast<uint16_t>(sign | 0x7C00u);  // overflow -> inf
    if (abs < 0x38800000u) {  // subnormal or zero in half
      // Scale into the subnormal range with float arithmetic, which rounds to nearest even.
      const float scaled = BitsToFloat(abs) * 16777216.0f;  // 2^24
      const uint32_t m = static_cast<uint32_t>(scaled);
      const float rem = scaled - static_cast<float>(m);
      uint32_t r = m + ((rem > 0.5f || (rem == 0.5f && (m & 1))) ? 1 : 0);
      return static_cast<uint16_t>(sign | r);
    }
    uint32_t mant = abs + 0xC8000000u;     // rebias exponent: (e - 127 + 15) << 23
    mant += 0x0FFFu + ((mant >> 13) & 1);  // round to nearest even
    return static_cast<uint16_t>(sign | (mant >> 13));
  }
  static float ToFloat(uint16_t h) {
    const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1Fu;
    const uint32_t mant = h & 0x3FFu;
    if (exp == 0) {
      const float v = static_cast<float>(mant) * (1.0f / 16777216.0f);  // mant * 2^-24
      return sign ? -v : v;
    }
    if (exp == 31) return BitsToFloat(sign | 0x7F800000u | (mant << 13));
    return BitsToFloat(sign | ((exp + 112) << 23) | (mant << 13));
  }
};

struct BFloat16 {
  uint16_t bits = 0;
  BFloat16() = default;
  explicit BFloat16(float f) : bits(FromFloat(f)) {}
  operator float() const { return BitsToFloat(static_cast<uint32_t>(bits) << 16); }

  static uint16_t FromFloat(float f) {
    uint32_t x = FloatToBits(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // NaN
    x += 0x7FFFu + ((x >> 16) & 1);
    return static_cast<uint16_t>(x >> 16);
  }
};

static_assert(sizeof(Half) == 2 && sizeof(BFloat16) == 2);

}  // namespace dynvm

#endif  // DYNVM_COMMON_HALF_H_
