#include "compiler/ops/shape_util.h"

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"

namespace dynvm::compiler::shapes {

absl::StatusOr<int> Axis(InferContext& c, int64_t axis, int rank) {
  if (axis < -rank || axis >= rank) {
    return c.Error(absl::StrCat("axis ", axis, " out of range for rank ", rank));
  }
  return static_cast<int>(axis < 0 ? axis + rank : axis);
}

// Reads a constant or symbolic-content integer input as constants; nullopt if not constant.
std::optional<std::vector<int64_t>> ConstInts(InferContext& c, size_t i) {
  const std::vector<Dim>* content = c.content(i);
  if (content == nullptr) return std::nullopt;
  std::vector<int64_t> out;
  for (Dim d : *content) {
    auto v = SymbolicContext::AsConst(d);
    if (!v) return std::nullopt;
    out.push_back(*v);
  }
  return out;
}

Dim Numel(SymbolicContext& sym, const std::vector<Dim>& s) {
  Dim n = sym.Const(1);
  for (Dim d : s) n = sym.Mul(n, d);
  return n;
}

absl::Status SameAsInput(InferContext& c) {
  if (!c.has_input(0)) return c.Error("missing input 0");
  for (size_t i = 0; i < c.num_outputs(); ++i) {
    if (c.input_shape(0)) {
      c.SetOutput(i, c.input_dtype(0), *c.input_shape(0));
    } else {
      c.SetOutputUnknown(i, c.input_dtype(0));
    }
  }
  return absl::OkStatus();
}

absl::Status SameAsInputKeepingContent(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(SameAsInput(c));
  if (c.content(0)) c.SetContent(0, *c.content(0));
  return absl::OkStatus();
}

}  // namespace dynvm::compiler::shapes
