// Tests of the reference MatMul and Gemm kernels. Expected values come from ONNX's node test
// data, from numpy (snippets quoted), or, for the larger strided cases, from a naive triple
// loop in double precision written here.
#include <cstdint>
#include <random>
#include <vector>

#include "common/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using ::dynvm::testing::F32;
using ::dynvm::testing::I32;
using ::dynvm::testing::I64;
using ::dynvm::testing::KernelCall;
using ::dynvm::testing::Make;
using ::dynvm::testing::ToDoubles;
using ::dynvm::testing::ToInts;
using ::testing::DoubleNear;
using ::testing::HasSubstr;
using ::testing::Pointwise;

Tensor Run1(KernelCall& call) {
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return Tensor();
  return (*r)[0];
}

void ExpectNear(const Tensor& t, const std::vector<double>& want, double tol = 1e-5) {
  EXPECT_THAT(ToDoubles(t), Pointwise(DoubleNear(tol), want));
}

Tensor Transposed(const Tensor& t) {
  return *Tensor::View(t.storage(), t.byte_offset(), t.dtype(), {t.dim(1), t.dim(0)},
                       {1, t.dim(1)});
}

Tensor MatMul(const Tensor& a, const Tensor& b) {
  KernelCall call("MatMul");
  call.In(a).In(b).Out(a.dtype());
  return Run1(call);
}

// a = np.arange(6).reshape(2,3) - 2; b = np.arange(12).reshape(3,4) * 0.5 - 1 (float32)
Tensor A23() { return F32({2, 3}, {-2, -1, 0, 1, 2, 3}); }
Tensor B34() { return F32({3, 4}, {-1, -0.5f, 0, 0.5f, 1, 1.5f, 2, 2.5f, 3, 3.5f, 4, 4.5f}); }

TEST(MatMulTest, TwoD) {
  Tensor y = MatMul(A23(), B34());
  EXPECT_EQ(y.ShapeString(), "[2,4]");
  ExpectNear(y, {1.0, -0.5, -2.0, -3.5, 10.0, 13.0, 16.0, 19.0});
}

TEST(MatMulTest, OnnxTestData2d) {
  // test_matmul_2d
  Tensor a = F32({3, 4}, {1.764052391052246f, 0.40015721321105957f, 0.978738009929657f,
                          2.2408931255340576f, 1.8675580024719238f, -0.9772778749465942f,
                          0.9500884413719177f, -0.15135720372200012f, -0.10321885347366333f,
                          0.4105985164642334f, 0.14404356479644775f, 1.4542734622955322f});
  Tensor b = F32({4, 3}, {0.7610377073287964f, 0.12167501449584961f, 0.44386324286460876f,
                          0.3336743414402008f, 1.4940791130065918f, -0.2051582634449005f,
                          0.3130677044391632f, -0.8540957570075989f, -2.5529897212982178f,
                          0.653618574142456f, 0.8644362092018127f, -0.7421650290489197f});
  ExpectNear(MatMul(a, b), {3.2471330165863037, 1.9136807918548584, -3.4609181880950928,
                            1.2937015295028687, -2.1752004623413086, -1.2837971448898315,
                            1.0540882349014282, 1.7350071668624878, -1.5771054029464722});
}

TEST(MatMulTest, VectorPromotion) {
  Tensor v = F32({3}, {1, 2, 3});
  Tensor vm = MatMul(v, B34());
  EXPECT_EQ(vm.ShapeString(), "[4]");
  ExpectNear(vm, {10, 13, 16, 19});
  Tensor mv = MatMul(A23(), v);
  EXPECT_EQ(mv.ShapeString(), "[2]");
  ExpectNear(mv, {-4, 14});
  Tensor vv = MatMul(v, v);
  EXPECT_EQ(vv.ShapeString(), "[]");
  ExpectNear(vv, {14});
  // A 1-D operand against a batch: [3] x [2,3,1] -> [2,1].
  Tensor bb = F32({2, 3, 1}, {1, 1, 1, 0, 1, 0});
  Tensor vb = MatMul(v, bb);
  EXPECT_EQ(vb.ShapeString(), "[2,1]");
  ExpectNear(vb, {6, 2});
}

TEST(MatMulTest, BatchBroadcast) {
  // A = [[1,2,3],[4,5,6]] * [1,-1].reshape(2,1,1,1) (shape [2,1,2,3]);
  // B = np.arange(18).reshape(3,3,2) - 4; A @ B has shape [2,3,2,2].
  Tensor a = F32({2, 1, 2, 3}, {1, 2, 3, 4, 5, 6, -1, -2, -3, -4, -5, -6});
  std::vector<float> bv(18);
  for (int i = 0; i < 18; ++i) bv[i] = static_cast<float>(i - 4);
  Tensor y = MatMul(a, F32({3, 3, 2}, bv));
  EXPECT_EQ(y.ShapeString(), "[2,3,2,2]");
  ExpectNear(y, {-8, -2, -26, -11, 28,  34,  64,  79,  64,  70,  154,  169,
                 8,  2,  26,  11,  -28, -34, -64, -79, -64, -70, -154, -169});
}

// Naive C = A B in double over logical indices (any strides).
std::vector<double> NaiveMatMul(const Tensor& a, const Tensor& b) {
  std::vector<double> av = ToDoubles(a), bv = ToDoubles(b);
  const int64_t m = a.dim(0), k = a.dim(1), n = b.dim(1);
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j)
      for (int64_t p = 0; p < k; ++p) c[i * n + j] += av[i * k + p] * bv[p * n + j];
  return c;
}

Tensor Random(std::vector<int64_t> dims, std::mt19937& rng) {
  std::uniform_real_distribution<float> u(-1, 1);
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> v(n);
  for (float& x : v) x = u(rng);
  return F32(dims, v);
}

TEST(MatMulTest, OddSizesAndStridedOperands) {
  std::mt19937 rng(7);
  // Shapes chosen odd and with M = 1 to catch edge handling.
  for (auto [m, k, n] :
       {std::tuple<int64_t, int64_t, int64_t>{1, 17, 9}, {13, 1, 5}, {7, 33, 1}, {19, 23, 29}}) {
    Tensor a = Random({m, k}, rng), b = Random({k, n}, rng);
    ExpectNear(MatMul(a, b), NaiveMatMul(a, b), 1e-4);
    // Transposed views: A^T stored as [k, m], B^T stored as [n, k] (the dot-product path).
    Tensor at = Random({k, m}, rng), bt = Random({n, k}, rng);
    ExpectNear(MatMul(Transposed(at), Transposed(bt)), NaiveMatMul(Transposed(at), Transposed(bt)),
               1e-4);
    ExpectNear(MatMul(a, Transposed(bt)), NaiveMatMul(a, Transposed(bt)), 1e-4);
  }
  // A column slice with a row stride larger than its width: every other column of a [4,6].
  Tensor base = Random({4, 6}, rng);
  Tensor cols = *Tensor::View(base.storage(), 4, DType::kF32, {4, 3}, {6, 2});
  Tensor b = Random({3, 2}, rng);
  ExpectNear(MatMul(cols, b), NaiveMatMul(cols, b), 1e-5);
}

TEST(MatMulTest, IntegersWrapAndHalf) {
  Tensor y = MatMul(I32({2, 2}, {1, 2, 3, 4}), I32({2, 2}, {5, 6, 7, 8}));
  EXPECT_EQ(ToInts(y), (std::vector<int64_t>{19, 22, 43, 50}));
  Tensor big = MatMul(I64({1, 2}, {int64_t{1} << 62, int64_t{1} << 62}), I64({2, 1}, {2, 1}));
  // 2^63 + 2^62 wraps to -2^62.
  EXPECT_EQ(ToInts(big), (std::vector<int64_t>{-(int64_t{1} << 62)}));
  Tensor u8 = MatMul(Make<uint8_t>(DType::kU8, {1, 2}, {200, 100}),
                     Make<uint8_t>(DType::kU8, {2, 1}, {1, 1}));
  EXPECT_EQ(ToInts(u8), (std::vector<int64_t>{44}));  // 300 mod 256
  Tensor h =
      MatMul(Make<Half>(DType::kF16, {1, 2}, {Half(0.5f), Half(2.0f)}),
             Make<Half>(DType::kF16, {2, 2}, {Half(2.0f), Half(1.0f), Half(3.0f), Half(-1.0f)}));
  ExpectNear(h, {7, -1.5}, 0);
  Tensor bf = MatMul(Make<BFloat16>(DType::kBF16, {1, 1}, {BFloat16(3.0f)}),
                     Make<BFloat16>(DType::kBF16, {1, 1}, {BFloat16(-2.0f)}));
  ExpectNear(bf, {-6}, 0);
  Tensor d = MatMul(Make<double>(DType::kF64, {1, 2}, {0.1, 0.2}),
                    Make<double>(DType::kF64, {2, 1}, {10, 10}));
  ExpectNear(d, {3.0}, 0);
}

TEST(MatMulTest, EmptyDims) {
  Tensor zero_k = MatMul(F32({2, 0}, {}), F32({0, 3}, {}));
  EXPECT_EQ(zero_k.ShapeString(), "[2,3]");
  ExpectNear(zero_k, {0, 0, 0, 0, 0, 0});
  EXPECT_EQ(MatMul(F32({0, 4}, {}), F32({4, 3}, std::vector<float>(12, 1))).ShapeString(), "[0,3]");
  EXPECT_EQ(MatMul(F32({0, 2, 4}, {}), F32({4, 3}, std::vector<float>(12, 1))).ShapeString(),
            "[0,2,3]");
}

TEST(MatMulTest, Errors) {
  KernelCall k("MatMul");
  k.In(A23()).In(A23()).Out(DType::kF32);
  absl::Status s = k.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("MatMul"));
  EXPECT_THAT(s.message(), HasSubstr("[2,3]"));
  KernelCall batch("MatMul");
  batch.In(F32({2, 1, 1}, {1, 2})).In(F32({3, 1, 1}, {1, 2, 3})).Out(DType::kF32);
  EXPECT_EQ(batch.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall scalar("MatMul");
  scalar.In(F32({}, {1})).In(F32({1}, {1})).Out(DType::kF32);
  EXPECT_EQ(scalar.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall wrong("MatMul");
  wrong.In(A23()).In(B34()).OutTensor(*Tensor::Empty(DType::kF32, {4, 2}));
  EXPECT_EQ(wrong.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall boolean("MatMul");
  boolean.In(testing::Bool({1, 1}, {true})).In(testing::Bool({1, 1}, {true})).Out(DType::kBool);
  EXPECT_EQ(boolean.Run().status().code(), absl::StatusCode::kUnimplemented);
  Tensor out = *Tensor::Empty(DType::kF32, {2, 4});
  KernelCall pre("MatMul");
  pre.In(A23()).In(B34()).OutTensor(out);
  ASSERT_TRUE(pre.Run().ok());
  ExpectNear(out, {1.0, -0.5, -2.0, -3.5, 10.0, 13.0, 16.0, 19.0});
}

// ---- Gemm ----

// A = [[1,2],[3,4],[5,6]]; B = [[1,0,-1,2],[2,1,0,-2]]
Tensor GA() { return F32({3, 2}, {1, 2, 3, 4, 5, 6}); }
Tensor GB() { return F32({2, 4}, {1, 0, -1, 2, 2, 1, 0, -2}); }

TEST(GemmTest, AlphaBetaAndVectorBias) {
  // 0.5 * A @ B + 2 * C, C = [1,2,3,4]
  KernelCall call("Gemm");
  call.In(GA()).In(GB()).In(F32({4}, {1, 2, 3, 4})).Attr("alpha", 0.5f).Attr("beta", 2.0f);
  call.Out(DType::kF32);
  ExpectNear(Run1(call), {4.5, 5.0, 5.5, 7.0, 7.5, 6.0, 4.5, 7.0, 10.5, 7.0, 3.5, 7.0});
}

TEST(GemmTest, BiasShapes) {
  // A @ B + [[10],[20],[30]]
  KernelCall col("Gemm");
  col.In(GA()).In(GB()).In(F32({3, 1}, {10, 20, 30})).Out(DType::kF32);
  ExpectNear(Run1(col), {15, 12, 9, 8, 31, 24, 17, 18, 47, 36, 25, 28});
  // Scalar bias, no bias, and a full bias given as a strided view (numpy: A @ B + 0.5 *
  // np.arange(12).reshape(4,3).T).
  KernelCall scalar("Gemm");
  scalar.In(GA()).In(GB()).In(F32({}, {1})).Out(DType::kF32);
  ExpectNear(Run1(scalar), {6, 3, 0, -1, 12, 5, -2, -1, 18, 7, -4, -1});
  KernelCall none("Gemm");
  none.In(GA()).In(GB()).Out(DType::kF32);
  ExpectNear(Run1(none), {5, 2, -1, -2, 11, 4, -3, -2, 17, 6, -5, -2});
  std::vector<float> cv(12);
  for (int i = 0; i < 12; ++i) cv[i] = static_cast<float>(i);
  Tensor ct = Transposed(F32({4, 3}, cv));  // c[i][j] = 3 * j + i
  KernelCall full("Gemm");
  full.In(GA()).In(GB()).In(ct).Attr("beta", 0.5f).Out(DType::kF32);
  ExpectNear(Run1(full), {5, 3.5, 2, 2.5, 11.5, 6, 0.5, 3, 18, 8.5, -1, 3.5});
  KernelCall bad("Gemm");
  bad.In(GA()).In(GB()).In(F32({3}, {1, 2, 3})).Out(DType::kF32);
  absl::Status s = bad.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Gemm"));
}

TEST(GemmTest, OnnxAllAttributes) {
  // test_gemm_all_attributes: alpha 0.25, beta 0.35, transA, transB.
  Tensor a = F32(
      {4, 3}, {0.54881352186203f, 0.7151893377304077f, 0.6027633547782898f, 0.5448831915855408f,
               0.42365479469299316f, 0.6458941102027893f, 0.4375872015953064f, 0.891772985458374f,
               0.9636627435684204f, 0.3834415078163147f, 0.7917250394821167f, 0.5288949012756348f});
  Tensor b =
      F32({5, 4},
          {0.5680445432662964f,   0.9255966544151306f, 0.07103605568408966f, 0.08712930232286453f,
           0.020218396559357643f, 0.832619845867157f,  0.7781567573547363f,  0.8700121641159058f,
           0.978618323802948f,    0.7991585731506348f, 0.4614793658256531f,  0.7805292010307312f,
           0.11827442795038223f,  0.6399210095405579f, 0.14335328340530396f, 0.9446688890457153f,
           0.5218483209609985f,   0.4146619439125061f, 0.26455560326576233f, 0.7742336988449097f});
  Tensor c = F32({1, 5}, {0.4561503231525421f, 0.568433940410614f, 0.018789799883961678f,
                          0.6176354885101318f, 0.6120957136154175f});
  KernelCall call("Gemm");
  call.In(a).In(b).In(c).Attr("alpha", 0.25f).Attr("beta", 0.35f);
  call.Attr("transA", int64_t{1}).Attr("transB", int64_t{1}).Out(DType::kF32);
  ExpectNear(Run1(call),
             {0.37979912757873535, 0.4836736023426056, 0.37501436471939087, 0.4258093237876892,
              0.44547832012176514, 0.392333447933197, 0.6364401578903198, 0.5235674381256104,
              0.5240350961685181, 0.5636829137802124, 0.42334532737731934, 0.6389510631561279,
              0.49747031927108765, 0.4967692494392395, 0.5259358286857605});
}

TEST(GemmTest, TransposesMatchNaive) {
  std::mt19937 rng(3);
  for (auto [m, k, n] : {std::tuple<int64_t, int64_t, int64_t>{1, 7, 5}, {9, 13, 1}, {6, 1, 11}}) {
    Tensor at = Random({k, m}, rng), bt = Random({n, k}, rng);
    KernelCall call("Gemm");
    call.In(at).In(bt).Attr("transA", int64_t{1}).Attr("transB", int64_t{1}).Out(DType::kF32);
    ExpectNear(Run1(call), NaiveMatMul(Transposed(at), Transposed(bt)), 1e-5);
  }
}

TEST(GemmTest, IntegersAndErrors) {
  KernelCall ints("Gemm");
  ints.In(I64({2, 2}, {1, 2, 3, 4})).In(I64({2, 2}, {1, 0, 0, 1})).In(I64({2}, {10, 20}));
  ints.Attr("alpha", 2.0f).Attr("beta", -1.0f).Out(DType::kI64);
  EXPECT_EQ(ToInts(Run1(ints)), (std::vector<int64_t>{-8, -16, -4, -12}));
  KernelCall frac("Gemm");
  frac.In(I32({1, 1}, {1})).In(I32({1, 1}, {1})).Attr("alpha", 0.5f).Out(DType::kI32);
  EXPECT_EQ(frac.Run().status().code(), absl::StatusCode::kUnimplemented);
  KernelCall inner("Gemm");
  inner.In(GA()).In(GA()).Out(DType::kF32);
  EXPECT_EQ(inner.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall rank("Gemm");
  rank.In(F32({2}, {1, 2})).In(GB()).Out(DType::kF32);
  EXPECT_EQ(rank.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall trans("Gemm");
  trans.In(GA()).In(GB()).Attr("transA", int64_t{2}).Out(DType::kF32);
  EXPECT_EQ(trans.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall wrong("Gemm");
  wrong.In(GA()).In(GB()).OutTensor(*Tensor::Empty(DType::kF32, {4, 3}));
  EXPECT_EQ(wrong.Run().status().code(), absl::StatusCode::kInvalidArgument);
  KernelCall empty("Gemm");
  empty.In(F32({3, 0}, {})).In(F32({0, 2}, {})).In(F32({}, {1.5f})).Out(DType::kF32);
  ExpectNear(Run1(empty), {1.5, 1.5, 1.5, 1.5, 1.5, 1.5});
}

}  // namespace
}  // namespace dynvm
