// Assembles a one-function program, loads it and runs it through the installed dynvm.
#include <cstdio>

#include "isa/assembler.h"
#include "vm/executable.h"
#include "vm/virtual_machine.h"

int main() {
  const char* text = R"(
.string "sum"
.function main
  .params 0 0
  .sregs i64 i64 bool i64
  .entry
  const_i %s1, 0
  loop %s0, 10
    add_i %s1, %s1, %s0
  endloop
  const_i %s3, 45
  eq_i %s2, %s1, %s3
  assert %s2, str0
  ret (), ()
.end
)";
  absl::StatusOr<std::string> bytes = dynvm::isa::AssembleToBytes(text);
  if (!bytes.ok()) return 1;
  auto exe = dynvm::Executable::LoadFromBytes(
      {reinterpret_cast<const uint8_t*>(bytes->data()), bytes->size()});
  if (!exe.ok()) return 2;
  auto vm = dynvm::VirtualMachine::Create(*exe);
  if (!vm.ok()) return 3;
  absl::Status s = (*vm)->Run();
  std::printf("consumer: %s\n", s.ok() ? "ok" : std::string(s.message()).c_str());
  return s.ok() ? 0 : 4;
}
