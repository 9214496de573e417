#include "tools/server/codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/storage.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "kernels/strings.h"
#include "nlohmann/json.hpp"

namespace dynvm::server {
namespace {

using Json = nlohmann::json;

// nlohmann's DOM parser without exceptions, keeping the parse error's byte position.
class DomParser : public nlohmann::detail::json_sax_dom_parser<Json> {
 public:
  explicit DomParser(Json& j) : json_sax_dom_parser(j, /*allow_exceptions_=*/false) {}
  bool parse_error(std::size_t position, const std::string& token,
                   const nlohmann::detail::exception& ex) {
    position_ = position;
    token_ = token.substr(0, 32);
    (void)ex;
    failed_ = true;
    return false;
  }
  bool failed() const { return failed_; }
  std::size_t position() const { return position_; }
  const std::string& token() const { return token_; }

 private:
  bool failed_ = false;
  std::size_t position_ = 0;
  std::string token_;
};

const Json* Member(const Json& obj, const char* key) {
  if (!obj.is_object()) return nullptr;
  auto it = obj.find(key);
  return it == obj.end() ? nullptr : &*it;
}

bool IsInteger(const Json& v) { return v.is_number_integer() || v.is_number_unsigned(); }

// Reads a JSON integer into int64 (rejecting floats and values past int64).
bool AsInt64(const Json& v, int64_t* out) {
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return false;
    *out = static_cast<int64_t>(u);
    return true;
  }
  if (v.is_number_integer()) {
    *out = v.get<int64_t>();
    return true;
  }
  return false;
}

struct DTypeName {
  const char* kserve;
  DType dtype;
};
constexpr DTypeName kDTypes[] = {
    {"BOOL", DType::kBool},  {"UINT8", DType::kU8},    {"UINT16", DType::kU16},
    {"UINT32", DType::kU32}, {"UINT64", DType::kU64},  {"INT8", DType::kI8},
    {"INT16", DType::kI16},  {"INT32", DType::kI32},   {"INT64", DType::kI64},
    {"FP16", DType::kF16},   {"BF16", DType::kBF16},   {"FP32", DType::kF32},
    {"FP64", DType::kF64},   {"BYTES", DType::kString}};

// Stores JSON value `v` as element `i` of `t` (a numeric or bool tensor).
absl::Status StoreNumber(const Json& v, Tensor& t, int64_t i) {
  const DType dt = t.dtype();
  if (dt == DType::kBool) {
    if (!v.is_boolean()) return absl::InvalidArgumentError("expected true or false");
    t.data<bool>()[i] = v.get<bool>();
    return absl::OkStatus();
  }
  if (!v.is_number()) return absl::InvalidArgumentError("expected a number");
  if (dt == DType::kF32 || dt == DType::kF64 || dt == DType::kF16 || dt == DType::kBF16) {
    const double d = v.get<double>();
    if (dt == DType::kF64) t.data<double>()[i] = d;
    if (dt == DType::kF32) t.data<float>()[i] = static_cast<float>(d);
    if (dt == DType::kF16) t.data<uint16_t>()[i] = Half::FromFloat(static_cast<float>(d));
    if (dt == DType::kBF16) t.data<uint16_t>()[i] = BFloat16::FromFloat(static_cast<float>(d));
    return absl::OkStatus();
  }
  if (!IsInteger(v)) return absl::InvalidArgumentError("expected an integer");
  if (dt == DType::kU64) {
    if (!v.is_number_unsigned() && v.get<int64_t>() < 0)
      return absl::InvalidArgumentError("expected a non-negative integer");
    t.data<uint64_t>()[i] = v.get<uint64_t>();
    return absl::OkStatus();
  }
  int64_t x;
  if (!AsInt64(v, &x)) return absl::InvalidArgumentError("integer out of range");
  auto fits = [x](int64_t lo, int64_t hi) { return x >= lo && x <= hi; };
  switch (dt) {
    case DType::kI64:
      t.data<int64_t>()[i] = x;
      return absl::OkStatus();
    case DType::kI32:
      if (!fits(INT32_MIN, INT32_MAX)) break;
      t.data<int32_t>()[i] = static_cast<int32_t>(x);
      return absl::OkStatus();
    case DType::kI16:
      if (!fits(INT16_MIN, INT16_MAX)) break;
      t.data<int16_t>()[i] = static_cast<int16_t>(x);
      return absl::OkStatus();
    case DType::kI8:
      if (!fits(INT8_MIN, INT8_MAX)) break;
      t.data<int8_t>()[i] = static_cast<int8_t>(x);
      return absl::OkStatus();
    case DType::kU32:
      if (!fits(0, UINT32_MAX)) break;
      t.data<uint32_t>()[i] = static_cast<uint32_t>(x);
      return absl::OkStatus();
    case DType::kU16:
      if (!fits(0, UINT16_MAX)) break;
      t.data<uint16_t>()[i] = static_cast<uint16_t>(x);
      return absl::OkStatus();
    case DType::kU8:
      if (!fits(0, UINT8_MAX)) break;
      t.data<uint8_t>()[i] = static_cast<uint8_t>(x);
      return absl::OkStatus();
    default:
      return absl::InvalidArgumentError("unsupported datatype");
  }
  return absl::InvalidArgumentError(absl::StrCat(x, " is out of range for ", KServeDType(dt)));
}

// Flattens `data` (nested row-major arrays, or flat) into `leaves`, at most `max` of them.
absl::Status Flatten(const Json& data, int depth, int64_t max, std::vector<const Json*>* leaves) {
  if (!data.is_array()) {
    if (static_cast<int64_t>(leaves->size()) >= max)
      return absl::InvalidArgumentError("more data elements than the shape holds");
    leaves->push_back(&data);
    return absl::OkStatus();
  }
  if (depth > Tensor::kMaxRank) return absl::InvalidArgumentError("data nested too deeply");
  for (const Json& item : data) DYNVM_RETURN_IF_ERROR(Flatten(item, depth + 1, max, leaves));
  return absl::OkStatus();
}

absl::StatusOr<Tensor> TensorFromJson(const Json& data, DType dtype,
                                      const std::vector<int64_t>& dims, int64_t numel,
                                      const Limits& limits, const std::string& what) {
  std::vector<const Json*> leaves;
  leaves.reserve(static_cast<size_t>(std::min<int64_t>(numel, 1 << 16)));  // numel: claimed
  if (absl::Status s = Flatten(data, 0, numel, &leaves); !s.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", s.message()));
  if (static_cast<int64_t>(leaves.size()) != numel) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": shape [", absl::StrJoin(dims, ","),
                                                   "] holds ", numel, " elements, data has ",
                                                   leaves.size()));
  }
  if (dtype == DType::kString) {
    std::vector<std::string> values;
    values.reserve(leaves.size());
    for (size_t i = 0; i < leaves.size(); ++i) {
      if (!leaves[i]->is_string())
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": element ", i, ": expected a string"));
      const std::string& s = leaves[i]->get_ref<const std::string&>();
      if (static_cast<int64_t>(s.size()) > limits.max_string_bytes) {
        return absl::ResourceExhaustedError(absl::StrCat(what, ": element ", i, " has ", s.size(),
                                                         " bytes, over the limit of ",
                                                         limits.max_string_bytes));
      }
      values.push_back(s);
    }
    return StringTensor(dims, values);
  }
  DYNVM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(dtype, dims));
  for (int64_t i = 0; i < numel; ++i) {
    if (absl::Status s = StoreNumber(*leaves[static_cast<size_t>(i)], t, i); !s.ok())
      return absl::InvalidArgumentError(absl::StrCat(what, ": element ", i, ": ", s.message()));
  }
  return t;
}

// One input of a REST request. `raw` is the binary section; `offset` moves past its bytes.
// `owner` (may be null) keeps `raw` alive for inputs viewed in place.
absl::StatusOr<NamedTensor> ParseRestInput(const Json& in, size_t index, absl::string_view raw,
                                           size_t* offset, const Limits& limits,
                                           const std::shared_ptr<const void>& owner) {
  std::string what = absl::StrCat("inputs[", index, "]");
  if (!in.is_object()) return absl::InvalidArgumentError(absl::StrCat(what, " is not an object"));
  const Json* name = Member(in, "name");
  if (name == nullptr || !name->is_string())
    return absl::InvalidArgumentError(absl::StrCat(what, " has no string \"name\""));
  NamedTensor out{name->get<std::string>(), {}};
  what = absl::StrCat("input '", out.name, "'");
  const Json* datatype = Member(in, "datatype");
  if (datatype == nullptr || !datatype->is_string())
    return absl::InvalidArgumentError(absl::StrCat(what, " has no string \"datatype\""));
  absl::StatusOr<DType> dtype = DTypeFromKServe(datatype->get_ref<const std::string&>());
  if (!dtype.ok())
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", dtype.status().message()));
  const Json* shape = Member(in, "shape");
  if (shape == nullptr || !shape->is_array())
    return absl::InvalidArgumentError(absl::StrCat(what, " has no \"shape\" array"));
  std::vector<int64_t> dims;
  for (const Json& d : *shape) {
    int64_t v;
    if (!AsInt64(d, &v) || dims.size() > static_cast<size_t>(Tensor::kMaxRank))
      return absl::InvalidArgumentError(absl::StrCat(what, ": \"shape\" must list integers"));
    dims.push_back(v);
  }
  DYNVM_ASSIGN_OR_RETURN(int64_t numel, CheckShape(dims, limits, what));
  const Json* params = Member(in, "parameters");
  const Json* binary_size = params != nullptr ? Member(*params, "binary_data_size") : nullptr;
  const Json* data = Member(in, "data");
  if (binary_size != nullptr) {
    int64_t size;
    if (!AsInt64(*binary_size, &size) || size < 0)
      return absl::InvalidArgumentError(absl::StrCat(what, ": bad binary_data_size"));
    if (static_cast<uint64_t>(size) > raw.size() - *offset) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": binary_data_size ", size,
                                                     " runs past the end of the body (",
                                                     raw.size() - *offset, " bytes left)"));
    }
    absl::string_view bytes = raw.substr(*offset, static_cast<size_t>(size));
    *offset += static_cast<size_t>(size);
    DYNVM_ASSIGN_OR_RETURN(out.tensor, TensorOverRaw(*dtype, dims, bytes, limits, what, owner));
    return out;
  }
  if (data == nullptr)
    return absl::InvalidArgumentError(absl::StrCat(what, " has neither \"data\" nor binary data"));
  DYNVM_ASSIGN_OR_RETURN(out.tensor, TensorFromJson(*data, *dtype, dims, numel, limits, what));
  return out;
}

bool BoolParam(const Json* params, const char* key) {
  const Json* v = params != nullptr ? Member(*params, key) : nullptr;
  return v != nullptr && v->is_boolean() && v->get<bool>();
}

// The JSON value of element i of a numeric output.
Json JsonElement(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: {
      const float f = t.data<float>()[i];
      return std::isfinite(f) ? Json(f) : Json(nullptr);
    }
    case DType::kF64: {
      const double d = t.data<double>()[i];
      return std::isfinite(d) ? Json(d) : Json(nullptr);
    }
    case DType::kF16:
      return Json(Half::ToFloat(t.data<uint16_t>()[i]));
    case DType::kBF16:
      return Json(BitsToFloat(static_cast<uint32_t>(t.data<uint16_t>()[i]) << 16));
    case DType::kI8:
      return Json(t.data<int8_t>()[i]);
    case DType::kI16:
      return Json(t.data<int16_t>()[i]);
    case DType::kI32:
      return Json(t.data<int32_t>()[i]);
    case DType::kI64:
      return Json(t.data<int64_t>()[i]);
    case DType::kU8:
      return Json(t.data<uint8_t>()[i]);
    case DType::kU16:
      return Json(t.data<uint16_t>()[i]);
    case DType::kU32:
      return Json(t.data<uint32_t>()[i]);
    case DType::kU64:
      return Json(t.data<uint64_t>()[i]);
    case DType::kBool:
      return Json(t.data<bool>()[i]);
    case DType::kString:
      return Json(std::string(StringAt(t, i)));
  }
  return Json(nullptr);
}

}  // namespace

absl::StatusOr<Json> ParseJson(absl::string_view text, absl::string_view what) {
  Json j;
  DomParser parser(j);
  const bool ok = Json::sax_parse(text.begin(), text.end(), &parser, Json::input_format_t::json,
                                  /*strict=*/true, /*ignore_comments=*/false);
  if (!ok || parser.failed() || j.is_discarded()) {
    return absl::InvalidArgumentError(absl::StrCat("malformed JSON in ", what, " at byte ",
                                                   parser.position(), " (near '", parser.token(),
                                                   "')"));
  }
  return j;
}

absl::StatusOr<DType> DTypeFromKServe(absl::string_view name) {
  for (const DTypeName& d : kDTypes) {
    if (name == d.kserve) return d.dtype;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown datatype '", name.substr(0, 32),
                   "' (BOOL, UINT8/16/32/64, INT8/16/32/64, FP16, BF16, FP32, FP64 or BYTES)"));
}

std::string KServeDType(DType dtype) {
  for (const DTypeName& d : kDTypes) {
    if (dtype == d.dtype) return d.kserve;
  }
  return "UNKNOWN";
}

absl::StatusOr<int64_t> CheckShape(const std::vector<int64_t>& dims, const Limits& limits,
                                   absl::string_view what) {
  if (dims.size() > static_cast<size_t>(Tensor::kMaxRank))
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": rank ", dims.size(), " is over ", Tensor::kMaxRank));
  int64_t numel = 1;
  for (int64_t d : dims) {
    if (d < 0) return absl::InvalidArgumentError(absl::StrCat(what, ": negative dim ", d));
    if (d > 0 && numel > limits.max_elements / d) {
      return absl::ResourceExhaustedError(absl::StrCat(what, ": shape [", absl::StrJoin(dims, ","),
                                                       "] is over the limit of ",
                                                       limits.max_elements, " elements"));
    }
    numel *= d;
  }
  if (numel > limits.max_elements)
    return absl::ResourceExhaustedError(
        absl::StrCat(what, ": ", numel, " elements, over the limit of ", limits.max_elements));
  return numel;
}

absl::StatusOr<Tensor> TensorFromRaw(DType dtype, const std::vector<int64_t>& dims,
                                     absl::string_view raw, const Limits& limits,
                                     absl::string_view what) {
  DYNVM_ASSIGN_OR_RETURN(int64_t numel, CheckShape(dims, limits, what));
  if (dtype == DType::kString) {
    std::vector<std::string> values;
    size_t pos = 0;
    for (int64_t i = 0; i < numel; ++i) {
      if (raw.size() - pos < 4)
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": BYTES element ", i, " has no 4-byte length"));
      uint32_t len;
      std::memcpy(&len, raw.data() + pos, 4);
      pos += 4;
      if (len > raw.size() - pos)
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": BYTES element ", i, " of ", len, " bytes runs past the data"));
      if (static_cast<int64_t>(len) > limits.max_string_bytes)
        return absl::ResourceExhaustedError(absl::StrCat(what, ": element ", i, " has ", len,
                                                         " bytes, over the limit of ",
                                                         limits.max_string_bytes));
      values.emplace_back(raw.substr(pos, len));
      pos += len;
    }
    if (pos != raw.size())
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": ", raw.size() - pos, " bytes after the last BYTES element"));
    return StringTensor(dims, values);
  }
  const int64_t want = numel * DTypeSize(dtype);
  if (static_cast<int64_t>(raw.size()) != want) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": ", KServeDType(dtype), "[",
                                                   absl::StrJoin(dims, ","), "] needs ", want,
                                                   " bytes, got ", raw.size()));
  }
  DYNVM_ASSIGN_OR_RETURN(Tensor t, Tensor::Empty(dtype, dims));
  if (dtype == DType::kBool) {
    for (size_t i = 0; i < raw.size(); ++i) {
      if (static_cast<uint8_t>(raw[i]) > 1)
        return absl::InvalidArgumentError(
            absl::StrCat(what, ": BOOL element ", i, " is neither 0 nor 1"));
    }
  }
  if (want > 0) std::memcpy(t.raw_data(), raw.data(), static_cast<size_t>(want));
  return t;
}

absl::StatusOr<Tensor> TensorOverRaw(DType dtype, const std::vector<int64_t>& dims,
                                     absl::string_view raw, const Limits& limits,
                                     absl::string_view what, std::shared_ptr<const void> owner) {
  const int64_t size = DTypeSize(dtype);
  if (owner == nullptr || dtype == DType::kString || dtype == DType::kBool || raw.empty() ||
      reinterpret_cast<uintptr_t>(raw.data()) % static_cast<uintptr_t>(size) != 0)
    return TensorFromRaw(dtype, dims, raw, limits, what);
  DYNVM_ASSIGN_OR_RETURN(int64_t numel, CheckShape(dims, limits, what));
  if (static_cast<int64_t>(raw.size()) != numel * size)
    return TensorFromRaw(dtype, dims, raw, limits, what);  // its error names the sizes
  // The VM never writes a kExternal storage, so the const_cast is never written through.
  StorageRef storage = Storage::Wrap(Storage::Kind::kExternal, const_cast<char*>(raw.data()),
                                     raw.size(), Device::kCPU, [owner = std::move(owner)] {});
  return Tensor::View(std::move(storage), 0, dtype, dims);
}

void AppendRaw(const Tensor& t, std::string* out) {
  if (t.dtype() == DType::kString) {
    for (int64_t i = 0; i < t.numel(); ++i) {
      absl::string_view s = StringAt(t, i);
      const uint32_t len = static_cast<uint32_t>(s.size());
      out->append(reinterpret_cast<const char*>(&len), 4);
      out->append(s.data(), s.size());
    }
    return;
  }
  out->append(static_cast<const char*>(t.raw_data()), static_cast<size_t>(t.nbytes()));
}

absl::StatusOr<InferRequest> ParseRestInfer(absl::string_view body, int64_t header_length,
                                            const Limits& limits,
                                            std::shared_ptr<const void> owner) {
  if (static_cast<int64_t>(body.size()) > limits.max_body_bytes) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "request body of ", body.size(), " bytes is over the limit of ", limits.max_body_bytes));
  }
  if (header_length > static_cast<int64_t>(body.size()) || header_length < -1) {
    return absl::InvalidArgumentError(absl::StrCat("Inference-Header-Content-Length ",
                                                   header_length, " is outside the body of ",
                                                   body.size(), " bytes"));
  }
  const size_t json_size = header_length < 0 ? body.size() : static_cast<size_t>(header_length);
  DYNVM_ASSIGN_OR_RETURN(Json j, ParseJson(body.substr(0, json_size), "the request"));
  if (!j.is_object()) return absl::InvalidArgumentError("the request must be a JSON object");
  InferRequest req;
  if (const Json* id = Member(j, "id"); id != nullptr) {
    if (!id->is_string()) return absl::InvalidArgumentError("\"id\" must be a string");
    req.id = id->get<std::string>().substr(0, 256);
  }
  const Json* params = Member(j, "parameters");
  req.binary_outputs = BoolParam(params, "binary_data_output");
  if (const Json* t = params != nullptr ? Member(*params, "timeout_ms") : nullptr; t != nullptr) {
    if (!AsInt64(*t, &req.timeout_ms) || req.timeout_ms < 0)
      return absl::InvalidArgumentError("parameters.timeout_ms must be a non-negative integer");
  }
  const Json* inputs = Member(j, "inputs");
  if (inputs == nullptr || !inputs->is_array())
    return absl::InvalidArgumentError("the request has no \"inputs\" array");
  if (static_cast<int64_t>(inputs->size()) > limits.max_tensors)
    return absl::ResourceExhaustedError(
        absl::StrCat(inputs->size(), " inputs, over the limit of ", limits.max_tensors));
  absl::string_view raw = body.substr(json_size);
  size_t offset = 0;
  for (size_t i = 0; i < inputs->size(); ++i) {
    DYNVM_ASSIGN_OR_RETURN(NamedTensor t,
                           ParseRestInput((*inputs)[i], i, raw, &offset, limits, owner));
    req.inputs.push_back(std::move(t));
  }
  if (offset != raw.size())
    return absl::InvalidArgumentError(absl::StrCat(raw.size() - offset,
                                                   " bytes of binary data are not claimed by any "
                                                   "input's binary_data_size"));
  if (const Json* outputs = Member(j, "outputs"); outputs != nullptr) {
    if (!outputs->is_array() || static_cast<int64_t>(outputs->size()) > limits.max_tensors)
      return absl::InvalidArgumentError("\"outputs\" must be an array of at most max_tensors");
    for (const Json& o : *outputs) {
      const Json* name = Member(o, "name");
      if (name == nullptr || !name->is_string())
        return absl::InvalidArgumentError("every requested output needs a string \"name\"");
      req.outputs.push_back(
          {name->get<std::string>(),
           BoolParam(Member(o, "parameters"), "binary_data") || req.binary_outputs});
    }
  }
  return req;
}

absl::Status CheckSignature(const FunctionInfo& function, const std::vector<NamedTensor>& inputs,
                            const Limits& limits) {
  std::vector<bool> seen(function.inputs.size(), false);
  std::map<std::string, int64_t> symbols;
  for (const NamedTensor& in : inputs) {
    int index = -1;
    for (size_t i = 0; i < function.inputs.size(); ++i) {
      if (function.inputs[i].name == in.name) index = static_cast<int>(i);
    }
    if (index < 0) {
      std::vector<std::string> names;
      for (const ParamInfo& p : function.inputs) names.push_back(p.name);
      return absl::InvalidArgumentError(
          absl::StrCat("unknown input '", in.name.substr(0, 64),
                       "'; the model's inputs are: ", absl::StrJoin(names, ", ")));
    }
    if (seen[index])
      return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "' given twice"));
    seen[index] = true;
    const ParamInfo& p = function.inputs[index];
    if (p.kind != ObjectKind::kTensor)
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", in.name, "' is a sequence or optional; the server binds tensors"));
    if (in.tensor.dtype() != p.dtype)
      return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "' must be ",
                                                     KServeDType(p.dtype), ", got ",
                                                     KServeDType(in.tensor.dtype())));
    if (!p.has_shape) continue;
    if (in.tensor.rank() != static_cast<int>(p.shape.size()))
      return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "' must have rank ",
                                                     p.shape.size(), ", got rank ",
                                                     in.tensor.rank()));
    for (size_t d = 0; d < p.shape.size(); ++d) {
      const int64_t got = in.tensor.dim(static_cast<int>(d));
      const DimInfo& want = p.shape[d];
      if (want.value >= 0 && got != want.value)
        return absl::InvalidArgumentError(
            absl::StrCat("input '", in.name, "' dim ", d, " must be ", want.value, ", got ", got));
      if (want.value >= 0) continue;
      if (d == 0 && got > limits.max_batch)
        return absl::ResourceExhaustedError(absl::StrCat(
            "input '", in.name, "': batch ", got, " is over the limit of ", limits.max_batch));
      auto [it, fresh] = symbols.emplace(want.symbol, got);
      if (!fresh && it->second != got)
        return absl::InvalidArgumentError(absl::StrCat("input '", in.name, "' dim ", d, " ('",
                                                       want.symbol, "') is ", got,
                                                       ", but another input has it ", it->second));
    }
  }
  for (const auto& [symbol, bound] : function.bounds) {
    auto it = symbols.find(symbol);
    if (it != symbols.end() && it->second > bound)
      return absl::InvalidArgumentError(
          absl::StrCat("'", symbol, "' is ", it->second, ", over the model's bound of ", bound));
  }
  std::vector<std::string> missing;
  for (size_t i = 0; i < seen.size(); ++i) {
    if (!seen[i]) missing.push_back(function.inputs[i].name);
  }
  if (!missing.empty())
    return absl::InvalidArgumentError(
        absl::StrCat("missing input(s): ", absl::StrJoin(missing, ", ")));
  return absl::OkStatus();
}

RestResponse EncodeRestInfer(absl::string_view model, absl::string_view version,
                             absl::string_view id, const std::vector<NamedTensor>& outputs,
                             const std::vector<bool>& binary, int64_t tail_from_bytes) {
  Json j = Json::object();
  j["model_name"] = std::string(model);
  j["model_version"] = std::string(version);
  if (!id.empty()) j["id"] = std::string(id);
  Json outs = Json::array();
  // BYTES outputs are encoded here; numeric ones are appended straight from their tensors
  // after the header, in the same order.
  std::vector<std::string> encoded(outputs.size());
  int64_t binary_bytes = 0;
  bool any_binary = false, any_encoded = false;
  for (size_t k = 0; k < outputs.size(); ++k) {
    const Tensor& t = outputs[k].tensor;
    Json o = Json::object();
    o["name"] = outputs[k].name;
    o["datatype"] = KServeDType(t.dtype());
    o["shape"] = std::vector<int64_t>(t.dims().begin(), t.dims().end());
    if (k < binary.size() && binary[k]) {
      if (t.dtype() == DType::kString) {
        AppendRaw(t, &encoded[k]);
        any_encoded = true;
      }
      const int64_t size =
          t.dtype() == DType::kString ? static_cast<int64_t>(encoded[k].size()) : t.nbytes();
      o["parameters"] = {{"binary_data_size", size}};
      binary_bytes += size;
      any_binary = true;
    } else {
      Json data = Json::array();
      for (int64_t i = 0; i < t.numel(); ++i) data.push_back(JsonElement(t, i));
      o["data"] = std::move(data);
    }
    outs.push_back(std::move(o));
  }
  j["outputs"] = std::move(outs);
  RestResponse r;
  r.body = j.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (any_binary) r.header_length = static_cast<int64_t>(r.body.size());
  if (any_binary && !any_encoded && binary_bytes >= tail_from_bytes) {
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (k < binary.size() && binary[k]) r.tail.push_back(outputs[k].tensor);
    }
    r.tail_bytes = binary_bytes;
  } else if (any_binary) {
    r.body.reserve(r.body.size() + static_cast<size_t>(binary_bytes));
    for (size_t k = 0; k < outputs.size(); ++k) {
      if (k >= binary.size() || !binary[k]) continue;
      if (outputs[k].tensor.dtype() == DType::kString) {
        r.body += encoded[k];
      } else {
        AppendRaw(outputs[k].tensor, &r.body);
      }
    }
  }
  return r;
}

std::string ErrorJson(absl::string_view message) {
  Json j = {{"error", std::string(message)}};
  return j.dump(-1, ' ', false, Json::error_handler_t::replace);
}

absl::Status CheckName(absl::string_view name, absl::string_view what) {
  bool ok = !name.empty() && name.size() <= 128 && name[0] != '.';
  for (char c : name) {
    const auto u = static_cast<unsigned char>(c);
    if (!(std::isalnum(u) || c == '_' || c == '-' || c == '.')) ok = false;
  }
  if (ok) return absl::OkStatus();
  std::string shown;
  for (char c : name.substr(0, 64)) {
    shown += std::isprint(static_cast<unsigned char>(c)) ? c : '?';
  }
  return absl::InvalidArgumentError(
      absl::StrCat(what, " '", shown,
                   "' is not a valid name: use 1 to 128 of [A-Za-z0-9_.-], not starting with '.'"));
}

}  // namespace dynvm::server
