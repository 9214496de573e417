// ISA conformance: every tests/isa/*.s file is assembled, loaded (verified) and run. In each
// file, every function named test_* must run without error (the functions check their own
// results with `assert`), and every function named fail_* must fail; a comment line
//   ; expect-error fail_name: some text
// names a substring the error message must contain. Functions run in file order on one VM,
// so a test_* after a fail_* also checks that the VM is usable after an error.
// Each file must also survive vm-dis -> vm-as byte-identically.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gtest/gtest.h"
#include "isa/assembler.h"
#include "isa/disassembler.h"
#include "isa/verifier.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

namespace dynvm {
namespace {

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> Files() {
  std::vector<std::string> files;
  for (const auto& e : std::filesystem::directory_iterator("tests/isa")) {
    if (e.path().extension() == ".s") files.push_back(e.path().string());
  }
  std::sort(files.begin(), files.end());
  return files;
}

class IsaFileTest : public ::testing::Test {
 public:
  explicit IsaFileTest(std::string path) : path_(std::move(path)) {}

  void TestBody() override {
    const std::string text = ReadAll(path_);
    absl::StatusOr<std::string> bytes = isa::AssembleToBytes(text);
    ASSERT_TRUE(bytes.ok()) << path_ << ": " << bytes.status();
    const auto* data = reinterpret_cast<const uint8_t*>(bytes->data());

    // Round trip through the disassembler.
    absl::StatusOr<isa::VerifiedFile> v = isa::VerifyFile({data, bytes->size()});
    ASSERT_TRUE(v.ok()) << path_ << ": " << v.status();
    absl::StatusOr<std::string> dis = isa::Disassemble(
        *v->executable, {data + v->header.constants_offset, v->header.constants_size});
    ASSERT_TRUE(dis.ok()) << dis.status();
    absl::StatusOr<std::string> again = isa::AssembleToBytes(*dis);
    ASSERT_TRUE(again.ok()) << again.status() << "\n" << *dis;
    EXPECT_TRUE(*again == *bytes) << path_ << ": vm-dis | vm-as is not byte-identical\n" << *dis;

    std::map<std::string, std::string> expected_errors;
    for (absl::string_view line : absl::StrSplit(text, '\n')) {
      line = absl::StripAsciiWhitespace(line);
      if (absl::ConsumePrefix(&line, "; expect-error ")) {
        std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(": ", 1));
        expected_errors[kv.first] = kv.second;
      }
    }

    absl::StatusOr<std::shared_ptr<const Executable>> exe =
        Executable::LoadFromBytes({data, bytes->size()});
    ASSERT_TRUE(exe.ok()) << exe.status();
    VmOptions options;
    options.max_loop_iterations = 10'000'000;
    options.max_call_depth = 64;
    absl::StatusOr<std::unique_ptr<VirtualMachine>> vm = VirtualMachine::Create(*exe, options);
    ASSERT_TRUE(vm.ok()) << vm.status();
    int ran = 0;
    for (int i = 0; i < (*exe)->num_functions(); ++i) {
      const std::string& name = (*exe)->function(i).name;
      const bool is_test = absl::StartsWith(name, "test_");
      const bool is_fail = absl::StartsWith(name, "fail_");
      if (!is_test && !is_fail) continue;
      ++ran;
      RunOptions run;
      run.function = name;
      absl::Status s = (*vm)->Run(run);
      if (is_test) {
        EXPECT_TRUE(s.ok()) << path_ << " " << name << ": " << s;
      } else {
        EXPECT_FALSE(s.ok()) << path_ << " " << name << " should fail";
        auto it = expected_errors.find(name);
        if (it != expected_errors.end()) {
          EXPECT_TRUE(absl::StrContains(s.message(), it->second))
              << path_ << " " << name << ": error '" << s.message() << "' lacks '" << it->second
              << "'";
        }
      }
    }
    EXPECT_GT(ran, 0) << path_ << " has no test_ or fail_ functions";
  }

 private:
  std::string path_;
};

void RegisterAll() {
  for (const std::string& f : Files()) {
    const std::string name = std::filesystem::path(f).stem().string();
    ::testing::RegisterTest("IsaConformance", name.c_str(), nullptr, nullptr, __FILE__, __LINE__,
                            [f]() -> ::testing::Test* { return new IsaFileTest(f); });
  }
}

}  // namespace
}  // namespace dynvm

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  dynvm::RegisterAll();
  return RUN_ALL_TESTS();
}
