// Public API. An Executable is a loaded, verified .dvm file: immutable and shareable.
//
// Ownership and lifetime: Load returns a shared_ptr. Every VirtualMachine made from it, and
// every tensor that views its constants, holds a reference, so releasing the handle that
// loaded it never invalidates them.
//
// Thread safety: thread-safe. All methods are const; any number of VirtualMachines on any
// number of threads may run one Executable concurrently, and Load may be called from any
// thread (the process-wide weights registry below has its own lock).
//
// Constants are read-only views into the file's bytes: never copied per instance or per VM.
// Where they live is LoadOptions::constant_pages: the read-only mapping of the file (pages read
// from disk when a kernel first touches them, shared with other processes through the page
// cache), or one copy of the file read at load into anonymous memory in 2 MB pages
// (MappedFile::ReadIntoHugePages), which a decode step streams faster; by default the copy for
// files of at least 64 MiB where transparent huge pages are enabled. Tables the code only gathers
// rows from (embeddings: vm/gathered_constants.h) stay in the file's mapping inside that region. On
// a device (CUDA), the constant segment is uploaded once per executable and process, on first use,
// and shared by every VM (DeviceConstants).
//
// Weights apart (docs/executable-format.md, "Weights files"): an executable compiled with
// `vm-compile --weights-out` refers to a .dvw file by name, content hash and size. Load finds
// it (LoadOptions::weights_path, else LoadOptions::weights_dir, else the executable's own
// directory), checks its header, hash and size against the reference (O(1): the data is not
// read unless verify_weights_hash), and maps it. A process-wide registry of weak references
// keyed by content hash makes every executable that refers to the same weights (model parts,
// batch variants) share ONE mapping while any of them is alive: a second Load does not even
// open the file. A zstd-compressed segment (`vm-compile --compress`, in the .dvm or the .dvw)
// is decompressed once per process at load into one buffer, shared the same way (keyed by
// the hash of the compressed bytes, or of the weights); it is not decompressed lazily.
#ifndef DYNVM_VM_EXECUTABLE_H_
#define DYNVM_VM_EXECUTABLE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/dtype.h"
#include "common/types.h"
#include "isa/verify_limits.h"
#include "kernels/kernel.h"
#include "kernels/registry.h"
#include "kernels/tensor.h"

namespace dynvm {

namespace schema {
class MappedFile;
}  // namespace schema

class Executable;

// A function of one executable, resolved once by name (Executable::ResolveFunction). The VM's
// methods take it wherever they take a function name (FunctionRef), and RunOptions::handle, so
// a caller that runs a function by name many times looks the name up once. Plain value.
class FunctionHandle {
 public:
  FunctionHandle() = default;
  bool valid() const { return exe_ != nullptr; }
  int index() const { return index_; }  // Executable::function(index())
  const Executable* executable() const { return exe_; }

 private:
  friend class Executable;
  FunctionHandle(const Executable* exe, int index) : exe_(exe), index_(index) {}
  const Executable* exe_ = nullptr;
  int index_ = -1;
};

// Where an executable's constants live (LoadOptions::constant_pages).
enum class ConstantPages {
  // kHuge where the bytes it would copy (the file but its gathered tables) are at least
  // kHugeConstantPagesMinBytes, transparent huge pages are `always` or `madvise` and the memory
  // available holds twice those bytes (the copy cannot be evicted as file pages can); else
  // kMapped (small models stay zero-copy).
  kAuto,
  // The read-only mapping of the file: zero copy, pages shared through the page cache, 4 KB
  // pages (the kernel does not put a file mapping in huge pages here).
  kMapped,
  // The file (the executable, or its weights file) read at load into anonymous memory from a
  // 2 MB boundary, advised MADV_HUGEPAGE before the read: 2 MB pages where THP allows, ordinary
  // pages (never an error) where it does not. Costs the read at load and private memory. Tables
  // of at least 2 MiB that the code only gathers rows from (vm/gathered_constants.h) are not
  // copied: the file is mapped over their whole pages inside the region, at the same addresses.
  kHuge,
};
inline constexpr uint64_t kHugeConstantPagesMinBytes = uint64_t{64} << 20;

// Whether a file is read into huge pages under `mode`, `file_bytes` being the bytes it would copy
// (the file but its gathered tables); `thp_enabled` is the text
// of /sys/kernel/mm/transparent_hugepage/enabled ("always [madvise] never"; "" if unknown, which
// kAuto takes as off), `mem_available` /proc/meminfo's MemAvailable in bytes (0 if unknown: off).
bool UseHugeConstantPages(ConstantPages mode, uint64_t file_bytes, absl::string_view thp_enabled,
                          uint64_t mem_available);
// "auto", "mapped" or "huge" (flags, DYNVM_CONSTANT_PAGES, Python's constant_pages).
absl::StatusOr<ConstantPages> ParseConstantPages(absl::string_view name);

// LoadOptions, DimInfo, ParamInfo and FunctionInfo are plain values: thread-compatible.
struct LoadOptions {
  BackendPolicy backends;  // which kernel backends may serve this executable
  isa::VerifyLimits limits;
  // Directory in which to look for a weights file the executable refers to; default: the
  // executable's own directory. LoadFromBytes needs this or weights_path (unless the weights
  // are already loaded in the process).
  std::string weights_dir;
  // The weights file itself (overrides weights_dir and the file name the executable records;
  // its hash and size must still match).
  std::string weights_path;
  // The weights file's bytes (a .dvw made in this process, as CompileResult::weights): used
  // instead of a file, copied once into the executable's aligned storage (need only live during
  // the load). Overrides weights_dir and weights_path; the hash and size must still match.
  absl::Span<const uint8_t> weights_data;
  // Also hash every byte of an uncompressed weights file at load (O(weights): the pages are
  // read) and compare with the executable's reference. Compressed weights are always hashed
  // after decompression.
  bool verify_weights_hash = false;
  // Where the constants live: the file mapping, or a copy in 2 MB pages (ConstantPages). Applies
  // to the file the constants are read from: the executable when they are inline, else its
  // weights file. A compressed segment is decompressed into a heap buffer either way (kHuge only
  // changes where its compressed bytes are read from). Weights shared in the process's registry
  // keep the pages of the load that first made them.
  ConstantPages constant_pages = ConstantPages::kAuto;
};

// One dimension of a declared shape: a size, or a symbol such as "batch".
struct DimInfo {
  int64_t value = -1;  // >= 0 when fixed
  std::string symbol;  // when value == -1
};

struct ParamInfo {
  std::string name;
  DType dtype = DType::kF32;
  ObjectKind kind = ObjectKind::kTensor;       // kTensor, kSequence or kOptional
  ObjectKind elem_kind = ObjectKind::kTensor;  // an optional's content: kTensor or kSequence
  // For a tensor: its shape. For a sequence (or an optional), the shape of its elements
  // (contents): every element is checked for the rank and the fixed dims; symbols are not
  // unified across elements.
  bool has_shape = true;
  std::vector<DimInfo> shape;
};

struct FunctionInfo {
  std::string name;
  bool is_entry = false;          // has a signature: callable from the host
  std::vector<ParamInfo> inputs;  // real inputs only: weights are constants, not inputs
  std::vector<ParamInfo> outputs;
  std::vector<std::pair<std::string, int64_t>> bounds;  // declared symbol upper bounds
};

class Executable {
 public:
  // Maps `path`, verifies it fully and binds a kernel to every kernel-table entry.
  static absl::StatusOr<std::shared_ptr<const Executable>> Load(const std::string& path,
                                                                const LoadOptions& options = {});
  // Same, from bytes in memory (copied into an aligned buffer).
  static absl::StatusOr<std::shared_ptr<const Executable>> LoadFromBytes(
      absl::Span<const uint8_t> bytes, const LoadOptions& options = {});
  // The same for the std::string that compiler::Compile and isa::AssembleToBytes return.
  static absl::StatusOr<std::shared_ptr<const Executable>> LoadFromBytes(
      absl::string_view bytes, const LoadOptions& options = {});

  ~Executable();
  Executable(const Executable&) = delete;
  Executable& operator=(const Executable&) = delete;

  int num_functions() const;
  const FunctionInfo& function(int index) const;
  // Index of the function named `name`; "" names the default entry ("main", or the first
  // function with a signature). NotFound lists the entry functions.
  absl::StatusOr<int> FindFunction(absl::string_view name) const;
  // The same lookup, as a handle for the VM's methods and RunOptions::handle.
  absl::StatusOr<FunctionHandle> ResolveFunction(absl::string_view name) const;

  // Constants marked as weights (initializers), and their total bytes.
  int num_weights() const;
  int64_t weight_bytes() const;
  int num_constants() const;
  int64_t constant_segment_bytes() const;
  const uint8_t* constant_segment() const;
  // Where the constants are (LoadOptions::constant_pages), in bytes of the file they are read
  // from (the executable or its weights file, headers included): held in private memory (the
  // copy in 2 MB pages, a buffer in memory; for a compressed segment, the decompressed bytes),
  // and read through the file's mapping (a mapped file; within a copy, the tables the code only
  // gathers rows from).
  int64_t constant_bytes_copied() const;
  int64_t constant_bytes_mapped() const;

  // The kernel bound to each kernel-table entry ("matmul.f32.ref" ...).
  int num_kernels() const;
  const Kernel& kernel(int index) const;
  const KernelSpec& kernel_spec(int index) const;

  // The source node recorded for an instruction ("" when stripped or absent).
  absl::string_view SourceNode(int function, uint32_t pc) const;

  uint64_t required_features() const;
  // Whether the constants come from a separate .dvw file; its content hash (0 if not).
  bool external_weights() const;
  uint64_t weights_hash() const;
  // Weight segments (weights files and decompressed segments) alive in this process's
  // registry: each is shared by every executable that refers to it.
  static int SharedSegmentCount();

  // A read-only copy of the whole constant segment on `device`'s device, made on the first
  // call (through `device`, by one thread; the others wait) and kept for the lifetime of this
  // executable: every VM on that device shares it. A failed upload is not kept (the next call
  // tries again). Constant views move to it at the same byte offsets.
  absl::StatusOr<StorageRef> DeviceConstants(DeviceContext& device) const;
  std::string DebugSummary() const;

  // Internal: what the VM runs (code, kernel and constant tables). Opaque here; defined in
  // vm/executable_impl.h, which is not installed.
  struct Rep;
  struct FunctionEntry;
  struct KernelEntry;
  struct ConstantEntry;
  struct Segment;
  const Rep& rep() const { return *rep_; }

 private:
  Executable();
  static absl::StatusOr<std::shared_ptr<const Executable>> Init(
      std::shared_ptr<const schema::MappedFile> file, const std::string& path,
      const LoadOptions& options);

  std::unique_ptr<Rep> rep_;
};

}  // namespace dynvm

#endif  // DYNVM_VM_EXECUTABLE_H_
