#include "tests/conformance/conformance.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <system_error>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "compiler/onnx/tensor_proto.h"
#include "kernels/reference/signal_common.h"
#include "kernels/strings.h"
#include "onnx/onnx-data.pb.h"
#include "schema/mapped_file.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm::conformance {
namespace {

namespace fs = std::filesystem;

// Element i (row-major) of a possibly strided tensor, as a double (exact for integers up to
// 2^53, which is all the test data holds) or as an int64 for integer types.
struct Element {
  double f = 0;
  int64_t i = 0;
  uint64_t u = 0;
};

Element Read(const Tensor& t, int64_t linear) {
  const int64_t offset = t.ElementOffset(linear);
  const uint8_t* base = static_cast<const uint8_t*>(t.raw_data()) + offset * DTypeSize(t.dtype());
  Element e;
  switch (t.dtype()) {
    case DType::kF32: {
      float v;
      std::memcpy(&v, base, 4);
      e.f = v;
      break;
    }
    case DType::kF64: {
      std::memcpy(&e.f, base, 8);
      break;
    }
    case DType::kF16: {
      uint16_t b;
      std::memcpy(&b, base, 2);
      e.f = Half::ToFloat(b);
      break;
    }
    case DType::kBF16: {
      uint16_t b;
      std::memcpy(&b, base, 2);
      e.f = BitsToFloat(static_cast<uint32_t>(b) << 16);
      break;
    }
    case DType::kI8:
      e.i = *reinterpret_cast<const int8_t*>(base);
      break;
    case DType::kI16: {
      int16_t v;
      std::memcpy(&v, base, 2);
      e.i = v;
      break;
    }
    case DType::kI32: {
      int32_t v;
      std::memcpy(&v, base, 4);
      e.i = v;
      break;
    }
    case DType::kI64: {
      std::memcpy(&e.i, base, 8);
      break;
    }
    case DType::kU8:
      e.u = *base;
      break;
    case DType::kU16: {
      uint16_t v;
      std::memcpy(&v, base, 2);
      e.u = v;
      break;
    }
    case DType::kU32: {
      uint32_t v;
      std::memcpy(&v, base, 4);
      e.u = v;
      break;
    }
    case DType::kU64: {
      std::memcpy(&e.u, base, 8);
      break;
    }
    case DType::kBool:
      e.i = *base != 0;
      break;
    case DType::kString:
      break;
  }
  return e;
}

absl::StatusOr<std::vector<std::string>> DataSets(const std::string& case_dir) {
  std::vector<std::string> sets;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(case_dir, ec)) {
    if (e.is_directory() && absl::StartsWith(e.path().filename().string(), "test_data_set_")) {
      sets.push_back(e.path().string());
    }
  }
  if (ec) return absl::NotFoundError(absl::StrCat(case_dir, ": ", ec.message()));
  std::sort(sets.begin(), sets.end());
  return sets;
}

// input_0.pb, input_1.pb, ... in numeric order.
std::vector<std::string> Numbered(const std::string& dir, absl::string_view prefix) {
  std::map<int, std::string> found;
  std::error_code ec;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (!absl::StartsWith(name, prefix) || !absl::EndsWith(name, ".pb")) continue;
    int k = 0;
    if (absl::SimpleAtoi(
            absl::string_view(name).substr(prefix.size(), name.size() - prefix.size() - 3), &k)) {
      found[k] = e.path().string();
    }
  }
  std::vector<std::string> out;
  for (auto& [k, p] : found) out.push_back(p);
  return out;
}

// ONNX's test data stores bfloat16 tensors as uint16 (NumPy has no bfloat16): the same bits.
Tensor SameBitsAs(const Tensor& t, DType dtype) {
  absl::StatusOr<Tensor> v =
      Tensor::View(t.storage(), t.byte_offset(), dtype, t.dims(), t.strides());
  return v.ok() ? *v : t;
}

// True when a graph (or a region nested in it) holds a random operator.
bool HasRandomOp(const compiler::Graph& g) {
  static constexpr absl::string_view kRandom[] = {"Bernoulli", "RandomUniform", "RandomNormal",
                                                  "RandomUniformLike", "RandomNormalLike"};
  for (const auto& node : g.nodes) {
    for (absl::string_view op : kRandom) {
      if (node->op == op) return true;
    }
    // Dropout draws a mask when its training_mode input is true (known at run time only).
    if (node->op == "Dropout" && node->inputs.size() > 2 && node->inputs[2] != nullptr) return true;
    for (const auto& [name, region] : node->subgraphs) {
      if (region != nullptr && HasRandomOp(*region)) return true;
    }
  }
  return false;
}

CaseResult Finish(CaseResult r, Outcome o, std::string message,
                  std::chrono::steady_clock::time_point start) {
  r.outcome = o;
  r.message = std::move(message);
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return r;
}

}  // namespace

const char* OutcomeName(Outcome o) {
  switch (o) {
    case Outcome::kPassed:
      return "passed";
    case Outcome::kFailed:
      return "failed";
    case Outcome::kUnsupported:
      return "unsupported";
  }
  return "?";
}

absl::StatusOr<Tensor> ReadTensorFile(const std::string& path) {
  DYNVM_ASSIGN_OR_RETURN(std::string bytes, schema::ReadFileToString(path));
  ::onnx::TensorProto t;
  if (!t.ParseFromString(bytes))
    return absl::InvalidArgumentError(absl::StrCat(path, ": not a TensorProto"));
  compiler::onnx::TensorReadOptions options;
  options.model_dir = fs::path(path).parent_path().string();
  absl::StatusOr<Tensor> r = compiler::onnx::TensorFromProto(t, options);
  if (!r.ok())
    return absl::Status(r.status().code(), absl::StrCat(path, ": ", r.status().message()));
  return r;
}

namespace {

absl::StatusOr<Tensor> TensorOf(const ::onnx::TensorProto& t, const std::string& path) {
  compiler::onnx::TensorReadOptions options;
  options.model_dir = fs::path(path).parent_path().string();
  absl::StatusOr<Tensor> r = compiler::onnx::TensorFromProto(t, options);
  if (!r.ok())
    return absl::Status(r.status().code(), absl::StrCat(path, ": ", r.status().message()));
  return r;
}

absl::StatusOr<ObjectValue> SequenceOf(const ::onnx::SequenceProto& q, const std::string& path) {
  if (q.elem_type() != ::onnx::SequenceProto::TENSOR && q.tensor_values_size() == 0 &&
      q.elem_type() != ::onnx::SequenceProto::UNDEFINED) {
    return absl::UnimplementedError(
        absl::StrCat(path, ": only sequences of tensors are supported"));
  }
  std::vector<Tensor> items;
  for (const ::onnx::TensorProto& t : q.tensor_values()) {
    DYNVM_ASSIGN_OR_RETURN(Tensor x, TensorOf(t, path));
    items.push_back(std::move(x));
  }
  return ObjectValue::OfSequence(std::move(items));
}

}  // namespace

absl::StatusOr<ObjectValue> ReadValueFile(const std::string& path, ObjectKind kind,
                                          ObjectKind elem_kind) {
  if (kind == ObjectKind::kTensor) {
    DYNVM_ASSIGN_OR_RETURN(Tensor t, ReadTensorFile(path));
    return ObjectValue::OfTensor(std::move(t));
  }
  DYNVM_ASSIGN_OR_RETURN(std::string bytes, schema::ReadFileToString(path));
  if (kind == ObjectKind::kSequence) {
    ::onnx::SequenceProto q;
    if (!q.ParseFromString(bytes))
      return absl::InvalidArgumentError(absl::StrCat(path, ": not a SequenceProto"));
    return SequenceOf(q, path);
  }
  if (kind != ObjectKind::kOptional)
    return absl::InvalidArgumentError(absl::StrCat(path, ": unexpected kind"));
  ::onnx::OptionalProto o;
  if (!o.ParseFromString(bytes))
    return absl::InvalidArgumentError(absl::StrCat(path, ": not an OptionalProto"));
  if (elem_kind == ObjectKind::kSequence) {
    if (!o.has_sequence_value()) return ObjectValue::EmptyOptional(ObjectKind::kSequence);
    DYNVM_ASSIGN_OR_RETURN(ObjectValue q, SequenceOf(o.sequence_value(), path));
    return ObjectValue::Some(std::move(q));
  }
  if (!o.has_tensor_value()) return ObjectValue::EmptyOptional(ObjectKind::kTensor);
  DYNVM_ASSIGN_OR_RETURN(Tensor t, TensorOf(o.tensor_value(), path));
  return ObjectValue::Some(ObjectValue::OfTensor(std::move(t)));
}

absl::Status CompareValues(const ObjectValue& got, const ObjectValue& want, double rtol,
                           double atol) {
  if (got.kind != want.kind ||
      (got.kind == ObjectKind::kOptional && got.elem_kind != want.elem_kind)) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", got.DebugString(), ", expected ", want.DebugString()));
  }
  if (got.kind == ObjectKind::kOptional && got.has_value != want.has_value) {
    return absl::InvalidArgumentError(
        absl::StrCat("got ", got.DebugString(), ", expected ", want.DebugString()));
  }
  if (got.kind == ObjectKind::kOptional && !got.has_value) return absl::OkStatus();
  const bool seq = got.kind == ObjectKind::kSequence || got.elem_kind == ObjectKind::kSequence;
  if (!seq) return Compare(got.tensor, want.tensor, rtol, atol);
  if (got.sequence.size() != want.sequence.size()) {
    return absl::InvalidArgumentError(absl::StrCat("a sequence of ", got.sequence.size(),
                                                   " tensors, expected ", want.sequence.size()));
  }
  for (size_t i = 0; i < got.sequence.size(); ++i) {
    if (absl::Status s = Compare(got.sequence[i], want.sequence[i], rtol, atol); !s.ok()) {
      return absl::Status(s.code(), absl::StrCat("sequence element ", i, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::Status CompareRandom(const Tensor& got, const Tensor& want) {
  if (!got.defined()) return absl::InvalidArgumentError("no output");
  if (got.dtype() != want.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", DTypeName(got.dtype()), ", expected ", DTypeName(want.dtype())));
  }
  if (got.dims() != want.dims()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", got.ShapeString(), ", expected ", want.ShapeString()));
  }
  const std::vector<double> g = reference::ReadDoubles(got);
  const std::vector<double> w = reference::ReadDoubles(want);
  if (g.empty()) return absl::OkStatus();
  bool binary = true;
  for (double v : w) binary = binary && (v == 0 || v == 1);
  for (size_t i = 0; i < g.size(); ++i) {
    if (!std::isfinite(g[i])) {
      return absl::InvalidArgumentError(absl::StrCat("random output element ", i, " is ", g[i]));
    }
    if (binary && g[i] != 0 && g[i] != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("random output element ", i, " is ", g[i], "; a Bernoulli draw is 0 or 1"));
    }
  }
  auto moments = [](const std::vector<double>& v) {
    double mean = 0, var = 0;
    for (double x : v) mean += x;
    mean /= static_cast<double>(v.size());
    for (double x : v) var += (x - mean) * (x - mean);
    return std::pair<double, double>(mean, var / static_cast<double>(v.size()));
  };
  const auto [mg, vg] = moments(g);
  const auto [mw, vw] = moments(w);
  const double bound = 5 * std::sqrt((vg + vw) / static_cast<double>(g.size()));
  if (std::abs(mg - mw) > bound) {
    return absl::InvalidArgumentError(
        absl::StrCat("random output mean ", mg, ", expected ", mw, " within ", bound));
  }
  return absl::OkStatus();
}

absl::Status Compare(const Tensor& got, const Tensor& want, double rtol, double atol) {
  if (!got.defined()) return absl::InvalidArgumentError("no output");
  if (got.dtype() != want.dtype()) {
    return absl::InvalidArgumentError(
        absl::StrCat("dtype ", DTypeName(got.dtype()), ", expected ", DTypeName(want.dtype())));
  }
  if (got.dims() != want.dims()) {
    return absl::InvalidArgumentError(
        absl::StrCat("shape ", got.ShapeString(), ", expected ", want.ShapeString()));
  }
  if (got.dtype() == DType::kString) {
    for (int64_t i = 0; i < got.numel(); ++i) {
      if (StringAt(got, i) != StringAt(want, i)) {
        return absl::InvalidArgumentError(
            absl::StrCat("element ", i, " of ", want.DebugString(), ": got \"",
                         absl::CHexEscape(StringAt(got, i)), "\", expected \"",
                         absl::CHexEscape(StringAt(want, i)), "\""));
      }
    }
    return absl::OkStatus();
  }
  const bool is_float = IsFloat(got.dtype());
  for (int64_t i = 0; i < got.numel(); ++i) {
    const Element a = Read(got, i), b = Read(want, i);
    bool ok;
    std::string ga, wb;
    if (is_float) {
      ok = (std::isnan(a.f) && std::isnan(b.f)) || (a.f == b.f) ||
           (std::isfinite(b.f) && std::fabs(a.f - b.f) <= atol + rtol * std::fabs(b.f));
      ga = absl::StrCat(a.f);
      wb = absl::StrCat(b.f);
    } else {
      ok = a.i == b.i && a.u == b.u;
      ga = IsUnsignedInt(got.dtype()) ? absl::StrCat(a.u) : absl::StrCat(a.i);
      wb = IsUnsignedInt(got.dtype()) ? absl::StrCat(b.u) : absl::StrCat(b.i);
    }
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("element ", i, " of ", want.DebugString(), ": got ", ga, ", expected ", wb));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> ListCases(const std::string& data_dir,
                                                   const std::string& suite) {
  const fs::path dir = fs::path(data_dir) / suite;
  std::error_code ec;
  if (!fs::is_directory(dir, ec))
    return absl::NotFoundError(absl::StrCat("no suite folder ", dir.string()));
  std::vector<std::string> cases;
  for (const fs::directory_entry& e : fs::directory_iterator(dir, ec)) {
    if (e.is_directory() && fs::exists(e.path() / "model.onnx")) cases.push_back(e.path().string());
  }
  if (ec) return absl::NotFoundError(absl::StrCat(dir.string(), ": ", ec.message()));
  std::sort(cases.begin(), cases.end());
  return cases;
}

// The case's model.onnx wrapped in a Loop or an If (wrap.h), imported.
absl::StatusOr<std::unique_ptr<compiler::Module>> ImportWrapped(const std::string& case_dir,
                                                                Wrap wrap) {
  DYNVM_ASSIGN_OR_RETURN(std::string bytes,
                         schema::ReadFileToString((fs::path(case_dir) / "model.onnx").string()));
  DYNVM_ASSIGN_OR_RETURN(std::string wrapped, WrapModel(bytes, wrap));
  return compiler::onnx::ImportOnnxBytes(wrapped, case_dir);
}

CaseResult RunCase(const std::string& suite, const std::string& case_dir,
                   const RunnerOptions& options) {
  const auto start = std::chrono::steady_clock::now();
  CaseResult r;
  r.suite = suite;
  r.name = fs::path(case_dir).filename().string();
  auto refused = [&](const absl::Status& s, absl::string_view stage) {
    const Outcome o = absl::IsUnimplemented(s) ? Outcome::kUnsupported : Outcome::kFailed;
    return Finish(r, o, absl::StrCat(stage, ": ", s.message()), start);
  };
  absl::StatusOr<std::unique_ptr<compiler::Module>> module =
      options.wrap == Wrap::kNone
          ? compiler::onnx::ImportOnnxFile((fs::path(case_dir) / "model.onnx").string())
          : ImportWrapped(case_dir, options.wrap);
  if (!module.ok()) return refused(module.status(), "import");
  bool random_model = false;
  for (const compiler::Function& f : (*module)->functions()) {
    if (f.graph != nullptr && HasRandomOp(*f.graph)) random_model = true;
  }
  absl::StatusOr<compiler::CompileResult> compiled = compiler::Compile(**module);
  if (!compiled.ok()) return refused(compiled.status(), "compile");
  LoadOptions load;
  load.backends = options.backends;
  absl::StatusOr<std::shared_ptr<const Executable>> exe =
      Executable::LoadFromBytes(compiled->bytes, load);
  if (!exe.ok()) return refused(exe.status(), "load");
  if (auto it = options.expect_kernels.find(absl::StrCat(suite, "/", r.name));
      it != options.expect_kernels.end()) {
    std::string names;
    for (int i = 0; i < (*exe)->num_kernels(); ++i) {
      absl::StrAppend(&names, i > 0 ? " " : "", (*exe)->kernel(i).name());
    }
    for (const std::string& want : it->second) {
      if (!absl::StrContains(names, want)) {
        return Finish(r, Outcome::kFailed,
                      absl::StrCat("expected a ", want, " kernel, got: ", names), start);
      }
    }
  }
  absl::StatusOr<std::vector<std::string>> sets = DataSets(case_dir);
  if (!sets.ok()) return refused(sets.status(), "data");
  if (sets->empty()) return Finish(r, Outcome::kUnsupported, "no test_data_set_* folders", start);
  VmOptions vm_options;
  vm_options.max_loop_iterations = int64_t{1} << 24;
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe, vm_options);
  if (!vm.ok()) return refused(vm.status(), "vm");
  absl::StatusOr<std::vector<std::string>> input_names = (*vm)->input_names();
  if (!input_names.ok()) return refused(input_names.status(), "vm");
  absl::StatusOr<int> fn = (*exe)->FindFunction("");
  if (!fn.ok()) return refused(fn.status(), "vm");
  const FunctionInfo& info = (*exe)->function(*fn);
  for (const std::string& set : *sets) {
    const std::string set_name = fs::path(set).filename().string();
    const std::vector<std::string> inputs = Numbered(set, "input_");
    const std::vector<std::string> outputs = Numbered(set, "output_");
    // The If wrappers' condition is the model's last input, given here.
    const bool wrapped_if = options.wrap == Wrap::kIf || options.wrap == Wrap::kIfElse;
    if (inputs.size() + (wrapped_if ? 1 : 0) != input_names->size()) {
      return Finish(r, Outcome::kFailed,
                    absl::StrCat(set_name, ": ", inputs.size(), " input files for ",
                                 input_names->size(), " model inputs"),
                    start);
    }
    if (wrapped_if) {
      const uint8_t taken = options.wrap == Wrap::kIf ? 1 : 0;
      absl::StatusOr<Tensor> cond =
          Tensor::FromVector<uint8_t>(DType::kBool, {}, absl::MakeConstSpan(&taken, 1));
      if (!cond.ok()) return refused(cond.status(), set_name);
      if (absl::Status s = (*vm)->SetInput(kWrapCondInput, *cond); !s.ok()) {
        return refused(s, absl::StrCat(set_name, " input ", kWrapCondInput));
      }
    }
    for (size_t i = 0; i < inputs.size(); ++i) {
      if (info.inputs[i].kind != ObjectKind::kTensor) {
        absl::StatusOr<ObjectValue> v =
            ReadValueFile(inputs[i], info.inputs[i].kind, info.inputs[i].elem_kind);
        if (!v.ok()) return refused(v.status(), set_name);
        if (absl::Status s = (*vm)->SetInputValue(static_cast<int>(i), *v); !s.ok()) {
          return refused(s, absl::StrCat(set_name, " input ", i));
        }
        continue;
      }
      absl::StatusOr<Tensor> t = ReadTensorFile(inputs[i]);
      if (!t.ok()) return refused(t.status(), set_name);
      if (t->dtype() == DType::kU16 && info.inputs[i].dtype == DType::kBF16)
        t = SameBitsAs(*t, DType::kBF16);
      if (absl::Status s = (*vm)->SetInput(static_cast<int>(i), *t); !s.ok()) {
        return refused(s, absl::StrCat(set_name, " input ", i));
      }
    }
    RunOptions run;
    run.deadline = absl::Now() + absl::Seconds(options.case_timeout_seconds);
    if (absl::Status s = (*vm)->Run(run); !s.ok())
      return refused(s, absl::StrCat(set_name, " run"));
    if (info.outputs.size() != outputs.size()) {
      return Finish(
          r, Outcome::kFailed,
          absl::StrCat(set_name, ": ", info.outputs.size(), " outputs, expected ", outputs.size()),
          start);
    }
    for (size_t i = 0; i < outputs.size(); ++i) {
      if (info.outputs[i].kind != ObjectKind::kTensor) {
        absl::StatusOr<ObjectValue> got = (*vm)->GetOutputValue(static_cast<int>(i));
        if (!got.ok()) return refused(got.status(), set_name);
        absl::StatusOr<ObjectValue> want =
            ReadValueFile(outputs[i], info.outputs[i].kind, info.outputs[i].elem_kind);
        if (!want.ok()) return refused(want.status(), set_name);
        if (absl::Status s = CompareValues(*got, *want, options.rtol, options.atol); !s.ok()) {
          return Finish(r, Outcome::kFailed,
                        absl::StrCat(set_name, " output ", i, ": ", s.message()), start);
        }
        continue;
      }
      absl::StatusOr<Tensor> got = (*vm)->GetOutput(static_cast<int>(i));
      if (!got.ok()) return refused(got.status(), set_name);
      absl::StatusOr<Tensor> want = ReadTensorFile(outputs[i]);
      if (!want.ok()) return refused(want.status(), set_name);
      Tensor out = *got;
      if (out.dtype() == DType::kBF16 && want->dtype() == DType::kU16)
        out = SameBitsAs(out, DType::kU16);
      absl::Status s = Compare(out, *want, options.rtol, options.atol);
      if (!s.ok() && random_model) {  // a draw cannot match stored values: judge statistically
        s = CompareRandom(out, *want);
        r.random = true;
      }
      if (!s.ok()) {
        return Finish(r, Outcome::kFailed, absl::StrCat(set_name, " output ", i, ": ", s.message()),
                      start);
      }
    }
  }
  return Finish(r, Outcome::kPassed, "", start);
}

}  // namespace dynvm::conformance
