// One copy of the weights: a model with ~100 MB of weights is compiled to a file, loaded by
// mapping it (resident memory does not grow by the weights), and run by 8 VMs on 8 threads
// through `vm-run --instances 8`, whose peak resident memory must stay below
// baseline + weights + 8 x activations + 20% (8 separate loads would pay 8 x the weights).
// Also: two executables on one .dvw weights file, and a compressed segment loaded twice, hold
// the weights once.
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "gtest/gtest.h"
#include "schema/mapped_file.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

constexpr int64_t kWidth = 2048;
constexpr int kLayers = 6;  // 6 x 2048 x 2048 x 4 bytes = 96 MiB of weights

int64_t ResidentBytes() {
  FILE* f = std::fopen("/proc/self/statm", "r");
  long pages = 0, resident = 0;
  if (f != nullptr) {
    if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
    std::fclose(f);
  }
  return static_cast<int64_t>(resident) * sysconf(_SC_PAGESIZE);
}

absl::StatusOr<compiler::CompileResult> CompileBigModel(
    const compiler::CompileOptions& options = {}) {
  compiler::Module m;
  compiler::GraphBuilder b(m.AddFunction("main"));
  compiler::Value* v = b.Input("x", DType::kF32, {1, kWidth});
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> dist(-0.02f, 0.02f);
  for (int l = 0; l < kLayers; ++l) {
    Tensor w = *Tensor::Empty(DType::kF32, {kWidth, kWidth});
    for (int64_t i = 0; i < w.numel(); ++i) w.data<float>()[i] = dist(rng);
    v = b.Op("Tanh", {b.Op("MatMul", {v, b.Constant(w, absl::StrCat("w", l), true)})});
  }
  b.Output("y", v);
  return compiler::Compile(m, options);
}

// Runs `exe` once on a constant input (every weight page is read).
void RunOnce(const std::shared_ptr<const Executable>& exe) {
  absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe);
  ASSERT_TRUE(vm.ok()) << vm.status();
  ASSERT_TRUE((*vm)
                  ->SetInput("x", *Tensor::FromVector<float>(DType::kF32, {1, kWidth},
                                                             std::vector<float>(kWidth, 0.5f)))
                  .ok());
  absl::Status s = (*vm)->Run();
  ASSERT_TRUE(s.ok()) << s;
}

std::string BigModelPath() {
  static const std::string path = [] {
    const std::string p =
        (std::filesystem::temp_directory_path() / absl::StrCat("dynvm_sharing_", getpid(), ".dvm"))
            .string();
    absl::StatusOr<compiler::CompileResult> r = CompileBigModel();
    if (!r.ok() || !schema::WriteStringToFile(p, r->bytes).ok()) return std::string();
    return p;
  }();
  return path;
}

TEST(SharingTest, LoadingMapsTheWeightsWithoutReadingThem) {
  const std::string path = BigModelPath();
  ASSERT_FALSE(path.empty());
  const int64_t before = ResidentBytes();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::Load(path);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  ASSERT_TRUE(exe.ok()) << exe.status();
  const int64_t grown = ResidentBytes() - before;
  std::printf("load of %.1f MiB of weights: %.2f ms, resident memory grew by %.2f MiB\n",
              (*exe)->weight_bytes() / 1048576.0, ms, grown / 1048576.0);
  EXPECT_GE((*exe)->weight_bytes(), kLayers * kWidth * kWidth * 4);
  // The constants are mapped, not read: growth is the header, code and tables only.
  EXPECT_LT(grown, 8 << 20);
}

// Two executables (model parts, batch variants...) that refer to one weights file share one
// mapping: loaded and run (every weight page read), resident memory grows by the weights once,
// not twice. A compressed segment is decompressed once for two loads in the same way.
TEST(SharingTest, ExecutablesReferringToOneWeightsFileShareOneCopy) {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / absl::StrCat("dynvm_sharing_w_", getpid());
  std::filesystem::create_directories(dir);
  compiler::CompileOptions o;
  o.weights_file_name = "big.dvw";
  for (const char* part : {"a", "b"}) {
    o.producer = absl::StrCat("part ", part);  // two different executables, one weights file
    absl::StatusOr<compiler::CompileResult> r = CompileBigModel(o);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(
        schema::WriteStringToFile((dir / absl::StrCat(part, ".dvm")).string(), r->bytes).ok());
    ASSERT_TRUE(schema::WriteStringToFile((dir / "big.dvw").string(), r->weights).ok());
  }
  const double weights_mib = kLayers * kWidth * kWidth * 4 / 1048576.0;
  {
    const int64_t before = ResidentBytes();
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::shared_ptr<const Executable>> a =
        Executable::Load((dir / "a.dvm").string());
    const double load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    absl::StatusOr<std::shared_ptr<const Executable>> b =
        Executable::Load((dir / "b.dvm").string());
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*a)->constant_segment(), (*b)->constant_segment());
    const double loaded_mib = (ResidentBytes() - before) / 1048576.0;
    RunOnce(*a);
    RunOnce(*b);
    const double grown_mib = (ResidentBytes() - before) / 1048576.0;
    std::printf(
        "two executables on one %.1f MiB weights file: load %.2f ms, resident +%.2f MiB after "
        "loading, +%.1f MiB after running both (two copies would be +%.1f MiB)\n",
        weights_mib, load_ms, loaded_mib, grown_mib, 2 * weights_mib);
    EXPECT_LT(loaded_mib, 8);
    EXPECT_LT(grown_mib, 1.25 * weights_mib);
  }
  {
    compiler::CompileOptions z;
    z.compress = true;
    absl::StatusOr<compiler::CompileResult> r = CompileBigModel(z);
    ASSERT_TRUE(r.ok()) << r.status();
    const std::string path = (dir / "z.dvm").string();
    ASSERT_TRUE(schema::WriteStringToFile(path, r->bytes).ok());
    const int64_t before = ResidentBytes();
    const auto start = std::chrono::steady_clock::now();
    absl::StatusOr<std::shared_ptr<const Executable>> a = Executable::Load(path);
    const double load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    absl::StatusOr<std::shared_ptr<const Executable>> b = Executable::Load(path);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*a)->constant_segment(), (*b)->constant_segment());
    RunOnce(*a);
    RunOnce(*b);
    const double grown_mib = (ResidentBytes() - before) / 1048576.0;
    std::printf(
        "compressed: %.1f MiB stored for %.1f MiB of weights (ratio %.3f); first load "
        "(decompression) %.1f ms; two loads and runs: resident +%.1f MiB\n",
        r->bytes.size() / 1048576.0, weights_mib, r->bytes.size() / 1048576.0 / weights_mib,
        load_ms, grown_mib);
    EXPECT_LT(grown_mib, 1.25 * weights_mib);
  }
  std::filesystem::remove_all(dir);
}

TEST(SharingTest, EightInstancesShareOneCopyOfTheWeights) {
  const std::string path = BigModelPath();
  ASSERT_FALSE(path.empty());
  const std::string vm_run = VM_RUN_PATH;
  const std::string input = path + ".x.npy";
  {
    // A tiny input written as .npy by hand: header + 2048 floats.
    std::string header = "{'descr': '<f4', 'fortran_order': False, 'shape': (1, 2048), }";
    while ((10 + header.size() + 1) % 64 != 0) header += ' ';
    header += '\n';
    std::string file = "\x93NUMPY\x01";
    file += '\0';
    file += static_cast<char>(header.size() & 0xFF);
    file += static_cast<char>(header.size() >> 8);
    file += header;
    std::vector<float> x(kWidth, 0.5f);
    file.append(reinterpret_cast<const char*>(x.data()), x.size() * 4);
    ASSERT_TRUE(schema::WriteStringToFile(input, file).ok());
  }
  const std::string cmd =
      absl::StrCat(vm_run, " ", path, " --input x=", input, " --instances 8 2>&1");
  FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[512];
  while (std::fgets(buf, sizeof(buf), p) != nullptr) out += buf;
  const int rc = pclose(p);
  std::printf("%s", out.c_str());
  ASSERT_EQ(WEXITSTATUS(rc), 0) << out;
  EXPECT_NE(out.find("instances=8"), std::string::npos);
  for (int i = 0; i < 8; ++i) {
    EXPECT_NE(out.find(absl::StrCat("instance ", i, ": outputs equal")), std::string::npos) << out;
  }
  double peak = 0, baseline = 0, weights = 0;
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    for (absl::string_view field : absl::StrSplit(line, ' ')) {
      std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(field, absl::MaxSplits('=', 1));
      if (kv.first == "peak_rss_mb") (void)absl::SimpleAtod(kv.second, &peak);
      if (kv.first == "baseline_rss_mb") (void)absl::SimpleAtod(kv.second, &baseline);
      if (kv.first == "weights_mb") (void)absl::SimpleAtod(kv.second, &weights);
    }
  }
  ASSERT_GT(weights, 90);
  // Activations per instance: a few [1, 2048] f32 vectors (the arena) plus the output.
  const double activations_mb = 8 * 3 * kWidth * 4 / 1048576.0;
  const double bar = baseline + (weights + activations_mb) * 1.2;
  std::printf(
      "peak %.1f MiB, baseline %.1f MiB, weights %.1f MiB: bar %.1f MiB (8 loads would be %.1f "
      "MiB)\n",
      peak, baseline, weights, bar, baseline + 8 * weights);
  EXPECT_LT(peak, bar);
  std::remove(input.c_str());
}

}  // namespace
}  // namespace dynvm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (!dynvm::BigModelPath().empty()) std::remove(dynvm::BigModelPath().c_str());
  return rc;
}
