// The oneDNN Resize against the reference kernel (the oracle): every mode/transform pair it takes,
// given scales or sizes, 1-3 spatial dims, odd sizes; each must be served by oneDNN (no
// reference run). The runs it leaves to the reference kernel (non-whole nearest factors, a
// scale its output size does not match, non-finite input under linear) must still match.
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/dnnl/common.h"
#include "kernels/kernel_tester.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;
using testing::KernelTester;

Tensor Random(const std::vector<int64_t>& dims, uint32_t seed) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

struct Case {
  std::string mode, transform, nearest;
  std::vector<int64_t> in;
  std::vector<float> scales;   // empty: sizes
  std::vector<int64_t> sizes;  // empty: scales
};

// Compares with the reference kernel; returns the dnnl kernel's reference runs over two runs.
int64_t CheckCase(const Case& c, const Tensor& x) {
  SCOPED_TRACE(c.mode + " " + c.transform + " " + c.nearest);
  KernelTester t("Resize");
  KernelCall call("Resize");
  const Tensor roi = *Tensor::Empty(DType::kF32, {0});
  Tensor scales = c.scales.empty()
                      ? *Tensor::Empty(DType::kF32, {0})
                      : *Tensor::FromVector<float>(
                            DType::kF32, {static_cast<int64_t>(c.scales.size())}, c.scales);
  t.In(x).In(roi).In(scales);
  call.In(x).In(roi).In(scales);
  if (!c.sizes.empty()) {
    Tensor sizes =
        *Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(c.sizes.size())}, c.sizes);
    t.In(sizes);
    call.In(sizes);
  }
  t.Out(DType::kF32).Tol(1e-5, 1e-5);
  call.Out(DType::kF32);
  t.Attr("mode", c.mode);
  t.Attr("coordinate_transformation_mode", c.transform);
  t.Attr("nearest_mode", c.nearest);
  call.Attr("mode", c.mode);
  call.Attr("coordinate_transformation_mode", c.transform);
  call.Attr("nearest_mode", c.nearest);
  absl::Status s = t.Compare("dnnl");
  EXPECT_TRUE(s.ok()) << s;
  EXPECT_NE(t.kernel_name().find(".dnnl"), std::string::npos) << t.kernel_name();
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  EXPECT_TRUE(k.ok()) << k.status();
  if (!k.ok()) return -1;
  const auto* dk = dynamic_cast<const DnnlKernel*>(k->get());
  EXPECT_NE(dk, nullptr);
  if (dk == nullptr) return -1;
  KernelContext ctx(&HeapAllocator::Get(), 1);
  std::vector<const Tensor*> in = {&x, &roi, &scales};
  Tensor sizes;
  if (!c.sizes.empty()) {
    sizes =
        *Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(c.sizes.size())}, c.sizes);
    in.push_back(&sizes);
  }
  for (int run = 0; run < 2; ++run) {
    Tensor y;
    Tensor* outs[] = {&y};
    absl::Status r = (*k)->Run(ctx, in, outs);
    EXPECT_TRUE(r.ok()) << r;
  }
  return dk->fallback_runs();
}

TEST(DnnlResize, TakenCasesMatchReferenceAndRunOnOneDnn) {
  uint32_t seed = 1;
  std::vector<Case> cases;
  for (const char* t : {"half_pixel", "pytorch_half_pixel"}) {
    // Linear: up, down, non-integer ratios, given as sizes or as exact scales; 1-3 spatial dims.
    cases.push_back({"linear", t, "round_prefer_floor", {2, 3, 5, 7}, {}, {2, 3, 10, 21}});
    cases.push_back({"linear", t, "round_prefer_floor", {1, 2, 9, 6}, {}, {1, 2, 4, 5}});
    cases.push_back({"linear", t, "round_prefer_floor", {1, 4, 6, 8}, {1, 1, 1.5f, 0.5f}, {}});
    cases.push_back({"linear", t, "round_prefer_floor", {2, 3, 11}, {}, {2, 3, 17}});
    cases.push_back({"linear", t, "round_prefer_floor", {1, 2, 3, 4, 5}, {1, 1, 2, 2, 2}, {}});
    for (const char* n : {"round_prefer_floor", "round_prefer_ceil"}) {
      cases.push_back({"nearest", t, n, {2, 3, 5, 7}, {1, 1, 2, 3}, {}});
      cases.push_back({"nearest", t, n, {1, 2, 4, 3}, {}, {1, 2, 16, 3}});
    }
  }
  cases.push_back({"nearest", "asymmetric", "floor", {2, 3, 5, 7}, {1, 1, 2, 2}, {}});
  cases.push_back({"nearest", "asymmetric", "floor", {1, 1, 3}, {}, {1, 1, 15}});
  cases.push_back(
      {"nearest", "tf_half_pixel_for_nn", "floor", {1, 2, 3, 5, 2}, {1, 1, 3, 1, 4}, {}});
  for (const Case& c : cases) {
    EXPECT_EQ(CheckCase(c, Random(c.in, seed++)), 0);
  }
}

// Nearest upsampling by whole factors runs dynvm's copy loop: a PaddleOCR FPN level (2x2) and a
// 3D case (factors 2, 1, 3) at 1 and 2 threads equal y[..., o] = x[..., o / k] exactly.
TEST(DnnlResize, NearestWholeFactorsAtOneAndTwoThreads) {
  uint32_t seed = 40;
  for (const auto& [in, factors] :
       {std::pair<std::vector<int64_t>, std::vector<int64_t>>{{1, 96, 60, 92}, {2, 2}},
        {{2, 3, 4, 5, 6}, {2, 1, 3}}}) {
    const Tensor x = Random(in, seed++);
    std::vector<float> scales = {1, 1};
    std::vector<int64_t> out = {in[0], in[1]};
    for (size_t i = 0; i < factors.size(); ++i) {
      scales.push_back(static_cast<float>(factors[i]));
      out.push_back(in[i + 2] * factors[i]);
    }
    const Tensor roi = *Tensor::Empty(DType::kF32, {0});
    const Tensor sc =
        *Tensor::FromVector<float>(DType::kF32, {static_cast<int64_t>(scales.size())}, scales);
    KernelCall call("Resize");
    call.In(x).In(roi).In(sc).Out(DType::kF32);
    call.Attr("mode", std::string("nearest"));
    call.Attr("coordinate_transformation_mode", std::string("asymmetric"));
    call.Attr("nearest_mode", std::string("floor"));
    KernelSpec spec = call.spec();
    spec.backend = "dnnl";
    std::unique_ptr<Kernel> k = *KernelRegistry::Global().Create(spec);
    std::vector<const Tensor*> ins = {&x, &roi, &sc};
    for (int threads : {1, 2}) {
      KernelContext ctx(&HeapAllocator::Get(), threads);
      Tensor y;
      Tensor* outs[] = {&y};
      ASSERT_TRUE(k->Run(ctx, ins, outs).ok());
      ASSERT_EQ(y.numel(), x.numel() * (y.rank() == 4 ? 4 : 6));
      const int sp = static_cast<int>(factors.size());
      for (int64_t e = 0; e < y.numel(); ++e) {
        int64_t rem = e, src = 0, stride = 1;
        std::vector<int64_t> idx(out.size());
        for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
          idx[d] = rem % out[d];
          rem /= out[d];
        }
        for (int d = static_cast<int>(out.size()) - 1; d >= 0; --d) {
          const int64_t k_d = d >= 2 ? factors[d - 2] : 1;
          src += idx[d] / k_d * stride;
          stride *= in[d];
        }
        ASSERT_EQ(y.data<float>()[e], x.data<float>()[src])
            << sp << "D, " << threads << " threads, element " << e;
      }
    }
  }
}

TEST(DnnlResize, OtherRunsFallBackToTheReferenceAndStillMatch) {
  uint32_t seed = 100;
  // Nearest by a non-whole factor, or downsampling.
  EXPECT_EQ(
      CheckCase({"nearest", "half_pixel", "round_prefer_floor", {1, 2, 4, 6}, {}, {1, 2, 6, 9}},
                Random({1, 2, 4, 6}, seed++)),
      2);
  EXPECT_EQ(CheckCase({"nearest", "asymmetric", "floor", {1, 2, 8, 6}, {1, 1, 0.5f, 0.5f}, {}},
                      Random({1, 2, 8, 6}, seed++)),
            2);
  // A scale whose product with the input size is not whole: ONNX's ratio differs from oneDNN's.
  EXPECT_EQ(
      CheckCase(
          {"linear", "half_pixel", "round_prefer_floor", {1, 2, 5, 5}, {1, 1, 1.7f, 1.7f}, {}},
          Random({1, 2, 5, 5}, seed++)),
      2);
  // pytorch_half_pixel to an output of size 1.
  EXPECT_EQ(
      CheckCase(
          {"linear", "pytorch_half_pixel", "round_prefer_floor", {1, 2, 5, 5}, {}, {1, 2, 1, 3}},
          Random({1, 2, 5, 5}, seed++)),
      2);
  // Linear over a NaN and an infinity.
  Tensor x = Random({1, 1, 4, 4}, seed++);
  x.data<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  x.data<float>()[10] = std::numeric_limits<float>::infinity();
  EXPECT_EQ(
      CheckCase({"linear", "half_pixel", "round_prefer_floor", {1, 1, 4, 4}, {1, 1, 2, 2}, {}}, x),
      2);
}

TEST(DnnlResize, ModesOneDnnComputesDifferentlyAreRefusedAtCreate) {
  for (auto [mode, transform, nearest] : {std::tuple<std::string, std::string, std::string>{
                                              "cubic", "half_pixel", "round_prefer_floor"},
                                          {"linear", "align_corners", "round_prefer_floor"},
                                          {"linear", "asymmetric", "round_prefer_floor"},
                                          {"nearest", "asymmetric", "round_prefer_floor"},
                                          {"nearest", "half_pixel", "floor"},
                                          {"linear", "tf_crop_and_resize", "round_prefer_floor"}}) {
    KernelCall call("Resize");
    call.In(Random({1, 1, 4, 4}, 1))
        .Absent()
        .In(*Tensor::FromVector<float>(DType::kF32, {4}, {1, 1, 2, 2}));
    call.Attr("mode", mode)
        .Attr("coordinate_transformation_mode", transform)
        .Attr("nearest_mode", nearest);
    call.Out(DType::kF32);
    KernelSpec spec = call.spec();
    spec.backend = "dnnl";
    absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
    EXPECT_TRUE(absl::IsUnimplemented(k.status())) << mode << " " << transform << " " << nearest;
    // Without a backend preference the reference kernel serves it.
    spec.backend.clear();
    k = KernelRegistry::Global().Create(spec);
    ASSERT_TRUE(k.ok()) << k.status();
    EXPECT_EQ((*k)->name().find(".dnnl"), std::string::npos) << (*k)->name();
  }
}

}  // namespace
}  // namespace dynvm::onednn
