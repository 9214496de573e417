// TransposeConstantWeights (compiler/transpose_weights.h).
//
// Why: torch exports a bias-free nn.Linear as MatMul(x, W) with W a constant [K, N] (the
// transpose of the module's [N, K] weight, folded). A decode step's product has one row, and
// the GEMV reading W [K, N] runs cpu::Gemv's axpy form (a tile of outputs updated by every row
// of W); reading [N, K] it runs the dot form (four outputs' rows streamed at a time), which
// reaches more of the memory bandwidth on the same bytes from rows of 1024 floats (docs/llm.md).
// The packed GEMM's panels (16 columns, for each k 16 floats) are one sequential stream per
// panel and read faster than both at every shape measured (cpu_q4gemv_benchmark --filter f3 on
// the Zen 4 EPYC, 1 thread, GB/s dot / axpy / panels: N 1408 x K 512 12.7 / 19.1 / 23.2,
// 8192 x 512 13.0 / 18.6 / 21.8, 512 x 1408 27.9 / 14.6 / 30.7, 512 x 512 13.4 / 13.2 / 25.1,
// 4096 x 4096 24.3 / - / 30.5; docs/results/f32-panel-gemv-2026-11-29.txt and
// llm-s7-f32pack-2026-11-29.txt), so a weight only MatMuls read is stored as panels whatever its
// shape; a prompt's product runs the packed GEMM on them (kernels/dnnl/matmul.cc). A weight a
// dynvm::Linear reads is stored as panels too, whatever the rows (s9: the Linear's packed GEMM
// measured against dnnl_sgemm from 1 to 3136 rows on the transformer shapes, docs/kernels.md
// "Microkernel or oneDNN"; dnnl_sgemm repacks W on every call), so a Linear runs on the weight's
// only stored copy rather than on a run-time packed copy beside it. With pack_weights off a
// decode-shaped weight is transposed instead, where the dot form wins (DotFormReadsFaster).
//
// Which weights: a constant f32 of rank 2 with at least kMinElements elements (below that every
// form reads from cache), every use of which is the B operand of an ONNX MatMul or the W of a
// dynvm::Linear (trans_b 0 or 1, every use the same way round; not a graph output, not read by
// anything else, so nothing needs the plain layout and the weight stays stored once), and a
// Linear reads it or at least one of the products may have few rows at run time: its A's rows
// (the product of every dim but the last) are not all constants, or are at most kFewRows. A
// weight read only by MatMuls of known large row counts (a bias-free fixed-shape encoder) keeps
// its layout.
#include "compiler/transpose_weights.h"

#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "compiler/builder.h"
#include "compiler/ops/names.h"
#include "compiler/symbolic.h"

namespace dynvm::compiler {
namespace {

constexpr int64_t kMinElements = int64_t{1} << 14;  // 64 KiB of f32
constexpr int64_t kFewRows = 16;
// The dot form streams four rows of K at a time and sums each row's lanes at its end; with short
// rows (K under kLongRows) and more outputs than K it fell behind the axpy form's L1 tile
// (cpu_q4gemv_benchmark on the Zen 4 EPYC, 1 thread, GB/s dot against axpy: N 1408 x K 512
// 12.4 / 18.4, 8192 x 512 16.4 / 18.5; but 512 x 512 20.2 / 13.3, 512 x 1408 20.5 / 14.1, and
// from K = 1024 the dot form won at every N tried: 2816 x 1024 22.8 / 16.8, 1024 x 2816 26.2 /
// 18.1, 4096 x 4096 21.0 / 17.2). Such weights keep [K, N].
constexpr int64_t kLongRows = 1024;
constexpr int64_t kPanel = 16;  // kernels/cpu/packed_gemm.h

bool DotFormReadsFaster(int64_t k, int64_t n) { return k >= kLongRows || k >= n; }

struct Use {
  Node* node = nullptr;
  bool linear = false;
  bool trans = false;  // a Linear with trans_b = 1: the constant is W^T [N, K]
};

struct Candidate {
  std::vector<Use> uses;
  bool refused = false;
  bool few_rows = false;
};

bool IsCandidateWeight(const Value* v) {
  if (v == nullptr || !v->constant.has_value() || v->kind != ObjectKind::kTensor) return false;
  const Tensor& t = *v->constant;
  return t.dtype() == DType::kF32 && t.rank() == 2 && t.numel() >= kMinElements;
}

// Whether A (the product's first operand) may have at most kFewRows rows at run time.
bool MayHaveFewRows(const Value* a) {
  if (a == nullptr || !a->shape.has_value() || a->shape->empty()) return false;
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < a->shape->size(); ++i) {
    const std::optional<int64_t> d = SymbolicContext::AsConst((*a->shape)[i]);
    if (!d.has_value()) return true;
    rows *= *d;
  }
  return rows <= kFewRows;
}

// A use of `w` at input `i` of `n` that this rule can rewrite.
std::optional<Use> ProductUse(Node& n, size_t i, const Value* w) {
  if (i != 1 || n.inputs.size() < 2 || n.inputs[0] == w) return std::nullopt;
  if (n.domain.empty() && n.op == ops::kMatMul && n.inputs.size() == 2) return Use{&n, false};
  if (n.domain == ops::kDynvmDomain && n.op == ops::kLinear && n.attr("b_packed_n") == nullptr) {
    const AttrValue* tb = n.attr("trans_b");
    if (tb == nullptr || tb->i == 0) return Use{&n, true, false};
    if (tb->i == 1) return Use{&n, true, true};
  }
  return std::nullopt;
}

// Candidates in the order first seen, so that the new constants' order does not depend on
// pointer hashing.
struct Found {
  absl::flat_hash_map<Value*, Candidate> by_value;
  std::vector<Value*> order;

  Candidate& operator[](Value* v) {
    auto [it, inserted] = by_value.try_emplace(v);
    if (inserted) order.push_back(v);
    return it->second;
  }
};

void Collect(Graph& g, Found& found) {
  for (Value* v : g.outputs) {
    if (IsCandidateWeight(v)) found[v].refused = true;
  }
  for (auto& n : g.nodes) {
    for (auto& [name, sub] : n->subgraphs) Collect(*sub, found);
    for (size_t i = 0; i < n->inputs.size(); ++i) {
      Value* w = n->inputs[i];
      if (!IsCandidateWeight(w)) continue;
      Candidate& c = found[w];
      std::optional<Use> use = ProductUse(*n, i, w);
      if (!use.has_value()) {
        c.refused = true;
        continue;
      }
      c.few_rows |= MayHaveFewRows(n->inputs[0]);
      c.uses.push_back(*use);
    }
  }
}

// W [K, N] (or W^T [N, K] with `trans`) as the packed GEMM's panels [ceil(N / 16), K, 16]
// (zeros past N).
Tensor Panels(const Tensor& w, bool trans) {
  const int64_t k = w.dim(trans ? 1 : 0), n = w.dim(trans ? 0 : 1);
  const int64_t s0 = w.stride(trans ? 1 : 0), s1 = w.stride(trans ? 0 : 1);
  const int64_t panels = (n + kPanel - 1) / kPanel;
  Tensor t = *Tensor::Empty(DType::kF32, {panels, k, kPanel});
  const float* src = w.data<float>();
  float* dst = t.data<float>();
  for (int64_t p = 0; p < panels; ++p) {
    for (int64_t i = 0; i < k; ++i) {
      float* row = dst + (p * k + i) * kPanel;
      for (int64_t c = 0; c < kPanel; ++c) {
        const int64_t j = p * kPanel + c;
        row[c] = j < n ? src[i * s0 + j * s1] : 0.0f;
      }
    }
  }
  return t;
}

// W [K, N] as a dense [N, K] tensor.
Tensor Transposed(const Tensor& w) {
  const int64_t k = w.dim(0), n = w.dim(1), s0 = w.stride(0), s1 = w.stride(1);
  Tensor t = *Tensor::Empty(DType::kF32, {n, k});
  const float* src = w.data<float>();
  float* dst = t.data<float>();
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t i = 0; i < k; ++i) dst[j * k + i] = src[i * s0 + j * s1];
  }
  return t;
}

}  // namespace

WeightLayouts TransposeConstantWeights(Module& module, bool pack) {
  Found found;
  for (Function& f : module.functions()) Collect(*f.graph, found);
  WeightLayouts count;
  for (Value* w : found.order) {
    const Candidate& c = found.by_value.at(w);
    if (c.refused || c.uses.empty()) continue;
    const Tensor& t = *w->constant;
    const bool any_linear =
        std::any_of(c.uses.begin(), c.uses.end(), [](const Use& u) { return u.linear; });
    const bool any_trans =
        std::any_of(c.uses.begin(), c.uses.end(), [](const Use& u) { return u.trans; });
    const bool one_orientation = std::all_of(c.uses.begin(), c.uses.end(),
                                             [&](const Use& u) { return u.trans == any_trans; });
    // Panels: for products of few rows (the GEMV's stream) and for any product a Linear reads
    // (its packed GEMM at every row count; kernels/dnnl/linear.cc).
    if (pack && one_orientation && (c.few_rows || any_linear)) {
      Value* wp = module.NewConstant(Panels(t, any_trans), "", w->is_weight);
      for (const Use& u : c.uses) {
        u.node->inputs[1] = wp;
        u.node->domain = ops::kDynvmDomain;
        u.node->attrs["b_packed_n"] = AttrInt(t.dim(any_trans ? 0 : 1));
        if (u.linear) u.node->attrs.erase("trans_b");
      }
      ++count.packed;
      continue;
    }
    if (!c.few_rows || any_trans) continue;
    if (!DotFormReadsFaster(t.dim(0), t.dim(1))) continue;
    Value* wt = module.NewConstant(Transposed(t), "", w->is_weight);
    for (const Use& u : c.uses) {
      u.node->inputs[1] = wt;
      if (u.linear) {
        u.node->attrs["trans_b"] = AttrInt(1);
      } else {
        u.node->domain = ops::kDynvmDomain;
        u.node->attrs["b_perm"] = AttrInts({1, 0});
      }
    }
    ++count.transposed;
  }
  return count;
}

}  // namespace dynvm::compiler
