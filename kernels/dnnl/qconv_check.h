// A test helper shared by qconv_test and quant_test: QLinearConv on the dnnl backend against
// the reference kernel, allowing only the difference f32 requantization has from double.
#ifndef DYNVM_KERNELS_DNNL_QCONV_CHECK_H_
#define DYNVM_KERNELS_DNNL_QCONV_CHECK_H_

#include <cmath>
#include <cstdint>
#include <memory>
#include <vector>

#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/dnnl/common.h"
#include "kernels/dnnl/conv.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::onednn::qconv_check {

using ::dynvm::testing::KernelCall;

// QLinearConv's exact requantization: the reference's s32 sums (ConvInteger, x's zero point taken
// out), the bias, and per output channel the scale x_scale * w_scale / y_scale, in double.
struct Requant {
  Tensor sums;  // [N, M, spatial...]
  std::vector<double> bias, scale;
  double zy = 0;
};

// Runs `call` (a QLinearConv) on the dnnl kernel, twice on one site, and on the reference
// kernel. The primitive requantizes in f32, as ONNX Runtime's MLAS does (qconv.cc), so an output
// may differ from the reference's (double) by one, and only where the exact value
// (sum + bias) * scale + zy lies within f32's rounding of a tie: 2^-20 times its magnitude (the
// scale rounded to f32, the product and the zero point's addition: three roundings of 2^-24
// each, far inside that). Every other output is identical. Expects every run served without the
// fallback when `want_fast`, by it otherwise, and then (want_binds) that many primitives bound
// (a run split over threads binds one per part). Runs with `threads` threads. Returns how many
// outputs sat at such a tie.
inline int64_t ExpectQLinearAsReference(const KernelCall& call, const std::vector<Tensor>& inputs,
                                        bool want_fast, const Requant& q, int threads = 1,
                                        int want_binds = 1) {
  absl::StatusOr<std::vector<Tensor>> want = KernelCall(call).Backend("reference").Run();
  EXPECT_TRUE(want.ok()) << want.status();
  if (!want.ok()) return 0;
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  EXPECT_TRUE(k.ok()) << k.status();
  if (!k.ok()) return 0;
  const auto* dnnl = dynamic_cast<const DnnlKernel*>(k->get());
  EXPECT_NE(dnnl, nullptr);
  if (dnnl == nullptr) return 0;
  KernelContext ctx(&HeapAllocator::Get(), threads);
  std::vector<const Tensor*> in;
  for (const Tensor& t : inputs) in.push_back(&t);
  const std::vector<double> ref = ::dynvm::testing::ToDoubles((*want)[0]);
  const std::vector<double> sums = ::dynvm::testing::ToDoubles(q.sums);
  EXPECT_EQ(sums.size(), ref.size());
  const int64_t m = static_cast<int64_t>(q.scale.size());
  const int64_t plane = q.sums.dim(0) == 0 ? 0 : q.sums.numel() / (q.sums.dim(0) * m);
  int64_t ties = 0;
  for (int run = 0; run < 2; ++run) {
    Tensor out;
    std::vector<Tensor*> outs = {&out};
    absl::Status s = (*k)->Run(ctx, in, outs);
    EXPECT_TRUE(s.ok()) << s;
    if (!s.ok()) return ties;
    EXPECT_EQ(out.dtype(), (*want)[0].dtype());
    EXPECT_EQ(out.dims(), (*want)[0].dims());
    const std::vector<double> got = ::dynvm::testing::ToDoubles(out);
    if (got.size() != ref.size() || sums.size() != ref.size()) return ties;
    int64_t bad = 0;
    for (size_t i = 0; i < ref.size() && bad < 5; ++i) {
      if (got[i] == ref[i]) continue;
      const int64_t oc = (static_cast<int64_t>(i) / plane) % m;
      const double scaled = (sums[i] + q.bias[static_cast<size_t>(oc)]) * q.scale[oc];
      const double v = scaled + q.zy;
      const double to_tie = std::abs(v - std::floor(v) - 0.5);
      const double tol = std::ldexp(std::abs(scaled) + std::abs(q.zy) + 1, -20);
      if (std::abs(got[i] - ref[i]) == 1 && to_tie <= tol) {
        ++ties;
        continue;
      }
      ++bad;
      ADD_FAILURE() << dnnl->name() << " output " << i << ": " << got[i] << ", the reference "
                    << ref[i] << ", exact value " << v;
    }
  }
  EXPECT_EQ(dnnl->fallback_runs(), want_fast ? 0 : 2) << dnnl->name();
  if (want_fast) {
    EXPECT_EQ(GetConvCacheStats(ctx.state().get()).binds, want_binds);
  }
  return ties;
}

}  // namespace dynvm::onednn::qconv_check

#endif  // DYNVM_KERNELS_DNNL_QCONV_CHECK_H_
