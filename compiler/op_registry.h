// Public API. The compiler side of operators: symbolic shape inference per (domain, op).
// dynvm's own ops and a user's custom ops register here next to their kernel
// (kernels/registry.h). An op without a shape function still compiles: its outputs get an
// unknown shape and its kernel allocates them at run time.
//
// Thread safety: registration is thread-safe; inference runs on one thread per module.
#ifndef DYNVM_COMPILER_OP_REGISTRY_H_
#define DYNVM_COMPILER_OP_REGISTRY_H_

#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "compiler/ir.h"

namespace dynvm::compiler {

// What a shape function sees of one node, and how it sets the outputs' types.
class InferContext {
 public:
  InferContext(Node& node, Module& module) : node_(node), module_(module) {}

  Node& node() { return node_; }
  SymbolicContext& sym() { return module_.sym(); }
  Module& module() { return module_; }

  size_t num_inputs() const { return node_.inputs.size(); }
  size_t num_outputs() const { return node_.outputs.size(); }
  bool has_input(size_t i) const { return i < node_.inputs.size() && node_.inputs[i] != nullptr; }
  bool has_output(size_t i) const {
    return i < node_.outputs.size() && node_.outputs[i] != nullptr;
  }
  Value* input(size_t i) const { return has_input(i) ? node_.inputs[i] : nullptr; }
  // The dtype of input i; f32 when it is absent (shape functions check presence first where
  // it matters; this keeps a malformed node from reading out of bounds).
  DType input_dtype(size_t i) const { return has_input(i) ? node_.inputs[i]->dtype : DType::kF32; }
  // nullptr when the input is absent or its rank is unknown.
  const std::vector<Dim>* input_shape(size_t i) const {
    return has_input(i) && node_.inputs[i]->shape ? &*node_.inputs[i]->shape : nullptr;
  }
  const Tensor* constant_input(size_t i) const {
    return has_input(i) && node_.inputs[i]->constant ? &*node_.inputs[i]->constant : nullptr;
  }
  // Symbolic elements of a small integer input (constants and shape computations).
  const std::vector<Dim>* content(size_t i) const {
    return has_input(i) && node_.inputs[i]->content ? &*node_.inputs[i]->content : nullptr;
  }

  // Attribute readers: the default when absent; InvalidArgument naming the node otherwise.
  absl::StatusOr<int64_t> GetInt(absl::string_view name, int64_t def) const;
  absl::StatusOr<float> GetFloat(absl::string_view name, float def) const;
  absl::StatusOr<std::string> GetString(absl::string_view name, std::string def) const;
  absl::StatusOr<std::vector<int64_t>> GetInts(absl::string_view name,
                                               std::vector<int64_t> def = {}) const;
  bool HasAttr(absl::string_view name) const { return node_.attr(name) != nullptr; }

  // Output types.
  void SetOutput(size_t i, DType dtype, std::vector<Dim> shape);
  // Rank known, sizes decided by the kernel at run time: fresh symbols per dim.
  void SetOutputDynamic(size_t i, DType dtype, int rank);
  // Rank unknown too.
  void SetOutputUnknown(size_t i, DType dtype);
  void SetContent(size_t i, std::vector<Dim> content);

  absl::Status Error(absl::string_view message) const;

 private:
  Node& node_;
  Module& module_;
};

using ShapeFn = std::function<absl::Status(InferContext&)>;

struct OpSchema {
  std::string domain;
  std::string op;
  ShapeFn infer;
  // Pure ops may be constant-folded, deduplicated and hoisted out of loops.
  bool pure = true;
  // Outputs are views of an input (no kernel, no data movement): Reshape, Identity, ...
  // Handled by the code generator.
};

class OpRegistry {
 public:
  static OpRegistry& Global();
  void Register(OpSchema schema);
  // nullptr when the op has no schema.
  const OpSchema* Find(absl::string_view domain, absl::string_view op) const;

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<OpSchema>> ops_ ABSL_GUARDED_BY(mu_);
};

// Registers the shape functions of the ONNX operators dynvm supports (shape_functions.cc).
void RegisterOnnxShapeFunctions(OpRegistry& registry);
// ONNX's sequence and optional operators, and Identity of any kind (compiler/sequence_ops.cc).
void RegisterSequenceShapeFunctions(OpRegistry& registry);
// GatherElements, GatherND, Scatter, OneHot, DepthToSpace, SpaceToDepth, ReverseSequence,
// Compress, Pad (compiler/indexing_shape_functions.cc).
void RegisterIndexingShapeFunctions(OpRegistry& registry);
// dynvm's own ops (compiler/dynvm_ops.cc).
void RegisterDynvmShapeFunctions(OpRegistry& registry);
// QuantizeLinear, DequantizeLinear, MatMulInteger, QLinearMatMul, ConvInteger, QLinearConv, with
// their compile-time scale and zero-point checks (compiler/quant_shape_functions.cc).
void RegisterQuantShapeFunctions(OpRegistry& registry);
// Signal, vision and random operators: DFT, STFT, MelWeightMatrix, GridSample, RoiAlign,
// MaxUnpool, MeanVarianceNormalization, Bernoulli, Random* (compiler/signal_shape_functions.cc).
void RegisterSignalShapeFunctions(OpRegistry& registry);

// Numpy-style broadcast of symbolic shapes. Where two dims differ symbolically the result is
// their max (they must be equal or one of them 1 at run time; the kernel checks).
absl::StatusOr<std::vector<Dim>> BroadcastShapes(SymbolicContext& sym, const std::vector<Dim>& a,
                                                 const std::vector<Dim>& b);

// ONNX's TensorProto data type numbers to dynvm dtypes.
std::optional<DType> DTypeFromOnnx(int64_t onnx_type);
int64_t OnnxFromDType(DType d);

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_OP_REGISTRY_H_
