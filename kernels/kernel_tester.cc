#include "kernels/kernel_tester.h"

#include <cmath>

#include "absl/strings/str_cat.h"
#include "allocator/heap_allocator.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "kernels/registry.h"

namespace dynvm::testing {

Tolerance DefaultTolerance(DType dtype) {
  switch (dtype) {
    case DType::kF32:
      return {1e-5, 1e-4};
    case DType::kF64:
      return {1e-9, 1e-9};
    case DType::kF16:
      return {1e-2, 1e-2};
    case DType::kBF16:
      return {2e-2, 2e-2};
    default:
      return {0, 0};
  }
}

KernelTester::KernelTester(std::string op, std::string domain, uint32_t seed)
    : call_(std::move(op), std::move(domain)), rng_(seed) {}

KernelTester& KernelTester::In(const Tensor& t) {
  call_.In(t);
  inputs_.push_back(t);
  present_.push_back(true);
  return *this;
}

KernelTester& KernelTester::Absent() {
  call_.Absent();
  inputs_.emplace_back();
  present_.push_back(false);
  return *this;
}

Tensor KernelTester::RandomTensor(DType dtype, const std::vector<int64_t>& dims, double lo,
                                  double hi) {
  Tensor t = *Tensor::Empty(dtype, dims);
  std::uniform_real_distribution<double> dist(lo, hi);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = dist(rng_);
    switch (dtype) {
      case DType::kF32:
        t.data<float>()[i] = static_cast<float>(v);
        break;
      case DType::kF64:
        t.data<double>()[i] = v;
        break;
      case DType::kF16:
        t.data<Half>()[i] = Half(static_cast<float>(v));
        break;
      case DType::kBF16:
        t.data<BFloat16>()[i] = BFloat16(static_cast<float>(v));
        break;
      case DType::kI32:
        t.data<int32_t>()[i] = static_cast<int32_t>(std::lround(v));
        break;
      case DType::kI64:
        t.data<int64_t>()[i] = std::llround(v);
        break;
      case DType::kI8:
        t.data<int8_t>()[i] = static_cast<int8_t>(std::lround(v));
        break;
      case DType::kU8:
        t.data<uint8_t>()[i] = static_cast<uint8_t>(std::lround(std::abs(v)));
        break;
      case DType::kBool:
        t.data<bool>()[i] = v > (lo + hi) / 2;
        break;
      default:
        break;
    }
  }
  return t;
}

KernelTester& KernelTester::Random(DType dtype, std::vector<int64_t> dims, double lo, double hi) {
  return In(RandomTensor(dtype, dims, lo, hi));
}

KernelTester& KernelTester::Transposed(DType dtype, std::vector<int64_t> dims,
                                       std::vector<int> perm, double lo, double hi) {
  std::vector<int64_t> storage_dims(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) storage_dims[i] = dims[perm[i]];
  Tensor s = RandomTensor(dtype, storage_dims, lo, hi);
  std::vector<int64_t> strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) strides[perm[i]] = s.stride(static_cast<int>(i));
  return In(*Tensor::View(s.storage(), 0, dtype, dims, strides));
}

KernelTester& KernelTester::Padded(DType dtype, std::vector<int64_t> dims, int64_t pad, double lo,
                                   double hi) {
  std::vector<int64_t> storage_dims = dims;
  if (!storage_dims.empty()) storage_dims.back() += pad;
  Tensor s = RandomTensor(dtype, storage_dims, lo, hi);
  return In(*Tensor::View(s.storage(), 0, dtype, dims, s.strides()));
}

KernelTester& KernelTester::Out(DType dtype) {
  call_.Out(dtype);
  out_dtypes_.push_back(dtype);
  return *this;
}

KernelTester& KernelTester::Attr(const std::string& name, int64_t v) {
  call_.Attr(name, v);
  return *this;
}
KernelTester& KernelTester::Attr(const std::string& name, float v) {
  call_.Attr(name, v);
  return *this;
}
KernelTester& KernelTester::Attr(const std::string& name, const std::string& v) {
  call_.Attr(name, v);
  return *this;
}
KernelTester& KernelTester::Attr(const std::string& name, std::vector<int64_t> v) {
  call_.Attr(name, std::move(v));
  return *this;
}
KernelTester& KernelTester::Attr(const std::string& name, std::vector<float> v) {
  call_.Attr(name, std::move(v));
  return *this;
}
KernelTester& KernelTester::Attr(const std::string& name, std::vector<std::string> v) {
  call_.Attr(name, std::move(v));
  return *this;
}

KernelTester& KernelTester::Tol(double atol, double rtol) {
  tol_ = {atol, rtol};
  tol_set_ = true;
  return *this;
}

KernelTester& KernelTester::Threads(int n) {
  threads_ = n;
  return *this;
}

namespace {

std::string Describe(const KernelSpec& spec, absl::Span<const Tensor* const> in) {
  std::string s = spec.DebugName() + "(";
  for (size_t i = 0; i < in.size(); ++i) {
    absl::StrAppend(&s, i > 0 ? ", " : "", in[i] != nullptr ? in[i]->DebugString() : "-");
    if (in[i] != nullptr && !in[i]->is_contiguous()) {
      absl::StrAppend(&s, " strides ", DimsString(in[i]->strides()));
    }
  }
  return s + ")";
}

bool Close(double got, double want, const Tolerance& tol) {
  if (std::isnan(want)) return std::isnan(got);
  if (std::isinf(want)) return got == want;
  return std::abs(got - want) <= tol.atol + tol.rtol * std::abs(want);
}

}  // namespace

absl::Status KernelTester::Compare(absl::string_view backend) {
  KernelRegistry& registry = KernelRegistry::Global();
  KernelSpec ref_spec = call_.spec();
  ref_spec.backend = "reference";
  absl::StatusOr<std::unique_ptr<Kernel>> ref = registry.Create(ref_spec, {{"reference"}});
  KernelSpec spec = call_.spec();
  spec.backend = std::string(backend);
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, registry.Create(spec));
  kernel_name_ = (kernel)->name();
  if (!ref.ok()) {
    return absl::InternalError(absl::StrCat(
        kernel_name_, ": created, but the reference kernel refuses: ", ref.status().ToString()));
  }

  std::vector<const Tensor*> in;
  for (size_t i = 0; i < inputs_.size(); ++i) in.push_back(present_[i] ? &inputs_[i] : nullptr);
  const std::string what = Describe(spec, in);
  const size_t n_out = out_dtypes_.size();

  KernelContext ref_ctx(&HeapAllocator::Get(), 1);
  std::vector<Tensor> want(n_out);
  std::vector<Tensor*> want_ptrs;
  for (Tensor& t : want) want_ptrs.push_back(&t);
  const absl::Status want_status = (*ref)->Run(ref_ctx, in, want_ptrs);

  KernelContext ctx(&HeapAllocator::Get(), threads_);
  for (int run = 0; run < 3; ++run) {
    std::vector<Tensor> got(n_out);
    if (run == 2 && want_status.ok()) {
      for (size_t i = 0; i < n_out; ++i) got[i] = *Tensor::Empty(want[i].dtype(), want[i].dims());
    }
    std::vector<Tensor*> got_ptrs;
    for (Tensor& t : got) got_ptrs.push_back(&t);
    const absl::Status s = (kernel)->Run(ctx, in, got_ptrs);
    const std::string where = absl::StrCat(kernel_name_, " run ", run, " on ", what);
    if (!want_status.ok()) {
      if (s.code() != want_status.code()) {
        return absl::InternalError(absl::StrCat(where, ": got ", s.ToString(),
                                                ", the reference kernel gives ",
                                                want_status.ToString()));
      }
      continue;
    }
    if (!s.ok()) return absl::InternalError(absl::StrCat(where, ": ", s.ToString()));
    for (size_t o = 0; o < n_out; ++o) {
      const Tensor& g = got[o];
      const Tensor& w = want[o];
      if (g.dtype() != w.dtype() || g.dims() != w.dims()) {
        return absl::InternalError(absl::StrCat(where, ": output ", o, " is ", g.DebugString(),
                                                ", the reference gives ", w.DebugString()));
      }
      const Tolerance tol = tol_set_ ? tol_ : DefaultTolerance(w.dtype());
      const std::vector<double> gv = ToDoubles(g), wv = ToDoubles(w);
      for (size_t i = 0; i < wv.size(); ++i) {
        if (!Close(gv[i], wv[i], tol)) {
          return absl::InternalError(absl::StrCat(where, ": output ", o, " element ", i, " is ",
                                                  gv[i], ", the reference gives ", wv[i], " (atol ",
                                                  tol.atol, ", rtol ", tol.rtol, ")"));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace dynvm::testing
