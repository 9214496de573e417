// Code generation: memory planning and bytecode emission for one function. Internal; the
// entry point is compiler.h.
#ifndef DYNVM_COMPILER_CODEGEN_H_
#define DYNVM_COMPILER_CODEGEN_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "compiler/compiler.h"
#include "compiler/ir.h"
#include "kernels/kernel.h"
#include "schema/executable_generated.h"
#include "schema/writer.h"

namespace dynvm::compiler {

// The tables shared by all functions of one executable: kernels, constants, strings, debug
// locations. Deduplicates kernel entries and constants.
class ExecutableBuilder {
 public:
  ExecutableBuilder();
  fb::ExecutableT& exe() { return *exe_; }

  uint32_t ConstantOf(const Value* v);
  uint32_t ConstantTensor(const Tensor& t, const std::string& name, bool is_weight);
  // A kernel-table entry for `node` with the given dynamic-output flags, on `device`.
  absl::StatusOr<uint32_t> KernelFor(const Node& node, const std::vector<bool>& dynamic_outputs,
                                     Device device = Device::kCPU);
  // Checks that some registered kernel accepts the entry KernelFor made for `node` (its op,
  // port dtypes and attributes), once per entry. Unimplemented, naming the node, otherwise.
  absl::Status CheckKernel(uint32_t kernel, const Node& node,
                           const std::vector<bool>& dynamic_outputs, Device device = Device::kCPU);
  // Whether a kernel registered for `device` accepts `node` (device placement).
  bool DeviceAccepts(const Node& node, const std::vector<bool>& dynamic_outputs, Device device);
  // The spec of kernel-table entry k, as SpecFor made it from the entry's first node.
  const KernelSpec& spec(uint32_t k) const { return specs_[k]; }
  uint32_t String(const std::string& s);
  void Location(uint32_t function, uint32_t pc, const std::string& node);

  // Finishes the tables and serializes the executable.
  absl::StatusOr<schema::SerializedFiles> Serialize(const schema::WriteOptions& options);

 private:
  std::unique_ptr<fb::ExecutableT> exe_;
  std::vector<std::string> data_;
  absl::flat_hash_map<const Value*, uint32_t> by_value_;
  absl::flat_hash_map<std::string, std::vector<uint32_t>> by_content_;
  absl::flat_hash_map<std::string, uint32_t> kernels_;
  std::vector<bool> kernel_checked_;
  std::vector<KernelSpec> specs_;  // per kernel-table entry
  absl::flat_hash_map<std::string, uint32_t> strings_;
  std::vector<std::unique_ptr<fb::SourceLocationT>> locations_;
};

// The KernelSpec the runtime sees for `node` (the one conversion from the IR; the loader's is
// SpecFromFb): op, domain, device, attributes, and a port per input and output with its kind
// and dtype, optional when the value is absent, dynamic as `dynamic_outputs` says.
KernelSpec SpecFor(const Node& node, const std::vector<bool>& dynamic_outputs = {},
                   Device device = Device::kCPU);

// Plans memory and emits one function into `builder`.
absl::StatusOr<FunctionReport> GenerateFunction(Module& module, const Function& function,
                                                uint32_t index, ExecutableBuilder& builder,
                                                const CompileOptions& options);

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_CODEGEN_H_
