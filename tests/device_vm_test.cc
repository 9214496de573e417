// The VM's device paths with a host-memory stand-in for the CUDA device, so they run on every
// machine and build: device storages and growable tensors from the device pool, copies both
// ways, read_*/write through the context (the sync points), constants uploaded once per
// executable and shared by VMs and swapped in for device kernels, emit and outputs left on the
// device, one synchronization per run, and failures of the device that leave the VM usable.
// (tests/cuda_vm_test.cc runs the real device where there is one.)
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "allocator/cuda_allocator.h"
#include "common/status_macros.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/assembler.h"
#include "kernels/device_context.h"
#include "kernels/registry.h"
#include "tests/vm_fixture.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using testing::LoadAssembly;

struct Counters {
  int contexts = 0;
  int uploads = 0;
  int syncs = 0;
  int to_host = 0;
  int from_host = 0;
  bool fail_copies = false;
};
Counters counters;

// "Device" memory is host memory from a CudaAllocator pool; every access goes through here.
class FakeDevice final : public DeviceContext {
 public:
  explicit FakeDevice(const DeviceContextOptions& o) {
    CudaAllocator::Options po;
    po.memory_limit = o.memory_limit;
    po.system = {[](size_t bytes) -> absl::StatusOr<void*> {
                   void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256);
                   if (p == nullptr) return absl::ResourceExhaustedError("fake device full");
                   return p;
                 },
                 [](void* p) { std::free(p); }};
    pool_ = std::make_shared<CudaAllocator>(std::move(po));
  }
  Device device() const override { return Device::kCUDA; }
  Allocator& allocator() override { return *pool_; }
  const std::shared_ptr<Allocator>& allocator_ref() const override { return pool_; }
  absl::Status Copy(const Tensor& src, Tensor& dst) override {
    if (counters.fail_copies) return absl::InternalError("fake device: copy failed");
    const int64_t esize = DTypeSize(src.dtype());
    for (int64_t i = 0; i < src.numel(); ++i) {
      std::memcpy(static_cast<uint8_t*>(dst.raw_data()) + Offset(dst, i) * esize,
                  static_cast<const uint8_t*>(src.raw_data()) + Offset(src, i) * esize,
                  static_cast<size_t>(esize));
    }
    return absl::OkStatus();
  }
  absl::Status CopyToHost(void* dst, const void* src, size_t bytes) override {
    ++counters.to_host;
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status CopyFromHost(void* dst, const void* src, size_t bytes) override {
    ++counters.from_host;
    std::memcpy(dst, src, bytes);
    return absl::OkStatus();
  }
  absl::Status Synchronize() override {
    ++counters.syncs;
    return absl::OkStatus();
  }
  absl::StatusOr<StorageRef> UploadConstant(const void* host, size_t bytes) override {
    ++counters.uploads;
    void* p = std::aligned_alloc(256, (bytes + 255) / 256 * 256 + 256);
    std::memcpy(p, host, bytes);
    return Storage::Wrap(Storage::Kind::kConstant, p, bytes, Device::kCUDA, [p] { std::free(p); });
  }

 private:
  static int64_t Offset(const Tensor& t, int64_t index) {
    int64_t off = 0;
    for (int d = t.rank() - 1; d >= 0; --d) {
      off += (index % t.dim(d)) * t.stride(d);
      index /= t.dim(d);
    }
    return off;
  }
  std::shared_ptr<Allocator> pool_;
};

// test::Twice on the "device": y = 2 x, refusing host tensors as a device kernel does.
class TwiceKernel final : public Kernel {
 public:
  absl::Status Run(KernelContext& ctx, absl::Span<const Tensor* const> in,
                   absl::Span<Tensor* const> out) const override {
    if (ctx.device_context() == nullptr) return absl::FailedPreconditionError("no device context");
    const Tensor& x = *in[0];
    if (x.device() != Device::kCUDA) return absl::FailedPreconditionError("input on the host");
    Tensor& y = *out[0];
    if (!y.defined()) {
      DYNVM_ASSIGN_OR_RETURN(
          Tensor t, Tensor::Allocate(ctx.device_context()->allocator(), x.dtype(), x.dims(),
                                     ctx.device_context()->allocator_ref()));
      y = std::move(t);
    }
    if (y.device() != Device::kCUDA) return absl::FailedPreconditionError("output on the host");
    for (int64_t i = 0; i < x.numel(); ++i) y.data<float>()[i] = 2 * x.data<float>()[i];
    return absl::OkStatus();
  }
  std::string name() const override { return "twice.f32.fake"; }
};

class DeviceVmTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    KernelRegistry::Global().Register(
        {"test", "Twice", Device::kCUDA, "fake", 100,
         [](const KernelSpec&) -> absl::StatusOr<std::unique_ptr<Kernel>> {
           return std::make_unique<TwiceKernel>();
         }});
  }
  void SetUp() override {
    counters = Counters();
    SetDeviceContextFactoryForTesting(
        Device::kCUDA,
        [](const DeviceContextOptions& o) -> absl::StatusOr<std::unique_ptr<DeviceContext>> {
          ++counters.contexts;
          return std::make_unique<FakeDevice>(o);
        });
  }
  void TearDown() override { SetDeviceContextFactoryForTesting(Device::kCUDA, nullptr); }
};

std::vector<float> Floats(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// y = twice(x) + twice(w), computed on the "device"; w is a constant.
constexpr absl::string_view kProgram = R"(
.string "device"
.const f32 [3] name="w" weight values:[10, 20, 30]
.kernel "Twice" domain="test" in(f32) out(f32) device=cuda
.kernel "Twice" domain="test" in(f32) out(dyn:f32) device=cuda
.kernel "Neg" in(f32) out(dyn:f32)
.kernel "Relu" in(f32) out(f32)

.function main
  .params 1 0
  .sregs f64 f64 f64 bool
  .oregs tensor:f32 storage tensor:f32 tensor:f32 storage tensor:f32 tensor:f32 storage tensor:f32
  .oresults tensor:f32 tensor:f32
  .sites 2
  .entry
  .input x [3]
  .output y [3]
  .output wd [3]
  alloc_storage %o1, 12, cuda
  alloc_tensor %o2, %o1, 0, f32, [3]
  copy %o2, %o0
  alloc_storage %o4, 12, cuda
  alloc_tensor %o5, %o4, 0, f32, [3]
  invoke k0, #0, (%o2), (%o5)
  load_const %o3, c0
  invoke k1, #1, (%o3), (%o6)
  read_f %s0, %o5, 1
  read_f %s1, %o6, 1
  add_f %s2, %s0, %s1
  write %o5, 1, %s2
  alloc_storage %o7, 12, cpu
  alloc_tensor %o8, %o7, 0, f32, [3]
  copy %o8, %o5
  emit %o6, 0
  ret (%o8, %o6), ()
.end

.function grow
  .params 0 0
  .sregs i64 f64 f64 bool i64 i64
  .oregs tensor:f32 storage tensor:f32
  .oresults tensor:f32
  .entry
  .output g [5,2]
  alloc_growable %o0, f32, cuda, 0, 2, [0, 2]
  alloc_storage %o1, 8, cuda
  alloc_tensor %o2, %o1, 0, f32, [1, 2]
  loop %s0, 5
    i2f %s1, %s0
    write %o2, 0, %s1
    write %o2, 1, %s1
    append %o0, %o2, 0
  endloop
  read_f %s1, %o0, 7
  const_f %s2, 3
  eq_f %s3, %s1, %s2
  assert %s3, str0
  ret (%o0), ()
.end

; No explicit copies: the VM moves each input to its kernel's device.
.function mixed
  .params 1 0
  .oregs tensor:f32 tensor:f32 tensor:f32
  .oresults tensor:f32
  .sites 2
  .entry
  .input x [3]
  .output r [3]
  invoke k1, #0, (%o0), (%o1)
  invoke k2, #1, (%o1), (%o2)
  ret (%o2), ()
.end

; A host kernel cannot write a device tensor: refused, never run.
.function host_kernel_device_output
  .params 0 0
  .oregs storage tensor:f32 tensor:f32
  .sites 1
  .entry
  load_const %o2, c0
  alloc_storage %o0, 12, cuda
  alloc_tensor %o1, %o0, 0, f32, [3]
  invoke k3, #0, (%o2), (%o1)
  ret (), ()
.end
)";

TEST_F(DeviceVmTest, ProgramRunsThroughTheDeviceContext) {
  std::shared_ptr<const Executable> exe = LoadAssembly(kProgram);
  ASSERT_NE(exe, nullptr);
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe);
  ASSERT_TRUE(vm.ok());
  EXPECT_EQ(counters.contexts, 0);  // nothing touches the device before it is needed
  std::vector<float> emitted;
  RunOptions run;
  run.on_emit = [&](int, const Tensor& t) -> absl::Status {
    EXPECT_EQ(t.device(), Device::kCPU);
    emitted = Floats(t);
    return absl::OkStatus();
  };
  for (int i = 0; i < 3; ++i) {
    ASSERT_TRUE((*vm)->SetInput("x", *Tensor::FromVector<float>(DType::kF32, {3}, {1, 2, 3})).ok());
    const absl::Status s = (*vm)->Run(run);
    ASSERT_TRUE(s.ok()) << s;
  }
  EXPECT_EQ(counters.contexts, 1);
  EXPECT_EQ(counters.uploads, 1);  // the constant segment, once
  EXPECT_EQ(counters.syncs, 3);    // one per run
  absl::StatusOr<Tensor> y = (*vm)->GetOutput("y");
  ASSERT_TRUE(y.ok());
  EXPECT_EQ(y->device(), Device::kCPU);
  EXPECT_THAT(Floats(*y), ElementsAre(2, 4 + 40, 6));
  EXPECT_THAT(emitted, ElementsAre(20, 40, 60));
  absl::StatusOr<Tensor> wd = (*vm)->GetOutput("wd");
  ASSERT_TRUE(wd.ok());
  EXPECT_EQ(wd->device(), Device::kCUDA);
  absl::StatusOr<Tensor> host = (*vm)->ToHost(*wd);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_THAT(Floats(*host), ElementsAre(20, 40, 60));
  EXPECT_GT((*vm)->device_memory_stats().pool_hits, 0);
  (*vm)->Trim();

  // A second VM shares the executable's device constants: no second upload.
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm2 = VirtualMachine::Create(exe);
  ASSERT_TRUE(vm2.ok());
  ASSERT_TRUE((*vm2)->SetInput("x", *Tensor::FromVector<float>(DType::kF32, {3}, {0, 0, 0})).ok());
  ASSERT_TRUE((*vm2)->Run().ok());
  EXPECT_EQ(counters.uploads, 1);
  EXPECT_EQ(counters.contexts, 2);
}

TEST_F(DeviceVmTest, GrowableDeviceTensorsAppendAndGrow) {
  std::shared_ptr<const Executable> exe = LoadAssembly(kProgram);
  ASSERT_NE(exe, nullptr);
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe);
  ASSERT_TRUE(vm.ok());
  const absl::Status s = (*vm)->Run({.function = "grow"});
  ASSERT_TRUE(s.ok()) << s;
  absl::StatusOr<Tensor> g = (*vm)->GetOutput("g", "grow");
  ASSERT_TRUE(g.ok());
  EXPECT_EQ(g->device(), Device::kCUDA);
  absl::StatusOr<Tensor> host = (*vm)->ToHost(*g);
  ASSERT_TRUE(host.ok());
  EXPECT_THAT(Floats(*host), ElementsAre(0, 0, 1, 1, 2, 2, 3, 3, 4, 4));
  EXPECT_GE(counters.from_host, 10);  // every write to a device tensor
}

TEST_F(DeviceVmTest, InvokeMovesInputsToTheKernelsDevice) {
  std::shared_ptr<const Executable> exe = LoadAssembly(kProgram);
  ASSERT_NE(exe, nullptr);
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE(
      (*vm)->SetInput("x", *Tensor::FromVector<float>(DType::kF32, {3}, {1, -2, 3}), "mixed").ok());
  const absl::Status s = (*vm)->Run({.function = "mixed"});
  ASSERT_TRUE(s.ok()) << s;
  absl::StatusOr<Tensor> r = (*vm)->GetOutput("r", "mixed");
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->device(), Device::kCPU);  // Neg ran on the host, on a host copy of Twice's output
  EXPECT_THAT(Floats(*r), ElementsAre(-2, 4, -6));
}

TEST_F(DeviceVmTest, HostKernelsNeverWriteDeviceTensors) {
  std::shared_ptr<const Executable> exe = LoadAssembly(kProgram);
  ASSERT_NE(exe, nullptr);
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe);
  ASSERT_TRUE(vm.ok());
  const absl::Status s = (*vm)->Run({.function = "host_kernel_device_output"});
  EXPECT_TRUE(absl::IsFailedPrecondition(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("a host kernel writes host tensors"));
}

TEST_F(DeviceVmTest, DeviceFailuresAreErrorsAndTheVmStaysUsable) {
  std::shared_ptr<const Executable> exe = LoadAssembly(kProgram);
  ASSERT_NE(exe, nullptr);
  VmOptions options;
  options.device_memory_limit = 1;  // every device allocation fails
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe, options);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE((*vm)->SetInput("x", *Tensor::FromVector<float>(DType::kF32, {3}, {1, 2, 3})).ok());
  absl::Status s = (*vm)->Run();
  EXPECT_TRUE(absl::IsResourceExhausted(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("alloc_storage"));

  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm2 = VirtualMachine::Create(exe);
  ASSERT_TRUE(vm2.ok());
  ASSERT_TRUE((*vm2)->SetInput("x", *Tensor::FromVector<float>(DType::kF32, {3}, {1, 2, 3})).ok());
  counters.fail_copies = true;
  s = (*vm2)->Run();
  EXPECT_TRUE(absl::IsInternal(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("copy"));
  counters.fail_copies = false;
  s = (*vm2)->Run();
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(DeviceVmTest, TheFactoryFailingIsTheRunsError) {
  SetDeviceContextFactoryForTesting(
      Device::kCUDA,
      [](const DeviceContextOptions&) -> absl::StatusOr<std::unique_ptr<DeviceContext>> {
        return absl::UnavailableError("no CUDA device available: testing");
      });
  std::shared_ptr<const Executable> exe = LoadAssembly(kProgram);
  ASSERT_NE(exe, nullptr);
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe);
  ASSERT_TRUE(vm.ok());
  ASSERT_TRUE((*vm)->SetInput("x", *Tensor::FromVector<float>(DType::kF32, {3}, {1, 2, 3})).ok());
  const absl::Status s = (*vm)->Run();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(),
              HasSubstr("function 'main' pc 0 (alloc_storage): no CUDA device available"));
}

}  // namespace
}  // namespace dynvm
