// One copy of the weights: a model with ~100 MB of weights is compiled to a file, loaded by
// mapping it (resident memory does not grow by the weights), and run by 8 VMs on 8 threads
// through `vm-run --instances 8`, whose peak resident memory (VmHWM, measured by the kernel
// for the child process) must exceed the one-instance run's by less than 20% of the weights
// (8 separate loads would add 7 x the weights).
// Also: two executables on one .dvw weights file, and a compressed segment loaded twice, hold
// the weights once.
#include <fcntl.h>
#include <sys/resource.h>
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

[[maybe_unused]] int64_t ResidentBytes() {  // not in sharing_instances_test
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
[[maybe_unused]] void RunOnce(const std::shared_ptr<const Executable>& exe) {
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

#ifndef DYNVM_SHARING_INSTANCES_ONLY  // sharing_instances_test: the multi-VM test alone
// (The mapping: ConstantPages::kMapped. The default, kAuto, reads a file of 64 MiB or more into
// 2 MB pages at load instead, one copy per process: docs/executable-format.md.)
LoadOptions Mapped() {
  LoadOptions o;
  o.constant_pages = ConstantPages::kMapped;
  return o;
}

TEST(SharingTest, LoadingMapsTheWeightsWithoutReadingThem) {
  const std::string path = BigModelPath();
  ASSERT_FALSE(path.empty());
  const int64_t before = ResidentBytes();
  const auto start = std::chrono::steady_clock::now();
  absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::Load(path, Mapped());
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
        Executable::Load((dir / "a.dvm").string(), Mapped());
    const double load_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
    absl::StatusOr<std::shared_ptr<const Executable>> b =
        Executable::Load((dir / "b.dvm").string(), Mapped());
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
  {  // In 2 MB pages (kHuge): read at load, still one copy for both executables.
    LoadOptions huge;
    huge.constant_pages = ConstantPages::kHuge;
    const int64_t before = ResidentBytes();
    absl::StatusOr<std::shared_ptr<const Executable>> a =
        Executable::Load((dir / "a.dvm").string(), huge);
    absl::StatusOr<std::shared_ptr<const Executable>> b =
        Executable::Load((dir / "b.dvm").string(), huge);
    ASSERT_TRUE(a.ok()) << a.status();
    ASSERT_TRUE(b.ok()) << b.status();
    EXPECT_EQ((*a)->constant_segment(), (*b)->constant_segment());
    const double loaded_mib = (ResidentBytes() - before) / 1048576.0;
    RunOnce(*a);
    RunOnce(*b);
    const double grown_mib = (ResidentBytes() - before) / 1048576.0;
    std::printf("in 2 MB pages: resident +%.1f MiB after loading both, +%.1f after running\n",
                loaded_mib, grown_mib);
    EXPECT_GT(loaded_mib, 0.75 * weights_mib);  // read at load
    EXPECT_LT(grown_mib, 1.25 * weights_mib);   // once
  }
  std::filesystem::remove_all(dir);
}

#endif  // DYNVM_SHARING_INSTANCES_ONLY

// The child processes' peak resident set size comes from the kernel (wait4's ru_maxrss: the
// VmHWM of the child), not from what the child prints. A forked child's high-water mark starts
// at its parent's resident size, so children are not forked from the test process (which has
// compiled a 96 MiB model by then) but from a small spawner forked at the start of main(),
// before anything is allocated: it reads a command over a pipe, runs it, and writes back the
// exit status and ru_maxrss.
struct ChildRun {
  int exit_status = -1;
  int64_t peak_rss_bytes = 0;
  std::string output;
};

int g_to_spawner = -1, g_from_spawner = -1;

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

// The spawner's loop: a request is a length and that many bytes of NUL-separated arguments,
// the first being the log file; the reply is {exit status, ru_maxrss in KiB}.
[[noreturn]] void SpawnerLoop(int in, int out) {
  for (;;) {
    uint64_t n = 0;
    if (!ReadAll(in, &n, sizeof(n)) || n > (1 << 20)) _exit(0);
    std::string request(n, '\0');
    if (!ReadAll(in, request.data(), n)) _exit(0);
    std::vector<std::string> args = absl::StrSplit(request, '\0');
    int64_t reply[2] = {-1, 0};
    if (args.size() >= 2) {
      std::vector<char*> argv;
      for (size_t k = 1; k < args.size(); ++k) argv.push_back(args[k].data());
      argv.push_back(nullptr);
      const pid_t pid = fork();
      if (pid == 0) {
        const int fd = open(args[0].c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd < 0) _exit(126);
        dup2(fd, 1);
        dup2(fd, 2);
        execv(argv[0], argv.data());
        _exit(127);
      }
      int status = 0;
      struct rusage usage = {};
      if (pid > 0 && wait4(pid, &status, 0, &usage) == pid) {
        reply[0] = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        reply[1] = usage.ru_maxrss;
      }
    }
    if (!WriteAll(out, reply, sizeof(reply))) _exit(0);
  }
}

void StartSpawner() {
  int request[2], reply[2];
  if (pipe(request) != 0 || pipe(reply) != 0) return;
  const pid_t pid = fork();
  if (pid == 0) {
    close(request[1]);
    close(reply[0]);
    SpawnerLoop(request[0], reply[1]);
  }
  close(request[0]);
  close(reply[1]);
  if (pid < 0) return;
  g_to_spawner = request[1];
  g_from_spawner = reply[0];
}

ChildRun RunChild(const std::vector<std::string>& args, const std::string& log) {
  ChildRun r;
  if (g_to_spawner < 0) return r;
  std::string request = log;
  for (const std::string& a : args) request += '\0' + a;
  const uint64_t n = request.size();
  int64_t reply[2];
  if (!WriteAll(g_to_spawner, &n, sizeof(n)) || !WriteAll(g_to_spawner, request.data(), n) ||
      !ReadAll(g_from_spawner, reply, sizeof(reply))) {
    return r;
  }
  r.exit_status = static_cast<int>(reply[0]);
  r.peak_rss_bytes = reply[1] * 1024;  // Linux: kilobytes
  r.output = schema::ReadFileToString(log).value_or("");
  return r;
}

// The value of `key=` in vm-run's output, or -1 when it is missing.
double Field(absl::string_view out, absl::string_view key) {
  for (absl::string_view line : absl::StrSplit(out, '\n')) {
    for (absl::string_view field : absl::StrSplit(line, ' ')) {
      std::pair<absl::string_view, absl::string_view> kv =
          absl::StrSplit(field, absl::MaxSplits('=', 1));
      double v;
      if (kv.first == key && absl::SimpleAtod(kv.second, &v)) return v;
    }
  }
  return -1;
}

// 8 instances on 8 threads against 1: the peak resident memory that the kernel measured for
// each vm-run process differs by the 7 extra instances' activations, not by 7 copies of the
// weights. The single-instance peak holds the weights (every page was read), so the figures
// are live.
TEST(SharingTest, EightInstancesShareOneCopyOfTheWeights) {
  const std::string path = BigModelPath();
  ASSERT_FALSE(path.empty());
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
  const double weights_mib = kLayers * kWidth * kWidth * 4 / 1048576.0;
  ChildRun runs[2];
  const int instances[2] = {1, 8};
  for (int k = 0; k < 2; ++k) {
    runs[k] = RunChild({VM_RUN_PATH, path, "--input", absl::StrCat("x=", input), "--instances",
                        absl::StrCat(instances[k])},
                       absl::StrCat(path, ".log", k));
    const ChildRun& r = runs[k];
    std::printf("%s", r.output.c_str());
    ASSERT_EQ(r.exit_status, 0) << r.output;
    EXPECT_NE(r.output.find(absl::StrCat("instances=", instances[k], "\n")), std::string::npos);
    for (int i = 0; i < instances[k]; ++i) {
      EXPECT_NE(r.output.find(absl::StrCat("instance ", i, ": outputs equal")), std::string::npos)
          << r.output;
    }
    // The kernel's figure must exist, and vm-run's own report must agree with it.
    ASSERT_GT(r.peak_rss_bytes, 0) << "no peak RSS from wait4 (spawner not running?)";
    const double printed = Field(r.output, "peak_rss_mb");
    ASSERT_GE(printed, 0) << "vm-run printed no peak_rss_mb:\n" << r.output;
    EXPECT_NEAR(printed, r.peak_rss_bytes / 1048576.0, 2.0);
  }
  const double one = runs[0].peak_rss_bytes / 1048576.0, eight = runs[1].peak_rss_bytes / 1048576.0;
  // Activations per extra instance: a few [1, 2048] f32 vectors (the arena) plus the output,
  // and a thread's stack and allocator arena; 7 copies of the weights would add 7 x 96 MiB.
  const double bar = 0.2 * weights_mib;
  std::printf(
      "peak resident memory (wait4): 1 instance %.1f MiB, 8 instances %.1f MiB, difference "
      "%.1f MiB; weights %.1f MiB; bar: difference below %.1f MiB (8 loads would add %.1f MiB)\n",
      one, eight, eight - one, weights_mib, bar, 7 * weights_mib);
  EXPECT_GT(one, weights_mib);  // the weights were read: resident in the one-instance run
  EXPECT_LT(eight - one, bar);
  std::remove(input.c_str());
  std::remove(absl::StrCat(path, ".log0").c_str());
  std::remove(absl::StrCat(path, ".log1").c_str());
}

}  // namespace
}  // namespace dynvm

int main(int argc, char** argv) {
  dynvm::StartSpawner();  // first, while the process is small
  ::testing::InitGoogleTest(&argc, argv);
  const int rc = RUN_ALL_TESTS();
  if (!dynvm::BigModelPath().empty()) std::remove(dynvm::BigModelPath().c_str());
  return rc;
}
