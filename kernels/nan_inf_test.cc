// NaN and infinity flow through every kernel family without a crash and with IEEE results;
// ordering ops (ArgMax, ArgMin, TopK, Sample) use a total order in which NaN is the largest
// value (NaN breaks std::sort's strict weak ordering, which would be undefined behaviour).
#include <cmath>
#include <limits>

#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using testing::F32;
using testing::I64;
using testing::KernelCall;
using testing::ToDoubles;
using testing::ToInts;

// Each test runs with the reference kernels only, and with the best backend of this build.
class NanInfTest : public ::testing::TestWithParam<std::string> {
 protected:
  KernelCall Call(const std::string& op, const std::string& domain = "") {
    KernelCall c(op, domain);
    if (GetParam() == "reference") c.Backend("reference");
    return c;
  }
  std::vector<double> Unary(const std::string& op);
};

const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

Tensor Special() { return F32({2, 3}, {kNaN, 1.0f, -kInf, kInf, -2.0f, 0.0f}); }

std::vector<double> NanInfTest::Unary(const std::string& op) {
  absl::StatusOr<std::vector<Tensor>> r = Call(op).In(Special()).Out(DType::kF32).Run();
  EXPECT_TRUE(r.ok()) << op << ": " << r.status();
  return r.ok() ? ToDoubles((*r)[0]) : std::vector<double>(6, 0.0);
}

TEST_P(NanInfTest, UnaryOpsFollowIeee) {
  for (const char* op :
       {"Sqrt",      "Exp",   "Log",  "Neg",   "Abs",         "Erf",        "Tanh",     "Sigmoid",
        "Relu",      "Floor", "Ceil", "Round", "Sign",        "Reciprocal", "Softplus", "Softsign",
        "LeakyRelu", "Elu",   "Selu", "Celu",  "HardSigmoid", "HardSwish",  "Identity"}) {
    std::vector<double> y = Unary(op);
    EXPECT_TRUE(std::isnan(y[0])) << op << " of NaN should be NaN, got " << y[0];
  }
  EXPECT_EQ(Unary("Tanh")[3], 1.0);
  EXPECT_EQ(Unary("Tanh")[2], -1.0);
  EXPECT_EQ(Unary("Sigmoid")[3], 1.0);
  EXPECT_EQ(Unary("Sigmoid")[2], 0.0);
  EXPECT_EQ(Unary("Exp")[2], 0.0);
  EXPECT_TRUE(std::isinf(Unary("Exp")[3]));
  EXPECT_EQ(Unary("Relu")[2], 0.0);
  EXPECT_TRUE(std::isinf(Unary("Relu")[3]));
}

TEST_P(NanInfTest, BinaryAndReductionsPropagate) {
  absl::StatusOr<std::vector<Tensor>> add =
      Call("Add").In(Special()).In(Special()).Out(DType::kF32).Run();
  ASSERT_TRUE(add.ok()) << add.status();
  std::vector<double> a = ToDoubles((*add)[0]);
  EXPECT_TRUE(std::isnan(a[0]));
  EXPECT_TRUE(std::isinf(a[3]) && a[3] > 0);
  absl::StatusOr<std::vector<Tensor>> sub =
      Call("Sub").In(Special()).In(Special()).Out(DType::kF32).Run();
  ASSERT_TRUE(sub.ok());
  EXPECT_TRUE(std::isnan(ToDoubles((*sub)[0])[3]));  // inf - inf
  for (const char* op : {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd",
                         "ReduceLogSumExp", "ReduceSumSquare", "ReduceL1", "ReduceL2"}) {
    absl::StatusOr<std::vector<Tensor>> r = Call(op)
                                                .In(Special())
                                                .Attr("axes", std::vector<int64_t>{1})
                                                .Attr("keepdims", int64_t{0})
                                                .Out(DType::kF32)
                                                .Run();
    ASSERT_TRUE(r.ok()) << op << ": " << r.status();
    EXPECT_TRUE(std::isnan(ToDoubles((*r)[0])[0])) << op << " of a row with NaN";
  }
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    absl::StatusOr<std::vector<Tensor>> r =
        Call(op).In(Special()).Attr("axis", int64_t{-1}).Out(DType::kF32).Run();
    ASSERT_TRUE(r.ok()) << op << ": " << r.status();
    EXPECT_TRUE(std::isnan(ToDoubles((*r)[0])[0])) << op;
  }
  absl::StatusOr<std::vector<Tensor>> mm =
      Call("MatMul").In(Special()).In(F32({3, 2}, {1, 0, 0, 1, 1, 1})).Out(DType::kF32).Run();
  ASSERT_TRUE(mm.ok()) << mm.status();
  EXPECT_TRUE(std::isnan(ToDoubles((*mm)[0])[0]));
}

TEST_P(NanInfTest, OrderingUsesATotalOrderWithNanLargest) {
  absl::StatusOr<std::vector<Tensor>> amax = Call("ArgMax")
                                                 .In(Special())
                                                 .Attr("axis", int64_t{1})
                                                 .Attr("keepdims", int64_t{0})
                                                 .Out(DType::kI64)
                                                 .Run();
  ASSERT_TRUE(amax.ok()) << amax.status();
  EXPECT_EQ(ToInts((*amax)[0]), (std::vector<int64_t>{0, 0}));  // NaN, then +inf
  absl::StatusOr<std::vector<Tensor>> amin = Call("ArgMin")
                                                 .In(Special())
                                                 .Attr("axis", int64_t{1})
                                                 .Attr("keepdims", int64_t{0})
                                                 .Out(DType::kI64)
                                                 .Run();
  ASSERT_TRUE(amin.ok()) << amin.status();
  EXPECT_EQ(ToInts((*amin)[0]), (std::vector<int64_t>{2, 1}));  // -inf, then -2
  // TopK over many NaNs and infinities: sorting must stay well defined.
  std::vector<float> v;
  for (int i = 0; i < 64; ++i)
    v.push_back(i % 3 == 0 ? kNaN : i % 3 == 1 ? kInf : -static_cast<float>(i));
  absl::StatusOr<std::vector<Tensor>> topk = Call("TopK")
                                                 .In(F32({64}, v))
                                                 .In(I64({1}, {30}))
                                                 .Attr("axis", int64_t{0})
                                                 .Out(DType::kF32)
                                                 .Out(DType::kI64)
                                                 .Run();
  ASSERT_TRUE(topk.ok()) << topk.status();
  std::vector<double> top = ToDoubles((*topk)[0]);
  for (int i = 0; i < 22; ++i) EXPECT_TRUE(std::isnan(top[i])) << i;  // the 22 NaNs come first
  for (int i = 22; i < 30; ++i) EXPECT_TRUE(std::isinf(top[i]) && top[i] > 0) << i;
  // Sampling a row with NaN is decided greedily, never out of range.
  absl::StatusOr<std::vector<Tensor>> s = Call("Sample", "dynvm")
                                              .In(Special())
                                              .In(Tensor::Scalar(1.0f))
                                              .In(Tensor::ScalarI64(1))
                                              .In(Tensor::ScalarI64(0))
                                              .Out(DType::kI64)
                                              .Run();
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(ToInts((*s)[0]), (std::vector<int64_t>{0, 0}));
}

TEST_P(NanInfTest, RecurrentCellsDoNotCrash) {
  // An LSTM over inputs with NaN and infinity: the outputs are NaN or bounded, never a crash.
  Tensor x = F32({1, 1, 2}, {kNaN, kInf});
  Tensor w = F32({1, 4, 2}, std::vector<float>(8, 0.5f));
  Tensor r = F32({1, 4, 1}, std::vector<float>(4, 0.5f));
  absl::StatusOr<std::vector<Tensor>> y = Call("LSTM")
                                              .In(x)
                                              .In(w)
                                              .In(r)
                                              .Attr("hidden_size", int64_t{1})
                                              .Out(DType::kF32)
                                              .Out(DType::kF32)
                                              .Out(DType::kF32)
                                              .Run();
  ASSERT_TRUE(y.ok()) << y.status();
  EXPECT_TRUE(std::isnan(ToDoubles((*y)[0])[0]));
}

TEST_P(NanInfTest, CastsOfNanAndInfinityAreDefined) {
  // Float to integer casts saturate and map NaN to 0 instead of being undefined behaviour.
  absl::StatusOr<std::vector<Tensor>> c =
      Call("Cast").In(Special()).Attr("to", int64_t{7}).Out(DType::kI64).Run();
  ASSERT_TRUE(c.ok()) << c.status();
  std::vector<int64_t> v = ToInts((*c)[0]);
  EXPECT_EQ(v[0], 0);
  EXPECT_EQ(v[2], std::numeric_limits<int64_t>::min());
  EXPECT_EQ(v[3], std::numeric_limits<int64_t>::max());
}

INSTANTIATE_TEST_SUITE_P(Backends, NanInfTest, ::testing::Values("reference", "best"),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

}  // namespace
}  // namespace dynvm
