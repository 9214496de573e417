#include "compiler/op_registry.h"

#include <iterator>
#include <string>

#include "absl/strings/str_cat.h"
#include "compiler/ops/op_def.h"

namespace dynvm::compiler {
namespace {

absl::Status AttrTypeError(const Node& n, absl::string_view name, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat(n.Label(), ": attribute '", name, "' must be of type ", want));
}

}  // namespace

absl::StatusOr<int64_t> InferContext::GetInt(absl::string_view name, int64_t def) const {
  const AttrValue* a = node_.attr(name);
  if (a == nullptr) return def;
  if (a->type != AttrValue::Type::kInt) return AttrTypeError(node_, name, "int");
  return a->i;
}

absl::StatusOr<float> InferContext::GetFloat(absl::string_view name, float def) const {
  const AttrValue* a = node_.attr(name);
  if (a == nullptr) return def;
  if (a->type == AttrValue::Type::kInt) return static_cast<float>(a->i);
  if (a->type != AttrValue::Type::kFloat) return AttrTypeError(node_, name, "float");
  return a->f;
}

absl::StatusOr<std::string> InferContext::GetString(absl::string_view name, std::string def) const {
  const AttrValue* a = node_.attr(name);
  if (a == nullptr) return def;
  if (a->type != AttrValue::Type::kString) return AttrTypeError(node_, name, "string");
  return a->s;
}

absl::StatusOr<std::vector<int64_t>> InferContext::GetInts(absl::string_view name,
                                                           std::vector<int64_t> def) const {
  const AttrValue* a = node_.attr(name);
  if (a == nullptr) return def;
  if (a->type != AttrValue::Type::kInts) return AttrTypeError(node_, name, "ints");
  return a->ints;
}

void InferContext::SetOutput(size_t i, DType dtype, std::vector<Dim> shape) {
  if (!has_output(i)) return;
  Value* v = node_.outputs[i];
  v->dtype = dtype;
  v->shape = std::move(shape);
  v->dynamic = false;
}

void InferContext::SetOutputDynamic(size_t i, DType dtype, int rank) {
  if (!has_output(i)) return;
  std::vector<Dim> shape;
  for (int d = 0; d < rank; ++d) shape.push_back(module_.sym().Fresh("d"));
  Value* v = node_.outputs[i];
  v->dtype = dtype;
  v->shape = std::move(shape);
  v->dynamic = true;
}

void InferContext::SetOutputUnknown(size_t i, DType dtype) {
  if (!has_output(i)) return;
  Value* v = node_.outputs[i];
  v->dtype = dtype;
  v->shape.reset();
  v->dynamic = true;
}

void InferContext::SetContent(size_t i, std::vector<Dim> content) {
  if (has_output(i)) node_.outputs[i]->content = std::move(content);
}

absl::Status InferContext::Error(absl::string_view message) const {
  return absl::InvalidArgumentError(absl::StrCat(node_.Label(), ": ", message));
}

OpRegistry& OpRegistry::Global() {
  static OpRegistry* r = new OpRegistry();
  return *r;
}

namespace {
std::string CustomKey(absl::string_view domain, absl::string_view op) {
  return absl::StrCat(domain == "ai.onnx" ? "" : domain, "::", op);
}
}  // namespace

void OpRegistry::Register(OpSchema schema) {
  auto def = std::make_unique<OpDef>();
  def->domain = std::move(schema.domain);
  def->name = std::move(schema.op);
  def->infer = std::move(schema.infer);
  def->traits = schema.pure ? kPure : 0;
  std::lock_guard<std::mutex> lock(mu_);
  ops_[CustomKey(def->domain, def->name)] = std::move(def);
}

bool OpRegistry::Has(absl::string_view domain, absl::string_view op) const {
  return FindDef(domain, op) != nullptr;
}

const OpDef* OpRegistry::FindDef(absl::string_view domain, absl::string_view op) const {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = ops_.find(CustomKey(domain, op));
  return it == ops_.end() ? nullptr : it->second.get();
}

absl::StatusOr<std::vector<Dim>> BroadcastShapes(SymbolicContext& sym, const std::vector<Dim>& a,
                                                 const std::vector<Dim>& b) {
  const size_t rank = std::max(a.size(), b.size());
  std::vector<Dim> out(rank);
  for (size_t i = 0; i < rank; ++i) {
    Dim da = i < rank - a.size() ? sym.Const(1) : a[i - (rank - a.size())];
    Dim db = i < rank - b.size() ? sym.Const(1) : b[i - (rank - b.size())];
    auto ca = SymbolicContext::AsConst(da), cb = SymbolicContext::AsConst(db);
    if (da == db || (cb && *cb == 1)) {
      out[i] = da;
    } else if (ca && *ca == 1) {
      out[i] = db;
    } else if (ca && cb) {
      return absl::InvalidArgumentError(absl::StrCat("shapes ", ShapeToString(a), " and ",
                                                     ShapeToString(b), " do not broadcast"));
    } else if (ca) {
      out[i] = da;  // the symbol must be 1 or equal at run time
    } else if (cb) {
      out[i] = db;
    } else {
      // Two symbols: equal, or one of them 1 and the result the other, which is 0 when one is
      // 1 and the other 0. max(a, b) where neither is 0, else 0: max(a, b) * min(a, b, 1).
      out[i] = sym.Mul(sym.Max(da, db), sym.Min(sym.Min(da, db), sym.Const(1)));
    }
  }
  return out;
}

std::optional<DType> DTypeFromOnnx(int64_t t) {
  switch (t) {
    case 1:
      return DType::kF32;
    case 2:
      return DType::kU8;
    case 3:
      return DType::kI8;
    case 4:
      return DType::kU16;
    case 5:
      return DType::kI16;
    case 6:
      return DType::kI32;
    case 7:
      return DType::kI64;
    case 8:
      return DType::kString;
    case 9:
      return DType::kBool;
    case 10:
      return DType::kF16;
    case 11:
      return DType::kF64;
    case 12:
      return DType::kU32;
    case 13:
      return DType::kU64;
    case 16:
      return DType::kBF16;
    default:
      return std::nullopt;
  }
}

std::string OnnxTypeName(int64_t t) {
  static constexpr const char* kNames[] = {
      "UNDEFINED",      "FLOAT",      "UINT8",          "INT8",       "UINT16",   "INT16",
      "INT32",          "INT64",      "STRING",         "BOOL",       "FLOAT16",  "DOUBLE",
      "UINT32",         "UINT64",     "COMPLEX64",      "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN",
      "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",      "INT4",     "FLOAT4E2M1"};
  if (t >= 0 && t < static_cast<int64_t>(std::size(kNames))) return kNames[t];
  return absl::StrCat("#", t);
}

int64_t OnnxFromDType(DType d) {
  switch (d) {
    case DType::kF32:
      return 1;
    case DType::kU8:
      return 2;
    case DType::kI8:
      return 3;
    case DType::kU16:
      return 4;
    case DType::kI16:
      return 5;
    case DType::kI32:
      return 6;
    case DType::kI64:
      return 7;
    case DType::kString:
      return 8;
    case DType::kBool:
      return 9;
    case DType::kF16:
      return 10;
    case DType::kF64:
      return 11;
    case DType::kU32:
      return 12;
    case DType::kU64:
      return 13;
    case DType::kBF16:
      return 16;
  }
  return 0;
}

}  // namespace dynvm::compiler
