#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "compiler/codegen.h"
#include "kernels/registry.h"
#include "kernels/strings.h"
#include "schema/writer.h"

namespace dynvm::compiler {
namespace {

// A string constant's data (docs/strings.md): numel (u64 offset, u64 length) pairs from the
// start of the data, then the bytes.
std::string StringConstantBytes(const Tensor& t) {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  std::string table(n * 16, '\0'), bytes;
  for (uint64_t i = 0; i < n; ++i) {
    const absl::string_view s = StringAt(t, static_cast<int64_t>(i));
    const uint64_t entry[2] = {n * 16 + bytes.size(), s.size()};
    std::memcpy(table.data() + 16 * i, entry, 16);  // little-endian hosts only (docs/trust.md)
    bytes.append(s.data(), s.size());
  }
  return table + bytes;
}

std::string TensorBytes(const Tensor& t) {
  if (t.dtype() == DType::kString) return StringConstantBytes(t);
  std::string bytes(static_cast<size_t>(t.nbytes()), '\0');
  if (t.numel() == 0) return bytes;
  if (t.is_contiguous()) {
    std::memcpy(bytes.data(), t.raw_data(), bytes.size());
    return bytes;
  }
  // Gather a strided tensor in row-major order.
  const int64_t esize = DTypeSize(t.dtype());
  int64_t idx[Tensor::kMaxRank] = {};
  for (int64_t i = 0; i < t.numel(); ++i) {
    int64_t off = 0;
    for (int d = 0; d < t.rank(); ++d) off += idx[d] * t.stride(d);
    std::memcpy(bytes.data() + i * esize, static_cast<const uint8_t*>(t.raw_data()) + off * esize,
                esize);
    for (int d = t.rank() - 1; d >= 0; --d) {
      if (++idx[d] < t.dim(d)) break;
      idx[d] = 0;
    }
  }
  return bytes;
}

std::unique_ptr<fb::PortT> Port(const Value* v, bool dynamic) {
  auto p = std::make_unique<fb::PortT>();
  if (v == nullptr) {
    p->optional = true;
    p->dtype = kAnyDType;
    return p;
  }
  p->kind = static_cast<fb::ObjectKind>(v->kind);
  p->dtype = static_cast<uint8_t>(v->dtype);
  p->dynamic = dynamic;
  return p;
}

}  // namespace

KernelSpec SpecFor(const Node& node, const std::vector<bool>& dynamic_outputs, Device device) {
  KernelSpec spec;
  spec.op = node.op;
  spec.domain = node.domain;
  spec.device = device;
  spec.attrs = node.attrs;
  auto port = [](const Value* v, bool dynamic) {
    PortSpec p;
    if (v == nullptr) {
      p.optional = true;
      return p;
    }
    p.kind = v->kind;
    p.dtype = static_cast<uint8_t>(v->dtype);
    p.dynamic = dynamic;
    return p;
  };
  for (const Value* v : node.inputs) spec.inputs.push_back(port(v, false));
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    spec.outputs.push_back(port(node.outputs[i], i < dynamic_outputs.size() && dynamic_outputs[i]));
  }
  return spec;
}

ExecutableBuilder::ExecutableBuilder() : exe_(std::make_unique<fb::ExecutableT>()) {}

uint32_t ExecutableBuilder::ConstantTensor(const Tensor& t, const std::string& name,
                                           bool is_weight) {
  std::string bytes = TensorBytes(t);
  std::string key = absl::StrCat(static_cast<int>(t.dtype()), DimsString(t.dims()), "|",
                                 bytes.size(), "|", absl::string_view(bytes).substr(0, 64));
  for (uint32_t idx : by_content_[key]) {
    if (data_[idx] == bytes) {
      if (is_weight) exe_->constants[idx]->is_weight = true;
      return idx;
    }
  }
  auto c = std::make_unique<fb::ConstantT>();
  c->dtype = static_cast<uint8_t>(t.dtype());
  c->shape.assign(t.dims().begin(), t.dims().end());
  c->name = name;
  c->is_weight = is_weight;
  const uint32_t idx = static_cast<uint32_t>(exe_->constants.size());
  exe_->constants.push_back(std::move(c));
  data_.push_back(std::move(bytes));
  by_content_[key].push_back(idx);
  return idx;
}

uint32_t ExecutableBuilder::ConstantOf(const Value* v) {
  auto it = by_value_.find(v);
  if (it != by_value_.end()) return it->second;
  const uint32_t idx = ConstantTensor(*v->constant, v->name, v->is_weight);
  by_value_.emplace(v, idx);
  return idx;
}

absl::StatusOr<uint32_t> ExecutableBuilder::KernelFor(const Node& node,
                                                      const std::vector<bool>& dynamic_outputs,
                                                      Device device) {
  auto k = std::make_unique<fb::KernelT>();
  k->op = node.op;
  k->domain = node.domain;
  k->device = static_cast<uint8_t>(device);
  std::string key = absl::StrCat(node.domain, "::", node.op, "@", static_cast<int>(device), "|in:");
  for (const Value* v : node.inputs) {
    k->inputs.push_back(Port(v, false));
    absl::StrAppend(&key, v ? static_cast<int>(v->dtype) : -1, ",");
  }
  absl::StrAppend(&key, "|out:");
  for (size_t i = 0; i < node.outputs.size(); ++i) {
    const Value* v = node.outputs[i];
    const bool dyn = i < dynamic_outputs.size() && dynamic_outputs[i];
    k->outputs.push_back(Port(v, dyn));
    absl::StrAppend(&key, v ? static_cast<int>(v->dtype) : -1, dyn ? "d" : "", ",");
  }
  absl::StrAppend(&key, "|attrs:");
  for (const auto& [name, a] : node.attrs) {
    auto fa = std::make_unique<fb::AttributeT>();
    fa->name = name;
    switch (a.type) {
      case AttrValue::Type::kInt:
        fa->type = fb::AttrType::Int;
        fa->i = a.i;
        absl::StrAppend(&key, name, "=i", a.i, ";");
        break;
      case AttrValue::Type::kFloat: {
        fa->type = fb::AttrType::Float;
        fa->f = a.f;
        uint32_t bits;
        std::memcpy(&bits, &a.f, 4);
        absl::StrAppend(&key, name, "=f", bits, ";");
        break;
      }
      case AttrValue::Type::kString:
        fa->type = fb::AttrType::String;
        fa->s = a.s;
        absl::StrAppend(&key, name, "=s", a.s.size(), ":", a.s, ";");
        break;
      case AttrValue::Type::kInts:
        fa->type = fb::AttrType::Ints;
        fa->ints = a.ints;
        absl::StrAppend(&key, name, "=I", absl::StrJoin(a.ints, ","), ";");
        break;
      case AttrValue::Type::kFloats: {
        fa->type = fb::AttrType::Floats;
        fa->floats = a.floats;
        absl::StrAppend(&key, name, "=F");
        for (float f : a.floats) {
          uint32_t bits;
          std::memcpy(&bits, &f, 4);
          absl::StrAppend(&key, bits, ",");
        }
        absl::StrAppend(&key, ";");
        break;
      }
      case AttrValue::Type::kStrings:
        fa->type = fb::AttrType::Strings;
        fa->strings = a.strings;
        absl::StrAppend(&key, name, "=S");
        for (const std::string& s : a.strings) absl::StrAppend(&key, s.size(), ":", s, ",");
        absl::StrAppend(&key, ";");
        break;
      case AttrValue::Type::kTensor:
        if (!a.tensor.defined()) {
          return absl::InvalidArgumentError(
              absl::StrCat(node.Label(), ": attribute '", name, "' has no tensor"));
        }
        fa->type = fb::AttrType::Tensor;
        fa->tensor = ConstantTensor(a.tensor, "", false);
        absl::StrAppend(&key, name, "=t", fa->tensor, ";");
        break;
    }
    k->attrs.push_back(std::move(fa));
  }
  auto it = kernels_.find(key);
  if (it != kernels_.end()) return it->second;
  const uint32_t idx = static_cast<uint32_t>(exe_->kernels.size());
  exe_->kernels.push_back(std::move(k));
  specs_.push_back(SpecFor(node, dynamic_outputs, device));
  kernels_.emplace(std::move(key), idx);
  return idx;
}

bool ExecutableBuilder::DeviceAccepts(const Node& node, const std::vector<bool>& dynamic_outputs,
                                      Device device) {
  if (!KernelRegistry::Global().HasOp(node.domain, node.op, device)) return false;
  return KernelRegistry::Global().Create(SpecFor(node, dynamic_outputs, device)).ok();
}

absl::Status ExecutableBuilder::CheckKernel(uint32_t kernel, const Node& node,
                                            const std::vector<bool>& dynamic_outputs,
                                            Device device) {
  if (kernel < kernel_checked_.size() && kernel_checked_[kernel]) return absl::OkStatus();
  const KernelSpec spec = SpecFor(node, dynamic_outputs, device);
  std::vector<std::string> in_types, out_types;
  for (const Value* v : node.inputs) in_types.push_back(v ? std::string(DTypeName(v->dtype)) : "-");
  for (const Value* v : node.outputs)
    out_types.push_back(v ? std::string(DTypeName(v->dtype)) : "-");
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  if (!k.ok()) {
    return absl::UnimplementedError(
        absl::StrCat(node.Label(), ": no kernel for ", node.op, "(", absl::StrJoin(in_types, ", "),
                     ") -> (", absl::StrJoin(out_types, ", "), "): ", k.status().message()));
  }
  if (kernel_checked_.size() <= kernel) kernel_checked_.resize(kernel + 1, false);
  kernel_checked_[kernel] = true;
  return absl::OkStatus();
}

uint32_t ExecutableBuilder::String(const std::string& s) {
  auto it = strings_.find(s);
  if (it != strings_.end()) return it->second;
  const uint32_t idx = static_cast<uint32_t>(exe_->strings.size());
  exe_->strings.push_back(s);
  strings_.emplace(s, idx);
  return idx;
}

void ExecutableBuilder::Location(uint32_t function, uint32_t pc, const std::string& node) {
  if (!locations_.empty() && locations_.back()->function == function &&
      locations_.back()->pc == pc) {
    locations_.back()->node = node;
    return;
  }
  auto l = std::make_unique<fb::SourceLocationT>();
  l->function = function;
  l->pc = pc;
  l->node = node;
  locations_.push_back(std::move(l));
}

absl::StatusOr<schema::SerializedFiles> ExecutableBuilder::Serialize(
    const schema::WriteOptions& options) {
  if (!options.strip_debug && !locations_.empty()) {
    std::stable_sort(locations_.begin(), locations_.end(), [](const auto& a, const auto& b) {
      return std::make_pair(a->function, a->pc) < std::make_pair(b->function, b->pc);
    });
    exe_->debug = std::make_unique<fb::DebugInfoT>();
    exe_->debug->locations = std::move(locations_);
  }
  std::vector<absl::string_view> data(data_.begin(), data_.end());
  return schema::SerializeExecutableFiles(*exe_, data, options);
}

}  // namespace dynvm::compiler
