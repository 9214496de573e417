#include "vm/executable.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <map>
#include <tuple>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/cuda_allocator.h"
#include "common/status_macros.h"
#include "isa/instruction.h"
#include "isa/operands.h"
#include "isa/verifier.h"
#include "schema/executable_generated.h"
#include "schema/fb_util.h"
#include "schema/format.h"
#include "schema/mapped_file.h"
#include "schema/weights.h"
#include "vm/executable_impl.h"
#include "vm/gathered_constants.h"

namespace dynvm {
namespace {

using schema::Sv;

// Checks string constant `index` (docs/strings.md) and points its elements into the segment.
absl::Status LoadStringConstant(const Executable::Rep& rep, Executable::ConstantEntry& e,
                                size_t index) {
  int64_t numel = 1;
  for (int64_t d : e.shape) numel *= d;  // verified: no overflow, size >= 16 * numel
  const uint8_t* base = rep.constant_segment + e.offset;  // verified in range
  absl::Status s = isa::CheckStringConstant({base, e.size}, numel);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("constant ", index, ": ", s.message()));
  }
  e.strings.resize(static_cast<size_t>(numel));
  for (int64_t i = 0; i < numel; ++i) {
    uint64_t off, len;
    std::memcpy(&off, base + 16 * i, 8);
    std::memcpy(&len, base + 16 * i + 8, 8);
    e.strings[i] = {reinterpret_cast<const char*>(base + off), static_cast<int64_t>(len)};
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Tensor> ConstantTensor(const Executable::ConstantEntry& c, const StorageRef& segment,
                                      std::function<void()> release) {
  if (c.dtype != DType::kString) {
    return Tensor::View(segment, static_cast<int64_t>(c.offset), c.dtype, c.shape);
  }
  StorageRef refs =
      Storage::Wrap(Storage::Kind::kConstant, const_cast<StringRef*>(c.strings.data()),
                    c.strings.size() * sizeof(StringRef), Device::kCPU, std::move(release));
  return Tensor::View(std::move(refs), 0, DType::kString, c.shape);
}

namespace {

absl::StatusOr<AttrValue> ConvertAttr(const fb::Attribute& a, const Executable::Rep& exe,
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
      DYNVM_ASSIGN_OR_RETURN(Tensor t, ConstantTensor(c, constants, nullptr));
      v.tensor = std::move(t);
      break;
    }
  }
  return v;
}

// The loader's one conversion of a kernel-table entry into the KernelSpec its factory sees
// (the compiler's counterpart is SpecFor). Tensor-valued attributes view `exe`'s constants.
absl::StatusOr<KernelSpec> SpecFromFb(const fb::Kernel& k, const Executable::Rep& exe) {
  KernelSpec spec;
  spec.op = std::string(Sv(k.op()));
  spec.domain = std::string(Sv(k.domain()));
  spec.device = static_cast<Device>(k.device());
  spec.backend = std::string(Sv(k.backend()));
  auto ports = [](const auto* list, std::vector<PortSpec>& out) {
    if (list == nullptr) return;
    for (const fb::Port* p : *list) {
      out.push_back({static_cast<ObjectKind>(p->kind()), p->dtype(), p->optional(), p->dynamic()});
    }
  };
  ports(k.inputs(), spec.inputs);
  ports(k.outputs(), spec.outputs);
  if (k.attrs()) {
    for (const fb::Attribute* a : *k.attrs()) {
      DYNVM_ASSIGN_OR_RETURN(AttrValue v, ConvertAttr(*a, exe, exe.constant_storage));
      spec.attrs[std::string(Sv(a->name()))] = std::move(v);
    }
  }
  return spec;
}

ParamInfo ConvertParam(const fb::Param& p) {
  ParamInfo info;
  info.name = std::string(Sv(p.name()));
  info.dtype = static_cast<DType>(p.dtype());
  info.kind = static_cast<ObjectKind>(p.kind());
  info.has_shape = p.has_shape();
  if (p.shape()) {
    for (const fb::Dim* d : *p.shape())
      info.shape.push_back({d->value(), std::string(Sv(d->symbol()))});
  }
  return info;
}

}  // namespace

// A constant segment that lives apart from the executable's own mapping: a mapped weights
// file, or a decompressed buffer. Shared through the registry below.
struct Executable::Segment {
  std::shared_ptr<const schema::MappedFile> file;  // the mapping, for uncompressed weights
  uint8_t* owned = nullptr;                        // the decompressed bytes (aligned_alloc)
  const uint8_t* data = nullptr;
  uint64_t size = 0;
  ~Segment() { std::free(owned); }
};

namespace {

using Segment = Executable::Segment;

// Process-wide: (source, hash, size) -> the live segment. Weak references, so a segment dies
// with the last executable that uses it. One mutex, held while a segment loads: a second
// executable that wants the same weights waits and shares them instead of loading again.
enum class SegmentSource : uint8_t { kWeightsFile = 0, kInlineCompressed = 1 };
using SegmentKey = std::tuple<uint8_t, uint64_t, uint64_t>;

struct SegmentRegistry {
  std::mutex mu;
  std::map<SegmentKey, std::weak_ptr<const Segment>> live;  // guarded by mu
};

SegmentRegistry& Registry() {
  static auto* r = new SegmentRegistry();  // never destroyed: executables may outlive main
  return *r;
}

template <typename LoadFn>
absl::StatusOr<std::shared_ptr<const Segment>> SharedSegment(const SegmentKey& key, LoadFn load) {
  SegmentRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  auto it = r.live.find(key);
  if (it != r.live.end()) {
    if (std::shared_ptr<const Segment> s = it->second.lock()) return s;
  }
  DYNVM_ASSIGN_OR_RETURN(std::shared_ptr<const Segment> s, load());
  r.live[key] = s;
  // Drop expired entries now and then, so the map does not grow with dead segments.
  for (auto i = r.live.begin(); i != r.live.end();) {
    i = i->second.expired() ? r.live.erase(i) : std::next(i);
  }
  return s;
}

// Decompresses `stored` into a new 64-byte aligned buffer of `raw_size` bytes.
absl::StatusOr<std::shared_ptr<const Segment>> Decompress(absl::Span<const uint8_t> stored,
                                                          uint64_t raw_size) {
  // The frame must declare raw_size before that much is allocated.
  DYNVM_RETURN_IF_ERROR(schema::CheckCompressedSegment(stored, raw_size));
  auto seg = std::make_shared<Segment>();
  if (raw_size > 0) {
    const uint64_t padded = (raw_size + 63) / 64 * 64;
    seg->owned = static_cast<uint8_t*>(std::aligned_alloc(64, padded));
    if (seg->owned == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("cannot allocate ", raw_size, " bytes for the decompressed constants"));
    }
    DYNVM_RETURN_IF_ERROR(schema::DecompressSegment(stored, seg->owned, raw_size));
  }
  seg->data = seg->owned;
  seg->size = raw_size;
  return std::shared_ptr<const Segment>(std::move(seg));
}

// Finds the alloc_tensor instructions of an entry function that make its outputs' tensors
// (FunctionEntry::output_allocs). Conservative: a register written by any other instruction, an
// allocation inside a loop, or rets that disagree leave the output out (it is copied instead).
void FindOutputAllocs(Executable::FunctionEntry& e,
                      const std::vector<Executable::KernelEntry>& kernels) {
  const absl::Span<const uint32_t> code(e.code, e.code_size);
  std::vector<int> writes(e.num_objects, 0);
  std::vector<int64_t> alloc_pc(e.num_objects, -1);
  std::vector<uint32_t> ret_regs;
  bool have_ret = false;
  int loop_depth = 0;
  auto write = [&](uint32_t r) {
    if (r < writes.size()) ++writes[r];
  };
  for (uint32_t pc = 0; pc < code.size();) {
    isa::Decoded d;
    if (!isa::DecodeAt(code, pc, &d).ok()) return;  // verified at load: cannot happen
    const uint32_t* ip = e.code + pc;
    if (d.op == isa::Opcode::kLoop) ++loop_depth;
    if (d.op == isa::Opcode::kEndLoop) --loop_depth;
    for (int i = 0; i < d.num_operands; ++i) {
      const isa::Decoded::Slot& sl = d.slots[i];
      switch (sl.type) {
        case isa::Operand::kWT:
        case isa::Operand::kWX:
        case isa::Operand::kWG:
        case isa::Operand::kWQ:
        case isa::Operand::kWP:
        case isa::Operand::kKill:
          write(ip[sl.pos]);
          break;
        case isa::Operand::kListWX:
          for (uint32_t k = 0; k < sl.count; ++k) write(ip[sl.pos + 1 + k]);
          break;
        case isa::Operand::kListOut: {
          const uint32_t kernel =
              isa::Operands<isa::op::Invoke>(ip).word<isa::op::Invoke::kKernel>();
          for (uint32_t k = 0; k < sl.count; ++k) {
            const bool dynamic = kernel < kernels.size() &&
                                 k < kernels[kernel].dynamic_outputs.size() &&
                                 kernels[kernel].dynamic_outputs[k];
            if (dynamic) write(ip[sl.pos + 1 + k]);
          }
          break;
        }
        default:
          break;
      }
    }
    if (d.op == isa::Opcode::kAllocTensor && loop_depth == 0) {
      const uint32_t dst =
          isa::Operands<isa::op::AllocTensor>(ip).reg<isa::op::AllocTensor::kDst>();
      if (dst < alloc_pc.size()) alloc_pc[dst] = pc;
    }
    if (d.op == isa::Opcode::kRet) {
      const absl::Span<const uint32_t> objs =
          isa::Operands<isa::op::Ret>(ip).list<isa::op::Ret::kObjs>();
      std::vector<uint32_t> regs(objs.begin(), objs.end());
      if (have_ret && regs != ret_regs) return;
      ret_regs = std::move(regs);
      have_ret = true;
    }
    pc += d.length;
  }
  std::vector<bool> used(e.num_objects, false);
  for (uint32_t k = 0; k < ret_regs.size(); ++k) {
    const uint32_t r = ret_regs[k];
    if (r >= e.num_objects || used[r] || writes[r] != 1 || alloc_pc[r] < 0) continue;
    used[r] = true;
    e.output_allocs.emplace_back(static_cast<uint32_t>(alloc_pc[r]), k);
  }
  std::sort(e.output_allocs.begin(), e.output_allocs.end());
}

std::string Hex64(uint64_t v) { return absl::StrCat(absl::Hex(v, absl::kZeroPad16)); }

// Whether to copy a file of `file_size` bytes into huge pages (`mode`), leaving `file_backed`
// in its mapping: the auto rule counts only the bytes copied.
bool CopyIntoHugePages(ConstantPages mode, uint64_t file_size,
                       absl::Span<const schema::FileRange> file_backed) {
  if (mode == ConstantPages::kMapped) return false;
  uint64_t copied = file_size;
  for (const schema::FileRange& r : schema::MappedFile::FileBackedPages(file_backed, file_size))
    copied -= r.end - r.begin;
  return UseHugeConstantPages(mode, copied, schema::TransparentHugePagesSetting(),
                              schema::MemAvailableBytes());
}

// Opens the weights file that constants are read from: mapped, or copied into huge pages
// (`mode`) but for the gathered tables at `gathered` (offsets in the constant segment).
absl::StatusOr<std::shared_ptr<const schema::MappedFile>> OpenWeightsFile(
    const std::string& path, ConstantPages mode, absl::Span<const schema::FileRange> gathered) {
  DYNVM_ASSIGN_OR_RETURN(std::shared_ptr<const schema::MappedFile> file,
                         schema::MappedFile::Open(path));
  if (mode == ConstantPages::kMapped) return file;
  // The ranges in the file: after the header, and only where the data is stored as is.
  std::vector<schema::FileRange> ranges;
  absl::StatusOr<schema::WeightsHeader> h = schema::ParseWeightsHeader(file->bytes());
  if (h.ok() && !(h->required_features & schema::kFeatureCompressedConstants)) {
    for (const schema::FileRange& r : gathered) {
      if (r.end <= h->stored_size)
        ranges.push_back({h->data_offset + r.begin, h->data_offset + r.end});
    }
  }
  // A header that does not parse: the caller reports why, from whichever copy.
  if (CopyIntoHugePages(mode, file->bytes().size(), ranges))
    return schema::MappedFile::ReadIntoHugePages(path, ranges);
  return file;
}

// Finds, maps and checks the weights file `ref` names.
absl::StatusOr<std::shared_ptr<const Segment>> LoadWeightsFile(
    const fb::WeightsRef& ref, const std::string& exe_path, const LoadOptions& options,
    absl::Span<const schema::FileRange> gathered) {
  const std::string name(Sv(ref.file_name()));
  std::string path = options.weights_path;
  if (!options.weights_data.empty()) {
    path = "weights in memory";
  } else if (path.empty()) {
    if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("weights file name '", name, "' is not a plain file name"));
    }
    std::string dir = options.weights_dir;
    if (dir.empty() && !exe_path.empty())
      dir = std::filesystem::path(exe_path).parent_path().string();
    if (dir.empty() && exe_path.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "the executable's constants are in weights file '", name, "' (hash ", Hex64(ref.hash()),
          "): loading from bytes needs LoadOptions::weights_dir or weights_path"));
    }
    path = dir.empty() ? name : (std::filesystem::path(dir) / name).string();
  }
  absl::StatusOr<std::shared_ptr<const schema::MappedFile>> file =
      options.weights_data.empty() ? OpenWeightsFile(path, options.constant_pages, gathered)
                                   : schema::MappedFile::FromBytes(options.weights_data);
  if (!file.ok()) {
    return absl::Status(file.status().code(),
                        absl::StrCat("weights file of the executable: ", file.status().message()));
  }
  absl::StatusOr<schema::WeightsHeader> h = schema::ParseWeightsHeader((*file)->bytes());
  if (!h.ok())
    return absl::Status(h.status().code(), absl::StrCat(path, ": ", h.status().message()));
  if (h->content_hash != ref.hash() || h->raw_size != ref.size()) {
    return absl::FailedPreconditionError(absl::StrCat(
        path, " holds weights with hash ", Hex64(h->content_hash), " and ", h->raw_size,
        " bytes; the executable was compiled against hash ", Hex64(ref.hash()), " and ", ref.size(),
        " bytes (a different or stale weights file)"));
  }
  const absl::Span<const uint8_t> stored = (*file)->bytes().subspan(h->data_offset, h->stored_size);
  std::shared_ptr<const Segment> seg;
  if (h->required_features & schema::kFeatureCompressedConstants) {
    absl::StatusOr<std::shared_ptr<const Segment>> d = Decompress(stored, h->raw_size);
    if (!d.ok())
      return absl::Status(d.status().code(), absl::StrCat(path, ": ", d.status().message()));
    seg = *std::move(d);
  } else {
    auto s = std::make_shared<Segment>();
    s->file = *file;
    s->data = stored.data();
    s->size = stored.size();
    seg = std::move(s);
  }
  // The decompressed bytes were all just written, so hashing them costs little more.
  if ((h->required_features & schema::kFeatureCompressedConstants) || options.verify_weights_hash) {
    const uint64_t got = schema::ContentHash({seg->data, seg->size});
    if (got != ref.hash()) {
      return absl::DataLossError(absl::StrCat(path, ": the weights' content hashes to ", Hex64(got),
                                              ", its header and the executable say ",
                                              Hex64(ref.hash()), " (the file is damaged)"));
    }
  }
  return seg;
}

// ---- Init's steps ----

// Points rep.constant_segment at the constants: the external weights file, the decompressed
// inline segment, or the file's own (mapped) segment.
absl::Status MapConstants(Executable::Rep& rep, const schema::FileHeader& header,
                          const std::string& path, const LoadOptions& options) {
  const fb::Executable& fbe = *rep.fb;
  if (rep.features & schema::kFeatureExternalWeights) {
    const fb::WeightsRef* ref = fbe.weights();
    if (ref == nullptr) {
      return absl::InvalidArgumentError(
          "the external-weights feature is set but there is no weights reference");
    }
    if (header.constants_size != 0 || (rep.features & schema::kFeatureCompressedConstants)) {
      return absl::InvalidArgumentError(
          "an executable with external weights has a constant segment of its own");
    }
    DYNVM_ASSIGN_OR_RETURN(
        rep.segment,
        SharedSegment(
            SegmentKey{static_cast<uint8_t>(SegmentSource::kWeightsFile), ref->hash(), ref->size()},
            [&] { return LoadWeightsFile(*ref, path, options, GatheredConstantRanges(fbe, 0)); }));
    rep.weights_hash = ref->hash();
    rep.constant_segment = rep.segment->data;
    rep.constant_segment_size = static_cast<int64_t>(rep.segment->size);
  } else if (rep.features & schema::kFeatureCompressedConstants) {
    const absl::Span<const uint8_t> stored =
        rep.file->bytes().subspan(header.constants_offset, header.constants_size);
    absl::StatusOr<std::shared_ptr<const Segment>> seg =
        SharedSegment(SegmentKey{static_cast<uint8_t>(SegmentSource::kInlineCompressed),
                                 schema::ContentHash(stored), header.constants_raw_size},
                      [&] { return Decompress(stored, header.constants_raw_size); });
    // Hashed (and maybe decompressed): the compressed bytes are not needed again.
    rep.file->DropPages(stored);
    if (!seg.ok()) return seg.status();
    rep.segment = *std::move(seg);
    rep.constant_segment = rep.segment->data;
    rep.constant_segment_size = static_cast<int64_t>(rep.segment->size);
  } else {
    rep.constant_segment = rep.file->bytes().data() + header.constants_offset;
    rep.constant_segment_size = static_cast<int64_t>(header.constants_size);
  }
  // A storage over the constant segment for tensor-valued attributes; the kernels holding
  // views die with this executable, so it needs no keep-alive of its own.
  rep.constant_storage =
      Storage::Wrap(Storage::Kind::kConstant, const_cast<uint8_t*>(rep.constant_segment),
                    static_cast<size_t>(rep.constant_segment_size), Device::kCPU, nullptr);
  return absl::OkStatus();
}

// The constant table (and the weights' count and bytes). String constants are checked and
// their elements made here, once the segment is mapped.
absl::Status LoadConstants(Executable::Rep& rep) {
  if (rep.fb->constants() == nullptr) return absl::OkStatus();
  for (const fb::Constant* c : *rep.fb->constants()) {
    Executable::ConstantEntry e;
    e.dtype = static_cast<DType>(c->dtype());
    if (c->shape()) e.shape.assign(c->shape()->begin(), c->shape()->end());
    e.offset = c->offset();
    e.size = c->size();
    if (e.dtype == DType::kString) {
      DYNVM_RETURN_IF_ERROR(LoadStringConstant(rep, e, rep.constants.size()));
    }
    if (c->is_weight()) {
      ++rep.num_weights;
      rep.weight_bytes += static_cast<int64_t>(c->size());
    }
    rep.constants.push_back(std::move(e));
  }
  return absl::OkStatus();
}

// A kernel from the registry for every kernel-table entry.
absl::Status BindKernels(Executable::Rep& rep, const LoadOptions& options) {
  if (rep.fb->kernels() == nullptr) return absl::OkStatus();
  for (uint32_t i = 0; i < rep.fb->kernels()->size(); ++i) {
    Executable::KernelEntry e;
    DYNVM_ASSIGN_OR_RETURN(e.spec, SpecFromFb(*rep.fb->kernels()->Get(i), rep));
    for (const PortSpec& p : e.spec.outputs) e.dynamic_outputs.push_back(p.dynamic);
    if (e.spec.device == Device::kCUDA && !CudaBuildEnabled() &&
        !KernelRegistry::Global().HasOp(e.spec.domain, e.spec.op, e.spec.device)) {
      return absl::UnimplementedError(absl::StrCat("kernel ", i, " (", e.spec.DebugName(),
                                                   ") runs on the cuda device: this build has "
                                                   "no CUDA device support"));
    }
    absl::StatusOr<std::unique_ptr<Kernel>> kernel =
        KernelRegistry::Global().Create(e.spec, options.backends);
    if (!kernel.ok()) {
      return absl::Status(
          kernel.status().code(),
          absl::StrCat("kernel ", i, " (", e.spec.DebugName(), "): ", kernel.status().message()));
    }
    e.kernel = *std::move(kernel);
    rep.max_arity = std::max<uint32_t>(
        rep.max_arity,
        static_cast<uint32_t>(std::max(e.spec.inputs.size(), e.spec.outputs.size())));
    rep.kernels.push_back(std::move(e));
  }
  return absl::OkStatus();
}

// The host-visible signature of an entry function (FunctionInfo's inputs and outputs).
void LoadSignature(const fb::Function& f, FunctionInfo& info) {
  const fb::Signature* sig = f.signature();
  if (sig == nullptr) return;
  info.is_entry = true;
  if (sig->inputs())
    for (const fb::Param* p : *sig->inputs()) info.inputs.push_back(ConvertParam(*p));
  if (sig->outputs())
    for (const fb::Param* p : *sig->outputs()) info.outputs.push_back(ConvertParam(*p));
  // An optional's content kind is its register's (the verifier checks the signature's
  // kinds and dtypes against the registers).
  for (size_t k = 0; k < info.inputs.size() && f.object_types() && k < f.object_types()->size();
       ++k) {
    info.inputs[k].elem_kind = static_cast<ObjectKind>(f.object_types()->Get(k)->elem_kind());
  }
  for (size_t k = 0;
       k < info.outputs.size() && f.object_results() && k < f.object_results()->size(); ++k) {
    info.outputs[k].elem_kind = static_cast<ObjectKind>(f.object_results()->Get(k)->elem_kind());
  }
}

// The function table: code, register files, signatures, bounds, output allocations.
void LoadFunctions(Executable::Rep& rep) {
  for (uint32_t i = 0; i < rep.fb->functions()->size(); ++i) {
    const fb::Function* f = rep.fb->functions()->Get(i);
    Executable::FunctionEntry e;
    e.info.name = std::string(Sv(f->name()));
    e.code = f->code()->data();
    e.code_size = f->code()->size();
    e.num_scalars = f->scalar_types() ? f->scalar_types()->size() : 0;
    e.num_objects = f->object_types() ? f->object_types()->size() : 0;
    e.num_object_params = f->num_object_params();
    e.num_scalar_params = f->num_scalar_params();
    e.num_object_results = f->object_results() ? f->object_results()->size() : 0;
    e.num_sites = f->num_invoke_sites();
    if (f->object_types()) {
      for (const fb::ObjectType* t : *f->object_types())
        e.object_kinds.push_back(static_cast<uint8_t>(t->kind()));
    }
    if (f->scalar_types()) {
      for (fb::ScalarType t : *f->scalar_types()) e.scalar_kinds.push_back(static_cast<uint8_t>(t));
    }
    LoadSignature(*f, e.info);
    if (f->bounds()) {
      for (const fb::SymbolBound* b : *f->bounds())
        e.info.bounds.emplace_back(std::string(Sv(b->name())), b->bound());
    }
    if (e.info.is_entry) FindOutputAllocs(e, rep.kernels);
    rep.functions.push_back(std::move(e));
  }
}

}  // namespace

Executable::Executable() : rep_(std::make_unique<Rep>()) {}
Executable::~Executable() = default;

int Executable::num_functions() const { return rep_->num_functions(); }
const FunctionInfo& Executable::function(int index) const { return rep_->functions[index].info; }
int Executable::num_weights() const { return rep_->num_weights; }
int64_t Executable::weight_bytes() const { return rep_->weight_bytes; }
int Executable::num_constants() const { return rep_->num_constants(); }
int64_t Executable::constant_segment_bytes() const { return rep_->constant_segment_size; }
const uint8_t* Executable::constant_segment() const { return rep_->constant_segment; }

int64_t Executable::constant_bytes_copied() const {
  const Rep& r = *rep_;
  if (r.segment != nullptr && r.segment->file == nullptr)
    return static_cast<int64_t>(r.segment->size);  // decompressed
  const schema::MappedFile& f = r.segment != nullptr ? *r.segment->file : *r.file;
  return static_cast<int64_t>(f.copied_bytes());
}

int64_t Executable::constant_bytes_mapped() const {
  const Rep& r = *rep_;
  if (r.segment != nullptr && r.segment->file == nullptr) return 0;
  const schema::MappedFile& f = r.segment != nullptr ? *r.segment->file : *r.file;
  return static_cast<int64_t>(f.file_backed_bytes());
}
int Executable::num_kernels() const { return static_cast<int>(rep_->kernels.size()); }
const Kernel& Executable::kernel(int index) const { return *rep_->kernels[index].kernel; }
const KernelSpec& Executable::kernel_spec(int index) const { return rep_->kernels[index].spec; }
uint64_t Executable::required_features() const { return rep_->features; }
uint64_t Executable::weights_hash() const { return rep_->weights_hash; }

bool Executable::external_weights() const {
  return (rep_->features & schema::kFeatureExternalWeights) != 0;
}

int Executable::SharedSegmentCount() {
  SegmentRegistry& r = Registry();
  std::lock_guard<std::mutex> lock(r.mu);
  int n = 0;
  for (const auto& [key, weak] : r.live) n += weak.expired() ? 0 : 1;
  return n;
}

bool UseHugeConstantPages(ConstantPages mode, uint64_t file_bytes, absl::string_view thp_enabled,
                          uint64_t mem_available) {
  switch (mode) {
    case ConstantPages::kMapped:
      return false;
    case ConstantPages::kHuge:
      return true;
    case ConstantPages::kAuto:
      break;
  }
  const bool thp_on =
      absl::StrContains(thp_enabled, "[always]") || absl::StrContains(thp_enabled, "[madvise]");
  return thp_on && file_bytes >= kHugeConstantPagesMinBytes && mem_available / 2 >= file_bytes;
}

absl::StatusOr<ConstantPages> ParseConstantPages(absl::string_view name) {
  if (name == "auto") return ConstantPages::kAuto;
  if (name == "mapped") return ConstantPages::kMapped;
  if (name == "huge") return ConstantPages::kHuge;
  return absl::InvalidArgumentError(
      absl::StrCat("constant pages '", name, "': expected auto, mapped or huge"));
}

absl::StatusOr<std::shared_ptr<const Executable>> Executable::Load(const std::string& path,
                                                                   const LoadOptions& options) {
  DYNVM_ASSIGN_OR_RETURN(std::shared_ptr<const schema::MappedFile> file,
                         schema::MappedFile::Open(path));
  // Inline, uncompressed constants are read from this file: copied into huge pages if chosen, but
  // for the tables the code only gathers rows from, which stay in the mapping. (Compressed ones
  // are decompressed into a buffer; external weights choose for their file.) The mapping is
  // verified here to find those tables; Init verifies the copy.
  // (The memory check waits for the bytes copied; the rest cannot pass with fewer bytes.)
  if (UseHugeConstantPages(options.constant_pages, file->bytes().size(),
                           schema::TransparentHugePagesSetting(), UINT64_MAX)) {
    absl::StatusOr<isa::VerifiedFile> verified = isa::VerifyFile(file->bytes(), options.limits);
    const uint64_t elsewhere =
        schema::kFeatureCompressedConstants | schema::kFeatureExternalWeights;
    if (verified.ok() && (verified->header.required_features & elsewhere) == 0) {
      const std::vector<schema::FileRange> gathered =
          GatheredConstantRanges(*verified->executable, verified->header.constants_offset);
      if (CopyIntoHugePages(options.constant_pages, file->bytes().size(), gathered)) {
        DYNVM_ASSIGN_OR_RETURN(file, schema::MappedFile::ReadIntoHugePages(path, gathered));
      }
    }
  }
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Init(std::move(file), path, options);
  if (!exe.ok())
    return absl::Status(exe.status().code(), absl::StrCat(path, ": ", exe.status().message()));
  return exe;
}

absl::StatusOr<std::shared_ptr<const Executable>> Executable::LoadFromBytes(
    absl::Span<const uint8_t> bytes, const LoadOptions& options) {
  return Init(schema::MappedFile::FromBytes(bytes), "", options);
}

absl::StatusOr<std::shared_ptr<const Executable>> Executable::LoadFromBytes(
    absl::string_view bytes, const LoadOptions& options) {
  return LoadFromBytes(
      absl::Span<const uint8_t>(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()),
      options);
}

absl::StatusOr<std::shared_ptr<const Executable>> Executable::Init(
    std::shared_ptr<const schema::MappedFile> file, const std::string& path,
    const LoadOptions& options) {
  DYNVM_ASSIGN_OR_RETURN(isa::VerifiedFile verified,
                         isa::VerifyFile(file->bytes(), options.limits));
  std::shared_ptr<Executable> exe(new Executable());
  Rep& rep = *exe->rep_;
  rep.file = std::move(file);
  rep.fb = verified.executable;
  rep.features = verified.header.required_features;
  DYNVM_RETURN_IF_ERROR(MapConstants(rep, verified.header, path, options));
  DYNVM_RETURN_IF_ERROR(LoadConstants(rep));
  DYNVM_RETURN_IF_ERROR(BindKernels(rep, options));
  LoadFunctions(rep);
  return std::shared_ptr<const Executable>(std::move(exe));
}

absl::StatusOr<int> Executable::FindFunction(absl::string_view name) const {
  const std::vector<FunctionEntry>& functions = rep_->functions;
  if (name.empty()) {
    for (size_t i = 0; i < functions.size(); ++i) {
      if (functions[i].info.name == "main") return static_cast<int>(i);
    }
    for (size_t i = 0; i < functions.size(); ++i) {
      if (functions[i].info.is_entry) return static_cast<int>(i);
    }
    return absl::NotFoundError("executable has no entry function (no 'main' and no signature)");
  }
  std::vector<std::string> entries;
  for (size_t i = 0; i < functions.size(); ++i) {
    if (functions[i].info.name == name) return static_cast<int>(i);
    if (functions[i].info.is_entry) entries.push_back(functions[i].info.name);
  }
  return absl::NotFoundError(absl::StrCat("no function named '", name,
                                          "'; entry functions: ", absl::StrJoin(entries, ", ")));
}

absl::StatusOr<FunctionHandle> Executable::ResolveFunction(absl::string_view name) const {
  DYNVM_ASSIGN_OR_RETURN(int index, FindFunction(name));
  return FunctionHandle(this, index);
}

absl::string_view Executable::SourceNode(int function, uint32_t pc) const {
  const fb::Executable* fb = rep_->fb;
  if (fb->debug() == nullptr || fb->debug()->locations() == nullptr) return {};
  const auto* locs = fb->debug()->locations();
  // Locations are sorted by (function, pc): binary search for the last one at or before pc
  // within the function.
  uint32_t lo = 0, hi = locs->size();
  while (lo < hi) {
    const uint32_t mid = (lo + hi) / 2;
    const fb::SourceLocation* l = locs->Get(mid);
    if (std::make_pair(l->function(), l->pc()) <=
        std::make_pair(static_cast<uint32_t>(function), pc)) {
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
  std::lock_guard<std::mutex> lock(rep_->device_mu);
  if (!rep_->device_constants[d]) {
    DYNVM_ASSIGN_OR_RETURN(StorageRef st,
                           device.UploadConstant(rep_->constant_segment,
                                                 static_cast<size_t>(rep_->constant_segment_size)));
    rep_->device_constants[d] = std::move(st);
  }
  return rep_->device_constants[d];
}

absl::string_view Executable::Rep::string(uint32_t index) const {
  return Sv(fb->strings()->Get(index));
}

std::string Executable::DebugSummary() const {
  return absl::StrCat(rep_->functions.size(), " functions, ", rep_->kernels.size(), " kernels, ",
                      rep_->constants.size(), " constants (", rep_->constant_segment_size,
                      " bytes, ", rep_->num_weights, " weights)");
}

}  // namespace dynvm
