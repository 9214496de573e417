// Symbolic shape functions of the ONNX operators. Each computes its outputs' dtype and shape
// as expressions of its inputs' dims; shape computations (Shape, Gather, Concat ... on dims)
// also propagate their symbolic contents so that Reshape, Expand and friends get exact shapes.
// Where an output's size depends on data, the output is dynamic (fresh symbols).
#include <algorithm>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "compiler/conv_fusion.h"
#include "compiler/op_registry.h"

namespace dynvm::compiler {
namespace {

using Shape = std::vector<Dim>;

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

Dim Numel(SymbolicContext& sym, const Shape& s) {
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
  if (c.content(0)) c.SetContent(0, *c.content(0));
  return absl::OkStatus();
}

// Elementwise ops over broadcast inputs. `out_dtype` overrides the dtype (comparisons: bool).
absl::Status Broadcasting(InferContext& c, std::optional<DType> out_dtype, bool content_arith) {
  Shape shape;
  DType dtype = DType::kF32;
  bool first = true;
  for (size_t i = 0; i < c.num_inputs(); ++i) {
    if (!c.has_input(i)) continue;
    if (first) dtype = c.input_dtype(i);
    const Shape* s = c.input_shape(i);
    if (s == nullptr) {
      c.SetOutputUnknown(0, out_dtype.value_or(dtype));
      return absl::OkStatus();
    }
    if (first) {
      shape = *s;
    } else {
      absl::StatusOr<Shape> b = BroadcastShapes(c.sym(), shape, *s);
      if (!b.ok()) return c.Error(b.status().message());
      shape = *std::move(b);
    }
    first = false;
  }
  if (first) return c.Error("no inputs");
  c.SetOutput(0, out_dtype.value_or(dtype), shape);
  // Integer arithmetic on shape values stays symbolic.
  if (content_arith && c.num_inputs() == 2 && c.content(0) && c.content(1) && shape.size() <= 1) {
    const std::vector<Dim>& a = *c.content(0);
    const std::vector<Dim>& b = *c.content(1);
    const size_t n = std::max(a.size(), b.size());
    if ((a.size() == n || a.size() == 1) && (b.size() == n || b.size() == 1)) {
      std::vector<Dim> out;
      const std::string& op = c.node().op;
      for (size_t k = 0; k < n; ++k) {
        Dim x = a[a.size() == 1 ? 0 : k], y = b[b.size() == 1 ? 0 : k];
        if (op == "Add")
          out.push_back(c.sym().Add(x, y));
        else if (op == "Sub")
          out.push_back(c.sym().Sub(x, y));
        else if (op == "Mul")
          out.push_back(c.sym().Mul(x, y));
        else if (op == "Div") {
          // ONNX integer Div truncates; for nonnegative sizes that is floor division.
          out.push_back(c.sym().FloorDiv(x, y));
        } else
          return absl::OkStatus();
      }
      c.SetContent(0, std::move(out));
    }
  }
  return absl::OkStatus();
}

absl::Status Unary(InferContext& c) { return SameAsInput(c); }

absl::Status Cast(InferContext& c) {
  DYNVM_ASSIGN_OR_RETURN(int64_t to, c.GetInt("to", 1));
  std::optional<DType> d = DTypeFromOnnx(to);
  if (!d) return c.Error(absl::StrCat("unsupported target type ", to));
  if (c.input_shape(0)) {
    c.SetOutput(0, *d, *c.input_shape(0));
  } else {
    c.SetOutputUnknown(0, *d);
  }
  if (c.content(0) && IsInteger(*d)) c.SetContent(0, *c.content(0));
  return absl::OkStatus();
}

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

absl::Status CastLike(InferContext& c) {
  if (!c.has_input(1)) return c.Error("CastLike needs two inputs");
  if (c.input_shape(0)) {
    c.SetOutput(0, c.input_dtype(1), *c.input_shape(0));
  } else {
    c.SetOutputUnknown(0, c.input_dtype(1));
  }
  return absl::OkStatus();
}

absl::Status MatMul(InferContext& c) {
  const Shape* a = c.input_shape(0);
  const Shape* b = c.input_shape(1);
  if (!a || !b) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  }
  if (a->empty() || b->empty()) return c.Error("MatMul inputs must have rank >= 1");
  Shape sa = *a, sb = *b;
  const bool a1 = sa.size() == 1, b1 = sb.size() == 1;
  if (a1) sa.insert(sa.begin(), c.sym().Const(1));
  if (b1) sb.push_back(c.sym().Const(1));
  Shape batch_a(sa.begin(), sa.end() - 2), batch_b(sb.begin(), sb.end() - 2);
  absl::StatusOr<Shape> batch = BroadcastShapes(c.sym(), batch_a, batch_b);
  if (!batch.ok()) return c.Error(batch.status().message());
  Dim ka = sa[sa.size() - 1], kb = sb[sb.size() - 2];
  auto cka = SymbolicContext::AsConst(ka), ckb = SymbolicContext::AsConst(kb);
  if (cka && ckb && *cka != *ckb) {
    return c.Error(
        absl::StrCat("inner dims differ: ", ShapeToString(*a), " x ", ShapeToString(*b)));
  }
  Shape out = *batch;
  if (!a1) out.push_back(sa[sa.size() - 2]);
  if (!b1) out.push_back(sb[sb.size() - 1]);
  c.SetOutput(0, c.input_dtype(0), out);
  return absl::OkStatus();
}

absl::Status Gemm(InferContext& c) {
  const Shape* a = c.input_shape(0);
  const Shape* b = c.input_shape(1);
  if (!a || !b || a->size() != 2 || b->size() != 2) return c.Error("Gemm inputs must be 2-D");
  absl::StatusOr<int64_t> ta = c.GetInt("transA", 0), tb = c.GetInt("transB", 0);
  if (!ta.ok()) return ta.status();
  if (!tb.ok()) return tb.status();
  Dim m = *ta ? (*a)[1] : (*a)[0];
  Dim n = *tb ? (*b)[0] : (*b)[1];
  c.SetOutput(0, c.input_dtype(0), {m, n});
  return absl::OkStatus();
}

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

absl::Status LayerNorm(InferContext& c) {
  const Shape* in = c.input_shape(0);
  if (in == nullptr) return c.Error("LayerNormalization needs a known rank");
  DYNVM_ASSIGN_OR_RETURN(int64_t axis, c.GetInt("axis", -1));
  DYNVM_ASSIGN_OR_RETURN(int ax, Axis(c, axis, static_cast<int>(in->size())));
  c.SetOutput(0, c.input_dtype(0), *in);
  Shape stat = *in;
  for (size_t i = ax; i < stat.size(); ++i) stat[i] = c.sym().Const(1);
  absl::StatusOr<int64_t> stash = c.GetInt("stash_type", 1);
  if (!stash.ok()) return stash.status();
  const DType sd = *stash == 1 ? DType::kF32 : c.input_dtype(0);
  c.SetOutput(1, sd, stat);
  c.SetOutput(2, sd, stat);
  return absl::OkStatus();
}

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
      if (in == nullptr || i >= in->size())
        return c.Error("0 in the target shape copies a dim the input lacks");
      d = (*in)[i];
    } else if (v && *v < -1) {
      return c.Error(absl::StrCat("invalid target dim ", *v));
    }
    out.push_back(d);
    known = c.sym().Mul(known, d);
  }
  if (infer >= 0) {
    if (in == nullptr) {
      c.SetOutputDynamic(0, c.input_dtype(0), static_cast<int>(out.size()));
      return absl::OkStatus();
    }
    out[infer] = c.sym().FloorDiv(Numel(c.sym(), *in), known);
  }
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
    } else {
      s = std::clamp<int64_t>(s, -1, n - 1);
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

// Equal over symbolic contents: decided where the dims allow (equal constants or the same
// expression; bounds that cannot meet, e.g. a size against -1); content 0/1.
// Greater, Less, GreaterOrEqual, LessOrEqual: when both inputs have one-element symbolic
// content that the dims' bounds decide, the result is content 0 or 1 (so an If on a rank or
// size comparison is decided at compile time: compiler/infer.cc).
absl::Status CompareOp(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(Broadcasting(c, DType::kBool, false));
  const std::vector<Dim>* a = c.content(0);
  const std::vector<Dim>* b = c.content(1);
  if (!a || !b || a->size() != 1 || b->size() != 1 || !c.has_output(0) ||
      c.node().outputs[0]->rank() != 0) {
    return absl::OkStatus();
  }
  const std::string& op = c.node().op;
  // x op y with x, y swapped for Less/LessOrEqual: decide x > y or x >= y.
  const bool swap = op == "Less" || op == "LessOrEqual";
  const bool strict = op == "Greater" || op == "Less";
  const Dim x = swap ? (*b)[0] : (*a)[0], y = swap ? (*a)[0] : (*b)[0];
  const std::optional<int64_t> lx = c.sym().LowerBound(x), ux = c.sym().UpperBound(x);
  const std::optional<int64_t> ly = c.sym().LowerBound(y), uy = c.sym().UpperBound(y);
  std::optional<bool> r;
  if (lx && uy && (strict ? *lx > *uy : *lx >= *uy)) r = true;
  if (ux && ly && (strict ? *ux <= *ly : *ux < *ly)) r = false;
  if (!strict && x == y) r = true;
  if (strict && x == y) r = false;
  if (r) c.SetContent(0, {c.sym().Const(*r ? 1 : 0)});
  return absl::OkStatus();
}

// Not: content 1 - x for bool content (0/1) of up to one dimension.
absl::Status NotOp(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(Unary(c));
  const std::vector<Dim>* a = c.content(0);
  if (!a || !c.has_output(0) || c.node().outputs[0]->rank() > 1) return absl::OkStatus();
  std::vector<Dim> out;
  for (Dim d : *a) {
    const std::optional<int64_t> v = SymbolicContext::AsConst(d);
    if (!v || (*v != 0 && *v != 1)) return absl::OkStatus();
    out.push_back(c.sym().Const(1 - *v));
  }
  c.SetContent(0, std::move(out));
  return absl::OkStatus();
}

absl::Status EqualOp(InferContext& c) {
  DYNVM_RETURN_IF_ERROR(Broadcasting(c, DType::kBool, false));
  const std::vector<Dim>* a = c.content(0);
  const std::vector<Dim>* b = c.content(1);
  if (!a || !b || !c.has_output(0) || c.node().outputs[0]->rank() < 0 ||
      c.node().outputs[0]->rank() > 1) {
    return absl::OkStatus();
  }
  const size_t n = std::max(a->size(), b->size());
  if ((a->size() != n && a->size() != 1) || (b->size() != n && b->size() != 1)) {
    return absl::OkStatus();
  }
  std::vector<Dim> out;
  for (size_t k = 0; k < n; ++k) {
    const Dim x = (*a)[a->size() == 1 ? 0 : k], y = (*b)[b->size() == 1 ? 0 : k];
    if (x == y) {
      out.push_back(c.sym().Const(1));
      continue;
    }
    const std::optional<int64_t> lx = c.sym().LowerBound(x), ux = c.sym().UpperBound(x);
    const std::optional<int64_t> ly = c.sym().LowerBound(y), uy = c.sym().UpperBound(y);
    if ((lx && uy && *lx > *uy) || (ly && ux && *ly > *ux)) {
      out.push_back(c.sym().Const(0));
      continue;
    }
    return absl::OkStatus();  // undecided: no content
  }
  c.SetContent(0, std::move(out));
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

absl::Status Where(InferContext& c) {
  absl::Status s = Broadcasting(c, std::nullopt, false);
  if (!s.ok()) return s;
  // The output dtype is X's (input 1), not the condition's.
  if (c.has_output(0)) c.node().outputs[0]->dtype = c.input_dtype(1);
  // A condition known element by element selects between symbolic contents.
  const std::vector<Dim>* cond = c.content(0);
  const std::vector<Dim>* x = c.content(1);
  const std::vector<Dim>* y = c.content(2);
  if (!cond || !x || !y || !c.has_output(0) || !IsInteger(c.input_dtype(1)) ||
      c.node().outputs[0]->rank() < 0 || c.node().outputs[0]->rank() > 1) {
    return absl::OkStatus();
  }
  const size_t n = std::max({cond->size(), x->size(), y->size()});
  std::vector<Dim> out;
  for (size_t k = 0; k < n; ++k) {
    for (const std::vector<Dim>* v : {cond, x, y}) {
      if (v->size() != n && v->size() != 1) return absl::OkStatus();
    }
    const std::optional<int64_t> pick =
        SymbolicContext::AsConst((*cond)[cond->size() == 1 ? 0 : k]);
    if (!pick) return absl::OkStatus();
    const std::vector<Dim>& from = *pick != 0 ? *x : *y;
    out.push_back(from[from.size() == 1 ? 0 : k]);
  }
  c.SetContent(0, std::move(out));
  return absl::OkStatus();
}

absl::Status Rnn(InferContext& c, int gates, bool has_c) {
  const Shape* x = c.input_shape(0);
  const Shape* w = c.input_shape(1);
  if (!x || !w || x->size() != 3 || w->size() != 3) return c.Error("X and W must be 3-D");
  DYNVM_ASSIGN_OR_RETURN(int64_t layout, c.GetInt("layout", 0));
  DYNVM_ASSIGN_OR_RETURN(std::string direction, c.GetString("direction", "forward"));
  Dim num_dir = c.sym().Const(direction == "bidirectional" ? 2 : 1);
  absl::StatusOr<int64_t> hidden_attr = c.GetInt("hidden_size", -1);
  if (!hidden_attr.ok()) return hidden_attr.status();
  Dim hidden = *hidden_attr > 0 ? c.sym().Const(*hidden_attr)
                                : c.sym().FloorDiv((*w)[1], c.sym().Const(gates));
  Dim seq = layout ? (*x)[1] : (*x)[0];
  Dim batch = layout ? (*x)[0] : (*x)[1];
  const DType t = c.input_dtype(0);
  if (layout) {
    c.SetOutput(0, t, {batch, seq, num_dir, hidden});
    c.SetOutput(1, t, {batch, num_dir, hidden});
    if (has_c) c.SetOutput(2, t, {batch, num_dir, hidden});
  } else {
    c.SetOutput(0, t, {seq, num_dir, batch, hidden});
    c.SetOutput(1, t, {num_dir, batch, hidden});
    if (has_c) c.SetOutput(2, t, {num_dir, batch, hidden});
  }
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

// NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss: the loss per target element
// (reduction "none") or a scalar; SoftmaxCrossEntropyLoss's log_prob has the scores' shape.
absl::Status Loss(InferContext& c) {
  DYNVM_ASSIGN_OR_RETURN(std::string reduction, c.GetString("reduction", "mean"));
  const DType dtype = c.input_dtype(0);
  if (reduction != "none") {
    c.SetOutput(0, dtype, {});
  } else if (c.input_shape(1)) {
    c.SetOutput(0, dtype, *c.input_shape(1));
  } else {
    c.SetOutputUnknown(0, dtype);
  }
  if (c.input_shape(0)) {
    c.SetOutput(1, dtype, *c.input_shape(0));
  } else {
    c.SetOutputUnknown(1, dtype);
  }
  return absl::OkStatus();
}

// Pooling: [N, C, spatial...]; the spatial sizes are left to the kernel (auto_pad, ceil_mode),
// except for the global pools (all ones).
absl::Status Pool(InferContext& c) {
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
    c.SetOutputUnknown(1, DType::kI64);
    return absl::OkStatus();
  }
  if (x->size() < 3) return c.Error("pooling needs an input of rank 3 or more");
  if (c.node().op == "GlobalMaxPool" || c.node().op == "GlobalAveragePool") {
    std::vector<Dim> dims(x->begin(), x->begin() + 2);
    dims.resize(x->size(), c.sym().Const(1));
    c.SetOutput(0, c.input_dtype(0), std::move(dims));
    return absl::OkStatus();
  }
  if (std::optional<std::vector<Dim>> dims = StaticPoolShape(c)) {  // compiler/conv_fusion.cc
    c.SetOutput(0, c.input_dtype(0), *dims);
    c.SetOutput(1, DType::kI64, *std::move(dims));
    return absl::OkStatus();
  }
  c.SetOutputDynamic(0, c.input_dtype(0), static_cast<int>(x->size()));
  c.SetOutputDynamic(1, DType::kI64, static_cast<int>(x->size()));
  return absl::OkStatus();
}

// Conv: [N, M, spatial...], the spatial sizes left to the kernel.
absl::Status ConvOp(InferContext& c) {
  const std::vector<Dim>* x = c.input_shape(0);
  if (x == nullptr) {
    c.SetOutputUnknown(0, c.input_dtype(0));
  } else {
    c.SetOutputDynamic(0, c.input_dtype(0), static_cast<int>(x->size()));
  }
  return absl::OkStatus();
}

// BatchNormalization: Y like X; running mean and variance (training mode) like the scale.
absl::Status BatchNorm(InferContext& c) {
  if (c.input_shape(0)) {
    c.SetOutput(0, c.input_dtype(0), *c.input_shape(0));
  } else {
    c.SetOutputUnknown(0, c.input_dtype(0));
  }
  for (size_t i = 1; i < 3; ++i) {
    if (c.input_shape(1)) {
      c.SetOutput(i, c.input_dtype(1), *c.input_shape(1));
    } else {
      c.SetOutputUnknown(i, c.input_dtype(1));
    }
  }
  return absl::OkStatus();
}

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

// HannWindow, HammingWindow, BlackmanWindow: 1-D of the size the input holds.
absl::Status WindowOp(InferContext& c) {
  DYNVM_ASSIGN_OR_RETURN(int64_t t, c.GetInt("output_datatype", 1));
  std::optional<DType> d = DTypeFromOnnx(t);
  if (!d || *d == DType::kString) return c.Error(absl::StrCat("unsupported output_datatype ", t));
  c.SetOutputDynamic(0, *d, 1);
  return absl::OkStatus();
}

// DynamicQuantizeLinear (u8, and scalar scale and zero point), Det (the batch dims). The other
// quantization operators: quant_shape_functions.cc.
absl::Status QuantOp(InferContext& c) {
  const std::string& op = c.node().op;
  const std::vector<Dim>* x = c.input_shape(0);
  if (op == "Det") {
    if (x == nullptr) {
      c.SetOutputUnknown(0, c.input_dtype(0));
    } else if (x->size() < 2) {
      return c.Error("Det needs a [..., M, M] input");
    } else {
      c.SetOutput(0, c.input_dtype(0), std::vector<Dim>(x->begin(), x->end() - 2));
    }
    return absl::OkStatus();
  }
  const DType dtype = DType::kU8;
  if (x) {
    c.SetOutput(0, dtype, *x);
  } else {
    c.SetOutputUnknown(0, dtype);
  }
  if (op == "DynamicQuantizeLinear") {
    c.SetOutput(1, DType::kF32, {});
    c.SetOutput(2, DType::kU8, {});
  }
  return absl::OkStatus();
}

void Reg(OpRegistry& r, const char* op, ShapeFn fn, bool pure = true) {
  r.Register(OpSchema{"", op, std::move(fn), pure});
}

// Elementwise ops: broadcasting arithmetic, comparisons, unary ops.
void RegisterElementwise(OpRegistry& r) {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    Reg(r, op, [](InferContext& c) { return Broadcasting(c, std::nullopt, true); });
  }
  for (const char* op :
       {"Pow", "Max", "Min", "Sum", "Mean", "Mod", "BitShift", "PRelu", "And", "Or", "Xor"}) {
    Reg(r, op, [](InferContext& c) { return Broadcasting(c, std::nullopt, false); });
  }
  Reg(r, "Equal", EqualOp);
  for (const char* op : {"Greater", "Less", "GreaterOrEqual", "LessOrEqual"}) {
    Reg(r, op, CompareOp);
  }
  Reg(r, "Not", NotOp);
  for (const char* op : {"Sqrt",
                         "Exp",
                         "Log",
                         "Neg",
                         "Abs",
                         "Erf",
                         "Tanh",
                         "Sigmoid",
                         "Relu",
                         "Floor",
                         "Ceil",
                         "Round",
                         "Sign",
                         "Reciprocal",
                         "Softplus",
                         "Softsign",
                         "LeakyRelu",
                         "Elu",
                         "Selu",
                         "Celu",
                         "HardSigmoid",
                         "HardSwish",
                         "ThresholdedRelu",
                         "Clip",
                         "Identity",
                         "Softmax",
                         "LogSoftmax",
                         "Hardmax",
                         "CumSum",
                         "Sin",
                         "Cos",
                         "Tan",
                         "Asin",
                         "Acos",
                         "Atan",
                         "Sinh",
                         "Cosh",
                         "Asinh",
                         "Acosh",
                         "Atanh",
                         "Mish",
                         "Gelu"}) {
    Reg(r, op, Unary);
  }
  Reg(r, "IsNaN", [](InferContext& c) {
    absl::Status s = SameAsInput(c);
    if (c.has_output(0)) c.node().outputs[0]->dtype = DType::kBool;
    return s;
  });
  Reg(r, "IsInf", [](InferContext& c) {
    absl::Status s = SameAsInput(c);
    if (c.has_output(0)) c.node().outputs[0]->dtype = DType::kBool;
    return s;
  });
  Reg(r, "Dropout", [](InferContext& c) {
    absl::Status s = SameAsInput(c);
    if (c.has_output(1)) c.node().outputs[1]->dtype = DType::kBool;
    return s;
  });
}

}  // namespace

void RegisterOnnxShapeFunctions(OpRegistry& r) {
  RegisterElementwise(r);
  Reg(r, "Cast", Cast);
  Reg(r, "CastLike", CastLike);
  Reg(r, "StringNormalizer", StringNormalizer);
  Reg(r, "TfIdfVectorizer", TfIdfVectorizer);
  Reg(r, "MatMul", MatMul);
  Reg(r, "Gemm", Gemm);
  for (const char* op :
       {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
        "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}) {
    Reg(r, op, Reduce);
  }
  Reg(r, "ArgMax", ArgReduce);
  Reg(r, "ArgMin", ArgReduce);
  Reg(r, "TopK", TopK);
  Reg(r, "LayerNormalization", LayerNorm);
  Reg(r, "Shape", ShapeOp);
  Reg(r, "Size", SizeOp);
  Reg(r, "Reshape", Reshape);
  Reg(r, "Flatten", Flatten);
  Reg(r, "Transpose", Transpose);
  Reg(r, "Concat", Concat);
  Reg(r, "Split", Split);
  Reg(r, "Slice", Slice);
  Reg(r, "Gather", Gather);
  Reg(r, "Unsqueeze", Unsqueeze);
  Reg(r, "Squeeze", Squeeze);
  Reg(r, "Expand", Expand);
  Reg(r, "Tile", Tile);
  Reg(r, "ConstantOfShape", ConstantOfShape);
  Reg(r, "Range", Range);
  Reg(r, "Where", Where);
  Reg(r, "Trilu", Trilu);
  Reg(r, "Constant", ConstantOp);
  Reg(r, "NegativeLogLikelihoodLoss", Loss);
  Reg(r, "Conv", InferConvShape);  // compiler/conv_fusion.cc
  for (const char* op : {"HannWindow", "HammingWindow", "BlackmanWindow"}) Reg(r, op, WindowOp);
  Reg(r, "Unique", [](InferContext& c) {
    const std::vector<Dim>* x = c.input_shape(0);
    if (c.HasAttr("axis") && x == nullptr) {
      c.SetOutputUnknown(0, c.input_dtype(0));
    } else {
      c.SetOutputDynamic(0, c.input_dtype(0), c.HasAttr("axis") ? static_cast<int>(x->size()) : 1);
    }
    for (size_t i = 1; i < 4; ++i) c.SetOutputDynamic(i, DType::kI64, 1);
    return absl::OkStatus();
  });
  Reg(r, "Einsum", [](InferContext& c) {  // the sizes come from the equation at run time
    c.SetOutputUnknown(0, c.input_dtype(0));
    return absl::OkStatus();
  });
  Reg(r, "NonMaxSuppression", [](InferContext& c) {
    c.SetOutput(0, DType::kI64, {c.sym().Fresh("selected"), c.sym().Const(3)});
    c.node().outputs[0]->dynamic = true;
    return absl::OkStatus();
  });
  for (const char* op : {"DynamicQuantizeLinear", "Det"}) Reg(r, op, QuantOp);
  Reg(r, "Resize", ConvOp);
  Reg(r, "ConvTranspose", ConvOp);
  Reg(r, "BatchNormalization", BatchNorm);
  Reg(r, "EyeLike", EyeLike);
  for (const char* op : {"InstanceNormalization", "LRN", "Shrink"}) Reg(r, op, SameAsInput);
  for (const char* op : {"MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool"})
    Reg(r, op, Pool);
  Reg(r, "SoftmaxCrossEntropyLoss", Loss);
  Reg(r, "ScatterND", SameAsInput);
  Reg(r, "ScatterElements", SameAsInput);
  Reg(r, "LSTM", [](InferContext& c) { return Rnn(c, 4, true); });
  Reg(r, "GRU", [](InferContext& c) { return Rnn(c, 3, false); });
  Reg(r, "RNN", [](InferContext& c) { return Rnn(c, 1, false); });
  Reg(r, "NonZero", [](InferContext& c) {
    if (c.input_shape(0)) {
      c.SetOutput(
          0, DType::kI64,
          {c.sym().Const(static_cast<int64_t>(c.input_shape(0)->size())), c.sym().Fresh("nnz")});
      c.node().outputs[0]->dynamic = true;
    } else {
      c.SetOutputDynamic(0, DType::kI64, 2);
    }
    return absl::OkStatus();
  });
}

}  // namespace dynvm::compiler
