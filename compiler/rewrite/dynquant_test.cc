// dynquant_matmul and dynquant_matmul_bias (dynquant.cc): the MatMul form ONNX Runtime's
// quantize_dynamic writes (DynamicQuantizeLinear, MatMulInteger, Cast, Mul of the scales, Mul,
// Add of the bias) fused into com.microsoft DynamicQuantizeMatMul, against the unfused program
// bit for bit, over leading batch dims, s8 and u8 weights, per-tensor and per-column scales and
// zero points, absent weight zero points, either operand order of each Mul and Add, with and
// without a bias, one DynamicQuantizeLinear shared by several MatMulIntegers; and the near
// misses left alone.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm::compiler::rewrite {
namespace {

constexpr char kFused[] = "com.microsoft::DynamicQuantizeMatMul";

struct Case {
  std::vector<int64_t> lead = {2, 5};  // x [lead..., K]
  int64_t k = 24, n = 12;
  DType w = DType::kI8;
  bool per_column = false;
  bool weight_zp = true;  // MatMulInteger's fourth input
  bool bias = true;       // Add(y, bias [N])
  bool swap = false;      // the other operand order of both Muls and the Add
  int projections = 1;    // MatMulIntegers reading one DynamicQuantizeLinear
  // Near misses:
  bool bias_2d = false;         // bias [1, N]: the Add stays
  bool scale_2d = false;        // ws [1, N]: the Mul broadcasts to another shape
  bool other_zp = false;        // MatMulInteger's a_zero_point a constant, not the DQL's
  bool product_output = false;  // the MatMulInteger result also a graph output
};

Tensor Ints(DType dtype, std::vector<int64_t> dims, std::mt19937& rng) {
  Tensor t = *Tensor::Empty(dtype, dims);
  std::uniform_int_distribution<int> d(dtype == DType::kU8 ? 0 : -127,
                                       dtype == DType::kU8 ? 255 : 127);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kU8) {
      t.data<uint8_t>()[i] = static_cast<uint8_t>(d(rng));
    } else {
      t.data<int8_t>()[i] = static_cast<int8_t>(d(rng));
    }
  }
  return t;
}

Value* Binary(GraphBuilder& b, const char* op, Value* x, Value* y, bool swap) {
  return swap ? b.Op(op, {y, x}) : b.Op(op, {x, y});
}

void Build(GraphBuilder& b, const Case& c) {
  std::mt19937 rng(static_cast<uint32_t>(c.k * 100 + c.n));
  std::vector<DimSpec> xdims;
  for (int64_t d : c.lead) xdims.push_back(d);
  xdims.push_back(c.k);
  Value* x = b.Input("x", DType::kF32, xdims);
  std::vector<Value*> dql = b.Ops("DynamicQuantizeLinear", {x}, {}, 3);
  Value* sum = nullptr;
  for (int p = 0; p < c.projections; ++p) {
    const int64_t cols = c.per_column ? c.n : 1;
    std::vector<float> scales(cols);
    for (float& s : scales) s = 0.001f * static_cast<float>(1 + rng() % 40);
    std::vector<int64_t> sdims = c.scale_2d     ? std::vector<int64_t>{1, cols}
                                 : c.per_column ? std::vector<int64_t>{cols}
                                                : std::vector<int64_t>{};
    Value* ws = b.Constant(testing::F32(sdims, scales));
    std::vector<Value*> mm_in = {dql[0], b.Constant(Ints(c.w, {c.k, c.n}, rng), "", true),
                                 c.other_zp ? b.Constant(Ints(DType::kU8, {}, rng)) : dql[2]};
    if (c.weight_zp) {  // s8: symmetric (zeros); u8: asymmetric
      std::vector<int64_t> zdims =
          c.per_column ? std::vector<int64_t>{c.n} : std::vector<int64_t>{};
      Tensor z = Ints(c.w, zdims, rng);
      if (c.w == DType::kI8) {
        for (int64_t i = 0; i < z.numel(); ++i) z.data<int8_t>()[i] = 0;
      }
      mm_in.push_back(b.Constant(z));
    }
    Value* acc = b.Op("MatMulInteger", mm_in);
    if (c.product_output) b.Output(absl::StrCat("acc", p), acc);
    Value* f = b.Op("Cast", {acc}, {{"to", AttrInt(1)}});
    Value* y = Binary(b, "Mul", f, Binary(b, "Mul", dql[1], ws, c.swap), c.swap);
    if (c.bias) {
      std::vector<float> bias(c.n);
      for (float& v : bias) v = 0.1f * static_cast<float>(static_cast<int>(rng() % 41) - 20);
      Value* bv = b.Constant(
          testing::F32(c.bias_2d ? std::vector<int64_t>{1, c.n} : std::vector<int64_t>{c.n}, bias));
      y = Binary(b, "Add", y, bv, c.swap);
    }
    sum = sum == nullptr ? y : b.Op("Add", {sum, y});
  }
  b.Output("y", sum);
}

Outcome RunCase(const Case& c) {
  std::vector<int64_t> dims = c.lead;
  dims.push_back(c.k);
  return CompareWithUnoptimized([&](GraphBuilder& b) { Build(b, c); },
                                {{"x", RandomF32(dims, 11, -2.0f, 3.0f)}}, {}, /*tol=*/0.0);
}

TEST(DynQuantTest, FusesEveryFormBitForBit) {
  for (std::vector<int64_t> lead : {std::vector<int64_t>{}, std::vector<int64_t>{1},
                                    std::vector<int64_t>{7}, std::vector<int64_t>{2, 5}}) {
    for (DType w : {DType::kI8, DType::kU8}) {
      for (bool per_column : {false, true}) {
        for (int form = 0; form < 8; ++form) {  // bias, operand order, weight zero point
          Case c;
          c.lead = lead;
          c.w = w;
          c.per_column = per_column;
          c.bias = form & 1;
          c.swap = form & 2;
          c.weight_zp = (form & 4) == 0;
          SCOPED_TRACE(absl::StrCat("rank ", lead.size() + 1, " ", DTypeName(w),
                                    per_column ? " per column" : " per tensor", " form ", form));
          Outcome o = RunCase(c);
          EXPECT_EQ(o.fired["dynquant_matmul"], 1);
          EXPECT_EQ(o.fired["dynquant_matmul_bias"], c.bias ? 1 : 0);
          EXPECT_TRUE(o.HasKernel(kFused));
          for (const char* gone :
               {"MatMulInteger", "DynamicQuantizeLinear", "Cast", "Mul", "Add"}) {
            EXPECT_FALSE(o.HasKernel(gone)) << gone;
          }
        }
      }
    }
  }
}

TEST(DynQuantTest, OneDynamicQuantizeLinearSharedByProjections) {
  Case c;
  c.projections = 3;  // Q, K and V: quantize_dynamic quantizes x once for the three
  c.per_column = true;
  Outcome o = RunCase(c);
  EXPECT_EQ(o.fired["dynquant_matmul"], 3);
  EXPECT_EQ(o.fired["dynquant_matmul_bias"], 3);
  EXPECT_FALSE(o.HasKernel("DynamicQuantizeLinear"));
  EXPECT_FALSE(o.HasKernel("MatMulInteger"));
}

TEST(DynQuantTest, NearMissesAreLeftAlone) {
  {
    Case c;  // bias [1, N]: fused without it, the Add stays
    c.bias_2d = true;
    Outcome o = RunCase(c);
    EXPECT_EQ(o.fired["dynquant_matmul"], 1);
    EXPECT_EQ(o.fired["dynquant_matmul_bias"], 0);
    EXPECT_TRUE(o.HasKernel("Add"));
  }
  for (int miss = 0; miss < 3; ++miss) {
    Case c;
    c.per_column = true;
    c.scale_2d = miss == 0;
    c.other_zp = miss == 1;
    c.product_output = miss == 2;
    SCOPED_TRACE(miss);
    Outcome o = RunCase(c);
    EXPECT_EQ(o.fired["dynquant_matmul"], 0);
    EXPECT_FALSE(o.HasKernel(kFused));
    EXPECT_TRUE(o.HasKernel("MatMulInteger"));
  }
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
