// The exact integer GEMM (igemm.h) against a scalar oracle summing (a - a_zp)(b - b_zp) in 64
// bits: random M, K, N with ragged row blocks, odd K and partial panels, u8 and s8 a, non-zero
// zero points at both ends of their ranges, K at the cap with every term at its largest
// magnitude, and sub-ranges of rows and panels. Every implementation the CPU runs (isa.h; the
// portable one always), packing included.
#include "kernels/cpu/igemm.h"

#include <algorithm>
#include <array>
#include <cstdint>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"

namespace dynvm::cpu {
namespace {

struct Problem {
  int64_t m, k, n;
  bool a_u8;
  int32_t za, zb;
  std::vector<uint8_t> a;  // u8, or s8 bit patterns
  std::vector<int8_t> b;
};

int64_t Oracle(const Problem& p, int64_t i, int64_t j) {
  int64_t s = 0;
  for (int64_t q = 0; q < p.k; ++q) {
    const uint8_t raw = p.a[i * p.k + q];
    const int64_t av = p.a_u8 ? raw : static_cast<int8_t>(raw);
    s += (av - p.za) * (int64_t{p.b[q * p.n + j]} - p.zb);
  }
  return s;
}

// Runs rows [i0, i1) x panels [p0, p1) at level `isa` and checks exactly those entries (and that
// the rest of c is untouched).
void Check(const Problem& p, Isa isa, int64_t i0, int64_t i1, int64_t p0, int64_t p1) {
  ScopedIsaForTesting level(isa);
  std::vector<int16_t> pa(IGemmPackedABytes(p.m, p.k) / sizeof(int16_t));
  std::vector<int16_t> pb(IGemmPackedBBytes(p.k, p.n) / sizeof(int16_t));
  IGemmPackA(p.k, p.a.data(), p.a_u8, p.k, p.za, 0, p.m, pa.data());
  IGemmPackB(p.k, p.n, p.b.data(), p.n, p.zb, 0, IGemmPanels(p.n), pb.data());
  const int64_t ldc = p.n + 3;
  constexpr int32_t kUntouched = -123456789;
  std::vector<int32_t> c(p.m * ldc, kUntouched);
  IGemmCompute(p.k, p.n, pa.data(), pb.data(), i0, i1, p0, p1, c.data(), ldc);
  int64_t bad = 0;
  for (int64_t i = 0; i < p.m; ++i) {
    for (int64_t j = 0; j < ldc; ++j) {
      const bool inside =
          i >= i0 && i < i1 && j < p.n && j >= p0 * kIGemmPanel && j < p1 * kIGemmPanel;
      const int64_t want = inside ? Oracle(p, i, j) : kUntouched;
      if (c[i * ldc + j] != want && ++bad <= 5) {
        ADD_FAILURE() << "c[" << i << "][" << j << "] = " << c[i * ldc + j] << ", want " << want;
      }
    }
  }
}

Problem Random(std::mt19937& rng, int64_t m, int64_t k, int64_t n, bool a_u8) {
  Problem p{m, k, n, a_u8, 0, 0, std::vector<uint8_t>(m * k), std::vector<int8_t>(k * n)};
  for (uint8_t& v : p.a) v = static_cast<uint8_t>(rng());
  for (int8_t& v : p.b) v = static_cast<int8_t>(rng());
  std::uniform_int_distribution<int> zu(0, 255), zs(-128, 127);
  p.za = a_u8 ? zu(rng) : zs(rng);
  p.zb = zs(rng);
  return p;
}

TEST(IGemmTest, MatchesTheOracleOnRandomSizes) {
  std::mt19937 rng(29);
  std::uniform_int_distribution<int64_t> dm(1, 13), dk(1, 80), dn(1, 53);
  for (int trial = 0; trial < 120; ++trial) {
    const Problem p = Random(rng, dm(rng), dk(rng), dn(rng), trial % 2 == 0);
    for (Isa isa : SupportedIsas()) {
      SCOPED_TRACE(absl::StrCat("trial ", trial, " m ", p.m, " k ", p.k, " n ", p.n, " u8 ", p.a_u8,
                                " za ", p.za, " zb ", p.zb, " ", IsaName(isa)));
      Check(p, isa, 0, p.m, 0, IGemmPanels(p.n));
    }
  }
}

TEST(IGemmTest, SubRangesComputeOnlyTheirEntries) {
  std::mt19937 rng(31);
  const Problem p = Random(rng, 11, 37, 50, true);
  for (Isa isa : SupportedIsas()) {
    for (auto [i0, i1, p0, p1] :
         {std::array<int64_t, 4>{0, 5, 0, 4}, {3, 11, 1, 3}, {6, 7, 3, 4}, {2, 2, 0, 4}}) {
      SCOPED_TRACE(absl::StrCat("rows ", i0, "-", i1, " panels ", p0, "-", p1, " ", IsaName(isa)));
      Check(p, isa, i0, i1, p0, p1);
    }
  }
}

TEST(IGemmTest, GemvMatchesTheOracle) {
  std::mt19937 rng(37);
  std::uniform_int_distribution<int64_t> dk(1, 90), dn(1, 200);
  for (int trial = 0; trial < 80; ++trial) {
    Problem p = Random(rng, 1, dk(rng), dn(rng), trial % 2 == 0);
    if (trial == 0) {  // K at the cap, every term +-255 * 255
      p = Problem{1, kIGemmMaxK - 1, 70, true, 0, 127, {}, {}};
      p.a.assign(p.k, 255);
      p.b.assign(p.k * p.n, -128);
    }
    std::vector<int16_t> pa(IGemmPackedABytes(1, p.k) / sizeof(int16_t));
    IGemmPackA(p.k, p.a.data(), p.a_u8, p.k, p.za, 0, 1, pa.data());
    const int64_t j0 = trial % 3 == 0 ? 0 : std::min<int64_t>(p.n, trial % 7);
    for (Isa isa : SupportedIsas()) {
      SCOPED_TRACE(
          absl::StrCat("trial ", trial, " k ", p.k, " n ", p.n, " j0 ", j0, " ", IsaName(isa)));
      ScopedIsaForTesting level(isa);
      std::vector<int32_t> c(p.n, -1);
      IGemv(p.k, pa.data(), p.b.data(), p.n, p.zb, j0, p.n, c.data());
      for (int64_t j = 0; j < p.n; ++j) {
        ASSERT_EQ(c[j], j < j0 ? -1 : Oracle(p, 0, j)) << "column " << j;
      }
    }
  }
}

TEST(IGemmTest, ExtremeValuesAtTheKCapAreExact) {
  // Every term is +-255 * 255: the largest sums an s32 holds below kIGemmMaxK.
  const int64_t k = kIGemmMaxK - 1;
  for (bool a_u8 : {true, false}) {
    for (int sign : {1, -1}) {
      Problem p{5, k, 18, a_u8, 0, 0, std::vector<uint8_t>(5 * k), std::vector<int8_t>(k * 18)};
      // a - za = 255 (u8: 255 - 0; s8: 127 - (-128)), b - zb = -255 or 255.
      p.za = a_u8 ? 0 : -128;
      for (uint8_t& v : p.a) v = a_u8 ? 255 : static_cast<uint8_t>(int8_t{127});
      p.zb = sign > 0 ? -128 : 127;
      for (int8_t& v : p.b) v = sign > 0 ? 127 : -128;
      for (Isa isa : SupportedIsas()) {
        SCOPED_TRACE(absl::StrCat("u8 ", a_u8, " sign ", sign, " ", IsaName(isa)));
        Check(p, isa, 0, p.m, 0, IGemmPanels(p.n));
      }
    }
  }
}

}  // namespace
}  // namespace dynvm::cpu
