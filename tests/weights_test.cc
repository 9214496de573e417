// Weights apart from the executable (.dvw), compressed constant segments, and several entry
// functions over one set of constants: graphs built with the compiler's builder, compiled,
// written to a temporary directory and loaded as a user would. Results are checked against a
// matrix product computed here in double precision (an independent oracle).
#include "schema/weights.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstring>
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
#include "schema/mapped_file_testing.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

using schema::MappingOf;
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

// The VMA of /proc/self/smaps that holds `p`: its header line, Anonymous and AnonHugePages (kB;
// -1 if there is no such mapping).
struct Vma {
  std::string line;
  int64_t anonymous_kb = -1;
  int64_t anon_huge_kb = -1;
};
Vma VmaOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  Vma vma;
  bool in = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2 && line.find(':') > 12) {
      if (in) break;
      in = lo <= a && a < hi;
      if (in) vma.line = line;
      continue;
    }
    long kb = 0;
    if (!in) continue;
    if (std::sscanf(line.c_str(), "Anonymous: %ld kB", &kb) == 1) vma.anonymous_kb = kb;
    if (std::sscanf(line.c_str(), "AnonHugePages: %ld kB", &kb) == 1) vma.anon_huge_kb = kb;
  }
  return vma;
}

bool ThpOn() {
  const std::string thp = schema::TransparentHugePagesSetting();
  return thp.find("[always]") != std::string::npos || thp.find("[madvise]") != std::string::npos;
}

// An embedding model: y = Gather(E, ids) @ W, E [kVocab, kWidth] (4 MiB: a table of at least
// kMinFileBackedConstantBytes, read a few rows per run), W [kWidth, kHidden] (4 MiB, read whole).
// `dense_use` also reads E whole (z = x + E): then it is not only gathered from.
constexpr int kVocab = 4096, kWidth = 256, kHidden = 4096;

class GatheredTablesTest : public WeightsTest {
 protected:
  void WriteEmbedding(const std::string& name, compiler::CompileOptions options, bool dense_use) {
    compiler::Module module;
    compiler::GraphBuilder g(module.AddFunction("main"));
    compiler::Value* ids = g.Input("ids", DType::kI64, {std::string("n")});
    compiler::Value* e = g.Constant(table_, "E", true);
    g.Output("y", g.Op("MatMul", {g.Op("Gather", {e, ids}), g.Constant(w_, "W", true)}));
    if (dense_use) {
      g.Output("z",
               g.Op("Add", {g.Input("x", DType::kF32, {int64_t{kVocab}, int64_t{kWidth}}), e}));
    }
    absl::StatusOr<compiler::CompileResult> r = compiler::Compile(module, options);
    ASSERT_TRUE(r.ok()) << r.status();
    ASSERT_TRUE(schema::WriteStringToFile(Path(name + ".dvm"), r->bytes).ok());
    if (!options.weights_file_name.empty()) {
      ASSERT_TRUE(schema::WriteStringToFile(Path(options.weights_file_name), r->weights).ok());
    }
  }

  // Runs `exe` on three token ids; checks y against the oracle and returns its bytes.
  std::string RunEmbedding(const std::shared_ptr<const Executable>& exe, bool dense_use) {
    EXPECT_NE(exe, nullptr);
    if (exe == nullptr) return "";
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(exe);
    EXPECT_TRUE(vm.ok()) << vm.status();
    Tensor ids = *Tensor::Empty(DType::kI64, {3});
    const int64_t picked[3] = {5, kVocab - 1, 2049};
    for (int i = 0; i < 3; ++i) ids.data<int64_t>()[i] = picked[i];
    EXPECT_TRUE((*vm)->SetInput("ids", ids).ok());
    if (dense_use) {
      EXPECT_TRUE((*vm)->SetInput("x", RandomF32({kVocab, kWidth}, 9)).ok());
    }
    absl::Status s = (*vm)->Run();
    EXPECT_TRUE(s.ok()) << s;
    absl::StatusOr<Tensor> y = (*vm)->GetOutput("y");
    EXPECT_TRUE(y.ok()) << y.status();
    if (!y.ok()) return "";
    EXPECT_EQ(y->ShapeString(), absl::StrCat("[3,", kHidden, "]"));
    for (int r = 0; r < 3; ++r) {
      for (int j = 0; j < kHidden; j += 97) {
        double want = 0;
        for (int i = 0; i < kWidth; ++i) {
          want += double{table_.data<float>()[picked[r] * kWidth + i]} *
                  w_.data<float>()[i * kHidden + j];
        }
        EXPECT_NEAR(y->data<float>()[r * kHidden + j], want, 1e-4) << r << "," << j;
      }
    }
    return std::string(reinterpret_cast<const char*>(y->data<float>()),
                       static_cast<size_t>(y->numel()) * 4);
  }

  // Where E's bytes are in `exe`'s constant segment (null if not found).
  const uint8_t* TableIn(const Executable& exe) const {
    const uint8_t* seg = exe.constant_segment();
    const size_t n = static_cast<size_t>(exe.constant_segment_bytes());
    const size_t table = static_cast<size_t>(table_.numel()) * 4;
    for (size_t off = 0; off + table <= n; off += 64) {
      if (std::memcmp(seg + off, table_.data<float>(), table) == 0) return seg + off;
    }
    return nullptr;
  }

  Tensor table_ = RandomF32({kVocab, kWidth}, 11);
  Tensor w_ = RandomF32({kWidth, kHidden}, 12);
};

// kHuge copies the file into 2 MB pages but for the table the code only gathers rows from, which
// stays the file's mapping at its place in the one region; the results are the same bytes in
// every mode, inline and in a .dvw; compressed constants are decompressed whole as before.
TEST_F(GatheredTablesTest, GatheredTableStaysMappedInsideTheHugePageCopy) {
  compiler::CompileOptions inline_o;
  WriteEmbedding("inline", inline_o, false);
  compiler::CompileOptions apart;
  apart.weights_file_name = "apart.dvw";
  WriteEmbedding("apart", apart, false);
  compiler::CompileOptions z;
  z.compress = true;
  WriteEmbedding("z", z, false);
  for (const std::string name : {"inline", "apart", "z"}) {
    SCOPED_TRACE(name);
    const std::string file = name == "apart" ? "apart.dvw" : name + ".dvm";
    const int64_t file_bytes = static_cast<int64_t>(fs::file_size(Path(file)));
    LoadOptions mapped;
    mapped.constant_pages = ConstantPages::kMapped;
    std::shared_ptr<const Executable> m = LoadOk(Path(name + ".dvm"), mapped);
    const std::string want = RunEmbedding(m, false);
    if (name != "z") {
      EXPECT_EQ(m->constant_bytes_copied(), 0);
      EXPECT_EQ(m->constant_bytes_mapped(), file_bytes);
    }
    m.reset();  // else the weights file's segment is shared with the next load
    std::shared_ptr<const Executable> a = LoadOk(Path(name + ".dvm"));  // auto: small, mapped
    EXPECT_EQ(RunEmbedding(a, false), want);
    a.reset();
    LoadOptions huge;
    huge.constant_pages = ConstantPages::kHuge;
    huge.verify_weights_hash = true;
    std::shared_ptr<const Executable> h = LoadOk(Path(name + ".dvm"), huge);
    ASSERT_NE(h, nullptr);
    EXPECT_EQ(RunEmbedding(h, false), want);
    const uint8_t* e = TableIn(*h);
    ASSERT_NE(e, nullptr);
    const uint8_t* seg = h->constant_segment();
    const int64_t table = table_.numel() * 4;
    if (name == "z") {  // decompressed into a buffer: nothing is mapped
      EXPECT_EQ(h->constant_bytes_mapped(), 0);
      EXPECT_EQ(h->constant_bytes_copied(), h->constant_segment_bytes());
      EXPECT_THAT(VmaOf(e + table / 2).line, Not(HasSubstr(file)));
      continue;
    }
    // The table's whole pages are the file's (all but at most a page at each edge); they stay
    // file pages after the run read rows of it: no anonymous memory.
    EXPECT_GE(h->constant_bytes_mapped(), table - 8192);
    EXPECT_LE(h->constant_bytes_mapped(), table);
    EXPECT_EQ(h->constant_bytes_copied() + h->constant_bytes_mapped(), file_bytes);
    const Vma vt = VmaOf(e + table / 2);
    EXPECT_THAT(vt.line, HasSubstr(file));
    EXPECT_EQ(vt.anonymous_kb, 0) << vt.line;
    EXPECT_EQ(vt.anon_huge_kb, 0) << vt.line;
    EXPECT_THAT(VmaOf(e + 4096).line, HasSubstr(file));
    EXPECT_THAT(VmaOf(e + table - 4097).line, HasSubstr(file));
    // The rest is the copy: the larger part of the segment beside the table (W, 4 MiB), in
    // anonymous memory, in 2 MB pages where THP is on.
    const int64_t before = e - seg, after = h->constant_segment_bytes() - (e - seg) - table;
    const uint8_t* dense = before > after ? seg + before / 2 : e + table + after / 2;
    const Vma vd = VmaOf(dense);
    EXPECT_THAT(vd.line, Not(HasSubstr(file)));
    EXPECT_GT(vd.anonymous_kb, 0) << vd.line;
    if (ThpOn()) {
      EXPECT_GT(vd.anon_huge_kb, 0) << vd.line;
    }
  }
}

// Auto counts only the bytes it would copy: a file of more than 64 MiB that is mostly a gathered
// table stays mapped (where THP is off it stays mapped anyway).
TEST_F(GatheredTablesTest, AutoCountsOnlyTheBytesCopied) {
  table_ = RandomF32({int64_t{kHugeConstantPagesMinBytes} / (kWidth * 4) + 16, kWidth}, 13);
  WriteEmbedding("big", compiler::CompileOptions(), false);
  ASSERT_GT(fs::file_size(Path("big.dvm")), kHugeConstantPagesMinBytes);
  std::shared_ptr<const Executable> a = LoadOk(Path("big.dvm"));
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(a->constant_bytes_copied(), 0);
  EXPECT_THAT(VmaOf(a->constant_segment()).line, HasSubstr("big.dvm"));
  RunEmbedding(a, false);
  // kHuge still copies what is not the table.
  a.reset();
  LoadOptions huge;
  huge.constant_pages = ConstantPages::kHuge;
  std::shared_ptr<const Executable> h = LoadOk(Path("big.dvm"), huge);
  ASSERT_NE(h, nullptr);
  EXPECT_GT(h->constant_bytes_copied(), kWidth * kHidden * 4);
  EXPECT_LT(h->constant_bytes_copied(), kWidth * kHidden * 4 + (1 << 20));
  RunEmbedding(h, false);
}

// A table also read whole (z = x + E) is copied like the rest.
TEST_F(GatheredTablesTest, TableReadWholeElsewhereIsCopied) {
  compiler::CompileOptions o;
  WriteEmbedding("both", o, true);
  LoadOptions huge;
  huge.constant_pages = ConstantPages::kHuge;
  std::shared_ptr<const Executable> h = LoadOk(Path("both.dvm"), huge);
  ASSERT_NE(h, nullptr);
  RunEmbedding(h, true);
  EXPECT_EQ(h->constant_bytes_mapped(), 0);
  const uint8_t* e = TableIn(*h);
  ASSERT_NE(e, nullptr);
  EXPECT_THAT(VmaOf(e + table_.numel() * 2).line, Not(HasSubstr("both.dvm")));
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
