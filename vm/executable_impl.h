// Internal: the loaded form of an executable that the VM runs (code, kernel and constant
// tables). Not part of the API and not installed: vm/executable.h keeps these types opaque.
#ifndef DYNVM_VM_EXECUTABLE_IMPL_H_
#define DYNVM_VM_EXECUTABLE_IMPL_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/dtype.h"
#include "common/types.h"
#include "kernels/kernel.h"
#include "vm/executable.h"

namespace dynvm {

namespace fb {
struct Executable;
}  // namespace fb

struct Executable::KernelEntry {
  KernelSpec spec;
  std::unique_ptr<Kernel> kernel;
  std::vector<bool> dynamic_outputs;
};

struct Executable::ConstantEntry {
  DType dtype;
  std::vector<int64_t> shape;
  uint64_t offset;
  uint64_t size;
  // A string constant's elements, pointing into the constant segment (checked at load by
  // isa::CheckStringConstant); its tensors view these, not the segment (docs/strings.md).
  std::vector<StringRef> strings;
};

// A tensor of constant `c`: a view of `segment` (a storage over the constant segment), or for a
// string constant a view of its elements in a storage that runs `release` when dropped.
absl::StatusOr<Tensor> ConstantTensor(const Executable::ConstantEntry& c, const StorageRef& segment,
                                      std::function<void()> release);

struct Executable::FunctionEntry {
  FunctionInfo info;
  const uint32_t* code = nullptr;
  uint32_t code_size = 0;
  uint32_t num_scalars = 0;
  uint32_t num_objects = 0;
  uint32_t num_object_params = 0;
  uint32_t num_scalar_params = 0;
  uint32_t num_object_results = 0;
  uint32_t num_sites = 0;
  std::vector<uint8_t> object_kinds;  // ObjectKind per register
  std::vector<uint8_t> scalar_kinds;  // 0 i64, 1 f64, 2 bool per register
  // (pc, output index): top-level alloc_tensor instructions that make an output's tensor
  // (its register is written nowhere else and returned by every ret). A VM with a buffer
  // bound to that output uses the buffer there instead (SetOutputBuffer). Sorted by pc.
  std::vector<std::pair<uint32_t, uint32_t>> output_allocs;
};

// Everything an Executable holds. Immutable once Init returns, apart from the device copies of
// the constants (guarded by device_mu).
struct Executable::Rep {
  const FunctionEntry& function_entry(int index) const { return functions[index]; }
  const KernelEntry& kernel_entry(int index) const { return kernels[index]; }
  const ConstantEntry& constant(int index) const { return constants[index]; }
  int num_constants() const { return static_cast<int>(constants.size()); }
  int num_functions() const { return static_cast<int>(functions.size()); }
  // String-table entry `index` (verified to exist by the loader).
  absl::string_view string(uint32_t index) const;
  uint32_t max_invoke_arity() const { return max_arity; }

  std::shared_ptr<const schema::MappedFile> file;
  std::shared_ptr<const Segment> segment;  // external or decompressed constants (shared)
  uint64_t weights_hash = 0;
  const fb::Executable* fb = nullptr;
  uint64_t features = 0;
  const uint8_t* constant_segment = nullptr;
  int64_t constant_segment_size = 0;
  std::vector<ConstantEntry> constants;
  std::vector<KernelEntry> kernels;
  std::vector<FunctionEntry> functions;
  int num_weights = 0;
  int64_t weight_bytes = 0;
  uint32_t max_arity = 0;
  StorageRef constant_storage;  // for tensor-valued kernel attributes
  mutable std::mutex device_mu;
  mutable StorageRef device_constants[kNumDevices];  // guarded by device_mu
};

}  // namespace dynvm

#endif  // DYNVM_VM_EXECUTABLE_IMPL_H_
