#include "vm/executable.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/cuda_allocator.h"
#include "isa/instruction.h"
#include "schema/executable_generated.h"
#include "schema/fb_util.h"
#include "schema/mapped_file.h"

namespace dynvm {
namespace {

using schema::Sv;

absl::StatusOr<AttrValue> ConvertAttr(const fb::Attribute& a, const Executable& exe,
                                      const StorageRef& constants) {
  AttrValue v;
  switch (a.type()) {
    case fb::AttrType::Int:
      v.type = AttrValue::Type::kInt;
      v.i = a.i();
      break;
    case fb::AttrType::Float:
      v.type = AttrValue::Type::kFloat;
      v.f = a.f();
      break;
    case fb::AttrType::String:
      v.type = AttrValue::Type::kString;
      v.s = std::string(Sv(a.s()));
      break;
    case fb::AttrType::Ints:
      v.type = AttrValue::Type::kInts;
      if (a.ints()) v.ints.assign(a.ints()->begin(), a.ints()->end());
      break;
    case fb::AttrType::Floats:
      v.type = AttrValue::Type::kFloats;
      if (a.floats()) v.floats.assign(a.floats()->begin(), a.floats()->end());
      break;
    case fb::AttrType::Strings:
      v.type = AttrValue::Type::kStrings;
      if (a.strings()) {
        for (const auto* s : *a.strings()) v.strings.emplace_back(Sv(s));
      }
      break;
    case fb::AttrType::Tensor: {
      v.type = AttrValue::Type::kTensor;
      const Executable::ConstantEntry& c = exe.constant(static_cast<int>(a.tensor()));
      absl::StatusOr<Tensor> t = Tensor::View(constants, static_cast<int64_t>(c.offset), c.dtype, c.shape);
      if (!t.ok()) return t.status();
      v.tensor = *std::move(t);
      break;
    }
  }
  return v;
}

ParamInfo ConvertParam(const fb::Param& p) {
  ParamInfo info;
  info.name = std::string(Sv(p.name()));
  info.dtype = static_cast<DType>(p.dtype());
  info.kind = static_cast<ObjectKind>(p.kind());
  info.has_shape = p.has_shape();
  if (p.shape()) {
    for (const fb::Dim* d : *p.shape()) info.shape.push_back({d->value(), std::string(Sv(d->symbol()))});
  }
  return info;
}

}  // namespace

Executable::~Executable() = default;

absl::StatusOr<std::shared_ptr<const Executable>> Executable::Load(const std::string& path,
                                                                   const LoadOptions& options) {
  absl::StatusOr<std::shared_ptr<const schema::MappedFile>> file = schema::MappedFile::Open(path);
  if (!file.ok()) return file.status();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Init(*std::move(file), options);
  if (!exe.ok()) return absl::Status(exe.status().code(), absl::StrCat(path, ": ", exe.status().message()));
  return exe;
}

absl::StatusOr<std::shared_ptr<const Executable>> Executable::LoadFromBytes(
    absl::Span<const uint8_t> bytes, const LoadOptions& options) {
  return Init(schema::MappedFile::FromBytes(bytes), options);
}

absl::StatusOr<std::shared_ptr<const Executable>> Executable::Init(
    std::shared_ptr<const schema::MappedFile> file, const LoadOptions& options) {
  absl::StatusOr<isa::VerifiedFile> verified = isa::VerifyFile(file->bytes(), options.limits);
  if (!verified.ok()) return verified.status();
  std::shared_ptr<Executable> exe(new Executable());
  exe->file_ = std::move(file);
  exe->fb_ = verified->executable;
  exe->features_ = verified->header.required_features;
  const fb::Executable& fbe = *exe->fb_;
  if (exe->features_ & (schema::kFeatureExternalWeights | schema::kFeatureCompressedConstants)) {
    return absl::UnimplementedError("external and compressed weights are not supported yet");
  }
  exe->constant_segment_ = exe->file_->bytes().data() + verified->header.constants_offset;
  exe->constant_segment_size_ = static_cast<int64_t>(verified->header.constants_size);
  // A storage over the constant segment for tensor-valued attributes; the kernels holding
  // views die with this executable, so it needs no keep-alive of its own.
  exe->constant_storage_ = Storage::Wrap(Storage::Kind::kConstant, const_cast<uint8_t*>(exe->constant_segment_),
                                         static_cast<size_t>(exe->constant_segment_size_), Device::kCPU, nullptr);
  if (fbe.constants()) {
    for (const fb::Constant* c : *fbe.constants()) {
      ConstantEntry e;
      e.dtype = static_cast<DType>(c->dtype());
      if (c->shape()) e.shape.assign(c->shape()->begin(), c->shape()->end());
      e.offset = c->offset();
      e.size = c->size();
      if (c->is_weight()) {
        ++exe->num_weights_;
        exe->weight_bytes_ += static_cast<int64_t>(c->size());
      }
      exe->constants_.push_back(std::move(e));
    }
  }
  if (fbe.kernels()) {
    for (uint32_t i = 0; i < fbe.kernels()->size(); ++i) {
      const fb::Kernel* k = fbe.kernels()->Get(i);
      KernelEntry e;
      e.spec.op = std::string(Sv(k->op()));
      e.spec.domain = std::string(Sv(k->domain()));
      e.spec.device = static_cast<Device>(k->device());
      e.spec.backend = std::string(Sv(k->backend()));
      auto ports = [](const auto* list, std::vector<PortSpec>& out) {
        if (list == nullptr) return;
        for (const fb::Port* p : *list) {
          out.push_back({static_cast<ObjectKind>(p->kind()), p->dtype(), p->optional(), p->dynamic()});
        }
      };
      ports(k->inputs(), e.spec.inputs);
      ports(k->outputs(), e.spec.outputs);
      for (const PortSpec& p : e.spec.outputs) e.dynamic_outputs.push_back(p.dynamic);
      if (k->attrs()) {
        for (const fb::Attribute* a : *k->attrs()) {
          absl::StatusOr<AttrValue> v = ConvertAttr(*a, *exe, exe->constant_storage_);
          if (!v.ok()) return v.status();
          e.spec.attrs[std::string(Sv(a->name()))] = *std::move(v);
        }
      }
      if (e.spec.device == Device::kCUDA && !CudaBuildEnabled() &&
          !KernelRegistry::Global().HasOp(e.spec.domain, e.spec.op, e.spec.device)) {
        return absl::UnimplementedError(absl::StrCat("kernel ", i, " (", e.spec.DebugName(),
                                                     ") runs on the cuda device: this build has "
                                                     "no CUDA device support"));
      }
      absl::StatusOr<std::unique_ptr<Kernel>> kernel = KernelRegistry::Global().Create(e.spec, options.backends);
      if (!kernel.ok()) {
        return absl::Status(kernel.status().code(),
                            absl::StrCat("kernel ", i, " (", e.spec.DebugName(), "): ", kernel.status().message()));
      }
      e.kernel = *std::move(kernel);
      exe->max_invoke_arity_ = std::max<uint32_t>(exe->max_invoke_arity_,
                                                  static_cast<uint32_t>(std::max(e.spec.inputs.size(), e.spec.outputs.size())));
      exe->kernels_.push_back(std::move(e));
    }
  }
  bool have_main = false;
  for (uint32_t i = 0; i < fbe.functions()->size(); ++i) {
    const fb::Function* f = fbe.functions()->Get(i);
    FunctionEntry e;
    e.info.name = std::string(Sv(f->name()));
    have_main |= e.info.name == "main";
    e.code = f->code()->data();
    e.code_size = f->code()->size();
    e.num_scalars = f->scalar_types() ? f->scalar_types()->size() : 0;
    e.num_objects = f->object_types() ? f->object_types()->size() : 0;
    e.num_object_params = f->num_object_params();
    e.num_scalar_params = f->num_scalar_params();
    e.num_object_results = f->object_results() ? f->object_results()->size() : 0;
    e.num_sites = f->num_invoke_sites();
    if (f->object_types()) {
      for (const fb::ObjectType* t : *f->object_types()) e.object_kinds.push_back(static_cast<uint8_t>(t->kind()));
    }
    if (f->scalar_types()) {
      for (fb::ScalarType t : *f->scalar_types()) e.scalar_kinds.push_back(static_cast<uint8_t>(t));
    }
    if (const fb::Signature* sig = f->signature()) {
      e.info.is_entry = true;
      if (sig->inputs()) for (const fb::Param* p : *sig->inputs()) e.info.inputs.push_back(ConvertParam(*p));
      if (sig->outputs()) for (const fb::Param* p : *sig->outputs()) e.info.outputs.push_back(ConvertParam(*p));
      // An optional's content kind is its register's (the verifier checks the signature's
      // kinds and dtypes against the registers).
      for (size_t k = 0; k < e.info.inputs.size() && f->object_types() && k < f->object_types()->size(); ++k) {
        e.info.inputs[k].elem_kind = static_cast<ObjectKind>(f->object_types()->Get(k)->elem_kind());
      }
      for (size_t k = 0; k < e.info.outputs.size() && f->object_results() && k < f->object_results()->size(); ++k) {
        e.info.outputs[k].elem_kind = static_cast<ObjectKind>(f->object_results()->Get(k)->elem_kind());
      }
    }
    if (f->bounds()) {
      for (const fb::SymbolBound* b : *f->bounds()) e.info.bounds.emplace_back(std::string(Sv(b->name())), b->bound());
    }
    exe->functions_.push_back(std::move(e));
  }
  (void)have_main;
  return std::shared_ptr<const Executable>(std::move(exe));
}

absl::StatusOr<int> Executable::FindFunction(absl::string_view name) const {
  if (name.empty()) {
    for (size_t i = 0; i < functions_.size(); ++i) {
      if (functions_[i].info.name == "main") return static_cast<int>(i);
    }
    for (size_t i = 0; i < functions_.size(); ++i) {
      if (functions_[i].info.is_entry) return static_cast<int>(i);
    }
    return absl::NotFoundError("executable has no entry function (no 'main' and no signature)");
  }
  std::vector<std::string> entries;
  for (size_t i = 0; i < functions_.size(); ++i) {
    if (functions_[i].info.name == name) return static_cast<int>(i);
    if (functions_[i].info.is_entry) entries.push_back(functions_[i].info.name);
  }
  return absl::NotFoundError(absl::StrCat("no function named '", name, "'; entry functions: ",
                                          absl::StrJoin(entries, ", ")));
}

absl::string_view Executable::SourceNode(int function, uint32_t pc) const {
  if (fb_->debug() == nullptr || fb_->debug()->locations() == nullptr) return {};
  const auto* locs = fb_->debug()->locations();
  // Locations are sorted by (function, pc): binary search for the last one at or before pc
  // within the function.
  uint32_t lo = 0, hi = locs->size();
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    const fb::SourceLocation* l = locs->Get(mid);
    if (std::make_pair(l->function(), l->pc()) <= std::make_pair(static_cast<uint32_t>(function), pc)) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo == 0) return {};
  const fb::SourceLocation* l = locs->Get(lo - 1);
  // A location covers the instructions from its pc up to the next location.
  if (l->function() != static_cast<uint32_t>(function)) return {};
  return Sv(l->node());
}

absl::StatusOr<StorageRef> Executable::DeviceConstants(DeviceContext& device) const {
  const int d = static_cast<int>(device.device());
  if (d <= 0 || d >= kNumDevices) {
    return absl::InvalidArgumentError("DeviceConstants: not a device");
  }
  std::lock_guard<std::mutex> lock(device_mu_);
  if (!device_constants_[d]) {
    absl::StatusOr<StorageRef> st =
        device.UploadConstant(constant_segment_, static_cast<size_t>(constant_segment_size_));
    if (!st.ok()) return st.status();
    device_constants_[d] = *std::move(st);
  }
  return device_constants_[d];
}

absl::string_view Executable::string(uint32_t index) const { return Sv(fb_->strings()->Get(index)); }

std::string Executable::DebugSummary() const {
  std::string s = absl::StrCat(functions_.size(), " functions, ", kernels_.size(), " kernels, ",
                               constants_.size(), " constants (", constant_segment_size_, " bytes, ",
                               num_weights_, " weights)");
  return s;
}

}  // namespace dynvm
