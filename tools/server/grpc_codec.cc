#include "tools/server/grpc_codec.h"

#include <cstring>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "kernels/strings.h"

namespace dynvm::server {
namespace {

using inference::InferTensorContents;

// Copies typed `values` (of the wider proto type Src) into `t` as Dst, checking the range.
template <typename Dst, typename Src>
absl::Status CopyInto(const google::protobuf::RepeatedField<Src>& values, Tensor& t,
                      const std::string& what) {
  if (static_cast<int64_t>(values.size()) != t.numel())
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape holds ", t.numel(),
                                                   " elements, contents have ", values.size()));
  Dst* out = t.data<Dst>();
  for (int i = 0; i < values.size(); ++i) {
    const Src v = values[i];
    if constexpr (std::is_integral_v<Dst> && !std::is_same_v<Dst, bool>) {
      if (v < static_cast<Src>(std::numeric_limits<Dst>::min()) ||
          v > static_cast<Src>(std::numeric_limits<Dst>::max()))
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": element ", i, " is out of range for its datatype"));
    }
    out[i] = static_cast<Dst>(v);
  }
  return absl::OkStatus();
}

// The number of elements in the contents field that carries `dtype`.
int64_t TypedCount(const InferTensorContents& c, DType dtype) {
  switch (dtype) {
    case DType::kBool:
      return c.bool_contents_size();
    case DType::kI8:
    case DType::kI16:
    case DType::kI32:
      return c.int_contents_size();
    case DType::kI64:
      return c.int64_contents_size();
    case DType::kU8:
    case DType::kU16:
    case DType::kU32:
      return c.uint_contents_size();
    case DType::kU64:
      return c.uint64_contents_size();
    case DType::kF64:
      return c.fp64_contents_size();
    case DType::kString:
      return c.bytes_contents_size();
    default:  // f32, f16, bf16
      return c.fp32_contents_size();
  }
}

absl::Status FromTyped(const InferTensorContents& c, Tensor& t, const std::string& what) {
  switch (t.dtype()) {
    case DType::kBool:
      return CopyInto<bool>(c.bool_contents(), t, what);
    case DType::kI8:
      return CopyInto<int8_t>(c.int_contents(), t, what);
    case DType::kI16:
      return CopyInto<int16_t>(c.int_contents(), t, what);
    case DType::kI32:
      return CopyInto<int32_t>(c.int_contents(), t, what);
    case DType::kI64:
      return CopyInto<int64_t>(c.int64_contents(), t, what);
    case DType::kU8:
      return CopyInto<uint8_t>(c.uint_contents(), t, what);
    case DType::kU16:
      return CopyInto<uint16_t>(c.uint_contents(), t, what);
    case DType::kU32:
      return CopyInto<uint32_t>(c.uint_contents(), t, what);
    case DType::kU64:
      return CopyInto<uint64_t>(c.uint64_contents(), t, what);
    case DType::kF32:
      return CopyInto<float>(c.fp32_contents(), t, what);
    case DType::kF64:
      return CopyInto<double>(c.fp64_contents(), t, what);
    case DType::kF16:
    case DType::kBF16: {
      if (static_cast<int64_t>(c.fp32_contents_size()) != t.numel())
        return absl::InvalidArgumentError(absl::StrCat(what, ": shape holds ", t.numel(),
                                                       " elements, fp32_contents has ",
                                                       c.fp32_contents_size()));
      for (int i = 0; i < c.fp32_contents_size(); ++i) {
        const float f = c.fp32_contents(i);
        t.data<uint16_t>()[i] =
            t.dtype() == DType::kF16 ? Half::FromFloat(f) : BFloat16::FromFloat(f);
      }
      return absl::OkStatus();
    }
    default:
      return absl::InvalidArgumentError(absl::StrCat(what, ": unsupported datatype"));
  }
}

void ToTyped(const Tensor& t, InferTensorContents* c) {
  const int64_t n = t.numel();
  for (int64_t i = 0; i < n; ++i) {
    switch (t.dtype()) {
      case DType::kBool:
        c->add_bool_contents(t.data<bool>()[i]);
        break;
      case DType::kI8:
        c->add_int_contents(t.data<int8_t>()[i]);
        break;
      case DType::kI16:
        c->add_int_contents(t.data<int16_t>()[i]);
        break;
      case DType::kI32:
        c->add_int_contents(t.data<int32_t>()[i]);
        break;
      case DType::kI64:
        c->add_int64_contents(t.data<int64_t>()[i]);
        break;
      case DType::kU8:
        c->add_uint_contents(t.data<uint8_t>()[i]);
        break;
      case DType::kU16:
        c->add_uint_contents(t.data<uint16_t>()[i]);
        break;
      case DType::kU32:
        c->add_uint_contents(t.data<uint32_t>()[i]);
        break;
      case DType::kU64:
        c->add_uint64_contents(t.data<uint64_t>()[i]);
        break;
      case DType::kF32:
        c->add_fp32_contents(t.data<float>()[i]);
        break;
      case DType::kF64:
        c->add_fp64_contents(t.data<double>()[i]);
        break;
      case DType::kF16:
        c->add_fp32_contents(Half::ToFloat(t.data<uint16_t>()[i]));
        break;
      case DType::kBF16:
        c->add_fp32_contents(BitsToFloat(static_cast<uint32_t>(t.data<uint16_t>()[i]) << 16));
        break;
      case DType::kString: {
        absl::string_view s = StringAt(t, i);
        c->add_bytes_contents(s.data(), s.size());
        break;
      }
    }
  }
}

}  // namespace

absl::StatusOr<GrpcInputs> DecodeGrpcInfer(const inference::ModelInferRequest& request,
                                           const Limits& limits,
                                           std::shared_ptr<const void> owner) {
  GrpcInputs out;
  if (request.inputs_size() > limits.max_tensors)
    return absl::ResourceExhaustedError(
        absl::StrCat(request.inputs_size(), " inputs, over the limit of ", limits.max_tensors));
  out.raw = request.raw_input_contents_size() > 0;
  if (out.raw && request.raw_input_contents_size() != request.inputs_size())
    return absl::InvalidArgumentError(absl::StrCat(request.inputs_size(), " inputs but ",
                                                   request.raw_input_contents_size(),
                                                   " raw_input_contents"));
  if (auto it = request.parameters().find("timeout_ms"); it != request.parameters().end()) {
    if (it->second.parameter_choice_case() != inference::InferParameter::kInt64Param ||
        it->second.int64_param() < 0)
      return absl::InvalidArgumentError("parameter timeout_ms must be a non-negative int64_param");
    out.timeout_ms = it->second.int64_param();
  }
  for (int i = 0; i < request.inputs_size(); ++i) {
    const auto& in = request.inputs(i);
    const std::string what = absl::StrCat("input '", in.name().substr(0, 64), "'");
    DYNVM_ASSIGN_OR_RETURN(DType dtype, DTypeFromKServe(in.datatype()), what);
    std::vector<int64_t> dims(in.shape().begin(), in.shape().end());
    DYNVM_ASSIGN_OR_RETURN(int64_t numel, CheckShape(dims, limits, what));
    Tensor t;
    if (out.raw) {
      if (in.has_contents())
        return absl::InvalidArgumentError(
            absl::StrCat(what, " has contents and raw_input_contents: give one"));
      DYNVM_ASSIGN_OR_RETURN(
          t, TensorOverRaw(dtype, dims, request.raw_input_contents(i), limits, what, owner));
    } else if (dtype == DType::kString) {
      const auto& b = in.contents().bytes_contents();
      if (b.size() != numel)
        return absl::InvalidArgumentError(absl::StrCat(what, ": shape holds ", numel,
                                                       " elements, bytes_contents has ", b.size()));
      std::vector<std::string> values;
      for (const std::string& s : b) {
        if (static_cast<int64_t>(s.size()) > limits.max_string_bytes)
          return absl::ResourceExhaustedError(absl::StrCat(what, ": an element has ", s.size(),
                                                           " bytes, over the limit of ",
                                                           limits.max_string_bytes));
        values.push_back(s);
      }
      DYNVM_ASSIGN_OR_RETURN(t, StringTensor(dims, values));
    } else {
      // The count first: a claimed shape allocates nothing before the contents match it.
      if (TypedCount(in.contents(), dtype) != numel)
        return absl::InvalidArgumentError(absl::StrCat(what, ": shape holds ", numel,
                                                       " elements, contents have ",
                                                       TypedCount(in.contents(), dtype)));
      DYNVM_ASSIGN_OR_RETURN(t, Tensor::Empty(dtype, dims));
      DYNVM_RETURN_IF_ERROR(FromTyped(in.contents(), t, what));
    }
    out.inputs.push_back({in.name(), std::move(t)});
  }
  for (const auto& o : request.outputs()) out.outputs.push_back(o.name());
  return out;
}

void EncodeGrpcOutputs(const std::vector<NamedTensor>& outputs, bool raw,
                       inference::ModelInferResponse* response, bool with_raw_contents) {
  for (const NamedTensor& o : outputs) {
    auto* t = response->add_outputs();
    t->set_name(o.name);
    t->set_datatype(KServeDType(o.tensor.dtype()));
    for (int64_t d : o.tensor.dims()) t->add_shape(d);
    if (raw) {
      if (with_raw_contents) AppendRaw(o.tensor, response->add_raw_output_contents());
    } else {
      ToTyped(o.tensor, t->mutable_contents());
    }
  }
}

}  // namespace dynvm::server

namespace dynvm::server {
namespace {

// A varint as protobuf writes it.
void AppendVarint(uint64_t v, std::string* out) {
  while (v >= 0x80) {
    out->push_back(static_cast<char>((v & 0x7f) | 0x80));
    v >>= 7;
  }
  out->push_back(static_cast<char>(v));
}

}  // namespace

grpc::ByteBuffer SerializeWithRawOutputs(const inference::ModelInferResponse& response,
                                         const std::vector<NamedTensor>& raw_outputs) {
  // raw_output_contents is field 6, length-delimited: tag (6 << 3) | 2.
  constexpr uint64_t kRawOutputTag = (6 << 3) | 2;
  std::vector<grpc::Slice> slices;
  std::string head = response.SerializeAsString();
  for (const NamedTensor& o : raw_outputs) {
    const Tensor& t = o.tensor;
    if (t.dtype() == DType::kString || !t.is_contiguous() || t.nbytes() == 0) {
      std::string bytes;
      AppendRaw(t, &bytes);
      AppendVarint(kRawOutputTag, &head);
      AppendVarint(bytes.size(), &head);
      head += bytes;
      continue;
    }
    AppendVarint(kRawOutputTag, &head);
    AppendVarint(static_cast<uint64_t>(t.nbytes()), &head);
    slices.emplace_back(head);
    head.clear();
    // The slice keeps a reference to the tensor's storage until gRPC has sent it.
    auto* held = new Tensor(t);
    slices.emplace_back(
        t.raw_data(), static_cast<size_t>(t.nbytes()),
        [](void* p) { delete static_cast<Tensor*>(p); }, held);
  }
  if (!head.empty() || slices.empty()) slices.emplace_back(head);
  return grpc::ByteBuffer(slices.data(), slices.size());
}

}  // namespace dynvm::server
