// Tests of the reference window, Det and quantization kernels against hand-computed values.
#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

using ::dynvm::testing::F32;
using ::dynvm::testing::I64;
using ::dynvm::testing::KernelCall;
using ::dynvm::testing::Make;
using ::dynvm::testing::ToDoubles;
using ::dynvm::testing::ToInts;
using ::testing::DoubleNear;
using ::testing::Pointwise;

std::vector<Tensor> RunCall(KernelCall& call) {
  absl::StatusOr<std::vector<Tensor>> r = call.Run();
  EXPECT_TRUE(r.ok()) << r.status();
  return r.ok() ? *r : std::vector<Tensor>{Tensor(), Tensor(), Tensor()};
}

TEST(MiscKernelTest, Windows) {
  // Periodic Hann of 4: 0.5 - 0.5 cos(pi n / 2) = 0, 0.5, 1, 0.5.
  KernelCall hann("HannWindow");
  hann.In(I64({}, {4})).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(hann)[0]), Pointwise(DoubleNear(1e-6), {0.0, 0.5, 1.0, 0.5}));
  // Symmetric Hamming of 3 (period 2): 25/46 - 21/46 cos(pi n) = 4/46, 1, 4/46.
  KernelCall hamming("HammingWindow");
  hamming.In(I64({}, {3})).Attr("periodic", int64_t{0}).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(hamming)[0]),
              Pointwise(DoubleNear(1e-6), {4.0 / 46, 1.0, 4.0 / 46}));
  // Symmetric Blackman of 3: 0.42 - 0.5 + 0.08 = 0 at the ends, 0.42 + 0.5 + 0.08 = 1 inside.
  KernelCall blackman("BlackmanWindow");
  blackman.In(I64({}, {3})).Attr("periodic", int64_t{0}).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(blackman)[0]), Pointwise(DoubleNear(1e-6), {0.0, 1.0, 0.0}));
}

TEST(MiscKernelTest, Determinants) {
  KernelCall det("Det");
  // det [[1, 2], [3, 4]] = -2; det [[0, 1], [1, 0]] = -1 (needs a row swap); singular = 0.
  det.In(F32({3, 2, 2}, {1, 2, 3, 4, 0, 1, 1, 0, 1, 2, 2, 4})).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(det)[0]), Pointwise(DoubleNear(1e-6), {-2.0, -1.0, 0.0}));
  KernelCall three("Det");
  three.In(F32({3, 3}, {2, 0, 0, 0, 3, 0, 0, 0, 4})).Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(three)[0]), Pointwise(DoubleNear(1e-6), {24.0}));
}

TEST(MiscKernelTest, Quantization) {
  // x / 2 + 128, rounded half to even and saturated: 0 -> 128, 3 -> 129.5 -> 130,
  // 5 -> 130.5 -> 130, -1000 -> 0, 1000 -> 255.
  KernelCall q("QuantizeLinear");
  q.In(F32({5}, {0, 3, 5, -1000, 1000}))
      .In(F32({}, {2}))
      .In(Make<uint8_t>(DType::kU8, {}, {128}))
      .Out(DType::kU8);
  EXPECT_EQ(ToInts(RunCall(q)[0]), (std::vector<int64_t>{128, 130, 130, 0, 255}));
  // Per channel along axis 1: scales 1 and 10, zero points 0 and -1 (i8).
  KernelCall qa("QuantizeLinear");
  qa.In(F32({1, 2, 2}, {1, 2, 10, 20}))
      .In(F32({2}, {1, 10}))
      .In(Make<int8_t>(DType::kI8, {2}, {0, -1}));
  qa.Out(DType::kI8);
  EXPECT_EQ(ToInts(RunCall(qa)[0]), (std::vector<int64_t>{1, 2, 0, 1}));
  KernelCall dq("DequantizeLinear");
  dq.In(Make<uint8_t>(DType::kU8, {3}, {0, 128, 255}))
      .In(F32({}, {0.5f}))
      .In(Make<uint8_t>(DType::kU8, {}, {128}));
  dq.Out(DType::kF32);
  EXPECT_THAT(ToDoubles(RunCall(dq)[0]), Pointwise(DoubleNear(1e-6), {-64.0, 0.0, 63.5}));
  // Dynamic: range [-1, 2] -> scale 3/255, zero point round(1 / (3/255)) = 85.
  KernelCall dyn("DynamicQuantizeLinear");
  dyn.In(F32({3}, {-1, 0, 2})).Out(DType::kU8).Out(DType::kF32).Out(DType::kU8);
  const std::vector<Tensor> d = RunCall(dyn);
  EXPECT_THAT(ToDoubles(d[1]), Pointwise(DoubleNear(1e-7), {3.0 / 255}));
  EXPECT_EQ(ToInts(d[2]), (std::vector<int64_t>{85}));
  EXPECT_EQ(ToInts(d[0]), (std::vector<int64_t>{0, 85, 255}));
}

TEST(MiscKernelTest, NonMaxSuppression) {
  // Three boxes of one class: box 1 overlaps box 0 (IoU 0.9 / 1.1 = 0.82), box 2 does not.
  const Tensor boxes = F32({1, 3, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 5, 1, 6});
  const Tensor scores = F32({1, 1, 3}, {0.9f, 0.95f, 0.5f});
  KernelCall nms("NonMaxSuppression");
  nms.In(boxes).In(scores).In(I64({}, {3})).In(F32({}, {0.5f})).Out(DType::kI64);
  // Box 1 scores highest and suppresses box 0; box 2 stays.
  EXPECT_EQ(ToInts(RunCall(nms)[0]), (std::vector<int64_t>{0, 0, 1, 0, 0, 2}));
  KernelCall limited("NonMaxSuppression");
  limited.In(boxes).In(scores).In(I64({}, {1})).In(F32({}, {0.5f})).Out(DType::kI64);
  EXPECT_EQ(ToInts(RunCall(limited)[0]), (std::vector<int64_t>{0, 0, 1}));
  KernelCall thresholded("NonMaxSuppression");
  thresholded.In(boxes)
      .In(scores)
      .In(I64({}, {3}))
      .In(F32({}, {0.9f}))
      .In(F32({}, {0.6f}))
      .Out(DType::kI64);
  // An IoU threshold above 0.82 keeps box 0; the score threshold drops box 2.
  EXPECT_EQ(ToInts(RunCall(thresholded)[0]), (std::vector<int64_t>{0, 0, 1, 0, 0, 0}));
}

// max_output_boxes_per_class = INT64_MAX, PyTorch's "no limit" in its export of
// torchvision.ops.nms: every box NMS keeps is selected. Read through a double it rounded to 2^63,
// converted back to INT64_MIN, and no box was kept (a detector returned nothing, silently).
TEST(MiscKernelTest, NonMaxSuppressionWithoutALimitKeepsEveryBox) {
  const Tensor boxes = F32({1, 3, 4}, {0, 0, 1, 1, 0, 0.1f, 1, 1.1f, 0, 5, 1, 6});
  const Tensor scores = F32({1, 1, 3}, {0.9f, 0.95f, 0.5f});
  for (int64_t limit : {std::numeric_limits<int64_t>::max(), int64_t{1} << 53,
                        (int64_t{1} << 53) + 1, int64_t{2}}) {
    KernelCall nms("NonMaxSuppression");
    nms.In(boxes).In(scores).In(I64({}, {limit})).In(F32({}, {0.5f})).Out(DType::kI64);
    EXPECT_EQ(ToInts(RunCall(nms)[0]), (std::vector<int64_t>{0, 0, 1, 0, 0, 2})) << limit;
  }
  // 0 and negative limits select nothing, as in ONNX Runtime.
  for (int64_t limit : {int64_t{0}, int64_t{-1}, std::numeric_limits<int64_t>::min()}) {
    KernelCall nms("NonMaxSuppression");
    nms.In(boxes).In(scores).In(I64({}, {limit})).In(F32({}, {0.5f})).Out(DType::kI64);
    EXPECT_TRUE(ToInts(RunCall(nms)[0]).empty()) << limit;
  }
}

TEST(MiscKernelTest, Unique) {
  // [2, 1, 2, 3, 1]: sorted [1, 2, 3]; first indices [1, 0, 3]; inverse [1, 0, 1, 2, 0];
  // counts [2, 2, 1]. Unsorted: [2, 1, 3].
  KernelCall sorted("Unique");
  sorted.In(F32({5}, {2, 1, 2, 3, 1}))
      .Out(DType::kF32)
      .Out(DType::kI64)
      .Out(DType::kI64)
      .Out(DType::kI64);
  const std::vector<Tensor> s = RunCall(sorted);
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(ToDoubles(s[0]), (std::vector<double>{1, 2, 3}));
  EXPECT_EQ(ToInts(s[1]), (std::vector<int64_t>{1, 0, 3}));
  EXPECT_EQ(ToInts(s[2]), (std::vector<int64_t>{1, 0, 1, 2, 0}));
  EXPECT_EQ(ToInts(s[3]), (std::vector<int64_t>{2, 2, 1}));
  KernelCall unsorted("Unique");
  unsorted.In(F32({5}, {2, 1, 2, 3, 1})).Attr("sorted", int64_t{0}).Out(DType::kF32);
  EXPECT_EQ(ToDoubles(RunCall(unsorted)[0]), (std::vector<double>{2, 1, 3}));
  // Rows of [[1, 2], [0, 5], [1, 2]] along axis 0: [[0, 5], [1, 2]].
  KernelCall rows("Unique");
  rows.In(I64({3, 2}, {1, 2, 0, 5, 1, 2})).Attr("axis", int64_t{0}).Out(DType::kI64);
  const Tensor y = RunCall(rows)[0];
  EXPECT_EQ(std::vector<int64_t>(y.dims().begin(), y.dims().end()), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(ToInts(y), (std::vector<int64_t>{0, 5, 1, 2}));
}

TEST(MiscKernelTest, Einsum) {
  auto einsum = [](const std::string& eq, std::vector<Tensor> ins) {
    KernelCall call("Einsum");
    for (const Tensor& t : ins) call.In(t);
    call.Attr("equation", eq).Out(DType::kF32);
    return ToDoubles(RunCall(call)[0]);
  };
  const Tensor m = F32({2, 2}, {1, 2, 3, 4});
  EXPECT_EQ(einsum("ij,jk->ik", {m, m}), (std::vector<double>{7, 10, 15, 22}));  // matmul
  EXPECT_EQ(einsum("ij->ji", {m}), (std::vector<double>{1, 3, 2, 4}));           // transpose
  EXPECT_EQ(einsum("ii", {m}), (std::vector<double>{5}));                        // trace (implicit)
  EXPECT_EQ(einsum("...ii->...i", {m}), (std::vector<double>{1, 4}));            // diagonal
  EXPECT_EQ(einsum("i,i", {F32({3}, {1, 2, 3}), F32({3}, {4, 5, 6})}), (std::vector<double>{32}));
  KernelCall bad("Einsum");
  bad.In(m).Attr("equation", std::string("ijk->i")).Out(DType::kF32);
  EXPECT_EQ(bad.Run().status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dynvm
