// The `dynvm._dynvm` extension module: a thin pybind11 layer over the public C++ API
// (vm/executable.h, vm/virtual_machine.h, compiler/compiler.h, compiler/onnx/onnx_importer.h).
// The package's pure-Python layer (python/dynvm/__init__.py) adds VirtualMachine.run's keyword
// form and VirtualMachine.stream; docs/python.md is the user's guide.
//
// Arrays: an input that is a C-contiguous, aligned, native-order ndarray of the input's dtype
// is bound without a copy (SetInputZeroCopy over the array's memory; the binding holds a
// reference to the array); any other layout is copied once by NumPy into a fresh array, which
// is then bound the same way (RunStats.inputs_copied counts those). Outputs are ndarrays over
// the output tensors' own storage (GetOutput): a capsule holding the Tensor is the array's
// base, so the storage lives as long as the array, whatever happens to the VM.
//
// Threads: the GIL is released while compiling, loading and running. A VM refuses (an error,
// not a data race) to start a run while another thread's run on it is in progress.
// pybind11 (Python.h) comes before any standard header, as Python requires.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>
#include <time.h>

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "compiler/compiler.h"
#include "compiler/onnx/onnx_importer.h"
#include "kernels/strings.h"
#include "kernels/thread_pool.h"
#include "schema/mapped_file.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace py = pybind11;

namespace dynvm::python {
namespace {

// ---------------------------------------------------------------------------------------------
// Errors: an absl::Status becomes the dynvm._errors class of its code (dynvm.Error subclasses
// that also derive from the matching built-in exception).

struct StatusError {
  absl::Status status;
};

[[noreturn]] void Throw(absl::Status status) { throw StatusError{std::move(status)}; }

// The id of Python's main thread (where signal handlers run), read once from `threading`.
unsigned long MainThreadId() {     // NOLINT(runtime/int): PyThread_get_thread_ident's type
  static const unsigned long id =  // NOLINT(runtime/int)
      py::module_::import("threading").attr("main_thread")().attr("ident").cast<unsigned long>();
  return id;
}
void ThrowIfError(absl::Status status) {
  if (!status.ok()) Throw(std::move(status));
}
template <typename T>
T ValueOrThrow(absl::StatusOr<T> v) {
  if (!v.ok()) Throw(v.status());
  return *std::move(v);
}

const char* ErrorClassName(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInvalidArgument:
      return "InvalidArgumentError";
    case absl::StatusCode::kNotFound:
      return "NotFoundError";
    case absl::StatusCode::kResourceExhausted:
      return "ResourceExhaustedError";
    case absl::StatusCode::kDeadlineExceeded:
      return "DeadlineExceededError";
    case absl::StatusCode::kCancelled:
      return "CancelledError";
    case absl::StatusCode::kFailedPrecondition:
      return "FailedPreconditionError";
    case absl::StatusCode::kOutOfRange:
      return "OutOfRangeError";
    case absl::StatusCode::kUnimplemented:
      return "UnimplementedError";
    case absl::StatusCode::kInternal:
      return "InternalError";
    case absl::StatusCode::kDataLoss:
      return "DataLossError";
    default:
      return "Error";
  }
}

void SetPythonError(const absl::Status& status) {
  py::module_ errors = py::module_::import("dynvm._errors");
  py::object cls = errors.attr(ErrorClassName(status.code()));
  py::object exc = cls(std::string(status.message()));
  exc.attr("code") = std::string(absl::StatusCodeToString(status.code()));
  PyErr_SetObject(cls.ptr(), exc.ptr());
}

double ThreadCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
}

// A Python number as T, or InvalidArgument naming `what`.
template <typename T>
T Number(const py::handle& value, absl::string_view what) {
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    Throw(absl::InvalidArgumentError(
        absl::StrCat(what, " must be a number, got ", py::repr(value).cast<std::string>())));
  }
}

// "float", "list", "numpy.int64": the type of a value, for messages.
std::string TypeName(const py::handle& value) {
  const py::handle type = py::type::of(value);
  const std::string name = py::str(type.attr("__qualname__")).cast<std::string>();
  const std::string module = py::str(type.attr("__module__")).cast<std::string>();
  return module == "builtins" ? name : module + "." + name;
}

// ---------------------------------------------------------------------------------------------
// dtypes. bf16 is exchanged as uint16 (the same bits); strings come out as str objects and go in
// from str, bytes or object arrays (copied: a string tensor holds UTF-8, NumPy UTF-32).

// NumPy's type numbers (numpy/ndarraytypes.h), for the dtypes exchanged.
int NumpyTypeNum(DType t) {
  switch (t) {
    case DType::kF32:
      return 11;  // NPY_FLOAT
    case DType::kF64:
      return 12;  // NPY_DOUBLE
    case DType::kF16:
      return 23;  // NPY_HALF
    case DType::kBF16:
    case DType::kU16:
      return 4;  // NPY_USHORT
    case DType::kI8:
      return 1;  // NPY_BYTE
    case DType::kI16:
      return 3;  // NPY_SHORT
    case DType::kI32:
      return 5;  // NPY_INT
    case DType::kI64:
      return 9;  // NPY_LONGLONG
    case DType::kU8:
      return 2;  // NPY_UBYTE
    case DType::kU32:
      return 6;  // NPY_UINT
    case DType::kU64:
      return 10;  // NPY_ULONGLONG
    case DType::kBool:
      return 0;  // NPY_BOOL
    case DType::kString:
      return 17;  // NPY_OBJECT
  }
  return 17;
}

// The numpy dtype of each DType, made once (outputs are made on every run).
const py::dtype& NumpyDType(DType t) {
  static const std::vector<py::dtype>* table = [] {
    auto* v = new std::vector<py::dtype>;  // never destroyed: outlives the interpreter
    for (int i = 0; i < kNumDTypes; ++i)
      v->push_back(py::dtype(NumpyTypeNum(static_cast<DType>(i))));
    return v;
  }();
  return (*table)[static_cast<int>(t)];
}

// Whether an ndarray of `dt` holds elements of `t` (any byte order: the caller checks it).
bool DTypeMatches(const py::dtype& dt, DType t) {
  const char kind = dt.kind();
  const int64_t size = dt.itemsize();
  if (t == DType::kString) return false;
  if (size != DTypeSize(t)) return false;
  if (t == DType::kBool) return kind == 'b';
  if (IsFloat(t) && t != DType::kBF16) return kind == 'f';
  if (IsSignedInt(t)) return kind == 'i';
  return kind == 'u';  // unsigned, and bf16 as uint16
}

std::string DTypeDescription(DType t) {
  if (t == DType::kBF16) return "bf16 (as numpy.uint16)";
  return py::str(py::handle(NumpyDType(t))).cast<std::string>();
}

// ---------------------------------------------------------------------------------------------
// Tensors <-> ndarrays.

// A tensor over the ndarray's memory (REQUIRES: C-contiguous, aligned, native order). With
// `keep`, the tensor's storage holds a reference to the array until its last view goes away.
Tensor WrapArray(const py::array& a, DType dtype, bool keep) {
  std::function<void()> release;
  if (keep) {
    PyObject* obj = a.ptr();
    Py_INCREF(obj);
    release = [obj] {
      if (Py_IsInitialized() == 0) return;  // interpreter gone: nothing to release into
      PyGILState_STATE g = PyGILState_Ensure();
      Py_DECREF(obj);
      PyGILState_Release(g);
    };
  }
  void* data = const_cast<void*>(a.data());
  const int64_t bytes = a.nbytes();
  StorageRef storage = Storage::Wrap(Storage::Kind::kExternal, data, static_cast<size_t>(bytes),
                                     Device::kCPU, std::move(release));
  std::vector<int64_t> dims(a.shape(), a.shape() + a.ndim());
  // Cannot fail: the view is the whole storage, contiguous.
  return ValueOrThrow(Tensor::View(std::move(storage), 0, dtype, dims));
}

py::object ToNumpy(const VirtualMachine& vm, Tensor t) {
  if (t.defined() && t.device() != Device::kCPU) t = ValueOrThrow(vm.ToHost(t));
  std::vector<py::ssize_t> shape(t.dims().begin(), t.dims().end());
  if (t.dtype() == DType::kString) {  // str objects (decoded as UTF-8, invalid bytes replaced)
    py::array out(py::dtype("object"), shape);
    PyObject** dst = static_cast<PyObject**>(out.mutable_data());
    for (int64_t i = 0; i < t.numel(); ++i) {
      const StringRef& s = t.data<StringRef>()[t.ElementOffset(i)];
      PyObject* str = PyUnicode_DecodeUTF8(s.data, s.size, "replace");
      if (str == nullptr) throw py::error_already_set();
      Py_XDECREF(dst[i]);
      dst[i] = str;
    }
    return out;
  }
  const int64_t item = DTypeSize(t.dtype());
  std::vector<py::ssize_t> strides(t.rank());
  for (int d = 0; d < t.rank(); ++d) strides[d] = t.stride(d) * item;
  const bool writable = t.storage()->kind() == Storage::Kind::kPool;
  void* data = t.raw_data();
  auto* held = new Tensor(std::move(t));
  py::capsule base(held, [](void* p) { delete static_cast<Tensor*>(p); });
  py::array out(NumpyDType(held->dtype()), shape, strides, data, base);
  if (!writable) {  // constants (mapped read-only) and the caller's own input memory
    py::detail::array_proxy(out.ptr())->flags &= ~py::detail::npy_api::NPY_ARRAY_WRITEABLE_;
  }
  return out;
}

// A deep copy (an `emit`ted tensor is valid only during the callback).
py::object CopyToNumpy(const VirtualMachine& vm, const Tensor& t) {
  py::object view = ToNumpy(vm, t);
  return view.attr("copy")();
}

py::object ObjectToPython(const VirtualMachine& vm, const ObjectValue& v) {
  switch (v.kind) {
    case ObjectKind::kSequence: {
      py::list items;
      for (const Tensor& t : v.sequence) items.append(ToNumpy(vm, t));
      return items;
    }
    case ObjectKind::kOptional: {
      if (!v.has_value) return py::none();
      ObjectValue inner = v.elem_kind == ObjectKind::kSequence ? ObjectValue::OfSequence(v.sequence)
                                                               : ObjectValue::OfTensor(v.tensor);
      return ObjectToPython(vm, inner);
    }
    default:
      return ToNumpy(vm, v.tensor);
  }
}

// ---------------------------------------------------------------------------------------------
// Signatures.

std::string KindName(ObjectKind k) {
  switch (k) {
    case ObjectKind::kSequence:
      return "sequence";
    case ObjectKind::kOptional:
      return "optional";
    default:
      return "tensor";
  }
}

struct TensorInfo {
  std::string name;
  py::dtype dtype;
  std::string dtype_name;  // the dynvm name: "f32", "bf16", ...
  std::string kind;        // "tensor", "sequence" or "optional"
  py::object shape;        // tuple of int | str (symbolic), or None when not declared

  static TensorInfo From(const ParamInfo& p) {
    TensorInfo info{p.name, NumpyDType(p.dtype), std::string(DTypeName(p.dtype)), KindName(p.kind),
                    py::none()};
    if (p.kind == ObjectKind::kOptional && p.elem_kind == ObjectKind::kSequence) {
      info.kind = "optional sequence";
    }
    if (p.has_shape) {
      py::tuple dims(p.shape.size());
      for (size_t i = 0; i < p.shape.size(); ++i) {
        dims[i] = p.shape[i].value >= 0 ? py::object(py::int_(p.shape[i].value))
                                        : py::object(py::str(p.shape[i].symbol));
      }
      info.shape = std::move(dims);
    }
    return info;
  }
  std::string Repr() const {
    return absl::StrCat("TensorInfo(name='", name, "', dtype=", dtype_name, ", kind=", kind,
                        ", shape=", py::repr(shape).cast<std::string>(), ")");
  }
};

// ---------------------------------------------------------------------------------------------
// Executable.

class PyExecutable {
 public:
  PyExecutable(std::shared_ptr<const Executable> exe, std::string bytes, std::string weights,
               std::string weights_name, std::string source_path)
      : exe_(std::move(exe)),
        bytes_(std::move(bytes)),
        weights_(std::move(weights)),
        weights_name_(std::move(weights_name)),
        source_path_(std::move(source_path)) {}

  const std::shared_ptr<const Executable>& exe() const { return exe_; }

  int Function(const std::string& name) const { return ValueOrThrow(exe_->FindFunction(name)); }
  py::list Params(const std::string& function, bool outputs) const {
    const FunctionInfo& f = exe_->function(Function(function));
    py::list out;
    for (const ParamInfo& p : outputs ? f.outputs : f.inputs) out.append(TensorInfo::From(p));
    return out;
  }
  std::vector<std::string> Functions() const {
    std::vector<std::string> names;
    for (int i = 0; i < exe_->num_functions(); ++i) {
      if (exe_->function(i).is_entry) names.push_back(exe_->function(i).name);
    }
    return names;
  }
  py::dict Bounds(const std::string& function) const {
    py::dict out;
    for (const auto& [name, bound] : exe_->function(Function(function)).bounds)
      out[name.c_str()] = bound;
    return out;
  }

  // Writes the .dvm (and, for weights compiled apart, the .dvw beside it).
  void Save(const std::string& path) const {
    py::gil_scoped_release unlocked;
    std::string bytes = bytes_;
    if (bytes.empty()) bytes = ValueOrThrow(schema::ReadFileToString(source_path_));
    ThrowIfError(schema::WriteStringToFile(path, bytes));
    if (!weights_name_.empty() && !weights_.empty()) {
      const std::filesystem::path dir = std::filesystem::path(path).parent_path();
      ThrowIfError(schema::WriteStringToFile((dir / weights_name_).string(), weights_));
    }
  }

 private:
  std::shared_ptr<const Executable> exe_;
  std::string bytes_;    // the .dvm file when compiled in memory
  std::string weights_;  // the .dvw file when compiled with weights apart
  std::string weights_name_;
  std::string source_path_;  // the .dvm file it was loaded from
  std::string report_;       // vm-compile --report's text, when compiled here
  std::vector<std::string> warnings_;
  std::string ir_;  // the IR after compiling, with dump_ir

 public:
  void set_report(std::string report, std::vector<std::string> warnings, std::string ir) {
    report_ = std::move(report);
    warnings_ = std::move(warnings);
    ir_ = std::move(ir);
  }
  const std::string& report() const { return report_; }
  const std::vector<std::string>& warnings() const { return warnings_; }
  const std::string& ir() const { return ir_; }
};

// "int8"/"bf16" -> the dtype; None -> f32 (no quantization).
DType QuantizeDType(const py::object& q) {
  if (q.is_none()) return DType::kF32;
  const std::string s = py::str(q).cast<std::string>();
  if (s == "int8") return DType::kI8;
  if (s == "bf16") return DType::kBF16;
  if (s == "int4") return DType::kU8;  // compiler::CompileOptions: 4-bit MatMulNBits blocks
  Throw(absl::InvalidArgumentError(
      absl::StrCat("quantize_weights must be 'int8', 'bf16', 'int4' or None, got '", s, "'")));
}

// compile(model, ...): `model` is a path (str) or the model's bytes (the Python layer turns an
// os.PathLike into a str and an onnx.ModelProto into bytes).
std::shared_ptr<PyExecutable> Compile(const py::object& model, const py::object& bounds,
                                      bool optimize, bool strip_debug, const std::string& device,
                                      const py::object& weights, bool compress, bool onnx_check,
                                      const py::object& quantize_weights,
                                      const py::object& quantize_min_bytes,
                                      const py::object& quantize_block, bool quantize_zero_points,
                                      const py::object& disable_rewrites, bool dump_ir, bool decode,
                                      const py::object& quantize_accuracy_level) {
  compiler::CompileOptions options;
  if (!bounds.is_none()) {
    if (!PyDict_Check(bounds.ptr())) {
      Throw(absl::InvalidArgumentError(
          absl::StrCat("bounds must be a dict of symbol name -> int, got ", TypeName(bounds))));
    }
    for (const auto& [k, v] : py::reinterpret_borrow<py::dict>(bounds)) {
      if (!PyUnicode_Check(k.ptr())) {
        Throw(absl::InvalidArgumentError("bounds: symbol names must be str"));
      }
      const std::string name = k.cast<std::string>();
      const int64_t n = Number<int64_t>(v, absl::StrCat("bound ", name));
      if (n < 0) {
        Throw(absl::InvalidArgumentError(
            absl::StrCat("bound ", name, ": a bound must be >= 0, got ", n)));
      }
      options.bounds.emplace_back(name, n);
    }
  }
  options.optimize = optimize;
  options.strip_debug = strip_debug;
  options.compress = compress;
  options.producer = "dynvm (python)";
  options.quantize_weights = QuantizeDType(quantize_weights);
  if (!quantize_min_bytes.is_none()) {
    if (options.quantize_weights == DType::kF32) {
      Throw(absl::InvalidArgumentError("quantize_min_bytes needs quantize_weights"));
    }
    options.quantize_min_bytes = Number<int64_t>(quantize_min_bytes, "quantize_min_bytes");
    if (options.quantize_min_bytes < 0) {
      Throw(absl::InvalidArgumentError("quantize_min_bytes must not be negative"));
    }
  }
  if ((!quantize_block.is_none() || quantize_zero_points) &&
      options.quantize_weights != DType::kU8) {
    Throw(absl::InvalidArgumentError(
        "quantize_block and quantize_zero_points need quantize_weights='int4'"));
  }
  if (!quantize_block.is_none()) {
    options.quantize_block = Number<int64_t>(quantize_block, "quantize_block");
  }
  options.quantize_zero_points = quantize_zero_points;
  if (!quantize_accuracy_level.is_none()) {
    if (options.quantize_weights != DType::kU8) {
      Throw(absl::InvalidArgumentError("quantize_accuracy_level needs quantize_weights='int4'"));
    }
    options.quantize_accuracy_level =
        Number<int64_t>(quantize_accuracy_level, "quantize_accuracy_level");
    if (options.quantize_accuracy_level < 0 || options.quantize_accuracy_level > 4) {
      Throw(absl::InvalidArgumentError(absl::StrCat("quantize_accuracy_level must be 0 to 4, got ",
                                                    options.quantize_accuracy_level)));
    }
  }
  if (!disable_rewrites.is_none()) {
    if (PyUnicode_Check(disable_rewrites.ptr())) {
      Throw(absl::InvalidArgumentError(
          "disable_rewrites must be a list of rule names, not a str (use [\"name\"])"));
    }
    for (const py::handle& r : disable_rewrites) {
      options.disabled_rewrites.push_back(py::str(r).cast<std::string>());
    }
  }
  if (device == "cuda") {
    options.device = Device::kCUDA;
  } else if (device != "cpu") {
    Throw(absl::InvalidArgumentError(
        absl::StrCat("device must be 'cpu' or 'cuda', got '", device, "'")));
  }
  if (!weights.is_none()) {
    options.weights_file_name =
        std::filesystem::path(weights.cast<std::string>()).filename().string();
    if (options.weights_file_name.empty()) {
      Throw(absl::InvalidArgumentError("weights needs a file name such as 'model.dvw'"));
    }
  }
  compiler::onnx::ImportOptions import;
  import.onnx_checker = onnx_check;
  import.decode = decode;
  const bool from_bytes = PyBytes_Check(model.ptr());
  if (!from_bytes && !PyUnicode_Check(model.ptr())) {
    Throw(absl::InvalidArgumentError(
        absl::StrCat("model must be a path (str or os.PathLike), bytes or an onnx.ModelProto, got ",
                     TypeName(model))));
  }
  const std::string source = model.cast<std::string>();
  const std::string where = from_bytes ? std::string("the model") : source;
  py::gil_scoped_release unlocked;
  std::unique_ptr<compiler::Module> module =
      ValueOrThrow(from_bytes ? compiler::onnx::ImportOnnxBytes(source, "", import)
                              : compiler::onnx::ImportOnnxFile(source, import));
  absl::StatusOr<compiler::CompileResult> result = compiler::Compile(*module, options);
  std::string ir = dump_ir ? module->Dump() : "";
  if (!result.ok()) {
    Throw(
        absl::Status(result.status().code(), absl::StrCat(where, ": ", result.status().message(),
                                                          dump_ir ? absl::StrCat("\n", ir) : "")));
  }
  // Weights compiled apart are loaded from memory, copied once (no temporary file).
  LoadOptions load;
  load.weights_data = {reinterpret_cast<const uint8_t*>(result->weights.data()),
                       result->weights.size()};
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(
      {reinterpret_cast<const uint8_t*>(result->bytes.data()), result->bytes.size()}, load);
  auto out =
      std::make_shared<PyExecutable>(ValueOrThrow(std::move(exe)), std::move(result->bytes),
                                     std::move(result->weights), options.weights_file_name, "");
  out->set_report(result->ReportText(), result->warnings, std::move(ir));
  return out;
}

std::shared_ptr<PyExecutable> Load(const std::string& path, const py::object& weights,
                                   bool verify_weights_hash, const std::string& constant_pages) {
  LoadOptions options;
  if (!weights.is_none()) options.weights_path = weights.cast<std::string>();
  options.verify_weights_hash = verify_weights_hash;
  absl::StatusOr<ConstantPages> pages = ParseConstantPages(constant_pages);
  if (!pages.ok()) throw py::value_error(std::string(pages.status().message()));
  options.constant_pages = *pages;
  py::gil_scoped_release unlocked;
  return std::make_shared<PyExecutable>(ValueOrThrow(Executable::Load(path, options)), "", "", "",
                                        path);
}

// ---------------------------------------------------------------------------------------------
// VirtualMachine.

struct RunStats {
  int inputs_zero_copy = 0;
  int inputs_copied = 0;
  int64_t loop_iterations = 0;
  int64_t system_allocs = 0;
  int64_t system_allocs_after_first_iteration = 0;
};

class PyVirtualMachine {
 public:
  // memory_limit and max_iterations: a number, or None / 0 for no limit (as vm-run's 0).
  PyVirtualMachine(std::shared_ptr<PyExecutable> exe, int threads, const py::object& memory_limit,
                   const py::object& max_iterations)
      : exe_(std::move(exe)) {
    if (absl::Status s = ValidateThreadCount(threads, "threads"); !s.ok()) Throw(s);
    VmOptions options;
    options.num_threads = threads;
    options.memory_limit = Limit(memory_limit, "memory_limit", "bytes");
    options.max_loop_iterations = Limit(max_iterations, "max_iterations", "loop iterations");
    vm_ = ValueOrThrow(VirtualMachine::Create(exe_->exe(), options));
  }

  static int64_t Limit(const py::object& v, const char* name, const char* unit) {
    if (v.is_none()) return 0;
    const int64_t n = Number<int64_t>(v, name);
    if (n < 0) {
      Throw(absl::InvalidArgumentError(
          absl::StrCat(name, " must be a number of ", unit, " (0 or None: no limit), got ", n)));
    }
    return n;
  }

  py::dict Run(const py::dict& inputs, const std::string& function, const py::object& timeout,
               const py::object& on_emit) {
    bool expected = false;
    if (!busy_.compare_exchange_strong(expected, true)) {
      Throw(absl::FailedPreconditionError(
          "this VirtualMachine is running on another thread; a VM runs one call at a time "
          "(create one VirtualMachine per thread: they share the Executable)"));
    }
    struct Done {
      std::atomic<bool>& busy;
      ~Done() { busy.store(false); }
    } done{busy_};
    const CachedFunction& cached = Cached(function);
    const FunctionInfo& info = exe_->exe()->function(cached.index);
    RunStats stats;
    BindInputs(info, function, inputs, stats);

    RunOptions options;
    options.function = function;
    options.cancel = &cancel_;
    if (!timeout.is_none()) {
      const double seconds = Number<double>(timeout, "timeout");
      if (!(seconds >= 0)) {
        Throw(absl::InvalidArgumentError(
            absl::StrCat("timeout must be >= 0 seconds, got ", seconds)));
      }
      options.deadline = absl::Now() + absl::Seconds(seconds);
    }
    std::unique_ptr<py::error_already_set> callback_error;
    if (!on_emit.is_none()) {
      options.on_emit = [this, &on_emit, &callback_error](int stream,
                                                          const Tensor& value) -> absl::Status {
        py::gil_scoped_acquire locked;
        try {
          on_emit(stream, CopyToNumpy(*vm_, value));
        } catch (py::error_already_set& e) {
          callback_error = std::make_unique<py::error_already_set>(std::move(e));
          return absl::CancelledError("on_emit raised an exception");
        } catch (const StatusError& e) {  // no exception may cross the VM's C++ frames
          return e.status;
        } catch (const std::exception& e) {
          return absl::InternalError(absl::StrCat("on_emit: ", e.what()));
        }
        return absl::OkStatus();
      };
    }
    // On the main thread, Python's signal handlers (Ctrl-C's KeyboardInterrupt) run during the
    // run: the VM polls where it checks for cancellation (every 256 loop iterations, at calls),
    // taking the GIL at most every 10 ms. A handler that raises cancels the run; its exception
    // is raised here.
    std::unique_ptr<py::error_already_set> signal_error;
    absl::Time next_poll = absl::InfinitePast();
    if (PyThread_get_thread_ident() == MainThreadId()) {
      options.poll = [&signal_error, &next_poll]() -> absl::Status {
        const absl::Time now = absl::Now();
        if (now < next_poll) return absl::OkStatus();
        next_poll = now + absl::Milliseconds(10);
        py::gil_scoped_acquire locked;
        if (PyErr_CheckSignals() == 0) return absl::OkStatus();
        signal_error = std::make_unique<py::error_already_set>();
        return absl::CancelledError("interrupted: a Python signal handler raised");
      };
    }
    cancel_.Reset();
    absl::Status status;
    {
      py::gil_scoped_release unlocked;
      status = vm_->Run(options);
    }
    if (callback_error != nullptr) throw std::move(*callback_error);
    if (signal_error != nullptr) throw std::move(*signal_error);
    stats.loop_iterations = vm_->last_run_iterations();
    const RunMemoryStats memory = vm_->last_run_memory();
    stats.system_allocs = memory.system_allocs;
    stats.system_allocs_after_first_iteration = memory.system_allocs_after_first_iteration;
    last_stats_ = stats;
    ThrowIfError(status);
    py::dict out;
    for (size_t i = 0; i < info.outputs.size(); ++i) {
      const ParamInfo& p = info.outputs[i];
      if (p.kind == ObjectKind::kTensor) {
        py::object value =
            ToNumpy(*vm_, ValueOrThrow(vm_->GetOutput(static_cast<int>(i), function)));
        PyDict_SetItem(out.ptr(), cached.output_names[i].ptr(), value.ptr());
      } else {
        py::object value =
            ObjectToPython(*vm_, ValueOrThrow(vm_->GetOutputValue(static_cast<int>(i), function)));
        PyDict_SetItem(out.ptr(), cached.output_names[i].ptr(), value.ptr());
      }
    }
    return out;
  }

  // run(inputs=None, /, *, function="", timeout=None, on_emit=None, **inputs_by_keyword)
  py::dict Call(const py::object& inputs, const std::string& function, const py::object& timeout,
                const py::object& on_emit, const py::kwargs& kwargs) {
    if (kwargs.empty() && PyDict_Check(inputs.ptr())) {
      return Run(py::reinterpret_borrow<py::dict>(inputs), function, timeout, on_emit);
    }
    if (inputs.is_none()) return Run(kwargs, function, timeout, on_emit);
    py::dict feeds;
    if (PyDict_Merge(feeds.ptr(), inputs.ptr(), 1) != 0) {
      PyErr_Clear();
      Throw(absl::InvalidArgumentError(absl::StrCat(
          "inputs must be a dict of input name -> numpy.ndarray, got ", TypeName(inputs))));
    }
    for (const auto& [k, v] : kwargs) {
      if (PyDict_Contains(feeds.ptr(), k.ptr()) == 1) {
        Throw(absl::InvalidArgumentError(absl::StrCat(
            "input '", k.cast<std::string>(), "' is given twice (in the dict and as a keyword)")));
      }
      PyDict_SetItem(feeds.ptr(), k.ptr(), v.ptr());
    }
    return Run(feeds, function, timeout, on_emit);
  }

  void Cancel() { cancel_.Cancel(); }
  void Trim() {
    bool expected = false;
    if (!busy_.compare_exchange_strong(expected, true)) {
      Throw(absl::FailedPreconditionError("cannot trim while a run is in progress"));
    }
    vm_->Trim();
    busy_.store(false);
  }
  bool running() const { return busy_.load(); }
  const RunStats& last_run_stats() const { return last_stats_; }
  py::dict MemoryStats() const {
    const AllocatorStats s = vm_->memory_stats();
    py::dict out;
    out["bytes_in_use"] = s.bytes_in_use;
    out["peak_bytes_in_use"] = s.peak_bytes_in_use;
    out["bytes_reserved"] = s.bytes_reserved;
    out["system_allocs"] = s.system_allocs;
    out["system_frees"] = s.system_frees;
    out["allocs"] = s.allocs;
    out["pool_hits"] = s.pool_hits;
    out["failed_allocs"] = s.failed_allocs;
    return out;
  }
  const std::shared_ptr<PyExecutable>& executable() const { return exe_; }
  py::dict bound_inputs() const { return bound_; }

  // For python/benchmarks/overhead.py: `n` runs of C++ code doing what Run does per call for
  // tensor inputs (bind zero-copy, run, fetch every output), without Python in the loop;
  // returns (wall seconds, this thread's CPU seconds) per run.
  std::pair<double, double> TimeCppRuns(const py::dict& inputs, int n) {
    std::vector<std::pair<std::string, Tensor>> tensors;
    const FunctionInfo& info = exe_->exe()->function(exe_->Function(""));
    for (const auto& [k, v] : inputs) {
      const std::string name = k.cast<std::string>();
      const py::array a = v.cast<py::array>();
      DType dtype = DType::kF32;
      for (const ParamInfo& p : info.inputs) {
        if (p.name == name) dtype = p.dtype;
      }
      tensors.emplace_back(name, WrapArray(a, dtype, /*keep=*/true));
    }
    py::gil_scoped_release unlocked;
    const absl::Time start = absl::Now();
    const double cpu_start = ThreadCpuSeconds();
    for (int i = 0; i < n; ++i) {
      for (const auto& [name, t] : tensors) ThrowIfError(vm_->SetInputZeroCopy(name, t));
      ThrowIfError(vm_->Run());
      for (size_t o = 0; o < info.outputs.size(); ++o) {
        absl::StatusOr<Tensor> out = vm_->GetOutput(static_cast<int>(o));
        ThrowIfError(out.status());
      }
    }
    const double cpu = ThreadCpuSeconds() - cpu_start;
    return {absl::ToDoubleSeconds(absl::Now() - start) / n, cpu / n};
  }

 private:
  // InvalidArgument unless ndarray `a` has the rank of input `p` and its constant dims.
  static void CheckShape(const ParamInfo& p, const py::array& a) {
    if (!p.has_shape) return;
    bool ok = a.ndim() == static_cast<py::ssize_t>(p.shape.size());
    for (size_t d = 0; ok && d < p.shape.size(); ++d) {
      ok = p.shape[d].value < 0 || p.shape[d].value == a.shape(static_cast<py::ssize_t>(d));
    }
    if (!ok) {
      std::vector<std::string> want, got;
      for (const DimInfo& d : p.shape) {
        want.push_back(d.value >= 0 ? absl::StrCat(d.value) : d.symbol);
      }
      for (py::ssize_t d = 0; d < a.ndim(); ++d) got.push_back(absl::StrCat(a.shape(d)));
      Throw(absl::InvalidArgumentError(absl::StrCat(
          "input '", p.name, "' must have shape [", absl::StrJoin(want, ", "), "] (rank ",
          p.shape.size(), "), got [", absl::StrJoin(got, ", "), "] (rank ", a.ndim(), ")")));
    }
  }

  // A string input: the elements of an ndarray of str ('U'), bytes ('S') or objects that are
  // str or bytes, copied as UTF-8 (the VM checks the bytes are UTF-8 when it binds them).
  static Tensor StringsFromArray(const ParamInfo& p, const py::array& a) {
    std::vector<int64_t> dims(a.shape(), a.shape() + a.ndim());
    const py::list items = a.attr("ravel")().attr("tolist")();
    std::vector<std::string> values;
    values.reserve(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      PyObject* item = items[i].ptr();
      if (PyUnicode_Check(item)) {
        Py_ssize_t size = 0;
        const char* utf8 = PyUnicode_AsUTF8AndSize(item, &size);
        if (utf8 == nullptr) {  // a lone surrogate has no UTF-8 form
          PyErr_Clear();
          Throw(absl::InvalidArgumentError(absl::StrCat("input '", p.name, "' element ", i,
                                                        " is a str that UTF-8 cannot encode")));
        }
        values.emplace_back(utf8, static_cast<size_t>(size));
      } else if (PyBytes_Check(item)) {
        values.emplace_back(PyBytes_AS_STRING(item), static_cast<size_t>(PyBytes_GET_SIZE(item)));
      } else {
        Throw(absl::InvalidArgumentError(absl::StrCat("input '", p.name, "' element ", i, " is ",
                                                      TypeName(item), ", not str or bytes")));
      }
    }
    return ValueOrThrow(StringTensor(dims, values));
  }

  // A tensor for one ndarray input: bound in place, or copied once by NumPy and then bound.
  Tensor TensorFor(const ParamInfo& p, const py::handle& key, const py::handle& value,
                   RunStats& stats) {
    if (!py::isinstance<py::array>(value)) {
      Throw(absl::InvalidArgumentError(absl::StrCat(
          "input '", p.name, "' must be a numpy.ndarray of ", DTypeDescription(p.dtype), ", got ",
          TypeName(value), " (use numpy.asarray(value, dtype=...))")));
    }
    py::array a = py::reinterpret_borrow<py::array>(value);
    const py::dtype dt = a.dtype();
    if (p.dtype == DType::kString) {
      const char kind = dt.kind();
      if (kind != 'U' && kind != 'S' && kind != 'O') {
        Throw(absl::InvalidArgumentError(
            absl::StrCat("input '", p.name,
                         "' is a string tensor: pass a numpy.ndarray of str, bytes or object "
                         "(str/bytes elements), got ",
                         py::str(py::handle(dt)).cast<std::string>())));
      }
    } else if (!DTypeMatches(dt, p.dtype)) {
      Throw(absl::InvalidArgumentError(absl::StrCat("input '", p.name, "' must be ",
                                                    DTypeDescription(p.dtype), ", got ",
                                                    py::str(py::handle(dt)).cast<std::string>())));
    }
    CheckShape(p, a);
    if (p.dtype == DType::kString) {
      ++stats.inputs_copied;
      return StringsFromArray(p, a);
    }
    const int flags = a.flags();
    const bool native = dt.byteorder() != '>';
    if ((flags & py::detail::npy_api::NPY_ARRAY_C_CONTIGUOUS_) == 0 ||
        (flags & py::detail::npy_api::NPY_ARRAY_ALIGNED_) == 0 || !native) {
      py::object copy_dtype = native ? py::object(dt) : dt.attr("newbyteorder")("=");
      a = py::reinterpret_steal<py::array>(py::module_::import("numpy")
                                               .attr("array")(a, copy_dtype, py::arg("order") = "C")
                                               .release());
      ++stats.inputs_copied;
    } else {
      ++stats.inputs_zero_copy;
    }
    if (key) PyDict_SetItem(bound_.ptr(), key.ptr(), a.ptr());
    return WrapArray(a, p.dtype, /*keep=*/true);
  }

  // A sequence input: a list of ndarrays (copied by SetInputValue).
  ObjectValue SequenceFor(const ParamInfo& p, const py::handle& key, const py::handle& value,
                          RunStats& stats) {
    if (!py::isinstance<py::list>(value) && !py::isinstance<py::tuple>(value)) {
      Throw(absl::InvalidArgumentError(
          absl::StrCat("input '", p.name, "' is a sequence: pass a list of numpy.ndarray, got ",
                       TypeName(value))));
    }
    ParamInfo elem = p;
    elem.kind = ObjectKind::kTensor;
    std::vector<Tensor> items;
    for (const py::handle& item : value) {
      items.push_back(TensorFor(elem, py::handle(), item, stats));
      if (p.dtype != DType::kString) {  // SetInputValue copies every element
        --stats.inputs_zero_copy;
        ++stats.inputs_copied;
      }
    }
    PyDict_SetItem(bound_.ptr(), key.ptr(), value.ptr());
    return ObjectValue::OfSequence(std::move(items));
  }

  void BindInputs(const FunctionInfo& info, const std::string& function, const py::dict& inputs,
                  RunStats& stats) {
    PyDict_Clear(bound_.ptr());
    std::vector<bool> given(info.inputs.size(), false);
    for (const auto& [key, value] : inputs) {
      if (!py::isinstance<py::str>(key)) {
        Throw(absl::InvalidArgumentError("input names must be str"));
      }
      const std::string name = key.cast<std::string>();
      size_t index = 0;
      while (index < info.inputs.size() && info.inputs[index].name != name) ++index;
      if (index == info.inputs.size()) {
        std::vector<std::string> names;
        for (const ParamInfo& p : info.inputs) names.push_back(p.name);
        Throw(absl::NotFoundError(absl::StrCat("function '", info.name, "' has no input named '",
                                               name,
                                               "'; its inputs are: ", absl::StrJoin(names, ", "))));
      }
      given[index] = true;
      const ParamInfo& p = info.inputs[index];
      if (p.kind == ObjectKind::kTensor) {
        ThrowIfError(vm_->SetInputZeroCopy(name, TensorFor(p, key, value, stats), function));
      } else if (p.kind == ObjectKind::kSequence) {
        ThrowIfError(vm_->SetInputValue(name, SequenceFor(p, key, value, stats), function));
      } else if (value.is_none()) {  // an empty optional
        ThrowIfError(vm_->SetInputValue(name, ObjectValue::EmptyOptional(p.elem_kind), function));
      } else {
        ObjectValue inner;
        if (p.elem_kind == ObjectKind::kSequence) {
          inner = SequenceFor(p, key, value, stats);
        } else {
          ParamInfo elem = p;
          elem.kind = ObjectKind::kTensor;
          inner = ObjectValue::OfTensor(TensorFor(elem, key, value, stats));
          PyDict_SetItem(bound_.ptr(), key.ptr(), value.ptr());
          if (p.dtype != DType::kString) {
            --stats.inputs_zero_copy;
            ++stats.inputs_copied;
          }
        }
        ThrowIfError(vm_->SetInputValue(name, ObjectValue::Some(std::move(inner)), function));
      }
    }
    std::vector<std::string> missing;
    for (size_t i = 0; i < given.size(); ++i) {
      if (!given[i]) missing.push_back(info.inputs[i].name);
    }
    if (!missing.empty()) {
      Throw(absl::InvalidArgumentError(absl::StrCat("missing input", missing.size() > 1 ? "s" : "",
                                                    " of function '", info.name,
                                                    "': ", absl::StrJoin(missing, ", "))));
    }
  }

  // A function's index and its output names as str objects (made once: outputs come back in
  // a fresh dict on every run).
  struct CachedFunction {
    int index = 0;
    std::vector<py::object> output_names;
  };
  const CachedFunction& Cached(const std::string& function) {
    auto it = functions_.find(function);
    if (it != functions_.end()) return it->second;
    CachedFunction c;
    c.index = exe_->Function(function);
    for (const ParamInfo& p : exe_->exe()->function(c.index).outputs) {
      c.output_names.push_back(py::str(p.name));
    }
    return functions_.emplace(function, std::move(c)).first->second;
  }

  std::shared_ptr<PyExecutable> exe_;
  std::unique_ptr<VirtualMachine> vm_;
  std::map<std::string, CachedFunction> functions_;
  CancellationToken cancel_;
  std::atomic<bool> busy_{false};
  RunStats last_stats_;
  py::dict bound_;  // name -> the array (or list) bound for the last run
};

void RaiseStatus(const std::string& code, const std::string& message) {
  absl::StatusCode c = absl::StatusCode::kUnknown;
  for (int i = 1; i <= 16; ++i) {
    if (absl::StatusCodeToString(static_cast<absl::StatusCode>(i)) == code)
      c = static_cast<absl::StatusCode>(i);
  }
  Throw(absl::Status(c, message));
}

}  // namespace
}  // namespace dynvm::python

constexpr const char* kRunDoc =
    R"(run(inputs=None, /, *, function="", timeout=None, on_emit=None, **inputs_by_name)

Runs `function` ("" = the default entry) and returns {output name: value}.

Inputs come as a dict (name -> numpy.ndarray) and/or keywords; every input of the function
must be given. An ndarray that is C-contiguous, aligned and of the input's dtype is bound
without a copy (the VM keeps a reference to it until the next run); any other layout is
copied once (last_run_stats counts both). A wrong dtype, rank or fixed dim, a missing or
unknown input or a value that is not an ndarray raises InvalidArgumentError (a ValueError;
NotFoundError, a KeyError, for an unknown name) and the VM stays usable.

A tensor output is an ndarray over the VM's output storage, owned by the array; a sequence is
a list of ndarrays, an empty optional None. bf16 comes and goes as uint16.

`timeout` (seconds) raises DeadlineExceededError (a TimeoutError) when passed; cancel() from
another thread raises CancelledError. `on_emit(stream, value)` is called on this thread for
each tensor the program emits (value is a copy). The GIL is released while the VM runs.)";

PYBIND11_MODULE(_dynvm, m) {
  using namespace dynvm::python;  // NOLINT(build/namespaces)
  m.doc() = "dynvm's C++ extension (use the `dynvm` package: docs/python.md)";
  m.attr("__version__") = DYNVM_VERSION;
  py::register_exception_translator([](std::exception_ptr p) {
    try {
      if (p) std::rethrow_exception(p);
    } catch (const StatusError& e) {
      SetPythonError(e.status);
    }
  });

  py::class_<TensorInfo>(m, "TensorInfo",
                         "An input or output of a function: name, dtype, kind and shape.")
      .def_readonly("name", &TensorInfo::name)
      .def_readonly("dtype", &TensorInfo::dtype,
                    "The numpy dtype exchanged (bf16 is numpy.uint16; strings are object)")
      .def_readonly("dtype_name", &TensorInfo::dtype_name, "dynvm's name: 'f32', 'bf16', ...")
      .def_readonly("kind", &TensorInfo::kind, "'tensor', 'sequence', 'optional' ...")
      .def_readonly("shape", &TensorInfo::shape,
                    "A tuple of int (fixed) and str (symbolic, e.g. 'batch'), or None")
      .def("__repr__", &TensorInfo::Repr);

  py::class_<RunStats>(m, "RunStats", "What the last run did (VirtualMachine.last_run_stats).")
      .def_readonly("inputs_zero_copy", &RunStats::inputs_zero_copy,
                    "Inputs bound over the caller's array memory, without a copy")
      .def_readonly("inputs_copied", &RunStats::inputs_copied,
                    "Inputs copied (not C-contiguous, misaligned, byte-swapped; sequences)")
      .def_readonly("loop_iterations", &RunStats::loop_iterations)
      .def_readonly("system_allocs", &RunStats::system_allocs,
                    "Calls into the system allocator during the run")
      .def_readonly("system_allocs_after_first_iteration",
                    &RunStats::system_allocs_after_first_iteration)
      .def("__repr__", [](const RunStats& s) {
        return absl::StrCat(
            "RunStats(inputs_zero_copy=", s.inputs_zero_copy, ", inputs_copied=", s.inputs_copied,
            ", loop_iterations=", s.loop_iterations, ", system_allocs=", s.system_allocs, ")");
      });

  py::class_<PyExecutable, std::shared_ptr<PyExecutable>>(
      m, "Executable",
      "A compiled, verified program: immutable and shared by every VirtualMachine and thread.")
      .def_property_readonly(
          "inputs", [](const PyExecutable& e) { return e.Params("", false); },
          "The default entry function's inputs (list of TensorInfo)")
      .def_property_readonly(
          "outputs", [](const PyExecutable& e) { return e.Params("", true); },
          "The default entry function's outputs (list of TensorInfo)")
      .def_property_readonly("functions", &PyExecutable::Functions,
                             "Names of the entry functions (callable with run(function=...))")
      .def(
          "signature",
          [](const PyExecutable& e, const std::string& f) {
            return py::make_tuple(e.Params(f, false), e.Params(f, true));
          },
          py::arg("function") = "", "(inputs, outputs) of `function` ('' = the default entry)")
      .def("bounds", &PyExecutable::Bounds, py::arg("function") = "",
           "The symbol upper bounds the function was compiled with")
      .def_property_readonly("weight_bytes",
                             [](const PyExecutable& e) { return e.exe()->weight_bytes(); })
      .def_property_readonly(
          "constant_bytes_copied",
          [](const PyExecutable& e) { return e.exe()->constant_bytes_copied(); },
          "Bytes of the constants' file held in private memory (constant_pages: the copy in 2 MB "
          "pages; a decompressed segment)")
      .def_property_readonly(
          "constant_bytes_mapped",
          [](const PyExecutable& e) { return e.exe()->constant_bytes_mapped(); },
          "Bytes of the constants' file read through its mapping (mapped; the tables the code "
          "only gathers rows from, left in the mapping within a copy)")
      .def("save", &PyExecutable::Save, py::arg("path"),
           "Writes the .dvm file (and the .dvw beside it when compiled with weights=...)")
      .def_property_readonly("report", &PyExecutable::report,
                             "vm-compile --report's text (memory plan, rewrites, passes, kernels); "
                             "empty for a loaded executable")
      .def_property_readonly("warnings", &PyExecutable::warnings,
                             "What the compile warned about (a bound naming nothing)")
      .def_property_readonly("ir", &PyExecutable::ir,
                             "The compiled IR with types and shapes (compile(..., dump_ir=True))");

  m.attr("DEFAULT_MEMORY_LIMIT") = dynvm::kDefaultMemoryLimit;
  m.attr("DEFAULT_MAX_ITERATIONS") = dynvm::kDefaultMaxLoopIterations;
  py::class_<PyVirtualMachine>(m, "_VirtualMachine")
      .def(py::init<std::shared_ptr<PyExecutable>, int, py::object, py::object>(),
           py::arg("executable"), py::arg("threads") = 1,
           py::arg("memory_limit") = dynvm::kDefaultMemoryLimit,
           py::arg("max_iterations") = dynvm::kDefaultMaxLoopIterations)
      .def("run", &PyVirtualMachine::Call, py::arg("inputs") = py::none(), py::pos_only(),
           py::kw_only(), py::arg("function") = "", py::arg("timeout") = py::none(),
           py::arg("on_emit") = py::none(), kRunDoc)
      .def("_run", &PyVirtualMachine::Run)
      .def("trim", &PyVirtualMachine::Trim,
           "Returns the VM's cached pool memory to the system (outputs and bound inputs stay).")
      .def("cancel", &PyVirtualMachine::Cancel,
           "Stops the run in progress (from any thread): it raises dynvm.CancelledError.")
      .def_property_readonly("running", &PyVirtualMachine::running, "Whether a run is in progress")
      .def_property_readonly("last_run_stats", &PyVirtualMachine::last_run_stats,
                             py::return_value_policy::copy, "RunStats of the last run")
      .def_property_readonly("memory_stats", &PyVirtualMachine::MemoryStats,
                             "The VM's memory pool statistics (dict)")
      .def_property_readonly("bound_inputs", &PyVirtualMachine::bound_inputs,
                             "The arrays bound for the last run (the caller's own when not copied)")
      .def_property_readonly("executable", &PyVirtualMachine::executable)
      .def("_time_cpp_runs", &PyVirtualMachine::TimeCppRuns);

  m.def("compile", &Compile, py::arg("model"), py::kw_only(), py::arg("bounds") = py::none(),
        py::arg("optimize") = true, py::arg("strip_debug") = false, py::arg("device") = "cpu",
        py::arg("weights") = py::none(), py::arg("compress") = false, py::arg("onnx_check") = false,
        py::arg("quantize_weights") = py::none(), py::arg("quantize_min_bytes") = py::none(),
        py::arg("quantize_block") = py::none(), py::arg("quantize_zero_points") = false,
        py::arg("disable_rewrites") = py::none(), py::arg("dump_ir") = false,
        py::arg("decode") = false, py::arg("quantize_accuracy_level") = py::none());
  m.def("load", &Load, py::arg("path"), py::kw_only(), py::arg("weights") = py::none(),
        py::arg("verify_weights_hash") = false, py::arg("constant_pages") = "auto");
  m.def("_raise_status", &RaiseStatus);
}
