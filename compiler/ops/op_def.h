// Internal. One definition per operator, as isa/opcodes.h is one per instruction.
//
// An OpDef holds everything the compiler knows of an operator: its domain and name, its
// signature per schema version (how many inputs, which are required, the attributes and their
// types), its traits (pure, elementwise, view, ...), its shape function, and the lowering of its
// older forms to the one its kernel takes. The importer's operator table, the shape-inference
// registry and every trait list the passes consult derive from these definitions, which live in
// compiler/ops/<family>.cc. Adding an operator means an OpDef row there, a kernel, and a test
// (docs/compiler.md, "Adding an operator").
//
// A user's custom op registers a shape function through compiler/op_registry.h; FindOpDef sees
// those too (traits: pure or not, nothing else).
//
// Thread safety: the built-in table is immutable once built (on first use).
#ifndef DYNVM_COMPILER_OPS_OP_DEF_H_
#define DYNVM_COMPILER_OPS_OP_DEF_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "compiler/ir.h"
#include "compiler/op_registry.h"

namespace dynvm::compiler {

// What the passes may assume of an operator. A trait holds for every node of the op (Dropout's
// view and lazy-shape traits have a condition: OpDef::view_if).
enum OpTrait : uint32_t {
  // May be constant-folded, deduplicated and hoisted out of loops.
  kPure = 1u << 0,
  // Output element i reads only the elements at i of its inputs (after NumPy broadcasting):
  // row selection narrows through it (compiler/narrow_rows.cc).
  kElementwise = 1u << 1,
  // Output 0 is input 0 with another shape: no kernel when the plan aliases them.
  kView = 1u << 2,
  // Integer shape arithmetic (Shape, Gather of dims, Concat ...): a result whose symbolic
  // content is known becomes scalar code, never a tensor (compiler/memory_plan.cc).
  kShapeArith = 1u << 3,
  // Makes or reads a sequence or an optional: lowered to seq_*/opt_* instructions.
  kContainer = 1u << 4,
  // Holds regions (If, Loop, Scan, SequenceMap): inferred and lowered with them.
  kControlFlow = 1u << 5,
  // Never reaches a kernel: the importer or the code generator turns it into something else
  // (a constant, instructions, another op).
  kNoKernel = 1u << 6,
  // Its opset-1-to-6 versions broadcast with `broadcast`/`axis` attributes, which the importer
  // rewrites to NumPy broadcasting.
  kLegacyBroadcast = 1u << 7,
};

// Attribute types, numbered as ONNX's AttributeProto.AttributeType.
enum class AttrKind : uint8_t {
  kFloat = 1,
  kInt = 2,
  kString = 3,
  kTensor = 4,
  kGraph = 5,
  kFloats = 6,
  kInts = 7,
  kStrings = 8,
  kSparseTensor = 11,
  kTypeProto = 13,
};
absl::string_view AttrKindName(AttrKind kind);  // "INT", "FLOATS", ... (ONNX's names)

// The signature of one schema version: from opset `since` of the op's domain on (until the next
// version), at most `max_inputs` inputs (0: any number), and the inputs whose bit is set in
// `required_mask` present. A version ONNX defines that dynvm does not take (`refused`, written
// "since:x" in a row) is refused at import, with the row's reason (OpRow::refused).
struct OpVersion {
  int since = 1;
  int max_inputs = 0;
  uint32_t required_mask = 0;
  bool refused = false;
};

// An attribute of some version: its type, and the opsets it exists in ([since, until); an
// attribute that became an input in some version ends there).
struct AttrDef {
  AttrKind kind = AttrKind::kInt;
  int since = 0;
  int until = 1 << 30;
};

// What an op's lowering sees: the node as imported, the opset of its domain in the model, the
// module (for constants it adds) and the node's label for messages.
struct LowerContext {
  Node& node;
  int64_t opset;
  Module& module;
  absl::string_view label;
};
using LowerFn = absl::Status (*)(LowerContext&);
using ShapeFnPtr = absl::Status (*)(InferContext&);

struct OpDef {
  std::string domain;  // "" = ONNX's default domain
  std::string name;
  // For the default domain: the opset the op's opset-7 schema dates from (7: from 7 or
  // later). A model of an older opset may use the op only from this opset on.
  int since = 7;
  std::vector<OpVersion> versions;  // by increasing `since`; empty: no ONNX schema (dynvm's own)
  absl::flat_hash_map<std::string, AttrDef> attrs;
  uint32_t traits = 0;
  ShapeFn infer;  // empty: inferred elsewhere (control flow) or at run time by its kernel
  // Rewrites the op's form at an older (or newer) opset to the form its kernel and shape
  // function take, at import. Null: every version has the same form.
  LowerFn lower = nullptr;
  // kView ops whose nodes are views only under a condition (Dropout: in inference mode).
  bool (*view_if)(const Node&) = nullptr;
  // Why the refused versions are refused (OpVersion::refused).
  std::string refusal;

  bool has(OpTrait t) const { return (traits & t) != 0; }
  // The signature in force at `opset`; nullptr when the op does not exist there yet.
  const OpVersion* VersionAt(int64_t opset) const;
  // The attribute `name` at `opset`; nullptr when the op has no such attribute there.
  const AttrDef* AttrAt(absl::string_view name, int64_t opset) const;
  std::string QualifiedName() const;  // "Relu", "dynvm::Linear"
};

// One row of a family's table (compiler/ops/<family>.cc):
//   signature  "since:max_inputs:required_mask ..." per schema version ("" for ops without an
//              ONNX schema); "since:x" for a version dynvm refuses (`refused` says why);
//   attrs      "name:T[@since[-until]] ..." with T one of i (INT), f (FLOAT), s (STRING),
//              I (INTS), F (FLOATS), S (STRINGS), t (TENSOR), g (GRAPH), T (TYPE_PROTO),
//              x (SPARSE_TENSOR); `@13` limits the attribute to opsets from 13, `@1-13` to
//              opsets before 13.
struct OpRow {
  const char* name;
  int since;
  const char* signature;
  const char* attrs;
  uint32_t traits;
  ShapeFnPtr infer;
  LowerFn lower = nullptr;
  bool (*view_if)(const Node&) = nullptr;
  const char* refused = nullptr;  // why the "since:x" versions are refused
};

// Collects the definitions of every family (op_def.cc calls each family's Define*Ops).
class OpTable {
 public:
  // Adds the rows of one family in `domain`. A malformed row or a name defined twice in a
  // domain is a programmer error, recorded in errors() (op_def_test asserts it is empty); the
  // first definition of a name stays.
  void Add(absl::string_view domain, absl::Span<const OpRow> rows);
  const OpDef* Find(absl::string_view domain, absl::string_view name) const;
  const std::vector<const OpDef*>& all() const { return order_; }
  const std::vector<std::string>& errors() const { return errors_; }

 private:
  absl::flat_hash_map<std::string, std::unique_ptr<OpDef>> defs_;
  std::vector<const OpDef*> order_;
  std::vector<std::string> errors_;
};

// The built-in definitions, every domain, in the families' order.
const OpTable& BuiltinOps();

// The definition of (domain, op): a built-in one, else a custom op's (op_registry.h); nullptr
// when there is none. "ai.onnx" is the default domain.
const OpDef* FindOpDef(absl::string_view domain, absl::string_view op);

// Whether `n`'s op has trait `t` (false for ops without a definition). kView also checks the
// op's view_if condition.
bool HasTrait(const Node& n, OpTrait t);

// The families (compiler/ops/<family>.cc).
void DefineElementwiseOps(OpTable& t);
void DefineTensorOps(OpTable& t);
void DefineIndexingOps(OpTable& t);
void DefineReduceOps(OpTable& t);
void DefineNnOps(OpTable& t);
void DefineQuantOps(OpTable& t);
void DefineSignalOps(OpTable& t);
void DefineStringOps(OpTable& t);
void DefineSequenceOps(OpTable& t);
void DefineDynvmOps(OpTable& t);
void DefineMsftOps(OpTable& t);  // com.microsoft (ONNX Runtime's contrib operators)

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_OPS_OP_DEF_H_
