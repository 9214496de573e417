// Loading the CUDA module (allocator/cuda_module.h).
//
// In every build: the loader against stand-in modules (tests/fake_cuda_module.cc) with the right
// and a wrong ABI version, and a file that does not exist. In a CUDA build: the real module
// (found next to the build's tools, its kernels registered), then vm-run copied into a
// temporary copy of the build's layout (<root>/build/tools/vm-run, <root>/build/lib/) running an
// executable compiled for cuda: with the module (found: the no-device error, or a run on a
// GPU), with the module renamed away (not found: the error names where it looked and how to
// get it), with a wrong-ABI module in its place, and with DYNVM_CUDA_MODULE naming the fake.
// In every build, a CPU run of vm-run loads neither the module nor a CUDA library (the dynamic
// loader's log says so).
#include "allocator/cuda_module.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "allocator/cuda_allocator.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "isa/assembler.h"
#include "kernels/registry.h"

namespace dynvm {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;
using ::testing::Not;

TEST(CudaModuleLoaderTest, LoadsAModuleWithTheRightAbiVersion) {
  absl::StatusOr<CudaModule> m = LoadCudaModuleFrom(DYNVM_FAKE_CUDA_MODULE);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(m->path, DYNVM_FAKE_CUDA_MODULE);
  ASSERT_NE(m->api, nullptr);
  const absl::Status s = m->api->device_available();
  EXPECT_TRUE(absl::IsUnavailable(s)) << s;
  EXPECT_THAT(s.message(), HasSubstr("fake dynvm CUDA module"));
}

TEST(CudaModuleLoaderTest, RefusesAnotherAbiVersion) {
  absl::StatusOr<CudaModule> m = LoadCudaModuleFrom(DYNVM_WRONG_ABI_CUDA_MODULE);
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsUnavailable(m.status())) << m.status();
  EXPECT_THAT(
      m.status().message(),
      HasSubstr(absl::StrCat("has ABI version ", kCudaModuleAbiVersion + 1000,
                             ", but this dynvm needs ABI version ", kCudaModuleAbiVersion)));
}

TEST(CudaModuleLoaderTest, AMissingFileIsUnavailable) {
  absl::StatusOr<CudaModule> m = LoadCudaModuleFrom("/nonexistent/libdynvm_cuda.so");
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsUnavailable(m.status())) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("/nonexistent/libdynvm_cuda.so could not be loaded"));
}

TEST(CudaModuleLoaderTest, SearchesNextToTheProgramThenLibFolders) {
  ASSERT_EQ(unsetenv(kCudaModuleEnvVar), 0);
  const std::vector<std::string> c = CudaModuleCandidates();
  ASSERT_GE(c.size(), 2u);
  const fs::path self = fs::canonical("/proc/self/exe");
  EXPECT_EQ(c[0], (self.parent_path() / kCudaModuleFileName).string());
  const std::string build_lib =
      (self.parent_path().parent_path() / "lib" / kCudaModuleFileName).string();
  EXPECT_NE(std::find(c.begin(), c.end(), build_lib), c.end()) << build_lib;
  ASSERT_EQ(setenv(kCudaModuleEnvVar, "/some/where/m.so", 1), 0);
  EXPECT_THAT(CudaModuleCandidates(), ::testing::ElementsAre("/some/where/m.so"));
  ASSERT_EQ(unsetenv(kCudaModuleEnvVar), 0);
}

struct Result {
  int exit_code = -1;
  std::string output;  // stdout and stderr
};

Result RunCommand(const std::string& command) {
  Result r;
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  const int status = pclose(p);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A CPU program run by vm-run: the dynamic loader's log shows that no CUDA library, and not the
// module, was loaded (in a CUDA-enabled build too).
constexpr char kCpuProgram[] = R"(
.const f32 [2,2] name="w" weight values:[1, -2, 3, -4]
.kernel "Relu" in(f32) out(f32)

.function main
  .params 0 0
  .oregs tensor:f32 storage tensor:f32
  .oresults tensor:f32
  .sites 1
  .entry
  .output y [2,2]
  load_const %o0, c0
  alloc_storage %o1, 16, cpu
  alloc_tensor %o2, %o1, 0, f32, [2, 2]
  invoke k0, #0, (%o0), (%o2)
  ret (%o2), ()
.end
)";

TEST(CudaModuleCpuPathTest, ACpuRunLoadsNoCudaLibrary) {
  const fs::path file =
      fs::temp_directory_path() / absl::StrCat("dynvm_cpu_path_", getpid(), ".dvm");
  absl::StatusOr<std::string> bytes = isa::AssembleToBytes(kCpuProgram);
  ASSERT_TRUE(bytes.ok()) << bytes.status();
  std::ofstream(file, std::ios::binary) << *bytes;
  const Result r = RunCommand(absl::StrCat("LD_DEBUG=libs ", DYNVM_VM_RUN, " ", file.string()));
  fs::remove(file);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("y f32 [2,2]"));
  EXPECT_THAT(r.output, HasSubstr("calling init"));  // the loader's log is there
  EXPECT_THAT(r.output, Not(HasSubstr(kCudaModuleFileName)));
  EXPECT_THAT(r.output, Not(HasSubstr("libcudart")));
  EXPECT_THAT(r.output, Not(HasSubstr("libcublas")));
}

#if defined(DYNVM_CUDA_MODULE_FILE)

TEST(CudaModuleLoaderTest, TheBuildsModuleIsFoundAndRegistersTheCudaKernels) {
  absl::StatusOr<const CudaModule*> m = LoadCudaModule();
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ(fs::canonical((*m)->path), fs::canonical(DYNVM_CUDA_MODULE_FILE));
  std::vector<KernelRegistration> registrations;
  (*m)->api->kernel_registrations(&registrations);
  ASSERT_FALSE(registrations.empty());
  for (const KernelRegistration& r : registrations) {
    EXPECT_EQ(r.device, Device::kCUDA) << r.op;
    EXPECT_EQ(r.backend, "cuda") << r.op;
  }
  EXPECT_TRUE(KernelRegistry::Global().HasOp("", "MatMul", Device::kCUDA));
}

// y = relu(w) on the device, copied back: an executable compiled for cuda with no inputs.
constexpr char kCudaProgram[] = R"(
.const f32 [2,2] name="w" weight values:[1, -2, 3, -4]
.kernel "Relu" in(f32) out(f32) device=cuda

.function main
  .params 0 0
  .oregs tensor:f32 storage tensor:f32 storage tensor:f32
  .oresults tensor:f32
  .sites 1
  .entry
  .output y [2,2]
  load_const %o0, c0
  alloc_storage %o1, 16, cuda
  alloc_tensor %o2, %o1, 0, f32, [2, 2]
  invoke k0, #0, (%o0), (%o2)
  alloc_storage %o3, 16, cpu
  alloc_tensor %o4, %o3, 0, f32, [2, 2]
  copy %o4, %o2
  ret (%o4), ()
.end
)";

// A copy of the build's layout in a fresh temporary folder: <root>/build/tools/vm-run and
// <root>/build/lib/libdynvm_cuda.so, and the cuda executable in <root>.
class CopiedLayoutTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_EQ(unsetenv(kCudaModuleEnvVar), 0);
    root_ = fs::temp_directory_path() /
            absl::StrCat("dynvm_cuda_module_test_", getpid(), "_",
                         ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_ / "build" / "tools");
    fs::create_directories(root_ / "build" / "lib");
    fs::copy_file(DYNVM_VM_RUN, vm_run());
    fs::copy_file(DYNVM_CUDA_MODULE_FILE, module());
    absl::StatusOr<std::string> bytes = isa::AssembleToBytes(kCudaProgram);
    ASSERT_TRUE(bytes.ok()) << bytes.status();
    std::ofstream(program(), std::ios::binary) << *bytes;
  }
  void TearDown() override { fs::remove_all(root_); }

  fs::path vm_run() const { return root_ / "build" / "tools" / "vm-run"; }
  fs::path module() const { return root_ / "build" / "lib" / kCudaModuleFileName; }
  fs::path program() const { return root_ / "relu.dvm"; }
  Result VmRun(const std::string& args, const std::string& env = "") const {
    return RunCommand(
        absl::StrCat(env, " ", vm_run().string(), " ", program().string(), " ", args));
  }

  fs::path root_;
};

TEST_F(CopiedLayoutTest, TheModuleIsFoundInLibAndTheDeviceAskedFor) {
  const Result r = VmRun("--device cuda");
  if (CudaDeviceAvailable().ok()) {  // a GPU: the program runs
    EXPECT_EQ(r.exit_code, 0) << r.output;
    EXPECT_THAT(r.output, HasSubstr("3"));
    return;
  }
  EXPECT_NE(r.exit_code, 0) << r.output;
  EXPECT_THAT(r.output, HasSubstr("no CUDA device available"));
  EXPECT_THAT(r.output, Not(HasSubstr("CUDA module")));
  // Without --device: the executable compiled for cuda loads, then its run needs the device.
  const Result plain = VmRun("");
  EXPECT_NE(plain.exit_code, 0) << plain.output;
  EXPECT_THAT(plain.output, HasSubstr("no CUDA device available"));
}

TEST_F(CopiedLayoutTest, AMissingModuleIsAClearError) {
  fs::rename(module(), module().string() + ".renamed");
  for (const char* args : {"--device cuda", ""}) {
    SCOPED_TRACE(args);
    const Result r = VmRun(args);
    EXPECT_EQ(r.exit_code, 1) << r.output;
    EXPECT_THAT(r.output, HasSubstr("the CUDA module libdynvm_cuda.so was not found"));
    EXPECT_THAT(r.output, HasSubstr(module().string()));  // where it looked
    EXPECT_THAT(r.output, HasSubstr("-DDYNVM_WITH_CUDA=ON"));
    EXPECT_THAT(r.output, HasSubstr(kCudaModuleEnvVar));
  }
}

TEST_F(CopiedLayoutTest, AWrongAbiVersionIsRefused) {
  fs::remove(module());
  fs::copy_file(DYNVM_WRONG_ABI_CUDA_MODULE, module());
  const Result r = VmRun("--device cuda");
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr(absl::StrCat(module().string(), " has ABI version ",
                                               kCudaModuleAbiVersion + 1000)));
}

TEST_F(CopiedLayoutTest, TheEnvironmentVariableNamesTheModule) {
  const Result r =
      VmRun("--device cuda", absl::StrCat(kCudaModuleEnvVar, "=", DYNVM_FAKE_CUDA_MODULE));
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_THAT(r.output, HasSubstr("fake dynvm CUDA module"));
  const Result missing =
      VmRun("--device cuda", absl::StrCat(kCudaModuleEnvVar, "=", root_.string(), "/nowhere.so"));
  EXPECT_EQ(missing.exit_code, 1) << missing.output;
  EXPECT_THAT(missing.output, HasSubstr("nowhere.so, as DYNVM_CUDA_MODULE says"));
}

#else  // a build without CUDA

TEST(CudaModuleLoaderTest, ABuildWithoutCudaLoadsNoModule) {
  absl::StatusOr<const CudaModule*> m = LoadCudaModule();
  ASSERT_FALSE(m.ok());
  EXPECT_TRUE(absl::IsUnimplemented(m.status())) << m.status();
  EXPECT_THAT(m.status().message(), HasSubstr("this build has no CUDA device support"));
}

#endif

}  // namespace
}  // namespace dynvm
