// The indexing and rearranging operators: GatherElements, GatherND, Scatter, ScatterND,
// ScatterElements, OneHot, DepthToSpace, SpaceToDepth, ReverseSequence, Compress and Pad. Each
// shape function sets the output dtype always; the shape where the inputs determine it, else the
// rank (a dynamic output the kernel allocates), else nothing (an op whose outputs kept the
// importer's placeholder type until its kernel ran made a Loop carrying them refuse to compile).
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

// The output has input `i`'s dtype and shape (no symbolic content: the values change).
absl::Status ShapeOfInput(InferContext& c, size_t i) {
  if (!c.has_input(i)) return c.Error(absl::StrCat("missing input ", i));
  if (const Shape* s = c.input_shape(i)) {
    c.SetOutput(0, c.input_dtype(i), *s);
  } else {
    c.SetOutputUnknown(0, c.input_dtype(i));
  }
  return absl::OkStatus();
}

// GatherElements(data, indices): indices' shape, data's dtype; the ranks must agree.
absl::Status GatherElements(InferContext& c) {
  const Shape* data = c.input_shape(0);
  const Shape* idx = c.input_shape(1);
  if (data && idx && data->size() != idx->size()) {
    return c.Error(absl::StrCat("data has rank ", data->size(), ", indices rank ", idx->size(),
                                "; they must be equal"));
  }
  if (data) {
    DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", 0));
    if (absl::StatusOr<int> a = Axis(c, axis, static_cast<int>(data->size())); !a.ok())
      return a.status();
  }
  if (idx) {
    c.SetOutput(0, c.input_dtype(0), *idx);
  } else {
    c.SetOutputUnknown(0, c.input_dtype(0));
  }
  return absl::OkStatus();
}

// GatherND(data, indices, batch_dims): indices.shape[:-1] + data.shape[batch_dims + k:] where
// k = indices.shape[-1] (a constant), else a rank-unknown output of data's dtype.
absl::Status GatherND(InferContext& c) {
  const Shape* data = c.input_shape(0);
  const Shape* idx = c.input_shape(1);
  DYNVM_ASSIGN_OR_RETURN(int64_t b, c.GetInt("batch_dims", 0));
  if (!data || !idx || idx->empty()) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  const std::optional<int64_t> k = SymbolicContext::AsConst(idx->back());
  const int64_t r = static_cast<int64_t>(data->size()), q = static_cast<int64_t>(idx->size());
  if (b < 0 || b >= std::min(r, q)) {
    return c.Error(
        absl::StrCat("batch_dims ", b, " must be in [0, min(rank(data), rank(indices)))"));
  }
  if (!k) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  if (*k < 1 || *k > r - b) {
    return c.Error(absl::StrCat("indices' last dim ", *k, " must be in [1, ", r - b, "]"));
  }
  Shape out(idx->begin(), idx->end() - 1);
  out.insert(out.end(), data->begin() + b + *k, data->end());
  c.SetOutput(0, c.input_dtype(0), std::move(out));
  return absl::OkStatus();
}

// OneHot(indices, depth, values): indices' shape with depth inserted at `axis`; values' dtype.
// A depth known only at run time makes a dynamic output of that rank.
absl::Status OneHot(InferContext& c) {
  const DType dtype = c.input_dtype(2);
  const Shape* idx = c.input_shape(0);
  if (!idx) {
    c.SetOutputUnknown(0, dtype);
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", -1));
  const int rank = static_cast<int>(idx->size()) + 1;
  DYNVM_ASSIGN_OR_RETURN(int a, Axis(c, axis, rank));
  std::optional<std::vector<int64_t>> depth = ConstInts(c, 1);
  if (!depth || depth->size() != 1) {
    c.SetOutputDynamic(0, dtype, rank);
    return absl::OkStatus();
  }
  if ((*depth)[0] < 1) return c.Error(absl::StrCat("depth ", (*depth)[0], " must be positive"));
  Shape out = *idx;
  out.insert(out.begin() + a, c.sym().Const((*depth)[0]));
  c.SetOutput(0, dtype, std::move(out));
  return absl::OkStatus();
}

// DepthToSpace / SpaceToDepth on NCHW with block size b.
absl::Status BlockRearrange(InferContext& c, bool to_space) {
  const Shape* x = c.input_shape(0);
  DYNVM_ASSIGN_OR_RETURN(int64_t b, c.GetInt("blocksize", 0));
  if (b < 1) return c.Error(absl::StrCat("blocksize ", b, " must be positive"));
  if (!x) {
    c.SetOutputDynamic(0, c.input_dtype(0), 4);
    return absl::OkStatus();
  }
  if (x->size() != 4) return c.Error(absl::StrCat("input has rank ", x->size(), ", not 4"));
  SymbolicContext& s = c.sym();
  const Dim bb = s.Const(b * b), bd = s.Const(b);
  const Shape& d = *x;
  if (to_space) {
    c.SetOutput(0, c.input_dtype(0),
                {d[0], s.FloorDiv(d[1], bb), s.Mul(d[2], bd), s.Mul(d[3], bd)});
  } else {
    c.SetOutput(0, c.input_dtype(0),
                {d[0], s.Mul(d[1], bb), s.FloorDiv(d[2], bd), s.FloorDiv(d[3], bd)});
  }
  return absl::OkStatus();
}

// Compress(input, condition[, axis]): the kept count depends on the data.
absl::Status Compress(InferContext& c) {
  const Shape* x = c.input_shape(0);
  if (!c.HasAttr("axis")) {
    c.SetOutputDynamic(0, c.input_dtype(0), 1);
  } else if (x) {
    DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", 0));
    if (absl::StatusOr<int> a = Axis(c, axis, static_cast<int>(x->size())); !a.ok())
      return a.status();
    c.SetOutputDynamic(0, c.input_dtype(0), static_cast<int>(x->size()));
  } else {
    c.SetOutputUnknown(0, c.input_dtype(0));
  }
  return absl::OkStatus();
}

// Pad: each dim grows by its begin and end pads (the `pads` attribute before opset 11, the
// second input after); pads known only at run time make a dynamic output of the same rank.
absl::Status Pad(InferContext& c) {
  const Shape* x = c.input_shape(0);
  const DType dtype = c.input_dtype(0);
  if (!x) {
    c.SetOutputUnknown(0, dtype);
    return absl::OkStatus();
  }
  std::optional<std::vector<int64_t>> pads;
  if (c.HasAttr("pads")) {
    DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> p, c.GetInts("pads"));
    pads = p;
  } else {
    pads = ConstInts(c, 1);
  }
  const size_t rank = x->size();
  // Opset 18: `axes` (input 3) names the axes the pads are for.
  std::optional<std::vector<int64_t>> axes;
  if (c.has_input(3)) axes = ConstInts(c, 3);
  if (!pads || (c.has_input(3) && !axes)) {
    c.SetOutputDynamic(0, dtype, static_cast<int>(rank));
    return absl::OkStatus();
  }
  std::vector<int64_t> full(2 * rank, 0);
  if (axes) {
    if (pads->size() != 2 * axes->size()) {
      return c.Error(absl::StrCat("pads has ", pads->size(), " values for ", axes->size(),
                                  " axes; it needs ", 2 * axes->size()));
    }
    for (size_t k = 0; k < axes->size(); ++k) {
      DYNVM_ASSIGN_OR_RETURN(int ax, shapes::Axis(c, (*axes)[k], static_cast<int>(rank)));
      full[ax] = (*pads)[k];
      full[ax + rank] = (*pads)[k + axes->size()];
    }
  } else if (pads->size() != 2 * rank) {
    return c.Error(absl::StrCat("pads has ", pads->size(), " values; a rank-", rank,
                                " input needs ", 2 * rank));
  } else {
    full = *pads;
  }
  SymbolicContext& s = c.sym();
  Shape out;
  for (size_t i = 0; i < rank; ++i) {
    Dim d = s.Add((*x)[i], s.Const(full[i] + full[i + rank]));
    if (std::optional<int64_t> v = SymbolicContext::AsConst(d); v && *v < 0) {
      return c.Error(absl::StrCat("pads make dim ", i, " negative (", *v, ")"));
    }
    out.push_back(d);
  }
  c.SetOutput(0, dtype, std::move(out));
  return absl::OkStatus();
}

// CenterCropPad (opset 18): the input's dims, those of `axes` (default all) set to `shape`'s.
absl::Status CenterCropPadShape(InferContext& c) {
  const Shape* x = c.input_shape(0);
  const DType dtype = c.input_dtype(0);
  if (!x) {
    c.SetOutputUnknown(0, dtype);
    return absl::OkStatus();
  }
  const int rank = static_cast<int>(x->size());
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> axes, c.GetInts("axes", {}));
  if (axes.empty())
    for (int i = 0; i < rank; ++i) axes.push_back(i);
  std::vector<Dim> sizes;
  if (const std::vector<Dim>* content = c.content(1); content != nullptr) {
    sizes = *content;
  } else if (std::optional<std::vector<int64_t>> v = ConstInts(c, 1)) {
    for (int64_t n : *v) sizes.push_back(c.sym().Const(n));
  } else {
    c.SetOutputDynamic(0, dtype, rank);
    return absl::OkStatus();
  }
  if (sizes.size() != axes.size()) {
    return c.Error(absl::StrCat("shape has ", sizes.size(), " values for ", axes.size(), " axes"));
  }
  Shape out = *x;
  for (size_t k = 0; k < axes.size(); ++k) {
    DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, axes[k], rank));
    out[ax] = sizes[k];
  }
  c.SetOutput(0, dtype, std::move(out));
  return absl::OkStatus();
}

absl::Status ShapeOfInput0(InferContext& c) { return ShapeOfInput(c, 0); }
absl::Status DepthToSpace(InferContext& c) { return BlockRearrange(c, /*to_space=*/true); }
absl::Status SpaceToDepth(InferContext& c) { return BlockRearrange(c, /*to_space=*/false); }

}  // namespace

void DefineIndexingOps(OpTable& t) {
  static constexpr OpRow kRows[] = {
      {"GatherElements", 7, "11:2:3 13:2:3", "axis:i", kPure, GatherElements},
      {"GatherND", 7, "11:2:3 12:2:3 13:2:3", "batch_dims:i", kPure, GatherND},
      {"Scatter", 7, "9:3:7 11:3:7", "axis:i", kPure, ShapeOfInput0},
      {"ScatterND", 7, "11:3:7 13:3:7 16:3:7 18:3:7", "reduction:s", kPure, SameAsInput},
      {"ScatterElements", 7, "11:3:7 13:3:7 16:3:7 18:3:7", "axis:i reduction:s", kPure,
       SameAsInput},
      {"ReverseSequence", 7, "10:2:3", "batch_axis:i time_axis:i", kPure, ShapeOfInput0},
      {"OneHot", 7, "9:3:7 11:3:7", "axis:i", kPure, OneHot},
      {"DepthToSpace", 1, "1:1:1 11:1:1 13:1:1", "blocksize:i mode:s", kPure, DepthToSpace},
      {"SpaceToDepth", 1, "1:1:1 13:1:1", "blocksize:i", kPure, SpaceToDepth},
      {"Compress", 7, "9:2:3 11:2:3", "axis:i", kPure, Compress},
      {"CenterCropPad", 7, "18:2:3", "axes:I", kPure, CenterCropPadShape},
      {ops::kPad, 2, "1:1:1 2:1:1 11:3:3 13:3:3 18:4:3 19:4:3 21:4:3 23:4:3",
       "mode:s pads:I value:f", kPure, Pad},
  };
  t.Add("", kRows);
}

}  // namespace dynvm::compiler
