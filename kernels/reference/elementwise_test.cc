// Tests of the reference elementwise kernels. Expected values are hand-computed, taken from
// ONNX's node test data (/usr/share/libonnx-testdata/data/node/test_*), or computed with numpy
// (the snippet is quoted next to the numbers).
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/reference/common.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using ::dynvm::testing::Bool;
using ::dynvm::testing::F32;
using ::dynvm::testing::I32;
using ::dynvm::testing::I64;
using ::dynvm::testing::KernelCall;
using ::dynvm::testing::Make;
using ::dynvm::testing::ToDoubles;
using ::dynvm::testing::ToInts;
using ::testing::DoubleNear;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;
using ::testing::Pointwise;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr double kInfD = std::numeric_limits<double>::infinity();

// Runs a one-output call and returns the output.
Tensor Run1(KernelCall& call) {
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return Tensor();
  return (*r)[0];
}

void ExpectNear(const Tensor& t, std::vector<double> want, double tol = 1e-6) {
  EXPECT_THAT(ToDoubles(t), Pointwise(DoubleNear(tol), want));
}

std::vector<int64_t> Ints(const Tensor& t) { return ToInts(t); }

// The transpose of a contiguous 2-D tensor, as a strided view.
Tensor Transposed(const Tensor& t) {
  return *Tensor::View(t.storage(), t.byte_offset(), t.dtype(), {t.dim(1), t.dim(0)},
                       {1, t.dim(1)});
}

absl::StatusCode Code(KernelCall& call) { return call.Run().status().code(); }

// ---- binary arithmetic ----

TEST(AddTest, BroadcastsRowAndColumn) {
  KernelCall call("Add");
  call.In(F32({2, 1}, {10, 20})).In(F32({3}, {1, 2, 3})).Out(DType::kF32);
  Tensor y = Run1(call);
  EXPECT_EQ(y.ShapeString(), "[2,3]");
  ExpectNear(y, {11, 12, 13, 21, 22, 23});
}

TEST(AddTest, ScalarAndIntegerWraps) {
  KernelCall call("Add");
  call.In(I32({3}, {1, std::numeric_limits<int32_t>::max(), -5})).In(I32({}, {1})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(call)), (std::vector<int64_t>{2, std::numeric_limits<int32_t>::min(), -4}));
}

TEST(AddTest, I64AndEmptyDims) {
  KernelCall call("Add");
  call.In(I64({0, 3}, {})).In(I64({3}, {1, 2, 3})).Out(DType::kI64);
  Tensor y = Run1(call);
  EXPECT_EQ(y.ShapeString(), "[0,3]");
  KernelCall call2("Add");
  call2.In(I64({2}, {int64_t{1} << 62, -7})).In(I64({2}, {int64_t{1} << 62, 3})).Out(DType::kI64);
  EXPECT_EQ(Ints(Run1(call2)), (std::vector<int64_t>{std::numeric_limits<int64_t>::min(), -4}));
}

TEST(AddTest, F16AndBF16) {
  Tensor a = Make<Half>(DType::kF16, {3}, {Half(1.5f), Half(-2.0f), Half(1000.0f)});
  Tensor b = Make<Half>(DType::kF16, {3}, {Half(0.25f), Half(0.5f), Half(0.5f)});
  KernelCall call("Add");
  call.In(a).In(b).Out(DType::kF16);
  ExpectNear(Run1(call), {1.75, -1.5, 1000.5});
  Tensor c = Make<BFloat16>(DType::kBF16, {2}, {BFloat16(3.0f), BFloat16(-1.0f)});
  KernelCall call2("Mul");
  call2.In(c).In(c).Out(DType::kBF16);
  ExpectNear(Run1(call2), {9, 1});
}

TEST(SubTest, StridedOperand) {
  // a^T = [[1,4],[2,5],[3,6]]
  Tensor a = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  KernelCall call("Sub");
  call.In(Transposed(a)).In(F32({3, 2}, {1, 1, 1, 1, 1, 1})).Out(DType::kF32);
  ExpectNear(Run1(call), {0, 3, 1, 4, 2, 5});
}

TEST(MulTest, BothStridedAndBroadcast) {
  Tensor a = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  KernelCall call("Mul");
  call.In(Transposed(a)).In(F32({2}, {10, -1})).Out(DType::kF32);
  ExpectNear(Run1(call), {10, -4, 20, -5, 30, -6});
}

TEST(MulTest, IntegerWrapsWithoutOverflowUB) {
  Tensor a = Make<uint16_t>(DType::kU16, {1}, {65535});
  KernelCall call("Mul");
  call.In(a).In(a).Out(DType::kU16);
  EXPECT_EQ(Ints(Run1(call)), (std::vector<int64_t>{1}));  // 65535^2 mod 2^16
}

TEST(DivTest, FloatAndIntegerTruncation) {
  KernelCall call("Div");
  call.In(F32({3}, {1, -3, 1})).In(F32({3}, {4, 2, 0})).Out(DType::kF32);
  ExpectNear(Run1(call), {0.25, -1.5, kInf});
  KernelCall ints("Div");
  ints.In(I32({5}, {-7, 7, -7, 7, std::numeric_limits<int32_t>::min()}))
      .In(I32({5}, {2, 2, -2, -2, -1}))
      .Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(ints)),
            (std::vector<int64_t>{-3, 3, 3, -3, std::numeric_limits<int32_t>::min()}));
}

TEST(DivTest, Uint8FromOnnxTestData) {
  // test_div_uint8, first ten elements.
  Tensor a = Make<uint8_t>(DType::kU8, {10}, {16, 6, 0, 12, 18, 3, 16, 17, 14, 18});
  Tensor b = Make<uint8_t>(DType::kU8, {10}, {11, 5, 23, 23, 23, 1, 12, 16, 21, 6});
  KernelCall call("Div");
  call.In(a).In(b).Out(DType::kU8);
  EXPECT_EQ(Ints(Run1(call)), (std::vector<int64_t>{1, 1, 0, 0, 0, 3, 1, 1, 0, 3}));
}

TEST(DivTest, IntegerDivisionByZeroIsAnError) {
  KernelCall call("Div");
  call.In(I64({2}, {1, 2})).In(I64({2}, {1, 0})).Out(DType::kI64);
  absl::Status s = call.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Div"));
}

TEST(ModTest, IntegerSignFollowsDivisor) {
  // test_mod_mixed_sign_int32
  KernelCall call("Mod");
  call.In(I32({6}, {-4, 7, 5, 4, -7, 8})).In(I32({6}, {2, -3, 8, -2, 3, 5})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(call)), (std::vector<int64_t>{0, -2, 5, 0, 2, 3}));
}

TEST(ModTest, FmodSignFollowsDividend) {
  // test_mod_int64_fmod
  KernelCall call("Mod");
  call.In(I64({6}, {-4, 7, 5, 4, -7, 8}))
      .In(I64({6}, {2, -3, 8, -2, 3, 5}))
      .Attr("fmod", int64_t{1});
  call.Out(DType::kI64);
  EXPECT_EQ(Ints(Run1(call)), (std::vector<int64_t>{0, 1, 5, 0, -1, 3}));
  // test_mod_mixed_sign_float32
  KernelCall f("Mod");
  f.In(F32({6}, {-4.3f, 7.2f, 5.0f, 4.3f, -7.2f, 8.0f}))
      .In(F32({6}, {2.1f, -3.4f, 8.0f, -2.1f, 3.4f, 5.0f}))
      .Attr("fmod", int64_t{1})
      .Out(DType::kF32);
  ExpectNear(Run1(f), {-0.10000038146972656, 0.39999961853027344, 5.0, 0.10000038146972656,
                       -0.39999961853027344, 3.0});
}

TEST(ModTest, BroadcastAndErrors) {
  // test_mod_broadcast, the second row.
  KernelCall call("Mod");
  call.In(I32({1, 5}, {5, 6, 7, 8, 9})).In(I32({1}, {7})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(call)), (std::vector<int64_t>{5, 6, 0, 1, 2}));
  KernelCall zero("Mod");
  zero.In(I32({1}, {5})).In(I32({1}, {0})).Out(DType::kI32);
  EXPECT_EQ(Code(zero), absl::StatusCode::kInvalidArgument);
  KernelCall bad("Mod");
  bad.In(I32({1}, {5})).In(I32({1}, {3})).Attr("fmod", int64_t{2}).Out(DType::kI32);
  EXPECT_EQ(Code(bad), absl::StatusCode::kInvalidArgument);
  KernelCall min("Mod");
  min.In(I32({1}, {std::numeric_limits<int32_t>::min()})).In(I32({1}, {-1})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(min)), (std::vector<int64_t>{0}));
}

TEST(PowTest, FloatBase) {
  // np.power([2,3,-2,0.5], [3,0.5,2,-1]) in float32
  KernelCall call("Pow");
  call.In(F32({4}, {2, 3, -2, 0.5f})).In(F32({4}, {3, 0.5f, 2, -1})).Out(DType::kF32);
  ExpectNear(Run1(call), {8.0, 1.732050895690918, 4.0, 2.0});
  // test_pow_types_float32_int64
  KernelCall mixed("Pow");
  mixed.In(F32({3}, {1, 2, 3})).In(I64({3}, {4, 5, 6})).Out(DType::kF32);
  ExpectNear(Run1(mixed), {1, 32, 729});
}

TEST(PowTest, IntegerBase) {
  // test_pow_types_int32_int32 and test_pow_types_int32_float32, plus negative exponents.
  KernelCall call("Pow");
  call.In(I32({5}, {1, 2, 3, -1, 2})).In(I32({5}, {4, 5, 6, -3, -1})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(call)), (std::vector<int64_t>{1, 32, 729, -1, 0}));
  KernelCall f("Pow");
  f.In(I32({3}, {1, 2, 3})).In(F32({3}, {4, 5, 6})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(f)), (std::vector<int64_t>{1, 32, 729}));
  // Overflow wraps (integer exponent) or saturates (float exponent): pow(3, 40, 2**32) as i32.
  KernelCall big("Pow");
  big.In(I32({2}, {3, 2})).In(I32({2}, {40, 31})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(big)),
            (std::vector<int64_t>{689956897, std::numeric_limits<int32_t>::min()}));
  KernelCall sat("Pow");
  sat.In(I32({2}, {2, -2})).In(F32({2}, {100, 101})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(sat)), (std::vector<int64_t>{std::numeric_limits<int32_t>::max(),
                                                   std::numeric_limits<int32_t>::min()}));
  KernelCall bcast("Pow");
  bcast.In(I64({2, 1}, {2, 3})).In(I64({2}, {2, 3})).Out(DType::kI64);
  EXPECT_EQ(Ints(Run1(bcast)), (std::vector<int64_t>{4, 8, 9, 27}));
}

// ---- variadic ----

TEST(VariadicTest, OnnxExamples) {
  // test_max_example, test_min_example, test_sum_example, test_mean_example
  Tensor a = F32({3}, {3, 2, 1}), b = F32({3}, {1, 4, 4}), c = F32({3}, {2, 5, 3});
  KernelCall max("Max");
  max.In(a).In(b).In(c).Out(DType::kF32);
  ExpectNear(Run1(max), {3, 5, 4});
  KernelCall min("Min");
  min.In(a).In(b).In(F32({3}, {2, 5, 0})).Out(DType::kF32);
  ExpectNear(Run1(min), {1, 2, 0});
  Tensor s0 = F32({3}, {3, 0, 2}), s1 = F32({3}, {1, 3, 4}), s2 = F32({3}, {2, 6, 6});
  KernelCall sum("Sum");
  sum.In(s0).In(s1).In(s2).Out(DType::kF32);
  ExpectNear(Run1(sum), {6, 9, 12});
  KernelCall mean("Mean");
  mean.In(s0).In(s1).In(s2).Out(DType::kF32);
  ExpectNear(Run1(mean), {2, 3, 4});
}

TEST(VariadicTest, BroadcastSingleInputAndNaN) {
  KernelCall max("Max");
  max.In(F32({2, 1}, {1, kNaN})).In(F32({3}, {0, 2, 3})).Out(DType::kF32);
  std::vector<double> v = ToDoubles(Run1(max));
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0], 1);
  EXPECT_EQ(v[1], 2);
  EXPECT_EQ(v[2], 3);
  EXPECT_TRUE(std::isnan(v[3]) && std::isnan(v[4]) && std::isnan(v[5]));
  KernelCall one("Sum");
  one.In(Transposed(F32({2, 2}, {1, 2, 3, 4}))).Out(DType::kF32);
  ExpectNear(Run1(one), {1, 3, 2, 4});
  KernelCall ints("Min");
  ints.In(I64({3}, {5, -2, 7})).In(I64({1}, {0})).In(I64({3}, {1, 1, -9})).Out(DType::kI64);
  EXPECT_EQ(Ints(Run1(ints)), (std::vector<int64_t>{0, -2, -9}));
  KernelCall mean_i("Mean");
  mean_i.In(I32({2}, {1, -3})).In(I32({2}, {2, 0})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(mean_i)), (std::vector<int64_t>{1, -1}));  // truncated
  KernelCall bad("Sum");
  bad.In(F32({2}, {1, 2})).In(F32({3}, {1, 2, 3})).Out(DType::kF32);
  EXPECT_EQ(Code(bad), absl::StatusCode::kInvalidArgument);
}

// ---- comparison and logic ----

TEST(CompareTest, AllComparisons) {
  Tensor a = F32({4}, {1, 2, 3, kNaN});
  Tensor b = F32({1}, {2});
  auto run = [&](const char* op) {
    KernelCall call(op);
    call.In(a).In(b).Out(DType::kBool);
    return Ints(Run1(call));
  };
  EXPECT_EQ(run("Equal"), (std::vector<int64_t>{0, 1, 0, 0}));
  EXPECT_EQ(run("Greater"), (std::vector<int64_t>{0, 0, 1, 0}));
  EXPECT_EQ(run("Less"), (std::vector<int64_t>{1, 0, 0, 0}));
  EXPECT_EQ(run("GreaterOrEqual"), (std::vector<int64_t>{0, 1, 1, 0}));
  EXPECT_EQ(run("LessOrEqual"), (std::vector<int64_t>{1, 1, 0, 0}));
}

TEST(CompareTest, IntsBoolsAndStrides) {
  KernelCall eq("Equal");
  eq.In(Bool({2}, {true, false})).In(Bool({2, 1}, {true, false})).Out(DType::kBool);
  EXPECT_EQ(Ints(Run1(eq)), (std::vector<int64_t>{1, 0, 0, 1}));
  KernelCall gt("Greater");
  gt.In(Transposed(I64({2, 2}, {1, 5, 3, 0}))).In(I64({}, {2})).Out(DType::kBool);
  EXPECT_EQ(Ints(Run1(gt)), (std::vector<int64_t>{0, 1, 1, 0}));
  KernelCall lt("Less");
  lt.In(I32({2}, {-1, 4})).In(I32({2}, {0, 4})).Out(DType::kBool);
  EXPECT_EQ(Ints(Run1(lt)), (std::vector<int64_t>{1, 0}));
}

TEST(LogicTest, AndOrXorNot) {
  Tensor a = Bool({4}, {false, false, true, true});
  Tensor b = Bool({4}, {false, true, false, true});
  auto run = [&](const char* op) {
    KernelCall call(op);
    call.In(a).In(b).Out(DType::kBool);
    return Ints(Run1(call));
  };
  EXPECT_EQ(run("And"), (std::vector<int64_t>{0, 0, 0, 1}));
  EXPECT_EQ(run("Or"), (std::vector<int64_t>{0, 1, 1, 1}));
  EXPECT_EQ(run("Xor"), (std::vector<int64_t>{0, 1, 1, 0}));
  KernelCall n("Not");
  n.In(a).Out(DType::kBool);
  EXPECT_EQ(Ints(Run1(n)), (std::vector<int64_t>{1, 1, 0, 0}));
  KernelCall f("And");
  f.In(F32({1}, {1})).In(F32({1}, {1})).Out(DType::kBool);
  EXPECT_EQ(Code(f), absl::StatusCode::kUnimplemented);
}

TEST(BitShiftTest, LeftRightAndWideShifts) {
  // test_bitshift_left_uint8, test_bitshift_right_uint16
  KernelCall l("BitShift");
  l.In(Make<uint8_t>(DType::kU8, {4}, {16, 4, 1, 1}))
      .In(Make<uint8_t>(DType::kU8, {4}, {1, 2, 3, 8}))
      .Attr("direction", std::string("LEFT"))
      .Out(DType::kU8);
  EXPECT_EQ(Ints(Run1(l)), (std::vector<int64_t>{32, 16, 8, 0}));
  KernelCall r("BitShift");
  r.In(Make<uint16_t>(DType::kU16, {3}, {16, 4, 1}))
      .In(Make<uint16_t>(DType::kU16, {3}, {1, 2, 3}))
      .Attr("direction", std::string("RIGHT"))
      .Out(DType::kU16);
  EXPECT_EQ(Ints(Run1(r)), (std::vector<int64_t>{8, 1, 0}));
  KernelCall u64("BitShift");
  u64.In(Make<uint64_t>(DType::kU64, {2}, {1, 1}))
      .In(Make<uint64_t>(DType::kU64, {2}, {63, 64}))
      .Attr("direction", std::string("LEFT"))
      .Out(DType::kU64);
  EXPECT_EQ(ToDoubles(Run1(u64)), (std::vector<double>{9223372036854775808.0, 0}));
  KernelCall bad("BitShift");
  bad.In(Make<uint8_t>(DType::kU8, {1}, {1})).In(Make<uint8_t>(DType::kU8, {1}, {1}));
  bad.Attr("direction", std::string("UP")).Out(DType::kU8);
  EXPECT_EQ(Code(bad), absl::StatusCode::kInvalidArgument);
}

// ---- unary ----

Tensor UnaryInput() { return F32({6}, {-2.5f, -1.0f, -0.25f, 0.0f, 0.5f, 3.0f}); }

Tensor RunUnary(const char* op, const Tensor& x) {
  KernelCall call(op);
  call.In(x).Out(x.dtype());
  return Run1(call);
}

TEST(UnaryTest, Trigonometric) {
  // Values known in closed form: sin(pi/2) = 1, cos(pi) = -1, tan(pi/4) = 1, asin(1) = pi/2,
  // acos(0) = pi/2, atan(1) = pi/4, cosh(0) = 1, acosh(1) = 0, atanh(1/2) = ln(3)/2,
  // sinh(ln 2) = 3/4, asinh(3/4) = ln 2.
  const double pi = 3.14159265358979323846;
  ExpectNear(RunUnary("Sin", F32({3}, {0, static_cast<float>(pi / 2), static_cast<float>(pi / 6)})),
             {0, 1, 0.5});
  ExpectNear(RunUnary("Cos", F32({2}, {0, static_cast<float>(pi)})), {1, -1});
  ExpectNear(RunUnary("Tan", F32({2}, {0, static_cast<float>(pi / 4)})), {0, 1});
  ExpectNear(RunUnary("Asin", F32({2}, {1, -0.5f})), {pi / 2, -pi / 6});
  ExpectNear(RunUnary("Acos", F32({2}, {0, 1})), {pi / 2, 0});
  ExpectNear(RunUnary("Atan", F32({2}, {1, 0})), {pi / 4, 0});
  ExpectNear(RunUnary("Sinh", F32({2}, {0, static_cast<float>(std::log(2.0))})), {0, 0.75});
  ExpectNear(RunUnary("Cosh", F32({2}, {0, static_cast<float>(std::log(2.0))})), {1, 1.25});
  ExpectNear(RunUnary("Asinh", F32({2}, {0, 0.75f})), {0, std::log(2.0)});
  ExpectNear(RunUnary("Acosh", F32({2}, {1, 1.25f})), {0, std::log(2.0)});
  ExpectNear(RunUnary("Atanh", F32({2}, {0, 0.5f})), {0, std::log(3.0) / 2});
  // Doubles too; integers are refused.
  ExpectNear(RunUnary("Cos", Make<double>(DType::kF64, {1}, {pi})), {-1}, 1e-12);
  KernelCall ints("Sin");
  ints.In(I64({1}, {1})).Out(DType::kI64);
  EXPECT_FALSE(ints.Run().ok());
}

TEST(UnaryTest, Transcendentals) {
  // x = np.float32([-2.5, -1, -0.25, 0, 0.5, 3]); np.exp(x), np.tanh(x), math.erf,
  // 1/(1+np.exp(-x)), np.log1p(np.exp(x)), x/(1+abs(x))
  const Tensor x = UnaryInput();
  ExpectNear(RunUnary("Exp", x),
             {0.0820850059390068, 0.3678794205188751, 0.7788007259368896, 1.0, 1.6487212181091309,
              20.08553695678711},
             1e-5);
  ExpectNear(RunUnary("Tanh", x), {-0.9866142868995667, -0.7615941762924194, -0.24491865932941437,
                                   0.0, 0.46211719512939453, 0.9950547814369202});
  ExpectNear(RunUnary("Erf", x), {-0.9995930194854736, -0.8427007794380188, -0.27632638812065125,
                                  0.0, 0.5204998850822449, 0.9999778866767883});
  ExpectNear(RunUnary("Sigmoid", x), {0.07585818320512772, 0.2689414322376251, 0.43782350420951843,
                                      0.5, 0.622459352016449, 0.9525741338729858});
  ExpectNear(RunUnary("Softplus", x), {0.07888973504304886, 0.3132616877555847, 0.575939416885376,
                                       0.6931471824645996, 0.9740769863128662, 3.0485873222351074});
  ExpectNear(RunUnary("Softsign", x),
             {-0.7142857313156128, -0.5, -0.2, 0.0, 0.3333333432674408, 0.75});
  // Large magnitudes do not overflow.
  ExpectNear(RunUnary("Sigmoid", F32({2}, {-1000, 1000})), {0, 1});
  ExpectNear(RunUnary("Softplus", F32({2}, {-1000, 1000})), {0, 1000});
  // np.sqrt / np.log / 1/y for y = [0.25, 1, 2, 9]
  const Tensor y = F32({4}, {0.25f, 1, 2, 9});
  ExpectNear(RunUnary("Sqrt", y), {0.5, 1.0, 1.4142135381698608, 3.0});
  ExpectNear(RunUnary("Log", y),
             {-1.3862943649291992, 0.0, 0.6931471824645996, 2.1972246170043945});
  ExpectNear(RunUnary("Reciprocal", y), {4.0, 1.0, 0.5, 0.1111111119389534});
}

TEST(UnaryTest, RoundingAndSign) {
  // test_round
  const Tensor x = F32({15}, {0.1f, 0.5f, 0.9f, 1.2f, 1.5f, 1.8f, 2.3f, 2.5f, 2.7f, -1.1f, -1.5f,
                              -1.9f, -2.2f, -2.5f, -2.8f});
  ExpectNear(RunUnary("Round", x), {0, 0, 1, 1, 2, 2, 2, 2, 3, -1, -2, -2, -2, -2, -3});
  ExpectNear(RunUnary("Floor", F32({3}, {-1.5f, 0.5f, 2.0f})), {-2, 0, 2});
  ExpectNear(RunUnary("Ceil", F32({3}, {-1.5f, 0.5f, 2.0f})), {-1, 1, 2});
  ExpectNear(RunUnary("Sign", F32({3}, {-0.5f, 0.0f, 7.0f})), {-1, 0, 1});
  EXPECT_EQ(Ints(RunUnary("Sign", I64({3}, {-9, 0, 4}))), (std::vector<int64_t>{-1, 0, 1}));
  EXPECT_EQ(Ints(RunUnary("Sign", Make<uint8_t>(DType::kU8, {2}, {0, 200}))),
            (std::vector<int64_t>{0, 1}));
}

TEST(UnaryTest, IntegerUnaries) {
  const int32_t kMin = std::numeric_limits<int32_t>::min();
  EXPECT_EQ(Ints(RunUnary("Abs", I32({3}, {-3, 4, kMin}))), (std::vector<int64_t>{3, 4, kMin}));
  EXPECT_EQ(Ints(RunUnary("Neg", I32({3}, {-3, 4, kMin}))), (std::vector<int64_t>{3, -4, kMin}));
  EXPECT_EQ(Ints(RunUnary("Relu", I64({3}, {-3, 0, 5}))), (std::vector<int64_t>{0, 0, 5}));
  ExpectNear(RunUnary("Relu", F32({3}, {-3, 0, 5})), {0, 0, 5});
  ExpectNear(RunUnary("Abs", F32({2}, {-3, 2})), {3, 2});
  KernelCall neg_u("Neg");
  neg_u.In(Make<uint8_t>(DType::kU8, {1}, {1})).Out(DType::kU8);
  EXPECT_EQ(Code(neg_u), absl::StatusCode::kUnimplemented);
  KernelCall sqrt_i("Sqrt");
  sqrt_i.In(I32({1}, {4})).Out(DType::kI32);
  EXPECT_EQ(Code(sqrt_i), absl::StatusCode::kUnimplemented);
}

TEST(UnaryTest, StridedInputAndF16) {
  Tensor x = F32({2, 2}, {1, 4, 9, 16});
  ExpectNear(RunUnary("Sqrt", Transposed(x)), {1, 3, 2, 4});
  Tensor h = Make<Half>(DType::kF16, {2}, {Half(-1.0f), Half(4.0f)});
  ExpectNear(RunUnary("Relu", h), {0, 4});
  Tensor e = F32({0, 2}, {});
  EXPECT_EQ(RunUnary("Exp", e).ShapeString(), "[0,2]");
}

TEST(UnaryTest, NaNAndInfPredicates) {
  // test_isinf, test_isinf_negative, test_isinf_positive
  const Tensor x = F32({6}, {-1.2f, kNaN, kInf, 2.8f, -kInf, kInf});
  KernelCall both("IsInf");
  both.In(x).Out(DType::kBool);
  EXPECT_EQ(Ints(Run1(both)), (std::vector<int64_t>{0, 0, 1, 0, 1, 1}));
  KernelCall neg("IsInf");
  neg.In(x).Attr("detect_positive", int64_t{0}).Out(DType::kBool);
  EXPECT_EQ(Ints(Run1(neg)), (std::vector<int64_t>{0, 0, 0, 0, 1, 0}));
  KernelCall pos("IsInf");
  pos.In(x).Attr("detect_negative", int64_t{0}).Out(DType::kBool);
  EXPECT_EQ(Ints(Run1(pos)), (std::vector<int64_t>{0, 0, 1, 0, 0, 1}));
  KernelCall nan("IsNaN");
  nan.In(x).Out(DType::kBool);
  EXPECT_EQ(Ints(Run1(nan)), (std::vector<int64_t>{0, 1, 0, 0, 0, 0}));
}

TEST(UnaryTest, ActivationsWithAttributes) {
  // numpy: np.where(x<0, a*x, x) etc. for x = [-2.5, -1, -0.25, 0, 0.5, 3]
  const Tensor x = UnaryInput();
  auto run = [&](const char* op, std::vector<std::pair<std::string, float>> attrs) {
    KernelCall call(op);
    call.In(x).Out(DType::kF32);
    for (auto& [k, v] : attrs) call.Attr(k, v);
    return Run1(call);
  };
  ExpectNear(run("LeakyRelu", {{"alpha", 0.1f}}), {-0.25, -0.1, -0.025, 0.0, 0.5, 3.0});
  ExpectNear(run("LeakyRelu", {}), {-0.025, -0.01, -0.0025, 0.0, 0.5, 3.0});
  ExpectNear(run("Elu", {{"alpha", 0.5f}}),
             {-0.4589574933052063, -0.31606030464172363, -0.11059963703155518, 0.0, 0.5, 3.0});
  ExpectNear(run("Selu", {}), {-1.613785743713379, -1.1113307476043701, -0.38889020681381226, 0.0,
                               0.5253505110740662, 3.1521029472351074});
  ExpectNear(run("Celu", {{"alpha", 2.0f}}),
             {-1.4269905090332031, -0.7869386672973633, -0.2350062131881714, 0.0, 0.5, 3.0});
  ExpectNear(run("HardSigmoid", {{"alpha", 0.3f}, {"beta", 0.4f}}),
             {0.0, 0.1, 0.325, 0.4, 0.55, 1.0});
  ExpectNear(run("HardSwish", {}), {-0.208333358168602, -0.3333333134651184, -0.1145833358168602,
                                    0.0, 0.2916666567325592, 3.0});
  ExpectNear(run("ThresholdedRelu", {{"alpha", 0.25f}}), {0, 0, 0, 0, 0.5, 3.0});
  ExpectNear(run("ThresholdedRelu", {}), {0, 0, 0, 0, 0, 3.0});
  KernelCall celu0("Celu");
  celu0.In(x).Attr("alpha", 0.0f).Out(DType::kF32);
  EXPECT_EQ(Code(celu0), absl::StatusCode::kInvalidArgument);
}

// ---- PRelu, Clip, Where ----

TEST(PReluTest, BroadcastSlope) {
  // Rows of test_prelu_broadcast: X[0,1,:] with slope of shape [5].
  Tensor x = F32({1, 5}, {-0.9772778749465942f, 0.9500884413719177f, -0.15135720372200012f,
                          -0.10321885347366333f, 0.4105985164642334f});
  Tensor slope = F32({5}, {-0.6724604368209839f, -0.35955315828323364f, -0.8131462931632996f,
                           -1.7262825965881348f, 0.17742614448070526f});
  KernelCall call("PRelu");
  call.In(x).In(slope).Out(DType::kF32);
  ExpectNear(Run1(call), {0.6571807265281677, 0.9500884413719177, 0.12307555228471756,
                          0.17818491160869598, 0.4105985164642334});
  KernelCall ints("PRelu");
  ints.In(I32({2, 2}, {-2, 3, -4, 5})).In(I32({2, 1}, {3, -1})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(ints)), (std::vector<int64_t>{-6, 3, 4, 5}));
  KernelCall bad("PRelu");
  bad.In(F32({2}, {1, 2})).In(F32({2, 2}, {1, 2, 3, 4})).Out(DType::kF32);
  EXPECT_EQ(Code(bad), absl::StatusCode::kInvalidArgument);
}

TEST(ClipTest, InputForm) {
  // test_clip_splitbounds
  KernelCall call("Clip");
  call.In(F32({3}, {-1, 0, 6})).In(F32({}, {-5})).In(F32({}, {5})).Out(DType::kF32);
  ExpectNear(Run1(call), {-1, 0, 5});
  // test_clip_default_int8_min: only min given.
  KernelCall i8("Clip");
  i8.In(Make<int8_t>(DType::kI8, {4}, {1, -2, 0, -1})).In(Make<int8_t>(DType::kI8, {}, {0}));
  i8.Out(DType::kI8);
  EXPECT_EQ(Ints(Run1(i8)), (std::vector<int64_t>{1, 0, 0, 0}));
  // Only max, via an absent min.
  KernelCall mx("Clip");
  mx.In(I64({3}, {-7, 2, 9})).Absent().In(I64({}, {3})).Out(DType::kI64);
  EXPECT_EQ(Ints(Run1(mx)), (std::vector<int64_t>{-7, 2, 3}));
  // min > max gives max everywhere.
  KernelCall inv("Clip");
  inv.In(F32({2}, {-1, 9})).In(F32({}, {5})).In(F32({}, {1})).Out(DType::kF32);
  ExpectNear(Run1(inv), {1, 1});
  KernelCall bad("Clip");
  bad.In(F32({2}, {-1, 9})).In(F32({2}, {0, 1})).Out(DType::kF32);
  EXPECT_EQ(Code(bad), absl::StatusCode::kInvalidArgument);
}

TEST(ClipTest, AttributeFormAndNaN) {
  KernelCall call("Clip");
  call.In(Transposed(F32({2, 2}, {-3, 0.5f, kNaN, 7}))).Attr("min", -1.0f).Attr("max", 1.0f);
  call.Out(DType::kF32);
  std::vector<double> v = ToDoubles(Run1(call));
  ASSERT_EQ(v.size(), 4u);
  EXPECT_EQ(v[0], -1);
  EXPECT_TRUE(std::isnan(v[1]));
  EXPECT_EQ(v[2], 0.5);
  EXPECT_EQ(v[3], 1);
}

TEST(WhereTest, ThreeWayBroadcast) {
  // test_where_long_example
  KernelCall call("Where");
  call.In(Bool({2, 2}, {true, false, true, true})).In(I64({2, 2}, {1, 2, 3, 4}));
  call.In(I64({2, 2}, {9, 8, 7, 6})).Out(DType::kI64);
  EXPECT_EQ(Ints(Run1(call)), (std::vector<int64_t>{1, 8, 3, 4}));
  KernelCall b("Where");
  b.In(Bool({2, 1}, {true, false})).In(F32({3}, {1, 2, 3})).In(F32({}, {-1})).Out(DType::kF32);
  ExpectNear(Run1(b), {1, 2, 3, -1, -1, -1});
  KernelCall bools("Where");
  bools.In(Bool({2}, {true, false})).In(Bool({2}, {false, false})).In(Bool({2}, {true, true}));
  bools.Out(DType::kBool);
  EXPECT_EQ(Ints(Run1(bools)), (std::vector<int64_t>{0, 1}));
  // A hostile bool byte (neither 0 nor 1) reads as true, without undefined behaviour.
  Tensor cond = Bool({2}, {false, false});
  reinterpret_cast<uint8_t*>(cond.raw_data())[1] = 190;
  KernelCall hostile("Where");
  hostile.In(cond).In(I32({2}, {1, 2})).In(I32({2}, {-1, -2})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(hostile)), (std::vector<int64_t>{-1, 2}));
  KernelCall bad("Where");
  bad.In(Bool({2}, {true, false})).In(F32({3}, {1, 2, 3})).In(F32({}, {0})).Out(DType::kF32);
  EXPECT_EQ(Code(bad), absl::StatusCode::kInvalidArgument);
}

// ---- Cast, CastLike, Identity, Dropout ----

TEST(CastTest, FloatToIntegersTruncatesAndSaturates) {
  KernelCall call("Cast");
  call.In(F32({6}, {2.9f, -2.9f, 1e10f, -1e10f, kNaN, kInf})).Attr("to", int64_t{6});
  call.Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(call)), (std::vector<int64_t>{2, -2, std::numeric_limits<int32_t>::max(),
                                                    std::numeric_limits<int32_t>::min(), 0,
                                                    std::numeric_limits<int32_t>::max()}));
  KernelCall u8("Cast");
  u8.In(F32({3}, {-5, 300, 7.5f})).Attr("to", int64_t{2}).Out(DType::kU8);
  EXPECT_EQ(Ints(Run1(u8)), (std::vector<int64_t>{0, 255, 7}));
  KernelCall i64("Cast");
  i64.In(F32({2}, {1e19f, -3.5f})).Attr("to", int64_t{7}).Out(DType::kI64);
  EXPECT_EQ(Ints(Run1(i64)), (std::vector<int64_t>{std::numeric_limits<int64_t>::max(), -3}));
}

TEST(CastTest, BoolsIntsAndHalves) {
  KernelCall to_bool("Cast");
  to_bool.In(F32({4}, {0, -0.0f, 0.1f, kNaN})).Attr("to", int64_t{9}).Out(DType::kBool);
  EXPECT_EQ(Ints(Run1(to_bool)), (std::vector<int64_t>{0, 0, 1, 1}));
  KernelCall from_bool("Cast");
  from_bool.In(Bool({2}, {true, false})).Attr("to", int64_t{1}).Out(DType::kF32);
  ExpectNear(Run1(from_bool), {1, 0});
  KernelCall wrap("Cast");
  wrap.In(I64({2}, {300, -1})).Attr("to", int64_t{2}).Out(DType::kU8);
  EXPECT_EQ(Ints(Run1(wrap)), (std::vector<int64_t>{44, 255}));
  // test_cast_FLOAT_to_FLOAT16 style: 0.1 rounds to the nearest half 0.0999755859375.
  KernelCall f16("Cast");
  f16.In(Transposed(F32({2, 2}, {0.1f, 65504, 1e6f, -2}))).Attr("to", int64_t{10});
  f16.Out(DType::kF16);
  Tensor h = Run1(f16);
  ExpectNear(h, {0.0999755859375, kInfD, 65504, -2}, 0);
  KernelCall bf("Cast");
  bf.In(h).Attr("to", int64_t{16}).Out(DType::kBF16);
  ExpectNear(Run1(bf), {0.10009765625, kInfD, 65536, -2}, 0);
  KernelCall d("Cast");
  d.In(I32({2}, {-7, 16777217})).Attr("to", int64_t{11}).Out(DType::kF64);
  ExpectNear(Run1(d), {-7, 16777217}, 0);
}

TEST(CastTest, OutputPortIsAuthoritativeAndErrors) {
  KernelCall call("Cast");
  call.In(F32({1}, {3.7f})).Attr("to", int64_t{1}).Out(DType::kI64);
  EXPECT_EQ(Ints(Run1(call)), (std::vector<int64_t>{3}));
  // Without a concrete output port the attribute decides.
  KernelSpec spec = KernelCall("Cast").In(F32({1}, {1})).Attr("to", int64_t{8}).spec();
  spec.outputs.push_back(PortSpec{.dynamic = true});
  EXPECT_EQ(KernelRegistry::Global().Create(spec).status().code(),
            absl::StatusCode::kUnimplemented);  // string
  KernelSpec no_to = KernelCall("Cast").In(F32({1}, {1})).spec();
  no_to.outputs.push_back(PortSpec{.dynamic = true});
  EXPECT_EQ(KernelRegistry::Global().Create(no_to).status().code(),
            absl::StatusCode::kInvalidArgument);
  KernelSpec to_i32 = KernelCall("Cast").In(F32({1}, {1})).Attr("to", int64_t{6}).spec();
  to_i32.outputs.push_back(PortSpec{.dynamic = true});
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(to_i32);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)->name(), "cast.f32.ref");
}

TEST(CastLikeTest, TakesTheTargetDtype) {
  KernelCall call("CastLike");
  call.In(F32({3}, {1.5f, -2.5f, 0})).In(I32({0}, {})).Out(DType::kI32);
  EXPECT_EQ(Ints(Run1(call)), (std::vector<int64_t>{1, -2, 0}));
  KernelCall same("CastLike");
  same.In(Transposed(F32({2, 2}, {1, 2, 3, 4}))).In(F32({}, {0})).Out(DType::kF32);
  ExpectNear(Run1(same), {1, 3, 2, 4});
}

TEST(IdentityTest, CopiesAnyDtypeAndStrides) {
  ExpectNear(RunUnary("Identity", Transposed(F32({2, 3}, {1, 2, 3, 4, 5, 6}))), {1, 4, 2, 5, 3, 6});
  EXPECT_EQ(Ints(RunUnary("Identity", Bool({3}, {true, false, true}))),
            (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(Ints(RunUnary("Identity", I64({0}, {}))), (std::vector<int64_t>{}));
}

TEST(DropoutTest, InferenceIsIdentityWithTrueMask) {
  KernelCall call("Dropout");
  call.In(F32({2, 2}, {1, 2, 3, 4})).Out(DType::kF32).Out(DType::kBool);
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], {1, 2, 3, 4});
  EXPECT_EQ(Ints((*r)[1]), (std::vector<int64_t>{1, 1, 1, 1}));
  // training_mode with ratio 0 is still the identity.
  KernelCall zero("Dropout");
  zero.In(F32({2}, {1, 2})).In(F32({}, {0})).In(Bool({}, {true})).Out(DType::kF32);
  ExpectNear(Run1(zero), {1, 2});
  // training_mode with the default ratio 0.5 drops (kernels/reference/random_test.cc tests
  // the statistics): each value is 0 or doubled.
  KernelCall train("Dropout");
  train.In(F32({2}, {1, 2})).Absent().In(Bool({}, {true})).Out(DType::kF32);
  const Tensor dropped = Run1(train);
  for (int64_t i = 0; i < 2; ++i) {
    const float v = dropped.data<float>()[i];
    EXPECT_TRUE(v == 0 || v == 2.0f * static_cast<float>(i + 1)) << v;
  }
  KernelCall ratio("Dropout");
  ratio.In(F32({2}, {1, 2})).Attr("ratio", 1.5f).Out(DType::kF32);
  EXPECT_EQ(Code(ratio), absl::StatusCode::kInvalidArgument);
}

// ---- outputs and shape errors ----

TEST(OutputTest, PreallocatedOutput) {
  Tensor out = *Tensor::Empty(DType::kF32, {2});
  KernelCall ok("Add");
  ok.In(F32({2}, {1, 2})).In(F32({}, {1})).OutTensor(out);
  ExpectNear(Run1(ok), {2, 3});
  ExpectNear(out, {2, 3});
  Tensor wrong = *Tensor::Empty(DType::kF32, {3});
  KernelCall bad("Add");
  bad.In(F32({2}, {1, 2})).In(F32({}, {1})).OutTensor(wrong);
  absl::Status s = bad.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("[3]"));
  Tensor wrong_u = *Tensor::Empty(DType::kF32, {3});
  KernelCall bad_u("Exp");
  bad_u.In(F32({2}, {1, 2})).OutTensor(wrong_u);
  EXPECT_EQ(Code(bad_u), absl::StatusCode::kInvalidArgument);
}

TEST(OutputTest, IncompatibleShapesAndDtypes) {
  KernelCall call("Add");
  call.In(F32({2, 3}, {1, 2, 3, 4, 5, 6})).In(F32({2}, {1, 2})).Out(DType::kF32);
  absl::Status s = call.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("Add"));
  EXPECT_THAT(s.message(), HasSubstr("[2,3]"));
  KernelCall mixed("Add");
  mixed.In(F32({1}, {1})).In(I32({1}, {1})).Out(DType::kF32);
  EXPECT_EQ(Code(mixed), absl::StatusCode::kInvalidArgument);
  KernelCall arity("Add");
  arity.In(F32({1}, {1})).Out(DType::kF32);
  EXPECT_EQ(Code(arity), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dynvm
