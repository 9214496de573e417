// Every CUDA kernel against the reference kernel (the oracle) on random inputs: odd sizes, M=1,
// empty dims, broadcasting, strided views. Each case runs the CUDA kernel twice at one invoke
// site (a dynamic output, then a preallocated one) and compares both with the reference within
// f32 tolerances (1e-5 + 1e-4 relative; 1e-4 absolute for GEMMs, whose summation order
// differs; integers and bools exactly). Every test skips with a message when the machine has
// no CUDA device.
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "allocator/cuda_allocator.h"
#include "allocator/heap_allocator.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/device_context.h"
#include "kernels/registry.h"
#include "kernels/testing.h"

namespace dynvm::testing {
namespace {

using Dims = std::vector<int64_t>;

// ---- the tester ----

class CudaTester {
 public:
  CudaTester(DeviceContext* device, std::string op, std::string domain = "", uint32_t seed = 1)
      : device_(device), rng_(seed) {
    spec_.op = std::move(op);
    spec_.domain = std::move(domain);
  }

  CudaTester& In(const Tensor& t) {
    inputs_.push_back(t);
    PortSpec p;
    p.dtype = static_cast<uint8_t>(t.dtype());
    spec_.inputs.push_back(p);
    return *this;
  }
  CudaTester& Absent(DType dtype = DType::kF32) {
    inputs_.emplace_back();
    PortSpec p;
    p.dtype = static_cast<uint8_t>(dtype);
    p.optional = true;
    spec_.inputs.push_back(p);
    return *this;
  }
  CudaTester& Random(DType dtype, Dims dims, double lo = -1, double hi = 1) {
    return In(RandomTensor(dtype, dims, lo, hi));
  }
  // Logical `dims` stored in the order `perm` (a transposed view).
  CudaTester& Transposed(DType dtype, Dims dims, std::vector<int> perm) {
    Dims storage(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) storage[i] = dims[perm[i]];
    Tensor s = RandomTensor(dtype, storage, -1, 1);
    Dims strides(dims.size());
    for (size_t i = 0; i < dims.size(); ++i) strides[perm[i]] = s.stride(static_cast<int>(i));
    return In(*Tensor::View(s.storage(), 0, dtype, dims, strides));
  }
  // Rows with `pad` spare elements (a slice of a wider tensor).
  CudaTester& Padded(DType dtype, Dims dims, int64_t pad) {
    Dims storage = dims;
    storage.back() += pad;
    Tensor s = RandomTensor(dtype, storage, -1, 1);
    return In(*Tensor::View(s.storage(), 0, dtype, dims, s.strides()));
  }
  CudaTester& Out(DType dtype) {
    PortSpec p;
    p.dtype = static_cast<uint8_t>(dtype);
    spec_.outputs.push_back(p);
    return *this;
  }
  CudaTester& OptionalOut(DType dtype) {
    PortSpec p;
    p.dtype = static_cast<uint8_t>(dtype);
    p.optional = true;
    spec_.outputs.push_back(p);
    return *this;
  }
  template <typename T>
  CudaTester& Attr(const std::string& name, T v) {
    AttrValue a;
    if constexpr (std::is_same_v<T, int64_t> || std::is_same_v<T, int>) {
      a.type = AttrValue::Type::kInt;
      a.i = v;
    } else if constexpr (std::is_same_v<T, float>) {
      a.type = AttrValue::Type::kFloat;
      a.f = v;
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      a.type = AttrValue::Type::kInts;
      a.ints = v;
    } else if constexpr (std::is_same_v<T, Tensor>) {
      a.type = AttrValue::Type::kTensor;
      a.tensor = v;
    } else {
      a.type = AttrValue::Type::kString;
      a.s = v;
    }
    spec_.attrs[name] = std::move(a);
    return *this;
  }
  CudaTester& Tol(double atol, double rtol) {
    atol_ = atol;
    rtol_ = rtol;
    return *this;
  }
  // Input i stays on the host (a kernel's host-side parameter: a shape, Sample's scalars).
  CudaTester& KeepOnHost(size_t i) {
    host_inputs_.push_back(i);
    return *this;
  }

  // Runs both kernels and compares. The CUDA kernel's create error is returned as is.
  absl::Status Compare() {
    KernelSpec ref_spec = spec_;
    ref_spec.backend = "reference";
    absl::StatusOr<std::unique_ptr<Kernel>> ref = KernelRegistry::Global().Create(ref_spec);
    if (!ref.ok()) return absl::InternalError(absl::StrCat("reference: ", ref.status().ToString()));
    KernelSpec spec = spec_;
    spec.device = Device::kCUDA;
    spec.backend = "cuda";
    DYNVM_ASSIGN_OR_RETURN(std::unique_ptr<Kernel> kernel, KernelRegistry::Global().Create(spec));
    name_ = (kernel)->name();

    std::vector<const Tensor*> host_in;
    for (const Tensor& t : inputs_) host_in.push_back(t.defined() ? &t : nullptr);
    const size_t n_out = spec_.outputs.size();
    KernelContext ref_ctx(&HeapAllocator::Get());
    std::vector<Tensor> want(n_out);
    std::vector<Tensor*> want_ptrs;
    for (Tensor& t : want) want_ptrs.push_back(&t);
    const absl::Status want_status = (*ref)->Run(ref_ctx, host_in, want_ptrs);

    std::vector<Tensor> dev_inputs;
    for (size_t i = 0; i < inputs_.size(); ++i) {
      const bool host =
          std::find(host_inputs_.begin(), host_inputs_.end(), i) != host_inputs_.end();
      if (!inputs_[i].defined() || host) {
        dev_inputs.push_back(inputs_[i]);
        continue;
      }
      DYNVM_ASSIGN_OR_RETURN(Tensor d, Upload(inputs_[i]));
      dev_inputs.push_back(std::move(d));
    }
    std::vector<const Tensor*> dev_in;
    for (const Tensor& t : dev_inputs) dev_in.push_back(t.defined() ? &t : nullptr);

    KernelContext ctx(&HeapAllocator::Get());
    ctx.set_device_context(device_);
    for (int run = 0; run < 2; ++run) {
      std::vector<Tensor> got(n_out);
      if (run == 1 && want_status.ok()) {
        for (size_t o = 0; o < n_out; ++o) {
          if (!want[o].defined()) continue;
          DYNVM_ASSIGN_OR_RETURN(
              Tensor t, Tensor::Allocate(device_->allocator(), want[o].dtype(), want[o].dims(),
                                         device_->allocator_ref()));
          got[o] = std::move(t);
        }
      }
      std::vector<Tensor*> got_ptrs;
      for (Tensor& t : got) got_ptrs.push_back(&t);
      absl::Status s = (kernel)->Run(ctx, dev_in, got_ptrs);
      if (s.ok()) s = device_->Synchronize();
      const std::string where = absl::StrCat(name_, " run ", run);
      if (!want_status.ok()) {
        if (s.code() != want_status.code()) {
          return absl::InternalError(absl::StrCat(
              where, ": got ", s.ToString(), ", the reference gives ", want_status.ToString()));
        }
        continue;
      }
      if (!s.ok()) return absl::InternalError(absl::StrCat(where, ": ", s.ToString()));
      for (size_t o = 0; o < n_out; ++o) {
        if (!want[o].defined()) continue;
        if (got[o].dtype() != want[o].dtype() || got[o].dims() != want[o].dims()) {
          return absl::InternalError(absl::StrCat(where, ": output ", o, " is ",
                                                  got[o].DebugString(), ", want ",
                                                  want[o].DebugString()));
        }
        if (got[o].device() != Device::kCUDA) {
          return absl::InternalError(absl::StrCat(where, ": output ", o, " is not on the device"));
        }
        DYNVM_ASSIGN_OR_RETURN(Tensor host, Tensor::Empty(got[o].dtype(), got[o].dims()));
        DYNVM_RETURN_IF_ERROR(device_->Copy(got[o], host));
        const std::vector<double> g = ToDoubles(host), w = ToDoubles(want[o]);
        const bool exact = want[o].dtype() != DType::kF32;
        for (size_t i = 0; i < w.size(); ++i) {
          const bool close = std::isnan(w[i]) ? std::isnan(g[i])
                             : exact          ? g[i] == w[i]
                                     : std::abs(g[i] - w[i]) <= atol_ + rtol_ * std::abs(w[i]);
          if (!close) {
            return absl::InternalError(absl::StrCat(where, ": output ", o, " element ", i, " is ",
                                                    g[i], ", the reference gives ", w[i]));
          }
        }
      }
    }
    return absl::OkStatus();
  }

  const std::string& kernel_name() const { return name_; }

 private:
  Tensor RandomTensor(DType dtype, const Dims& dims, double lo, double hi) {
    Tensor t = *Tensor::Empty(dtype, dims);
    std::uniform_real_distribution<double> dist(lo, hi);
    for (int64_t i = 0; i < t.numel(); ++i) {
      const double v = dist(rng_);
      switch (dtype) {
        case DType::kF32:
          t.data<float>()[i] = static_cast<float>(v);
          break;
        case DType::kI32:
          t.data<int32_t>()[i] = static_cast<int32_t>(std::lround(v));
          break;
        case DType::kI64:
          t.data<int64_t>()[i] = std::llround(v);
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

  // A device tensor with the same view of a device copy of t's whole storage.
  absl::StatusOr<Tensor> Upload(const Tensor& t) {
    const StorageRef& hs = t.storage();
    DYNVM_ASSIGN_OR_RETURN(StorageRef ds, Storage::Allocate(device_->allocator(), hs->size(),
                                                            device_->allocator_ref()));
    DYNVM_RETURN_IF_ERROR(device_->CopyFromHost((ds)->data(), hs->data(), hs->size()));
    return Tensor::View(ds, t.byte_offset(), t.dtype(), t.dims(), t.strides());
  }

  DeviceContext* device_;
  std::mt19937 rng_;
  KernelSpec spec_;
  std::vector<Tensor> inputs_;
  std::vector<size_t> host_inputs_;
  double atol_ = 1e-5, rtol_ = 1e-4;
  std::string name_;
};

class CudaKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
    absl::StatusOr<std::unique_ptr<DeviceContext>> d = CreateDeviceContext(Device::kCUDA);
    ASSERT_TRUE(d.ok()) << d.status();
    device_ = *std::move(d);
  }
  CudaTester T(std::string op, uint32_t seed = 1, std::string domain = "") {
    return CudaTester(device_.get(), std::move(op), std::move(domain), seed);
  }
  void Check(CudaTester& t) {
    const absl::Status s = t.Compare();
    ASSERT_TRUE(s.ok()) << s;
    EXPECT_TRUE(absl::StrContains(t.kernel_name(), ".cuda")) << t.kernel_name();
  }
  std::unique_ptr<DeviceContext> device_;
};

// ---- MatMul, Gemm ----

TEST_F(CudaKernelTest, MatMulShapeClasses) {
  for (int64_t m : {1, 2, 7, 64}) {
    for (int64_t kn : {1, 3, 33, 130}) {
      CudaTester t = T("MatMul", static_cast<uint32_t>(m * 1000 + kn));
      t.Random(DType::kF32, {m, kn})
          .Random(DType::kF32, {kn, kn + 5})
          .Out(DType::kF32)
          .Tol(1e-4, 1e-4);
      Check(t);
    }
  }
}

TEST_F(CudaKernelTest, MatMulVectorsAndBatches) {
  const std::vector<std::pair<Dims, Dims>> cases = {
      {{5}, {5, 3}},
      {{4, 5}, {5}},
      {{5}, {5}},
      {{2, 3, 4}, {4, 6}},
      {{2, 1, 4}, {4, 6}},
      {{3, 4}, {2, 4, 6}},
      {{2, 3, 4}, {2, 4, 6}},
      {{2, 1, 3, 4}, {5, 4, 2}},
      {{1, 2, 3, 4}, {4, 1}},
  };
  uint32_t seed = 7;
  for (const auto& [a, b] : cases) {
    CudaTester t = T("MatMul", seed++);
    t.Random(DType::kF32, a).Random(DType::kF32, b).Out(DType::kF32).Tol(1e-4, 1e-4);
    Check(t);
  }
}

TEST_F(CudaKernelTest, MatMulEmptyDims) {
  for (const auto& [a, b] : std::vector<std::pair<Dims, Dims>>{
           {{0, 4}, {4, 3}}, {{3, 0}, {0, 4}}, {{3, 4}, {4, 0}}, {{2, 0, 4}, {2, 4, 5}}}) {
    CudaTester t = T("MatMul");
    t.Random(DType::kF32, a).Random(DType::kF32, b).Out(DType::kF32).Tol(1e-4, 1e-4);
    Check(t);
  }
}

TEST_F(CudaKernelTest, MatMulStridedViews) {
  {
    CudaTester t = T("MatMul", 3);  // a weight stored [N, K]
    t.Random(DType::kF32, {3, 17})
        .Transposed(DType::kF32, {17, 9}, {1, 0})
        .Out(DType::kF32)
        .Tol(1e-4, 1e-4);
    Check(t);
  }
  {
    CudaTester t = T("MatMul", 4);
    t.Transposed(DType::kF32, {6, 17}, {1, 0})
        .Random(DType::kF32, {17, 9})
        .Out(DType::kF32)
        .Tol(1e-4, 1e-4);
    Check(t);
  }
  {
    CudaTester t = T("MatMul", 5);  // a KV cache with spare capacity
    t.Padded(DType::kF32, {2, 5, 8}, 3)
        .Padded(DType::kF32, {2, 8, 6}, 2)
        .Out(DType::kF32)
        .Tol(1e-4, 1e-4);
    Check(t);
  }
  {
    CudaTester t = T("MatMul", 6);  // attention scores: K^T
    t.Random(DType::kF32, {2, 4, 8})
        .Transposed(DType::kF32, {2, 8, 4}, {0, 2, 1})
        .Out(DType::kF32)
        .Tol(1e-4, 1e-4);
    Check(t);
  }
  {
    CudaTester t = T("MatMul", 8);  // a layout cuBLAS cannot read: packed first
    t.Transposed(DType::kF32, {3, 4, 5}, {1, 2, 0})
        .Random(DType::kF32, {5, 2})
        .Out(DType::kF32)
        .Tol(1e-4, 1e-4);
    Check(t);
  }
}

TEST_F(CudaKernelTest, Gemm) {
  const Dims kScalar = {}, kOne = {1}, kRow = {9}, kFull = {7, 9}, kColumn = {7, 1};
  uint32_t seed = 20;
  for (int trans_a : {0, 1}) {
    for (int trans_b : {0, 1}) {
      // No C, then C of every broadcastable shape.
      for (const Dims* c :
           {static_cast<const Dims*>(nullptr), &kScalar, &kOne, &kRow, &kFull, &kColumn}) {
        CudaTester t = T("Gemm", seed++);
        t.Random(DType::kF32, trans_a ? Dims{5, 7} : Dims{7, 5});
        t.Random(DType::kF32, trans_b ? Dims{9, 5} : Dims{5, 9});
        if (c != nullptr) t.Random(DType::kF32, *c);
        t.Out(DType::kF32).Tol(1e-4, 1e-4).Attr("transA", trans_a).Attr("transB", trans_b);
        t.Attr("alpha", 0.5f).Attr("beta", 2.0f);
        Check(t);
      }
    }
  }
  CudaTester t = T("Gemm", 99);  // an empty product: y = beta * C
  t.Random(DType::kF32, {3, 0}).Random(DType::kF32, {0, 4}).Random(DType::kF32, {4});
  t.Out(DType::kF32).Tol(1e-4, 1e-4).Attr("beta", 3.0f);
  Check(t);
}

// ---- elementwise ----

TEST_F(CudaKernelTest, BinaryBroadcasting) {
  const std::vector<std::pair<Dims, Dims>> shapes = {
      {{7}, {7}}, {{2, 3}, {3}}, {{2, 1, 4}, {3, 1}}, {{}, {5}}, {{4, 1}, {1, 6}}, {{0, 3}, {3}}};
  uint32_t seed = 30;
  for (const char* op : {"Add", "Sub", "Mul", "Div", "Max", "Min", "Pow"}) {
    for (const auto& [a, b] : shapes) {
      CudaTester t = T(op, seed++);
      const bool pow = std::string(op) == "Pow";
      t.Random(DType::kF32, a, pow ? 0.1 : -2, 2).Random(DType::kF32, b, pow ? -2 : 0.5, 2);
      t.Out(DType::kF32);
      Check(t);
    }
  }
  for (const char* op : {"Add", "Sub", "Mul", "Max", "Min"}) {
    for (DType dt : {DType::kI64, DType::kI32}) {
      CudaTester t = T(op, seed++);
      t.Random(dt, {3, 4}, -100, 100).Random(dt, {4}, -100, 100).Out(dt);
      Check(t);
    }
  }
  for (const char* op : {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"}) {
    CudaTester t = T(op, seed++);
    t.Random(DType::kI64, {5, 3}, -2, 2).Random(DType::kI64, {3}, -2, 2).Out(DType::kBool);
    Check(t);
    CudaTester f = T(op, seed++);
    f.Random(DType::kF32, {5, 3}).Random(DType::kF32, {5, 1}).Out(DType::kBool);
    Check(f);
  }
  for (const char* op : {"And", "Or", "Xor", "Equal"}) {
    CudaTester t = T(op, seed++);
    t.Random(DType::kBool, {4, 5}).Random(DType::kBool, {5}).Out(DType::kBool);
    Check(t);
  }
}

TEST_F(CudaKernelTest, BinaryStridedOperands) {
  CudaTester t = T("Add", 40);
  t.Transposed(DType::kF32, {6, 5}, {1, 0}).Padded(DType::kF32, {6, 5}, 3).Out(DType::kF32);
  Check(t);
}

TEST_F(CudaKernelTest, Unary) {
  uint32_t seed = 50;
  for (const char* op :
       {"Neg", "Abs", "Exp", "Tanh", "Sigmoid", "Relu", "Erf", "Floor", "Ceil", "Sin", "Cos"}) {
    CudaTester t = T(op, seed++);
    t.Random(DType::kF32, {3, 17}, -5, 5).Out(DType::kF32);
    Check(t);
  }
  for (const char* op : {"Log", "Sqrt", "Reciprocal"}) {
    CudaTester t = T(op, seed++);
    t.Random(DType::kF32, {33}, 0.1, 10).Out(DType::kF32);
    Check(t);
  }
  for (const char* op : {"Neg", "Abs", "Relu"}) {
    CudaTester t = T(op, seed++);
    t.Random(DType::kI64, {9}, -50, 50).Out(DType::kI64);
    Check(t);
  }
  CudaTester n = T("Not", seed++);
  n.Random(DType::kBool, {2, 3}).Out(DType::kBool);
  Check(n);
  CudaTester s = T("Tanh", seed++);  // a strided input
  s.Transposed(DType::kF32, {4, 7}, {1, 0}).Out(DType::kF32);
  Check(s);
}

TEST_F(CudaKernelTest, WhereAndCast) {
  CudaTester w = T("Where", 60);
  w.Random(DType::kBool, {3, 1}).Random(DType::kF32, {3, 4}).Random(DType::kF32, {4});
  w.Out(DType::kF32);
  Check(w);
  CudaTester wi = T("Where", 61);
  wi.Random(DType::kBool, {5}).Random(DType::kI64, {5}, -9, 9).Random(DType::kI64, {}, -9, 9);
  wi.Out(DType::kI64);
  Check(wi);
  const std::vector<std::pair<DType, DType>> casts = {
      {DType::kF32, DType::kI64},  {DType::kI64, DType::kF32}, {DType::kBool, DType::kF32},
      {DType::kF32, DType::kBool}, {DType::kI64, DType::kI32}, {DType::kI32, DType::kI64}};
  uint32_t seed = 62;
  for (const auto& [from, to] : casts) {
    CudaTester c = T("Cast", seed++);
    c.Random(from, {4, 6}, -1e3, 1e3)
        .Out(to)
        .Attr("to", int64_t{to == DType::kF32   ? 1
                            : to == DType::kI64 ? 7
                            : to == DType::kI32 ? 6
                                                : 9});
    Check(c);
  }
}

// ---- reductions ----

TEST_F(CudaKernelTest, SoftmaxAndLogSoftmax) {
  uint32_t seed = 70;
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    for (int64_t axis : {-1, 0, 1}) {
      CudaTester t = T(op, seed++);
      t.Random(DType::kF32, {3, 5, 300}, -4, 4).Out(DType::kF32).Attr("axis", axis);
      Check(t);
    }
    CudaTester big = T(op, seed++);  // a vocabulary-sized row
    big.Random(DType::kF32, {2, 5000}, -10, 10).Out(DType::kF32);
    Check(big);
    CudaTester legacy = T(op, seed++);  // opset < 13: [axis, rank) as one extent
    legacy.Random(DType::kF32, {2, 3, 4}).Out(DType::kF32).Attr("axis", int64_t{1});
    legacy.Attr("legacy_2d", int64_t{1});
    Check(legacy);
  }
}

TEST_F(CudaKernelTest, LayerNormalization) {
  {
    CudaTester t = T("LayerNormalization", 80);
    t.Random(DType::kF32, {4, 7, 64}, -3, 3).Random(DType::kF32, {64}).Random(DType::kF32, {64});
    t.Out(DType::kF32).OptionalOut(DType::kF32).OptionalOut(DType::kF32);
    Check(t);
  }
  {
    CudaTester t = T("LayerNormalization", 81);
    t.Random(DType::kF32, {3, 5, 6}).Random(DType::kF32, {5, 6}).Out(DType::kF32);
    t.Attr("axis", int64_t{-2}).Attr("epsilon", 1e-3f);
    Check(t);
  }
  {
    CudaTester t = T("LayerNormalization", 82);  // a strided X, scale broadcast within the row
    t.Transposed(DType::kF32, {6, 9}, {1, 0}).Random(DType::kF32, {1}).Out(DType::kF32);
    Check(t);
  }
}

TEST_F(CudaKernelTest, ArgMaxArgMin) {
  uint32_t seed = 90;
  for (const char* op : {"ArgMax", "ArgMin"}) {
    for (int64_t axis : {-1, 0, 1}) {
      for (int64_t keepdims : {0, 1}) {
        CudaTester t = T(op, seed++);
        t.Random(DType::kF32, {4, 6, 700}).Out(DType::kI64).Attr("axis", axis);
        t.Attr("keepdims", keepdims);
        Check(t);
      }
    }
    for (int64_t last : {0, 1}) {  // ties: small integers, so every row has many
      std::mt19937 rng(seed);
      std::uniform_int_distribution<int> dist(-2, 2);
      std::vector<float> v(5 * 1000);
      for (float& f : v) f = static_cast<float>(dist(rng));
      CudaTester t = T(op, seed++);
      t.In(F32({5, 1000}, v)).Out(DType::kI64).Attr("axis", int64_t{-1});
      t.Attr("select_last_index", last);
      Check(t);
    }
  }
  CudaTester nan = T("ArgMax", 99);
  Tensor x = F32({2, 4}, {1, NAN, 3, NAN, -1, -2, -3, 5});
  nan.In(x).Out(DType::kI64).Attr("axis", int64_t{1});
  Check(nan);
  CudaTester ties = T("ArgMax", 98);
  Tensor y = F32({2, 600}, std::vector<float>(1200, 1.0f));
  ties.In(y).Out(DType::kI64).Attr("axis", int64_t{1}).Attr("select_last_index", int64_t{1});
  Check(ties);
}

// ---- data movement ----

TEST_F(CudaKernelTest, GatherEmbeddingRows) {
  {
    CudaTester t = T("Gather", 100);
    t.Random(DType::kF32, {50, 32}).In(I64({2, 3}, {0, 49, -1, 7, 7, 3})).Out(DType::kF32);
    Check(t);
  }
  {
    CudaTester t = T("Gather", 101);
    t.Random(DType::kF32, {4, 10, 3})
        .In(I32({2}, {9, 0}))
        .Out(DType::kF32)
        .Attr("axis", int64_t{1});
    Check(t);
  }
  {
    CudaTester t = T("Gather", 102);  // i64 data, a scalar index
    t.Random(DType::kI64, {6, 2}, -9, 9).In(I64({}, {5})).Out(DType::kI64);
    Check(t);
  }
}

TEST_F(CudaKernelTest, GatherOutOfRangeIsAnErrorAndTheDeviceStaysUsable) {
  CudaTester t = T("Gather", 103);
  t.Random(DType::kF32, {5, 4}).In(I64({2}, {1, 5})).Out(DType::kF32);
  const absl::Status s = t.Compare();  // both kernels must fail with InvalidArgument
  ASSERT_TRUE(s.ok()) << s;
  CudaTester ok = T("Gather", 104);
  ok.Random(DType::kF32, {5, 4}).In(I64({2}, {1, 4})).Out(DType::kF32);
  Check(ok);
}

TEST_F(CudaKernelTest, ConcatTransposeExpand) {
  {
    CudaTester t = T("Concat", 110);
    t.Random(DType::kF32, {2, 3, 4})
        .Random(DType::kF32, {2, 1, 4})
        .Transposed(DType::kF32, {2, 5, 4}, {0, 2, 1});
    t.Out(DType::kF32).Attr("axis", int64_t{1});
    Check(t);
  }
  {
    CudaTester t = T("Concat", 111);
    t.Random(DType::kI64, {3, 2}, -5, 5)
        .Random(DType::kI64, {3, 0}, -5, 5)
        .Random(DType::kI64, {3, 1}, -5, 5);
    t.Out(DType::kI64).Attr("axis", int64_t{-1});
    Check(t);
  }
  {
    CudaTester t = T("Transpose", 112);
    t.Random(DType::kF32, {2, 3, 4}).Out(DType::kF32).Attr("perm", std::vector<int64_t>{1, 0, 2});
    Check(t);
  }
  {
    CudaTester t = T("Transpose", 113);
    t.Random(DType::kI64, {5, 6}, -9, 9).Out(DType::kI64);
    Check(t);
  }
  {
    CudaTester t = T("Expand", 114);
    t.Random(DType::kF32, {3, 1}).In(I64({3}, {2, 3, 4})).KeepOnHost(1).Out(DType::kF32);
    Check(t);
  }
  {
    CudaTester t = T("ConstantOfShape", 115);
    t.In(I64({2}, {3, 5})).KeepOnHost(0).Out(DType::kF32).Attr("value", F32({1}, {2.5f}));
    Check(t);
  }
}

// ---- LSTM ----

TEST_F(CudaKernelTest, LstmStepsMatchTheReference) {
  uint32_t seed = 120;
  for (int64_t steps : {1, 5}) {
    for (bool with_state : {false, true}) {
      const int64_t batch = 3, input = 10, hidden = 16;
      CudaTester t = T("LSTM", seed++);
      t.Random(DType::kF32, {steps, batch, input});
      t.Random(DType::kF32, {1, 4 * hidden, input}, -0.5, 0.5);
      t.Random(DType::kF32, {1, 4 * hidden, hidden}, -0.5, 0.5);
      t.Random(DType::kF32, {1, 8 * hidden}, -0.5, 0.5);
      t.Absent(DType::kI32);
      if (with_state) {
        t.Random(DType::kF32, {1, batch, hidden}).Random(DType::kF32, {1, batch, hidden});
      } else {
        t.Absent().Absent();
      }
      t.Out(DType::kF32).Out(DType::kF32).Out(DType::kF32).Attr("hidden_size", hidden);
      t.Tol(1e-4, 1e-4);  // GEMM summation order differs from the reference's
      Check(t);
    }
  }
}

TEST_F(CudaKernelTest, LstmDeclinesWhatItDoesNotRun) {
  CudaTester t = T("LSTM", 130);
  t.Random(DType::kF32, {1, 1, 4}).Random(DType::kF32, {2, 32, 4}).Random(DType::kF32, {2, 32, 8});
  t.Out(DType::kF32)
      .Attr("hidden_size", int64_t{8})
      .Attr("direction", std::string("bidirectional"));
  EXPECT_TRUE(absl::IsUnimplemented(t.Compare()));
}

// ---- dynvm::Sample ----

TEST_F(CudaKernelTest, SampleMatchesTheReference) {
  uint32_t seed = 140;
  for (float temperature : {0.0f, 0.7f, 1.0f}) {
    for (int64_t step : {0, 1, 17}) {
      CudaTester t = T("Sample", seed++, "dynvm");
      t.Random(DType::kF32, {3, 300}, -3, 3).In(F32({}, {temperature})).In(I64({}, {1234}));
      t.In(I64({}, {step})).KeepOnHost(1).KeepOnHost(2).KeepOnHost(3).Out(DType::kI64);
      Check(t);
    }
  }
  CudaTester d = T("Sample", 150, "dynvm");  // scalars on the device (each read is a sync)
  d.Random(DType::kF32, {2, 64}).In(F32({}, {1.0f})).In(I64({}, {7})).In(I64({}, {3}));
  d.Out(DType::kI64);
  Check(d);
}

// ---- copies through the context ----

TEST_F(CudaKernelTest, CopiesBetweenHostAndDeviceKeepStrides) {
  Tensor host = F32({2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor transposed = *Tensor::View(host.storage(), 0, DType::kF32, {3, 2}, {1, 3});
  absl::StatusOr<Tensor> dev =
      Tensor::Allocate(device_->allocator(), DType::kF32, {3, 2}, device_->allocator_ref());
  ASSERT_TRUE(dev.ok());
  ASSERT_TRUE(device_->Copy(transposed, *dev).ok());  // strided host -> device
  absl::StatusOr<Tensor> dev_t =
      Tensor::Allocate(device_->allocator(), DType::kF32, {2, 3}, device_->allocator_ref());
  ASSERT_TRUE(dev_t.ok());
  Tensor dev_view = *Tensor::View(dev_t->storage(), 0, DType::kF32, {3, 2}, {1, 3});
  ASSERT_TRUE(device_->Copy(*dev, dev_view).ok());  // device -> strided device
  Tensor back = *Tensor::Empty(DType::kF32, {2, 3});
  ASSERT_TRUE(device_->Copy(*dev_t, back).ok());
  EXPECT_THAT(ToDoubles(back), ::testing::ElementsAre(1, 2, 3, 4, 5, 6));
  Tensor back_t = *Tensor::Empty(DType::kF32, {2, 3});
  Tensor back_view = *Tensor::View(back_t.storage(), 0, DType::kF32, {3, 2}, {1, 3});
  ASSERT_TRUE(device_->Copy(*dev, back_view).ok());  // device -> strided host
  EXPECT_THAT(ToDoubles(back_t), ::testing::ElementsAre(1, 2, 3, 4, 5, 6));
}

TEST_F(CudaKernelTest, KernelWithoutADeviceContextFailsCleanly) {
  KernelSpec spec;
  spec.op = "Relu";
  spec.device = Device::kCUDA;
  spec.inputs.push_back({ObjectKind::kTensor, static_cast<uint8_t>(DType::kF32)});
  spec.outputs.push_back({ObjectKind::kTensor, static_cast<uint8_t>(DType::kF32)});
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  KernelContext ctx(&HeapAllocator::Get());
  Tensor x = F32({2}, {1, -1}), y;
  const Tensor* in[] = {&x};
  Tensor* out[] = {&y};
  const absl::Status s = (*k)->Run(ctx, in, out);
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
}

}  // namespace
}  // namespace dynvm::testing
