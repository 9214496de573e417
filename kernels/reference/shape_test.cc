// Tests of the reference data-movement kernels (shape.cc, slice_pad.cc, gather_scatter.cc).
// Expected values come from ONNX's node test data (/usr/share/libonnx-testdata/data/node, named
// per test), from numpy (the snippet is in a comment), or are worked out by hand.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "common/half.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"
#include "kernels/thread_pool.h"

namespace dynvm {
namespace {

using ::dynvm::testing::Bool;
using ::dynvm::testing::F32;
using ::dynvm::testing::I32;
using ::dynvm::testing::I64;
using ::dynvm::testing::KernelCall;
using ::dynvm::testing::ToDoubles;
using ::dynvm::testing::ToInts;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

std::vector<int64_t> DimsOf(const Tensor& t) { return {t.dims().begin(), t.dims().end()}; }

// f32 tensor holding 0, 1, 2, ... in row-major order.
Tensor Iota(std::vector<int64_t> dims) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = static_cast<float>(i);
  return t;
}

std::vector<double> IotaValues(int64_t n) {
  std::vector<double> v(n);
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<double>(i);
  return v;
}

// A view of `base`'s storage starting `offset` elements into it.
Tensor ViewOf(const Tensor& base, int64_t offset, std::vector<int64_t> dims,
              std::vector<int64_t> strides) {
  return *Tensor::View(base.storage(), base.byte_offset() + offset * DTypeSize(base.dtype()),
                       base.dtype(), dims, strides);
}

// The transpose of 2-D `t` as a strided view.
Tensor TransposedView(const Tensor& t) {
  return ViewOf(t, 0, {t.dim(1), t.dim(0)}, {t.stride(1), t.stride(0)});
}

Tensor RunOne(KernelCall call) {
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  if (!r.ok()) {
    ADD_FAILURE() << call.spec().op << ": " << r.status();
    return Tensor();
  }
  return (*r)[0];
}

std::vector<Tensor> RunAll(KernelCall call) {
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  if (!r.ok()) {
    ADD_FAILURE() << call.spec().op << ": " << r.status();
    return {};
  }
  return *r;
}

absl::Status RunStatus(KernelCall call) { return call.Run().status(); }

// Expects an InvalidArgument error mentioning `text`.
void ExpectInvalid(KernelCall call, const std::string& text) {
  absl::Status s = call.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << s;
  EXPECT_THAT(std::string(s.message()), HasSubstr(text));
}

// ---- Copy ----

TEST(CopyTest, MaterializesStridedView) {
  const Tensor base = Iota({2, 3});
  const Tensor out = RunOne(KernelCall("Copy", "dynvm").In(TransposedView(base)).Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{3, 2}));
  EXPECT_TRUE(out.is_contiguous());
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(CopyTest, HalfScalarAndEmpty) {
  const Tensor h = testing::Make<Half>(DType::kF16, {}, {Half(1.5f)});
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Copy", "dynvm").In(h).Out(DType::kF16))),
            (std::vector<double>{1.5}));
  const Tensor empty = *Tensor::Empty(DType::kI64, {0, 4});
  const Tensor out = RunOne(KernelCall("Copy", "dynvm").In(empty).Out(DType::kI64));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{0, 4}));
}

TEST(CopyTest, NegativeStrides) {
  const Tensor base = Iota({5});
  const Tensor reversed = ViewOf(base, 4, {5}, {-1});
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Copy", "dynvm").In(reversed).Out(DType::kF32))),
            (std::vector<double>{4, 3, 2, 1, 0}));
}

// ---- Reshape ----

TEST(ReshapeTest, ZeroCopiesAndMinusOneInfers) {
  const Tensor out =
      RunOne(KernelCall("Reshape").In(Iota({2, 3, 4})).In(I64({2}, {0, -1})).Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(ToDoubles(out), IotaValues(24));
}

TEST(ReshapeTest, AllowZeroKeepsZero) {
  // test_reshape_allowzero_reordered: [0, 3, 4] -> [3, 4, 0].
  const Tensor out = RunOne(KernelCall("Reshape")
                                .In(*Tensor::Empty(DType::kF32, {0, 3, 4}))
                                .In(I64({3}, {3, 4, 0}))
                                .Attr("allowzero", int64_t{1})
                                .Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{3, 4, 0}));
}

TEST(ReshapeTest, StridedInputAndI32Shape) {
  const Tensor base = Iota({2, 3});
  const Tensor out =
      RunOne(KernelCall("Reshape").In(TransposedView(base)).In(I32({1}, {-1})).Out(DType::kF32));
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

TEST(ReshapeTest, AttributeFormOfOpset1) {
  const Tensor out = RunOne(KernelCall("Reshape")
                                .In(Iota({6}))
                                .Attr("shape", std::vector<int64_t>{3, 2})
                                .Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{3, 2}));
}

TEST(ReshapeTest, PreallocatedOutput) {
  const Tensor ok = RunOne(KernelCall("Reshape")
                               .In(Iota({2, 3}))
                               .In(I64({2}, {3, 2}))
                               .OutTensor(*Tensor::Empty(DType::kF32, {3, 2})));
  EXPECT_EQ(ToDoubles(ok), IotaValues(6));
  ExpectInvalid(KernelCall("Reshape")
                    .In(Iota({2, 3}))
                    .In(I64({2}, {3, 2}))
                    .OutTensor(*Tensor::Empty(DType::kF32, {2, 3})),
                "planned");
}

TEST(ReshapeTest, Errors) {
  ExpectInvalid(KernelCall("Reshape").In(Iota({2, 3})).In(I64({2}, {4, -1})).Out(DType::kF32),
                "Reshape");
  ExpectInvalid(KernelCall("Reshape").In(Iota({2, 3})).In(I64({2}, {-1, -1})).Out(DType::kF32),
                "more than one -1");
  ExpectInvalid(KernelCall("Reshape").In(Iota({2, 3})).In(I64({2}, {-2, -3})).Out(DType::kF32),
                "negative");
  ExpectInvalid(KernelCall("Reshape").In(Iota({2, 3})).In(I64({1}, {5})).Out(DType::kF32),
                "Reshape");
  ExpectInvalid(KernelCall("Reshape")
                    .In(*Tensor::Empty(DType::kF32, {0, 3}))
                    .In(I64({2}, {0, -1}))
                    .Attr("allowzero", int64_t{1})
                    .Out(DType::kF32),
                "-1");
  ExpectInvalid(
      KernelCall("Reshape").In(Iota({2, 3})).In(I64({2}, {kI64Max, kI64Max})).Out(DType::kF32),
      "overflows");
  // Zero elements, but contiguous strides would overflow.
  ExpectInvalid(KernelCall("Reshape")
                    .In(*Tensor::Empty(DType::kF32, {0}))
                    .In(I64({3}, {0, kI64Max, kI64Max}))
                    .Attr("allowzero", int64_t{1})
                    .Out(DType::kF32),
                "too large");
  ExpectInvalid(KernelCall("Reshape").In(Iota({6})).In(I64({3}, {0, 0, -1})).Out(DType::kF32),
                "copies dim 1");
}

// ---- Flatten ----

TEST(FlattenTest, Axes) {
  const Tensor x = Iota({2, 3, 4});
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Flatten").In(x).Out(DType::kF32))),
            (std::vector<int64_t>{2, 12}));
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Flatten").In(x).Attr("axis", int64_t{0}).Out(DType::kF32))),
            (std::vector<int64_t>{1, 24}));
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Flatten").In(x).Attr("axis", int64_t{-1}).Out(DType::kF32))),
            (std::vector<int64_t>{6, 4}));
  const Tensor all = RunOne(KernelCall("Flatten").In(x).Attr("axis", int64_t{3}).Out(DType::kF32));
  EXPECT_EQ(DimsOf(all), (std::vector<int64_t>{24, 1}));
  EXPECT_EQ(ToDoubles(all), IotaValues(24));
  ExpectInvalid(KernelCall("Flatten").In(x).Attr("axis", int64_t{4}).Out(DType::kF32),
                "Flatten: axis 4");
  ExpectInvalid(KernelCall("Flatten").In(x).Attr("axis", int64_t{-4}).Out(DType::kF32), "axis");
}

// ---- Squeeze / Unsqueeze ----

TEST(SqueezeTest, AxesInputAttributeAndDefault) {
  const Tensor x = Iota({1, 3, 1, 2});
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Squeeze").In(x).In(I64({1}, {-2})).Out(DType::kF32))),
            (std::vector<int64_t>{1, 3, 2}));
  EXPECT_EQ(
      DimsOf(RunOne(
          KernelCall("Squeeze").In(x).Attr("axes", std::vector<int64_t>{0}).Out(DType::kF32))),
      (std::vector<int64_t>{3, 1, 2}));
  const Tensor all = RunOne(KernelCall("Squeeze").In(x).Out(DType::kF32));
  EXPECT_EQ(DimsOf(all), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(ToDoubles(all), IotaValues(6));
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Squeeze").In(Iota({1, 1})).Out(DType::kF32))),
            (std::vector<int64_t>{}));
}

TEST(SqueezeTest, EmptyAxesSqueezeAllOnes) {
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Squeeze")
                              .In(Iota({1, 3, 1}))
                              .In(*Tensor::Empty(DType::kI64, {0}))
                              .Out(DType::kF32))),
            (std::vector<int64_t>{3}));
}

TEST(SqueezeTest, Errors) {
  const Tensor x = Iota({1, 3});
  ExpectInvalid(KernelCall("Squeeze").In(x).In(I64({1}, {1})).Out(DType::kF32), "is not 1");
  ExpectInvalid(KernelCall("Squeeze").In(x).In(I64({2}, {0, -2})).Out(DType::kF32), "repeated");
  ExpectInvalid(KernelCall("Squeeze").In(x).In(I64({1}, {2})).Out(DType::kF32), "out of range");
}

TEST(UnsqueezeTest, UnsortedAxes) {
  // test_unsqueeze_unsorted_axes: [3, 4, 5] with axes [5, 4, 2] -> [3, 4, 1, 5, 1, 1].
  const Tensor out =
      RunOne(KernelCall("Unsqueeze").In(Iota({3, 4, 5})).In(I64({3}, {5, 4, 2})).Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{3, 4, 1, 5, 1, 1}));
  EXPECT_EQ(ToDoubles(out), IotaValues(60));
}

TEST(UnsqueezeTest, NegativeAxesAttributeAndScalar) {
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Unsqueeze")
                              .In(Iota({3}))
                              .Attr("axes", std::vector<int64_t>{-1, 0})
                              .Out(DType::kF32))),
            (std::vector<int64_t>{1, 3, 1}));
  EXPECT_EQ(DimsOf(RunOne(
                KernelCall("Unsqueeze").In(Tensor::Scalar(2)).In(I64({1}, {0})).Out(DType::kF32))),
            (std::vector<int64_t>{1}));
}

TEST(UnsqueezeTest, Errors) {
  ExpectInvalid(KernelCall("Unsqueeze").In(Iota({3})).In(I64({1}, {2})).Out(DType::kF32),
                "out of range");
  ExpectInvalid(KernelCall("Unsqueeze").In(Iota({3})).In(I64({2}, {0, 0})).Out(DType::kF32),
                "repeated");
  ExpectInvalid(KernelCall("Unsqueeze").In(Iota({3})).Out(DType::kF32), "required");
  ExpectInvalid(
      KernelCall("Unsqueeze").In(Iota({1, 1, 1, 1, 1, 1, 1})).In(I64({2}, {0, 1})).Out(DType::kF32),
      "exceeds");
}

// ---- Transpose ----

TEST(TransposeTest, DefaultReversesAndPerm) {
  // numpy: np.arange(24).reshape(2,3,4).transpose(0,2,1) and .transpose(2,0,1)
  const Tensor x = Iota({2, 3, 4});
  const Tensor t021 = RunOne(
      KernelCall("Transpose").In(x).Attr("perm", std::vector<int64_t>{0, 2, 1}).Out(DType::kF32));
  EXPECT_EQ(DimsOf(t021), (std::vector<int64_t>{2, 4, 3}));
  EXPECT_EQ(ToDoubles(t021), (std::vector<double>{0,  4,  8,  1,  5,  9,  2,  6,  10, 3,  7,  11,
                                                  12, 16, 20, 13, 17, 21, 14, 18, 22, 15, 19, 23}));
  const Tensor t201 = RunOne(
      KernelCall("Transpose").In(x).Attr("perm", std::vector<int64_t>{2, 0, 1}).Out(DType::kF32));
  EXPECT_EQ(ToDoubles(t201), (std::vector<double>{0, 4, 8,  12, 16, 20, 1, 5, 9,  13, 17, 21,
                                                  2, 6, 10, 14, 18, 22, 3, 7, 11, 15, 19, 23}));
  const Tensor rev = RunOne(KernelCall("Transpose").In(Iota({2, 3})).Out(DType::kF32));
  EXPECT_EQ(DimsOf(rev), (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(ToDoubles(rev), (std::vector<double>{0, 3, 1, 4, 2, 5}));
}

// At two threads a copy of at least kMinParallelCopyBytes splits its outermost dim over the
// VM's pool (data_movement.cc, EmitView), and a Gather its indices: the same elements as one
// thread, for an odd row count (ragged ranges), a transpose, a slice, 1-byte elements and
// gathers along the first and a middle axis.
TEST(TransposeTest, LargeCopiesSplitAcrossThreadsGiveTheSameElements) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  const Tensor x = Iota({37, 29, 41});  // 44K floats: above the threshold
  std::vector<KernelCall> calls = {
      KernelCall("Transpose").In(x).Attr("perm", std::vector<int64_t>{2, 0, 1}).Out(DType::kF32),
      KernelCall("Transpose").In(x).Attr("perm", std::vector<int64_t>{1, 0, 2}).Out(DType::kF32),
      KernelCall("Slice")
          .In(x)
          .In(I64({2}, {1, 3}))
          .In(I64({2}, {36, 40}))
          .In(I64({2}, {0, 2}))
          .Out(DType::kF32)};
  Tensor bytes = *Tensor::Empty(DType::kBool, {131, 7, 97});
  for (int64_t i = 0; i < bytes.numel(); ++i) bytes.data<bool>()[i] = (i * 7919) % 3 == 0;
  calls.push_back(KernelCall("Transpose")
                      .In(bytes)
                      .Attr("perm", std::vector<int64_t>{2, 1, 0})
                      .Out(DType::kBool));
  // Gather splits its indices the same way: rows of an embedding table (axis 0, repeated and
  // negative indices) and columns of a middle axis (each index a strided block).
  std::vector<int64_t> rows;
  for (int64_t i = 0; i < 301; ++i) rows.push_back((i * 13) % 37 - (i % 5 == 0 ? 37 : 0));
  calls.push_back(KernelCall("Gather").In(x).In(I64({301}, rows)).Out(DType::kF32));
  calls.push_back(
      KernelCall("Gather")
          .In(x)
          .In(I64({3, 7}, {0, 28, 5, 5, -1, 3, 9, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}))
          .Attr("axis", int64_t{1})
          .Out(DType::kF32));
  for (KernelCall& call : calls) {
    absl::StatusOr<std::vector<Tensor>> one = call.Run(1);
    absl::StatusOr<std::vector<Tensor>> two = call.Run(2);
    ASSERT_TRUE(one.ok()) << one.status();
    ASSERT_TRUE(two.ok()) << two.status();
    EXPECT_EQ(DimsOf((*two)[0]), DimsOf((*one)[0]));
    EXPECT_EQ(ToDoubles((*two)[0]), ToDoubles((*one)[0]));
  }
  // The one-thread result is right: element [i, j, k] of x is i * 29 * 41 + j * 41 + k.
  const Tensor t = RunOne(
      KernelCall("Transpose").In(x).Attr("perm", std::vector<int64_t>{2, 0, 1}).Out(DType::kF32));
  EXPECT_EQ(ToDoubles(t)[1 * 37 * 29 + 5 * 29 + 3], 5 * 29 * 41 + 3 * 41 + 1);
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

TEST(TransposeTest, StridedI64AndBool) {
  // Transposing a transposed view gives back the base.
  const Tensor base = I64({2, 3}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(ToInts(RunOne(KernelCall("Transpose").In(TransposedView(base)).Out(DType::kI64))),
            (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
  const Tensor b = Bool({2, 2}, {true, false, false, false});
  EXPECT_EQ(ToInts(RunOne(KernelCall("Transpose").In(b).Out(DType::kBool))),
            (std::vector<int64_t>{1, 0, 0, 0}));
}

TEST(TransposeTest, Errors) {
  EXPECT_EQ(RunStatus(KernelCall("Transpose")
                          .In(Iota({2, 3}))
                          .Attr("perm", std::vector<int64_t>{0, 0})
                          .Out(DType::kF32))
                .code(),
            absl::StatusCode::kInvalidArgument);
  ExpectInvalid(KernelCall("Transpose")
                    .In(Iota({2, 3}))
                    .Attr("perm", std::vector<int64_t>{0, 2, 1})
                    .Out(DType::kF32),
                "Transpose: perm");
}

// ---- Expand ----

TEST(ExpandTest, BidirectionalBroadcast) {
  // test_expand_dim_changed: [3, 1] expanded by [2, 1, 6].
  const Tensor out = RunOne(
      KernelCall("Expand").In(F32({3, 1}, {1, 2, 3})).In(I64({3}, {2, 1, 6})).Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{2, 3, 6}));
  std::vector<double> want;
  for (int rep = 0; rep < 2; ++rep) {
    for (double v : {1.0, 2.0, 3.0}) want.insert(want.end(), 6, v);
  }
  EXPECT_EQ(ToDoubles(out), want);
  // A shape of lower rank and 1s keeps the input's dims.
  const Tensor keep = RunOne(
      KernelCall("Expand").In(I32({2, 3}, {1, 2, 3, 4, 5, 6})).In(I64({1}, {1})).Out(DType::kI32));
  EXPECT_EQ(DimsOf(keep), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ToInts(keep), (std::vector<int64_t>{1, 2, 3, 4, 5, 6}));
}

TEST(ExpandTest, StridedInputAndZeroDim) {
  const Tensor base = Iota({2, 3});
  const Tensor col = ViewOf(base, 1, {2, 1}, {3, 1});  // [[1], [4]]
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Expand").In(col).In(I64({2}, {2, 3})).Out(DType::kF32))),
            (std::vector<double>{1, 1, 1, 4, 4, 4}));
  EXPECT_EQ(
      DimsOf(RunOne(KernelCall("Expand").In(Iota({1, 2})).In(I64({2}, {0, 1})).Out(DType::kF32))),
      (std::vector<int64_t>{0, 2}));
}

TEST(ExpandTest, Errors) {
  ExpectInvalid(KernelCall("Expand").In(Iota({2, 3})).In(I64({1}, {4})).Out(DType::kF32), "Expand");
  ExpectInvalid(KernelCall("Expand").In(Iota({2, 3})).In(I64({1}, {-1})).Out(DType::kF32),
                "negative");
}

// ---- Tile ----

TEST(TileTest, Repeats) {
  // test_tile_precomputed.
  EXPECT_EQ(
      ToDoubles(RunOne(KernelCall("Tile").In(Iota({2, 2})).In(I64({2}, {2, 2})).Out(DType::kF32))),
      (std::vector<double>{0, 1, 0, 1, 2, 3, 2, 3, 0, 1, 0, 1, 2, 3, 2, 3}));
  // numpy: np.tile(np.arange(3).reshape(1,3,1), (2,1,3))
  const Tensor t3 = RunOne(
      KernelCall("Tile").In(I64({1, 3, 1}, {0, 1, 2})).In(I64({3}, {2, 1, 3})).Out(DType::kI64));
  EXPECT_EQ(DimsOf(t3), (std::vector<int64_t>{2, 3, 3}));
  EXPECT_EQ(ToInts(t3),
            (std::vector<int64_t>{0, 0, 0, 1, 1, 1, 2, 2, 2, 0, 0, 0, 1, 1, 1, 2, 2, 2}));
  EXPECT_EQ(
      DimsOf(RunOne(KernelCall("Tile").In(Iota({2, 2})).In(I64({2}, {0, 3})).Out(DType::kF32))),
      (std::vector<int64_t>{0, 6}));
}

TEST(TileTest, StridedInput) {
  const Tensor base = Iota({2, 3});
  EXPECT_EQ(ToDoubles(RunOne(
                KernelCall("Tile").In(TransposedView(base)).In(I64({2}, {1, 2})).Out(DType::kF32))),
            (std::vector<double>{0, 3, 0, 3, 1, 4, 1, 4, 2, 5, 2, 5}));
}

TEST(TileTest, Errors) {
  ExpectInvalid(KernelCall("Tile").In(Iota({2, 2})).In(I64({1}, {2})).Out(DType::kF32), "Tile");
  ExpectInvalid(KernelCall("Tile").In(Iota({2, 2})).In(I64({2}, {1, -1})).Out(DType::kF32),
                "negative");
  ExpectInvalid(KernelCall("Tile").In(Iota({2})).In(I64({1}, {kI64Max})).Out(DType::kF32),
                "overflows");
}

// ---- DepthToSpace / SpaceToDepth ----

// The input of test_depthtospace_example and test_depthtospace_crd_mode_example: [1, 8, 2, 3].
std::vector<float> DepthToSpaceInput() {
  std::vector<float> v;
  for (int c = 0; c < 8; ++c) {
    for (int i = 0; i < 6; ++i) v.push_back(static_cast<float>(c * 9 + i));
  }
  return v;
}

TEST(DepthToSpaceTest, DcrAndCrd) {
  const Tensor x = F32({1, 8, 2, 3}, DepthToSpaceInput());
  const Tensor dcr =
      RunOne(KernelCall("DepthToSpace").In(x).Attr("blocksize", int64_t{2}).Out(DType::kF32));
  EXPECT_EQ(DimsOf(dcr), (std::vector<int64_t>{1, 2, 4, 6}));
  EXPECT_EQ(ToDoubles(dcr),
            (std::vector<double>{0,  18, 1,  19, 2,  20, 36, 54, 37, 55, 38, 56, 3,  21, 4,  22,
                                 5,  23, 39, 57, 40, 58, 41, 59, 9,  27, 10, 28, 11, 29, 45, 63,
                                 46, 64, 47, 65, 12, 30, 13, 31, 14, 32, 48, 66, 49, 67, 50, 68}));
  const Tensor crd = RunOne(KernelCall("DepthToSpace")
                                .In(x)
                                .Attr("blocksize", int64_t{2})
                                .Attr("mode", std::string("CRD"))
                                .Out(DType::kF32));
  EXPECT_EQ(ToDoubles(crd),
            (std::vector<double>{0,  9,  1,  10, 2,  11, 18, 27, 19, 28, 20, 29, 3,  12, 4,  13,
                                 5,  14, 21, 30, 22, 31, 23, 32, 36, 45, 37, 46, 38, 47, 54, 63,
                                 55, 64, 56, 65, 39, 48, 40, 49, 41, 50, 57, 66, 58, 67, 59, 68}));
}

TEST(DepthToSpaceTest, StridedRoundTripThroughSpaceToDepth) {
  // The same [1, 8, 2, 3] input stored as [1, 8, 3, 2] and viewed with H and W swapped.
  const std::vector<float> v = DepthToSpaceInput();
  std::vector<float> swapped(48);
  for (int c = 0; c < 8; ++c) {
    for (int h = 0; h < 2; ++h) {
      for (int w = 0; w < 3; ++w) swapped[c * 6 + w * 2 + h] = v[c * 6 + h * 3 + w];
    }
  }
  const Tensor base = F32({1, 8, 3, 2}, swapped);
  const Tensor x = ViewOf(base, 0, {1, 8, 2, 3}, {48, 6, 1, 2});
  const Tensor dcr =
      RunOne(KernelCall("DepthToSpace").In(x).Attr("blocksize", int64_t{2}).Out(DType::kF32));
  EXPECT_EQ(ToDoubles(dcr)[1], 18);
  EXPECT_EQ(ToDoubles(dcr)[6], 36);
  const Tensor back =
      RunOne(KernelCall("SpaceToDepth").In(dcr).Attr("blocksize", int64_t{2}).Out(DType::kF32));
  EXPECT_EQ(DimsOf(back), (std::vector<int64_t>{1, 8, 2, 3}));
  EXPECT_EQ(ToDoubles(back), std::vector<double>(v.begin(), v.end()));
}

TEST(SpaceToDepthTest, OnnxExample) {
  // test_spacetodepth_example.
  const Tensor x = F32({1, 1, 4, 6}, {0, 6, 1, 7,  2, 8,  12, 18, 13, 19, 14, 20,
                                      3, 9, 4, 10, 5, 11, 15, 21, 16, 22, 17, 23});
  const Tensor out =
      RunOne(KernelCall("SpaceToDepth").In(x).Attr("blocksize", int64_t{2}).Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{1, 4, 2, 3}));
  EXPECT_EQ(ToDoubles(out), IotaValues(24));
}

TEST(DepthToSpaceTest, Errors) {
  ExpectInvalid(KernelCall("DepthToSpace")
                    .In(Iota({1, 6, 2, 2}))
                    .Attr("blocksize", int64_t{2})
                    .Out(DType::kF32),
                "DepthToSpace");
  ExpectInvalid(KernelCall("SpaceToDepth")
                    .In(Iota({1, 1, 3, 2}))
                    .Attr("blocksize", int64_t{2})
                    .Out(DType::kF32),
                "SpaceToDepth");
  ExpectInvalid(
      KernelCall("DepthToSpace").In(Iota({4, 4})).Attr("blocksize", int64_t{2}).Out(DType::kF32),
      "DepthToSpace");
  EXPECT_EQ(RunStatus(KernelCall("DepthToSpace")
                          .In(Iota({1, 4, 1, 1}))
                          .Attr("blocksize", int64_t{0})
                          .Out(DType::kF32))
                .code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RunStatus(KernelCall("DepthToSpace")
                          .In(Iota({1, 4, 1, 1}))
                          .Attr("blocksize", int64_t{2})
                          .Attr("mode", std::string("XYZ"))
                          .Out(DType::kF32))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Shape / Size ----

TEST(ShapeTest, StartAndEnd) {
  const Tensor x = Iota({3, 4, 5});
  EXPECT_EQ(ToInts(RunOne(KernelCall("Shape").In(x).Out(DType::kI64))),
            (std::vector<int64_t>{3, 4, 5}));
  // test_shape_clip_start, test_shape_start_1_end_negative_1, test_shape_end_1.
  EXPECT_EQ(ToInts(RunOne(KernelCall("Shape").In(x).Attr("start", int64_t{-10}).Out(DType::kI64))),
            (std::vector<int64_t>{3, 4, 5}));
  EXPECT_EQ(ToInts(RunOne(KernelCall("Shape")
                              .In(x)
                              .Attr("start", int64_t{1})
                              .Attr("end", int64_t{-1})
                              .Out(DType::kI64))),
            (std::vector<int64_t>{4}));
  EXPECT_EQ(ToInts(RunOne(KernelCall("Shape").In(x).Attr("end", int64_t{1}).Out(DType::kI64))),
            (std::vector<int64_t>{3}));
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Shape")
                              .In(x)
                              .Attr("start", int64_t{2})
                              .Attr("end", int64_t{1})
                              .Out(DType::kI64))),
            (std::vector<int64_t>{0}));
  EXPECT_EQ(ToInts(RunOne(KernelCall("Shape").In(TransposedView(Iota({2, 7}))).Out(DType::kI64))),
            (std::vector<int64_t>{7, 2}));
}

TEST(SizeTest, CountsElements) {
  const Tensor n = RunOne(KernelCall("Size").In(Iota({3, 4, 5})).Out(DType::kI64));
  EXPECT_EQ(n.rank(), 0);
  EXPECT_EQ(ToInts(n), (std::vector<int64_t>{60}));
  EXPECT_EQ(
      ToInts(RunOne(KernelCall("Size").In(*Tensor::Empty(DType::kBool, {2, 0})).Out(DType::kI64))),
      (std::vector<int64_t>{0}));
}

// ---- ConstantOfShape ----

TEST(ConstantOfShapeTest, ValueAndDefault) {
  // test_constantofshape_float_ones.
  const Tensor ones = RunOne(KernelCall("ConstantOfShape")
                                 .In(I64({3}, {4, 3, 2}))
                                 .Attr("value", F32({1}, {1}))
                                 .Out(DType::kF32));
  EXPECT_EQ(DimsOf(ones), (std::vector<int64_t>{4, 3, 2}));
  EXPECT_EQ(ToDoubles(ones), std::vector<double>(24, 1.0));
  // test_constantofshape_int_zeros.
  const Tensor zeros = RunOne(KernelCall("ConstantOfShape")
                                  .In(I64({2}, {10, 6}))
                                  .Attr("value", I32({1}, {0}))
                                  .Out(DType::kI32));
  EXPECT_EQ(ToInts(zeros), std::vector<int64_t>(60, 0));
  const Tensor def = RunOne(KernelCall("ConstantOfShape").In(I64({1}, {2})).Out(DType::kF32));
  EXPECT_EQ(ToDoubles(def), (std::vector<double>{0, 0}));
  // An empty shape gives a scalar; i64 values keep all their bits.
  const Tensor big = RunOne(KernelCall("ConstantOfShape")
                                .In(*Tensor::Empty(DType::kI64, {0}))
                                .Attr("value", I64({1}, {(int64_t{1} << 60) + 1}))
                                .Out(DType::kI64));
  EXPECT_EQ(big.rank(), 0);
  EXPECT_EQ(ToInts(big), (std::vector<int64_t>{(int64_t{1} << 60) + 1}));
  const Tensor b = RunOne(KernelCall("ConstantOfShape")
                              .In(I64({2}, {1, 2}))
                              .Attr("value", Bool({1}, {true}))
                              .Out(DType::kBool));
  EXPECT_EQ(ToInts(b), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(DimsOf(RunOne(KernelCall("ConstantOfShape").In(I64({2}, {0, 3})).Out(DType::kF32))),
            (std::vector<int64_t>{0, 3}));
}

TEST(ConstantOfShapeTest, Errors) {
  ExpectInvalid(KernelCall("ConstantOfShape").In(I64({2}, {2, -1})).Out(DType::kF32),
                "ConstantOfShape");
  ExpectInvalid(KernelCall("ConstantOfShape")
                    .In(I64({1}, {2}))
                    .Attr("value", F32({2}, {1, 2}))
                    .Out(DType::kF32),
                "one-element");
  ExpectInvalid(KernelCall("ConstantOfShape").In(I64({2}, {kI64Max, 4})).Out(DType::kF32),
                "overflow");
}

// ---- Range ----

TEST(RangeTest, IntegerAndFloat) {
  // test_range_int32_type_negative_delta, test_range_float_type_positive_delta.
  EXPECT_EQ(ToInts(RunOne(KernelCall("Range")
                              .In(I32({}, {10}))
                              .In(I32({}, {6}))
                              .In(I32({}, {-3}))
                              .Out(DType::kI32))),
            (std::vector<int64_t>{10, 7}));
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Range")
                                 .In(Tensor::Scalar(1))
                                 .In(Tensor::Scalar(5))
                                 .In(Tensor::Scalar(2))
                                 .Out(DType::kF32))),
            (std::vector<double>{1, 3}));
  // numpy: np.arange(-5, 7, 4), np.arange(0.0, 1.0, 0.3)
  EXPECT_EQ(ToInts(RunOne(KernelCall("Range")
                              .In(Tensor::ScalarI64(-5))
                              .In(Tensor::ScalarI64(7))
                              .In(Tensor::ScalarI64(4))
                              .Out(DType::kI64))),
            (std::vector<int64_t>{-5, -1, 3}));
  const Tensor f64 = RunOne(KernelCall("Range")
                                .In(testing::Make<double>(DType::kF64, {}, {0.0}))
                                .In(testing::Make<double>(DType::kF64, {}, {1.0}))
                                .In(testing::Make<double>(DType::kF64, {}, {0.3}))
                                .Out(DType::kF64));
  EXPECT_EQ(ToDoubles(f64), (std::vector<double>{0.0, 0.3, 0.6, 0.8999999999999999}));
  // An empty range, and one spanning the whole i64 domain.
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Range")
                              .In(Tensor::ScalarI64(5))
                              .In(Tensor::ScalarI64(1))
                              .In(Tensor::ScalarI64(1))
                              .Out(DType::kI64))),
            (std::vector<int64_t>{0}));
  EXPECT_EQ(ToInts(RunOne(KernelCall("Range")
                              .In(Tensor::ScalarI64(kI64Max - 1))
                              .In(Tensor::ScalarI64(kI64Min))
                              .In(Tensor::ScalarI64(kI64Min))
                              .Out(DType::kI64))),
            (std::vector<int64_t>{kI64Max - 1, -2}));
}

TEST(RangeTest, HalfAndUnsigned) {
  const Tensor h = RunOne(KernelCall("Range")
                              .In(testing::Make<Half>(DType::kF16, {}, {Half(0.5f)}))
                              .In(testing::Make<Half>(DType::kF16, {}, {Half(2.0f)}))
                              .In(testing::Make<Half>(DType::kF16, {}, {Half(0.5f)}))
                              .Out(DType::kF16));
  EXPECT_EQ(ToDoubles(h), (std::vector<double>{0.5, 1.0, 1.5}));
  const Tensor u = RunOne(KernelCall("Range")
                              .In(testing::Make<uint8_t>(DType::kU8, {}, {250}))
                              .In(testing::Make<uint8_t>(DType::kU8, {}, {255}))
                              .In(testing::Make<uint8_t>(DType::kU8, {}, {2}))
                              .Out(DType::kU8));
  EXPECT_EQ(ToInts(u), (std::vector<int64_t>{250, 252, 254}));
}

TEST(RangeTest, Errors) {
  ExpectInvalid(KernelCall("Range")
                    .In(Tensor::ScalarI64(0))
                    .In(Tensor::ScalarI64(5))
                    .In(Tensor::ScalarI64(0))
                    .Out(DType::kI64),
                "delta is 0");
  ExpectInvalid(KernelCall("Range")
                    .In(Tensor::Scalar(0))
                    .In(Tensor::Scalar(std::numeric_limits<float>::infinity()))
                    .In(Tensor::Scalar(1))
                    .Out(DType::kF32),
                "Range");
  ExpectInvalid(KernelCall("Range")
                    .In(Tensor::Scalar(0))
                    .In(Tensor::Scalar(std::nanf("")))
                    .In(Tensor::Scalar(1))
                    .Out(DType::kF32),
                "Range");
  ExpectInvalid(KernelCall("Range")
                    .In(F32({2}, {0, 1}))
                    .In(Tensor::Scalar(5))
                    .In(Tensor::Scalar(1))
                    .Out(DType::kF32),
                "scalars");
}

// ---- Slice ----

TEST(SliceTest, NegativeStepsAndClamping) {
  // numpy: x = np.arange(60).reshape(3,4,5); x[2:0:-1, 3::-2, 4:1:-2]
  // (starts [2, 10, 4], ends [0, -100, 1], steps [-1, -2, -2]).
  const Tensor out = RunOne(KernelCall("Slice")
                                .In(Iota({3, 4, 5}))
                                .In(I64({3}, {2, 10, 4}))
                                .In(I64({3}, {0, -100, 1}))
                                .In(I64({3}, {0, 1, 2}))
                                .In(I64({3}, {-1, -2, -2}))
                                .Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{2, 2, 2}));
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{59, 57, 49, 47, 39, 37, 29, 27}));
}

TEST(SliceTest, Int64LimitsAndDefaults) {
  const Tensor x = Iota({2, 4});
  // Ends at INT64_MAX, default axes and steps.
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Slice")
                                 .In(x)
                                 .In(I64({2}, {1, 1}))
                                 .In(I64({2}, {kI64Max, kI64Max}))
                                 .Out(DType::kF32))),
            (std::vector<double>{5, 6, 7}));
  // Reversal: start -1, end INT64_MIN, step -1 on a negative axis.
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Slice")
                                 .In(x)
                                 .In(I64({1}, {-1}))
                                 .In(I64({1}, {kI64Min}))
                                 .In(I64({1}, {-1}))
                                 .In(I64({1}, {-1}))
                                 .Out(DType::kF32))),
            (std::vector<double>{3, 2, 1, 0, 7, 6, 5, 4}));
  // A huge step reads one element.
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Slice")
                                 .In(x)
                                 .In(I64({1}, {2}))
                                 .In(I64({1}, {kI64Min}))
                                 .In(I64({1}, {1}))
                                 .In(I64({1}, {kI64Min}))
                                 .Out(DType::kF32))),
            (std::vector<double>{2, 6}));
  // test_slice_start_out_of_bounds: an empty result.
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Slice")
                              .In(Iota({20, 10, 5}))
                              .In(I64({1}, {1000}))
                              .In(I64({1}, {1000}))
                              .In(I64({1}, {1}))
                              .In(I64({1}, {1}))
                              .Out(DType::kF32))),
            (std::vector<int64_t>{20, 0, 5}));
}

TEST(SliceTest, AttributeFormAndStridedInput) {
  const Tensor attr = RunOne(KernelCall("Slice")
                                 .In(Iota({3, 4}))
                                 .Attr("starts", std::vector<int64_t>{1})
                                 .Attr("ends", std::vector<int64_t>{3})
                                 .Attr("axes", std::vector<int64_t>{1})
                                 .Out(DType::kF32));
  EXPECT_EQ(ToDoubles(attr), (std::vector<double>{1, 2, 5, 6, 9, 10}));
  // The transposed view of [[0..3], [4..7]] is [[0,4],[1,5],[2,6],[3,7]]; rows 1:4:2.
  const Tensor strided = RunOne(KernelCall("Slice")
                                    .In(TransposedView(Iota({2, 4})))
                                    .In(I32({1}, {1}))
                                    .In(I32({1}, {4}))
                                    .In(I32({1}, {0}))
                                    .In(I32({1}, {2}))
                                    .Out(DType::kF32));
  EXPECT_EQ(ToDoubles(strided), (std::vector<double>{1, 5, 3, 7}));
}

TEST(SliceTest, Errors) {
  const Tensor x = Iota({2, 4});
  ExpectInvalid(KernelCall("Slice")
                    .In(x)
                    .In(I64({1}, {0}))
                    .In(I64({1}, {2}))
                    .In(I64({1}, {0}))
                    .In(I64({1}, {0}))
                    .Out(DType::kF32),
                "step is 0");
  ExpectInvalid(KernelCall("Slice")
                    .In(x)
                    .In(I64({2}, {0, 0}))
                    .In(I64({2}, {1, 1}))
                    .In(I64({2}, {1, -1}))
                    .Out(DType::kF32),
                "repeated");
  ExpectInvalid(KernelCall("Slice").In(x).In(I64({2}, {0, 0})).In(I64({1}, {1})).Out(DType::kF32),
                "length");
  ExpectInvalid(KernelCall("Slice")
                    .In(x)
                    .In(I64({1}, {0}))
                    .In(I64({1}, {1}))
                    .In(I64({1}, {2}))
                    .Out(DType::kF32),
                "out of range");
}

// ---- Concat ----

TEST(ConcatTest, AxesAndEmptyInputs) {
  const Tensor a = Iota({2, 1});
  const Tensor b = F32({2, 2}, {10, 11, 12, 13});
  const Tensor empty = *Tensor::Empty(DType::kF32, {2, 0});
  const Tensor out =
      RunOne(KernelCall("Concat").In(a).In(empty).In(b).Attr("axis", int64_t{-1}).Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{0, 10, 11, 1, 12, 13}));
  const Tensor rows = RunOne(
      KernelCall("Concat").In(b).In(TransposedView(a)).Attr("axis", int64_t{0}).Out(DType::kF32));
  EXPECT_EQ(ToDoubles(rows), (std::vector<double>{10, 11, 12, 13, 0, 1}));
}

TEST(ConcatTest, StridedI64) {
  const Tensor base = I64({2, 3}, {1, 2, 3, 4, 5, 6});
  const Tensor out = RunOne(KernelCall("Concat")
                                .In(TransposedView(base))
                                .In(TransposedView(base))
                                .Attr("axis", int64_t{1})
                                .Out(DType::kI64));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(ToInts(out), (std::vector<int64_t>{1, 4, 1, 4, 2, 5, 2, 5, 3, 6, 3, 6}));
}

TEST(ConcatTest, Errors) {
  ExpectInvalid(KernelCall("Concat")
                    .In(Iota({2, 1}))
                    .In(Iota({3, 1}))
                    .Attr("axis", int64_t{1})
                    .Out(DType::kF32),
                "Concat");
  ExpectInvalid(
      KernelCall("Concat").In(Iota({2, 1})).In(Iota({2})).Attr("axis", int64_t{0}).Out(DType::kF32),
      "Concat");
  ExpectInvalid(KernelCall("Concat").In(Iota({2})).Attr("axis", int64_t{1}).Out(DType::kF32),
                "axis 1");
  EXPECT_EQ(RunStatus(KernelCall("Concat").In(Iota({2})).Out(DType::kF32)).code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Split ----

TEST(SplitTest, EqualInputAndAttribute) {
  std::vector<Tensor> outs = RunAll(KernelCall("Split")
                                        .In(Iota({2, 6}))
                                        .Attr("axis", int64_t{1})
                                        .Out(DType::kF32)
                                        .Out(DType::kF32)
                                        .Out(DType::kF32));
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(ToDoubles(outs[0]), (std::vector<double>{0, 1, 6, 7}));
  EXPECT_EQ(ToDoubles(outs[2]), (std::vector<double>{4, 5, 10, 11}));
  outs = RunAll(
      KernelCall("Split").In(Iota({5})).In(I64({2}, {2, 3})).Out(DType::kF32).Out(DType::kF32));
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(ToDoubles(outs[1]), (std::vector<double>{2, 3, 4}));
  outs = RunAll(KernelCall("Split")
                    .In(Iota({3, 2}))
                    .Attr("split", std::vector<int64_t>{1, 2})
                    .Attr("axis", int64_t{-2})
                    .Out(DType::kF32)
                    .Out(DType::kF32));
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(DimsOf(outs[1]), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ToDoubles(outs[1]), (std::vector<double>{2, 3, 4, 5}));
}

TEST(SplitTest, NumOutputsUnevenAndZeroSizes) {
  std::vector<Tensor> outs = RunAll(KernelCall("Split")
                                        .In(Iota({5}))
                                        .Attr("num_outputs", int64_t{3})
                                        .Out(DType::kF32)
                                        .Out(DType::kF32)
                                        .Out(DType::kF32));
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(ToDoubles(outs[0]), (std::vector<double>{0, 1}));
  EXPECT_EQ(ToDoubles(outs[1]), (std::vector<double>{2, 3}));
  EXPECT_EQ(ToDoubles(outs[2]), (std::vector<double>{4}));
  // test_split_zero_size_splits.
  outs = RunAll(KernelCall("Split")
                    .In(*Tensor::Empty(DType::kF32, {0}))
                    .In(I64({3}, {0, 0, 0}))
                    .Out(DType::kF32)
                    .Out(DType::kF32)
                    .Out(DType::kF32));
  ASSERT_EQ(outs.size(), 3u);
  EXPECT_EQ(DimsOf(outs[2]), (std::vector<int64_t>{0}));
}

TEST(SplitTest, EmptySplitInputMeansEqualParts) {
  std::vector<Tensor> outs = RunAll(KernelCall("Split")
                                        .In(Iota({4}))
                                        .In(*Tensor::Empty(DType::kI64, {0}))
                                        .Out(DType::kF32)
                                        .Out(DType::kF32));
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(ToDoubles(outs[1]), (std::vector<double>{2, 3}));
}

TEST(SplitTest, StridedInput) {
  // The transposed view of Iota({2, 3}) is [[0,3],[1,4],[2,5]].
  std::vector<Tensor> outs = RunAll(KernelCall("Split")
                                        .In(TransposedView(Iota({2, 3})))
                                        .In(I64({2}, {1, 2}))
                                        .Out(DType::kF32)
                                        .Out(DType::kF32));
  ASSERT_EQ(outs.size(), 2u);
  EXPECT_EQ(ToDoubles(outs[0]), (std::vector<double>{0, 3}));
  EXPECT_EQ(ToDoubles(outs[1]), (std::vector<double>{1, 4, 2, 5}));
}

TEST(SplitTest, Errors) {
  ExpectInvalid(KernelCall("Split").In(Iota({5})).Out(DType::kF32).Out(DType::kF32), "equal");
  ExpectInvalid(
      KernelCall("Split").In(Iota({5})).In(I64({2}, {2, 2})).Out(DType::kF32).Out(DType::kF32),
      "Split");
  ExpectInvalid(
      KernelCall("Split").In(Iota({5})).In(I64({2}, {6, -1})).Out(DType::kF32).Out(DType::kF32),
      "Split");
  ExpectInvalid(
      KernelCall("Split").In(Iota({5})).In(I64({1}, {5})).Out(DType::kF32).Out(DType::kF32),
      "Split");
  EXPECT_EQ(
      RunStatus(KernelCall("Split").In(Iota({5})).Attr("num_outputs", int64_t{3}).Out(DType::kF32))
          .code(),
      absl::StatusCode::kInvalidArgument);
  ExpectInvalid(KernelCall("Split")
                    .In(Iota({5}))
                    .Attr("num_outputs", int64_t{4})
                    .Out(DType::kF32)
                    .Out(DType::kF32)
                    .Out(DType::kF32)
                    .Out(DType::kF32),
                "chunks");
}

// ---- Pad ----

TEST(PadTest, ConstantFromInputAndAttribute) {
  // The ONNX Pad example 1: pads [0, 2, 0, 0].
  const Tensor x = F32({3, 2}, {1.0f, 1.2f, 2.3f, 3.4f, 4.5f, 5.7f});
  const Tensor out = RunOne(
      KernelCall("Pad").In(x).In(I64({4}, {0, 2, 0, 0})).In(Tensor::Scalar(0)).Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(ToDoubles(out),
            ToDoubles(F32({3, 4}, {0, 0, 1.0f, 1.2f, 0, 0, 2.3f, 3.4f, 0, 0, 4.5f, 5.7f})));
  // Opset 2 form: pads and value attributes.
  const Tensor attr = RunOne(KernelCall("Pad")
                                 .In(Iota({1, 2}))
                                 .Attr("pads", std::vector<int64_t>{1, 0, 0, 1})
                                 .Attr("value", 9.5f)
                                 .Out(DType::kF32));
  EXPECT_EQ(ToDoubles(attr), (std::vector<double>{9.5, 9.5, 9.5, 0, 1, 9.5}));
  // numpy: np.pad(np.arange(6).reshape(2,3)[:, 1:], ((1,0),(0,2)), constant_values=7): negative
  // pads crop.
  const Tensor crop = RunOne(KernelCall("Pad")
                                 .In(I64({2, 3}, {0, 1, 2, 3, 4, 5}))
                                 .In(I64({4}, {1, -1, 0, 2}))
                                 .In(Tensor::ScalarI64(7))
                                 .Out(DType::kI64));
  EXPECT_EQ(ToInts(crop), (std::vector<int64_t>{7, 7, 7, 7, 1, 2, 7, 7, 4, 5, 7, 7}));
}

TEST(PadTest, ReflectEdgeWrap) {
  const Tensor y = I32({2, 3}, {0, 1, 2, 3, 4, 5});
  // numpy: np.pad(y, ((0,0),(3,3)), mode='reflect'): pads beyond the dim reflect again.
  EXPECT_EQ(ToInts(RunOne(KernelCall("Pad")
                              .In(y)
                              .In(I64({4}, {0, 3, 0, 3}))
                              .Attr("mode", std::string("reflect"))
                              .Out(DType::kI32))),
            (std::vector<int64_t>{1, 2, 1, 0, 1, 2, 1, 0, 1, 4, 5, 4, 3, 4, 5, 4, 3, 4}));
  // numpy: np.pad(y, ((1,1),(2,1)), mode='reflect')
  EXPECT_EQ(ToInts(RunOne(KernelCall("Pad")
                              .In(y)
                              .In(I64({4}, {1, 2, 1, 1}))
                              .Attr("mode", std::string("reflect"))
                              .Out(DType::kI32))),
            (std::vector<int64_t>{5, 4, 3, 4, 5, 4, 2, 1, 0, 1, 2, 1,
                                  5, 4, 3, 4, 5, 4, 2, 1, 0, 1, 2, 1}));
  // numpy: np.pad(y, ((1,2),(0,1)), mode='edge')
  EXPECT_EQ(ToInts(RunOne(KernelCall("Pad")
                              .In(y)
                              .In(I64({4}, {1, 0, 2, 1}))
                              .Attr("mode", std::string("edge"))
                              .Out(DType::kI32))),
            (std::vector<int64_t>{0, 1, 2, 2, 0, 1, 2, 2, 3, 4, 5, 5, 3, 4, 5, 5, 3, 4, 5, 5}));
  // Cyclic: output (r, c) reads ((r - 1) mod 2, (c - 2) mod 3). numpy 1.24's np.pad(mode='wrap')
  // ends each row differently: it wraps over its own padding when pads exceed the dim.
  EXPECT_EQ(ToInts(RunOne(KernelCall("Pad")
                              .In(y)
                              .In(I64({4}, {1, 2, 0, 4}))
                              .Attr("mode", std::string("wrap"))
                              .Out(DType::kI32))),
            (std::vector<int64_t>{4, 5, 3, 4, 5, 3, 4, 5, 3,  //
                                  1, 2, 0, 1, 2, 0, 1, 2, 0,  //
                                  4, 5, 3, 4, 5, 3, 4, 5, 3}));
}

TEST(PadTest, AxesInputStridedAndScalar) {
  // Pads only axis -1 of the transposed view [[0,3],[1,4],[2,5]].
  const Tensor out = RunOne(KernelCall("Pad")
                                .In(TransposedView(Iota({2, 3})))
                                .In(I64({2}, {1, 0}))
                                .In(Tensor::Scalar(-1))
                                .In(I64({1}, {-1}))
                                .Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{3, 3}));
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{-1, 0, 3, -1, 1, 4, -1, 2, 5}));
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Pad")
                                 .In(Tensor::Scalar(3))
                                 .In(*Tensor::Empty(DType::kI64, {0}))
                                 .Out(DType::kF32))),
            (std::vector<double>{3}));
  // Edge-padding a 1-element dim, reflect-padding one too.
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Pad")
                                 .In(F32({1}, {4}))
                                 .In(I64({2}, {2, 1}))
                                 .Attr("mode", std::string("reflect"))
                                 .Out(DType::kF32))),
            (std::vector<double>{4, 4, 4, 4}));
}

TEST(PadTest, NegativeStrideView) {
  // The reversed view [3, 2, 1, 0], constant- and edge-padded.
  const Tensor reversed = ViewOf(Iota({4}), 3, {4}, {-1});
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Pad")
                                 .In(reversed)
                                 .In(I64({2}, {1, 2}))
                                 .In(Tensor::Scalar(9))
                                 .Out(DType::kF32))),
            (std::vector<double>{9, 3, 2, 1, 0, 9, 9}));
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Pad")
                                 .In(reversed)
                                 .In(I64({2}, {2, 1}))
                                 .Attr("mode", std::string("edge"))
                                 .Out(DType::kF32))),
            (std::vector<double>{3, 3, 3, 2, 1, 0, 0}));
  // A 2-D view with a negative row stride: rows of Iota({2, 3}) swapped, padded on both axes.
  const Tensor swapped = ViewOf(Iota({2, 3}), 3, {2, 3}, {-3, 1});
  EXPECT_EQ(
      ToDoubles(RunOne(KernelCall("Pad").In(swapped).In(I64({4}, {1, 0, 0, 1})).Out(DType::kF32))),
      (std::vector<double>{0, 0, 0, 0, 3, 4, 5, 0, 0, 1, 2, 0}));
}

TEST(PadTest, Errors) {
  ExpectInvalid(KernelCall("Pad").In(Iota({2})).In(I64({2}, {-2, -1})).Out(DType::kF32), "Pad");
  ExpectInvalid(KernelCall("Pad").In(Iota({2})).In(I64({3}, {1, 1, 1})).Out(DType::kF32), "Pad");
  ExpectInvalid(KernelCall("Pad")
                    .In(*Tensor::Empty(DType::kF32, {0}))
                    .In(I64({2}, {1, 1}))
                    .Attr("mode", std::string("edge"))
                    .Out(DType::kF32),
                "empty");
  ExpectInvalid(KernelCall("Pad").In(Iota({2})).In(I64({2}, {kI64Max, 1})).Out(DType::kF32), "Pad");
  ExpectInvalid(KernelCall("Pad").In(Iota({2})).Out(DType::kF32), "required");
  EXPECT_EQ(RunStatus(KernelCall("Pad")
                          .In(Iota({2}))
                          .In(I64({2}, {1, 1}))
                          .Attr("mode", std::string("mirror"))
                          .Out(DType::kF32))
                .code(),
            absl::StatusCode::kInvalidArgument);
  ExpectInvalid(KernelCall("Pad")
                    .In(Iota({2}))
                    .In(I64({2}, {1, 1}))
                    .OutTensor(*Tensor::Empty(DType::kF32, {3})),
                "planned");
}

// ---- Trilu ----

const std::vector<int64_t> kTriluInput = {5, 0, 3, 3, 7, 9, 3, 5, 2, 4,
                                          7, 6, 8, 8, 1, 6, 7, 7, 8, 1};

TEST(TriluTest, OnnxCases) {
  // test_tril_neg (upper=0, k=-1) and test_triu_pos (k=2).
  EXPECT_EQ(ToInts(RunOne(KernelCall("Trilu")
                              .In(I64({4, 5}, kTriluInput))
                              .In(Tensor::ScalarI64(-1))
                              .Attr("upper", int64_t{0})
                              .Out(DType::kI64))),
            (std::vector<int64_t>{0, 0, 0, 0, 0, 9, 0, 0, 0, 0, 7, 6, 0, 0, 0, 6, 7, 7, 0, 0}));
  EXPECT_EQ(ToInts(RunOne(KernelCall("Trilu")
                              .In(I64({4, 5}, kTriluInput))
                              .In(Tensor::ScalarI64(2))
                              .Out(DType::kI64))),
            (std::vector<int64_t>{0, 0, 3, 3, 7, 0, 0, 0, 2, 4, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0}));
}

TEST(TriluTest, BatchedDefaultKAndExtremeK) {
  // numpy: np.triu(np.arange(24).reshape(2,3,4), -1) and np.tril(..., 1)
  EXPECT_EQ(ToDoubles(RunOne(
                KernelCall("Trilu").In(Iota({2, 3, 4})).In(I64({1}, {-1})).Out(DType::kF32))),
            (std::vector<double>{0,  1,  2,  3,  4,  5,  6,  7,  0, 9,  10, 11,
                                 12, 13, 14, 15, 16, 17, 18, 19, 0, 21, 22, 23}));
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Trilu")
                                 .In(Iota({2, 3, 4}))
                                 .In(I64({1}, {1}))
                                 .Attr("upper", int64_t{0})
                                 .Out(DType::kF32))),
            (std::vector<double>{0,  1,  0, 0, 4,  5,  6,  0, 8,  9,  10, 11,
                                 12, 13, 0, 0, 16, 17, 18, 0, 20, 21, 22, 23}));
  // Without k: the main diagonal; on a strided view [[0,2],[1,3]].
  EXPECT_EQ(
      ToDoubles(RunOne(KernelCall("Trilu").In(TransposedView(Iota({2, 2}))).Out(DType::kF32))),
      (std::vector<double>{0, 2, 0, 3}));
  EXPECT_EQ(
      ToDoubles(RunOne(
          KernelCall("Trilu").In(Iota({2, 2})).In(Tensor::ScalarI64(kI64Min)).Out(DType::kF32))),
      (std::vector<double>{0, 1, 2, 3}));
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Trilu")
                                 .In(Iota({2, 2}))
                                 .In(Tensor::ScalarI64(kI64Min))
                                 .Attr("upper", int64_t{0})
                                 .Out(DType::kF32))),
            (std::vector<double>{0, 0, 0, 0}));
  EXPECT_EQ(
      DimsOf(RunOne(KernelCall("Trilu").In(*Tensor::Empty(DType::kF32, {0, 3})).Out(DType::kF32))),
      (std::vector<int64_t>{0, 3}));
}

TEST(TriluTest, Errors) {
  ExpectInvalid(KernelCall("Trilu").In(Iota({3})).Out(DType::kF32), "rank below 2");
  ExpectInvalid(KernelCall("Trilu").In(Iota({2, 2})).In(I64({2}, {1, 2})).Out(DType::kF32),
                "one element");
}

// ---- ReverseSequence ----

TEST(ReverseSequenceTest, BatchAndTimeAxes) {
  // test_reversesequence_batch and test_reversesequence_time.
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("ReverseSequence")
                                 .In(Iota({4, 4}))
                                 .In(I64({4}, {1, 2, 3, 4}))
                                 .Attr("batch_axis", int64_t{0})
                                 .Attr("time_axis", int64_t{1})
                                 .Out(DType::kF32))),
            (std::vector<double>{0, 1, 2, 3, 5, 4, 6, 7, 10, 9, 8, 11, 15, 14, 13, 12}));
  const Tensor x = F32({4, 4}, {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15});
  EXPECT_EQ(ToDoubles(RunOne(
                KernelCall("ReverseSequence").In(x).In(I64({4}, {4, 3, 2, 1})).Out(DType::kF32))),
            (std::vector<double>{3, 6, 9, 12, 2, 5, 8, 13, 1, 4, 10, 14, 0, 7, 11, 15}));
  // The same on the transposed view of the batch-major input, with trailing dims.
  const Tensor y = RunOne(KernelCall("ReverseSequence")
                              .In(TransposedView(Iota({4, 4})))
                              .In(I64({4}, {4, 3, 2, 1}))
                              .Out(DType::kF32));
  EXPECT_EQ(ToDoubles(y),
            (std::vector<double>{3, 6, 9, 12, 2, 5, 8, 13, 1, 4, 10, 14, 0, 7, 11, 15}));
  const Tensor z =
      RunOne(KernelCall("ReverseSequence").In(Iota({3, 1, 2})).In(I64({1}, {3})).Out(DType::kF32));
  EXPECT_EQ(ToDoubles(z), (std::vector<double>{4, 5, 2, 3, 0, 1}));
}

TEST(ReverseSequenceTest, Errors) {
  ExpectInvalid(
      KernelCall("ReverseSequence").In(Iota({2, 2})).In(I64({2}, {3, 1})).Out(DType::kF32),
      "sequence length 3");
  ExpectInvalid(KernelCall("ReverseSequence").In(Iota({2, 2})).In(I64({1}, {1})).Out(DType::kF32),
                "ReverseSequence");
  EXPECT_EQ(RunStatus(KernelCall("ReverseSequence")
                          .In(Iota({2, 2}))
                          .In(I64({2}, {1, 1}))
                          .Attr("batch_axis", int64_t{0})
                          .Out(DType::kF32))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- Compress ----

TEST(CompressTest, AxisDefaultAndNegative) {
  // test_compress_0, test_compress_default_axis.
  const Tensor x = F32({3, 2}, {1, 2, 3, 4, 5, 6});
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Compress")
                                 .In(x)
                                 .In(Bool({3}, {false, true, true}))
                                 .Attr("axis", int64_t{0})
                                 .Out(DType::kF32))),
            (std::vector<double>{3, 4, 5, 6}));
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Compress")
                                 .In(x)
                                 .In(Bool({5}, {false, true, false, false, true}))
                                 .Out(DType::kF32))),
            (std::vector<double>{2, 5}));
  // A shorter condition on the last axis of a strided view [[0,2,4],[1,3,5]].
  const Tensor out = RunOne(KernelCall("Compress")
                                .In(TransposedView(Iota({3, 2})))
                                .In(Bool({2}, {false, true}))
                                .Attr("axis", int64_t{-1})
                                .Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{2, 1}));
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{2, 3}));
  // Default axis on the strided view reads in its row-major order.
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("Compress")
                                 .In(TransposedView(Iota({3, 2})))
                                 .In(Bool({6}, {false, true, true, false, false, true}))
                                 .Out(DType::kF32))),
            (std::vector<double>{2, 4, 5}));
  // A longer condition whose extra entries are false.
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Compress")
                              .In(x)
                              .In(Bool({4}, {false, false, false, false}))
                              .Attr("axis", int64_t{0})
                              .Out(DType::kF32))),
            (std::vector<int64_t>{0, 2}));
}

TEST(CompressTest, Errors) {
  ExpectInvalid(KernelCall("Compress")
                    .In(Iota({3, 2}))
                    .In(Bool({4}, {false, false, false, true}))
                    .Attr("axis", int64_t{0})
                    .Out(DType::kF32),
                "index 3");
  ExpectInvalid(KernelCall("Compress").In(Iota({3})).In(I64({3}, {1, 0, 1})).Out(DType::kF32),
                "bool");
  ExpectInvalid(KernelCall("Compress")
                    .In(Iota({3}))
                    .In(Bool({1}, {true}))
                    .Attr("axis", int64_t{1})
                    .Out(DType::kF32),
                "axis");
}

// ---- Gather ----

TEST(GatherTest, NegativeIndicesAndAxis) {
  // test_gather_negative_indices.
  EXPECT_EQ(ToDoubles(RunOne(
                KernelCall("Gather").In(Iota({10})).In(I64({3}, {0, -9, -10})).Out(DType::kF32))),
            (std::vector<double>{0, 1, 0}));
  // numpy: np.arange(24).reshape(2,3,4).take([[2,0],[1,1]], axis=1)
  const Tensor out = RunOne(KernelCall("Gather")
                                .In(Iota({2, 3, 4}))
                                .In(I32({2, 2}, {2, 0, 1, 1}))
                                .Attr("axis", int64_t{1})
                                .Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{2, 2, 2, 4}));
  EXPECT_EQ(ToDoubles(out),
            (std::vector<double>{8,  9,  10, 11, 0,  1,  2,  3,  4,  5,  6,  7,  4,  5,  6,  7,
                                 20, 21, 22, 23, 12, 13, 14, 15, 16, 17, 18, 19, 16, 17, 18, 19}));
}

TEST(GatherTest, ScalarIndexStridedAndBool) {
  // Transposed view [[0,3],[1,4],[2,5]]; index -1 along axis -1 gives [3, 4, 5].
  const Tensor out = RunOne(KernelCall("Gather")
                                .In(TransposedView(Iota({2, 3})))
                                .In(Tensor::ScalarI64(-1))
                                .Attr("axis", int64_t{-1})
                                .Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{3}));
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{3, 4, 5}));
  EXPECT_EQ(ToInts(RunOne(KernelCall("Gather")
                              .In(Bool({3}, {true, false, true}))
                              .In(I64({2}, {1, 2}))
                              .Out(DType::kBool))),
            (std::vector<int64_t>{0, 1}));
  EXPECT_EQ(DimsOf(RunOne(KernelCall("Gather")
                              .In(Iota({2, 3}))
                              .In(*Tensor::Empty(DType::kI64, {0}))
                              .Out(DType::kF32))),
            (std::vector<int64_t>{0, 3}));
}

// Every rank 1-4, every axis (given positive and negative), index tensors of rank 0-2 (a
// "batch" of index rows) with negative and repeated indices, at one and two threads, against an
// element-by-element oracle: out[o, j, i] = x[o, idx[j] (+ dim if negative), i] with outer o,
// inner i. Contiguous data copies whole rows (GatherRows); the same values as a strided view
// (every other element of a buffer twice the size) take the strided path and must agree.
TEST(GatherTest, RowsOfAnyRankAxisAndBatchMatchElementOracle) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  const std::vector<std::vector<int64_t>> shapes = {{7}, {5, 6}, {3, 4, 5}, {2, 3, 4, 5}};
  const std::vector<std::vector<int64_t>> index_shapes = {{}, {3}, {4, 3}};
  for (const std::vector<int64_t>& shape : shapes) {
    const Tensor x = Iota(shape);
    const int rank = static_cast<int>(shape.size());
    Tensor spread = *Tensor::Empty(DType::kF32, {2 * x.numel()});
    for (int64_t k = 0; k < spread.numel(); ++k) {
      spread.data<float>()[k] = k % 2 == 0 ? static_cast<float>(k / 2) : -1.0f;
    }
    std::vector<int64_t> strides(rank);
    for (int d = rank - 1, st = 2; d >= 0; st *= static_cast<int>(shape[d]), --d) strides[d] = st;
    const Tensor strided = ViewOf(spread, 0, shape, strides);
    ASSERT_FALSE(strided.is_contiguous());
    for (int axis = 0; axis < rank; ++axis) {
      const int64_t dim = shape[axis];
      int64_t outer = 1, inner = 1;
      for (int d = 0; d < axis; ++d) outer *= shape[d];
      for (int d = axis + 1; d < rank; ++d) inner *= shape[d];
      for (const std::vector<int64_t>& ishape : index_shapes) {
        int64_t n = 1;
        for (int64_t d : ishape) n *= d;
        std::vector<int64_t> idx;
        for (int64_t j = 0; j < n; ++j)
          idx.push_back((j * 5 + 2) % (2 * dim) - dim);  // [-dim, dim)
        std::vector<int64_t> dims(shape.begin(), shape.begin() + axis);
        dims.insert(dims.end(), ishape.begin(), ishape.end());
        dims.insert(dims.end(), shape.begin() + axis + 1, shape.end());
        std::vector<double> want;
        for (int64_t o = 0; o < outer; ++o) {
          for (int64_t j = 0; j < n; ++j) {
            const int64_t row = idx[j] < 0 ? idx[j] + dim : idx[j];
            for (int64_t i = 0; i < inner; ++i) {
              want.push_back(static_cast<double>((o * dim + row) * inner + i));
            }
          }
        }
        const Tensor indices = ishape.empty() ? Tensor::ScalarI64(idx[0]) : I64(ishape, idx);
        for (const int64_t attr : {int64_t{axis}, int64_t{axis - rank}}) {
          for (const Tensor& data : {x, strided}) {
            for (int threads : {1, 2}) {
              SCOPED_TRACE(absl::StrCat("shape ", rank, "d axis ", attr, " indices rank ",
                                        ishape.size(), " threads ", threads,
                                        data.is_contiguous() ? "" : " strided"));
              absl::StatusOr<std::vector<Tensor>> got = KernelCall("Gather")
                                                            .In(data)
                                                            .In(indices)
                                                            .Attr("axis", attr)
                                                            .Out(DType::kF32)
                                                            .Run(threads);
              ASSERT_TRUE(got.ok()) << got.status();
              EXPECT_EQ(DimsOf((*got)[0]), dims);
              EXPECT_EQ(ToDoubles((*got)[0]), want);
            }
          }
        }
      }
    }
  }
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

// An embedding lookup of a batch of token rows (the encoder's first op): a [1000, 128] table,
// indices [8, 128] with negative ones, split over two threads; and a bad index in the last row
// of the batch is still an error naming it.
TEST(GatherTest, EmbeddingBatchRowsAndBadIndexInBatch) {
  const int cap = MaxThreads();
  ASSERT_TRUE(SetMaxThreads(std::max(cap, 2)).ok());
  const Tensor table = Iota({1000, 128});
  std::vector<int64_t> tokens;
  for (int64_t i = 0; i < 8 * 128; ++i)
    tokens.push_back((i * 7919) % 1000 - (i % 3 == 0 ? 1000 : 0));
  for (int threads : {1, 2}) {
    absl::StatusOr<std::vector<Tensor>> got =
        KernelCall("Gather").In(table).In(I64({8, 128}, tokens)).Out(DType::kF32).Run(threads);
    ASSERT_TRUE(got.ok()) << got.status();
    EXPECT_EQ(DimsOf((*got)[0]), (std::vector<int64_t>{8, 128, 128}));
    const std::vector<double> out = ToDoubles((*got)[0]);
    for (int64_t r = 0; r < 8 * 128; ++r) {
      const int64_t row = tokens[r] < 0 ? tokens[r] + 1000 : tokens[r];
      for (int64_t i = 0; i < 128; i += 31) {
        ASSERT_EQ(out[r * 128 + i], static_cast<double>(row * 128 + i)) << r << " " << i;
      }
    }
  }
  tokens.back() = 1000;
  ExpectInvalid(KernelCall("Gather").In(table).In(I64({8, 128}, tokens)).Out(DType::kF32),
                "index 1000");
  tokens.back() = -1001;
  ExpectInvalid(KernelCall("Gather").In(table).In(I64({8, 128}, tokens)).Out(DType::kF32),
                "index -1001");
  ASSERT_TRUE(SetMaxThreads(cap).ok());
}

TEST(GatherTest, Errors) {
  ExpectInvalid(KernelCall("Gather").In(Iota({3})).In(I64({2}, {0, 3})).Out(DType::kF32),
                "Gather: index 3");
  ExpectInvalid(KernelCall("Gather").In(Iota({3})).In(I64({1}, {-4})).Out(DType::kF32), "index -4");
  ExpectInvalid(KernelCall("Gather").In(Iota({3})).In(I64({1}, {kI64Min})).Out(DType::kF32),
                "Gather");
  ExpectInvalid(KernelCall("Gather").In(Iota({3})).In(F32({1}, {0})).Out(DType::kF32), "i64");
  ExpectInvalid(KernelCall("Gather")
                    .In(Iota({3}))
                    .In(I64({1}, {0}))
                    .Attr("axis", int64_t{1})
                    .Out(DType::kF32),
                "axis");
}

// ---- GatherElements ----

TEST(GatherElementsTest, NegativeIndicesAndAxis1) {
  // test_gather_elements_negative_indices.
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("GatherElements")
                                 .In(F32({3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9}))
                                 .In(I64({2, 3}, {-1, -2, 0, -2, 0, 0}))
                                 .Out(DType::kF32))),
            (std::vector<double>{7, 5, 3, 4, 2, 3}));
  // test_gather_elements_0: data [[1,2],[3,4]], indices [[0,0],[1,0]], axis 1.
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("GatherElements")
                                 .In(F32({2, 2}, {1, 2, 3, 4}))
                                 .In(I32({2, 2}, {0, 0, 1, 0}))
                                 .Attr("axis", int64_t{1})
                                 .Out(DType::kF32))),
            (std::vector<double>{1, 1, 4, 3}));
  // On the transposed view [[1,3],[2,4]], indices smaller than the data.
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("GatherElements")
                                 .In(TransposedView(F32({2, 2}, {1, 2, 3, 4})))
                                 .In(I64({1, 2}, {1, 0}))
                                 .Out(DType::kF32))),
            (std::vector<double>{2, 3}));
}

TEST(GatherElementsTest, Errors) {
  ExpectInvalid(
      KernelCall("GatherElements").In(Iota({2, 2})).In(I64({1, 2}, {0, 2})).Out(DType::kF32),
      "GatherElements: index 2");
  ExpectInvalid(
      KernelCall("GatherElements").In(Iota({2, 2})).In(I64({1, 3}, {0, 0, 0})).Out(DType::kF32),
      "do not fit");
  ExpectInvalid(KernelCall("GatherElements").In(Iota({2, 2})).In(I64({2}, {0, 0})).Out(DType::kF32),
                "do not fit");
}

// ---- GatherND ----

TEST(GatherNDTest, OnnxExamples) {
  // Example 1 and 2 of the ONNX doc, and test_gathernd_example_int32_batch_dim1.
  const Tensor d = I32({2, 2}, {0, 1, 2, 3});
  EXPECT_EQ(
      ToInts(RunOne(KernelCall("GatherND").In(d).In(I64({2, 2}, {0, 0, 1, 1})).Out(DType::kI32))),
      (std::vector<int64_t>{0, 3}));
  const Tensor rows = RunOne(KernelCall("GatherND").In(d).In(I64({2, 1}, {1, 0})).Out(DType::kI32));
  EXPECT_EQ(DimsOf(rows), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ToInts(rows), (std::vector<int64_t>{2, 3, 0, 1}));
  const Tensor batch = RunOne(KernelCall("GatherND")
                                  .In(I32({2, 2, 2}, {0, 1, 2, 3, 4, 5, 6, 7}))
                                  .In(I64({2, 1}, {1, 0}))
                                  .Attr("batch_dims", int64_t{1})
                                  .Out(DType::kI32));
  EXPECT_EQ(DimsOf(batch), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ToInts(batch), (std::vector<int64_t>{2, 3, 4, 5}));
}

TEST(GatherNDTest, BatchDimsNegativeIndexAndStrided) {
  // data[b, i, j] = 100 b + 10 i + j, b in 0..1, i in 0..2, j in 0..1; indices [b][t] = (i, j).
  std::vector<float> v;
  for (int b = 0; b < 2; ++b) {
    for (int i = 0; i < 3; ++i) {
      for (int j = 0; j < 2; ++j) v.push_back(100.0f * b + 10.0f * i + j);
    }
  }
  const Tensor out = RunOne(KernelCall("GatherND")
                                .In(F32({2, 3, 2}, v))
                                .In(I64({2, 2, 2}, {2, 1, 0, -1, -3, 0, 1, 1}))
                                .Attr("batch_dims", int64_t{1})
                                .Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ToDoubles(out), (std::vector<double>{21, 1, 100, 111}));
  // Transposed view [[0,2],[1,3]] of [[0,1],[2,3]].
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("GatherND")
                                 .In(TransposedView(Iota({2, 2})))
                                 .In(I64({1, 2}, {0, 1}))
                                 .Out(DType::kF32))),
            (std::vector<double>{2}));
}

TEST(GatherNDTest, Errors) {
  ExpectInvalid(KernelCall("GatherND").In(Iota({2, 2})).In(I64({1, 2}, {0, 2})).Out(DType::kF32),
                "GatherND: index 2");
  ExpectInvalid(KernelCall("GatherND").In(Iota({2, 2})).In(I64({1, 3}, {0, 0, 0})).Out(DType::kF32),
                "do not fit");
  ExpectInvalid(KernelCall("GatherND")
                    .In(Iota({2, 2}))
                    .In(I64({3, 1}, {0, 0, 0}))
                    .Attr("batch_dims", int64_t{1})
                    .Out(DType::kF32),
                "do not fit");
}

// ---- ScatterND ----

TEST(ScatterNDTest, OnnxExample) {
  // test_scatternd.
  const std::vector<float> block = {1, 2, 3, 4, 5, 6, 7, 8, 8, 7, 6, 5, 4, 3, 2, 1};
  const std::vector<float> rev = {8, 7, 6, 5, 4, 3, 2, 1, 1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> data;
  for (const auto* p : {&block, &block, &rev, &rev}) data.insert(data.end(), p->begin(), p->end());
  std::vector<float> updates;
  for (float v : {5, 6, 7, 8, 1, 2, 3, 4}) updates.insert(updates.end(), 4, v);
  const Tensor out = RunOne(KernelCall("ScatterND")
                                .In(F32({4, 4, 4}, data))
                                .In(I64({2, 1}, {0, 2}))
                                .In(F32({2, 4, 4}, updates))
                                .Out(DType::kF32));
  std::vector<double> want;
  want.insert(want.end(), updates.begin(), updates.begin() + 16);
  want.insert(want.end(), block.begin(), block.end());
  want.insert(want.end(), updates.begin() + 16, updates.end());
  want.insert(want.end(), rev.begin(), rev.end());
  EXPECT_EQ(ToDoubles(out), want);
}

TEST(ScatterNDTest, Reductions) {
  // The ONNX doc's example 1 with duplicate indices [[4], [3], [4], [7]].
  const Tensor data = F32({8}, {1, 2, 3, 4, 5, 6, 7, 8});
  const Tensor idx = I64({4, 1}, {4, 3, 4, -1});
  const Tensor upd = F32({4}, {9, 10, 11, 12});
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("ScatterND")
                                 .In(data)
                                 .In(idx)
                                 .In(upd)
                                 .Attr("reduction", std::string("add"))
                                 .Out(DType::kF32))),
            (std::vector<double>{1, 2, 3, 14, 25, 6, 7, 20}));
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("ScatterND")
                                 .In(data)
                                 .In(idx)
                                 .In(upd)
                                 .Attr("reduction", std::string("mul"))
                                 .Out(DType::kF32))),
            (std::vector<double>{1, 2, 3, 40, 495, 6, 7, 96}));
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("ScatterND")
                                 .In(data)
                                 .In(idx)
                                 .In(upd)
                                 .Attr("reduction", std::string("max"))
                                 .Out(DType::kF32))),
            (std::vector<double>{1, 2, 3, 10, 11, 6, 7, 12}));
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("ScatterND")
                                 .In(data)
                                 .In(idx)
                                 .In(upd)
                                 .Attr("reduction", std::string("min"))
                                 .Out(DType::kF32))),
            (std::vector<double>{1, 2, 3, 4, 5, 6, 7, 8}));
  // i32 add wraps instead of overflowing.
  EXPECT_EQ(ToInts(RunOne(KernelCall("ScatterND")
                              .In(I32({2}, {2147483647, 0}))
                              .In(I64({1, 1}, {0}))
                              .In(I32({1}, {1}))
                              .Attr("reduction", std::string("add"))
                              .Out(DType::kI32))),
            (std::vector<int64_t>{-2147483648LL, 0}));
}

TEST(ScatterNDTest, StridedUpdatesAndSlices) {
  // Rows 1 and 0 of a [2, 2] output get the transposed view [[0,2],[1,3]].
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("ScatterND")
                                 .In(F32({2, 2}, {9, 9, 9, 9}))
                                 .In(I64({2, 1}, {1, 0}))
                                 .In(TransposedView(Iota({2, 2})))
                                 .Out(DType::kF32))),
            (std::vector<double>{1, 3, 0, 2}));
}

TEST(ScatterNDTest, Errors) {
  ExpectInvalid(
      KernelCall("ScatterND").In(Iota({4})).In(I64({1, 1}, {4})).In(F32({1}, {1})).Out(DType::kF32),
      "ScatterND: index 4");
  ExpectInvalid(KernelCall("ScatterND")
                    .In(Iota({4}))
                    .In(I64({1, 1}, {0}))
                    .In(F32({2}, {1, 2}))
                    .Out(DType::kF32),
                "do not fit");
  EXPECT_EQ(RunStatus(KernelCall("ScatterND")
                          .In(Iota({4}))
                          .In(I64({1, 1}, {0}))
                          .In(F32({1}, {1}))
                          .Attr("reduction", std::string("sub"))
                          .Out(DType::kF32))
                .code(),
            absl::StatusCode::kInvalidArgument);
}

// ---- ScatterElements ----

TEST(ScatterElementsTest, OnnxCases) {
  // test_scatter_elements_with_duplicate_indices (reduction add, axis 1).
  const Tensor dup = RunOne(KernelCall("ScatterElements")
                                .In(F32({1, 5}, {1, 2, 3, 4, 5}))
                                .In(I64({1, 2}, {1, 1}))
                                .In(F32({1, 2}, {1.1f, 2.1f}))
                                .Attr("axis", int64_t{1})
                                .Attr("reduction", std::string("add"))
                                .Out(DType::kF32));
  EXPECT_EQ(ToDoubles(dup), ToDoubles(F32({1, 5}, {1, 5.2f, 3, 4, 5})));
  // test_scatter_elements_without_axis.
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("ScatterElements")
                                 .In(F32({3, 3}, {0, 0, 0, 0, 0, 0, 0, 0, 0}))
                                 .In(I64({2, 3}, {1, 0, 2, 0, 2, 1}))
                                 .In(F32({2, 3}, {1.0f, 1.1f, 1.2f, 2.0f, 2.1f, 2.2f}))
                                 .Out(DType::kF32))),
            ToDoubles(F32({3, 3}, {2.0f, 1.1f, 0, 1.0f, 0, 2.2f, 0, 2.1f, 1.2f})));
  // test_scatter_elements_with_negative_indices (axis 1).
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("ScatterElements")
                                 .In(F32({1, 5}, {1, 2, 3, 4, 5}))
                                 .In(I64({1, 2}, {1, -3}))
                                 .In(F32({1, 2}, {1.1f, 2.1f}))
                                 .Attr("axis", int64_t{1})
                                 .Out(DType::kF32))),
            ToDoubles(F32({1, 5}, {1, 1.1f, 2.1f, 4, 5})));
}

TEST(ScatterElementsTest, ReductionsStridedAndAlias) {
  EXPECT_EQ(ToInts(RunOne(KernelCall("ScatterElements")
                              .In(I64({4}, {5, 5, 5, 5}))
                              .In(I64({3}, {0, 0, 3}))
                              .In(I64({3}, {7, 9, 1}))
                              .Attr("reduction", std::string("max"))
                              .Out(DType::kI64))),
            (std::vector<int64_t>{9, 5, 5, 5}));
  EXPECT_EQ(ToInts(RunOne(KernelCall("ScatterElements")
                              .In(I64({4}, {5, 5, 5, 5}))
                              .In(I64({3}, {0, 0, 3}))
                              .In(I64({3}, {7, 9, 1}))
                              .Attr("reduction", std::string("min"))
                              .Out(DType::kI64))),
            (std::vector<int64_t>{5, 5, 5, 1}));
  // The transposed view [[0,2],[1,3]] as updates on axis 0 with indices [[1,0],[0,1]].
  EXPECT_EQ(ToDoubles(RunOne(KernelCall("ScatterElements")
                                 .In(F32({2, 2}, {9, 9, 9, 9}))
                                 .In(I64({2, 2}, {1, 0, 0, 1}))
                                 .In(TransposedView(Iota({2, 2})))
                                 .Attr("reduction", std::string("mul"))
                                 .Out(DType::kF32))),
            (std::vector<double>{9, 18, 0, 27}));
  // Scatter (opset 9-10) is the same op; bool data moves as bits.
  EXPECT_EQ(ToInts(RunOne(KernelCall("Scatter")
                              .In(Bool({3}, {false, false, false}))
                              .In(I32({1}, {2}))
                              .In(Bool({1}, {true}))
                              .Out(DType::kBool))),
            (std::vector<int64_t>{0, 0, 1}));
}

TEST(ScatterElementsTest, BoolReductionIsUnimplemented) {
  EXPECT_EQ(RunStatus(KernelCall("ScatterElements")
                          .In(Bool({2}, {false, false}))
                          .In(I64({1}, {0}))
                          .In(Bool({1}, {true}))
                          .Attr("reduction", std::string("add"))
                          .Out(DType::kBool))
                .code(),
            absl::StatusCode::kUnimplemented);
}

TEST(ScatterElementsTest, Errors) {
  ExpectInvalid(KernelCall("ScatterElements")
                    .In(Iota({3}))
                    .In(I64({1}, {3}))
                    .In(F32({1}, {1}))
                    .Out(DType::kF32),
                "ScatterElements: index 3");
  ExpectInvalid(KernelCall("ScatterElements")
                    .In(Iota({3}))
                    .In(I64({1}, {0}))
                    .In(F32({2}, {1, 2}))
                    .Out(DType::kF32),
                "do not fit");
  ExpectInvalid(KernelCall("ScatterElements")
                    .In(Iota({2, 2}))
                    .In(I64({1, 3}, {0, 0, 0}))
                    .In(Iota({1, 3}))
                    .Out(DType::kF32),
                "do not fit");
}

// ---- OneHot ----

TEST(OneHotTest, OnnxCases) {
  // test_onehot_with_axis: float indices, depth 10, axis 1.
  const Tensor out = RunOne(KernelCall("OneHot")
                                .In(F32({2, 2}, {1, 9, 2, 4}))
                                .In(Tensor::Scalar(10))
                                .In(F32({2}, {1, 3}))
                                .Attr("axis", int64_t{1})
                                .Out(DType::kF32));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{2, 10, 2}));
  std::vector<double> want(40, 1.0);
  want[2] = want[19] = want[24] = want[29] = 3.0;
  EXPECT_EQ(ToDoubles(out), want);
  // test_onehot_negative_indices: axis -1 by default.
  const Tensor neg = RunOne(KernelCall("OneHot")
                                .In(I64({3}, {0, -7, -8}))
                                .In(Tensor::Scalar(10))
                                .In(F32({2}, {1, 3}))
                                .Out(DType::kF32));
  std::vector<double> want_neg(30, 1.0);
  want_neg[0] = want_neg[13] = want_neg[22] = 3.0;
  EXPECT_EQ(ToDoubles(neg), want_neg);
}

TEST(OneHotTest, OutOfRangeIsAllOffAndI64Values) {
  const Tensor out = RunOne(KernelCall("OneHot")
                                .In(I32({4}, {2, 3, -4, -3}))
                                .In(Tensor::ScalarI64(3))
                                .In(I64({2}, {0, 5}))
                                .Attr("axis", int64_t{0})
                                .Out(DType::kI64));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{3, 4}));
  EXPECT_EQ(ToInts(out), (std::vector<int64_t>{0, 0, 0, 5, 0, 0, 0, 0, 5, 0, 0, 0}));
  const Tensor nan = RunOne(KernelCall("OneHot")
                                .In(F32({1}, {std::nanf("")}))
                                .In(Tensor::ScalarI64(2))
                                .In(I64({2}, {0, 1}))
                                .Out(DType::kI64));
  EXPECT_EQ(ToInts(nan), (std::vector<int64_t>{0, 0}));
}

TEST(OneHotTest, Errors) {
  ExpectInvalid(KernelCall("OneHot")
                    .In(I64({1}, {0}))
                    .In(Tensor::ScalarI64(-1))
                    .In(I64({2}, {0, 1}))
                    .Out(DType::kI64),
                "negative");
  ExpectInvalid(KernelCall("OneHot")
                    .In(I64({1}, {0}))
                    .In(Tensor::ScalarI64(2))
                    .In(I64({3}, {0, 1, 2}))
                    .Out(DType::kI64),
                "values");
  ExpectInvalid(KernelCall("OneHot")
                    .In(I64({1}, {0}))
                    .In(Tensor::ScalarI64(2))
                    .In(I64({2}, {0, 1}))
                    .Attr("axis", int64_t{2})
                    .Out(DType::kI64),
                "axis");
  ExpectInvalid(KernelCall("OneHot")
                    .In(I64({1}, {0}))
                    .In(Tensor::Scalar(1e30f))
                    .In(I64({2}, {0, 1}))
                    .Out(DType::kI64),
                "depth");
}

// ---- NonZero ----

TEST(NonZeroTest, OnnxExampleAndFloats) {
  // test_nonzero_example.
  const Tensor out =
      RunOne(KernelCall("NonZero").In(Bool({2, 2}, {true, false, true, true})).Out(DType::kI64));
  EXPECT_EQ(DimsOf(out), (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(ToInts(out), (std::vector<int64_t>{0, 1, 1, 0, 0, 1}));
  // -0 is zero, NaN is not.
  const Tensor f =
      RunOne(KernelCall("NonZero").In(F32({4}, {-0.0f, std::nanf(""), 0, 2})).Out(DType::kI64));
  EXPECT_EQ(ToInts(f), (std::vector<int64_t>{1, 3}));
  const Tensor none =
      RunOne(KernelCall("NonZero").In(*Tensor::Empty(DType::kI32, {2, 0})).Out(DType::kI64));
  EXPECT_EQ(DimsOf(none), (std::vector<int64_t>{2, 0}));
}

TEST(NonZeroTest, StridedScalarAndHalf) {
  // The transposed view [[0,2],[1,3]] has nonzeros at (0,1), (1,0), (1,1).
  const Tensor out =
      RunOne(KernelCall("NonZero").In(TransposedView(Iota({2, 2}))).Out(DType::kI64));
  EXPECT_EQ(ToInts(out), (std::vector<int64_t>{0, 1, 1, 1, 0, 1}));
  const Tensor s = RunOne(KernelCall("NonZero").In(Tensor::Scalar(5)).Out(DType::kI64));
  EXPECT_EQ(DimsOf(s), (std::vector<int64_t>{1, 1}));
  const Tensor h =
      RunOne(KernelCall("NonZero")
                 .In(testing::Make<Half>(DType::kF16, {3}, {Half(0.0f), Half(-0.0f), Half(1.0f)}))
                 .Out(DType::kI64));
  EXPECT_EQ(ToInts(h), (std::vector<int64_t>{2}));
}

// ---- Registration ----

TEST(ShapeRegistrationTest, KernelNamesAndStrings) {
  for (const char* op : {"Reshape",
                         "Flatten",
                         "Squeeze",
                         "Unsqueeze",
                         "Transpose",
                         "Expand",
                         "Tile",
                         "DepthToSpace",
                         "SpaceToDepth",
                         "Shape",
                         "Size",
                         "ConstantOfShape",
                         "Range",
                         "Slice",
                         "Concat",
                         "Split",
                         "Pad",
                         "Trilu",
                         "ReverseSequence",
                         "Compress",
                         "Gather",
                         "GatherElements",
                         "GatherND",
                         "ScatterND",
                         "ScatterElements",
                         "Scatter",
                         "OneHot",
                         "NonZero"}) {
    EXPECT_TRUE(KernelRegistry::Global().HasOp("", op, Device::kCPU)) << op;
  }
  EXPECT_TRUE(KernelRegistry::Global().HasOp("dynvm", "Copy", Device::kCPU));
  KernelCall call("Transpose");
  call.In(Iota({2})).Out(DType::kF32).Backend("reference");  // not the oneDNN kernel
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(call.spec());
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ((*k)->name(), "transpose.f32.ref");
  KernelSpec spec = call.spec();
  spec.inputs[0].dtype = static_cast<uint8_t>(DType::kString);
  EXPECT_EQ(KernelRegistry::Global().Create(spec).status().code(),
            absl::StatusCode::kUnimplemented);
}

}  // namespace
}  // namespace dynvm
