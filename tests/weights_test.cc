// Weights apart from the executable (.dvw), compressed constant segments, and several entry
// functions over one set of constants: graphs built with the compiler's builder, compiled,
// written to a temporary directory and loaded as a user would. Results are checked against a
// matrix product computed here in double precision (an independent oracle).
#include "schema/weights.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "compiler/builder.h"
#include "compiler/compiler.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "schema/mapped_file.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

constexpr int kIn = 32, kOut = 16;

Tensor RandomF32(std::vector<int64_t> dims, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> dist(-1.0f, 1.0f);
  Tensor t = *Tensor::Empty(DType::kF32, dims);
  for (int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = dist(rng);
  return t;
}

// Multiples of 1/8: weights that compress well.
Tensor Coarse(Tensor t) {
  for (int64_t i = 0; i < t.numel(); ++i)
    t.data<float>()[i] = std::round(t.data<float>()[i] * 8) / 8;
  return t;
}

// y = x @ W + b, for a batch of rows.
struct Model {
  Tensor w = Coarse(RandomF32({kIn, kOut}, 1));
  Tensor b = Coarse(RandomF32({kOut}, 2));
  std::vector<double> Expected(const Tensor& x) const {
    const int64_t rows = x.dim(0);
    std::vector<double> y(rows * kOut);
    for (int64_t r = 0; r < rows; ++r) {
      for (int j = 0; j < kOut; ++j) {
        double acc = b.data<float>()[j];
        for (int i = 0; i < kIn; ++i)
          acc += double{x.data<float>()[r * kIn + i]} * w.data<float>()[i * kOut + j];
        y[r * kOut + j] = acc;
      }
    }
    return y;
  }
};

// One function per name in `functions`, each y = x @ W + b (+ 1 for the second, so that the
// functions differ), all over the same two weights.
std::unique_ptr<compiler::Module> Build(const Model& m, const std::vector<std::string>& functions) {
  auto module = std::make_unique<compiler::Module>();
  for (size_t f = 0; f < functions.size(); ++f) {
    compiler::GraphBuilder g(module->AddFunction(functions[f]));
    compiler::Value* x = g.Input("x", DType::kF32, {std::string("batch"), int64_t{kIn}});
    compiler::Value* y =
        g.Op("Add", {g.Op("MatMul", {x, g.Constant(m.w, "W", true)}), g.Constant(m.b, "b", true)});
    if (f == 1) y = g.Op("Add", {y, g.ScalarF32(1.0f)});
    g.Output("y", y);
  }
  return module;
}

class WeightsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::path(::testing::TempDir()) /
           absl::StrCat("dynvm_weights_test_", getpid(), "_",
                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  // Compiles and writes NAME.dvm (and the weights file when options name one) into dir_.
  compiler::CompileResult Write(const std::string& name, compiler::CompileOptions options,
                                const std::vector<std::string>& functions = {"main"}) {
    std::unique_ptr<compiler::Module> module = Build(model_, functions);
    absl::StatusOr<compiler::CompileResult> r = compiler::Compile(*module, options);
    EXPECT_TRUE(r.ok()) << r.status();
    if (!r.ok()) return {};
    EXPECT_TRUE(schema::WriteStringToFile(Path(name + ".dvm"), r->bytes).ok());
    if (!options.weights_file_name.empty()) {
      EXPECT_TRUE(schema::WriteStringToFile(Path(options.weights_file_name), r->weights).ok());
    }
    return *std::move(r);
  }
  std::string Path(const std::string& file) const { return (dir_ / file).string(); }

  // Runs `exe` on a 3-row input and checks y against the oracle (plus `offset`).
  void ExpectComputes(const std::shared_ptr<const Executable>& exe,
                      const std::string& function = "", double offset = 0) {
    ASSERT_NE(exe, nullptr);
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe);
    ASSERT_TRUE(vm.ok()) << vm.status();
    const Tensor x = RandomF32({3, kIn}, 7);
    ASSERT_TRUE((*vm)->SetInput("x", x, function).ok());
    RunOptions run;
    run.function = function;
    absl::Status s = (*vm)->Run(run);
    ASSERT_TRUE(s.ok()) << s;
    absl::StatusOr<Tensor> y = (*vm)->GetOutput("y", function);
    ASSERT_TRUE(y.ok()) << y.status();
    ASSERT_EQ(y->ShapeString(), "[3,16]");
    const std::vector<double> want = model_.Expected(x);
    for (size_t i = 0; i < want.size(); ++i)
      ASSERT_NEAR(y->data<float>()[i], want[i] + offset, 1e-4) << i;
  }

  std::shared_ptr<const Executable> LoadOk(const std::string& path,
                                           const LoadOptions& options = {}) {
    absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::Load(path, options);
    EXPECT_TRUE(exe.ok()) << exe.status();
    return exe.ok() ? *exe : nullptr;
  }

  Model model_;
  fs::path dir_;
};

constexpr int64_t kSegmentBytes = kIn * kOut * 4 + kOut * 4;  // W then b (64-aligned already)

TEST_F(WeightsTest, ExternalWeightsAreFoundBesideTheExecutable) {
  compiler::CompileOptions o;
  o.weights_file_name = "model.dvw";
  compiler::CompileResult r = Write("model", o);
  EXPECT_LT(r.bytes.size(), 4096u);  // code only
  EXPECT_EQ(r.weights.size(), schema::kWeightsHeaderSize + kSegmentBytes);
  std::shared_ptr<const Executable> exe = LoadOk(Path("model.dvm"));
  ASSERT_NE(exe, nullptr);
  EXPECT_TRUE(exe->external_weights());
  EXPECT_EQ(exe->weights_hash(),
            schema::ContentHash({reinterpret_cast<const uint8_t*>(r.weights.data()) + 64,
                                 static_cast<size_t>(kSegmentBytes)}));
  EXPECT_EQ(exe->constant_segment_bytes(), kSegmentBytes);
  EXPECT_EQ(exe->weight_bytes(), kSegmentBytes);
  ExpectComputes(exe);
}

TEST_F(WeightsTest, ExecutablesReferringToOneWeightsFileShareOneMapping) {
  // Two batch variants of one model (different bounds: different code, same weights).
  compiler::CompileOptions o;
  o.weights_file_name = "shared.dvw";
  o.bounds = {{"batch", 4}};
  Write("small", o);
  o.bounds = {{"batch", 64}};
  Write("large", o);
  const int before = Executable::SharedSegmentCount();
  std::shared_ptr<const Executable> small = LoadOk(Path("small.dvm"));
  std::shared_ptr<const Executable> large = LoadOk(Path("large.dvm"));
  ASSERT_NE(small, nullptr);
  ASSERT_NE(large, nullptr);
  EXPECT_EQ(Executable::SharedSegmentCount(), before + 1);
  EXPECT_EQ(small->constant_segment(), large->constant_segment());
  ExpectComputes(small);
  ExpectComputes(large);
  // While one is alive, another load reuses the mapping without opening the file.
  fs::remove(Path("shared.dvw"));
  std::shared_ptr<const Executable> again = LoadOk(Path("small.dvm"));
  ASSERT_NE(again, nullptr);
  EXPECT_EQ(again->constant_segment(), small->constant_segment());
  small.reset();
  large.reset();
  again.reset();
  EXPECT_EQ(Executable::SharedSegmentCount(), before);
  // The last one gone, the mapping went with it: now the file is needed again.
  absl::StatusOr<std::shared_ptr<const Executable>> gone = Executable::Load(Path("small.dvm"));
  EXPECT_EQ(gone.status().code(), absl::StatusCode::kNotFound) << gone.status();
  EXPECT_THAT(gone.status().message(), HasSubstr("shared.dvw"));
}

TEST_F(WeightsTest, WeightsPathAndDirOptions) {
  compiler::CompileOptions o;
  o.weights_file_name = "w.dvw";
  compiler::CompileResult r = Write("m", o);
  fs::create_directories(dir_ / "elsewhere");
  fs::rename(Path("w.dvw"), (dir_ / "elsewhere" / "renamed.dvw").string());
  EXPECT_EQ(Executable::Load(Path("m.dvm")).status().code(), absl::StatusCode::kNotFound);
  LoadOptions by_path;
  by_path.weights_path = (dir_ / "elsewhere" / "renamed.dvw").string();
  ExpectComputes(LoadOk(Path("m.dvm"), by_path));
  // From bytes: the directory must be named.
  const auto* bytes = reinterpret_cast<const uint8_t*>(r.bytes.data());
  absl::Status s = Executable::LoadFromBytes({bytes, r.bytes.size()}).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("needs LoadOptions::weights_dir or weights_path"));
  fs::rename((dir_ / "elsewhere" / "renamed.dvw").string(),
             (dir_ / "elsewhere" / "w.dvw").string());
  LoadOptions by_dir;
  by_dir.weights_dir = (dir_ / "elsewhere").string();
  absl::StatusOr<std::shared_ptr<const Executable>> exe =
      Executable::LoadFromBytes({bytes, r.bytes.size()}, by_dir);
  ASSERT_TRUE(exe.ok()) << exe.status();
  ExpectComputes(*exe);
}

TEST_F(WeightsTest, RefusesAnotherModelsWeightsAndDamagedFiles) {
  compiler::CompileOptions o;
  o.weights_file_name = "w.dvw";
  Write("m", o);
  const std::string good = *schema::ReadFileToString(Path("w.dvw"));
  // The weights of another model under the same name: refused by hash, before any data is read.
  model_.w.data<float>()[5] += 1.0f;
  std::unique_ptr<compiler::Module> other = Build(model_, {"main"});
  absl::StatusOr<compiler::CompileResult> r2 = compiler::Compile(*other, o);
  ASSERT_TRUE(r2.ok());
  model_.w.data<float>()[5] -= 1.0f;
  ASSERT_TRUE(schema::WriteStringToFile(Path("w.dvw"), r2->weights).ok());
  absl::Status s = Executable::Load(Path("m.dvm")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  EXPECT_THAT(s.message(), HasSubstr("a different or stale weights file"));
  // A damaged data byte with an intact header: the O(1) check at load does not read the data;
  // verify_weights_hash does.
  std::string damaged = good;
  damaged[64 + 100] ^= 0x01;
  ASSERT_TRUE(schema::WriteStringToFile(Path("w.dvw"), damaged).ok());
  EXPECT_TRUE(Executable::Load(Path("m.dvm")).ok());
  LoadOptions verify;
  verify.verify_weights_hash = true;
  s = Executable::Load(Path("m.dvm"), verify).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
  EXPECT_THAT(s.message(), HasSubstr("the file is damaged"));
  // A damaged header, a truncated file, an executable instead of weights.
  damaged = good;
  damaged[30] ^= 0x01;
  ASSERT_TRUE(schema::WriteStringToFile(Path("w.dvw"), damaged).ok());
  EXPECT_THAT(Executable::Load(Path("m.dvm")).status().message(), HasSubstr("checksum"));
  ASSERT_TRUE(schema::WriteStringToFile(Path("w.dvw"), good.substr(0, good.size() - 1)).ok());
  EXPECT_THAT(Executable::Load(Path("m.dvm")).status().message(), HasSubstr("does not lie inside"));
  ASSERT_TRUE(
      schema::WriteStringToFile(Path("w.dvw"), *schema::ReadFileToString(Path("m.dvm"))).ok());
  EXPECT_THAT(Executable::Load(Path("m.dvm")).status().message(), HasSubstr("wrong magic"));
  // Intact again: loads and computes.
  ASSERT_TRUE(schema::WriteStringToFile(Path("w.dvw"), good).ok());
  LoadOptions verify_ok;
  verify_ok.verify_weights_hash = true;
  ExpectComputes(LoadOk(Path("m.dvm"), verify_ok));
}

TEST_F(WeightsTest, CompressedConstantsDecompressOncePerProcess) {
  // Inline in the .dvm.
  compiler::CompileOptions o;
  o.compress = true;
  compiler::CompileResult r = Write("z", o);
  compiler::CompileOptions plain;
  compiler::CompileResult p = Write("p", plain);
  EXPECT_LT(r.bytes.size(), p.bytes.size());
  const int before = Executable::SharedSegmentCount();
  std::shared_ptr<const Executable> a = LoadOk(Path("z.dvm"));
  std::shared_ptr<const Executable> b = LoadOk(Path("z.dvm"));
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  EXPECT_EQ(Executable::SharedSegmentCount(), before + 1);
  EXPECT_EQ(a->constant_segment(), b->constant_segment());
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a->constant_segment()) % 64, 0u);
  EXPECT_EQ(a->constant_segment_bytes(), kSegmentBytes);
  ExpectComputes(a);
  a.reset();
  b.reset();
  EXPECT_EQ(Executable::SharedSegmentCount(), before);

  // In the .dvw.
  o.weights_file_name = "z.dvw";
  r = Write("zw", o);
  EXPECT_LT(r.weights.size(), schema::kWeightsHeaderSize + kSegmentBytes);
  ExpectComputes(LoadOk(Path("zw.dvm")));
  // A damaged compressed byte is caught when it is decompressed (the frame's checksum or the
  // content hash).
  std::string damaged = r.weights;
  damaged[damaged.size() / 2] ^= 0x40;
  ASSERT_TRUE(schema::WriteStringToFile(Path("z.dvw"), damaged).ok());
  absl::Status s = Executable::Load(Path("zw.dvm")).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss) << s;
}

// Every single flipped byte of a compressed executable is refused at load, or harmless: the
// header and code are checksummed, the compressed segment carries zstd's checksum.
TEST_F(WeightsTest, EveryFlippedByteOfACompressedExecutableIsRefusedOrHarmless) {
  compiler::CompileOptions o;
  o.compress = true;
  o.strip_debug = true;
  compiler::CompileResult r = Write("z", o);
  int refused = 0;
  for (size_t i = 0; i < r.bytes.size(); ++i) {
    std::string bytes = r.bytes;
    bytes[i] ^= 0x04;
    absl::StatusOr<std::shared_ptr<const Executable>> exe = Executable::LoadFromBytes(bytes);
    if (!exe.ok()) {
      ++refused;
      continue;
    }
    ExpectComputes(*exe);
    if (HasFailure()) {
      ADD_FAILURE() << "flipped byte " << i << " loaded and computed wrongly";
      return;
    }
  }
  EXPECT_GT(refused, static_cast<int>(r.bytes.size()) / 2);
}

TEST_F(WeightsTest, SeveralEntryFunctionsShareTheConstants) {
  compiler::CompileOptions o;
  o.weights_file_name = "both.dvw";
  compiler::CompileResult r = Write("both", o, {"prefill", "step"});
  // W and b once, then step's scalar 1.0f.
  EXPECT_EQ(r.weights.size(), schema::kWeightsHeaderSize + kSegmentBytes + 4);
  std::shared_ptr<const Executable> exe = LoadOk(Path("both.dvm"));
  ASSERT_NE(exe, nullptr);
  EXPECT_EQ(exe->num_weights(), 2);
  ExpectComputes(exe, "prefill");
  ExpectComputes(exe, "step", 1.0);
}

// The /proc/self/maps line of the mapping that holds `p` ("" if none): a file mapping names its
// file at the end; anonymous memory names none.
std::string MappingOf(const void* p) {
  std::ifstream maps("/proc/self/maps");
  std::string line;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  while (std::getline(maps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx", &lo, &hi) == 2 && lo <= a && a < hi) return line;
  }
  return "";
}

TEST_F(WeightsTest, ConstantPagesHugeCopiesTheConstantsAndComputesAsMapped) {
  compiler::CompileOptions inline_o;
  Write("inline", inline_o);
  compiler::CompileOptions apart;
  apart.weights_file_name = "apart.dvw";
  Write("apart", apart);
  for (const std::string name : {"inline", "apart"}) {
    SCOPED_TRACE(name);
    const std::string file = name == "inline" ? "inline.dvm" : "apart.dvw";
    LoadOptions mapped;
    mapped.constant_pages = ConstantPages::kMapped;
    std::shared_ptr<const Executable> m = LoadOk(Path(name + ".dvm"), mapped);
    ASSERT_NE(m, nullptr);
    EXPECT_THAT(MappingOf(m->constant_segment()), HasSubstr(file));
    ExpectComputes(m);
    m.reset();  // else the weights file's segment is shared with the next load
    LoadOptions huge;
    huge.constant_pages = ConstantPages::kHuge;
    huge.verify_weights_hash = true;  // hashes the copy
    std::shared_ptr<const Executable> h = LoadOk(Path(name + ".dvm"), huge);
    ASSERT_NE(h, nullptr);
    const std::string line = MappingOf(h->constant_segment());
    ASSERT_NE(line, "");
    EXPECT_THAT(line, Not(HasSubstr(file)));  // anonymous memory, not the file
    EXPECT_EQ(h->constant_segment_bytes(), kSegmentBytes);
    ExpectComputes(h);
    // Small files under kAuto stay mapped.
    h.reset();
    std::shared_ptr<const Executable> a = LoadOk(Path(name + ".dvm"));
    ASSERT_NE(a, nullptr);
    EXPECT_THAT(MappingOf(a->constant_segment()), HasSubstr(file));
  }
}

TEST_F(WeightsTest, ConstantPagesHugeWithCompressedConstants) {
  compiler::CompileOptions o;
  o.compress = true;
  Write("z", o);
  o.weights_file_name = "z.dvw";
  Write("zw", o);
  LoadOptions huge;
  huge.constant_pages = ConstantPages::kHuge;
  ExpectComputes(LoadOk(Path("z.dvm"), huge));
  ExpectComputes(LoadOk(Path("zw.dvm"), huge));
  // A missing weights file is still named.
  fs::remove(Path("z.dvw"));
  absl::Status s = Executable::Load(Path("zw.dvm"), huge).status();
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound) << s;
  EXPECT_THAT(s.message(), HasSubstr("z.dvw"));
}

TEST(ConstantPagesTest, AutoChoosesHugePagesForLargeFilesWhereThpIsOn) {
  const uint64_t big = kHugeConstantPagesMinBytes, small = kHugeConstantPagesMinBytes - 1;
  EXPECT_EQ(kHugeConstantPagesMinBytes, uint64_t{64} << 20);
  const uint64_t room = 2 * big;  // MemAvailable: the copy must fit twice
  EXPECT_TRUE(UseHugeConstantPages(ConstantPages::kAuto, big, "always [madvise] never", room));
  EXPECT_TRUE(UseHugeConstantPages(ConstantPages::kAuto, big, "[always] madvise never", room));
  EXPECT_FALSE(UseHugeConstantPages(ConstantPages::kAuto, small, "always [madvise] never", room));
  EXPECT_FALSE(UseHugeConstantPages(ConstantPages::kAuto, big, "always madvise [never]", room));
  EXPECT_FALSE(UseHugeConstantPages(ConstantPages::kAuto, big, "", room));  // unknown: off
  EXPECT_FALSE(UseHugeConstantPages(ConstantPages::kAuto, big, "[always] madvise never", room - 1));
  EXPECT_FALSE(UseHugeConstantPages(ConstantPages::kAuto, big, "[always] madvise never", 0));
  EXPECT_FALSE(UseHugeConstantPages(ConstantPages::kMapped, big, "[always] madvise never", room));
  EXPECT_TRUE(UseHugeConstantPages(ConstantPages::kHuge, 0, "always madvise [never]", 0));
  EXPECT_GT(schema::MemAvailableBytes(), 0u);
  EXPECT_EQ(*ParseConstantPages("auto"), ConstantPages::kAuto);
  EXPECT_EQ(*ParseConstantPages("mapped"), ConstantPages::kMapped);
  EXPECT_EQ(*ParseConstantPages("huge"), ConstantPages::kHuge);
  EXPECT_THAT(ParseConstantPages("big").status().message(), HasSubstr("auto, mapped or huge"));
}

}  // namespace
}  // namespace dynvm
