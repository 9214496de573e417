// The oneDNN backend's Resize (resize.cc) against the reference kernel (the oracle), bit for
// bit: every mode, coordinate transformation and nearest_mode, exclude_outside, extrapolation,
// scales or sizes (up, down, non-whole ratios, outputs of 1), the axes input, 1-D to 5-D inputs,
// strided inputs, every numeric dtype, inputs with -0, NaN, infinities and subnormals, at 1 and 2
// threads. Runs the new kernel must serve are checked to run no fallback.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/heap_allocator.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "gtest/gtest.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/dnnl_testing.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn {
namespace {

using testing::KernelCall;

const char* const kTransforms[] = {
    "half_pixel",           "pytorch_half_pixel", "align_corners",       "asymmetric",
    "tf_half_pixel_for_nn", "tf_crop_and_resize", "half_pixel_symmetric"};
const char* const kNearestModes[] = {"round_prefer_floor", "round_prefer_ceil", "floor", "ceil"};

struct Case {
  std::string mode = "nearest", transform = "half_pixel", nearest = "round_prefer_floor";
  int64_t exclude_outside = 0;
  float extrapolation = 0, cubic_a = -0.75f;
  std::vector<float> scales;  // one of scales and sizes
  std::vector<int64_t> sizes;
  std::vector<float> roi;     // tf_crop_and_resize
  std::vector<int64_t> axes;  // empty: no axes attribute
};

std::string Describe(const Tensor& x, const Case& c) {
  return absl::StrCat(x.DebugString(), " ", c.mode, " ", c.transform, " ", c.nearest, " exclude ",
                      c.exclude_outside, " scales [", absl::StrJoin(c.scales, ","), "] sizes [",
                      absl::StrJoin(c.sizes, ","), "] roi [", absl::StrJoin(c.roi, ","), "] axes [",
                      absl::StrJoin(c.axes, ","), "]");
}

using Result = testing::BackendRun;

// Runs Resize on `backend` at `threads`, twice at one site; the last output.
absl::StatusOr<Result> RunResize(const Tensor& x, const Case& c, const std::string& backend,
                                 int threads) {
  KernelCall call("Resize");
  call.In(x);
  if (c.roi.empty()) {
    call.Absent();
  } else {
    call.In(*Tensor::FromVector<float>(DType::kF32, {static_cast<int64_t>(c.roi.size())}, c.roi));
  }
  if (c.scales.empty()) {
    call.Absent();
    call.In(
        *Tensor::FromVector<int64_t>(DType::kI64, {static_cast<int64_t>(c.sizes.size())}, c.sizes));
  } else {
    call.In(
        *Tensor::FromVector<float>(DType::kF32, {static_cast<int64_t>(c.scales.size())}, c.scales));
  }
  call.Out(x.dtype())
      .Attr("mode", c.mode)
      .Attr("coordinate_transformation_mode", c.transform)
      .Attr("nearest_mode", c.nearest)
      .Attr("exclude_outside", c.exclude_outside)
      .Attr("extrapolation_value", c.extrapolation)
      .Attr("cubic_coeff_a", c.cubic_a);
  if (!c.axes.empty()) call.Attr("axes", c.axes);
  return testing::RunOnBackend(call, backend, threads);
}

// Whether element i of a float tensor is a NaN.
bool IsNan(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32:
      return std::isnan(t.data<float>()[i]);
    case DType::kF64:
      return std::isnan(t.data<double>()[i]);
    case DType::kF16:
      return std::isnan(static_cast<float>(t.data<Half>()[i]));
    case DType::kBF16:
      return std::isnan(static_cast<float>(t.data<BFloat16>()[i]));
    default:
      return false;
  }
}

// The same dims and the same bits in every element, but for NaNs: where `want` has a NaN, `got`
// must have one, of any sign and payload (which of two NaN operands a sum returns is the
// compiler's choice of operand order, in the reference kernel as here). "" or the first
// difference.
std::string Difference(const Tensor& got, const Tensor& want) {
  if (got.dtype() != want.dtype() || got.dims() != want.dims()) return "dtype or dims differ";
  const int64_t e = DTypeSize(got.dtype());
  const auto* g = static_cast<const uint8_t*>(got.raw_data());
  const auto* w = static_cast<const uint8_t*>(want.raw_data());
  for (int64_t i = 0; i < got.numel(); ++i) {
    if (std::memcmp(g + i * e, w + i * e, e) == 0) continue;
    if (IsNan(want, i) && IsNan(got, i)) continue;
    uint64_t gb = 0, wb = 0;
    std::memcpy(&gb, g + i * e, e);
    std::memcpy(&wb, w + i * e, e);
    return absl::StrCat("element ", i, ": bits ", absl::Hex(gb), " vs ", absl::Hex(wb));
  }
  return "";
}

// Expects the dnnl kernel to give the reference kernel's bits (or its error code) at 1 and 2
// threads; `served`: that it ran no fallback.
void ExpectMatches(const Tensor& x, const Case& c, bool served) {
  testing::ExpectDnnlMatchesReference(
      [&](const std::string& backend, int threads) { return RunResize(x, c, backend, threads); },
      Describe(x, c), served, Difference);
}

Tensor RandomF32(const std::vector<int64_t>& dims, std::mt19937& rng) {
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  std::uniform_real_distribution<float> u(-1, 1);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = u(rng);
  return t;
}

// A tensor of `dtype` with values in [-100, 100] (integers: their range's part of it).
Tensor RandomOf(DType dtype, const std::vector<int64_t>& dims, std::mt19937& rng) {
  Tensor f = RandomF32(dims, rng);
  Tensor t = *Tensor::Empty(dtype, dims);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const float v = 100 * f.data<float>()[i];
    switch (dtype) {
      case DType::kF16:
        t.data<Half>()[i] = Half(v);
        break;
      case DType::kBF16:
        t.data<BFloat16>()[i] = BFloat16(v);
        break;
      case DType::kF64:
        t.data<double>()[i] = v;
        break;
      case DType::kI8:
        t.data<int8_t>()[i] = static_cast<int8_t>(v);
        break;
      case DType::kU8:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(v + 100);
        break;
      case DType::kI32:
        t.data<int32_t>()[i] = static_cast<int32_t>(v * 1000);
        break;
      case DType::kI64:
        t.data<int64_t>()[i] = static_cast<int64_t>(v) << 50;
        break;
      default:
        t.data<float>()[i] = v;
    }
  }
  return t;
}

// Resize geometries: input dims and a scales or sizes setting for them.
struct Geometry {
  std::vector<int64_t> in;
  std::vector<float> scales;
  std::vector<int64_t> sizes;
};

std::vector<Geometry> Geometries() {
  return {
      // 4-D NCHW: up by non-whole and whole ratios, down, outputs of 1, as scales and sizes.
      {{1, 3, 5, 7}, {1, 1, 1.7f, 2.5f}, {}},
      {{2, 2, 9, 6}, {}, {2, 2, 4, 5}},
      {{1, 2, 4, 3}, {1, 1, 2, 3}, {}},
      {{1, 2, 7, 5}, {1, 1, 0.6f, 0.45f}, {}},
      {{1, 2, 6, 4}, {}, {1, 2, 1, 9}},
      {{1, 1, 1, 5}, {}, {1, 1, 3, 1}},
      {{1, 2, 3, 4}, {}, {1, 2, 3, 4}},  // the identity
      // 3-D: all three dims resized, or the first kept.
      {{3, 5, 7}, {}, {3, 11, 4}},
      {{4, 3, 2}, {0.5f, 2.34f, 3.0f}, {}},
      // 5-D: the last three resized.
      {{1, 2, 3, 4, 5}, {1, 1, 2, 1.5f, 0.8f}, {}},
      {{2, 1, 4, 3, 5}, {}, {2, 1, 1, 7, 5}},
      // 1-D and 2-D.
      {{9}, {}, {4}},
      {{5, 6}, {1.9f, 0.7f}, {}},
  };
}

// Whether the dnnl kernel serves the run (no fallback): the dims before the last three keep
// their coordinates unless the transform moves a kept coordinate (tf_half_pixel_for_nn maps x
// to x + 0.5: linear and cubic blend, nearest rounding up takes x + 1).
bool Served(const Case& c, int rank) {
  if (rank <= 3 || c.transform != "tf_half_pixel_for_nn") return true;
  return c.mode == "nearest" && (c.nearest == "round_prefer_floor" || c.nearest == "floor");
}

void AddRoi(const Geometry& g, Case* c) {
  const size_t r = g.in.size();
  c->roi.assign(2 * r, 0.0f);
  for (size_t i = 0; i < r; ++i) c->roi[r + i] = 1.0f;
  // A crop window that reaches outside the input on the last two dims.
  if (r >= 2) {
    c->roi[r - 2] = 0.2f;
    c->roi[2 * r - 2] = 1.3f;
    c->roi[r - 1] = -0.4f;
    c->roi[2 * r - 1] = 0.7f;
  }
}

// f64 inputs keep the last bits of every weight product in the output (an f32 output rounds
// most 1-ulp differences of the double sum away): every transform over the geometries, linear and
// cubic.
TEST(DnnlResizeTest, DoubleInputsOverEveryTransform) {
  std::mt19937 rng(10);
  for (const char* mode : {"linear", "cubic"}) {
    for (const char* transform : kTransforms) {
      for (const Geometry& g : Geometries()) {
        Case c;
        c.mode = mode;
        c.transform = transform;
        c.scales = g.scales;
        c.sizes = g.sizes;
        if (c.transform == "tf_crop_and_resize") AddRoi(g, &c);
        ExpectMatches(RandomOf(DType::kF64, g.in, rng), c,
                      Served(c, static_cast<int>(g.in.size())));
      }
    }
  }
}

void RunGrid(const std::string& mode, std::mt19937& rng) {
  const std::vector<std::string> nearest =
      mode == "nearest"
          ? std::vector<std::string>(std::begin(kNearestModes), std::end(kNearestModes))
          : std::vector<std::string>{"round_prefer_floor"};
  for (const char* transform : kTransforms) {
    for (const std::string& n : nearest) {
      for (int64_t exclude : {0, 1}) {
        for (const Geometry& g : Geometries()) {
          Case c;
          c.mode = mode;
          c.transform = transform;
          c.nearest = n;
          c.exclude_outside = exclude;
          c.extrapolation = -3.5f;
          c.scales = g.scales;
          c.sizes = g.sizes;
          if (c.transform == "tf_crop_and_resize") AddRoi(g, &c);
          ExpectMatches(RandomF32(g.in, rng), c, Served(c, static_cast<int>(g.in.size())));
        }
      }
    }
  }
}

TEST(DnnlResizeTest, NearestMatchesReferenceOverEveryTransformAndNearestMode) {
  std::mt19937 rng(1);
  RunGrid("nearest", rng);
}

TEST(DnnlResizeTest, LinearMatchesReferenceOverEveryTransform) {
  std::mt19937 rng(2);
  RunGrid("linear", rng);
}

TEST(DnnlResizeTest, CubicMatchesReferenceOverEveryTransform) {
  std::mt19937 rng(3);
  RunGrid("cubic", rng);
  // Another cubic_coeff_a.
  Case c;
  c.mode = "cubic";
  c.cubic_a = -0.5f;
  c.sizes = {1, 2, 9, 4};
  ExpectMatches(RandomF32({1, 2, 4, 7}, rng), c, true);
}

TEST(DnnlResizeTest, AxesInputAndKeepAspectRatio) {
  std::mt19937 rng(4);
  const Tensor x = RandomF32({1, 3, 6, 5}, rng);
  for (const char* mode : {"nearest", "linear"}) {
    Case c;
    c.mode = mode;
    c.transform = "align_corners";
    c.axes = {2, 3};
    c.sizes = {11, 3};
    ExpectMatches(x, c, true);
    c.axes = {-1};
    c.sizes = {};
    c.scales = {2.6f};
    ExpectMatches(x, c, true);
    // The batch dim resized: a fourth dim from the end, the reference kernel's.
    c.axes = {0, 3};
    c.scales = {2.0f, 1.5f};
    ExpectMatches(x, c, false);
  }
}

TEST(DnnlResizeTest, StridedInputs) {
  std::mt19937 rng(5);
  // NCHW [1, 3, 5, 7] viewed over a channels-last buffer [1, 5, 7, 3].
  const Tensor base = RandomF32({1, 5, 7, 3}, rng);
  const Tensor x =
      *Tensor::View(base.storage(), base.byte_offset(), DType::kF32, {1, 3, 5, 7}, {105, 1, 21, 3});
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    for (const char* transform : {"half_pixel", "align_corners", "asymmetric"}) {
      Case c;
      c.mode = mode;
      c.transform = transform;
      c.scales = {1, 1, 2.2f, 0.6f};
      ExpectMatches(x, c, true);
      c.scales = {1, 1, 2, 3};
      ExpectMatches(x, c, true);
    }
  }
}

TEST(DnnlResizeTest, EveryNumericDtype) {
  std::mt19937 rng(6);
  const DType dtypes[] = {DType::kF16, DType::kBF16, DType::kF64, DType::kI8,
                          DType::kU8,  DType::kI32,  DType::kI64};
  for (DType dtype : dtypes) {
    for (const char* mode : {"nearest", "linear", "cubic"}) {
      for (const char* transform : {"half_pixel", "align_corners", "tf_crop_and_resize"}) {
        Case c;
        c.mode = mode;
        c.transform = transform;
        c.extrapolation = 7.25f;
        const Geometry g = {{1, 2, 5, 6}, {1, 1, 1.6f, 0.5f}, {}};
        c.scales = g.scales;
        if (c.transform == "tf_crop_and_resize") AddRoi(g, &c);
        ExpectMatches(RandomOf(dtype, g.in, rng), c, true);
        c.scales = {1, 1, 2, 2};
        ExpectMatches(RandomOf(dtype, g.in, rng), c, true);
      }
    }
  }
}

// -0, NaN (quiet and signaling), infinities and subnormals: a neighbour of weight 0 is skipped
// (a NaN there does not spread), nearest gives the reference's 0 + 1 * x.
TEST(DnnlResizeTest, SpecialValues) {
  std::mt19937 rng(7);
  const float specials[] = {-0.0f,
                            std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::signaling_NaN(),
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            -1e-40f};
  // Every other element special, the first of most rows too (a padding tap reads it).
  Tensor x = RandomF32({1, 2, 6, 8}, rng);
  for (int64_t i = 0; i < x.numel(); i += 2) x.data<float>()[i] = specials[(i / 2) % 7];
  for (const char* mode : {"nearest", "linear", "cubic"}) {
    for (const char* transform : {"half_pixel", "align_corners", "asymmetric"}) {
      for (const std::vector<float>& scales :
           std::vector<std::vector<float>>{{1, 1, 2, 2}, {1, 1, 1.3f, 0.5f}, {1, 1, 1, 1}}) {
        Case c;
        c.mode = mode;
        c.transform = transform;
        c.scales = scales;
        ExpectMatches(x, c, true);
      }
    }
  }
}

// Outputs large enough to split over 2 threads: raft_small's final upsampling (bilinear,
// align_corners, x8), an FPN level (nearest x2, and to arbitrary sizes), cubic.
TEST(DnnlResizeTest, LargeOutputsAtOneAndTwoThreads) {
  std::mt19937 rng(8);
  struct Large {
    const char* mode;
    const char* transform;
    std::vector<int64_t> in, sizes;
  };
  const Large cases[] = {
      {"linear", "align_corners", {1, 2, 16, 16}, {1, 2, 128, 128}},
      {"nearest", "asymmetric", {1, 8, 20, 23}, {1, 8, 40, 46}},
      {"nearest", "half_pixel", {1, 8, 20, 23}, {1, 8, 37, 51}},
      {"linear", "half_pixel", {2, 3, 30, 20}, {2, 3, 50, 61}},
      {"linear", "pytorch_half_pixel", {1, 4, 64, 48}, {1, 4, 31, 17}},
      {"cubic", "half_pixel", {1, 3, 20, 20}, {1, 3, 47, 52}},
  };
  for (const Large& l : cases) {
    Case c;
    c.mode = l.mode;
    c.transform = l.transform;
    c.sizes = l.sizes;
    ExpectMatches(RandomF32(l.in, rng), c, true);
  }
}

TEST(DnnlResizeTest, ErrorsAndEmptyTensorsGoToTheReference) {
  std::mt19937 rng(9);
  Case c;
  c.mode = "linear";
  c.scales = {1, 1, 2};  // one value short
  ExpectMatches(RandomF32({1, 2, 3, 4}, rng), c, false);
  c.scales = {1, 1, -2, 2};  // negative
  ExpectMatches(RandomF32({1, 2, 3, 4}, rng), c, false);
  c.scales = {};
  c.sizes = {1, 2, 0, 4};  // an empty output
  ExpectMatches(RandomF32({1, 2, 3, 4}, rng), c, false);
  c.sizes = {1, 0, 6, 4};
  ExpectMatches(RandomF32({1, 0, 3, 4}, rng), c, false);
}

}  // namespace
}  // namespace dynvm::onednn
