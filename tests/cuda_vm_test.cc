// The VM on the CUDA device, with programs in dynvm assembly: device storages, copies both ways,
// a cuBLAS kernel fed a constant (uploaded once, shared by every VM), read_* sync points,
// growable device tensors, emit and outputs left on the device, and errors that leave the VM
// usable. The CudaVm* cases need a device and skip with a message without one.
//
// The NoDevice* cases run where no device can be used: ctest runs them with
// CUDA_VISIBLE_DEVICES empty (so on a GPU machine too) and they check the graceful errors: a
// clear message naming the instruction, and a VM that keeps working. In a build without CUDA
// they check the build's own error.
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "allocator/cuda_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/assembler.h"
#include "kernels/device_context.h"
#include "kernels/tensor.h"
#include "tests/vm_fixture.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

using testing::AssembleAndLoad;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::vector<float> Floats(const Tensor& t) {
  EXPECT_EQ(t.device(), Device::kCPU);
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}

// y = relu(x @ w) on the device: x is copied in, w is a constant, y is copied back.
constexpr absl::string_view kDeviceProgram = R"(
.string "device"
.const f32 [3,2] name="w" weight values:[1, -2, 3, 4, 5, -6]
.kernel "MatMul" in(f32, f32) out(f32) device=cuda
.kernel "Relu" in(f32) out(f32) device=cuda
.kernel "Gather" in(f32, i64) out(f32) device=cuda

.function main
  .params 1 0
  .sregs f64 f64 bool
  .oregs tensor:f32 storage tensor:f32 tensor:f32 storage tensor:f32 storage tensor:f32 storage tensor:f32
  .oresults tensor:f32
  .sites 2
  .entry
  .input x [2,3]
  .output y [2,2]
  alloc_storage %o1, 24, cuda
  alloc_tensor %o2, %o1, 0, f32, [2, 3]
  copy %o2, %o0
  load_const %o3, c0
  alloc_storage %o4, 16, cuda
  alloc_tensor %o5, %o4, 0, f32, [2, 2]
  invoke k0, #0, (%o2, %o3), (%o5)
  ; a sync point: x @ w [0, 0] = 1 - 6 + 15
  read_f %s0, %o5, 0
  const_f %s1, 10
  eq_f %s2, %s0, %s1
  assert %s2, str0
  alloc_storage %o6, 16, cuda
  alloc_tensor %o7, %o6, 0, f32, [2, 2]
  invoke k1, #1, (%o5), (%o7)
  alloc_storage %o8, 16, cpu
  alloc_tensor %o9, %o8, 0, f32, [2, 2]
  copy %o9, %o7
  ret (%o9), ()
.end

.function grow_on_device
  .params 0 0
  .sregs i64 f64 f64 bool i64 i64
  .oregs tensor:f32 storage tensor:f32
  .entry
  alloc_growable %o0, f32, cuda, 0, 2, [0, 2]
  alloc_storage %o1, 8, cuda
  alloc_tensor %o2, %o1, 0, f32, [1, 2]
  loop %s0, 5
    i2f %s1, %s0
    write %o2, 0, %s1
    write %o2, 1, %s1
    append %o0, %o2, 0
  endloop
  dim %s4, %o0, 0
  const_i %s5, 5
  eq_i %s3, %s4, %s5
  assert %s3, str0
  read_f %s1, %o0, 7
  const_f %s2, 3
  eq_f %s3, %s1, %s2
  assert %s3, str0
  ret (), ()
.end

.function left_on_device
  .params 0 0
  .sregs f64
  .oregs storage tensor:f32
  .oresults tensor:f32
  .entry
  .output z [3]
  alloc_storage %o0, 12, cuda
  alloc_tensor %o1, %o0, 0, f32, [3]
  const_f %s0, 7
  write %o1, 0, %s0
  write %o1, 1, %s0
  write %o1, 2, %s0
  emit %o1, 0
  ret (%o1), ()
.end

.function read_out_of_range
  .params 0 0
  .sregs f64
  .oregs storage tensor:f32
  .entry
  alloc_storage %o0, 12, cuda
  alloc_tensor %o1, %o0, 0, f32, [3]
  read_f %s0, %o1, 3
  ret (), ()
.end

.function gather_out_of_range
  .params 0 0
  .sregs i64
  .oregs tensor:f32 storage tensor:i64 storage tensor:f32
  .sites 1
  .entry
  load_const %o0, c0
  alloc_storage %o1, 8, cuda
  alloc_tensor %o2, %o1, 0, i64, [1]
  const_i %s0, 3
  write %o2, 0, %s0
  alloc_storage %o3, 8, cuda
  alloc_tensor %o4, %o3, 0, f32, [1, 2]
  invoke k2, #0, (%o0, %o2), (%o4)
  ret (), ()
.end
)";

class CudaVmTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (absl::Status s = CudaDeviceAvailable(); !s.ok()) GTEST_SKIP() << s.message();
    absl::StatusOr<std::shared_ptr<const Executable>> exe = AssembleAndLoad(kDeviceProgram);
    ASSERT_TRUE(exe.ok()) << exe.status();
    exe_ = *exe;
  }
  std::unique_ptr<VirtualMachine> MakeVm() {
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe_);
    EXPECT_TRUE(vm.ok()) << vm.status();
    return vm.ok() ? *std::move(vm) : nullptr;
  }
  std::shared_ptr<const Executable> exe_;
};

TEST_F(CudaVmTest, CopiesInRunsCublasAndCopiesBack) {
  std::unique_ptr<VirtualMachine> vm = MakeVm();
  ASSERT_NE(vm, nullptr);
  Tensor x = *Tensor::FromVector<float>(DType::kF32, {2, 3}, {1, -2, 3, -1, 0, 1});
  for (int run = 0; run < 3; ++run) {
    ASSERT_TRUE(vm->SetInput("x", x).ok());
    const absl::Status s = vm->Run();
    ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<Tensor> y = vm->GetOutput("y");
    ASSERT_TRUE(y.ok());
    EXPECT_THAT(Floats(*y), ElementsAre(10, 0, 4, 0));
  }
  const AllocatorStats st = vm->device_memory_stats();
  EXPECT_GT(st.allocs, 0);
  EXPECT_GT(st.pool_hits, 0);  // later runs reuse the first run's blocks
  vm->Trim();
}

TEST_F(CudaVmTest, ConstantsAreUploadedOncePerExecutable) {
  std::unique_ptr<VirtualMachine> a = MakeVm();
  std::unique_ptr<VirtualMachine> b = MakeVm();
  ASSERT_TRUE(a && b);
  Tensor x = *Tensor::FromVector<float>(DType::kF32, {2, 3}, {1, -2, 3, -1, 0, 1});
  for (VirtualMachine* vm : {a.get(), b.get()}) {
    ASSERT_TRUE(vm->SetInput("x", x).ok());
    ASSERT_TRUE(vm->Run().ok());
  }
  // Whatever context asks, the executable hands out the one device copy it made first.
  absl::StatusOr<std::unique_ptr<DeviceContext>> d = CreateDeviceContext(Device::kCUDA);
  ASSERT_TRUE(d.ok()) << d.status();
  absl::StatusOr<StorageRef> c1 = exe_->DeviceConstants(**d);
  absl::StatusOr<StorageRef> c2 = exe_->DeviceConstants(**d);
  ASSERT_TRUE(c1.ok() && c2.ok());
  EXPECT_EQ(c1->get(), c2->get());
  EXPECT_EQ((*c1)->device(), Device::kCUDA);
  EXPECT_FALSE((*c1)->writable());
  EXPECT_GE((*c1)->ref_count(), 3);  // the executable's, each VM's, and ours
}

TEST_F(CudaVmTest, GrowableTensorsAppendOnTheDevice) {
  std::unique_ptr<VirtualMachine> vm = MakeVm();
  ASSERT_NE(vm, nullptr);
  const absl::Status s = vm->Run({.function = "grow_on_device"});
  EXPECT_TRUE(s.ok()) << s;
}

TEST_F(CudaVmTest, EmitAndOutputsLeftOnTheDevice) {
  std::unique_ptr<VirtualMachine> vm = MakeVm();
  ASSERT_NE(vm, nullptr);
  std::vector<float> emitted;
  RunOptions run;
  run.function = "left_on_device";
  run.on_emit = [&](int, const Tensor& t) -> absl::Status {
    emitted = Floats(t);  // emit hands the host a host copy
    return absl::OkStatus();
  };
  const absl::Status s = vm->Run(run);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(emitted, ElementsAre(7, 7, 7));
  absl::StatusOr<Tensor> z = vm->GetOutput("z", "left_on_device");
  ASSERT_TRUE(z.ok());
  EXPECT_EQ(z->device(), Device::kCUDA);
  absl::StatusOr<Tensor> host = vm->ToHost(*z);
  ASSERT_TRUE(host.ok()) << host.status();
  EXPECT_THAT(Floats(*host), ElementsAre(7, 7, 7));
}

TEST_F(CudaVmTest, ErrorsLeaveTheVmUsable) {
  std::unique_ptr<VirtualMachine> vm = MakeVm();
  ASSERT_NE(vm, nullptr);
  absl::Status s = vm->Run({.function = "read_out_of_range"});
  EXPECT_TRUE(absl::IsOutOfRange(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("read_f"));
  s = vm->Run({.function = "gather_out_of_range"});
  EXPECT_TRUE(absl::IsInvalidArgument(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("invoke"));
  Tensor x = *Tensor::FromVector<float>(DType::kF32, {2, 3}, {1, -2, 3, -1, 0, 1});
  ASSERT_TRUE(vm->SetInput("x", x).ok());
  s = vm->Run();
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_THAT(Floats(*vm->GetOutput("y")), ElementsAre(10, 0, 4, 0));
}

// ---- without a device ----

constexpr absl::string_view kHostAndDevice = R"(
.string "host"
.function alloc_on_device
  .params 0 0
  .oregs storage
  .entry
  alloc_storage %o0, 64, cuda
  ret (), ()
.end

.function grow_on_device
  .params 0 0
  .oregs tensor:f32
  .entry
  alloc_growable %o0, f32, cuda, 0, 8, [0, 2]
  ret (), ()
.end

.function on_host
  .params 0 0
  .sregs f64 f64 bool
  .oregs storage tensor:f32
  .entry
  alloc_storage %o0, 4, cpu
  alloc_tensor %o1, %o0, 0, f32, [1]
  const_f %s0, 2
  write %o1, 0, %s0
  read_f %s1, %o1, 0
  eq_f %s2, %s0, %s1
  assert %s2, str0
  ret (), ()
.end
)";

TEST(NoDeviceTest, DeviceAllocationFailsClearlyAndTheVmStaysUsable) {
  const absl::Status available = CudaDeviceAvailable();
  if (available.ok()) GTEST_SKIP() << "a CUDA device is usable (run with CUDA_VISIBLE_DEVICES=)";
  absl::StatusOr<std::shared_ptr<const Executable>> exe = AssembleAndLoad(kHostAndDevice);
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  for (const char* function : {"alloc_on_device", "grow_on_device"}) {
    const absl::Status s = (*vm)->Run({.function = function});
    ASSERT_FALSE(s.ok());
    EXPECT_EQ(s.code(), available.code()) << s;
    EXPECT_THAT(s.message(),
                HasSubstr(CudaBuildEnabled() ? "no CUDA device available"
                                             : "this build has no CUDA device support"));
    EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("function '", function, "' pc")));
    const absl::Status ok = (*vm)->Run({.function = "on_host"});
    EXPECT_TRUE(ok.ok()) << ok;
  }
  EXPECT_EQ((*vm)->device_memory_stats().allocs, 0);
}

TEST(NoDeviceTest, DeviceKernelsLoadOnlyInACudaBuildAndFailAtRun) {
  if (CudaDeviceAvailable().ok()) GTEST_SKIP() << "a CUDA device is usable";
  absl::StatusOr<std::shared_ptr<const Executable>> exe = AssembleAndLoad(kDeviceProgram);
  if (!CudaBuildEnabled()) {
    ASSERT_FALSE(exe.ok());
    EXPECT_TRUE(absl::IsUnimplemented(exe.status())) << exe.status();
    EXPECT_THAT(exe.status().message(), HasSubstr("this build has no CUDA device support"));
    return;
  }
  // Loading binds the CUDA kernels without touching the device.
  ASSERT_TRUE(exe.ok()) << exe.status();
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  Tensor x = *Tensor::FromVector<float>(DType::kF32, {2, 3}, {1, -2, 3, -1, 0, 1});
  ASSERT_TRUE((*vm)->SetInput("x", x).ok());
  const absl::Status s = (*vm)->Run();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("no CUDA device available"));
}

}  // namespace
}  // namespace dynvm
