// Tests of the reference reduction, arg, TopK, softmax, LayerNormalization and CumSum kernels.
// Expected values are hand-computed, taken from ONNX's node test data
// (/usr/share/libonnx-testdata/data/node/test_*), or computed with numpy (snippets quoted).
#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
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

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

Tensor Run1(KernelCall& call) {
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  if (!r.ok()) return Tensor();
  return (*r)[0];
}

void ExpectNear(const Tensor& t, const std::vector<double>& want, double tol = 1e-5) {
  EXPECT_THAT(ToDoubles(t), Pointwise(DoubleNear(tol), want));
}

absl::StatusCode Code(KernelCall& call) { return call.Run().status().code(); }

Tensor Transposed(const Tensor& t) {
  return *Tensor::View(t.storage(), t.byte_offset(), t.dtype(), {t.dim(1), t.dim(0)},
                       {1, t.dim(1)});
}

// The [3,2,2] input of ONNX's reduce examples: 1..12.
Tensor Seq12() { return F32({3, 2, 2}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}); }
// The other [3,2,2] example input.
Tensor Example() { return F32({3, 2, 2}, {5, 1, 20, 2, 30, 1, 40, 2, 55, 1, 60, 2}); }

Tensor Reduce(const char* op, const Tensor& x, std::vector<int64_t> axes, int64_t keepdims = 1) {
  KernelCall call(op);
  call.In(x).Attr("keepdims", keepdims).Out(x.dtype());
  if (!axes.empty()) call.Attr("axes", std::move(axes));
  return Run1(call);
}

// ---- ReduceX ----

TEST(ReduceTest, OnnxExamples) {
  // test_reduce_l2_keep_dims_example
  Tensor l2 = Reduce("ReduceL2", Seq12(), {2});
  EXPECT_EQ(l2.ShapeString(), "[3,2,1]");
  ExpectNear(l2, {2.2360680103302, 5.0, 7.8102498054504395, 10.630146026611328, 13.45362377166748,
                  16.278820037841797});
  // test_reduce_prod_do_not_keepdims_example
  Tensor prod = Reduce("ReduceProd", Seq12(), {1}, 0);
  EXPECT_EQ(prod.ShapeString(), "[3,2]");
  ExpectNear(prod, {3, 8, 35, 48, 99, 120});
  // test_reduce_mean_negative_axes_keepdims_example
  Tensor mean = Reduce("ReduceMean", Example(), {-2});
  EXPECT_EQ(mean.ShapeString(), "[3,1,2]");
  ExpectNear(mean, {12.5, 1.5, 35, 1.5, 57.5, 1.5});
  // test_reduce_max_default_axes_keepdim_example
  Tensor max = Reduce("ReduceMax", Example(), {});
  EXPECT_EQ(max.ShapeString(), "[1,1,1]");
  ExpectNear(max, {60});
  // test_reduce_l1_default_axes_keepdims_example
  ExpectNear(Reduce("ReduceL1", Seq12(), {}), {78});
  ExpectNear(Reduce("ReduceMin", Example(), {0, 2}, 0), {1, 2});
  ExpectNear(Reduce("ReduceSumSquare", Seq12(), {0, 1, 2}, 0), {650});
  ExpectNear(Reduce("ReduceSum", Seq12(), {2, 0}), {33, 45});
}

TEST(ReduceTest, LogSumExpIsStable) {
  // test_reduce_log_sum_exp_do_not_keepdims_example (f64)
  std::vector<double> v = {5, 1, 20, 2, 30, 1, 40, 2, 55, 1, 60, 2};
  Tensor x = Make<double>(DType::kF64, {3, 2, 2}, v);
  Tensor y = Reduce("ReduceLogSumExp", x, {1}, 0);
  EXPECT_EQ(y.ShapeString(), "[3,2]");
  ExpectNear(y,
             {20.000000305902276, 2.313261687518223, 40.00004539889922, 2.313261687518223,
              60.00671534848912, 2.313261687518223},
             1e-12);
  // Values whose exp overflows, -inf and NaN.
  ExpectNear(Reduce("ReduceLogSumExp", F32({2}, {1000, 1000}), {}), {1000.6931471805599}, 1e-4);
  ExpectNear(Reduce("ReduceLogSumExp", F32({2}, {-kInf, -kInf}), {}), {-kInf});
  std::vector<double> nan = ToDoubles(Reduce("ReduceLogSumExp", F32({2}, {kNaN, 1}), {}));
  EXPECT_TRUE(std::isnan(nan[0]));
  // np.log(np.exp([[1,2,3],[4,5,6]]).sum()) and np.log(y.sum(1))
  ExpectNear(Reduce("ReduceLogSumExp", F32({2, 3}, {1, 2, 3, 4, 5, 6}), {}), {6.456193316018122});
  ExpectNear(Reduce("ReduceLogSum", F32({2, 3}, {1, 2, 3, 4, 5, 6}), {1}, 0),
             {1.7917594909667969, 2.70805025100708});
}

TEST(ReduceTest, AxesAsInputAndNoop) {
  // test_reduce_sum_empty_axes_input_noop_example
  KernelCall noop("ReduceSum");
  noop.In(Seq12()).In(I64({0}, {})).Attr("noop_with_empty_axes", int64_t{1}).Out(DType::kF32);
  Tensor y = Run1(noop);
  EXPECT_EQ(y.ShapeString(), "[3,2,2]");
  ExpectNear(y, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12});
  // With noop, the per-element part of the reduction still applies (ONNX PR 7394).
  KernelCall sq("ReduceSumSquare");
  sq.In(F32({3}, {-1, 2, 3})).Attr("noop_with_empty_axes", int64_t{1}).Out(DType::kF32);
  ExpectNear(Run1(sq), {1, 4, 9});
  // Axes from an input (opset 13+/18+): negative and i32.
  KernelCall in_axes("ReduceMax");
  in_axes.In(Example()).In(I32({1}, {-1})).Attr("keepdims", int64_t{0}).Out(DType::kF32);
  ExpectNear(Run1(in_axes), {5, 20, 30, 40, 55, 60});
  // Empty axes input without noop reduces everything.
  KernelCall all("ReduceSum");
  all.In(Seq12()).In(I64({0}, {})).Attr("keepdims", int64_t{0}).Out(DType::kF32);
  Tensor s = Run1(all);
  EXPECT_EQ(s.ShapeString(), "[]");
  ExpectNear(s, {78});
}

TEST(ReduceTest, StridedIntegersAndHalves) {
  // [[1,2,3],[4,5,6]]^T = [[1,4],[2,5],[3,6]]; L1 over axis 0 of it: |.| summed.
  Tensor t = Transposed(F32({2, 3}, {1, -2, 3, -4, 5, 6}));
  ExpectNear(Reduce("ReduceL1", t, {0}, 0), {6, 15});
  ExpectNear(Reduce("ReduceSum", t, {1}, 0), {-3, 3, 9});
  Tensor i = I64({2, 3}, {1, -2, 3, -4, 5, 6});
  EXPECT_EQ(ToInts(Reduce("ReduceSum", i, {1}, 0)), (std::vector<int64_t>{2, 7}));
  EXPECT_EQ(ToInts(Reduce("ReduceProd", i, {0}, 0)), (std::vector<int64_t>{-4, -10, 18}));
  EXPECT_EQ(ToInts(Reduce("ReduceMax", i, {0}, 0)), (std::vector<int64_t>{1, 5, 6}));
  EXPECT_EQ(ToInts(Reduce("ReduceMin", i, {}, 0)), (std::vector<int64_t>{-4}));
  EXPECT_EQ(ToInts(Reduce("ReduceMean", i, {1}, 0)), (std::vector<int64_t>{0, 2}));  // 2/3, 7/3
  EXPECT_EQ(ToInts(Reduce("ReduceL1", i, {1}, 0)), (std::vector<int64_t>{6, 15}));
  EXPECT_EQ(ToInts(Reduce("ReduceSumSquare", I32({2}, {3, -4}), {}, 0)),
            (std::vector<int64_t>{25}));
  EXPECT_EQ(ToInts(Reduce("ReduceL2", I32({2}, {3, -4}), {}, 0)), (std::vector<int64_t>{5}));
  Tensor h = Make<Half>(DType::kF16, {4}, {Half(1.0f), Half(2.0f), Half(3.0f), Half(4.0f)});
  ExpectNear(Reduce("ReduceMean", h, {}), {2.5}, 0);
}

TEST(ReduceTest, EmptyReductionsGiveIdentities) {
  Tensor e = F32({2, 0}, {});
  ExpectNear(Reduce("ReduceSum", e, {1}, 0), {0, 0});
  ExpectNear(Reduce("ReduceProd", e, {1}, 0), {1, 1});
  ExpectNear(Reduce("ReduceMax", e, {1}, 0), {-kInf, -kInf});
  ExpectNear(Reduce("ReduceMin", e, {1}, 0), {kInf, kInf});
  ExpectNear(Reduce("ReduceLogSumExp", e, {1}, 0), {-kInf, -kInf});
  EXPECT_EQ(Reduce("ReduceSum", e, {0}, 1).ShapeString(), "[1,0]");
  EXPECT_EQ(ToInts(Reduce("ReduceMax", I32({0}, {}), {0}, 0)),
            (std::vector<int64_t>{std::numeric_limits<int32_t>::min()}));
  std::vector<double> nan = ToDoubles(Reduce("ReduceMean", e, {1}, 0));
  EXPECT_TRUE(std::isnan(nan[0]));
}

TEST(ReduceTest, MaxPropagatesNaN) {
  std::vector<double> v = ToDoubles(Reduce("ReduceMax", F32({2, 2}, {1, kNaN, 3, 2}), {1}, 0));
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], 3);
  v = ToDoubles(Reduce("ReduceMin", F32({2, 2}, {kNaN, 1, 3, 2}), {1}, 0));
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ(v[1], 2);
}

TEST(ReduceTest, Errors) {
  KernelCall dup("ReduceSum");
  dup.In(Seq12()).Attr("axes", std::vector<int64_t>{1, -2}).Out(DType::kF32);
  EXPECT_EQ(Code(dup), absl::StatusCode::kInvalidArgument);
  KernelCall range("ReduceMean");
  range.In(Seq12()).Attr("axes", std::vector<int64_t>{3}).Out(DType::kF32);
  absl::Status s = range.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("ReduceMean"));
  KernelCall bad_input("ReduceSum");
  bad_input.In(Seq12()).In(F32({1}, {0})).Out(DType::kF32);
  EXPECT_EQ(Code(bad_input), absl::StatusCode::kInvalidArgument);
  KernelCall keep("ReduceSum");
  keep.In(Seq12()).Attr("keepdims", int64_t{3}).Out(DType::kF32);
  EXPECT_EQ(Code(keep), absl::StatusCode::kInvalidArgument);
  KernelCall wrong("ReduceSum");
  wrong.In(Seq12())
      .Attr("axes", std::vector<int64_t>{0})
      .OutTensor(*Tensor::Empty(DType::kF32, {2, 2}));
  EXPECT_EQ(Code(wrong), absl::StatusCode::kInvalidArgument);  // keepdims gives [1,2,2]
  KernelCall boolean("ReduceSum");
  boolean.In(testing::Bool({1}, {true})).Out(DType::kBool);
  EXPECT_EQ(Code(boolean), absl::StatusCode::kUnimplemented);
}

// ---- ArgMax, ArgMin ----

Tensor Arg(const char* op, const Tensor& x, int64_t axis, int64_t keepdims, int64_t last) {
  KernelCall call(op);
  call.In(x).Attr("axis", axis).Attr("keepdims", keepdims).Attr("select_last_index", last);
  call.Out(DType::kI64);
  return Run1(call);
}

TEST(ArgTest, OnnxExamples) {
  Tensor x = F32({2, 2}, {2, 2, 3, 10});
  // test_argmax_negative_axis_keepdims_example_select_last_index
  Tensor a = Arg("ArgMax", x, -1, 1, 1);
  EXPECT_EQ(a.ShapeString(), "[2,1]");
  EXPECT_EQ(ToInts(a), (std::vector<int64_t>{1, 1}));
  EXPECT_EQ(ToInts(Arg("ArgMax", x, -1, 1, 0)), (std::vector<int64_t>{0, 1}));
  // test_argmax_default_axis_example_select_last_index
  EXPECT_EQ(ToInts(Arg("ArgMax", x, 0, 1, 1)), (std::vector<int64_t>{1, 1}));
  // test_argmin_keepdims_example_select_last_index
  EXPECT_EQ(ToInts(Arg("ArgMin", x, 1, 1, 1)), (std::vector<int64_t>{1, 0}));
  // test_argmin_no_keepdims_example
  Tensor m = Arg("ArgMin", F32({2, 2}, {2, 1, 3, 10}), 1, 0, 0);
  EXPECT_EQ(m.ShapeString(), "[2]");
  EXPECT_EQ(ToInts(m), (std::vector<int64_t>{1, 0}));
}

TEST(ArgTest, NaNIsLargestAndStrides) {
  Tensor x = F32({3}, {1, kNaN, 5});
  EXPECT_EQ(ToInts(Arg("ArgMax", x, 0, 0, 0)), (std::vector<int64_t>{1}));
  EXPECT_EQ(ToInts(Arg("ArgMin", x, 0, 0, 0)), (std::vector<int64_t>{0}));
  EXPECT_EQ(ToInts(Arg("ArgMax", F32({3}, {kNaN, 0, kNaN}), 0, 0, 1)), (std::vector<int64_t>{2}));
  // [[1,5],[7,2],[3,9]] as a transposed view of [[1,7,3],[5,2,9]].
  Tensor t = Transposed(F32({2, 3}, {1, 7, 3, 5, 2, 9}));
  EXPECT_EQ(ToInts(Arg("ArgMax", t, 0, 0, 0)), (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(ToInts(Arg("ArgMin", t, 1, 0, 0)), (std::vector<int64_t>{0, 1, 0}));
  EXPECT_EQ(ToInts(Arg("ArgMax", I32({4}, {3, 9, 9, 1}), 0, 1, 0)), (std::vector<int64_t>{1}));
  EXPECT_EQ(ToInts(Arg("ArgMax", I32({4}, {3, 9, 9, 1}), 0, 1, 1)), (std::vector<int64_t>{2}));
}

TEST(ArgTest, Errors) {
  KernelCall empty("ArgMax");
  empty.In(F32({2, 0}, {})).Attr("axis", int64_t{1}).Out(DType::kI64);
  EXPECT_EQ(Code(empty), absl::StatusCode::kInvalidArgument);
  KernelCall ok_empty("ArgMax");
  ok_empty.In(F32({0, 3}, {})).Attr("axis", int64_t{1}).Out(DType::kI64);
  EXPECT_EQ(Run1(ok_empty).ShapeString(), "[0,1]");
  KernelCall axis("ArgMin");
  axis.In(F32({2}, {1, 2})).Attr("axis", int64_t{1}).Out(DType::kI64);
  EXPECT_EQ(Code(axis), absl::StatusCode::kInvalidArgument);
}

// ---- TopK ----

std::vector<Tensor> TopK(const Tensor& x, int64_t k, int64_t axis, int64_t largest) {
  KernelCall call("TopK");
  call.In(x).In(I64({1}, {k})).Attr("axis", axis).Attr("largest", largest);
  call.Out(x.dtype()).Out(DType::kI64);
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<Tensor>(2);
}

TEST(TopKTest, OnnxExamples) {
  // test_top_k
  std::vector<Tensor> r = TopK(F32({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}), 3, 1, 1);
  EXPECT_EQ(r[0].ShapeString(), "[3,3]");
  ExpectNear(r[0], {3, 2, 1, 7, 6, 5, 11, 10, 9});
  EXPECT_EQ(ToInts(r[1]), (std::vector<int64_t>{3, 2, 1, 3, 2, 1, 3, 2, 1}));
  // test_top_k_smallest
  r = TopK(F32({3, 4}, {0, 1, 2, 3, 4, 5, 6, 7, 11, 10, 9, 8}), 3, 1, 0);
  ExpectNear(r[0], {0, 1, 2, 4, 5, 6, 8, 9, 10});
  EXPECT_EQ(ToInts(r[1]), (std::vector<int64_t>{0, 1, 2, 0, 1, 2, 3, 2, 1}));
}

TEST(TopKTest, TiesNaNAxisAndStrides) {
  // Ties keep the lower index first; NaN is the largest.
  std::vector<Tensor> r = TopK(F32({6}, {2, kNaN, 2, 5, 2, -1}), 4, 0, 1);
  std::vector<double> v = ToDoubles(r[0]);
  EXPECT_TRUE(std::isnan(v[0]));
  EXPECT_EQ((std::vector<double>(v.begin() + 1, v.end())), (std::vector<double>{5, 2, 2}));
  EXPECT_EQ(ToInts(r[1]), (std::vector<int64_t>{1, 3, 0, 2}));
  r = TopK(F32({6}, {2, kNaN, 2, 5, 2, -1}), 3, 0, 0);
  EXPECT_EQ(ToInts(r[1]), (std::vector<int64_t>{5, 0, 2}));
  // Axis 0 of a transposed view: columns of [[4,1],[2,8],[6,3]].
  Tensor t = Transposed(I32({2, 3}, {4, 2, 6, 1, 8, 3}));
  r = TopK(t, 2, -2, 1);
  EXPECT_EQ(r[0].ShapeString(), "[2,2]");
  EXPECT_EQ(ToInts(r[0]), (std::vector<int64_t>{6, 8, 4, 3}));
  EXPECT_EQ(ToInts(r[1]), (std::vector<int64_t>{2, 1, 0, 2}));
  r = TopK(F32({2, 3}, {1, 2, 3, 4, 5, 6}), 0, 1, 1);
  EXPECT_EQ(r[0].ShapeString(), "[2,0]");
}

TEST(TopKTest, AttributeKAndErrors) {
  KernelCall legacy("TopK");
  legacy.In(F32({4}, {1, 4, 2, 3})).Attr("k", int64_t{2}).Out(DType::kF32).Out(DType::kI64);
  absl::StatusOr<std::vector<Tensor>> r = legacy.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], {4, 3});
  KernelCall big("TopK");
  big.In(F32({4}, {1, 4, 2, 3})).In(I64({1}, {5})).Out(DType::kF32).Out(DType::kI64);
  absl::Status s = big.Run().status();
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("TopK"));
  KernelCall neg("TopK");
  neg.In(F32({4}, {1, 4, 2, 3})).In(I64({1}, {-1})).Out(DType::kF32).Out(DType::kI64);
  EXPECT_EQ(Code(neg), absl::StatusCode::kInvalidArgument);
  KernelCall two("TopK");
  two.In(F32({4}, {1, 4, 2, 3})).In(I64({2}, {1, 1})).Out(DType::kF32).Out(DType::kI64);
  EXPECT_EQ(Code(two), absl::StatusCode::kInvalidArgument);
}

// ---- Softmax, LogSoftmax, Hardmax ----

Tensor Softmax(const char* op, const Tensor& x, std::optional<int64_t> axis, bool legacy = false) {
  KernelCall call(op);
  call.In(x).Out(x.dtype());
  if (axis) call.Attr("axis", *axis);
  if (legacy) call.Attr("legacy_2d", int64_t{1});
  return Run1(call);
}

// x = [[[1,2,3],[4,5,6]],[[0,-1,2],[3,3,3]]]
Tensor X223() { return F32({2, 2, 3}, {1, 2, 3, 4, 5, 6, 0, -1, 2, 3, 3, 3}); }

TEST(SoftmaxTest, OnnxExamplesAndAxes) {
  // test_softmax_example, test_logsoftmax_example_1
  ExpectNear(Softmax("Softmax", F32({1, 3}, {-1, 0, 1}), std::nullopt),
             {0.09003057330846786, 0.2447284609079361, 0.6652409434318542});
  ExpectNear(Softmax("LogSoftmax", F32({1, 3}, {-1, 0, 1}), std::nullopt),
             {-2.4076061248779297, -1.4076060056686401, -0.40760600566864014});
  // numpy: e = np.exp(x - x.max(axis, keepdims=True)); e / e.sum(axis, keepdims=True)
  ExpectNear(Softmax("Softmax", X223(), 0),
             {0.7310585975646973, 0.9525741338729858, 0.7310585975646973, 0.7310585975646973,
              0.8807970881462097, 0.9525741338729858, 0.2689414322376251, 0.04742587357759476,
              0.2689414322376251, 0.2689414322376251, 0.11920291930437088, 0.04742587357759476});
  ExpectNear(Softmax("Softmax", X223(), -1),
             {0.09003057330846786, 0.2447284758090973, 0.6652409434318542, 0.09003057330846786,
              0.2447284758090973, 0.6652409434318542, 0.11419519782066345, 0.04201006516814232,
              0.8437947630882263, 0.3333333432674408, 0.3333333432674408, 0.3333333432674408});
  // x - x.max(1, keepdims) - log(exp(x - max).sum(1, keepdims))
  ExpectNear(Softmax("LogSoftmax", X223(), 1),
             {-3.0485873222351074, -3.0485873222351074, -3.0485873222351074, -0.04858735203742981,
              -0.04858735203742981, -0.04858735203742981, -3.0485873222351074, -4.0181498527526855,
              -1.31326162815094, -0.04858735203742981, -0.018149927258491516, -0.3132616877555847});
}

TEST(SoftmaxTest, Legacy2dCoercion) {
  // Opset < 13: x coerced to [2, 6] at axis 1: softmax(x.reshape(2, 6), 1).
  std::vector<double> want = {0.004269778728485107, 0.011606461368501186, 0.03154963254928589,
                              0.08576079457998276,  0.23312200605869293,  0.6336913108825684,
                              0.014489908702671528, 0.005330539774149656, 0.10706675052642822,
                              0.29103758931159973,  0.29103758931159973,  0.29103758931159973};
  ExpectNear(Softmax("Softmax", X223(), 1, /*legacy=*/true), want);
  ExpectNear(Softmax("Softmax", X223(), std::nullopt, /*legacy=*/true), want);  // axis 1 default
  // A strided input: transposing a [3,2] gives a non-contiguous [2,3].
  Tensor t = Transposed(F32({3, 2}, {-1, 2, 0, 2, 1, 2}));  // [[-1,0,1],[2,2,2]]
  ExpectNear(Softmax("Softmax", t, 1, true), {0.09003057330846786, 0.2447284609079361,
                                              0.6652409434318542, 1.0 / 3, 1.0 / 3, 1.0 / 3});
}

TEST(SoftmaxTest, HardmaxLargeValuesAndErrors) {
  // test_hardmax_example, test_hardmax_one_hot
  ExpectNear(Softmax("Hardmax", F32({4, 4}, {3, 0, 1, 2, 2, 5, 1, 0, 0, 1, 3, 2, 0, 1, 2, 3}),
                     std::nullopt),
             {1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1, 0, 0, 0, 0, 1});
  ExpectNear(Softmax("Hardmax", F32({1, 4}, {3, 3, 3, 1}), std::nullopt), {1, 0, 0, 0});
  ExpectNear(Softmax("Hardmax", F32({2, 2}, {1, 5, 7, 2}), 0), {0, 1, 1, 0});
  // test_softmax_large_number style: no overflow.
  ExpectNear(Softmax("Softmax", F32({1, 2}, {10000, 10001}), std::nullopt),
             {0.2689414322376251, 0.7310585975646973});
  Tensor h = Make<Half>(DType::kF16, {2}, {Half(0.0f), Half(0.0f)});
  ExpectNear(Softmax("Softmax", h, std::nullopt), {0.5, 0.5}, 0);
  KernelCall axis("Softmax");
  axis.In(F32({2}, {1, 2})).Attr("axis", int64_t{1}).Out(DType::kF32);
  EXPECT_EQ(Code(axis), absl::StatusCode::kInvalidArgument);
  KernelCall ints("Softmax");
  ints.In(I32({2}, {1, 2})).Out(DType::kI32);
  EXPECT_EQ(Code(ints), absl::StatusCode::kUnimplemented);
  KernelCall wrong("LogSoftmax");
  wrong.In(F32({2}, {1, 2})).OutTensor(*Tensor::Empty(DType::kF32, {1, 2}));
  EXPECT_EQ(Code(wrong), absl::StatusCode::kInvalidArgument);
}

// ---- LayerNormalization ----

const std::vector<float> kLnX = {1.764052391052246f,  0.40015721321105957f,  0.978738009929657f,
                                 2.2408931255340576f, 1.8675580024719238f,   -0.9772778749465942f,
                                 0.9500884413719177f, -0.15135720372200012f, -0.10321885347366333f,
                                 0.4105985164642334f, 0.14404356479644775f,  1.4542734622955322f};

TEST(LayerNormTest, OnnxLastAxis) {
  // test_layer_normalization_2d_axis_negative_1
  KernelCall call("LayerNormalization");
  call.In(F32({3, 4}, kLnX))
      .In(F32({4}, {-0.9072983860969543f, 0.05194539576768875f, 0.7290905714035034f,
                    0.12898291647434235f}))
      .In(F32({4}, {1.1394007205963135f, -1.234825849533081f, 0.4023416340351105f,
                    -0.6848101019859314f}))
      .Attr("axis", int64_t{-1})
      .Out(DType::kF32)
      .Out(DType::kF32)
      .Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0], {0.6036290526390076, -1.3042172193527222, 0.024188369512557983,
                       -0.5217753648757935, -0.0761333703994751, -1.302214503288269,
                       0.7590700387954712, -0.7533915042877197, 2.026127338409424,
                       -1.2405911684036255, -0.0062563419342041016, -0.47215139865875244});
  EXPECT_EQ((*r)[1].ShapeString(), "[3,1]");
  ExpectNear((*r)[1], {1.3459601402282715, 0.4222528338432312, 0.4764241576194763});
  ExpectNear((*r)[2], {1.4123992919921875, 0.9269525408744812, 1.686083436012268});
}

TEST(LayerNormTest, OnnxAxis0WithFullScale) {
  // test_layer_normalization_2d_axis0: Scale and B of X's full shape.
  KernelCall call("LayerNormalization");
  call.In(F32({3, 4}, kLnX))
      .In(F32({3, 4}, {0.7610377073287964f, 0.12167501449584961f, 0.44386324286460876f,
                       0.3336743414402008f, 1.4940791130065918f, -0.2051582634449005f,
                       0.3130677044391632f, -0.8540957570075989f, -2.5529897212982178f,
                       0.653618574142456f, 0.8644362092018127f, -0.7421650290489197f}))
      .In(F32({3, 4}, {2.269754648208618f, -1.4543657302856445f, 0.04575851559638977f,
                       -0.18718385696411133f, 1.5327792167663574f, 1.4693588018417358f,
                       0.154947429895401f, 0.37816253304481506f, -0.8877857327461243f,
                       -1.980796456336975f, -0.34791216254234314f, 0.15634897351264954f}))
      .Attr("axis", int64_t{0})
      .Out(DType::kF32)
      .Out(DType::kF32)
      .Out(DType::kF32);
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  ASSERT_TRUE(r.ok()) << r.status();
  ExpectNear((*r)[0],
             {3.107588291168213, -1.5002617835998535, 0.15664911270141602, 0.3525952696800232,
              3.345221519470215, 1.8530023097991943, 0.22344094514846802, 1.210822582244873,
              1.4679415225982666, -2.21994686126709, -0.9139137268066406, -0.41154739260673523});
  EXPECT_EQ((*r)[1].ShapeString(), "[1,1]");
  ExpectNear((*r)[1], {0.7482123970985413});
  ExpectNear((*r)[2], {1.0837430953979492});
}

TEST(LayerNormTest, NoScaleStridedAndErrors) {
  // Rows [1,3] and [2,4] of a transposed view: mean 2 and 3, variance 1, eps 0.
  KernelCall call("LayerNormalization");
  call.In(Transposed(F32({2, 2}, {1, 2, 3, 4}))).Attr("epsilon", 0.0f).Out(DType::kF32);
  ExpectNear(Run1(call), {-1, 1, -1, 1});
  KernelCall bias_only("LayerNormalization");
  bias_only.In(F32({1, 2}, {0, 2})).Absent().In(F32({}, {10})).Attr("epsilon", 0.0f);
  bias_only.Out(DType::kF32);
  ExpectNear(Run1(bias_only), {9, 11});
  KernelCall bad_scale("LayerNormalization");
  bad_scale.In(F32({2, 2}, {1, 2, 3, 4})).In(F32({3}, {1, 1, 1})).Out(DType::kF32);
  EXPECT_EQ(Code(bad_scale), absl::StatusCode::kInvalidArgument);
  KernelCall axis("LayerNormalization");
  axis.In(F32({2, 2}, {1, 2, 3, 4})).Attr("axis", int64_t{2}).Out(DType::kF32);
  EXPECT_EQ(Code(axis), absl::StatusCode::kInvalidArgument);
  KernelCall stash("LayerNormalization");
  stash.In(F32({2}, {1, 2})).Attr("stash_type", int64_t{7}).Out(DType::kF32);
  EXPECT_EQ(Code(stash), absl::StatusCode::kUnimplemented);
}

// ---- CumSum ----

Tensor CumSum(const Tensor& x, const Tensor& axis, int64_t exclusive, int64_t reverse) {
  KernelCall call("CumSum");
  call.In(x).In(axis).Attr("exclusive", exclusive).Attr("reverse", reverse).Out(x.dtype());
  return Run1(call);
}

TEST(CumSumTest, OnnxExamples) {
  Tensor x = Make<double>(DType::kF64, {5}, {1, 2, 3, 4, 5});
  // test_cumsum_1d, _exclusive, _reverse, _reverse_exclusive
  ExpectNear(CumSum(x, I32({}, {0}), 0, 0), {1, 3, 6, 10, 15}, 0);
  ExpectNear(CumSum(x, I32({}, {0}), 1, 0), {0, 1, 3, 6, 10}, 0);
  ExpectNear(CumSum(x, I32({}, {0}), 0, 1), {15, 14, 12, 9, 5}, 0);
  ExpectNear(CumSum(x, I32({}, {0}), 1, 1), {14, 12, 9, 5, 0}, 0);
  // test_cumsum_2d_axis_1, test_cumsum_2d_negative_axis, test_cumsum_2d_axis_0
  Tensor m = Make<double>(DType::kF64, {2, 3}, {1, 2, 3, 4, 5, 6});
  ExpectNear(CumSum(m, I32({}, {1}), 0, 0), {1, 3, 6, 4, 9, 15}, 0);
  ExpectNear(CumSum(m, I64({1}, {-1}), 0, 0), {1, 3, 6, 4, 9, 15}, 0);
  ExpectNear(CumSum(m, I32({}, {0}), 0, 0), {1, 2, 3, 5, 7, 9}, 0);
}

TEST(CumSumTest, IntegersStridesAndErrors) {
  EXPECT_EQ(ToInts(CumSum(I64({4}, {1, -2, 3, 4}), I64({}, {0}), 1, 0)),
            (std::vector<int64_t>{0, 1, -1, 2}));
  // Columns of [[1,2,3],[4,5,6]] via the transposed view [[1,4],[2,5],[3,6]], along axis 0.
  Tensor t = Transposed(I32({2, 3}, {1, 2, 3, 4, 5, 6}));
  EXPECT_EQ(ToInts(CumSum(t, I32({}, {0}), 0, 1)), (std::vector<int64_t>{6, 15, 5, 11, 3, 6}));
  EXPECT_EQ(CumSum(F32({0, 2}, {}), I32({}, {0}), 0, 0).ShapeString(), "[0,2]");
  KernelCall axis("CumSum");
  axis.In(F32({2}, {1, 2})).In(I32({}, {1})).Out(DType::kF32);
  EXPECT_EQ(Code(axis), absl::StatusCode::kInvalidArgument);
  KernelCall axes("CumSum");
  axes.In(F32({2}, {1, 2})).In(I32({2}, {0, 0})).Out(DType::kF32);
  EXPECT_EQ(Code(axes), absl::StatusCode::kInvalidArgument);
  KernelCall ftype("CumSum");
  ftype.In(F32({2}, {1, 2})).In(F32({}, {0})).Out(DType::kF32);
  EXPECT_EQ(Code(ftype), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dynvm
