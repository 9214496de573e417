#include "compiler/quantize_weights.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "compiler/builder.h"
#include "compiler/ops/names.h"

namespace dynvm::compiler {
namespace {

constexpr double kMaxScaleSpan = 65536.0;  // 2^16

// One quantized matrix: rows x cols (row = output channel).
struct Quantized {
  Tensor weights;      // i8, bf16, or u8 (int4: [rows, blocks, block / 2])
  Tensor scales;       // f32 (int8: [rows]; int4: [rows * blocks])
  Tensor zero_points;  // int4 with zero points: u8 [rows * ceil(blocks / 2)]
  float max_scale = 0;
  std::string kept_reason;  // non-empty: not quantized
};

// Quantizes `rows` x `cols` floats read as src[r * sr + c * sc] into a tensor of `dims`
// (rows * cols elements in row order) with scales of `scale_dims`.
absl::StatusOr<Quantized> Quantize(const float* src, int64_t rows, int64_t cols, int64_t sr,
                                   int64_t sc, DType dtype, absl::Span<const int64_t> dims,
                                   absl::Span<const int64_t> scale_dims) {
  Quantized q;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(src[r * sr + c * sc])) {
        q.kept_reason = "holds NaN or infinity";
        return q;
      }
    }
  }
  DYNVM_ASSIGN_OR_RETURN(q.weights, Tensor::Empty(dtype, dims));
  if (dtype == DType::kBF16) {
    BFloat16* out = q.weights.data<BFloat16>();
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = BFloat16(src[r * sr + c * sc]);
    }
    return q;
  }
  DYNVM_ASSIGN_OR_RETURN(q.scales, Tensor::Empty(DType::kF32, scale_dims));
  float* scale = q.scales.data<float>();
  float min_scale = 0;
  for (int64_t r = 0; r < rows; ++r) {
    float m = 0;
    for (int64_t c = 0; c < cols; ++c) m = std::max(m, std::fabs(src[r * sr + c * sc]));
    scale[r] = m / 127.0f;
    if (scale[r] > 0) {
      min_scale = min_scale == 0 ? scale[r] : std::min(min_scale, scale[r]);
      q.max_scale = std::max(q.max_scale, scale[r]);
    }
  }
  if (min_scale > 0 && static_cast<double>(q.max_scale) / min_scale > kMaxScaleSpan) {
    q.kept_reason = absl::StrFormat("per-channel scales span %.4g (%g to %g), more than 2^16",
                                    q.max_scale / min_scale, min_scale, q.max_scale);
    return q;
  }
  int8_t* out = q.weights.data<int8_t>();
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = scale[r] > 0 ? 1.0f / scale[r] : 0.0f;
    for (int64_t c = 0; c < cols; ++c) {
      const float v = std::nearbyint(src[r * sr + c * sc] * inv);
      out[r * cols + c] = static_cast<int8_t>(std::clamp(v, -127.0f, 127.0f));
    }
  }
  return q;
}

// One block of 4-bit values as ONNX Runtime's MatMul4BitsQuantizer makes them. Symmetric: the
// element of largest magnitude m maps to -8 (scale = m / -8, zero point 8), the rest round to
// nearest and clamp to [0, 15]. With zero points: [min(0, lo), max(0, hi)] spans 15 steps
// (scale = (max - min) / 15, zero point = round(-min / scale)). An all-zero block has scale 0.
void QuantizeBlock4(const float* v, int64_t n, bool zero_points, uint8_t* q, float* scale,
                    int* zp) {
  float lo = 0, hi = 0, amax = 0, signed_max = 0;
  for (int64_t i = 0; i < n; ++i) {
    lo = std::min(lo, v[i]);
    hi = std::max(hi, v[i]);
    if (std::fabs(v[i]) > amax) {
      amax = std::fabs(v[i]);
      signed_max = v[i];
    }
  }
  float s = 0;
  int z = 8;
  if (zero_points) {
    s = (hi - lo) / 15.0f;
    if (s > 0) z = static_cast<int>(std::clamp(std::nearbyint(-lo / s), 0.0f, 15.0f));
  } else {
    s = signed_max / -8.0f;
  }
  const float inv = s != 0 ? 1.0f / s : 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    q[i] = static_cast<uint8_t>(std::clamp(std::nearbyint(v[i] * inv) + z, 0.0f, 15.0f));
  }
  *scale = s;
  *zp = z;
}

// `rows` x `cols` floats read as src[r * sr + c * sc] as MatMulNBits' 4-bit blocks of `block`
// (the last one padded with the zero point's value, which dequantizes to 0).
absl::StatusOr<Quantized> Quantize4(const float* src, int64_t rows, int64_t cols, int64_t sr,
                                    int64_t sc, int64_t block, bool zero_points) {
  Quantized q;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      if (!std::isfinite(src[r * sr + c * sc])) {
        q.kept_reason = "holds NaN or infinity";
        return q;
      }
    }
  }
  const int64_t blocks = (cols + block - 1) / block, zp_row = (blocks + 1) / 2;
  DYNVM_ASSIGN_OR_RETURN(q.weights, Tensor::Empty(DType::kU8, {rows, blocks, block / 2}));
  DYNVM_ASSIGN_OR_RETURN(q.scales, Tensor::Empty(DType::kF32, {rows * blocks}));
  if (zero_points) {
    DYNVM_ASSIGN_OR_RETURN(q.zero_points, Tensor::Empty(DType::kU8, {rows * zp_row}));
    std::fill_n(q.zero_points.data<uint8_t>(), rows * zp_row, uint8_t{0});
  }
  uint8_t* packed = q.weights.data<uint8_t>();
  std::fill_n(packed, rows * blocks * (block / 2), uint8_t{0});
  std::vector<float> v(block);
  std::vector<uint8_t> values(block);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < blocks; ++b) {
      const int64_t n = std::min(block, cols - b * block);
      for (int64_t i = 0; i < n; ++i) v[i] = src[r * sr + (b * block + i) * sc];
      float s = 0;
      int z = 8;
      QuantizeBlock4(v.data(), n, zero_points, values.data(), &s, &z);
      for (int64_t i = n; i < block; ++i) values[i] = static_cast<uint8_t>(z);
      uint8_t* out = packed + (r * blocks + b) * (block / 2);
      for (int64_t i = 0; i < block; i += 2) {
        out[i / 2] = static_cast<uint8_t>(values[i] | values[i + 1] << 4);
      }
      q.scales.data<float>()[r * blocks + b] = s;
      q.max_scale = std::max(q.max_scale, std::fabs(s));
      if (zero_points) {
        q.zero_points.data<uint8_t>()[r * zp_row + b / 2] |=
            static_cast<uint8_t>(z << (4 * (b % 2)));
      }
    }
  }
  return q;
}

bool IsF32Constant(const Value* v, int rank) {
  return v != nullptr && v->constant.has_value() && v->constant->dtype() == DType::kF32 &&
         v->constant->rank() == rank;
}

std::string WeightName(const Node& n, const Value* v, int input) {
  return v->name.empty() ? absl::StrCat(n.Label(), " input ", input) : v->name;
}

float FloatAttr(const Node& n, const char* name, float def) {
  const AttrValue* a = n.attr(name);
  return a != nullptr && a->type == AttrValue::Type::kFloat ? a->f : def;
}

int64_t IntAttr(const Node& n, const char* name, int64_t def) {
  const AttrValue* a = n.attr(name);
  return a != nullptr && a->type == AttrValue::Type::kInt ? a->i : def;
}

class Quantizer {
 public:
  Quantizer(Module& m, const QuantizeWeightsOptions& o) : m_(m), o_(o) {}

  absl::Status Run() {
    for (Function& f : m_.functions()) DYNVM_RETURN_IF_ERROR(RunGraph(*f.graph));
    return absl::OkStatus();
  }

  std::vector<QuantizedWeightReport> TakeReports() { return std::move(reports_); }

 private:
  struct Entry {
    Value* weights = nullptr;
    Value* scales = nullptr;
    Value* zero_points = nullptr;  // int4 with zero points
    int64_t rows = 0, cols = 0;    // int4: N and K
    bool kept = false;
  };

  absl::Status RunGraph(Graph& g) {
    std::vector<std::unique_ptr<Node>> out;
    for (std::unique_ptr<Node>& n : g.nodes) {
      for (auto& [attr, sub] : n->subgraphs) DYNVM_RETURN_IF_ERROR(RunGraph(*sub));
      Node* node = n.get();
      out.push_back(std::move(n));
      if (!node->domain.empty()) continue;
      if (node->op == ops::kMatMul) {
        DYNVM_RETURN_IF_ERROR(MatMul(*node));
      } else if (node->op == ops::kGemm) {
        DYNVM_RETURN_IF_ERROR(Gemm(g, *node, out));
      } else if (node->op == ops::kLSTM || node->op == ops::kGRU || node->op == ops::kRNN) {
        DYNVM_RETURN_IF_ERROR(Recurrent(*node));
      }
    }
    g.nodes = std::move(out);
    return absl::OkStatus();
  }

  // The [N, K] form of a rank-2 weight (transposed when it is [K, N]), cached per constant.
  absl::StatusOr<Entry> Matrix(const Node& n, Value* v, int input, bool transpose) {
    const auto key = std::make_pair(v, transpose);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    const Tensor& t = *v->constant;
    const int64_t rows = transpose ? t.dim(1) : t.dim(0), cols = transpose ? t.dim(0) : t.dim(1);
    const int64_t sr = transpose ? t.stride(1) : t.stride(0);
    const int64_t sc = transpose ? t.stride(0) : t.stride(1);
    const int64_t dims[2] = {rows, cols};
    const int64_t sdims[1] = {rows};
    Quantized q;
    if (Int4()) {
      DYNVM_ASSIGN_OR_RETURN(
          q, Quantize4(t.data<float>(), rows, cols, sr, sc, o_.block, o_.zero_points));
    } else {
      DYNVM_ASSIGN_OR_RETURN(q,
                             Quantize(t.data<float>(), rows, cols, sr, sc, o_.dtype, dims, sdims));
    }
    Entry e = Store(n, v, input, std::move(q), t.numel() * 4);
    e.rows = rows;
    e.cols = cols;
    cache_[key] = e;
    return e;
  }

  Entry Store(const Node& n, Value* v, int input, Quantized q, int64_t bytes_before) {
    QuantizedWeightReport r;
    r.weight = WeightName(n, v, input);
    r.node = n.Label();
    r.bytes_before = bytes_before;
    Entry e;
    if (!q.kept_reason.empty()) {
      r.dtype = "f32";
      r.bytes_after = bytes_before;
      r.max_scale = q.max_scale;
      r.kept_reason = q.kept_reason;
      e.kept = true;
    } else {
      r.dtype = Int4() ? "int4" : std::string(DTypeName(o_.dtype));
      r.bytes_after = q.weights.nbytes() + (q.scales.defined() ? q.scales.nbytes() : 0) +
                      (q.zero_points.defined() ? q.zero_points.nbytes() : 0);
      r.max_scale = q.max_scale;
      const std::string base = v->name.empty() ? "weight" : v->name;
      e.weights = m_.NewConstant(std::move(q.weights), absl::StrCat(base, ".", r.dtype), true);
      if (q.scales.defined()) {
        e.scales = m_.NewConstant(std::move(q.scales), absl::StrCat(base, ".scale"), true);
      }
      if (q.zero_points.defined()) {
        e.zero_points =
            m_.NewConstant(std::move(q.zero_points), absl::StrCat(base, ".zero_point"), true);
      }
    }
    reports_.push_back(std::move(r));
    return e;
  }

  bool Large(const Value* v) const { return v->constant->numel() * 4 >= o_.min_bytes; }

  absl::Status MatMul(Node& n) {
    Value* b = n.inputs.size() == 2 ? n.inputs[1] : nullptr;
    if (!IsF32Constant(b, 2) || !Large(b) || n.inputs[0] == nullptr) return absl::OkStatus();
    if (n.inputs[0]->has_shape() && n.inputs[0]->rank() < 1) return absl::OkStatus();
    DYNVM_ASSIGN_OR_RETURN(Entry e, Matrix(n, b, 1, /*transpose=*/true));
    if (e.kept) return absl::OkStatus();
    MakeQMatMul(n, n.inputs[0], e);
    return absl::OkStatus();
  }

  bool Int4() const { return o_.dtype == DType::kU8; }

  void MakeQMatMul(Node& n, Value* a, const Entry& e) {
    if (Int4()) {
      n.op = "MatMulNBits";
      n.domain = "com.microsoft";
      n.attrs.clear();
      n.attrs["K"] = AttrInt(e.cols);
      n.attrs["N"] = AttrInt(e.rows);
      n.attrs["bits"] = AttrInt(4);
      n.attrs["block_size"] = AttrInt(o_.block);
      n.attrs["accuracy_level"] = AttrInt(o_.accuracy_level);
      n.inputs = {a, e.weights, e.scales};
      if (e.zero_points != nullptr) n.inputs.push_back(e.zero_points);
      return;
    }
    n.op = ops::kQMatMul;
    n.domain = "dynvm";
    n.attrs.clear();
    n.inputs = {a, e.weights};
    if (e.scales != nullptr) n.inputs.push_back(e.scales);
  }

  // Gemm(A, B, C) with transA = 0 and alpha = 1 (C, when present, with beta = 1) becomes
  // QMatMul(A, B') followed by Add(., C).
  absl::Status Gemm(Graph& g, Node& n, std::vector<std::unique_ptr<Node>>& out) {
    if (n.inputs.size() < 2 || n.inputs[0] == nullptr || n.outputs.size() != 1) {
      return absl::OkStatus();
    }
    Value* b = n.inputs[1];
    Value* c = n.inputs.size() > 2 ? n.inputs[2] : nullptr;
    if (!IsF32Constant(b, 2) || !Large(b) || IntAttr(n, "transA", 0) != 0 ||
        FloatAttr(n, "alpha", 1.0f) != 1.0f ||
        (c != nullptr && FloatAttr(n, "beta", 1.0f) != 1.0f)) {
      return absl::OkStatus();
    }
    DYNVM_ASSIGN_OR_RETURN(Entry e, Matrix(n, b, 1, /*transpose=*/IntAttr(n, "transB", 0) == 0));
    if (e.kept) return absl::OkStatus();
    Value* y = n.outputs[0];
    MakeQMatMul(n, n.inputs[0], e);
    if (c == nullptr) return absl::OkStatus();
    Value* product = m_.NewValue(DType::kF32, y->shape, &g);
    product->producer = &n;
    product->output_index = 0;
    n.outputs[0] = product;
    AppendNode(m_, g, out, ops::kAdd, {product, c}, {}, absl::StrCat(n.name, ".bias"), DType::kF32,
               y);
    return absl::OkStatus();
  }

  absl::Status Recurrent(Node& n) {
    if (n.inputs.size() < 3 || Int4()) return absl::OkStatus();  // int4: MatMul/Gemm only
    Value* w = n.inputs[1];
    Value* r = n.inputs[2];
    if (!IsF32Constant(w, 3) || !IsF32Constant(r, 3) || (!Large(w) && !Large(r))) {
      return absl::OkStatus();
    }
    DYNVM_ASSIGN_OR_RETURN(Entry ew, Rnn(n, w, 1));
    DYNVM_ASSIGN_OR_RETURN(Entry er, Rnn(n, r, 2));
    if (ew.kept || er.kept) return absl::OkStatus();  // both or neither (reported)
    const std::string op = n.op;
    n.op = absl::StrCat("Q", op);
    n.domain = "dynvm";
    n.inputs[1] = ew.weights;
    n.inputs[2] = er.weights;
    if (ew.scales != nullptr) {
      n.inputs.resize(10, nullptr);
      n.inputs[8] = ew.scales;
      n.inputs[9] = er.scales;
    }
    return absl::OkStatus();
  }

  absl::StatusOr<Entry> Rnn(const Node& n, Value* v, int input) {
    const auto key = std::make_pair(v, false);
    if (auto it = cache_.find(key); it != cache_.end()) return it->second;
    const Tensor& t = *v->constant;
    // Rows of all directions in order; the constant is contiguous or strided per dim.
    Tensor dense = t;
    if (!t.is_contiguous()) {
      DYNVM_ASSIGN_OR_RETURN(dense, Tensor::Empty(DType::kF32, t.dims()));
      const int64_t d0 = t.dim(0), d1 = t.dim(1), d2 = t.dim(2);
      float* p = dense.data<float>();
      for (int64_t a = 0; a < d0; ++a)
        for (int64_t b = 0; b < d1; ++b)
          for (int64_t c = 0; c < d2; ++c)
            p[(a * d1 + b) * d2 + c] =
                t.data<float>()[a * t.stride(0) + b * t.stride(1) + c * t.stride(2)];
    }
    const int64_t rows = t.dim(0) * t.dim(1), cols = t.dim(2);
    const int64_t sdims[2] = {t.dim(0), t.dim(1)};
    DYNVM_ASSIGN_OR_RETURN(
        Quantized q, Quantize(dense.data<float>(), rows, cols, cols, 1, o_.dtype, t.dims(), sdims));
    Entry e = Store(n, v, input, std::move(q), t.numel() * 4);
    cache_[key] = e;
    return e;
  }

  Module& m_;
  const QuantizeWeightsOptions& o_;
  std::map<std::pair<Value*, bool>, Entry> cache_;
  std::vector<QuantizedWeightReport> reports_;
};

}  // namespace

std::string QuantizedWeightReport::Text() const {
  if (!kept_reason.empty()) {
    return absl::StrFormat("quantize %s (%s): kept f32, %s", weight, node, kept_reason);
  }
  std::string line = absl::StrFormat("quantize %s (%s): %s %d -> %d bytes", weight, node, dtype,
                                     bytes_before, bytes_after);
  if (dtype == "i8" || dtype == "int4") absl::StrAppendFormat(&line, ", max scale %g", max_scale);
  return line;
}

absl::StatusOr<std::vector<QuantizedWeightReport>> QuantizeWeights(
    Module& module, const QuantizeWeightsOptions& options) {
  if (options.dtype != DType::kI8 && options.dtype != DType::kBF16 && options.dtype != DType::kU8) {
    return absl::InvalidArgumentError("weights quantize to int8, int4 or bf16 only");
  }
  if (options.dtype == DType::kU8 &&
      (options.block < 16 || options.block > 256 || (options.block & (options.block - 1)) != 0)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the int4 block size must be a power of two from 16 to 256, got ", options.block));
  }
  if (options.min_bytes < 0) {
    return absl::InvalidArgumentError("the quantization threshold must not be negative");
  }
  Quantizer q(module, options);
  DYNVM_RETURN_IF_ERROR(q.Run());
  return q.TakeReports();
}

}  // namespace dynvm::compiler
