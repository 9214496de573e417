#include "vm/virtual_machine.h"

#include <algorithm>
#include <limits>

#include "absl/container/inlined_vector.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "allocator/cuda_allocator.h"
#include "common/status_macros.h"
#include "isa/opcodes.h"
#include "kernels/strings.h"
#include "kernels/thread_pool.h"
#include "vm/executable_impl.h"
#include "vm/ops.h"
#include "vm/vm_impl.h"
#include "vm/vm_testing.h"

namespace dynvm {

VirtualMachine::Impl::Impl(std::shared_ptr<const Executable> e, const VmOptions& o)
    : executable(std::move(e)), exe(&executable->rep()), options(o) {}

absl::Status VirtualMachine::Impl::SetThreads(int n) {
  DYNVM_RETURN_IF_ERROR(ValidateThreadCount(n, "VmOptions::num_threads"));
  std::shared_ptr<ThreadPool> p;
  if (n > 1 && options.shared_thread_pool) {
    DYNVM_ASSIGN_OR_RETURN(p, ThreadPool::Shared(n));
  } else if (n > 1) {
    DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<ThreadPool> own, ThreadPool::Create(n));
    p = std::move(own);
  }
  thread_pool = std::move(p);
  ctx.set_num_threads(n);
  ctx.set_thread_pool(thread_pool.get());
  return absl::OkStatus();
}

absl::Status VirtualMachine::Impl::Init() {
  DYNVM_RETURN_IF_ERROR(SetThreads(options.num_threads));
  PoolAllocator::Options popts;
  popts.memory_limit = options.memory_limit;
  popts.reservation = options.reservation;
  pool = std::make_shared<PoolAllocator>(popts);
  ctx.set_allocator(pool.get(), pool);
  // One read-only storage over the constant segment per VM: its reference count is this VM's
  // alone (no contention between threads), and a tensor that escapes keeps the executable alive.
  std::shared_ptr<const Executable> keep = executable;
  const_storage =
      Storage::Wrap(Storage::Kind::kConstant, const_cast<uint8_t*>(exe->constant_segment),
                    static_cast<size_t>(exe->constant_segment_size), Device::kCPU,
                    [keep]() mutable { keep.reset(); });
  constants.reserve(exe->num_constants());
  for (int i = 0; i < exe->num_constants(); ++i) {
    const Executable::ConstantEntry& c = exe->constant(i);
    DYNVM_ASSIGN_OR_RETURN(Tensor t,
                           ConstantTensor(c, const_storage, [keep]() mutable { keep.reset(); }));
    constants.push_back(std::move(t));
  }
  const int nf = exe->num_functions();
  inputs.resize(nf);
  inputs_bound.resize(nf);
  outputs.resize(nf);
  output_buffers.resize(nf);
  outputs_valid.assign(nf, false);
  sites.resize(nf);
  for (int i = 0; i < nf; ++i) {
    const Executable::FunctionEntry& f = exe->function_entry(i);
    inputs[i].resize(f.num_object_params);
    inputs_bound[i].assign(f.num_object_params, false);
    sites[i].resize(f.num_sites);
  }
  in_buf.resize(exe->max_invoke_arity());
  out_buf.resize(exe->max_invoke_arity());
  device_in_buf.resize(exe->max_invoke_arity());
  return absl::OkStatus();
}

absl::StatusOr<Tensor> VirtualMachine::Impl::CopyInput(const Tensor& t) {
  // A string tensor's copy has its own bytes (docs/strings.md), in the pool.
  if (t.dtype() == DType::kString) return CopyStrings(*pool, pool, t);
  DYNVM_ASSIGN_OR_RETURN(Tensor c, Tensor::Allocate(*pool, t.dtype(), t.dims(), pool));
  DYNVM_RETURN_IF_ERROR(ops::Copy(t, c));
  return c;
}

absl::StatusOr<DeviceContext*> VirtualMachine::Impl::DeviceFor(Device device) {
  if (device != Device::kCUDA) {
    return absl::InvalidArgumentError(absl::StrCat("no device context for ", DeviceName(device)));
  }
  if (cuda == nullptr) {
    DeviceContextOptions o;
    o.memory_limit = options.device_memory_limit;
    DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<DeviceContext> c, CreateDeviceContext(device, o));
    cuda = std::move(c);
    ctx.set_device_context(cuda.get());
  }
  return cuda.get();
}

absl::Status VirtualMachine::Impl::PrepareDeviceInvoke(const Executable::KernelEntry& k,
                                                       uint32_t n) {
  DYNVM_ASSIGN_OR_RETURN(DeviceContext * d, DeviceFor(k.spec.device));
  for (uint32_t j = 0; j < n; ++j) {
    const Tensor* t = in_buf[j];
    if (t == nullptr || !t->defined() || t->device() == k.spec.device) continue;
    if (t->device() == Device::kCPU && k.kernel->ReadsInputOnHost(static_cast<int>(j))) continue;
    if (t->storage().get() == const_storage.get()) {
      if (!device_constants) {
        DYNVM_ASSIGN_OR_RETURN(StorageRef st, executable->DeviceConstants(*d));
        device_constants = std::move(st);
      }
      DYNVM_ASSIGN_OR_RETURN(Tensor v, Tensor::View(device_constants, t->byte_offset(), t->dtype(),
                                                    t->dims(), t->strides()));
      device_in_buf[j] = std::move(v);
    } else {
      DYNVM_ASSIGN_OR_RETURN(Tensor c, Tensor::Allocate((d)->allocator(), t->dtype(), t->dims(),
                                                        (d)->allocator_ref()));
      DYNVM_RETURN_IF_ERROR(ops::Copy(*t, c, d));
      device_in_buf[j] = std::move(c);
    }
    in_buf[j] = &device_in_buf[j];
    moved_inputs = true;
  }
  return absl::OkStatus();
}

absl::Status VirtualMachine::Impl::PrepareHostInvoke(uint32_t n, uint32_t n_out) {
  for (uint32_t j = 0; j < n_out; ++j) {
    const Tensor* t = out_buf[j];
    if (t != nullptr && t->defined() && t->device() != Device::kCPU) {
      return absl::FailedPreconditionError(absl::StrCat("output ", j, " is on the ",
                                                        DeviceName(t->device()),
                                                        "; a host kernel writes host tensors"));
    }
  }
  for (uint32_t j = 0; j < n; ++j) {
    const Tensor* t = in_buf[j];
    if (t == nullptr || !t->defined() || t->device() == Device::kCPU) continue;
    DYNVM_ASSIGN_OR_RETURN(Tensor c, Tensor::Allocate(*pool, t->dtype(), t->dims(), pool));
    DYNVM_RETURN_IF_ERROR(ops::Copy(*t, c, cuda.get()));
    device_in_buf[j] = std::move(c);
    in_buf[j] = &device_in_buf[j];
    moved_inputs = true;
  }
  return absl::OkStatus();
}

Frame& VirtualMachine::Impl::FrameAt(int depth, const Executable::FunctionEntry& f) {
  if (static_cast<int>(frames.size()) <= depth) frames.resize(depth + 1);
  if (!frames[depth]) frames[depth] = std::make_unique<Frame>();
  Frame& fr = *frames[depth];
  if (fr.s.size() < f.num_scalars) fr.s.resize(f.num_scalars);
  if (fr.o.size() < f.num_objects) fr.o.resize(f.num_objects);
  max_depth_used = std::max(max_depth_used, depth);
  return fr;
}

int64_t VirtualMachine::Impl::SystemAllocs() const {
  int64_t n = pool->stats().system_allocs;
  if (cuda != nullptr) n += cuda->allocator().stats().system_allocs;
  return n;
}

absl::Status VirtualMachine::Impl::Annotate(const absl::Status& s, int function,
                                            uint32_t pc) const {
  const Executable::FunctionEntry& f = exe->function_entry(function);
  const auto op = static_cast<isa::Opcode>(f.code[pc] & 0xFF);
  std::string where =
      absl::StrCat("function '", f.info.name, "' pc ", pc, " (", isa::GetOpcodeInfo(op).mnemonic);
  absl::string_view node = executable->SourceNode(function, pc);
  if (!node.empty()) absl::StrAppend(&where, ", node '", node, "'");
  return absl::Status(s.code(), absl::StrCat(where, "): ", s.message()));
}

// Bad input that passes the signature (its dims are free: symbolic or unknown) fails deep in
// the graph, at a node the caller never wrote: an audio chunk too short for a convolution, an
// image too small for a network's strides. The error then also names every input of free
// shape with the shape it had in this run, so that it points back at what the caller passed.
// Inputs whose dims are all fixed were checked at binding, and are left out.
absl::Status VirtualMachine::Impl::WithFreeInputShapes(const absl::Status& s, int function) const {
  if (s.code() != absl::StatusCode::kInvalidArgument) return s;
  const Executable::FunctionEntry& f = exe->function_entry(function);
  std::string shapes;
  for (size_t i = 0; i < f.info.inputs.size(); ++i) {
    const ParamInfo& p = f.info.inputs[i];
    if (p.kind != ObjectKind::kTensor || !inputs_bound[function][i]) continue;
    const bool free = !p.has_shape || std::any_of(p.shape.begin(), p.shape.end(),
                                                  [](const DimInfo& d) { return d.value < 0; });
    if (!free) continue;
    absl::StrAppend(&shapes, shapes.empty() ? "" : ", ", "input '", p.name, "' ",
                    inputs[function][i].t.DebugString());
  }
  if (shapes.empty()) return s;
  return absl::Status(
      s.code(), absl::StrCat(s.message(), " [this run's inputs of free shape: ", shapes, "]"));
}

absl::Status VirtualMachine::Impl::CheckInterrupts() const {
  if (cancel != nullptr && cancel->cancelled()) return absl::CancelledError("run cancelled");
  if (deadline != absl::InfiniteFuture() && absl::Now() > deadline) {
    return absl::DeadlineExceededError("run passed its deadline");
  }
  if (poll != nullptr) return (*poll)();
  return absl::OkStatus();
}

namespace {

// The values of the input symbols seen so far in one run (few: a linear search, and no heap
// allocation up to eight of them).
using SymbolValues = absl::InlinedVector<std::pair<absl::string_view, int64_t>, 8>;

absl::Status CheckShape(const ParamInfo& p, const Tensor& t, SymbolValues& symbols,
                        const std::vector<std::pair<std::string, int64_t>>& bounds) {
  if (!p.has_shape) return absl::OkStatus();
  if (t.rank() != static_cast<int>(p.shape.size())) {
    return absl::InvalidArgumentError(absl::StrCat("input '", p.name, "' must have rank ",
                                                   p.shape.size(), ", got ", t.DebugString()));
  }
  for (size_t i = 0; i < p.shape.size(); ++i) {
    const DimInfo& d = p.shape[i];
    const int64_t got = t.dim(static_cast<int>(i));
    if (d.value >= 0) {
      if (got != d.value) {
        return absl::InvalidArgumentError(absl::StrCat("input '", p.name, "' dim ", i, " must be ",
                                                       d.value, ", got ", t.DebugString()));
      }
      continue;
    }
    auto it = std::find_if(symbols.begin(), symbols.end(),
                           [&](const auto& e) { return e.first == d.symbol; });
    if (it == symbols.end()) {
      symbols.emplace_back(d.symbol, got);
    } else if (it->second != got) {
      return absl::InvalidArgumentError(absl::StrCat("input '", p.name, "' dim ", i, " is symbol '",
                                                     d.symbol, "' = ", got,
                                                     ", but another input has it = ", it->second));
    }
    for (const auto& [name, bound] : bounds) {
      if (name == d.symbol && got > bound) {
        return absl::InvalidArgumentError(absl::StrCat("symbol '", d.symbol, "' = ", got,
                                                       " exceeds its declared bound ", bound,
                                                       " (input '", p.name, "')"));
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VirtualMachine::Impl::RunFunction(int function, const RunOptions& run,
                                               int64_t* iterations) {
  const Executable::FunctionEntry& f = exe->function_entry(function);
  if (!f.info.is_entry) {
    return absl::InvalidArgumentError(
        absl::StrCat("function '", f.info.name, "' has no signature: it is not an entry"));
  }
  // Whatever this run returns, the previous run's outputs are gone: a run refused before it
  // starts (an input missing or of the wrong shape) must not leave them readable as its own.
  outputs_valid[function] = false;
  outputs[function].clear();
  SymbolValues symbols;
  for (size_t i = 0; i < f.info.inputs.size(); ++i) {
    const ParamInfo& p = f.info.inputs[i];
    if (!inputs_bound[function][i]) {
      return absl::FailedPreconditionError(
          absl::StrCat("input '", p.name, "' of function '", f.info.name, "' is not set"));
    }
    const Object& o = inputs[function][i];
    if (p.kind == ObjectKind::kTensor) {
      DYNVM_RETURN_IF_ERROR(CheckShape(p, o.t, symbols, f.info.bounds));
      continue;
    }
    // Sequence and optional contents: rank and fixed dims only (elements may differ).
    SymbolValues own;
    auto check = [&](const Tensor& t) {
      own.clear();
      return CheckShape(p, t, own, {});
    };
    const bool seq = p.kind == ObjectKind::kSequence ||
                     (p.kind == ObjectKind::kOptional && p.elem_kind == ObjectKind::kSequence);
    if (p.kind == ObjectKind::kOptional && !o.has) continue;
    if (seq) {
      for (const Tensor& t : o.seq->items) {
        DYNVM_RETURN_IF_ERROR(check(t));
      }
    } else
      DYNVM_RETURN_IF_ERROR(check(o.t));
  }
  cancel = run.cancel;
  poll = run.poll ? &run.poll : nullptr;
  deadline = run.deadline;
  on_emit = run.on_emit ? &run.on_emit : nullptr;
  iterations_left = IterationBudget();
  DYNVM_RETURN_IF_ERROR(CheckInterrupts());
  Frame& frame = FrameAt(0, f);
  for (uint32_t i = 0; i < f.num_object_params; ++i) frame.o[i] = inputs[function][i];
  run_output_buffers = output_buffers[function].empty() ? nullptr : &output_buffers[function];
  last_output_copies = 0;
  ReturnTarget target;
  target.outputs = &outputs[function];
  run_start_allocs = SystemAllocs();
  ctx.BeginRun();  // sites' shape counts restart: results depend on this run's inputs only
  first_iteration_allocs = -1;
  loop_nesting = 0;
  steady_state_allocs = 0;
  any_first_iteration = false;
  absl::Status s;
  if (run.profiler == nullptr) {
    s = Execute(function, 0, target);
  } else {
    profiler = run.profiler;
    profiler->BeginRun(*executable, function);
    SampleMemory();
    ctx.set_parallel_log(profiler->parallel_log());  // ranges' threads and times
    s = ExecuteProfiled(function, 0, target);
    ctx.set_parallel_log(nullptr);
  }
  // Device work still queued finishes within the run, and its errors are this run's.
  if (s.ok() && cuda != nullptr) s = cuda->Synchronize();
  if (profiler != nullptr) {
    profiler->EndRun();
    profiler = nullptr;
  }
  const int64_t end_allocs = SystemAllocs();
  last_run_memory.system_allocs = end_allocs - run_start_allocs;
  // A run that failed inside a loop: its steady state so far.
  if (loop_nesting > 0 && first_iteration_allocs >= 0) {
    steady_state_allocs += end_allocs - first_iteration_allocs;
    any_first_iteration = true;
  }
  last_run_memory.first_iteration_ended = any_first_iteration;
  last_run_memory.system_allocs_after_first_iteration = steady_state_allocs;
  *iterations = IterationBudget() - iterations_left;
  cancel = nullptr;
  on_emit = nullptr;
  run_output_buffers = nullptr;
  if (!s.ok()) {
    // Unwind: release every frame's objects (callers of the failing frame still hold theirs).
    for (int d = 0; d <= max_depth_used && d < static_cast<int>(frames.size()); ++d) {
      if (frames[d]) {
        for (Object& obj : frames[d]->o) obj.Clear();
      }
    }
    outputs[function].clear();
    TrimToRecentPeaks();
    return WithFreeInputShapes(s, function);
  }
  outputs_valid[function] = true;
  TrimToRecentPeaks();
  return absl::OkStatus();
}

void VirtualMachine::Impl::TrimToRecentPeaks() {
  if (options.trim_window <= 0) return;
  if (recent_peaks.size() != static_cast<size_t>(options.trim_window)) {
    recent_peaks.assign(options.trim_window, 0);
  }
  recent_peaks[runs_seen++ % recent_peaks.size()] = pool->TakeWindowPeak();
  const int64_t peak = *std::max_element(recent_peaks.begin(), recent_peaks.end());
  pool->TrimTo(2 * peak);
}

// ---- public API ----

VirtualMachine::~VirtualMachine() = default;

absl::StatusOr<std::unique_ptr<VirtualMachine>> VirtualMachine::Create(
    std::shared_ptr<const Executable> executable, const VmOptions& options) {
  if (executable == nullptr)
    return absl::InvalidArgumentError("VirtualMachine::Create: null executable");
  std::unique_ptr<VirtualMachine> vm(new VirtualMachine());
  vm->exe_ = executable;
  vm->impl_ = std::make_unique<Impl>(std::move(executable), options);
  DYNVM_RETURN_IF_ERROR(vm->impl_->Init());
  return vm;
}

absl::StatusOr<std::vector<std::string>> VirtualMachine::input_names(FunctionRef function) const {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  std::vector<std::string> names;
  for (const ParamInfo& p : exe_->function(f).inputs) names.push_back(p.name);
  return names;
}

absl::StatusOr<std::vector<std::string>> VirtualMachine::output_names(FunctionRef function) const {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  std::vector<std::string> names;
  for (const ParamInfo& p : exe_->function(f).outputs) names.push_back(p.name);
  return names;
}

namespace {

absl::StatusOr<int> FindParam(const std::vector<ParamInfo>& params, absl::string_view name,
                              absl::string_view what, absl::string_view function) {
  std::vector<std::string> names;
  for (size_t i = 0; i < params.size(); ++i) {
    if (params[i].name == name) return static_cast<int>(i);
    names.push_back(params[i].name);
  }
  return absl::NotFoundError(absl::StrCat("function '", function, "' has no ", what, " named '",
                                          name, "'; its ", what,
                                          "s are: ", absl::StrJoin(names, ", ")));
}

}  // namespace

absl::Status VirtualMachine::SetInput(absl::string_view name, const Tensor& value,
                                      FunctionRef function) {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  DYNVM_ASSIGN_OR_RETURN(
      int index, FindParam(exe_->function(f).inputs, name, "input", exe_->function(f).name));
  return SetInput(index, value, function);
}

namespace {

absl::Status CheckInputValue(const FunctionInfo& info, int index, const Tensor& value) {
  if (index < 0 || index >= static_cast<int>(info.inputs.size())) {
    return absl::OutOfRangeError(absl::StrCat("input index ", index, " out of range: function '",
                                              info.name, "' has ", info.inputs.size(), " inputs"));
  }
  const ParamInfo& p = info.inputs[index];
  // The verifier accepts sequence and optional inputs, but a tensor bound to one would leave
  // the register's sequence (or its "has" flag) unset for the code that reads it.
  if (p.kind != ObjectKind::kTensor) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", p.name, "' of function '", info.name,
                     "' is not a tensor; only tensor inputs can be bound"));
  }
  if (!value.defined())
    return absl::InvalidArgumentError(absl::StrCat("input '", p.name, "': empty tensor"));
  if (value.dtype() != p.dtype) {
    return absl::InvalidArgumentError(absl::StrCat(
        "input '", p.name, "' must be ", DTypeName(p.dtype), ", got ", value.DebugString()));
  }
  if (value.device() != Device::kCPU) {
    return absl::InvalidArgumentError(absl::StrCat("input '", p.name, "' must be on the CPU"));
  }
  if (value.dtype() == DType::kString) {
    return ValidateStrings(value, absl::StrCat("input '", p.name, "'"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status VirtualMachine::SetInput(int index, const Tensor& value, FunctionRef function) {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  DYNVM_RETURN_IF_ERROR(CheckInputValue(exe_->function(f), index, value));
  DYNVM_ASSIGN_OR_RETURN(Tensor copy, impl_->CopyInput(value));
  Object& o = impl_->inputs[f][index];
  o.Clear();
  o.t = std::move(copy);
  impl_->inputs_bound[f][index] = true;
  return absl::OkStatus();
}

absl::Status VirtualMachine::SetInputZeroCopy(absl::string_view name, const Tensor& value,
                                              FunctionRef function) {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  DYNVM_ASSIGN_OR_RETURN(
      int index, FindParam(exe_->function(f).inputs, name, "input", exe_->function(f).name));
  DYNVM_RETURN_IF_ERROR(CheckInputValue(exe_->function(f), index, value));
  if (reinterpret_cast<uintptr_t>(value.raw_data()) %
          static_cast<uintptr_t>(DTypeSize(value.dtype())) !=
      0) {
    return absl::InvalidArgumentError(
        absl::StrCat("input '", name, "': data is not aligned to its ", DTypeSize(value.dtype()),
                     "-byte elements; use SetInput to copy"));
  }
  Object& o = impl_->inputs[f][index];
  o.Clear();
  o.t = value;
  impl_->inputs_bound[f][index] = true;
  return absl::OkStatus();
}

absl::Status VirtualMachine::SetOutputBuffer(absl::string_view name, const Tensor& buffer,
                                             FunctionRef function) {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  const FunctionInfo& info = exe_->function(f);
  DYNVM_ASSIGN_OR_RETURN(int index, FindParam(info.outputs, name, "output", info.name));
  const ParamInfo& p = info.outputs[index];
  std::vector<Tensor>& bufs = impl_->output_buffers[f];
  if (!buffer.defined()) {
    if (!bufs.empty()) bufs[index] = Tensor();
    bool any = false;
    for (const Tensor& t : bufs) any |= t.defined();
    if (!any) bufs.clear();
    return absl::OkStatus();
  }
  const std::string what = absl::StrCat("output buffer for '", p.name, "'");
  if (p.kind != ObjectKind::kTensor) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": the output is not a tensor"));
  }
  if (p.dtype == DType::kString) {  // its bytes live with it (docs/strings.md)
    return absl::InvalidArgumentError(absl::StrCat(what, ": a string output cannot be bound"));
  }
  if (buffer.dtype() != p.dtype) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, " must be ", DTypeName(p.dtype), ", got ", buffer.DebugString()));
  }
  if (buffer.device() != Device::kCPU)
    return absl::InvalidArgumentError(absl::StrCat(what, " must be on the CPU"));
  if (!buffer.is_contiguous())
    return absl::InvalidArgumentError(absl::StrCat(what, " must be contiguous"));
  if (reinterpret_cast<uintptr_t>(buffer.raw_data()) %
          static_cast<uintptr_t>(DTypeSize(buffer.dtype())) !=
      0) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": data is not aligned to its ",
                                                   DTypeSize(buffer.dtype()), "-byte elements"));
  }
  if (p.has_shape) {
    bool ok = buffer.rank() == static_cast<int>(p.shape.size());
    for (size_t i = 0; ok && i < p.shape.size(); ++i) {
      ok = p.shape[i].value < 0 || p.shape[i].value == buffer.dim(static_cast<int>(i));
    }
    if (!ok) {
      std::vector<std::string> dims;
      for (const DimInfo& d : p.shape)
        dims.push_back(d.value >= 0 ? absl::StrCat(d.value) : d.symbol);
      return absl::InvalidArgumentError(absl::StrCat(
          what, " must have shape [", absl::StrJoin(dims, ","), "], got ", buffer.DebugString()));
    }
  }
  // A writable storage over the caller's bytes that keeps the caller's storage alive.
  StorageRef keep = buffer.storage();
  StorageRef st =
      Storage::Wrap(Storage::Kind::kOutput, buffer.raw_data(), static_cast<size_t>(buffer.nbytes()),
                    Device::kCPU, [keep]() mutable { keep.Reset(); });
  absl::StatusOr<Tensor> view = Tensor::View(st, 0, buffer.dtype(), buffer.dims());
  if (!view.ok()) return view.status();
  if (bufs.empty()) bufs.resize(info.outputs.size());
  bufs[index] = *std::move(view);
  return absl::OkStatus();
}

int VirtualMachine::last_run_output_copies() const { return impl_->last_output_copies; }

const Tensor* VirtualMachine::Impl::OutputBufferAt(const Executable::FunctionEntry& f,
                                                   uint32_t pc) const {
  auto it = std::lower_bound(f.output_allocs.begin(), f.output_allocs.end(),
                             std::make_pair(pc, uint32_t{0}));
  if (it == f.output_allocs.end() || it->first != pc) return nullptr;
  const Tensor& b = (*run_output_buffers)[it->second];
  return b.defined() ? &b : nullptr;
}

absl::Status VirtualMachine::Impl::FillOutputBuffers(const FunctionInfo& info,
                                                     std::vector<Object>& outs) {
  const std::vector<Tensor>& bufs = *run_output_buffers;
  for (size_t k = 0; k < outs.size() && k < bufs.size(); ++k) {
    if (!bufs[k].defined() || !outs[k].t.defined()) continue;
    Tensor& out = outs[k].t;
    if (out.raw_data() == bufs[k].raw_data() && out.dims() == bufs[k].dims() &&
        out.dtype() == bufs[k].dtype() && out.is_contiguous()) {
      out = bufs[k];  // written in place
      continue;
    }
    if (out.dtype() != bufs[k].dtype() || out.dims() != bufs[k].dims()) {
      return absl::InvalidArgumentError(absl::StrCat("output '", info.outputs[k].name, "' is ",
                                                     out.DebugString(), ", its bound buffer is ",
                                                     bufs[k].DebugString()));
    }
    Tensor dst = bufs[k];
    DYNVM_RETURN_IF_ERROR(ops::Copy(out, dst, cuda.get()));
    out = std::move(dst);
    ++last_output_copies;
  }
  return absl::OkStatus();
}

absl::StatusOr<int> VirtualMachine::Resolve(const FunctionRef& function) const {
  if (!function.is_handle()) return exe_->FindFunction(function.name());
  const FunctionHandle& h = function.handle();
  if (h.executable() != exe_.get() || h.index() < 0 || h.index() >= exe_->num_functions()) {
    return absl::InvalidArgumentError(
        "the function handle was resolved by another executable than this VM's");
  }
  return h.index();
}

absl::Status VirtualMachine::Run(const RunOptions& options) {
  DYNVM_ASSIGN_OR_RETURN(int f, options.handle.valid() ? Resolve(options.handle)
                                                       : exe_->FindFunction(options.function));
  return impl_->RunFunction(f, options, &last_iterations_);
}

absl::StatusOr<std::vector<Tensor>> VirtualMachine::GetOutputs(FunctionRef function) const {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  if (!impl_->outputs_valid[f]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "function '", exe_->function(f).name, "' has no outputs: it has not run successfully"));
  }
  std::vector<Tensor> tensors;
  const FunctionInfo& info = exe_->function(f);
  for (size_t i = 0; i < impl_->outputs[f].size(); ++i) {
    if (i < info.outputs.size() && info.outputs[i].kind != ObjectKind::kTensor) {
      return absl::InvalidArgumentError(absl::StrCat("output '", info.outputs[i].name,
                                                     "' of function '", info.name,
                                                     "' is not a tensor; use GetOutputValue"));
    }
    tensors.push_back(impl_->outputs[f][i].t);
  }
  return tensors;
}

absl::StatusOr<Tensor> VirtualMachine::GetOutput(int index, FunctionRef function) const {
  DYNVM_ASSIGN_OR_RETURN(ObjectValue v, GetOutputValue(index, function));
  if (v.kind != ObjectKind::kTensor) {
    return absl::InvalidArgumentError(absl::StrCat("output ", index, " is not a tensor (",
                                                   v.DebugString(), "); use GetOutputValue"));
  }
  return v.tensor;
}

absl::StatusOr<ObjectValue> VirtualMachine::GetOutputValue(int index, FunctionRef function) const {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  const FunctionInfo& info = exe_->function(f);
  if (!impl_->outputs_valid[f]) {
    return absl::FailedPreconditionError(
        absl::StrCat("function '", info.name, "' has no outputs: it has not run successfully"));
  }
  const std::vector<Object>& outs = impl_->outputs[f];
  if (index < 0 || index >= static_cast<int>(outs.size()) ||
      index >= static_cast<int>(info.outputs.size())) {
    return absl::OutOfRangeError(
        absl::StrCat("output index ", index, " out of range (", outs.size(), " outputs)"));
  }
  const ParamInfo& p = info.outputs[index];
  const Object& o = outs[index];
  ObjectValue v;
  v.kind = p.kind;
  v.elem_kind = p.elem_kind;
  const bool seq = p.kind == ObjectKind::kSequence ||
                   (p.kind == ObjectKind::kOptional && p.elem_kind == ObjectKind::kSequence);
  if (p.kind == ObjectKind::kOptional) v.has_value = o.has;
  if (p.kind == ObjectKind::kOptional && !o.has) return v;
  if (seq) {
    if (o.seq) v.sequence = o.seq->items;
  } else {
    v.tensor = o.t;
  }
  return v;
}

absl::StatusOr<ObjectValue> VirtualMachine::GetOutputValue(absl::string_view name,
                                                           FunctionRef function) const {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  DYNVM_ASSIGN_OR_RETURN(
      int index, FindParam(exe_->function(f).outputs, name, "output", exe_->function(f).name));
  return GetOutputValue(index, function);
}

absl::Status VirtualMachine::SetInputValue(absl::string_view name, const ObjectValue& value,
                                           FunctionRef function) {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  DYNVM_ASSIGN_OR_RETURN(
      int index, FindParam(exe_->function(f).inputs, name, "input", exe_->function(f).name));
  return SetInputValue(index, value, function);
}

absl::Status VirtualMachine::SetInputValue(int index, const ObjectValue& value,
                                           FunctionRef function) {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  const FunctionInfo& info = exe_->function(f);
  if (index < 0 || index >= static_cast<int>(info.inputs.size())) {
    return absl::OutOfRangeError(absl::StrCat("input index ", index, " out of range: function '",
                                              info.name, "' has ", info.inputs.size(), " inputs"));
  }
  const ParamInfo& p = info.inputs[index];
  if (p.kind == ObjectKind::kTensor) {
    if (value.kind != ObjectKind::kTensor) {
      return absl::InvalidArgumentError(
          absl::StrCat("input '", p.name, "' is a tensor, got ", value.DebugString()));
    }
    return SetInput(index, value.tensor, function);
  }
  if (value.kind != p.kind || (p.kind == ObjectKind::kOptional && value.elem_kind != p.elem_kind)) {
    const char* want = p.kind == ObjectKind::kSequence        ? "a sequence"
                       : p.elem_kind == ObjectKind::kSequence ? "an optional sequence"
                                                              : "an optional tensor";
    return absl::InvalidArgumentError(absl::StrCat("input '", p.name, "' of function '", info.name,
                                                   "' is ", want, ", got ", value.DebugString()));
  }
  auto copy = [&](const Tensor& t) -> absl::StatusOr<Tensor> {
    if (!t.defined())
      return absl::InvalidArgumentError(absl::StrCat("input '", p.name, "': empty tensor"));
    if (t.dtype() != p.dtype) {
      return absl::InvalidArgumentError(absl::StrCat(
          "input '", p.name, "' holds ", DTypeName(p.dtype), " tensors, got ", t.DebugString()));
    }
    if (t.device() != Device::kCPU) {
      return absl::InvalidArgumentError(absl::StrCat("input '", p.name, "' must be on the CPU"));
    }
    if (t.dtype() == DType::kString) {
      DYNVM_RETURN_IF_ERROR(ValidateStrings(t, absl::StrCat("input '", p.name, "'")));
    }
    return impl_->CopyInput(t);
  };
  Object o;
  const bool seq = p.kind == ObjectKind::kSequence || p.elem_kind == ObjectKind::kSequence;
  if (p.kind == ObjectKind::kOptional) o.has = value.has_value;
  if (p.kind == ObjectKind::kSequence || o.has) {
    if (seq) {
      o.seq = std::make_shared<Sequence>();
      for (const Tensor& t : value.sequence) {
        DYNVM_ASSIGN_OR_RETURN(Tensor c, copy(t));
        o.seq->items.push_back(std::move(c));
      }
    } else {
      DYNVM_ASSIGN_OR_RETURN(Tensor c, copy(value.tensor));
      o.t = std::move(c);
    }
  }
  impl_->inputs[f][index] = std::move(o);
  impl_->inputs_bound[f][index] = true;
  return absl::OkStatus();
}

ObjectValue ObjectValue::OfTensor(Tensor t) {
  ObjectValue v;
  v.tensor = std::move(t);
  return v;
}

ObjectValue ObjectValue::OfSequence(std::vector<Tensor> items) {
  ObjectValue v;
  v.kind = ObjectKind::kSequence;
  v.sequence = std::move(items);
  return v;
}

ObjectValue ObjectValue::EmptyOptional(ObjectKind elem_kind) {
  ObjectValue v;
  v.kind = ObjectKind::kOptional;
  v.elem_kind = elem_kind;
  v.has_value = false;
  return v;
}

ObjectValue ObjectValue::Some(ObjectValue inner) {
  ObjectValue v;
  v.kind = ObjectKind::kOptional;
  v.elem_kind = inner.kind == ObjectKind::kSequence ? ObjectKind::kSequence : ObjectKind::kTensor;
  v.tensor = std::move(inner.tensor);
  v.sequence = std::move(inner.sequence);
  return v;
}

std::string ObjectValue::DebugString() const {
  auto seq = [](const std::vector<Tensor>& items) {
    std::string s = "sequence[";
    for (size_t i = 0; i < items.size(); ++i)
      absl::StrAppend(&s, i ? ", " : "", items[i].DebugString());
    return absl::StrCat(s, "]");
  };
  switch (kind) {
    case ObjectKind::kSequence:
      return seq(sequence);
    case ObjectKind::kOptional:
      if (!has_value)
        return elem_kind == ObjectKind::kSequence ? "optional<sequence>(none)"
                                                  : "optional<tensor>(none)";
      return absl::StrCat("optional(",
                          elem_kind == ObjectKind::kSequence ? seq(sequence) : tensor.DebugString(),
                          ")");
    default:
      return tensor.defined() ? tensor.DebugString() : "tensor(empty)";
  }
}

absl::StatusOr<Tensor> VirtualMachine::GetOutput(absl::string_view name,
                                                 FunctionRef function) const {
  DYNVM_ASSIGN_OR_RETURN(int f, Resolve(function));
  DYNVM_ASSIGN_OR_RETURN(
      int index, FindParam(exe_->function(f).outputs, name, "output", exe_->function(f).name));
  return GetOutput(index, function);
}

AllocatorStats VirtualMachine::memory_stats() const { return impl_->pool->stats(); }
RunMemoryStats VirtualMachine::last_run_memory() const { return impl_->last_run_memory; }
AllocatorStats VirtualMachine::device_memory_stats() const {
  return impl_->cuda != nullptr ? impl_->cuda->allocator().stats() : AllocatorStats{};
}
void VirtualMachine::Trim() {
  for (auto& fs : impl_->sites) {
    for (auto& site : fs) {
      site.workspace.Reset();
      site.device_workspace.Reset();
    }
  }
  impl_->pool->Trim();
  // Blocks still read by queued device work must not reach cudaFree before it is done.
  if (impl_->cuda != nullptr && impl_->cuda->Synchronize().ok()) impl_->cuda->allocator().Trim();
}

absl::StatusOr<Tensor> VirtualMachine::ToHost(const Tensor& t) const {
  if (!t.defined() || t.device() == Device::kCPU) return t;
  if (impl_->cuda == nullptr || impl_->cuda->device() != t.device()) {
    return absl::FailedPreconditionError(
        absl::StrCat("ToHost: a ", DeviceName(t.device()), " tensor this VM did not make"));
  }
  DYNVM_ASSIGN_OR_RETURN(Tensor host,
                         Tensor::Allocate(*impl_->pool, t.dtype(), t.dims(), impl_->pool));
  DYNVM_RETURN_IF_ERROR(impl_->cuda->Copy(t, host));
  return host;
}
absl::Status VirtualMachine::set_num_threads(int n) {
  DYNVM_RETURN_IF_ERROR(impl_->SetThreads(n));
  impl_->options.num_threads = n;
  return absl::OkStatus();
}

namespace testing {
void FailNthAllocation(VirtualMachine& vm, int64_t n) {
  VmAccess::impl(vm).pool->FailNthAllocation(n);
}
}  // namespace testing

}  // namespace dynvm
