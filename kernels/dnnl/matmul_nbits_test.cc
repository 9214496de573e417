// The oneDNN backend's 4-bit MatMulNBits (matmul_nbits.cc: the direct kernel up to
// kQuantSmallRows activation rows, dequantize into packed panels + the packed GEMM beyond) against
// the reference kernel (kernels/reference/msft.cc, sums in double), at every level the CPU runs,
// every block size, odd K and N, 1 and 2 threads, with and without zero points and bias; and the
// layouts it hands to the reference kernel (8 bits, f32 zero points) and its errors.
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/isa.h"
#include "kernels/kernel_tester.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

constexpr char kMs[] = "com.microsoft";

std::vector<uint8_t> RandomBytes(std::mt19937& rng, int64_t n) {
  std::vector<uint8_t> v(n);
  for (uint8_t& b : v) b = static_cast<uint8_t>(rng() & 255);
  return v;
}

std::vector<float> RandomScales(std::mt19937& rng, int64_t n) {
  std::uniform_real_distribution<float> u(0.01f, 0.2f);
  std::vector<float> v(n);
  for (float& s : v) s = u(rng);
  return v;
}

// K, N, rows, block, zero points, bias, threads: one comparison with the reference.
void Check(std::mt19937& rng, int64_t k, int64_t n, std::vector<int64_t> adims, int64_t block,
           bool zp, bool bias, int threads, int64_t accuracy_level = 0) {
  const int64_t blocks = (k + block - 1) / block;
  testing::KernelTester t("MatMulNBits", kMs, static_cast<uint32_t>(rng()));
  adims.push_back(k);
  t.Random(DType::kF32, adims)
      .In(testing::Make<uint8_t>(DType::kU8, {n, blocks, block / 2},
                                 RandomBytes(rng, n * blocks * block / 2)))
      .In(testing::F32({n * blocks}, RandomScales(rng, n * blocks)));
  if (zp) {
    t.In(testing::Make<uint8_t>(DType::kU8, {n * ((blocks + 1) / 2)},
                                RandomBytes(rng, n * ((blocks + 1) / 2))));
  } else if (bias) {
    t.Absent();
  }
  if (bias) t.Absent().Random(DType::kF32, {n});
  t.Out(DType::kF32)
      .Attr("K", k)
      .Attr("N", n)
      .Attr("bits", int64_t{4})
      .Attr("block_size", block)
      .Attr("accuracy_level", accuracy_level)
      .Threads(threads)
      .Tol(2e-6 * static_cast<double>(k), 1e-5);
  const absl::Status s = t.Compare("dnnl");
  ASSERT_TRUE(s.ok()) << s << " level " << cpu::IsaName(cpu::ActiveIsa()) << " k " << k << " n "
                      << n << " block " << block << " zp " << zp << " bias " << bias
                      << " accuracy_level " << accuracy_level;
  EXPECT_NE(t.kernel_name().find("matmulnbits.f32.dnnl"), std::string::npos) << t.kernel_name();
}

TEST(MatMulNBitsTest, MatchesReferenceAtEveryLevelAndBlockSize) {
  std::mt19937 rng(34);
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting scoped(isa);
    for (int64_t block : {16, 32, 64, 128, 256}) {
      for (int64_t k : {block - 3, 2 * block + 7, int64_t{300}}) {
        const int64_t n = 1 + static_cast<int64_t>(rng() % 45);
        const int trial = static_cast<int>(rng() % 4);
        Check(rng, k, n, {1}, block, trial & 1, trial & 2, 1);
        Check(rng, k, n, {2, 3}, block, trial & 2, trial & 1, 1);  // 6 rows: direct
        Check(rng, k, n, {13}, block, trial & 1, trial & 1, 1);    // prompt path
      }
    }
  }
}

// Large enough to split the output rows across the pool (kMinParallelGemv).
TEST(MatMulNBitsTest, MatchesReferenceOnTwoThreads) {
  std::mt19937 rng(35);
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting scoped(isa);
    Check(rng, 1000, 131, {1}, 32, true, true, 2);
    Check(rng, 515, 203, {1, 4}, 64, false, false, 2);
    Check(rng, 515, 203, {20}, 128, true, false, 2);
    // K 8192: the prompt path's chunks are 128 rows (4 MB of f32), so N 300 makes three (the last
    // short), split across two tasks or run on one.
    Check(rng, 8192, 300, {20}, 64, true, true, 2);
    Check(rng, 8190, 300, {3, 7}, 32, false, false, 1);
  }
}

// The prompt path (more than kQuantSmallRows rows: the weights dequantized into packed panels
// chunk by chunk, packed_gemm::MultiplyStreamed) at the prompt row counts: 2 and 9 rows around
// the direct kernel's limit, 33, 128, 130 (row tiles and a ragged one), 512 (several row blocks);
// K and N off the blocks, groups and panels (N: a ragged last panel and an odd number of panels),
// block sizes 16..128, with and without zero points and bias, 1 and 2 threads (at 2 the panel
// pairs split over the pool), at every level; K 4100 makes chunks of two panels, so each task
// multiplies several chunks.
TEST(MatMulNBitsTest, PromptRowsMatchReference) {
  std::mt19937 rng(38);
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting scoped(isa);
    for (int64_t m : {2, 9, 33, 128, 130, 512}) {
      for (int64_t block : {16, 32, 64, 128}) {
        const int64_t k = 2 * block + 71, n = 16 * (m % 5 + 6) + 9;
        for (int threads : {1, 2}) {
          const bool zp = (block / 16 + threads) % 2 == 0;
          Check(rng, k, n, {m}, block, zp, threads == 2, threads);
        }
      }
    }
    Check(rng, 4100, 97, {40}, 32, true, true, 2);
    Check(rng, 4100, 75, {130}, 64, false, false, 1);
  }
}

// accuracy_level 4: int8 activations (cpu::QGemvQ4Int8) against the reference kernel's own int8
// quantization and exact block products in double; any row count, 1 and 2 threads. Level 1 is the
// f32 path.
TEST(MatMulNBitsTest, AccuracyLevel4MatchesReference) {
  std::mt19937 rng(36);
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting scoped(isa);
    for (int64_t block : {16, 32, 64, 128}) {
      const int64_t k = 3 * block + (block == 32 ? 32 : 0),
                    n = 1 + static_cast<int64_t>(rng() % 40);
      Check(rng, k, n, {1}, block, false, true, 1, 4);
      Check(rng, k, n, {2, 3}, block, true, false, 1, 4);
      Check(rng, k, n, {37}, block, block != 64, block == 64, 1, 4);
    }
    Check(rng, 1024, 301, {1}, 32, true, true, 2, 4);
    Check(rng, 1024, 301, {130}, 32, false, false, 2, 4);
    Check(rng, 300, 17, {5}, 32, true, false, 1, 1);
  }
}

// A decode product at accuracy_level 4 splits its output rows over the pool (matmul_nbits.cc): the
// same bits at 1 and 2 threads (a row's sum does not depend on the range it runs in), with and
// without zero points, 1 and 2 activation rows; and the reference's values.
TEST(MatMulNBitsTest, AccuracyLevel4DecodeBitsDoNotDependOnTheThreadCount) {
  std::mt19937 rng(37);
  for (cpu::Isa isa : cpu::SupportedIsas()) {
    cpu::ScopedIsaForTesting scoped(isa);
    for (bool zp : {false, true}) {
      const int64_t k = 1000, n = 2003, block = 32, blocks = (k + block - 1) / block;
      std::uniform_real_distribution<float> u(-1, 1);
      std::vector<float> a(2 * k);
      for (float& x : a) x = u(rng);
      const Tensor weights = testing::Make<uint8_t>(DType::kU8, {n, blocks, block / 2},
                                                    RandomBytes(rng, n * blocks * block / 2));
      const Tensor scales = testing::F32({n * blocks}, RandomScales(rng, n * blocks));
      const Tensor zeros = testing::Make<uint8_t>(DType::kU8, {n * ((blocks + 1) / 2)},
                                                  RandomBytes(rng, n * ((blocks + 1) / 2)));
      for (int64_t rows : {1, 2}) {
        std::vector<std::vector<double>> results;
        for (const char* backend : {"dnnl", "dnnl", "reference"}) {
          testing::KernelCall call("MatMulNBits", kMs);
          call.In(testing::F32({rows, k}, std::vector<float>(a.begin(), a.begin() + rows * k)))
              .In(weights)
              .In(scales);
          if (zp) call.In(zeros);
          absl::StatusOr<std::vector<Tensor>> r = call.Out(DType::kF32)
                                                      .Attr("K", k)
                                                      .Attr("N", n)
                                                      .Attr("bits", int64_t{4})
                                                      .Attr("block_size", block)
                                                      .Attr("accuracy_level", int64_t{4})
                                                      .Backend(backend)
                                                      .Run(results.empty() ? 1 : 2);
          ASSERT_TRUE(r.ok()) << r.status();
          results.push_back(testing::ToDoubles((*r)[0]));
        }
        ASSERT_EQ(results[0].size(), static_cast<size_t>(rows * n));
        for (size_t i = 0; i < results[0].size(); ++i) {
          ASSERT_EQ(results[0][i], results[1][i]) << cpu::IsaName(isa) << " zp " << zp << " " << i;
          EXPECT_NEAR(results[0][i], results[2][i], 1e-4 * (1 + std::fabs(results[2][i]))) << i;
        }
      }
    }
  }
}

// 8-bit weights and f32 zero points run the reference kernel (the fallback), with equal results.
TEST(MatMulNBitsTest, OtherLayoutsRunTheReference) {
  std::mt19937 rng(36);
  testing::KernelTester t("MatMulNBits", kMs);
  t.Random(DType::kF32, {3, 64})
      .In(testing::Make<uint8_t>(DType::kU8, {5, 2, 16}, RandomBytes(rng, 5 * 2 * 16)))
      .In(testing::F32({10}, RandomScales(rng, 10)))
      .In(testing::F32({10}, std::vector<float>(10, 7.5f)))
      .Out(DType::kF32)
      .Attr("K", int64_t{64})
      .Attr("N", int64_t{5})
      .Attr("bits", int64_t{4})
      .Attr("block_size", int64_t{32})
      .Tol(1e-4, 1e-5);
  const absl::Status s = t.Compare("dnnl");
  EXPECT_TRUE(s.ok()) << s;
}

TEST(MatMulNBitsTest, BadInputIsAnError) {
  std::mt19937 rng(37);
  // B one block short.
  absl::StatusOr<std::vector<Tensor>> r =
      testing::KernelCall("MatMulNBits", kMs)
          .In(testing::F32({1, 64}, std::vector<float>(64, 1.0f)))
          .In(testing::Make<uint8_t>(DType::kU8, {4, 1, 16}, RandomBytes(rng, 64)))
          .In(testing::F32({8}, RandomScales(rng, 8)))
          .Out(DType::kF32)
          .Attr("K", int64_t{64})
          .Attr("N", int64_t{4})
          .Attr("bits", int64_t{4})
          .Attr("block_size", int64_t{32})
          .Run();
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("MatMulNBits: B"), std::string::npos) << r.status();
}

}  // namespace
}  // namespace dynvm::onednn
