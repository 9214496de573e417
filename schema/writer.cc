#include "absl/strings/string_view.h"
#include "schema/writer.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "schema/format.h"

namespace dynvm::schema {
namespace {
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

uint64_t RequiredFeatures(const fb::ExecutableT& exe) {
  uint64_t bits = 0;
  auto seq_kind = [](fb::ObjectKind k) {
    return k == fb::ObjectKind::Sequence || k == fb::ObjectKind::Optional;
  };
  for (const auto& f : exe.functions) {
    for (const auto& t : f->object_types) {
      if (seq_kind(t.kind())) bits |= kFeatureSequences;
    }
    for (const auto& t : f->object_results) {
      if (seq_kind(t.kind())) bits |= kFeatureSequences;
    }
  }
  for (const auto& k : exe.kernels) {
    if (k->device != 0) bits |= kFeatureCudaDevice;
    for (const auto& p : k->inputs) {
      if (seq_kind(p->kind)) bits |= kFeatureSequences;
    }
    for (const auto& p : k->outputs) {
      if (seq_kind(p->kind)) bits |= kFeatureSequences;
    }
  }
  if (exe.weights != nullptr) bits |= kFeatureExternalWeights;
  return bits;
}

absl::StatusOr<std::string> SerializeExecutable(fb::ExecutableT& exe,
                                                absl::Span<const absl::string_view> constants,
                                                const WriteOptions& options) {
  if (constants.size() != exe.constants.size()) {
    return absl::InvalidArgumentError(absl::StrCat("constant table has ", exe.constants.size(),
                                                   " entries but ", constants.size(),
                                                   " data blocks were given"));
  }
  uint64_t offset = 0;
  for (size_t i = 0; i < constants.size(); ++i) {
    offset = AlignUp(offset, kConstantAlignment);
    exe.constants[i]->offset = offset;
    exe.constants[i]->size = constants[i].size();
    offset += constants[i].size();
  }
  const uint64_t segment_size = offset;

  std::unique_ptr<fb::DebugInfoT> debug;
  if (options.strip_debug) debug = std::move(exe.debug);
  flatbuffers::FlatBufferBuilder builder(1024);
  builder.Finish(fb::Executable::Pack(builder, &exe), fb::ExecutableIdentifier());
  if (options.strip_debug) exe.debug = std::move(debug);

  FileHeader h;
  h.required_features = RequiredFeatures(exe);
  h.flatbuffer_offset = kHeaderSize;
  h.flatbuffer_size = builder.GetSize();
  const uint64_t fb_end = kHeaderSize + h.flatbuffer_size;
  if (segment_size > 0) {
    h.constants_offset = AlignUp(fb_end, kConstantAlignment);
    h.constants_size = segment_size;
    h.constants_raw_size = segment_size;
  }
  std::string out(segment_size > 0 ? h.constants_offset + segment_size : fb_end, '\0');
  auto* bytes = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(bytes + kHeaderSize, builder.GetBufferPointer(), h.flatbuffer_size);
  EncodeHeader(h, bytes);
  h.crc32 = ComputeChecksum({bytes, kHeaderSize}, {bytes + kHeaderSize, h.flatbuffer_size});
  EncodeHeader(h, bytes);
  for (size_t i = 0; i < constants.size(); ++i) {
    if (!constants[i].empty()) {
      std::memcpy(bytes + h.constants_offset + exe.constants[i]->offset, constants[i].data(),
                  constants[i].size());
    }
  }
  return out;
}

}  // namespace dynvm::schema
