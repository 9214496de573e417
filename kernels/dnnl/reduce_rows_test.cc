// The oneDNN backend's row and column loops for reductions (reduce.cc) against the reference
// kernel: every op they serve, row lengths around the 16 lanes, innermost, middle and leading
// axes, axes as attribute and input, keepdims both ways, NaN, and a reduction over two blocks
// of axes (the primitive) alongside.
#include <cmath>
#include <random>

#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using testing::KernelCall;

Tensor Random(std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-2, 2);
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

void Compare(const std::string& op, const Tensor& x, std::vector<int64_t> axes, int64_t keepdims,
             bool axes_as_input) {
  SCOPED_TRACE(op + " " + x.DebugString() + " axes " + DimsString(axes) + " keepdims " +
               std::to_string(keepdims) + (axes_as_input ? " (input)" : ""));
  std::vector<std::vector<Tensor>> results;
  for (const char* backend : {"dnnl", "reference"}) {
    KernelCall call(op);
    call.In(x).Backend(backend).Attr("keepdims", keepdims).Out(DType::kF32);
    if (axes_as_input) {
      call.In(testing::I64({static_cast<int64_t>(axes.size())}, axes));
    } else {
      call.Attr("axes", axes);
    }
    absl::StatusOr<std::vector<Tensor>> r = call.Run();
    ASSERT_TRUE(r.ok()) << r.status();
    results.push_back(*std::move(r));
  }
  ASSERT_EQ(results[0][0].dims(), results[1][0].dims());
  std::vector<double> got = testing::ToDoubles(results[0][0]);
  std::vector<double> want = testing::ToDoubles(results[1][0]);
  for (size_t i = 0; i < got.size(); ++i) {
    if (std::isnan(want[i])) {
      EXPECT_TRUE(std::isnan(got[i])) << i;
    } else {
      EXPECT_NEAR(got[i], want[i], 2e-5 * (1 + std::fabs(want[i]))) << i;
    }
  }
}

TEST(ReduceRowsTest, MatchesTheReferenceKernel) {
  for (const char* op :
       {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceL2", "ReduceSumSquare"}) {
    for (int64_t n : {1, 15, 16, 17, 100, 1000}) {
      Tensor x = Random({3, 2, n}, static_cast<uint32_t>(n));
      const bool input_axes = std::string(op) == "ReduceSum";  // opset 13's form
      Compare(op, x, {-1}, 1, input_axes);
      Compare(op, x, {2}, 0, input_axes);
      Compare(op, x, {1, 2}, 1, input_axes);  // two trailing axes
      Compare(op, x, {1}, 1, input_axes);     // a middle axis: the column loop
      Compare(op, x, {0, 1}, 0, input_axes);  // leading axes: the column loop
      Compare(op, x, {0, 2}, 1, input_axes);  // two blocks: the primitive
    }
  }
}

TEST(ReduceRowsTest, NaNPropagates) {
  Tensor x = Random({4, 33}, 3);
  x.data<float>()[40] = NAN;
  for (const char* op : {"ReduceSum", "ReduceMax", "ReduceMin", "ReduceMean"}) {
    Compare(op, x, {-1}, 1, std::string(op) == "ReduceSum");
    Compare(op, x, {0}, 1, std::string(op) == "ReduceSum");
  }
}

}  // namespace
}  // namespace dynvm
