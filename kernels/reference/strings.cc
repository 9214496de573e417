// Reference kernels on string tensors (docs/strings.md): Cast and CastLike to and from
// strings, Equal, Concat, Gather, Identity, Reshape, Flatten, Squeeze, Unsqueeze,
// StringNormalizer, and TfIdfVectorizer (over integers or strings). Every string output is
// allocated here with its bytes (MakeStringTensor), never preallocated.
#include "kernels/strings.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>
#include <map>
#include <string>
#include <type_traits>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"
#include "kernels/reference/data_movement.h"
#include "kernels/reference/reference.h"

namespace dynvm::reference {
namespace {

using Inputs = absl::Span<const Tensor* const>;
using Outputs = absl::Span<Tensor* const>;
constexpr uint8_t kStr = static_cast<uint8_t>(DType::kString);

bool HasStringPort(const KernelSpec& spec) {
  for (const auto* ports : {&spec.inputs, &spec.outputs}) {
    for (const PortSpec& p : *ports) {
      if (p.dtype == kStr) return true;
    }
  }
  return false;
}

absl::Status Emit(KernelContext& ctx, Tensor* out, absl::Span<const int64_t> dims,
                  const std::function<absl::string_view(int64_t)>& get) {
  if (out->defined()) {  // the verifier makes string outputs dynamic; a test might not
    return absl::InvalidArgumentError("a string output must be dynamic (docs/strings.md)");
  }
  DYNVM_ASSIGN_OR_RETURN(*out,
                         MakeStringTensor(ctx.allocator(), ctx.allocator_keep_alive(), dims, get));
  return absl::OkStatus();
}

absl::Status CheckString(const Tensor* t, absl::string_view op, absl::string_view what) {
  if (t == nullptr || !t->defined() || t->dtype() != DType::kString) {
    return absl::InvalidArgumentError(absl::StrCat(op, ": ", what, " must be a string tensor"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// Cast

// ONNX's rules: "NaN", "INF", "-INF" (any case, "+INF" and "Infinity" too) and decimal or
// scientific notation for floats; decimal integers for integer types, out-of-range refused.
template <typename T>
absl::Status ParseNumber(absl::string_view s, T* out) {
  s = absl::StripAsciiWhitespace(s);
  if constexpr (std::is_same_v<T, bool>) {
    double v;
    if (!absl::SimpleAtod(s, &v)) return absl::InvalidArgumentError("not a number");
    *out = v != 0;
  } else if constexpr (std::is_integral_v<T>) {
    int64_t v;
    uint64_t u;
    if constexpr (std::is_signed_v<T>) {
      if (!absl::SimpleAtoi(s, &v) || v < std::numeric_limits<T>::min() ||
          v > std::numeric_limits<T>::max()) {
        return absl::InvalidArgumentError("not an integer in range");
      }
      *out = static_cast<T>(v);
    } else {
      if (!absl::SimpleAtoi(s, &u) || u > std::numeric_limits<T>::max()) {
        return absl::InvalidArgumentError("not an integer in range");
      }
      *out = static_cast<T>(u);
    }
  } else {
    double v;
    if (!absl::SimpleAtod(s, &v)) return absl::InvalidArgumentError("not a number");
    if constexpr (std::is_same_v<T, double>) {
      *out = v;
    } else if constexpr (std::is_same_v<T, float>) {
      // Parse as float directly for correct rounding of the decimal string.
      float f;
      if (!absl::SimpleAtof(s, &f)) return absl::InvalidArgumentError("not a number");
      *out = f;
    } else {
      *out = T(static_cast<float>(v));  // Half, BFloat16
    }
  }
  return absl::OkStatus();
}

// Shortest round-trip text (as numpy's str of the same type), "NaN", "INF", "-INF".
template <typename T>
std::string FormatNumber(T v) {
  if constexpr (std::is_same_v<T, bool>) {
    return v ? "1" : "0";
  } else if constexpr (std::is_integral_v<T>) {
    return absl::StrCat(v);
  } else {
    using F = std::conditional_t<std::is_same_v<T, double>, double, float>;
    const F f = static_cast<F>(v);
    if (std::isnan(f)) return "NaN";
    if (std::isinf(f)) return f < 0 ? "-INF" : "INF";
    char buf[64];
    std::to_chars_result r = std::to_chars(buf, buf + sizeof(buf), f);
    return std::string(buf, r.ptr);
  }
}

struct CastAttrs {
  DType to;
};

absl::Status RunCast(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const DType to = static_cast<const CastAttrs*>(attrs)->to;
  const Tensor& x = *in[0];
  if (x.dtype() == DType::kString && to == DType::kString) {
    return Emit(ctx, out[0], x.dims(), [&](int64_t i) { return StringAt(x, i); });
  }
  if (to == DType::kString) {
    std::vector<std::string> text(static_cast<size_t>(x.numel()));
    DYNVM_RETURN_IF_ERROR(DispatchNumeric(x.dtype(), "Cast", [&](auto* tag) {
      using T = std::remove_pointer_t<decltype(tag)>;
      const T* p = x.data<T>();
      for (int64_t i = 0; i < x.numel(); ++i) text[i] = FormatNumber<T>(p[x.ElementOffset(i)]);
      return absl::OkStatus();
    }));
    return Emit(ctx, out[0], x.dims(), [&](int64_t i) { return absl::string_view(text[i]); });
  }
  DYNVM_RETURN_IF_ERROR(CheckString(&x, "Cast", "input"));
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], to, x.dims(), "Cast"));
  return DispatchNumeric(to, "Cast", [&](auto* tag) -> absl::Status {
    using T = std::remove_pointer_t<decltype(tag)>;
    T* o = out[0]->template data<T>();
    for (int64_t i = 0; i < x.numel(); ++i) {
      const absl::string_view s = StringAt(x, i);
      absl::Status st = ParseNumber<T>(s, &o[i]);
      if (!st.ok()) {
        return absl::InvalidArgumentError(absl::StrCat("Cast: string element ", i, " \"",
                                                       absl::CHexEscape(s.substr(0, 64)), "\" is ",
                                                       st.message(), " for ", DTypeName(to)));
      }
    }
    return absl::OkStatus();
  });
}

// ---------------------------------------------------------------------------------------------
// Equal

absl::Status RunEqual(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(CheckString(in[0], "Equal", "A"));
  DYNVM_RETURN_IF_ERROR(CheckString(in[1], "Equal", "B"));
  const Tensor &a = *in[0], &b = *in[1];
  DYNVM_ASSIGN_OR_RETURN(Dims dims, BroadcastShapes(a.dims(), b.dims()));
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kBool, dims, "Equal"));
  const Dims sa = BroadcastStrides(a, dims), sb = BroadcastStrides(b, dims);
  const StringRef *pa = a.data<StringRef>(), *pb = b.data<StringRef>();
  bool* o = out[0]->data<bool>();
  int64_t k = 0;
  ForEachOffset<2>(dims, {absl::MakeConstSpan(sa), absl::MakeConstSpan(sb)},
                   [&](int64_t ia, int64_t ib) { o[k++] = ToView(pa[ia]) == ToView(pb[ib]); });
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------------------------
// StringConcat, StringSplit (opset 20)

absl::Status RunStringConcat(const void*, KernelContext& ctx, Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(CheckString(in[0], "StringConcat", "X"));
  DYNVM_RETURN_IF_ERROR(CheckString(in[1], "StringConcat", "Y"));
  const Tensor &a = *in[0], &b = *in[1];
  DYNVM_ASSIGN_OR_RETURN(Dims dims, BroadcastShapes(a.dims(), b.dims()));
  const Dims sa = BroadcastStrides(a, dims), sb = BroadcastStrides(b, dims);
  const StringRef *pa = a.data<StringRef>(), *pb = b.data<StringRef>();
  std::vector<std::string> joined;
  ForEachOffset<2>(dims, {absl::MakeConstSpan(sa), absl::MakeConstSpan(sb)},
                   [&](int64_t ia, int64_t ib) {
                     joined.push_back(absl::StrCat(ToView(pa[ia]), ToView(pb[ib])));
                   });
  return Emit(ctx, out[0], dims, [&](int64_t i) { return absl::string_view(joined[i]); });
}

struct SplitAttrs {
  std::string delimiter;  // empty: runs of whitespace, none at the ends (Python's str.split())
  int64_t maxsplit = -1;  // negative: no limit
};

// The substrings of `s`, as Python's s.split(delimiter, maxsplit) (split() without one).
std::vector<absl::string_view> SplitOne(absl::string_view s, const SplitAttrs& a) {
  std::vector<absl::string_view> parts;
  int64_t splits = 0;
  const bool limited = a.maxsplit >= 0;
  if (!a.delimiter.empty()) {
    size_t start = 0;
    while (!limited || splits < a.maxsplit) {
      const size_t at = s.find(a.delimiter, start);
      if (at == absl::string_view::npos) break;
      parts.push_back(s.substr(start, at - start));
      start = at + a.delimiter.size();
      ++splits;
    }
    parts.push_back(s.substr(start));
    return parts;
  }
  auto space = [](char ch) { return ch == ' ' || (ch >= '\t' && ch <= '\r'); };
  size_t i = 0;
  while (true) {
    while (i < s.size() && space(s[i])) ++i;
    if (i == s.size()) break;
    if (limited && splits == a.maxsplit) {  // the rest as it is (Python keeps its whitespace)
      parts.push_back(s.substr(i));
      break;
    }
    const size_t begin = i;
    while (i < s.size() && !space(s[i])) ++i;
    parts.push_back(s.substr(begin, i - begin));
    ++splits;
  }
  return parts;
}

absl::Status RunStringSplit(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const SplitAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckString(in[0], "StringSplit", "X"));
  const Tensor& x = *in[0];
  std::vector<std::vector<absl::string_view>> parts(x.numel());
  int64_t most = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    parts[i] = SplitOne(StringAt(x, i), a);
    most = std::max<int64_t>(most, static_cast<int64_t>(parts[i].size()));
  }
  Dims dims(x.dims().begin(), x.dims().end());
  if (out.size() > 1 && out[1] != nullptr) {
    DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[1], DType::kI64, dims, "StringSplit"));
    for (int64_t i = 0; i < x.numel(); ++i)
      out[1]->data<int64_t>()[i] = static_cast<int64_t>(parts[i].size());
  }
  dims.push_back(most);
  return Emit(ctx, out[0], dims, [&](int64_t i) {
    const std::vector<absl::string_view>& p = parts[i / most];
    const size_t k = static_cast<size_t>(i % most);
    return k < p.size() ? p[k] : absl::string_view();
  });
}

// ---------------------------------------------------------------------------------------------
// Data movement: each makes a contiguous copy with its own bytes.

struct AxisAttrs {
  int64_t axis = 0;
  int64_t allowzero = 0;
  std::vector<int64_t> axes;  // Squeeze/Unsqueeze before opset 13
  bool has_axes = false;
};

absl::Status RunConcat(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const AxisAttrs*>(attrs);
  if (in.empty()) return absl::InvalidArgumentError("Concat: no inputs");
  for (const Tensor* t : in) DYNVM_RETURN_IF_ERROR(CheckString(t, "Concat", "each input"));
  const Tensor& first = *in[0];
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(a.axis, first.rank(), "Concat"));
  Dims dims(first.dims().begin(), first.dims().end());
  dims[axis] = 0;
  for (const Tensor* t : in) {
    if (t->rank() != first.rank()) return absl::InvalidArgumentError("Concat: ranks differ");
    for (int d = 0; d < first.rank(); ++d) {
      if (d != axis && t->dim(d) != first.dim(d)) {
        return absl::InvalidArgumentError(absl::StrCat("Concat: ", t->ShapeString(), " and ",
                                                       first.ShapeString(), " differ off axis"));
      }
    }
    dims[axis] += t->dim(axis);
  }
  int64_t outer = 1, inner = 1;
  for (int d = 0; d < axis; ++d) outer *= dims[d];
  for (int d = axis + 1; d < first.rank(); ++d) inner *= dims[d];
  const int64_t row = dims[axis] * inner;
  return Emit(ctx, out[0], dims, [&](int64_t i) {
    const int64_t o = i / std::max<int64_t>(row, 1);
    int64_t r = i % std::max<int64_t>(row, 1);
    for (const Tensor* t : in) {
      const int64_t part = t->dim(axis) * inner;
      if (r < part) return StringAt(*t, o * part + r);
      r -= part;
    }
    return absl::string_view();  // unreachable: i < numel
  });
}

absl::Status RunGather(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const AxisAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckString(in[0], "Gather", "data"));
  const Tensor& x = *in[0];
  if (x.rank() == 0) return absl::InvalidArgumentError("Gather: data must have rank >= 1");
  DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(a.axis, x.rank(), "Gather"));
  DYNVM_ASSIGN_OR_RETURN(absl::Span<int64_t> idx,
                         ReadIndexTensor(ctx, *in[1], "Gather", "indices"));
  const int64_t n = x.dim(axis);
  std::vector<int64_t> index(idx.begin(), idx.end());
  for (int64_t& v : index) {
    if (v < -n || v >= n) {
      return absl::InvalidArgumentError(
          absl::StrCat("Gather: index ", v, " out of range for axis of size ", n));
    }
    if (v < 0) v += n;
  }
  Dims dims;
  for (int d = 0; d < axis; ++d) dims.push_back(x.dim(d));
  for (int64_t d : in[1]->dims()) dims.push_back(d);
  int64_t inner = 1;
  for (int d = axis + 1; d < x.rank(); ++d) {
    dims.push_back(x.dim(d));
    inner *= x.dim(d);
  }
  const int64_t k = static_cast<int64_t>(index.size());
  return Emit(ctx, out[0], dims, [&](int64_t i) {
    const int64_t in_ = i % inner, j = (i / inner) % k, o = i / (inner * k);
    return StringAt(x, (o * n + index[j]) * inner + in_);
  });
}

// Identity, Reshape, Flatten, Squeeze, Unsqueeze where the compiler could not make a view.
absl::Status RunReshapeLike(const std::string& op, const AxisAttrs& a, KernelContext& ctx,
                            Inputs in, Outputs out) {
  DYNVM_RETURN_IF_ERROR(CheckString(in[0], op, "input"));
  const Tensor& x = *in[0];
  Dims dims;
  if (op == "Identity") {
    dims.assign(x.dims().begin(), x.dims().end());
  } else if (op == "Reshape") {
    if (in.size() < 2 || in[1] == nullptr) return absl::InvalidArgumentError("Reshape: no shape");
    DYNVM_ASSIGN_OR_RETURN(Dims shape, ReadInts(*in[1], "Reshape", "shape"));
    int infer = -1;
    int64_t known = 1;
    for (size_t d = 0; d < shape.size(); ++d) {
      if (shape[d] == 0 && a.allowzero == 0) {
        if (d >= static_cast<size_t>(x.rank()))
          return absl::InvalidArgumentError("Reshape: 0 past the input's rank");
        shape[d] = x.dim(static_cast<int>(d));
      }
      if (shape[d] == -1) {
        if (infer >= 0) return absl::InvalidArgumentError("Reshape: two -1 dims");
        infer = static_cast<int>(d);
      } else if (shape[d] < 0 || __builtin_mul_overflow(known, shape[d], &known)) {
        return absl::InvalidArgumentError("Reshape: invalid shape");
      }
    }
    if (infer >= 0) {
      if (known == 0 || x.numel() % known != 0)
        return absl::InvalidArgumentError("Reshape: cannot infer the -1 dim");
      shape[infer] = x.numel() / known;
      known *= shape[infer];
    }
    if (known != x.numel()) {
      return absl::InvalidArgumentError(absl::StrCat("Reshape: ", x.ShapeString(), " has ",
                                                     x.numel(), " elements, the shape ", known));
    }
    dims = shape;
  } else if (op == "Flatten") {
    DYNVM_ASSIGN_OR_RETURN(int axis, NormalizeAxis(a.axis, x.rank() + 1, "Flatten"));
    int64_t outer = 1;
    for (int d = 0; d < axis; ++d) outer *= x.dim(d);
    dims = {outer, outer == 0 ? 0 : x.numel() / outer};
  } else {  // Squeeze, Unsqueeze
    Dims axes;
    if (in.size() > 1 && in[1] != nullptr) {
      DYNVM_ASSIGN_OR_RETURN(axes, ReadInts(*in[1], op, "axes"));
    } else if (a.has_axes) {
      axes.assign(a.axes.begin(), a.axes.end());
    }
    const bool squeeze = op == "Squeeze";
    const int rank = x.rank() + (squeeze ? 0 : static_cast<int>(axes.size()));
    std::vector<bool> marked(static_cast<size_t>(rank), false);
    for (int64_t v : axes) {
      DYNVM_ASSIGN_OR_RETURN(int ax, NormalizeAxis(v, rank, op));
      if (marked[ax]) return absl::InvalidArgumentError(absl::StrCat(op, ": repeated axis"));
      marked[ax] = true;
    }
    if (squeeze) {
      for (int d = 0; d < x.rank(); ++d) {
        if (axes.empty() ? x.dim(d) == 1 : marked[d]) {
          if (x.dim(d) != 1)
            return absl::InvalidArgumentError(absl::StrCat("Squeeze: axis ", d, " is not 1"));
          continue;
        }
        dims.push_back(x.dim(d));
      }
    } else {
      int src = 0;
      for (int d = 0; d < rank; ++d) dims.push_back(marked[d] ? 1 : x.dim(src++));
    }
  }
  return Emit(ctx, out[0], dims, [&](int64_t i) { return StringAt(x, i); });
}

// ---------------------------------------------------------------------------------------------
// StringNormalizer

struct NormalizerAttrs {
  enum class Case { kNone, kLower, kUpper } change = Case::kNone;
  bool case_sensitive = false;
  absl::flat_hash_set<std::string> stopwords;  // lower-cased when not case sensitive
};

// Case changes and case-insensitive matching apply to ASCII letters; other characters (every
// byte >= 0x80, so multi-byte UTF-8 sequences) pass through unchanged (docs/strings.md).
absl::Status RunStringNormalizer(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const NormalizerAttrs*>(attrs);
  DYNVM_RETURN_IF_ERROR(CheckString(in[0], "StringNormalizer", "X"));
  const Tensor& x = *in[0];
  if (!(x.rank() == 1 || (x.rank() == 2 && x.dim(0) == 1))) {
    return absl::InvalidArgumentError(
        absl::StrCat("StringNormalizer: X must be [C] or [1, C], got ", x.ShapeString()));
  }
  std::vector<std::string> kept;
  for (int64_t i = 0; i < x.numel(); ++i) {
    const absl::string_view s = StringAt(x, i);
    const std::string key = a.case_sensitive ? std::string(s) : absl::AsciiStrToLower(s);
    if (a.stopwords.contains(key)) continue;
    std::string v(s);
    if (a.change == NormalizerAttrs::Case::kLower) absl::AsciiStrToLower(&v);
    if (a.change == NormalizerAttrs::Case::kUpper) absl::AsciiStrToUpper(&v);
    kept.push_back(std::move(v));
  }
  if (kept.empty()) kept.emplace_back();  // ONNX: an all-stopword input gives one ""
  const int64_t c = static_cast<int64_t>(kept.size());
  Dims dims = x.rank() == 1 ? Dims{c} : Dims{1, c};
  return Emit(ctx, out[0], dims, [&](int64_t i) { return absl::string_view(kept[i]); });
}

// ---------------------------------------------------------------------------------------------
// TfIdfVectorizer

struct TfIdfAttrs {
  enum class Mode { kTF, kIDF, kTFIDF } mode = Mode::kTF;
  int64_t min_gram = 1, max_gram = 1, max_skip = 0;
  int64_t out_size = 0;
  std::vector<float> weights;  // by output index; empty: 1
  bool strings = false;
  // n-gram (its items, as int64 or as the string) -> output index.
  std::map<std::vector<int64_t>, int64_t> int_grams;
  std::map<std::vector<std::string>, int64_t> str_grams;
};

template <typename Key, typename Item>
void CountRow(const TfIdfAttrs& a, const std::map<std::vector<Key>, int64_t>& grams, int64_t c,
              const Item& item, float* counts) {
  int64_t start_n = a.min_gram;
  std::vector<Key> gram;
  for (int64_t skip = 0; skip <= a.max_skip; ++skip) {
    const int64_t step = skip + 1;
    for (int64_t i = 0; i < c; ++i) {
      gram.clear();
      for (int64_t n = 1, p = i; n <= a.max_gram && p < c; ++n, p += step) {
        gram.push_back(item(p));
        if (n < start_n) continue;
        auto it = grams.find(gram);
        if (it != grams.end()) counts[it->second] += 1;
      }
    }
    // Unigrams count once, not once per skip distance.
    if (start_n == 1) start_n = 2;
    if (start_n > a.max_gram) break;
  }
}

absl::Status RunTfIdf(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  const auto& a = *static_cast<const TfIdfAttrs*>(attrs);
  const Tensor& x = *in[0];
  if (x.rank() != 1 && x.rank() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("TfIdfVectorizer: X must be [C] or [N, C], got ", x.ShapeString()));
  }
  const bool is_str = x.dtype() == DType::kString;
  if (is_str != a.strings || (!is_str && x.dtype() != DType::kI32 && x.dtype() != DType::kI64)) {
    return absl::InvalidArgumentError(absl::StrCat("TfIdfVectorizer: X is ", DTypeName(x.dtype()),
                                                   ", the pool holds ",
                                                   a.strings ? "strings" : "integers"));
  }
  const int64_t rows = x.rank() == 1 ? 1 : x.dim(0), c = x.dim(x.rank() - 1);
  Dims dims = x.rank() == 1 ? Dims{a.out_size} : Dims{rows, a.out_size};
  DYNVM_RETURN_IF_ERROR(PrepareOutput(ctx, out[0], DType::kF32, dims, "TfIdfVectorizer"));
  float* o = out[0]->data<float>();
  std::fill(o, o + out[0]->numel(), 0.0f);
  for (int64_t r = 0; r < rows; ++r) {
    float* counts = o + r * a.out_size;
    if (is_str) {
      CountRow<std::string>(
          a, a.str_grams, c, [&](int64_t p) { return std::string(StringAt(x, r * c + p)); },
          counts);
    } else if (x.dtype() == DType::kI32) {
      CountRow<int64_t>(
          a, a.int_grams, c,
          [&](int64_t p) -> int64_t { return x.data<int32_t>()[x.ElementOffset(r * c + p)]; },
          counts);
    } else {
      CountRow<int64_t>(
          a, a.int_grams, c,
          [&](int64_t p) { return x.data<int64_t>()[x.ElementOffset(r * c + p)]; }, counts);
    }
    for (int64_t k = 0; k < a.out_size; ++k) {
      const float w = a.weights.empty() ? 1.0f : a.weights[k];
      if (a.mode == TfIdfAttrs::Mode::kIDF) counts[k] = counts[k] > 0 ? w : 0.0f;
      if (a.mode == TfIdfAttrs::Mode::kTFIDF) counts[k] *= w;
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeTfIdf(const KernelSpec& spec) {
  if (spec.inputs.size() != 1 || spec.outputs.size() != 1) {
    return absl::InvalidArgumentError("TfIdfVectorizer: expects 1 input and 1 output");
  }
  TfIdfAttrs a;
  DYNVM_ASSIGN_OR_RETURN(std::string mode, spec.GetString("mode", "TF"));
  if (mode == "TF") {
    a.mode = TfIdfAttrs::Mode::kTF;
  } else if (mode == "IDF") {
    a.mode = TfIdfAttrs::Mode::kIDF;
  } else if (mode == "TFIDF") {
    a.mode = TfIdfAttrs::Mode::kTFIDF;
  } else {
    return absl::InvalidArgumentError(absl::StrCat("TfIdfVectorizer: unknown mode '", mode, "'"));
  }
  DYNVM_ASSIGN_OR_RETURN(a.min_gram, spec.GetInt("min_gram_length", 1));
  DYNVM_ASSIGN_OR_RETURN(a.max_gram, spec.GetInt("max_gram_length", 1));
  DYNVM_ASSIGN_OR_RETURN(a.max_skip, spec.GetInt("max_skip_count", 0));
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> counts, spec.GetInts("ngram_counts"));
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> indexes, spec.GetInts("ngram_indexes"));
  DYNVM_ASSIGN_OR_RETURN(std::vector<int64_t> pool_i, spec.GetInts("pool_int64s"));
  DYNVM_ASSIGN_OR_RETURN(std::vector<std::string> pool_s, spec.GetStrings("pool_strings"));
  DYNVM_ASSIGN_OR_RETURN(a.weights, spec.GetFloats("weights"));
  if (a.min_gram < 1 || a.max_gram < a.min_gram || a.max_skip < 0 ||
      a.max_gram > static_cast<int64_t>(counts.size())) {
    return absl::InvalidArgumentError(
        "TfIdfVectorizer: need 1 <= min_gram_length <= max_gram_length <= len(ngram_counts) "
        "and max_skip_count >= 0");
  }
  a.strings = !pool_s.empty();
  if (a.strings == !pool_i.empty()) {
    return absl::InvalidArgumentError(
        "TfIdfVectorizer: exactly one of pool_int64s and pool_strings must be given");
  }
  const int64_t pool =
      a.strings ? static_cast<int64_t>(pool_s.size()) : static_cast<int64_t>(pool_i.size());
  int64_t gram = 0;
  for (size_t n = 1; n <= counts.size(); ++n) {
    const int64_t begin = counts[n - 1];
    const int64_t end = n < counts.size() ? counts[n] : pool;
    if (begin < 0 || end < begin || end > pool || (end - begin) % static_cast<int64_t>(n) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "TfIdfVectorizer: ngram_counts[", n - 1, "] does not split the pool into ", n, "-grams"));
    }
    for (int64_t p = begin; p < end; p += static_cast<int64_t>(n), ++gram) {
      if (gram >= static_cast<int64_t>(indexes.size()) || indexes[gram] < 0 ||
          indexes[gram] > (int64_t{1} << 31)) {
        return absl::InvalidArgumentError("TfIdfVectorizer: ngram_indexes too short or invalid");
      }
      a.out_size = std::max(a.out_size, indexes[gram] + 1);
      if (a.strings) {
        a.str_grams[std::vector<std::string>(pool_s.begin() + p, pool_s.begin() + p + n)] =
            indexes[gram];
      } else {
        a.int_grams[std::vector<int64_t>(pool_i.begin() + p, pool_i.begin() + p + n)] =
            indexes[gram];
      }
    }
  }
  if (!a.weights.empty() && static_cast<int64_t>(a.weights.size()) < a.out_size) {
    return absl::InvalidArgumentError("TfIdfVectorizer: fewer weights than outputs");
  }
  return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), &RunTfIdf,
                                          std::make_shared<const TfIdfAttrs>(std::move(a)));
}

// ---------------------------------------------------------------------------------------------
// Registration

template <typename A>
absl::StatusOr<std::unique_ptr<Kernel>> Make(const KernelSpec& spec, FunctionKernel::RunFn run,
                                             A attrs) {
  return std::make_unique<FunctionKernel>(ReferenceKernelName(spec), run,
                                          std::make_shared<const A>(std::move(attrs)));
}

void AddString(KernelRegistry& r, const char* op, KernelFactory f) {
  KernelRegistration reg{"", op, Device::kCPU, "reference", kReferencePriority - 1, std::move(f)};
  reg.takes_strings = true;
  r.Register(std::move(reg));
}

absl::StatusOr<std::unique_ptr<Kernel>> MakeCast(const KernelSpec& spec, bool like) {
  if (!HasStringPort(spec)) return absl::UnimplementedError("not a string Cast");
  if (spec.inputs.empty() || spec.outputs.size() != 1 || spec.outputs[0].dtype == kAnyDType) {
    return absl::InvalidArgumentError("Cast: expects an input and a typed output");
  }
  CastAttrs a{static_cast<DType>(spec.outputs[0].dtype)};
  if (!like) {
    DYNVM_ASSIGN_OR_RETURN(int64_t to, spec.GetInt("to", -1));
    if (to != 8 && a.to == DType::kString) {
      return absl::InvalidArgumentError("Cast: the output port is string but 'to' is not");
    }
  }
  if (a.to == DType::kBool && spec.inputs[0].dtype == kStr) {
    return absl::UnimplementedError("Cast: string to bool is not defined by ONNX");
  }
  return Make(spec, &RunCast, a);
}

KernelFactory MoveFactory(const char* op, FunctionKernel::RunFn run) {
  return [op, run](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (!HasStringPort(spec)) return absl::UnimplementedError(absl::StrCat("not a string ", op));
    AxisAttrs a;
    DYNVM_ASSIGN_OR_RETURN(a.axis, spec.GetInt("axis", std::string(op) == "Flatten" ? 1 : 0));
    DYNVM_ASSIGN_OR_RETURN(a.allowzero, spec.GetInt("allowzero", 0));
    a.has_axes = spec.Find("axes") != nullptr;
    DYNVM_ASSIGN_OR_RETURN(a.axes, spec.GetInts("axes"));
    return Make(spec, run, a);
  };
}

template <int kOp>
absl::Status RunReshapeOp(const void* attrs, KernelContext& ctx, Inputs in, Outputs out) {
  static const char* const kNames[] = {"Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze"};
  return RunReshapeLike(kNames[kOp], *static_cast<const AxisAttrs*>(attrs), ctx, in, out);
}

}  // namespace

void RegisterStringKernels(KernelRegistry& r) {
  AddString(r, "Cast", [](const KernelSpec& spec) { return MakeCast(spec, false); });
  AddString(r, "CastLike", [](const KernelSpec& spec) { return MakeCast(spec, true); });
  AddString(r, "Equal", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
    if (!HasStringPort(spec)) return absl::UnimplementedError("not a string Equal");
    if (spec.inputs.size() != 2 || spec.inputs[0].dtype != kStr || spec.inputs[1].dtype != kStr)
      return absl::InvalidArgumentError("Equal: expects two string inputs");
    return Make(spec, &RunEqual, AxisAttrs{});
  });
  AddString(r, "Concat", MoveFactory("Concat", &RunConcat));
  AddString(r, "StringConcat",
            [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
              if (spec.inputs.size() != 2 || spec.outputs.size() != 1)
                return absl::InvalidArgumentError("StringConcat: expects 2 inputs, 1 output");
              return Make(spec, &RunStringConcat, AxisAttrs{});
            });
  AddString(r, "StringSplit",
            [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
              if (spec.inputs.size() != 1 || spec.outputs.empty() || spec.outputs.size() > 2)
                return absl::InvalidArgumentError("StringSplit: expects 1 input, 1 or 2 outputs");
              SplitAttrs a;
              DYNVM_ASSIGN_OR_RETURN(a.delimiter, spec.GetString("delimiter", ""));
              DYNVM_ASSIGN_OR_RETURN(a.maxsplit, spec.GetInt("maxsplit", -1));
              return Make(spec, &RunStringSplit, std::move(a));
            });
  AddString(r, "Gather", MoveFactory("Gather", &RunGather));
  AddString(r, "Identity", MoveFactory("Identity", &RunReshapeOp<0>));
  AddString(r, "Reshape", MoveFactory("Reshape", &RunReshapeOp<1>));
  AddString(r, "Flatten", MoveFactory("Flatten", &RunReshapeOp<2>));
  AddString(r, "Squeeze", MoveFactory("Squeeze", &RunReshapeOp<3>));
  AddString(r, "Unsqueeze", MoveFactory("Unsqueeze", &RunReshapeOp<4>));
  AddString(
      r, "StringNormalizer", [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
        if (spec.inputs.size() != 1 || spec.outputs.size() != 1)
          return absl::InvalidArgumentError("StringNormalizer: expects 1 input, 1 output");
        NormalizerAttrs a;
        DYNVM_ASSIGN_OR_RETURN(std::string change, spec.GetString("case_change_action", "NONE"));
        if (change == "LOWER") {
          a.change = NormalizerAttrs::Case::kLower;
        } else if (change == "UPPER") {
          a.change = NormalizerAttrs::Case::kUpper;
        } else if (change != "NONE") {
          return absl::InvalidArgumentError(absl::StrCat("StringNormalizer: case_change_action '",
                                                         change, "' is not NONE/LOWER/UPPER"));
        }
        DYNVM_ASSIGN_OR_RETURN(int64_t sensitive, spec.GetInt("is_case_sensitive", 0));
        a.case_sensitive = sensitive != 0;
        DYNVM_ASSIGN_OR_RETURN(std::vector<std::string> stop, spec.GetStrings("stopwords"));
        for (std::string& w : stop) {
          a.stopwords.insert(a.case_sensitive ? w : absl::AsciiStrToLower(w));
        }
        return Make(spec, &RunStringNormalizer, std::move(a));
      });
  AddString(r, "TfIdfVectorizer", &MakeTfIdf);
}

}  // namespace dynvm::reference
