// The string operators: StringNormalizer, TfIdfVectorizer, StringConcat and StringSplit
// (docs/strings.md).
#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/ops/names.h"
#include "compiler/ops/op_def.h"
#include "compiler/ops/shape_util.h"

namespace dynvm::compiler {
namespace {

using shapes::Axis;
using shapes::ConstInts;
using shapes::Numel;
using shapes::SameAsInput;
using Shape = std::vector<Dim>;

// StringNormalizer: [C] or [1, C] strings in, the same rank out, C' decided at run time.
absl::Status StringNormalizer(InferContext& c) {
  if (c.input_dtype(0) != DType::kString) return c.Error("X must be a string tensor");
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, DType::kString);
  } else if (x->size() == 1) {
    c.SetOutput(0, DType::kString, {c.sym().Fresh("strnorm")});
  } else if (x->size() == 2) {
    c.SetOutput(0, DType::kString, {(*x)[0], c.sym().Fresh("strnorm")});
  } else {
    return c.Error("X must be [C] or [1, C]");
  }
  return absl::OkStatus();
}

// TfIdfVectorizer: [C] -> [K] or [N, C] -> [N, K] floats, K = max(ngram_indexes) + 1.
absl::Status TfIdfVectorizer(InferContext& c) {
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> indexes, c.GetInts("ngram_indexes"));
  int64_t k = 0;
  for (int64_t v : indexes) k = std::max(k, v + 1);
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, DType::kF32);
  } else if (x->size() == 1) {
    c.SetOutput(0, DType::kF32, {c.sym().Const(k)});
  } else if (x->size() == 2) {
    c.SetOutput(0, DType::kF32, {(*x)[0], c.sym().Const(k)});
  } else {
    return c.Error("X must be [C] or [N, C]");
  }
  return absl::OkStatus();
}

// StringConcat (opset 20): the broadcast shape of X and Y, strings.
absl::Status StringConcat(InferContext& c) {
  if (c.input_dtype(0) != DType::kString || c.input_dtype(1) != DType::kString)
    return c.Error("X and Y must be string tensors");
  const std::vector<Dim>* x = c.input_shape(0);
  const std::vector<Dim>* y = c.input_shape(1);
  if (x == nullptr || y == nullptr) {
    c.SetOutputUnknown(0, DType::kString);
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(std::vector<Dim> out, BroadcastShapes(c.sym(), *x, *y));
  c.SetOutput(0, DType::kString, std::move(out));
  return absl::OkStatus();
}

// StringSplit (opset 20): Y = X's dims + [the most substrings of an element] (decided at run
// time), Z the count of each element's substrings.
absl::Status StringSplit(InferContext& c) {
  if (c.input_dtype(0) != DType::kString) return c.Error("X must be a string tensor");
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, DType::kString);
    c.SetOutputUnknown(1, DType::kI64);
    return absl::OkStatus();
  }
  std::vector<Dim> y = *x;
  y.push_back(c.sym().Fresh("substrings"));
  c.SetOutput(0, DType::kString, std::move(y));
  c.SetOutput(1, DType::kI64, *x);
  return absl::OkStatus();
}

}  // namespace

void DefineStringOps(OpTable& t) {
  static constexpr OpRow kRows[] = {
      {"StringNormalizer", 7, "10:1:1",
       "case_change_action:s is_case_sensitive:i locale:s stopwords:S", kPure, StringNormalizer},
      {"TfIdfVectorizer", 7, "9:1:1",
       "max_gram_length:i max_skip_count:i min_gram_length:i mode:s ngram_counts:I ngram_indexes:I "
       "pool_int64s:I pool_strings:S weights:F",
       kPure, TfIdfVectorizer},
      {"StringConcat", 7, "20:2:3", "", kPure, StringConcat},
      {"StringSplit", 7, "20:1:1", "delimiter:s maxsplit:i", kPure, StringSplit},
      {"RegexFullMatch", 7, "20:x", "", kNoKernel, nullptr, nullptr, nullptr,
       "it needs a regular-expression engine safe on untrusted patterns and input (RE2's "
       "syntax); dynvm has none"},
  };
  t.Add("", kRows);
}

}  // namespace dynvm::compiler
