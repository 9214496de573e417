// The registry's priority chain and the fallback it hands a FallbackKernel: the next allowed
// backend whose factory takes the spec, made the same way; none when the policy allows none
// (a run that needs it then fails, naming the kernel); a fallback factory's InvalidArgument is
// Create's. Registries of custom backends only, and the global one (a oneDNN kernel's fallback
// is the reference kernel).
#include "kernels/registry.h"

#include <memory>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "allocator/heap_allocator.h"
#include "gtest/gtest.h"
#include "kernels/fallback_kernel.h"
#include "kernels/testing.h"

namespace dynvm {
namespace {

// Writes `value` into its one output; counts its runs.
class Constant final : public Kernel {
 public:
  Constant(std::string name, float value, int* runs)
      : name_(std::move(name)), value_(value), runs_(runs) {}
  absl::Status Run(KernelContext& ctx, absl::Span<const Tensor* const> in,
                   absl::Span<Tensor* const> out) const override {
    ++*runs_;
    absl::StatusOr<Tensor> t = ctx.AllocateOutput(DType::kF32, {1});
    if (!t.ok()) return t.status();
    t->data<float>()[0] = value_;
    *out[0] = *std::move(t);
    return absl::OkStatus();
  }
  std::string name() const override { return name_; }

 private:
  std::string name_;
  float value_;
  int* runs_;
};

// Serves a run itself when its input is non-empty, and hands an empty one to its fallback.
class Picky final : public FallbackKernel {
 public:
  explicit Picky(int* runs) : FallbackKernel("picky"), runs_(runs) {}
  absl::Status Run(KernelContext& ctx, absl::Span<const Tensor* const> in,
                   absl::Span<Tensor* const> out) const override {
    if (in[0]->numel() == 0) return RunFallback(ctx, in, out);
    ++*runs_;
    absl::StatusOr<Tensor> t = ctx.AllocateOutput(DType::kF32, {1});
    if (!t.ok()) return t.status();
    t->data<float>()[0] = 1.0f;
    *out[0] = *std::move(t);
    return absl::OkStatus();
  }

 private:
  int* runs_;
};

struct Counts {
  int picky = 0, mid = 0, low = 0;
};

// "hi" (priority 20, a Picky), "mid" (10: Unimplemented unless the spec has attribute "mid",
// InvalidArgument when it is 0), "low" (0, writes 3).
void RegisterChain(KernelRegistry& r, Counts* c) {
  r.Register({"test", "Op", Device::kCPU, "hi", 20,
              [c](const KernelSpec&) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                return std::make_unique<Picky>(&c->picky);
              }});
  r.Register({"test", "Op", Device::kCPU, "mid", 10,
              [c](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                const AttrValue* a = spec.Find("mid");
                if (a == nullptr) return absl::UnimplementedError("mid: not this spec");
                if (a->i == 0) return absl::InvalidArgumentError("mid: a bad attribute");
                return std::make_unique<Constant>("mid", 2.0f, &c->mid);
              }});
  r.Register({"test", "Op", Device::kCPU, "low", 0,
              [c](const KernelSpec&) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                return std::make_unique<Constant>("low", 3.0f, &c->low);
              }});
}

AttrValue IntAttr(int64_t v) {
  AttrValue a;
  a.type = AttrValue::Type::kInt;
  a.i = v;
  return a;
}

KernelSpec OpSpec() {
  KernelSpec spec;
  spec.op = "Op";
  spec.domain = "test";
  spec.inputs = {PortSpec{ObjectKind::kTensor, static_cast<uint8_t>(DType::kF32)}};
  spec.outputs = {PortSpec{ObjectKind::kTensor, static_cast<uint8_t>(DType::kF32), false, true}};
  return spec;
}

// Runs k on an input of n floats; the output's value.
absl::StatusOr<float> RunOn(const Kernel& k, int64_t n) {
  KernelContext ctx(&HeapAllocator::Get());
  const Tensor x = *Tensor::Empty(DType::kF32, {n});
  Tensor y;
  const Tensor* in[] = {&x};
  Tensor* out[] = {&y};
  absl::Status s = k.Run(ctx, in, out);
  if (!s.ok()) return s;
  return y.data<float>()[0];
}

TEST(Registry, TheFallbackIsTheNextBackendThatTakesTheSpec) {
  KernelRegistry r;
  Counts c;
  RegisterChain(r, &c);
  absl::StatusOr<std::unique_ptr<Kernel>> k = r.Create(OpSpec());  // mid refuses: low
  ASSERT_TRUE(k.ok()) << k.status();
  const auto* picky = dynamic_cast<const FallbackKernel*>(k->get());
  ASSERT_NE(picky, nullptr);
  ASSERT_NE(picky->fallback(), nullptr);
  EXPECT_EQ(picky->fallback()->name(), "low");
  EXPECT_EQ(*RunOn(**k, 4), 1.0f);
  EXPECT_EQ(*RunOn(**k, 0), 3.0f);
  EXPECT_EQ(*RunOn(**k, 0), 3.0f);
  EXPECT_EQ(picky->fallback_runs(), 2);
  EXPECT_EQ(c.picky, 1);
  EXPECT_EQ(c.low, 2);

  KernelSpec spec = OpSpec();
  spec.attrs["mid"] = IntAttr(1);  // mid takes it: the fallback is mid
  k = r.Create(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(dynamic_cast<const FallbackKernel*>(k->get())->fallback()->name(), "mid");
  EXPECT_EQ(*RunOn(**k, 0), 2.0f);

  spec.backend = "hi";  // a spec naming a backend still gets the chain after it
  k = r.Create(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(dynamic_cast<const FallbackKernel*>(k->get())->fallback()->name(), "mid");
}

TEST(Registry, APolicyThatExcludesTheRestLeavesNoFallback) {
  KernelRegistry r;
  Counts c;
  RegisterChain(r, &c);
  absl::StatusOr<std::unique_ptr<Kernel>> k = r.Create(OpSpec(), BackendPolicy{{"hi"}});
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(dynamic_cast<const FallbackKernel*>(k->get())->fallback(), nullptr);
  EXPECT_EQ(*RunOn(**k, 4), 1.0f);  // runs it serves itself still work
  absl::StatusOr<float> v = RunOn(**k, 0);
  ASSERT_FALSE(v.ok());
  EXPECT_EQ(v.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_TRUE(absl::StrContains(v.status().message(), "picky")) << v.status();
  EXPECT_EQ(c.low, 0);
}

TEST(Registry, AFallbackFactoryErrorIsCreatesError) {
  KernelRegistry r;
  Counts c;
  RegisterChain(r, &c);
  KernelSpec spec = OpSpec();
  spec.attrs["mid"] = IntAttr(0);
  absl::StatusOr<std::unique_ptr<Kernel>> k = r.Create(spec);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(k.status().message(), "bad attribute")) << k.status();
}

// A FallbackKernel takes only what the backends after it take (its factory may leave attributes
// it never reads to them): when every allowed one refuses, it refuses too; when the policy
// allows none, it is made without a fallback.
TEST(Registry, WhenEveryBackendAfterItRefusesSoDoesAFallbackKernel) {
  KernelRegistry r;
  int picky = 0;
  r.Register({"test", "Op", Device::kCPU, "hi", 20,
              [&picky](const KernelSpec&) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                return std::make_unique<Picky>(&picky);
              }});
  r.Register({"test", "Op", Device::kCPU, "low", 0,
              [](const KernelSpec& spec) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                return absl::UnimplementedError("low: an attribute value it does not implement");
              }});
  absl::StatusOr<std::unique_ptr<Kernel>> k = r.Create(OpSpec());
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kUnimplemented);
  EXPECT_TRUE(absl::StrContains(k.status().message(), "low:")) << k.status();
  k = r.Create(OpSpec(), BackendPolicy{{"hi"}});
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(dynamic_cast<const FallbackKernel*>(k->get())->fallback(), nullptr);
}

TEST(Registry, ARegistryOfOneCustomBackendWorks) {
  KernelRegistry r;
  int runs = 0;
  r.Register({"test", "Op", Device::kCPU, "mine", 0,
              [&runs](const KernelSpec&) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                return std::make_unique<Constant>("mine", 5.0f, &runs);
              }});
  absl::StatusOr<std::unique_ptr<Kernel>> k = r.Create(OpSpec());
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(*RunOn(**k, 3), 5.0f);
  EXPECT_EQ(runs, 1);
  // A lone FallbackKernel gets no fallback, and serves what it can.
  KernelRegistry solo;
  int picky = 0;
  solo.Register({"test", "Op", Device::kCPU, "hi", 0,
                 [&picky](const KernelSpec&) -> absl::StatusOr<std::unique_ptr<Kernel>> {
                   return std::make_unique<Picky>(&picky);
                 }});
  k = solo.Create(OpSpec());
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(*RunOn(**k, 2), 1.0f);
  EXPECT_EQ(RunOn(**k, 0).status().code(), absl::StatusCode::kFailedPrecondition);
}

#if defined(DYNVM_WITH_DNNL)
// The built-in chain: a oneDNN kernel falls back to the reference kernel; with a policy that
// allows only oneDNN it has none.
TEST(Registry, OneDnnKernelsFallBackToTheReference) {
  testing::KernelCall call("Relu");
  call.In(testing::F32({2}, {1.0f, -1.0f})).Out(DType::kF32);
  KernelSpec spec = call.spec();
  spec.backend = "dnnl";
  absl::StatusOr<std::unique_ptr<Kernel>> k = KernelRegistry::Global().Create(spec);
  ASSERT_TRUE(k.ok()) << k.status();
  const auto* f = dynamic_cast<const FallbackKernel*>(k->get());
  ASSERT_NE(f, nullptr) << (*k)->name();
  ASSERT_NE(f->fallback(), nullptr);
  EXPECT_EQ(f->fallback()->name(), "relu.f32.ref");
  k = KernelRegistry::Global().Create(call.spec(), BackendPolicy{{"dnnl"}});
  ASSERT_TRUE(k.ok()) << k.status();
  EXPECT_EQ(dynamic_cast<const FallbackKernel*>(k->get())->fallback(), nullptr);
  // A transpose perm that is not a permutation is the reference factory's error, through the
  // chain, as before.
  testing::KernelCall bad("Transpose");
  bad.In(testing::F32({2, 2}, {1, 2, 3, 4}))
      .Out(DType::kF32)
      .Attr("perm", std::vector<int64_t>{0, 0});
  KernelSpec bad_spec = bad.spec();
  bad_spec.backend = "dnnl";
  k = KernelRegistry::Global().Create(bad_spec);
  ASSERT_FALSE(k.ok());
  EXPECT_EQ(k.status().code(), absl::StatusCode::kInvalidArgument) << k.status();
}
#endif

}  // namespace
}  // namespace dynvm
