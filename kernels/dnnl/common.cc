#include "kernels/dnnl/common.h"

#include <cstdlib>
#include <cstring>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "kernels/cpu/elementwise.h"
#include "kernels/cpu/qgemv.h"
#include "kernels/reference/common.h"

// The OpenMP runtime libdnnl was built with (libgomp), declared here rather than through a
// compiler's omp.h so that another compiler's OpenMP cannot shadow it.
extern "C" {
int omp_get_max_threads(void);
void omp_set_num_threads(int num_threads);
}

namespace dynvm::onednn {

absl::Status FromDnnl(dnnl_status_t status, absl::string_view what) {
  switch (status) {
    case dnnl_success:
      return absl::OkStatus();
    case dnnl_out_of_memory:
      return absl::ResourceExhaustedError(absl::StrCat("oneDNN: out of memory: ", what));
    case dnnl_unimplemented:
    case dnnl_invalid_arguments:
      return absl::UnimplementedError(absl::StrCat("oneDNN: ", what));
    default:
      return absl::InternalError(
          absl::StrCat("oneDNN error ", static_cast<int>(status), ": ", what));
  }
}

int PrimitiveCacheCapacity() {
  // oneDNN keeps every primitive it creates, JIT code included (hundreds of KB each for an
  // encoder's products), in one process-wide cache of 1024 entries by default: a host that
  // makes a VM per call over varied shapes grew by hundreds of MB (docs/trust.md, "Memory").
  // dynvm bounds it at kDefaultPrimitiveCacheCapacity entries unless
  // DYNVM_DNNL_PRIMITIVE_CACHE_CAPACITY (0..65536) says otherwise; oneDNN's own
  // ONEDNN_PRIMITIVE_CACHE_CAPACITY, when set, is left in force.
  if (std::getenv("ONEDNN_PRIMITIVE_CACHE_CAPACITY") != nullptr) return -1;
  int capacity = kDefaultPrimitiveCacheCapacity;
  if (const char* env = std::getenv("DYNVM_DNNL_PRIMITIVE_CACHE_CAPACITY")) {
    int v = 0;
    if (absl::SimpleAtoi(env, &v) && v >= 0 && v <= 65536) capacity = v;
  }
  return capacity;
}

absl::StatusOr<const dnnl::engine*> CpuEngine() {
  static const absl::StatusOr<const dnnl::engine*> engine =
      []() -> absl::StatusOr<const dnnl::engine*> {
    const dnnl::engine* e = nullptr;
    if (const int capacity = PrimitiveCacheCapacity(); capacity >= 0) {
      absl::Status s = Guard("bounding oneDNN's primitive cache", [&] {
        dnnl::set_primitive_cache_capacity(capacity);
        return absl::OkStatus();
      });
      if (!s.ok()) return s;
    }
    absl::Status s = Guard("creating the CPU engine", [&] {
      e = new dnnl::engine(dnnl::engine::kind::cpu, 0);
      return absl::OkStatus();
    });
    if (!s.ok()) return s;
    return e;
  }();
  return engine;
}

namespace {

// One in-order CPU stream per thread: a VM runs on one thread at a time, so its sites share
// its thread's stream. Created on the thread's first oneDNN run.
dnnl_stream_t ThreadStream(const dnnl::engine& engine) {
  thread_local dnnl::stream stream(engine);
  return stream.get();
}

}  // namespace

void SetThreads(int n) {
  if (n < 1) n = 1;
  if (omp_get_max_threads() != n) omp_set_num_threads(n);
}

bool SplitByColumns(int64_t m, int64_t n, int threads, int64_t row_grain, int64_t col_grain) {
  if (n < 2 * col_grain) return false;
  if (m < 2 * row_grain * threads) return true;
  return n > m;
}

std::optional<dnnl::memory::data_type> DnnlType(DType dtype) {
  using dt = dnnl::memory::data_type;
  switch (dtype) {
    case DType::kF32:
      return dt::f32;
    case DType::kBF16:
      return dt::bf16;
    case DType::kF16:
      return dt::f16;
    case DType::kI32:
      return dt::s32;
    case DType::kI8:
      return dt::s8;
    case DType::kU8:
      return dt::u8;
    default:
      return std::nullopt;
  }
}

dnnl::memory::desc PlainDesc(dnnl::memory::data_type type, absl::Span<const int64_t> dims,
                             absl::Span<const int64_t> strides) {
  if (dims.empty()) return dnnl::memory::desc({1}, type, dnnl::memory::dims{1});
  dnnl::memory::dims d(dims.begin(), dims.end());
  dnnl::memory::dims s(strides.begin(), strides.end());
  // A size-1 dim gets the stride it would have if the tensor were dense below it.
  int64_t dense = 1;
  for (int i = static_cast<int>(d.size()) - 1; i >= 0; --i) {
    if (d[i] == 1) s[i] = dense;
    dense = s[i] * d[i];
  }
  return dnnl::memory::desc(d, type, s);
}

dnnl::memory::desc TensorDesc(const Tensor& t) {
  return PlainDesc(*DnnlType(t.dtype()), t.dims(), t.strides());
}

dnnl::memory::desc AlignedDesc(const Tensor& t, int rank) {
  int64_t dims[Tensor::kMaxRank + 1], strides[Tensor::kMaxRank + 1];
  const int lead = rank - t.rank();
  for (int i = 0; i < rank; ++i) {
    dims[i] = i < lead ? 1 : t.dim(i - lead);
    strides[i] = i < lead ? 0 : t.stride(i - lead);
  }
  return PlainDesc(*DnnlType(t.dtype()), absl::MakeConstSpan(dims, rank),
                   absl::MakeConstSpan(strides, rank));
}

dnnl::memory::desc DenseDesc(dnnl::memory::data_type type, absl::Span<const int64_t> dims) {
  int64_t strides[Tensor::kMaxRank];
  ContiguousStrides(dims, strides);
  return PlainDesc(type, dims, absl::MakeConstSpan(strides, dims.size()));
}

bool Collapsible(const Tensor& t, int from, int to, int64_t* size, int64_t* stride) {
  *size = 1;
  *stride = 1;
  bool first = true;
  int64_t expect = 0;
  for (int d = to - 1; d >= from; --d) {
    const int64_t n = t.dim(d);
    if (n == 1) continue;
    if (first) {
      *stride = t.stride(d);
      expect = t.stride(d) * n;
      first = false;
    } else {
      if (t.stride(d) != expect) return false;
      expect *= n;
    }
    *size *= n;
  }
  return true;
}

namespace {

// True when some element's bits satisfy `bad` (an integer test: vectorizes without
// floating-point compares).
template <typename Bad>
bool AnyBits(const Tensor& t, Bad bad) {
  const uint32_t* p = t.data<uint32_t>();
  if (t.is_contiguous()) {
    const int64_t n = t.numel();
    uint32_t any = 0;
    for (int64_t i = 0; i < n; ++i) any |= bad(p[i]) ? 1u : 0u;
    return any != 0;
  }
  bool any = false;
  reference::ForEachOffset<1>(t.dims(), {t.strides()}, [&](int64_t o) { any |= bad(p[o]); });
  return any;
}

}  // namespace

bool HasNaN(const Tensor& t) {
  // Vectorized (cpu::AnyNaN): a max pool scans its whole input, and an SSE2 loop was a few
  // percent of a CNN's time.
  if (t.is_contiguous()) return cpu::AnyNaN(t.numel(), t.data<uint32_t>());
  return AnyBits(t, [](uint32_t b) { return (b & 0x7fffffffu) > 0x7f800000u; });
}

bool HasNonFinite(const Tensor& t) {
  return AnyBits(t, [](uint32_t b) { return (b & 0x7f800000u) == 0x7f800000u; });
}

void ShapeKey::Add(const Tensor* t) {
  if (t == nullptr) {
    Add(-1);
    return;
  }
  const int rank = t->rank();
  if (n_ + 2 + 2 * rank > kCapacity) {
    overflow_ = true;
    return;
  }
  v_[n_++] = rank;
  v_[n_++] = static_cast<int64_t>(t->dtype());
  for (int i = 0; i < rank; ++i) {
    v_[n_++] = t->dim(i);
    v_[n_++] = t->dim(i) == 1 ? 0 : t->stride(i);
  }
}

void ShapeKey::Add(int64_t v) {
  if (n_ >= kCapacity) {
    overflow_ = true;
    return;
  }
  v_[n_++] = v;
}

void ShapeKey::AddFloat(float v) {
  uint32_t bits;
  std::memcpy(&bits, &v, sizeof(bits));
  Add(static_cast<int64_t>(bits));
}

bool ShapeKey::operator==(const ShapeKey& other) const {
  if (overflow_ || other.overflow_ || n_ != other.n_) return false;
  return std::memcmp(v_, other.v_, sizeof(int64_t) * static_cast<size_t>(n_)) == 0;
}

void BoundPrimitive::Bind(const dnnl::primitive_desc_base& pd, std::initializer_list<Arg> args) {
  const dnnl::engine& engine = pd.get_engine();
  memories_.clear();
  args_.clear();
  primitive_ = dnnl::primitive(pd.get());
  for (const Arg& a : args) {
    memories_.emplace_back(a.desc, engine, static_cast<void*>(nullptr));
    args_.push_back({a.id, nullptr});
  }
  const dnnl::memory::desc scratch = pd.scratchpad_desc();
  scratchpad_bytes_ = scratch.get_size();
  if (scratchpad_bytes_ > 0) {
    memories_.emplace_back(scratch, engine, static_cast<void*>(nullptr));
    args_.push_back({DNNL_ARG_SCRATCHPAD, nullptr});
  }
  for (size_t i = 0; i < args_.size(); ++i) args_[i].memory = memories_[i].get();
}

BoundPrimitive BoundPrimitive::Share() const {
  BoundPrimitive copy;
  copy.primitive_ = primitive_;
  copy.scratchpad_bytes_ = scratchpad_bytes_;
  for (size_t i = 0; i < memories_.size(); ++i) {
    copy.memories_.emplace_back(memories_[i].get_desc(), memories_[i].get_engine(),
                                static_cast<void*>(nullptr));
    copy.args_.push_back({args_[i].arg, nullptr});
  }
  for (size_t i = 0; i < copy.args_.size(); ++i) copy.args_[i].memory = copy.memories_[i].get();
  return copy;
}

absl::Status BoundPrimitive::Execute(std::initializer_list<const void*> data,
                                     void* scratchpad) const {
  size_t i = 0;
  for (const void* p : data) {
    if (i >= memories_.size()) return absl::InternalError("oneDNN: too many arguments");
    const dnnl_status_t s =
        dnnl_memory_set_data_handle_v2(args_[i].memory, const_cast<void*>(p), nullptr);
    if (s != dnnl_success) return FromDnnl(s, "setting a data handle");
    ++i;
  }
  if (scratchpad_bytes_ > 0) {
    const dnnl_status_t s = dnnl_memory_set_data_handle_v2(args_[i].memory, scratchpad, nullptr);
    if (s != dnnl_success) return FromDnnl(s, "setting the scratchpad");
    ++i;
  }
  if (i != args_.size()) return absl::InternalError("oneDNN: argument count mismatch");
  DYNVM_ASSIGN_OR_RETURN(const dnnl::engine* engine, CpuEngine());
  dnnl_stream_t stream = nullptr;
  absl::Status guarded = Guard("creating a stream", [&] {
    stream = ThreadStream(*engine);
    return absl::OkStatus();
  });
  if (!guarded.ok()) return guarded;
  dnnl_status_t s = dnnl_primitive_execute(primitive_.get(), stream, static_cast<int>(args_.size()),
                                           args_.data());
  if (s == dnnl_success) s = dnnl_stream_wait(stream);
  if (s != dnnl_success) {
    // A primitive that was created fine cannot fail for shape reasons.
    absl::Status st = FromDnnl(s, "executing a primitive");
    return absl::IsUnimplemented(st) ? absl::InternalError(st.message()) : st;
  }
  return absl::OkStatus();
}

void ParkPoolForOpenMp(const KernelContext& ctx) {
  if (ctx.num_threads() > 1 && omp_get_max_threads() > 1) ctx.ParkWorkers();
}

absl::Status ExecuteBound(KernelContext& ctx, const BoundPrimitive& prim,
                          std::initializer_list<const void*> data) {
  ParkPoolForOpenMp(ctx);
  void* scratch = nullptr;
  if (prim.scratchpad_bytes() > 0) {
    DYNVM_ASSIGN_OR_RETURN(void* ws, ctx.Workspace(prim.scratchpad_bytes()));
    scratch = ws;
  }
  return prim.Execute(data, scratch);
}

dnnl::primitive_attr UserScratchpadAttr() {
  dnnl::primitive_attr attr;
  attr.set_scratchpad_mode(dnnl::scratchpad_mode::user);
  return attr;
}

std::string KernelName(const KernelSpec& spec, absl::string_view variant) {
  std::string dtype = "any";
  if (!spec.outputs.empty() && spec.outputs[0].dtype != kAnyDType) {
    dtype = std::string(DTypeName(spec.output_dtype(0)));
  } else if (!spec.inputs.empty() && spec.inputs[0].dtype != kAnyDType) {
    dtype = std::string(DTypeName(spec.input_dtype(0)));
  }
  std::string name = absl::StrCat(absl::AsciiStrToLower(spec.op), ".", dtype, ".", kBackend);
  if (!variant.empty()) absl::StrAppend(&name, ".", variant);
  return name;
}

const char* QuantizedWeightPath(const KernelSpec& spec) {
  const bool bf16 =
      spec.inputs.size() > 1 && spec.inputs[1].dtype == static_cast<uint8_t>(DType::kBF16);
  return bf16 ? cpu::QGemvBf16Path() : cpu::QGemvI8Path();
}

absl::Status RequireF32(const KernelSpec& spec, std::initializer_list<size_t> input_ports) {
  for (size_t i : input_ports) {
    if (i >= spec.inputs.size()) continue;
    const uint8_t d = spec.inputs[i].dtype;
    if (d != static_cast<uint8_t>(DType::kF32)) {
      return absl::UnimplementedError(
          absl::StrCat(spec.op, ": the oneDNN kernel takes f32 only (input ", i, " is ",
                       d == kAnyDType ? "undetermined" : DTypeName(static_cast<DType>(d)), ")"));
    }
  }
  for (const PortSpec& p : spec.outputs) {
    if (p.kind == ObjectKind::kTensor && p.dtype != static_cast<uint8_t>(DType::kF32)) {
      return absl::UnimplementedError(
          absl::StrCat(spec.op, ": the oneDNN kernel produces f32 only"));
    }
  }
  return absl::OkStatus();
}

}  // namespace dynvm::onednn
