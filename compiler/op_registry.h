// Public API. The compiler side of a user's custom operators: symbolic shape inference per
// (domain, op), registered next to the op's kernel (kernels/registry.h). An op without a shape
// function still compiles: its outputs get an unknown shape and its kernel allocates them at run
// time. dynvm's built-in operators (ONNX's and its own) are defined in compiler/ops/.
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

struct OpDef;  // compiler/ops/op_def.h

class OpRegistry {
 public:
  static OpRegistry& Global();
  // Registers (or replaces) a custom op's schema. A built-in operator of the same domain and
  // name keeps its own definition.
  void Register(OpSchema schema);
  bool Has(absl::string_view domain, absl::string_view op) const;

  // Internal (compiler/ops/op_def.h, FindOpDef): the definition made from a registered schema;
  // nullptr when none. Valid until the same op is registered again.
  const OpDef* FindDef(absl::string_view domain, absl::string_view op) const;

 private:
  mutable std::mutex mu_;
  absl::flat_hash_map<std::string, std::unique_ptr<OpDef>> ops_ ABSL_GUARDED_BY(mu_);
};

// Numpy-style broadcast of symbolic shapes. Where two dims differ symbolically the result is
// their max (they must be equal or one of them 1 at run time; the kernel checks).
absl::StatusOr<std::vector<Dim>> BroadcastShapes(SymbolicContext& sym, const std::vector<Dim>& a,
                                                 const std::vector<Dim>& b);

// ONNX's TensorProto data type numbers to dynvm dtypes.
std::optional<DType> DTypeFromOnnx(int64_t onnx_type);
int64_t OnnxFromDType(DType d);
// ONNX's name of a TensorProto data type number, up to opset 23's ("FLOAT8E4M3FN", "INT4",
// "FLOAT4E2M1"); "#N" for a number ONNX does not define.
std::string OnnxTypeName(int64_t onnx_type);

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_OP_REGISTRY_H_
