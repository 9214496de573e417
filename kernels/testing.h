// Test helpers for kernels: build a KernelSpec, run a kernel on host tensors, compare.
#ifndef DYNVM_KERNELS_TESTING_H_
#define DYNVM_KERNELS_TESTING_H_

#include <initializer_list>
#include <random>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace dynvm::testing {

// True in sanitizer builds (tools/test.sh's address and thread stages), where reference kernels
// run about 10x slower: tests with long sweeps run a reduced one there (the Release ctest runs
// all of it).
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// A fluent description of one kernel call:
//   KernelCall("Add").In(a).In(b).Out(DType::kF32).Run()
// Output ports are dynamic unless Out() is given preallocated tensors via OutTensor().
class KernelCall {
 public:
  explicit KernelCall(std::string op, std::string domain = "");
  KernelCall& In(const Tensor& t);
  KernelCall& Absent();  // an absent optional input
  KernelCall& Out(DType dtype);
  KernelCall& OutTensor(const Tensor& preallocated);
  KernelCall& Attr(const std::string& name, int64_t v);
  KernelCall& Attr(const std::string& name, float v);
  KernelCall& Attr(const std::string& name, const std::string& v);
  KernelCall& Attr(const std::string& name, std::vector<int64_t> v);
  KernelCall& Attr(const std::string& name, std::vector<float> v);
  KernelCall& Attr(const std::string& name, std::vector<std::string> v);
  KernelCall& Attr(const std::string& name, const Tensor& v);
  KernelCall& Backend(std::string backend);

  const KernelSpec& spec() const { return spec_; }
  // The inputs as a kernel's Run takes them (nullptr where absent); valid while this call lives.
  std::vector<const Tensor*> inputs() const;
  // Creates the kernel through the global registry and runs it once.
  absl::StatusOr<std::vector<Tensor>> Run(int num_threads = 1);

 private:
  KernelSpec spec_;
  std::vector<Tensor> inputs_;
  std::vector<bool> present_;
  std::vector<Tensor> outputs_;
};

template <typename T>
Tensor Make(DType dtype, std::vector<int64_t> dims, std::vector<T> values) {
  return *Tensor::FromVector<T>(dtype, dims, values);
}
inline Tensor F32(std::vector<int64_t> dims, std::vector<float> v) {
  return Make<float>(DType::kF32, std::move(dims), std::move(v));
}
inline Tensor I64(std::vector<int64_t> dims, std::vector<int64_t> v) {
  return Make<int64_t>(DType::kI64, std::move(dims), std::move(v));
}
inline Tensor I32(std::vector<int64_t> dims, std::vector<int32_t> v) {
  return Make<int32_t>(DType::kI32, std::move(dims), std::move(v));
}
Tensor Bool(std::vector<int64_t> dims, std::vector<bool> v);
// An 8-bit tensor (kU8 or kI8) of values uniform over the type's whole range.
Tensor RandomInt8(DType dtype, const std::vector<int64_t>& dims, std::mt19937& rng);
// A kU8 or kI8 scalar holding v.
Tensor Int8Scalar(DType dtype, int v);

// Values of a tensor (any strides) as doubles / int64, in row-major order.
std::vector<double> ToDoubles(const Tensor& t);
std::vector<int64_t> ToInts(const Tensor& t);

}  // namespace dynvm::testing

#endif  // DYNVM_KERNELS_TESTING_H_
