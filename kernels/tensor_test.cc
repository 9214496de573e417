#include "kernels/tensor.h"

#include "allocator/heap_allocator.h"
#include "common/half.h"
#include "gtest/gtest.h"

namespace dynvm {
namespace {

TEST(TensorTest, ContiguousAllocation) {
  absl::StatusOr<Tensor> t = Tensor::Empty(DType::kF32, {2, 3});
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->numel(), 6);
  EXPECT_EQ(t->stride(0), 3);
  EXPECT_EQ(t->stride(1), 1);
  EXPECT_TRUE(t->is_contiguous());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t->raw_data()) % kTensorAlignment, 0u);
  EXPECT_EQ(t->DebugString(), "f32[2,3]");
}

TEST(TensorTest, ViewMustFitItsStorage) {
  Tensor base = *Tensor::Empty(DType::kF32, {4, 4});
  EXPECT_TRUE(Tensor::View(base.storage(), 0, DType::kF32, {4, 4}).ok());
  EXPECT_TRUE(Tensor::View(base.storage(), 16, DType::kF32, {3, 4}).ok());
  EXPECT_FALSE(Tensor::View(base.storage(), 16, DType::kF32, {4, 4}).ok());
  EXPECT_FALSE(Tensor::View(base.storage(), -4, DType::kF32, {1}).ok());
  // Transposed view: strides (1, 4).
  absl::StatusOr<Tensor> tr = Tensor::View(base.storage(), 0, DType::kF32, {4, 4}, {1, 4});
  ASSERT_TRUE(tr.ok());
  EXPECT_FALSE(tr->is_contiguous());
  // Negative stride reaching below the start is refused.
  EXPECT_FALSE(Tensor::View(base.storage(), 0, DType::kF32, {2}, {-1}).ok());
  EXPECT_TRUE(Tensor::View(base.storage(), 4, DType::kF32, {2}, {-1}).ok());
}

TEST(TensorTest, OverflowingSizesAreErrors) {
  EXPECT_FALSE(Tensor::Empty(DType::kF32, {int64_t{1} << 40, int64_t{1} << 40}).ok());
  EXPECT_FALSE(Tensor::Empty(DType::kF64, {int64_t{1} << 61}).ok());
  EXPECT_FALSE(Tensor::Empty(DType::kF32, {-1}).ok());
  Tensor base = *Tensor::Empty(DType::kF32, {4});
  EXPECT_FALSE(Tensor::View(base.storage(), 0, DType::kF32, {2}, {int64_t{1} << 62}).ok());
}

TEST(TensorTest, StorageLivesAsLongAsAView) {
  Tensor view;
  {
    Tensor base = *Tensor::Empty(DType::kI64, {8});
    for (int i = 0; i < 8; ++i) base.data<int64_t>()[i] = i;
    view = *Tensor::View(base.storage(), 32, DType::kI64, {4});
    EXPECT_EQ(base.storage()->ref_count(), 2);
  }
  EXPECT_EQ(view.storage()->ref_count(), 1);
  EXPECT_EQ(view.data<int64_t>()[0], 4);
  EXPECT_EQ(view.data<int64_t>()[3], 7);
}

TEST(HalfTest, RoundTripsAndRounds) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(static_cast<float>(Half(f)), f) << f;
  }
  EXPECT_EQ(Half(1.0f).bits, 0x3C00);
  EXPECT_EQ(Half(65520.0f).bits, 0x7C00);            // rounds to infinity
  EXPECT_EQ(Half(1.0f + 1.0f / 2048).bits, 0x3C00);  // tie rounds to even
  EXPECT_EQ(BFloat16(1.0f).bits, 0x3F80);
  EXPECT_EQ(static_cast<float>(BFloat16(3.0f)), 3.0f);
  EXPECT_TRUE(std::isnan(static_cast<float>(BFloat16(std::nanf("")))));
  EXPECT_TRUE(std::isnan(static_cast<float>(Half(std::nanf("")))));
}

}  // namespace
}  // namespace dynvm
