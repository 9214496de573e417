#include "schema/writer.h"

#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "common/status_macros.h"
#include "schema/format.h"
#include "schema/weights.h"

namespace dynvm::schema {
namespace {
uint64_t AlignUp(uint64_t v, uint64_t a) { return (v + a - 1) / a * a; }
}  // namespace

uint64_t RequiredFeatures(const fb::ExecutableT& exe) {
  uint64_t bits = 0;
  auto seq_kind = [](fb::ObjectKind k) {
    return k == fb::ObjectKind::Sequence || k == fb::ObjectKind::Optional;
  };
  constexpr uint8_t kString = 13;  // DType::kString (common/dtype.h; schema does not depend on isa)
  for (const auto& f : exe.functions) {
    for (const auto& t : f->object_types) {
      if (seq_kind(t.kind())) bits |= kFeatureSequences;
      if (t.kind() != fb::ObjectKind::Storage && t.dtype() == kString) bits |= kFeatureStrings;
    }
    for (const auto& t : f->object_results) {
      if (seq_kind(t.kind())) bits |= kFeatureSequences;
    }
  }
  for (const auto& k : exe.kernels) {
    if (k->device != 0) bits |= kFeatureCudaDevice;
    for (const auto& p : k->inputs) {
      if (seq_kind(p->kind)) bits |= kFeatureSequences;
      if (p->dtype == kString) bits |= kFeatureStrings;
    }
    for (const auto& p : k->outputs) {
      if (seq_kind(p->kind)) bits |= kFeatureSequences;
      if (p->dtype == kString) bits |= kFeatureStrings;
    }
  }
  for (const auto& c : exe.constants) {
    if (c->dtype == kString) bits |= kFeatureStrings;
  }
  if (exe.weights != nullptr) bits |= kFeatureExternalWeights;
  return bits;
}

absl::StatusOr<std::string> SerializeExecutable(fb::ExecutableT& exe,
                                                absl::Span<const absl::string_view> constants,
                                                const WriteOptions& options) {
  if (!options.weights_file_name.empty()) {
    return absl::InvalidArgumentError(
        "SerializeExecutable writes one file: use SerializeExecutableFiles for a weights file");
  }
  DYNVM_ASSIGN_OR_RETURN(SerializedFiles files, SerializeExecutableFiles(exe, constants, options));
  return std::move(files.executable);
}

absl::StatusOr<SerializedFiles> SerializeExecutableFiles(
    fb::ExecutableT& exe, absl::Span<const absl::string_view> constants,
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
  // The raw segment, laid out in one buffer.
  std::string segment(segment_size, '\0');
  for (size_t i = 0; i < constants.size(); ++i) {
    if (!constants[i].empty()) {
      std::memcpy(segment.data() + exe.constants[i]->offset, constants[i].data(),
                  constants[i].size());
    }
  }
  std::string stored;
  const bool compress = options.compress && segment_size > 0;
  if (compress) {
    DYNVM_ASSIGN_OR_RETURN(std::string c, CompressSegment(segment, options.compression_level));
    stored = std::move(c);
  }
  const std::string& data = compress ? stored : segment;

  SerializedFiles files;
  const bool external = !options.weights_file_name.empty();
  if (external) {
    exe.weights = std::make_unique<fb::WeightsRefT>();
    exe.weights->file_name = options.weights_file_name;
    exe.weights->hash =
        ContentHash({reinterpret_cast<const uint8_t*>(segment.data()), segment.size()});
    exe.weights->size = segment_size;
    WeightsHeader wh;
    wh.required_features = compress ? uint64_t{kFeatureCompressedConstants} : 0;
    wh.content_hash = exe.weights->hash;
    wh.raw_size = segment_size;
    files.weights = EncodeWeightsFile(wh, data);
  }

  std::unique_ptr<fb::DebugInfoT> debug;
  if (options.strip_debug) debug = std::move(exe.debug);
  flatbuffers::FlatBufferBuilder builder(1024);
  builder.Finish(fb::Executable::Pack(builder, &exe), fb::ExecutableIdentifier());
  if (options.strip_debug) exe.debug = std::move(debug);

  FileHeader h;
  h.required_features = RequiredFeatures(exe);
  if (compress && !external) h.required_features |= kFeatureCompressedConstants;
  h.flatbuffer_offset = kHeaderSize;
  h.flatbuffer_size = builder.GetSize();
  const uint64_t fb_end = kHeaderSize + h.flatbuffer_size;
  // A WeightsRef set by the caller (the assembler's .weights) means no segment in the file.
  const bool inline_data = exe.weights == nullptr && segment_size > 0;
  if (inline_data) {
    h.constants_offset = AlignUp(fb_end, kConstantAlignment);
    h.constants_size = data.size();
    h.constants_raw_size = segment_size;
  }
  std::string& out = files.executable;
  out.assign(inline_data ? h.constants_offset + data.size() : fb_end, '\0');
  auto* bytes = reinterpret_cast<uint8_t*>(out.data());
  std::memcpy(bytes + kHeaderSize, builder.GetBufferPointer(), h.flatbuffer_size);
  EncodeHeader(h, bytes);
  h.crc32 = ComputeChecksum({bytes, kHeaderSize}, {bytes + kHeaderSize, h.flatbuffer_size});
  EncodeHeader(h, bytes);
  if (inline_data) std::memcpy(bytes + h.constants_offset, data.data(), data.size());
  return files;
}

}  // namespace dynvm::schema
