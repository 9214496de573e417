// Shape and data-movement operators: Shape, Size, Reshape and the other views, Transpose,
// Concat, Split, Slice, Gather, Expand, Tile, ConstantOfShape, Range, Constant, Trilu, EyeLike,
// NonZero and Unique. Shape computations (Shape, Gather, Concat ... on dims) propagate their
// symbolic contents so that Reshape, Expand and friends get exact shapes; where an output's
// size depends on data, the output is dynamic (fresh symbols).
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

absl::Status ShapeOp(InferContext& c) {
  const Shape* in = c.input_shape(0);
  if (in == nullptr) {
    c.SetOutputDynamic(0, DType::kI64, 1);
    return absl::OkStatus();
  }
  const int rank = static_cast<int>(in->size());
  absl::StatusOr<int64_t> start = c.GetInt("start", 0), end = c.GetInt("end", rank);
  if (!start.ok()) return start.status();
  if (!end.ok()) return end.status();
  auto clamp = [rank](int64_t v) { return std::clamp<int64_t>(v < 0 ? v + rank : v, 0, rank); };
  const int64_t s = clamp(*start), e = clamp(*end);
  std::vector<Dim> content(in->begin() + s, in->begin() + std::max(s, e));
  c.SetOutput(0, DType::kI64, {c.sym().Const(static_cast<int64_t>(content.size()))});
  c.SetContent(0, std::move(content));
  return absl::OkStatus();
}

absl::Status SizeOp(InferContext& c) {
  c.SetOutput(0, DType::kI64, {});
  if (const Shape* in = c.input_shape(0)) c.SetContent(0, {Numel(c.sym(), *in)});
  return absl::OkStatus();
}

absl::Status Reshape(InferContext& c) {
  const Shape* in = c.input_shape(0);
  const std::vector<Dim>* target = c.content(1);
  const Shape* shape_shape = c.input_shape(1);
  if (target == nullptr) {
    if (shape_shape && shape_shape->size() == 1 && SymbolicContext::AsConst((*shape_shape)[0])) {
      c.SetOutputDynamic(0, c.input_dtype(0),
                         static_cast<int>(*SymbolicContext::AsConst((*shape_shape)[0])));
    } else {
      c.SetOutputUnknown(0, c.input_dtype(0));
    }
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t allowzero, c.GetInt("allowzero", 0));
  Shape out;
  int infer = -1;
  Dim known = c.sym().Const(1);
  for (size_t i = 0; i < target->size(); ++i) {
    Dim d = (*target)[i];
    auto v = SymbolicContext::AsConst(d);
    if (v && *v == -1) {
      if (infer >= 0) return c.Error("more than one -1 in the target shape");
      infer = static_cast<int>(i);
      out.push_back(d);
      continue;
    }
    if (v && *v == 0 && !allowzero) {
      if (in != nullptr && i >= in->size())
        return c.Error("0 in the target shape copies a dim the input lacks");
      // An input of unknown rank (a value built in a loop body, a branch's): the kernel copies
      // the dim at run time.
      d = in != nullptr ? (*in)[i] : c.sym().Fresh("d");
    } else if (v && *v < -1) {
      return c.Error(absl::StrCat("invalid target dim ", *v));
    }
    out.push_back(d);
    known = c.sym().Mul(known, d);
  }
  if (in == nullptr) {
    // The rank is the target's; the dims the input decides (0 and -1) come from the kernel.
    if (infer >= 0) out[infer] = c.sym().Fresh("d");
    c.SetOutput(0, c.input_dtype(0), std::move(out));
    if (c.has_output(0)) c.node().outputs[0]->dynamic = true;
    return absl::OkStatus();
  }
  if (infer >= 0) out[infer] = c.sym().FloorDiv(Numel(c.sym(), *in), known);
  if (in != nullptr) {
    auto a = SymbolicContext::AsConst(Numel(c.sym(), *in)),
         b = SymbolicContext::AsConst(Numel(c.sym(), out));
    if (a && b && *a != *b) {
      return c.Error(
          absl::StrCat("cannot reshape ", ShapeToString(*in), " to ", ShapeToString(out)));
    }
  }
  c.SetOutput(0, c.input_dtype(0), out);
  if (c.content(0) && out.size() <= 1) c.SetContent(0, *c.content(0));
  return absl::OkStatus();
}

absl::Status Flatten(InferContext& c) {
  const Shape* in = c.input_shape(0);
  if (in == nullptr) {
    c.SetOutputDynamic(0, c.input_dtype(0), 2);
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", 1));
  const int rank = static_cast<int>(in->size());
  int64_t ax = axis < 0 ? axis + rank : axis;
  if (ax < 0 || ax > rank) return c.Error(absl::StrCat("axis ", axis, " out of range"));
  Shape lo(in->begin(), in->begin() + ax), hi(in->begin() + ax, in->end());
  c.SetOutput(0, c.input_dtype(0), {Numel(c.sym(), lo), Numel(c.sym(), hi)});
  return absl::OkStatus();
}

absl::Status Transpose(InferContext& c) {
  const Shape* in = c.input_shape(0);
  if (in == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  const int rank = static_cast<int>(in->size());
  std::vector<int64_t> def(rank);
  for (int i = 0; i < rank; ++i) def[i] = rank - 1 - i;
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> perm, c.GetInts("perm", def));
  if (static_cast<int>(perm.size()) != rank) return c.Error("perm length differs from the rank");
  Shape out;
  std::vector<bool> seen(rank, false);
  for (int64_t p : perm) {
    if (p < 0 || p >= rank || seen[p]) return c.Error("perm is not a permutation");
    seen[p] = true;
    out.push_back((*in)[p]);
  }
  c.SetOutput(0, c.input_dtype(0), out);
  return absl::OkStatus();
}

absl::Status Concat(InferContext& c) {
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", 0));
  const Shape* first = nullptr;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.input_shape(i)) {
      const Shape* any = nullptr;
      for (size_t j = 0; j < c.num_inputs(); ++j)
        if (c.input_shape(j)) any = c.input_shape(j);
      if (any)
        c.SetOutputDynamic(0, c.input_dtype(0), static_cast<int>(any->size()));
      else
        c.SetOutputUnknown(0, c.input_dtype(0));
      return absl::OkStatus();
    }
    if (!first) first = c.input_shape(i);
  }
  if (!first) return c.Error("no inputs");
  const int rank = static_cast<int>(first->size());
  DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, axis, rank));
  Shape out = *first;
  out[ax] = c.sym().Const(0);
  std::vector<Dim> content;
  bool have_content = rank == 1;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    const Shape& s = *c.input_shape(i);
    if (static_cast<int>(s.size()) != rank) return c.Error("inputs differ in rank");
    out[ax] = c.sym().Add(out[ax], s[ax]);
    if (have_content && c.content(i)) {
      content.insert(content.end(), c.content(i)->begin(), c.content(i)->end());
    } else {
      have_content = false;
    }
  }
  c.SetOutput(0, c.input_dtype(0), out);
  if (have_content) c.SetContent(0, std::move(content));
  return absl::OkStatus();
}

absl::Status Split(InferContext& c) {
  const Shape* in = c.input_shape(0);
  const int n = static_cast<int>(c.num_outputs());
  if (in == nullptr) {
    for (int i = 0; i < n; ++i) c.SetOutputUnknown(i, c.input_dtype(0));
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", 0));
  DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, axis, static_cast<int>(in->size())));
  std::optional<std::vector<int64_t>> sizes;
  if (c.has_input(1)) {
    sizes = ConstInts(c, 1);
    if (!sizes) {
      for (int i = 0; i < n; ++i)
        c.SetOutputDynamic(i, c.input_dtype(0), static_cast<int>(in->size()));
      return absl::OkStatus();
    }
  } else if (c.HasAttr("split")) {
    absl::StatusOr<std::vector<int64_t>> s = c.GetInts("split");
    if (!s.ok()) return s.status();
    sizes = *s;
  }
  for (int i = 0; i < n; ++i) {
    Shape out = *in;
    if (sizes) {
      if (static_cast<int>(sizes->size()) != n)
        return c.Error("split sizes differ from the output count");
      out[ax] = c.sym().Const((*sizes)[i]);
    } else {
      // Equal parts; with num_outputs (opset 18) the last part may be smaller.
      Dim total = (*in)[ax];
      Dim part = c.sym().CeilDiv(total, c.sym().Const(n));
      out[ax] = i + 1 < n ? part : c.sym().Sub(total, c.sym().Mul(part, c.sym().Const(n - 1)));
      if (auto t = SymbolicContext::AsConst(total); t && *t % n == 0)
        out[ax] = c.sym().Const(*t / n);
    }
    c.SetOutput(i, c.input_dtype(0), out);
  }
  return absl::OkStatus();
}

// Clamps per ONNX Slice: returns the element count and resolved start.
absl::Status Slice(InferContext& c) {
  const Shape* in = c.input_shape(0);
  if (in == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  const int rank = static_cast<int>(in->size());
  std::optional<std::vector<int64_t>> starts, ends, axes, steps;
  if (c.num_inputs() >= 3) {  // opset >= 10: inputs
    starts = ConstInts(c, 1);
    ends = ConstInts(c, 2);
    if (c.has_input(3)) axes = ConstInts(c, 3);
    if (c.has_input(4)) steps = ConstInts(c, 4);
    if (!starts || !ends || (c.has_input(3) && !axes) || (c.has_input(4) && !steps)) {
      c.SetOutputDynamic(0, c.input_dtype(0), rank);
      return absl::OkStatus();
    }
  } else {
    absl::StatusOr<std::vector<int64_t>> s = c.GetInts("starts"), e = c.GetInts("ends"),
                                         a = c.GetInts("axes");
    if (!s.ok()) return s.status();
    if (!e.ok()) return e.status();
    if (!a.ok()) return a.status();
    starts = *s;
    ends = *e;
    if (!a->empty()) axes = *a;
  }
  if (!axes) {
    axes.emplace();
    for (size_t i = 0; i < starts->size(); ++i) axes->push_back(static_cast<int64_t>(i));
  }
  if (!steps) steps = std::vector<int64_t>(starts->size(), 1);
  if (starts->size() != ends->size() || axes->size() != starts->size() ||
      steps->size() != starts->size()) {
    return c.Error("starts, ends, axes and steps differ in length");
  }
  Shape out = *in;
  std::vector<Dim> content;
  for (size_t k = 0; k < axes->size(); ++k) {
    DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, (*axes)[k], rank));
    const int64_t step = (*steps)[k];
    if (step == 0) return c.Error("step 0");
    auto dim = SymbolicContext::AsConst((*in)[ax]);
    if (!dim) {
      // Symbolic dim: exact only for the common forms start >= 0, end = INT_MAX, step 1
      // (slice to the end) or 0 <= start <= end small constants with step 1.
      const int64_t s = (*starts)[k], e = (*ends)[k];
      if (step == 1 && s >= 0 && e >= (int64_t{1} << 62)) {
        out[ax] = c.sym().Max(c.sym().Sub((*in)[ax], c.sym().Const(s)), c.sym().Const(0));
        continue;
      }
      if (step == 1 && s >= 0 && e >= s && e < (int64_t{1} << 31)) {
        out[ax] =
            c.sym().Min(c.sym().Const(e - s),
                        c.sym().Max(c.sym().Sub((*in)[ax], c.sym().Const(s)), c.sym().Const(0)));
        continue;
      }
      c.SetOutputDynamic(0, c.input_dtype(0), rank);
      return absl::OkStatus();
    }
    const int64_t n = *dim;
    int64_t s = (*starts)[k], e = (*ends)[k];
    if (s < 0) s += n;
    if (e < 0) e += n;
    int64_t count;
    if (step > 0) {
      s = std::clamp<int64_t>(s, 0, n);
      e = std::clamp<int64_t>(e, 0, n);
      count = e > s ? (e - s + step - 1) / step : 0;
    } else if (n == 0) {
      count = 0;
    } else {
      // Stepping backwards the start is clamped to [0, n - 1] and the end to [-1, n - 1]
      // (the spec's text; numpy would clamp a start before the first element to -1).
      s = std::clamp<int64_t>(s, 0, n - 1);
      e = std::clamp<int64_t>(e, -1, n - 1);
      count = s > e ? (s - e + (-step) - 1) / (-step) : 0;
    }
    out[ax] = c.sym().Const(count);
    if (rank == 1 && c.content(0)) {
      for (int64_t i = 0; i < count; ++i) content.push_back((*c.content(0))[s + i * step]);
    }
  }
  c.SetOutput(0, c.input_dtype(0), out);
  if (rank == 1 && c.content(0) && axes->size() == 1) c.SetContent(0, std::move(content));
  return absl::OkStatus();
}

absl::Status Gather(InferContext& c) {
  const Shape* data = c.input_shape(0);
  const Shape* idx = c.input_shape(1);
  if (!data || !idx) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", 0));
  DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, axis, static_cast<int>(data->size())));
  Shape out(data->begin(), data->begin() + ax);
  out.insert(out.end(), idx->begin(), idx->end());
  out.insert(out.end(), data->begin() + ax + 1, data->end());
  c.SetOutput(0, c.input_dtype(0), out);
  // Gathering from a shape: symbolic content.
  if (data->size() == 1 && c.content(0) && idx->size() <= 1) {
    std::optional<std::vector<int64_t>> indices = ConstInts(c, 1);
    if (indices) {
      const int64_t n = static_cast<int64_t>(c.content(0)->size());
      std::vector<Dim> content;
      for (int64_t i : *indices) {
        if (i < -n || i >= n)
          return c.Error(absl::StrCat("index ", i, " out of range for ", n, " elements"));
        content.push_back((*c.content(0))[i < 0 ? i + n : i]);
      }
      c.SetContent(0, std::move(content));
    }
  }
  return absl::OkStatus();
}

absl::Status Unsqueeze(InferContext& c) {
  const Shape* in = c.input_shape(0);
  std::optional<std::vector<int64_t>> axes;
  if (c.has_input(1)) {
    axes = ConstInts(c, 1);
  } else {
    DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> a, c.GetInts("axes"));
    axes = a;
  }
  if (!in || !axes) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  const int out_rank = static_cast<int>(in->size() + axes->size());
  std::vector<bool> is_new(out_rank, false);
  for (int64_t a : *axes) {
    DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, a, out_rank));
    if (is_new[ax]) return c.Error("duplicate axis");
    is_new[ax] = true;
  }
  Shape out;
  size_t k = 0;
  for (int i = 0; i < out_rank; ++i) out.push_back(is_new[i] ? c.sym().Const(1) : (*in)[k++]);
  c.SetOutput(0, c.input_dtype(0), out);
  if (c.content(0) && out.size() <= 1) c.SetContent(0, *c.content(0));
  return absl::OkStatus();
}

absl::Status Squeeze(InferContext& c) {
  const Shape* in = c.input_shape(0);
  std::optional<std::vector<int64_t>> axes;
  if (c.has_input(1)) {
    axes = ConstInts(c, 1);
    if (!axes) {
      c.SetOutputUnknown(0, c.input_dtype(0));
      return absl::OkStatus();
    }
  } else if (c.HasAttr("axes")) {
    DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> a, c.GetInts("axes"));
    axes = a;
  }
  if (!in) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  const int rank = static_cast<int>(in->size());
  std::vector<bool> drop(rank, false);
  if (axes) {
    for (int64_t a : *axes) {
      DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, a, rank));
      auto d = SymbolicContext::AsConst((*in)[ax]);
      if (d && *d != 1) return c.Error(absl::StrCat("cannot squeeze dim ", ax, " of size ", *d));
      drop[ax] = true;
    }
  } else {
    for (int i = 0; i < rank; ++i) {
      auto d = SymbolicContext::AsConst((*in)[i]);
      if (!d) {
        c.SetOutputUnknown(0, c.input_dtype(0));
        return absl::OkStatus();
      }
      drop[i] = *d == 1;
    }
  }
  Shape out;
  for (int i = 0; i < rank; ++i)
    if (!drop[i]) out.push_back((*in)[i]);
  c.SetOutput(0, c.input_dtype(0), out);
  if (c.content(0)) c.SetContent(0, *c.content(0));
  return absl::OkStatus();
}

absl::Status Expand(InferContext& c) {
  const Shape* in = c.input_shape(0);
  const std::vector<Dim>* target = c.content(1);
  if (!in || !target) {
    const Shape* ss = c.input_shape(1);
    if (in && ss && ss->size() == 1 && SymbolicContext::AsConst((*ss)[0])) {
      c.SetOutputDynamic(0, c.input_dtype(0),
                         std::max<int>(in->size(), *SymbolicContext::AsConst((*ss)[0])));
    } else {
      c.SetOutputUnknown(0, c.input_dtype(0));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<Shape> out = BroadcastShapes(c.sym(), *in, *target);
  if (!out.ok()) return c.Error(out.status().message());
  c.SetOutput(0, c.input_dtype(0), *out);
  return absl::OkStatus();
}

absl::Status Tile(InferContext& c) {
  const Shape* in = c.input_shape(0);
  const std::vector<Dim>* reps = c.content(1);
  if (!in || !reps) {
    if (in)
      c.SetOutputDynamic(0, c.input_dtype(0), static_cast<int>(in->size()));
    else
      c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  if (reps->size() != in->size()) return c.Error("repeats length differs from the rank");
  Shape out;
  for (size_t i = 0; i < in->size(); ++i) out.push_back(c.sym().Mul((*in)[i], (*reps)[i]));
  c.SetOutput(0, c.input_dtype(0), out);
  return absl::OkStatus();
}

absl::Status ConstantOfShape(InferContext& c) {
  DType dtype = DType::kF32;
  if (const AttrValue* v = c.node().attr("value")) {
    if (v->type != AttrValue::Type::kTensor) return c.Error("value must be a tensor");
    dtype = v->tensor.dtype();
  }
  const std::vector<Dim>* target = c.content(0);
  if (!target) {
    const Shape* ss = c.input_shape(0);
    if (ss && ss->size() == 1 && SymbolicContext::AsConst((*ss)[0])) {
      c.SetOutputDynamic(0, dtype, static_cast<int>(*SymbolicContext::AsConst((*ss)[0])));
    } else {
      c.SetOutputUnknown(0, dtype);
    }
    return absl::OkStatus();
  }
  c.SetOutput(0, dtype, *target);
  // A short integer vector of one value (torch's `ones_like(shape)` in the -1 guard of every
  // scripted expand/reshape) keeps its elements as content, so the guard folds symbolically.
  constexpr int64_t kMaxContent = 16;
  const std::optional<int64_t> n =
      target->size() == 1 ? SymbolicContext::AsConst((*target)[0]) : std::nullopt;
  if (n && *n >= 0 && *n <= kMaxContent && (dtype == DType::kI64 || dtype == DType::kI32)) {
    int64_t value = 0;
    if (const AttrValue* v = c.node().attr("value")) {
      if (v->tensor.numel() != 1) return c.Error("value must have one element");
      value = v->tensor.dtype() == DType::kI32 ? v->tensor.data<int32_t>()[0]
                                               : v->tensor.data<int64_t>()[0];
    }
    c.SetContent(0, std::vector<Dim>(*n, c.sym().Const(value)));
  }
  return absl::OkStatus();
}

absl::Status Range(InferContext& c) {
  const DType dtype = c.input_dtype(0);
  const std::vector<Dim>* s = c.content(0);
  const std::vector<Dim>* l = c.content(1);
  const std::vector<Dim>* d = c.content(2);
  if (s && l && d && s->size() == 1 && l->size() == 1 && d->size() == 1) {
    auto dv = SymbolicContext::AsConst((*d)[0]);
    if (dv && *dv > 0) {
      Dim n =
          c.sym().Max(c.sym().CeilDiv(c.sym().Sub((*l)[0], (*s)[0]), (*d)[0]), c.sym().Const(0));
      c.SetOutput(0, dtype, {n});
      return absl::OkStatus();
    }
  }
  c.SetOutputDynamic(0, dtype, 1);
  return absl::OkStatus();
}

absl::Status ConstantOp(InferContext& c) {
  // Constant nodes are turned into constant values by the importer; this covers the builder.
  const AttrValue* v = c.node().attr("value");
  if (v == nullptr || v->type != AttrValue::Type::kTensor)
    return c.Error("Constant needs a tensor 'value'");
  c.SetOutput(0, v->tensor.dtype(), c.module().ConstShape(v->tensor.dims()));
  return absl::OkStatus();
}

absl::Status Trilu(InferContext& c) { return SameAsInput(c); }

// EyeLike: the input's shape, the 'dtype' attribute's element type (else the input's).
absl::Status EyeLike(InferContext& c) {
  DYNVM_ASSIGN_OR_RETURN(int64_t t, c.GetInt("dtype", -1));
  DType dtype = c.input_dtype(0);
  if (t >= 0) {
    std::optional<DType> d = DTypeFromOnnx(t);
    if (!d) return c.Error(absl::StrCat("unsupported dtype ", t));
    dtype = *d;
  }
  if (c.input_shape(0)) {
    c.SetOutput(0, dtype, *c.input_shape(0));
  } else {
    c.SetOutputUnknown(0, dtype);
  }
  return absl::OkStatus();
}

// NonZero: [max(rank, 1), nnz], nnz decided by the kernel.
absl::Status NonZeroShape(InferContext& c) {
  if (c.input_shape(0)) {
    // A scalar reads as a one-element vector (numpy, ONNX Runtime and the kernel): one row.
    const int64_t rows = std::max<int64_t>(static_cast<int64_t>(c.input_shape(0)->size()), 1);
    c.SetOutput(0, DType::kI64, {c.sym().Const(rows), c.sym().Fresh("nnz")});
    if (c.has_output(0)) c.node().outputs[0]->dynamic = true;
  } else {
    c.SetOutputDynamic(0, DType::kI64, 2);
  }
  return absl::OkStatus();
}

// Unique: the values (1-D, or the input's rank along `axis`) and three i64 index vectors, their
// sizes decided by the kernel.
absl::Status UniqueShape(InferContext& c) {
  const std::vector<Dim>* x = c.input_shape(0);
  if (c.HasAttr("axis") && x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
  } else {
    c.SetOutputDynamic(0, c.input_dtype(0), c.HasAttr("axis") ? static_cast<int>(x->size()) : 1);
  }
  for (size_t i = 1; i < 4; ++i) c.SetOutputDynamic(i, DType::kI64, 1);
  return absl::OkStatus();
}

}  // namespace

void DefineTensorOps(OpTable& t) {
  static constexpr OpRow kRows[] = {
      {ops::kShape, 1, "1:1:1 13:1:1 15:1:1 19:1:1 21:1:1 23:1:1", "end:i start:i",
       kPure | kShapeArith, ShapeOp},
      {ops::kSize, 1, "1:1:1 13:1:1 19:1:1 21:1:1 23:1:1", "", kPure | kShapeArith, SizeOp},
      {ops::kReshape, 5, "1:1:1 5:2:3 13:2:3 14:2:3 19:2:3 21:2:3 23:2:3", "allowzero:i",
       kPure | kView | kShapeArith, Reshape},
      {ops::kFlatten, 1, "1:1:1 9:1:1 11:1:1 13:1:1 21:1:1 23:1:1", "axis:i",
       kPure | kView | kShapeArith, Flatten},
      {ops::kSqueeze, 1, "1:1:1 11:1:1 13:2:1 21:2:1 23:2:1", "axes:I", kPure | kView | kShapeArith,
       Squeeze},
      {ops::kUnsqueeze, 1, "1:1:1 11:1:1 13:2:3 21:2:3 23:2:3", "axes:I",
       kPure | kView | kShapeArith, Unsqueeze},
      {ops::kTranspose, 1, "1:1:1 13:1:1 21:1:1 23:1:1", "perm:I", kPure, Transpose},
      {ops::kConcat, 4, "1:0:1 4:0:1 11:0:1 13:0:1", "axis:i", kPure | kShapeArith, Concat},
      {"Split", 2, "1:2:1 2:1:1 11:1:1 13:2:1 18:2:1", "axis:i num_outputs:i@18 split:I", kPure,
       Split},
      {ops::kSlice, 1, "1:1:1 10:5:7 11:5:7 13:5:7", "axes:I ends:I starts:I", kPure | kShapeArith,
       Slice},
      {ops::kGather, 1, "1:2:3 11:2:3 13:2:3", "axis:i", kPure | kShapeArith, Gather},
      {"Expand", 7, "8:2:3 13:2:3", "", kPure, Expand},
      {"Tile", 6, "1:3:7 6:2:3 13:2:3", "", kPure, Tile},
      {"ConstantOfShape", 7, "9:1:1 20:1:1 21:1:1 23:1:1", "value:t", kPure, ConstantOfShape},
      {"Range", 7, "11:3:7", "", kPure, Range},
      {ops::kConstant, 1, "1:0:0 9:0:0 11:0:0 12:0:0 13:0:0 19:0:0 21:0:0 23:0:0",
       "sparse_value:x value:t value_float:f value_floats:F value_int:i value_ints:I "
       "value_string:s value_strings:S",
       kPure | kNoKernel, ConstantOp},
      {"Trilu", 7, "14:2:1", "upper:i", kPure, Trilu},
      {"EyeLike", 7, "9:1:1 22:1:1", "dtype:i k:i", kPure, EyeLike},
      {"NonZero", 7, "9:1:1 13:1:1", "", kPure, NonZeroShape},
      {"Unique", 7, "11:1:1", "axis:i sorted:i", kPure, UniqueShape},
  };
  t.Add("", kRows);
}

}  // namespace dynvm::compiler
