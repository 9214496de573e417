#include "compiler/onnx/tensor_proto.h"

#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "common/utf8.h"
#include "compiler/op_registry.h"
#include "kernels/strings.h"
#include "schema/mapped_file.h"

namespace dynvm::compiler::onnx {
namespace {

namespace fs = std::filesystem;

std::string TensorLabel(const pb::TensorProto& t) {
  return t.name().empty() ? std::string("tensor") : absl::StrCat("tensor '", t.name(), "'");
}

// How many elements the typed field that holds `elem_type` has; -1 when raw_data is the only
// way this type can be stored.
int64_t TypedCount(const pb::TensorProto& t, int32_t elem_type) {
  switch (elem_type) {
    case pb::TensorProto::FLOAT:
      return t.float_data_size();
    case pb::TensorProto::INT32:
    case pb::TensorProto::INT16:
    case pb::TensorProto::INT8:
    case pb::TensorProto::UINT16:
    case pb::TensorProto::UINT8:
    case pb::TensorProto::BOOL:
    case pb::TensorProto::FLOAT16:
    case pb::TensorProto::BFLOAT16:
      return t.int32_data_size();
    case pb::TensorProto::INT64:
      return t.int64_data_size();
    case pb::TensorProto::DOUBLE:
      return t.double_data_size();
    case pb::TensorProto::UINT32:
    case pb::TensorProto::UINT64:
      return t.uint64_data_size();
    case pb::TensorProto::STRING:
      return t.string_data_size();
    default:
      return -1;
  }
}

// Number of typed-field entries of any kind (a tensor must not mix them).
int64_t AnyTypedCount(const pb::TensorProto& t) {
  return static_cast<int64_t>(t.float_data_size()) + t.int32_data_size() + t.int64_data_size() +
         t.double_data_size() + t.uint64_data_size() + t.string_data_size();
}

absl::StatusOr<int64_t> CheckedBytes(const pb::TensorProto& t, DType dtype, int64_t* numel,
                                     const TensorReadOptions& options) {
  if (t.dims_size() > Tensor::kMaxRank) {
    return absl::UnimplementedError(absl::StrCat(TensorLabel(t), " has rank ", t.dims_size(),
                                                 "; at most ", Tensor::kMaxRank, " is supported"));
  }
  int64_t n = 1;
  for (int i = 0; i < t.dims_size(); ++i) {
    const int64_t d = t.dims(i);
    if (d < 0)
      return absl::InvalidArgumentError(absl::StrCat(TensorLabel(t), " has a negative dim ", d));
    if (d != 0 && n > std::numeric_limits<int64_t>::max() / d) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorLabel(t), ": the element count overflows"));
    }
    n *= d;
  }
  const int64_t esize = DTypeSize(dtype);
  if (n > options.max_bytes / esize) {
    return absl::InvalidArgumentError(absl::StrCat(
        TensorLabel(t), " declares ", n, " elements (over ", options.max_bytes, " bytes)"));
  }
  *numel = n;
  return n * esize;
}

// Lexically normalized `location` with no absolute root and no component that leaves its
// folder.
absl::StatusOr<fs::path> SafeRelativePath(const pb::TensorProto& t, const std::string& location) {
  if (location.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorLabel(t), ": external data has an empty location"));
  }
  if (location.find('\0') != std::string::npos) {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorLabel(t), ": external data location contains a NUL"));
  }
  const fs::path p(location);
  if (p.is_absolute() || p.has_root_name() || p.has_root_directory()) {
    return absl::PermissionDeniedError(
        absl::StrCat(TensorLabel(t), ": external data location '", location,
                     "' is absolute; it must be relative to the model's folder"));
  }
  const fs::path norm = p.lexically_normal();
  for (const fs::path& part : norm) {
    if (part == "..") {
      return absl::PermissionDeniedError(absl::StrCat(TensorLabel(t), ": external data location '",
                                                      location, "' leaves the model's folder"));
    }
  }
  if (norm.empty() || norm == ".") {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorLabel(t), ": external data location '", location, "' names no file"));
  }
  return norm;
}

// Copies n typed-field values into a narrower element type; InvalidArgument naming the tensor
// when one does not fit (a UINT8 zero point stored as 300 must not become 44).
template <typename To, typename From>
absl::Status Narrow(const pb::TensorProto& t, const From* src, int64_t n, void* dst) {
  To* out = static_cast<To*>(dst);
  for (int64_t i = 0; i < n; ++i) {
    if (src[i] < std::numeric_limits<To>::min() || src[i] > std::numeric_limits<To>::max()) {
      return absl::InvalidArgumentError(absl::StrCat(TensorLabel(t), " element ", i, " is ", src[i],
                                                     ", outside the range of its type"));
    }
    out[i] = static_cast<To>(src[i]);
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DType> DTypeOfElemType(int32_t elem_type) {
  switch (elem_type) {
    case pb::TensorProto::FLOAT:
      return DType::kF32;
    case pb::TensorProto::UINT8:
      return DType::kU8;
    case pb::TensorProto::INT8:
      return DType::kI8;
    case pb::TensorProto::UINT16:
      return DType::kU16;
    case pb::TensorProto::INT16:
      return DType::kI16;
    case pb::TensorProto::INT32:
      return DType::kI32;
    case pb::TensorProto::INT64:
      return DType::kI64;
    case pb::TensorProto::BOOL:
      return DType::kBool;
    case pb::TensorProto::FLOAT16:
      return DType::kF16;
    case pb::TensorProto::DOUBLE:
      return DType::kF64;
    case pb::TensorProto::UINT32:
      return DType::kU32;
    case pb::TensorProto::UINT64:
      return DType::kU64;
    case pb::TensorProto::BFLOAT16:
      return DType::kBF16;
    case pb::TensorProto::STRING:
      return DType::kString;
    default:
      return absl::UnimplementedError(
          absl::StrCat("element type ", ElemTypeName(elem_type), " is not supported"));
  }
}

std::string ElemTypeName(int32_t elem_type) {
  if (pb::TensorProto::DataType_IsValid(elem_type)) {
    return pb::TensorProto::DataType_Name(static_cast<pb::TensorProto::DataType>(elem_type));
  }
  return OnnxTypeName(elem_type);  // the types newer than libonnx 1.12's proto (float8, int4)
}

absl::Status CheckTensorProto(const pb::TensorProto& t, const TensorReadOptions& options) {
  if (!t.has_data_type() || t.data_type() == pb::TensorProto::UNDEFINED) {
    return absl::InvalidArgumentError(absl::StrCat(TensorLabel(t), " has no data type"));
  }
  absl::StatusOr<DType> dtype = DTypeOfElemType(t.data_type());
  if (!dtype.ok())
    return absl::UnimplementedError(absl::StrCat(TensorLabel(t), ": ", dtype.status().message()));
  if (t.has_segment())
    return absl::UnimplementedError(absl::StrCat(TensorLabel(t), " is segmented"));
  int64_t numel = 0;
  DYNVM_ASSIGN_OR_RETURN(int64_t bytes, CheckedBytes(t, *dtype, &numel, options));
  const bool external = t.has_data_location() && t.data_location() == pb::TensorProto::EXTERNAL;
  if (t.has_data_location() && t.data_location() != pb::TensorProto::EXTERNAL &&
      t.data_location() != pb::TensorProto::DEFAULT) {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorLabel(t), " has an unknown data location"));
  }
  const int64_t typed = AnyTypedCount(t);
  if (external) {
    if (t.has_raw_data() || typed != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorLabel(t), " has external data and inline data"));
    }
    // The reference itself is checked (and the file opened) by ResolveExternalData.
    for (const pb::StringStringEntryProto& e : t.external_data()) {
      if (e.key() != "location" && e.key() != "offset" && e.key() != "length" &&
          e.key() != "checksum") {
        return absl::InvalidArgumentError(
            absl::StrCat(TensorLabel(t), ": unknown external data key '", e.key(), "'"));
      }
    }
    return absl::OkStatus();
  }
  if (t.external_data_size() != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorLabel(t), " has external data entries but is not external"));
  }
  if (t.has_raw_data()) {
    if (typed != 0)
      return absl::InvalidArgumentError(
          absl::StrCat(TensorLabel(t), " has raw_data and typed data"));
    if (static_cast<int64_t>(t.raw_data().size()) != bytes) {
      return absl::InvalidArgumentError(absl::StrCat(TensorLabel(t), " of ", DTypeName(*dtype),
                                                     DimsString(t.dims()), " needs ", bytes,
                                                     " bytes, raw_data has ", t.raw_data().size()));
    }
    return absl::OkStatus();
  }
  const int64_t own = TypedCount(t, t.data_type());
  if (typed != own) {
    return absl::InvalidArgumentError(absl::StrCat(TensorLabel(t),
                                                   " stores data in a field that does not hold ",
                                                   ElemTypeName(t.data_type())));
  }
  if (own != numel) {
    return absl::InvalidArgumentError(absl::StrCat(TensorLabel(t), " of ", DTypeName(*dtype),
                                                   DimsString(t.dims()), " needs ", numel,
                                                   " elements, has ", own));
  }
  return absl::OkStatus();
}

absl::StatusOr<ExternalRef> ResolveExternalData(const pb::TensorProto& t,
                                                const TensorReadOptions& options) {
  std::string location;
  int64_t offset = 0, length = -1;
  for (const pb::StringStringEntryProto& e : t.external_data()) {
    if (e.key() == "location") {
      location = e.value();
    } else if (e.key() == "offset" || e.key() == "length") {
      int64_t v = 0;
      if (!absl::SimpleAtoi(e.value(), &v) || v < 0) {
        return absl::InvalidArgumentError(absl::StrCat(TensorLabel(t), ": external data ", e.key(),
                                                       " '", e.value(), "' is not a size"));
      }
      (e.key() == "offset" ? offset : length) = v;
    }
  }
  if (options.model_dir.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        TensorLabel(t), " has external data, but the model was given without its folder"));
  }
  DYNVM_ASSIGN_OR_RETURN(fs::path rel, SafeRelativePath(t, location));
  std::error_code ec;
  const fs::path dir = fs::canonical(fs::path(options.model_dir), ec);
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat("model folder '", options.model_dir, "': ", ec.message()));
  }
  const fs::path file = fs::canonical(dir / rel, ec);
  if (ec) {
    return absl::NotFoundError(
        absl::StrCat(TensorLabel(t), ": external data file '", location, "': ", ec.message()));
  }
  // After symlinks are resolved the file must still be inside the model's folder.
  const fs::path inside = file.lexically_relative(dir);
  if (inside.empty() || *inside.begin() == ".." || inside.is_absolute()) {
    return absl::PermissionDeniedError(absl::StrCat(TensorLabel(t), ": external data file '",
                                                    location,
                                                    "' resolves outside the model's folder"));
  }
  if (!fs::is_regular_file(file, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorLabel(t), ": external data '", location, "' is not a regular file"));
  }
  const uintmax_t size = fs::file_size(file, ec);
  if (ec)
    return absl::NotFoundError(absl::StrCat(TensorLabel(t), ": '", location, "': ", ec.message()));
  const int64_t file_size = static_cast<int64_t>(size);
  if (offset > file_size) {
    return absl::OutOfRangeError(absl::StrCat(TensorLabel(t), ": external data offset ", offset,
                                              " is past the end of '", location, "' (", file_size,
                                              " bytes)"));
  }
  if (length < 0) length = file_size - offset;
  if (length > file_size - offset) {
    return absl::OutOfRangeError(absl::StrCat(TensorLabel(t), ": external data [", offset, ", +",
                                              length, ") is past the end of '", location, "' (",
                                              file_size, " bytes)"));
  }
  return ExternalRef{file.string(), offset, length};
}

// A STRING tensor: its string_data, each element valid UTF-8 (docs/strings.md).
absl::StatusOr<Tensor> StringTensorFromProto(const pb::TensorProto& t,
                                             const std::vector<int64_t>& dims) {
  const bool external = t.has_data_location() && t.data_location() == pb::TensorProto::EXTERNAL;
  if (external || t.has_raw_data()) {
    return absl::InvalidArgumentError(
        absl::StrCat(TensorLabel(t), ": a STRING tensor keeps its elements in string_data"));
  }
  std::vector<std::string> values(t.string_data().begin(), t.string_data().end());
  for (size_t i = 0; i < values.size(); ++i) {
    if (int64_t bad = InvalidUtf8Offset(values[i]); bad >= 0) {
      return absl::InvalidArgumentError(absl::StrCat(TensorLabel(t), ": string element ", i,
                                                     " is not valid UTF-8 (byte ", bad, ")"));
    }
  }
  return StringTensor(dims, values);
}

absl::StatusOr<Tensor> TensorFromProto(const pb::TensorProto& t, const TensorReadOptions& options) {
  DYNVM_RETURN_IF_ERROR(CheckTensorProto(t, options));
  DYNVM_ASSIGN_OR_RETURN(DType dtype, DTypeOfElemType(t.data_type()));
  std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
  if (dtype == DType::kString) return StringTensorFromProto(t, dims);
  DYNVM_ASSIGN_OR_RETURN(Tensor out, Tensor::Empty(dtype, dims));
  const int64_t n = out.numel();
  const int64_t bytes = n * DTypeSize(dtype);
  void* dst = out.raw_data();
  const bool external = t.has_data_location() && t.data_location() == pb::TensorProto::EXTERNAL;
  if (external) {
    absl::StatusOr<ExternalRef> ref = ResolveExternalData(t, options);
    if (!ref.ok()) return ref.status();
    if (ref->length != bytes) {
      return absl::InvalidArgumentError(
          absl::StrCat(TensorLabel(t), " of ", DTypeName(dtype), DimsString(dims), " needs ", bytes,
                       " bytes; its external data has ", ref->length));
    }
    if (bytes > 0) {
      absl::StatusOr<std::shared_ptr<const schema::MappedFile>> file =
          schema::MappedFile::Open(ref->path);
      if (!file.ok()) return file.status();
      const absl::Span<const uint8_t> all = (*file)->bytes();
      if (static_cast<int64_t>(all.size()) < ref->offset + bytes) {
        return absl::OutOfRangeError(
            absl::StrCat(TensorLabel(t), ": external data file changed size"));
      }
      std::memcpy(dst, all.data() + ref->offset, static_cast<size_t>(bytes));
    }
  } else if (t.has_raw_data()) {
    if (bytes > 0) std::memcpy(dst, t.raw_data().data(), static_cast<size_t>(bytes));
  } else {
    switch (t.data_type()) {
      case pb::TensorProto::FLOAT:
        if (n > 0) std::memcpy(dst, t.float_data().data(), static_cast<size_t>(bytes));
        break;
      case pb::TensorProto::DOUBLE:
        if (n > 0) std::memcpy(dst, t.double_data().data(), static_cast<size_t>(bytes));
        break;
      case pb::TensorProto::INT64:
        if (n > 0) std::memcpy(dst, t.int64_data().data(), static_cast<size_t>(bytes));
        break;
      case pb::TensorProto::INT32:
        DYNVM_RETURN_IF_ERROR(Narrow<int32_t>(t, t.int32_data().data(), n, dst));
        break;
      case pb::TensorProto::INT16:
        DYNVM_RETURN_IF_ERROR(Narrow<int16_t>(t, t.int32_data().data(), n, dst));
        break;
      case pb::TensorProto::INT8:
        DYNVM_RETURN_IF_ERROR(Narrow<int8_t>(t, t.int32_data().data(), n, dst));
        break;
      case pb::TensorProto::UINT16:
      case pb::TensorProto::FLOAT16:
      case pb::TensorProto::BFLOAT16:
        DYNVM_RETURN_IF_ERROR(Narrow<uint16_t>(t, t.int32_data().data(), n, dst));
        break;
      case pb::TensorProto::UINT8:
        DYNVM_RETURN_IF_ERROR(Narrow<uint8_t>(t, t.int32_data().data(), n, dst));
        break;
      case pb::TensorProto::BOOL: {
        uint8_t* b = static_cast<uint8_t*>(dst);
        for (int64_t i = 0; i < n; ++i) b[i] = t.int32_data(static_cast<int>(i)) != 0;
        break;
      }
      case pb::TensorProto::UINT32:
        DYNVM_RETURN_IF_ERROR(Narrow<uint32_t>(t, t.uint64_data().data(), n, dst));
        break;
      case pb::TensorProto::UINT64:
        if (n > 0) std::memcpy(dst, t.uint64_data().data(), static_cast<size_t>(bytes));
        break;
      default:
        return absl::UnimplementedError(absl::StrCat(
            TensorLabel(t), ": element type ", ElemTypeName(t.data_type()), " is not supported"));
    }
  }
  if (dtype == DType::kBool) {
    // Any nonzero byte is true; kernels expect 0 or 1.
    uint8_t* b = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) b[i] = b[i] != 0;
  }
  return out;
}

}  // namespace dynvm::compiler::onnx
