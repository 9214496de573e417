// The ONNX conformance runner: each test case of ONNX's backend test data (a folder with
// model.onnx and test_data_set_N/{input,output}_K.pb) is imported, compiled, run and compared
// with the stored outputs using the suite's tolerances (|got - want| <= atol + rtol * |want|,
// rtol 1e-3, atol 1e-7; NaN matches NaN; integers and bools exactly).
//
// A case whose model holds a random operator (Bernoulli, RandomUniform, RandomNormal,
// RandomUniformLike, RandomNormalLike, or Dropout with a training_mode input) cannot be expected
// to match stored values: an output that does not match passes when its dtype and shape match
// and CompareRandom's statistical check holds; such cases are marked `random` and listed apart.
//
// Outcomes: passed; unsupported (the importer or compiler refused the model as Unimplemented:
// an operator, attribute or type dynvm does not support); failed (anything else: a wrong
// result, a run-time error, a malformed model).
//
// Thread safety: thread-compatible.
#ifndef DYNVM_TESTS_CONFORMANCE_CONFORMANCE_H_
#define DYNVM_TESTS_CONFORMANCE_CONFORMANCE_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"
#include "tests/conformance/wrap.h"
#include "vm/virtual_machine.h"

namespace dynvm::conformance {

inline constexpr const char* kDefaultDataDir = "/usr/share/libonnx-testdata/data";
inline constexpr const char* kSuites[] = {"node", "pytorch-operator", "pytorch-converted",
                                          "simple"};

enum class Outcome { kPassed, kFailed, kUnsupported };

struct CaseResult {
  std::string suite;
  std::string name;
  Outcome outcome = Outcome::kFailed;
  std::string message;  // why it failed or is unsupported
  bool random = false;  // judged by CompareRandom (the model draws random numbers)
  double seconds = 0;
};

struct RunnerOptions {
  BackendPolicy backends;  // empty: all backends of this build
  double rtol = 1e-3;
  double atol = 1e-7;
  double case_timeout_seconds = 60;
  // Per case ("suite/case"): substrings of kernel names the executable must have bound (e.g.
  // "conv.f32.dnnl"); a case that passes without them fails, naming the kernels it got.
  std::map<std::string, std::vector<std::string>> expect_kernels;
  // Run each case's graph wrapped in a Loop or an If (tests/conformance/wrap.h).
  Wrap wrap = Wrap::kNone;
};

// Runs one case folder.
CaseResult RunCase(const std::string& suite, const std::string& case_dir,
                   const RunnerOptions& options);

// The case folders of a suite (sorted); NotFound when the suite folder is missing.
absl::StatusOr<std::vector<std::string>> ListCases(const std::string& data_dir,
                                                   const std::string& suite);

// Reads a serialized TensorProto (.pb) into a host tensor.
absl::StatusOr<Tensor> ReadTensorFile(const std::string& path);

// Reads a serialized TensorProto, SequenceProto or OptionalProto (.pb), as `kind` says (an
// optional's content kind is `elem_kind`).
absl::StatusOr<ObjectValue> ReadValueFile(const std::string& path, ObjectKind kind,
                                          ObjectKind elem_kind = ObjectKind::kTensor);

// Compare for sequences (element by element, same length) and optionals (both empty, or
// their contents match); plain tensors as Compare.
absl::Status CompareValues(const ObjectValue& got, const ObjectValue& want, double rtol,
                           double atol);

// OK when `got` matches `want` (dtype, dims and values within the tolerances); otherwise an
// error naming the first mismatch.
absl::Status Compare(const Tensor& got, const Tensor& want, double rtol, double atol);

// The statistical check for outputs of random models: dtype and shape as `want`; every value
// finite; when `want` holds only 0 and 1 (a Bernoulli draw), so must `got`; and the means agree
// within five standard errors: |mean(got) - mean(want)| <= 5 sqrt((var(got) + var(want)) / n)
// (var: the population variance; n elements each), which two draws of one distribution fail
// with probability below 1e-6. The per-distribution tests with large samples and fixed seeds
// are the random kernels' unit tests (kernels/reference/random_test.cc).
absl::Status CompareRandom(const Tensor& got, const Tensor& want);

const char* OutcomeName(Outcome o);

}  // namespace dynvm::conformance

#endif  // DYNVM_TESTS_CONFORMANCE_CONFORMANCE_H_
