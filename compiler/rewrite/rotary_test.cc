// rotate_half (rotary.cc): the rotate-half RoPE in the forms exporters write, against the
// unoptimized program, and the near misses left alone.
#include <cstdint>
#include <limits>

#include "compiler/rewrite/rewrite_testing.h"
#include "gtest/gtest.h"

namespace dynvm::compiler::rewrite {
namespace {

constexpr int64_t kEnd = std::numeric_limits<int64_t>::max();

struct RopeForm {
  int64_t d = 8;                     // x's last dim
  int64_t lo_start = 0, lo_end = 4;  // the first half's slice; the second half's below
  int64_t hi_start = 4, hi_end = kEnd;
  int64_t slice_axis = -1, cat_axis = -1;
  bool neg_on_lo = false;     // Concat(Neg(lo slice), hi slice)
  bool neg_second = false;    // Concat(lo, Neg(hi)): the halves swapped
  bool swap_tables = false;   // x * sin + rot * cos
  bool reversed = false;      // Add(Mul(sin, rot), Mul(cos, x))
  bool table_batch2 = false;  // tables [2, 1, S, D] against x [1, H, S, D]: would broadcast x
  bool rot_output = false;    // rotate_half(x) is also an output
  int64_t partial = 0;        // rotate only the first `partial` values (the rest passed through)
  bool square = false;        // x [1, 2, D, D] (slices along axis 2 then fit too)
};

Outcome RunForm(const RopeForm& f) {
  const int64_t b = f.table_batch2 ? 1 : 2, s = f.square ? f.d : 5;
  const int64_t td = f.partial > 0 ? f.partial : f.d;
  std::vector<std::pair<std::string, Tensor>> in = {
      {"x", RandomF32({b, 2, s, f.d}, 7, -2, 2)},
      {"cos", RandomF32({f.table_batch2 ? 2 : 1, 1, s, td}, 8)},
      {"sin", RandomF32({f.table_batch2 ? 2 : 1, 1, s, td}, 9)}};
  return CompareWithUnoptimized(
      [&](GraphBuilder& g) {
        Value* x = g.Input("x", DType::kF32, {b, 2, f.square ? DimSpec(s) : DimSpec("s"), f.d});
        const DimSpec tb = f.table_batch2 ? 2 : 1;
        Value* cos = g.Input("cos", DType::kF32, {tb, 1, f.square ? DimSpec(s) : DimSpec("s"), td});
        Value* sin = g.Input("sin", DType::kF32, {tb, 1, f.square ? DimSpec(s) : DimSpec("s"), td});
        Value* xr = x;
        if (f.partial > 0) {
          xr = g.Op("Slice", {x, g.VectorI64({0}), g.VectorI64({f.partial}), g.VectorI64({-1})});
        }
        auto slice = [&](int64_t start, int64_t end) {
          return g.Op("Slice",
                      {xr, g.VectorI64({start}), g.VectorI64({end}), g.VectorI64({f.slice_axis})});
        };
        Value* lo = slice(f.lo_start, f.lo_end);
        Value* hi = slice(f.hi_start, f.hi_end);
        Value* rot;
        if (f.neg_second) {
          rot = g.Op("Concat", {lo, g.Op("Neg", {hi})}, {{"axis", AttrInt(f.cat_axis)}});
        } else if (f.neg_on_lo) {
          rot = g.Op("Concat", {g.Op("Neg", {lo}), hi}, {{"axis", AttrInt(f.cat_axis)}});
        } else {
          rot = g.Op("Concat", {g.Op("Neg", {hi}), lo}, {{"axis", AttrInt(f.cat_axis)}});
        }
        Value* c = f.swap_tables ? sin : cos;
        Value* sn = f.swap_tables ? cos : sin;
        Value* y = f.reversed ? g.Op("Add", {g.Op("Mul", {sn, rot}), g.Op("Mul", {c, xr})})
                              : g.Op("Add", {g.Op("Mul", {xr, c}), g.Op("Mul", {rot, sn})});
        if (f.partial > 0) {
          Value* pass =
              g.Op("Slice", {x, g.VectorI64({f.partial}), g.VectorI64({kEnd}), g.VectorI64({-1})});
          y = g.Op("Concat", {y, pass}, {{"axis", AttrInt(-1)}});
        }
        g.Output("y", y);
        if (f.rot_output) g.Output("rot", rot);
      },
      in, {}, 1e-5);
}

TEST(RotaryTest, FusesTheRotateHalfForms) {
  for (int form = 0; form < 7; ++form) {
    SCOPED_TRACE(form);
    RopeForm f;
    if (form == 1) f.hi_end = 8;  // the end written as D
    if (form == 2) f.slice_axis = 3;
    if (form == 3) f.cat_axis = 3;
    if (form == 4) f.reversed = true;
    if (form == 5) {  // a head size that is no multiple of a vector width: halves of 10
      f.d = 20;
      f.lo_end = 10;
      f.hi_start = 10;
    }
    if (form == 6) {  // the second half written from the end: [-4, D)
      f.hi_start = -4;
    }
    Outcome o = RunForm(f);
    EXPECT_EQ(o.fired["rotate_half"], 1);
    EXPECT_TRUE(o.HasKernel("dynvm::RotateHalf"));
    EXPECT_FALSE(o.HasKernel("Neg"));
    EXPECT_FALSE(o.HasKernel("Concat"));
    EXPECT_FALSE(o.HasKernel("Slice"));
  }
}

// A partial rotary dimension as GPT-NeoX writes it (rotate the first r values, pass the rest):
// the rotated part fuses, on the Slice of x it reads.
TEST(RotaryTest, FusesThePartialRotaryForm) {
  RopeForm f;
  f.d = 12;
  f.partial = 8;
  Outcome o = RunForm(f);
  EXPECT_EQ(o.fired["rotate_half"], 1);
  EXPECT_TRUE(o.HasKernel("dynvm::RotateHalf"));
}

// The fused op reads its tables as given (x * a + rotate_half(x) * b): cos and sin swapped is
// another expression of the same form, and it fuses to that expression (the comparison with
// the unfused program checks it).
TEST(RotaryTest, SwappedTablesFuseToTheirOwnExpression) {
  RopeForm f;
  f.swap_tables = true;
  Outcome o = RunForm(f);
  EXPECT_EQ(o.fired["rotate_half"], 1);
}

// Tables that broadcast x (batch 2 over x of batch 1) fuse too: the fused op broadcasts as the
// two Muls do, to the same shape.
TEST(RotaryTest, TablesThatBroadcastXFuseToTheSameShape) {
  RopeForm f;
  f.table_batch2 = true;
  Outcome o = RunForm(f);
  EXPECT_EQ(o.fired["rotate_half"], 1);
  EXPECT_TRUE(o.HasKernel("dynvm::RotateHalf"));
}

TEST(RotaryTest, LeavesNearMissesAlone) {
  auto expect_left = [](const RopeForm& f, const char* what) {
    SCOPED_TRACE(what);
    Outcome o = RunForm(f);
    EXPECT_EQ(o.fired["rotate_half"], 0);
    EXPECT_FALSE(o.HasKernel("dynvm::RotateHalf"));
  };
  RopeForm halves_swapped;  // Concat(lo, Neg(hi))
  halves_swapped.neg_second = true;
  expect_left(halves_swapped, "halves swapped");
  // Concat(Neg(x[:4]), x[4:]): the pattern's shape (a Neg first) with the sign on the first half.
  RopeForm sign_on_first;
  sign_on_first.neg_on_lo = true;
  expect_left(sign_on_first, "sign on the first half");
  RopeForm overlap;  // lo = [0, 4), hi = [3, 7): not the halves
  overlap.hi_start = 3;
  overlap.hi_end = 7;
  expect_left(overlap, "slices that are not the halves");
  RopeForm other_axis;  // slices and Concat along the sequence axis of a square x
  other_axis.square = true;
  other_axis.slice_axis = 2;
  other_axis.cat_axis = 2;
  expect_left(other_axis, "another axis");
  RopeForm shared;
  shared.rot_output = true;
  expect_left(shared, "rotate_half read elsewhere");
}

}  // namespace
}  // namespace dynvm::compiler::rewrite
