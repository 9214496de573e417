// Reductions: Reduce* (axes as an attribute or, from ReduceSum 13, an input), ArgMax, ArgMin and
// TopK.
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

absl::StatusOr<std::vector<int>> ReduceAxes(InferContext& c, int rank, bool* noop) {
  std::vector<int64_t> axes;
  absl::StatusOr<std::vector<int64_t>> attr = c.GetInts("axes", {});
  if (!attr.ok()) return attr.status();
  axes = *attr;
  *noop = false;
  if (c.has_input(1)) {
    std::optional<std::vector<int64_t>> in = ConstInts(c, 1);
    if (!in) return absl::UnavailableError("axes from data");
    axes = *in;
  }
  if (axes.empty()) {
    DYNVM_ASSIGN_OR_RETURN(int64_t noop_attr, c.GetInt("noop_with_empty_axes", 0));
    *noop = noop_attr != 0;
    std::vector<int> all;
    if (!*noop)
      for (int i = 0; i < rank; ++i) all.push_back(i);
    return all;
  }
  std::vector<int> out;
  for (int64_t a : axes) {
    DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, a, rank));
    out.push_back(ax);
  }
  return out;
}

absl::Status Reduce(InferContext& c) {
  const Shape* in = c.input_shape(0);
  DYNVM_ASSIGN_OR_RETURN(int64_t keep, c.GetInt("keepdims", 1));
  if (in == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  bool noop = false;
  absl::StatusOr<std::vector<int>> axes = ReduceAxes(c, static_cast<int>(in->size()), &noop);
  if (absl::IsUnavailable(axes.status())) {
    if (keep) {
      c.SetOutputDynamic(0, c.input_dtype(0), static_cast<int>(in->size()));
    } else {
      c.SetOutputUnknown(0, c.input_dtype(0));
    }
    return absl::OkStatus();
  }
  if (!axes.ok()) return axes.status();
  Shape out;
  for (int i = 0; i < static_cast<int>(in->size()); ++i) {
    const bool reduced = std::find(axes->begin(), axes->end(), i) != axes->end();
    if (!reduced)
      out.push_back((*in)[i]);
    else if (keep)
      out.push_back(c.sym().Const(1));
  }
  c.SetOutput(0, c.input_dtype(0), out);
  return absl::OkStatus();
}

absl::Status ArgReduce(InferContext& c) {
  const Shape* in = c.input_shape(0);
  if (in == nullptr) {
    c.SetOutputUnknown(0, DType::kI64);
    return absl::OkStatus();
  }
  absl::StatusOr<int64_t> axis = c.GetInt("axis", 0), keep = c.GetInt("keepdims", 1);
  if (!axis.ok()) return axis.status();
  if (!keep.ok()) return keep.status();
  DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, *axis, static_cast<int>(in->size())));
  Shape out;
  for (int i = 0; i < static_cast<int>(in->size()); ++i) {
    if (i != ax)
      out.push_back((*in)[i]);
    else if (*keep)
      out.push_back(c.sym().Const(1));
  }
  c.SetOutput(0, DType::kI64, out);
  return absl::OkStatus();
}

absl::Status TopK(InferContext& c) {
  const Shape* in = c.input_shape(0);
  if (in == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    c.SetOutputUnknown(1, DType::kI64);
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", -1));
  DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, axis, static_cast<int>(in->size())));
  Dim k;
  if (c.has_input(1) && c.content(1) && c.content(1)->size() == 1) {
    k = (*c.content(1))[0];
  } else if (!c.has_input(1)) {
    absl::StatusOr<int64_t> kk = c.GetInt("k", 1);
    if (!kk.ok()) return kk.status();
    k = c.sym().Const(*kk);
  } else {
    c.SetOutputDynamic(0, c.input_dtype(0), static_cast<int>(in->size()));
    c.SetOutputDynamic(1, DType::kI64, static_cast<int>(in->size()));
    return absl::OkStatus();
  }
  Shape out = *in;
  out[ax] = k;
  c.SetOutput(0, c.input_dtype(0), out);
  c.SetOutput(1, DType::kI64, out);
  return absl::OkStatus();
}

}  // namespace

void DefineReduceOps(OpTable& t) {
  static constexpr OpRow kRows[] = {
      {"ReduceSum", 1, "1:1:1 11:1:1 13:2:1", "axes:I keepdims:i noop_with_empty_axes:i", kPure,
       Reduce},
      {"ReduceMean", 1, "1:1:1 11:1:1 13:1:1 18:2:1",
       "axes:I@1-18 keepdims:i noop_with_empty_axes:i@18", kPure, Reduce},
      {"ReduceMax", 1, "1:1:1 11:1:1 12:1:1 13:1:1 18:2:1 20:2:1",
       "axes:I@1-18 keepdims:i noop_with_empty_axes:i@18", kPure, Reduce},
      {"ReduceMin", 1, "1:1:1 11:1:1 12:1:1 13:1:1 18:2:1 20:2:1",
       "axes:I@1-18 keepdims:i noop_with_empty_axes:i@18", kPure, Reduce},
      {"ReduceProd", 1, "1:1:1 11:1:1 13:1:1 18:2:1",
       "axes:I@1-18 keepdims:i noop_with_empty_axes:i@18", kPure, Reduce},
      {"ReduceL1", 1, "1:1:1 11:1:1 13:1:1 18:2:1",
       "axes:I@1-18 keepdims:i noop_with_empty_axes:i@18", kPure, Reduce},
      {"ReduceL2", 1, "1:1:1 11:1:1 13:1:1 18:2:1",
       "axes:I@1-18 keepdims:i noop_with_empty_axes:i@18", kPure, Reduce},
      {"ReduceLogSum", 1, "1:1:1 11:1:1 13:1:1 18:2:1",
       "axes:I@1-18 keepdims:i noop_with_empty_axes:i@18", kPure, Reduce},
      {"ReduceLogSumExp", 1, "1:1:1 11:1:1 13:1:1 18:2:1",
       "axes:I@1-18 keepdims:i noop_with_empty_axes:i@18", kPure, Reduce},
      {"ReduceSumSquare", 1, "1:1:1 11:1:1 13:1:1 18:2:1",
       "axes:I@1-18 keepdims:i noop_with_empty_axes:i@18", kPure, Reduce},
      {"ArgMax", 1, "1:1:1 11:1:1 12:1:1 13:1:1", "axis:i keepdims:i select_last_index:i", kPure,
       ArgReduce},
      {"ArgMin", 1, "1:1:1 11:1:1 12:1:1 13:1:1", "axis:i keepdims:i select_last_index:i", kPure,
       ArgReduce},
      {"TopK", 1, "1:1:1 10:2:3 11:2:3", "axis:i k:i largest:i sorted:i", kPure, TopK},
  };
  t.Add("", kRows);
}

}  // namespace dynvm::compiler
