#include "kernels/testing.h"

#include "allocator/heap_allocator.h"
#include "common/half.h"
#include "common/status_macros.h"
#include "kernels/reference/common.h"

namespace dynvm::testing {

KernelCall::KernelCall(std::string op, std::string domain) {
  spec_.op = std::move(op);
  spec_.domain = std::move(domain);
}

KernelCall& KernelCall::In(const Tensor& t) {
  PortSpec p;
  p.dtype = static_cast<uint8_t>(t.dtype());
  spec_.inputs.push_back(p);
  inputs_.push_back(t);
  present_.push_back(true);
  return *this;
}

KernelCall& KernelCall::Absent() {
  PortSpec p;
  p.optional = true;
  spec_.inputs.push_back(p);
  inputs_.emplace_back();
  present_.push_back(false);
  return *this;
}

KernelCall& KernelCall::Out(DType dtype) {
  PortSpec p;
  p.dtype = static_cast<uint8_t>(dtype);
  p.dynamic = true;
  spec_.outputs.push_back(p);
  outputs_.emplace_back();
  return *this;
}

KernelCall& KernelCall::OutTensor(const Tensor& preallocated) {
  PortSpec p;
  p.dtype = static_cast<uint8_t>(preallocated.dtype());
  spec_.outputs.push_back(p);
  outputs_.push_back(preallocated);
  return *this;
}

#define DYNVM_ATTR_SETTER(ArgT, Enum, field)                      \
  KernelCall& KernelCall::Attr(const std::string& name, ArgT v) { \
    AttrValue a;                                                  \
    a.type = AttrValue::Type::Enum;                               \
    a.field = std::move(v);                                       \
    spec_.attrs[name] = std::move(a);                             \
    return *this;                                                 \
  }
DYNVM_ATTR_SETTER(int64_t, kInt, i)
DYNVM_ATTR_SETTER(float, kFloat, f)
DYNVM_ATTR_SETTER(const std::string&, kString, s)
DYNVM_ATTR_SETTER(std::vector<int64_t>, kInts, ints)
DYNVM_ATTR_SETTER(std::vector<float>, kFloats, floats)
DYNVM_ATTR_SETTER(std::vector<std::string>, kStrings, strings)
DYNVM_ATTR_SETTER(const Tensor&, kTensor, tensor)
#undef DYNVM_ATTR_SETTER

KernelCall& KernelCall::Backend(std::string backend) {
  spec_.backend = std::move(backend);
  return *this;
}

std::vector<const Tensor*> KernelCall::inputs() const {
  std::vector<const Tensor*> in;
  for (size_t i = 0; i < inputs_.size(); ++i) in.push_back(present_[i] ? &inputs_[i] : nullptr);
  return in;
}

absl::StatusOr<std::vector<Tensor>> KernelCall::Run(int num_threads) {
  DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> k, KernelRegistry::Global().Create(spec_));
  KernelContext ctx(&HeapAllocator::Get(), num_threads);
  std::vector<const Tensor*> in;
  for (size_t i = 0; i < inputs_.size(); ++i) in.push_back(present_[i] ? &inputs_[i] : nullptr);
  std::vector<Tensor> outs = outputs_;
  std::vector<Tensor*> out;
  for (Tensor& t : outs) out.push_back(&t);
  absl::Status s = (k)->Run(ctx, in, out);
  if (!s.ok()) return s;
  return outs;
}

Tensor Bool(std::vector<int64_t> dims, std::vector<bool> v) {
  Tensor t = *Tensor::Empty(DType::kBool, dims);
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i];
  return t;
}

Tensor RandomInt8(DType dtype, const std::vector<int64_t>& dims, std::mt19937& rng) {
  Tensor t = *Tensor::Empty(dtype, dims);
  const bool u8 = dtype == DType::kU8;
  std::uniform_int_distribution<int> d(u8 ? 0 : -128, u8 ? 255 : 127);
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (u8) {
      t.data<uint8_t>()[i] = static_cast<uint8_t>(d(rng));
    } else {
      t.data<int8_t>()[i] = static_cast<int8_t>(d(rng));
    }
  }
  return t;
}

Tensor Int8Scalar(DType dtype, int v) {
  Tensor t = *Tensor::Empty(dtype, {});
  if (dtype == DType::kU8) {
    t.data<uint8_t>()[0] = static_cast<uint8_t>(v);
  } else {
    t.data<int8_t>()[0] = static_cast<int8_t>(v);
  }
  return t;
}

namespace {
template <typename Out>
std::vector<Out> Values(const Tensor& t) {
  std::vector<Out> v;
  v.reserve(static_cast<size_t>(t.numel()));
  const std::array<absl::Span<const int64_t>, 1> strides = {t.strides()};
  absl::Status s = reference::DispatchNumeric(t.dtype(), "ToValues", [&](auto* tag) {
    using T = std::remove_pointer_t<decltype(tag)>;
    const T* p = t.data<T>();
    reference::ForEachOffset<1>(t.dims(), strides, [&](int64_t o) {
      if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
        v.push_back(static_cast<Out>(static_cast<float>(p[o])));
      } else {
        v.push_back(static_cast<Out>(p[o]));
      }
    });
    return absl::OkStatus();
  });
  (void)s;
  return v;
}
}  // namespace

std::vector<double> ToDoubles(const Tensor& t) { return Values<double>(t); }
std::vector<int64_t> ToInts(const Tensor& t) { return Values<int64_t>(t); }

}  // namespace dynvm::testing
