// The kernel tester: runs one op through a backend's kernel and through the reference kernel
// (the oracle) on the same inputs, and compares the outputs within per-dtype tolerances.
//
//   KernelTester("MatMul").Random(DType::kF32, {1, 1024}).Random(DType::kF32, {1024, 7})
//       .Out(DType::kF32).Compare("dnnl");
//
// Compare runs the backend's kernel three times at one invoke site (a first run that binds
// the site's state; a second, which must reuse it; a third into preallocated outputs) and
// checks each against the reference. Inputs may be strided views: Transposed() and Padded()
// build inputs whose data is laid out differently from their logical shape.
//
// Thread safety: thread-compatible.
#ifndef DYNVM_KERNELS_KERNEL_TESTER_H_
#define DYNVM_KERNELS_KERNEL_TESTER_H_

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "kernels/testing.h"

namespace dynvm::testing {

struct Tolerance {
  double atol = 0;  // |got - want| <= atol + rtol * |want|
  double rtol = 0;
};

// Defaults per dtype, as {atol, rtol}: f32 {1e-5, 1e-4}; f64 {1e-9, 1e-9}; f16 {1e-2, 1e-2};
// bf16 {2e-2, 2e-2}; every other dtype (integers, bool) exact {0, 0}. Whatever the tolerance,
// a NaN must be met by a NaN and an infinity by the same infinity.
Tolerance DefaultTolerance(DType dtype);

class KernelTester {
 public:
  explicit KernelTester(std::string op, std::string domain = "", uint32_t seed = 1);

  // Inputs, in ONNX order.
  KernelTester& In(const Tensor& t);
  KernelTester& Absent();
  // Uniform random values in [lo, hi) (integers: rounded).
  KernelTester& Random(DType dtype, std::vector<int64_t> dims, double lo = -1, double hi = 1);
  // A random input of logical `dims` whose storage is in the order `perm` (a transposed view:
  // Transposed(dt, {M, K}, {1, 0}) stores K x M and views it as M x K).
  KernelTester& Transposed(DType dtype, std::vector<int64_t> dims, std::vector<int> perm,
                           double lo = -1, double hi = 1);
  // A random input whose innermost dim has `pad` spare elements per row (a slice of a wider
  // tensor, like a KV cache with spare capacity).
  KernelTester& Padded(DType dtype, std::vector<int64_t> dims, int64_t pad, double lo = -1,
                       double hi = 1);

  KernelTester& Out(DType dtype);
  KernelTester& Attr(const std::string& name, int64_t v);
  KernelTester& Attr(const std::string& name, float v);
  KernelTester& Attr(const std::string& name, const std::string& v);
  KernelTester& Attr(const std::string& name, std::vector<int64_t> v);
  KernelTester& Attr(const std::string& name, std::vector<float> v);
  KernelTester& Attr(const std::string& name, std::vector<std::string> v);

  KernelTester& Tol(double atol, double rtol);
  KernelTester& Threads(int n);

  // Runs `backend`'s kernel and the reference kernel and compares every output. Returns the
  // backend's create error (e.g. Unimplemented) as is; a run error or a mismatch is Internal
  // with the details. When the reference kernel itself fails, the backend must fail with the
  // same code.
  absl::Status Compare(absl::string_view backend);

  // The name of the backend kernel Compare created ("matmul.f32.dnnl.sgemm+brgemm").
  const std::string& kernel_name() const { return kernel_name_; }
  const KernelSpec& spec() const { return call_.spec(); }

 private:
  Tensor RandomTensor(DType dtype, const std::vector<int64_t>& storage_dims, double lo, double hi);

  KernelCall call_;
  std::vector<Tensor> inputs_;
  std::vector<bool> present_;
  std::vector<DType> out_dtypes_;
  std::mt19937 rng_;
  bool tol_set_ = false;
  Tolerance tol_;
  int threads_ = 1;
  std::string kernel_name_;
};

}  // namespace dynvm::testing

#endif  // DYNVM_KERNELS_KERNEL_TESTER_H_
