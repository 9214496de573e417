// Public API. Compiles a Module (from the graph builder or the ONNX importer) into a .dvm
// executable: shape inference, optimization passes, memory planning, code generation.
#ifndef DYNVM_COMPILER_COMPILER_H_
#define DYNVM_COMPILER_COMPILER_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/types.h"
#include "compiler/ir.h"

namespace dynvm::compiler {

struct CompileOptions {
  // Upper bounds of symbols (--bound NAME=N): values sized by bounded symbols are planned at
  // their maximum in the arena; a run that exceeds a bound is an error naming the symbol.
  std::vector<std::pair<std::string, int64_t>> bounds;
  bool optimize = true;  // constant folding, CSE, loop-invariant hoisting, dead code,
                         // pattern rewrites (compiler/rewrite/)
  // Pattern-rewrite rules not to apply, by name (vm-compile --disable-rewrite NAME).
  std::vector<std::string> disabled_rewrites;
  bool strip_debug = false;  // drop source locations
  // Refuse (Unimplemented, naming the node) a node no registered kernel accepts (its op, its
  // dtypes, its attributes), instead of producing a file that fails to load.
  bool check_kernels = true;
  // Values above this many bytes get their own pool storage instead of an arena slot.
  int64_t arena_value_limit = int64_t{256} << 20;
  std::string producer = "dynvm compiler";
  // The device to compile for (docs/cuda.md). kCUDA: a node runs on the device when a CUDA
  // kernel accepts it and it reads or yields a floating-point value or reads a value already on
  // the device; its outputs are planned in a device arena of the same layout as the host arena,
  // and outputs are copied to the host before ret. The VM moves other inputs between devices
  // at each invoke. Unimplemented in a build without CUDA.
  Device device = Device::kCPU;
  // Constants apart (vm-compile --weights-out): when set, CompileResult::weights holds a .dvw
  // file of this name, which the executable refers to by name, content hash and size
  // (docs/executable-format.md, "Weights files"). Give it the name the file will have beside
  // the .dvm (or load with LoadOptions::weights_path).
  std::string weights_file_name;
  // Store the constant segment zstd-compressed (vm-compile --compress), in the .dvm or the .dvw.
  bool compress = false;
  int compression_level = 3;
  // Weight-only quantization (vm-compile --quantize-weights, compiler/quantize_weights.h):
  // kI8 or kBF16 quantizes the weights of MatMul, Gemm, LSTM, GRU and RNN of at least
  // quantize_min_bytes (as f32); kU8 stores MatMul/Gemm weights as int4 blocks of quantize_block
  // values (com.microsoft MatMulNBits), with a zero point per block when quantize_zero_points;
  // kF32 leaves them.
  DType quantize_weights = DType::kF32;
  int64_t quantize_min_bytes = 16384;  // kDefaultQuantizeMinBytes
  int64_t quantize_block = 32;
  bool quantize_zero_points = false;
  // int4: the MatMulNBits accuracy_level written (4: int8 activations, ONNX Runtime GenAI's CPU
  // choice and the faster kernel; 0: f32 activations; 0-4).
  int64_t quantize_accuracy_level = 4;
};

struct FunctionReport {
  std::string name;
  int64_t arena_bytes = 0;      // the one arena of the function (planned, reused)
  int dynamic_alloc_sites = 0;  // allocations of intermediates made at run time besides the arena
  // Of those, the ones inside loops (or growth by append that reallocates in a loop): what a
  // decode loop's steady state may allocate. 0 when every loop's sizes are bounded.
  int loop_alloc_sites = 0;
  int output_allocs = 0;  // storage for the function's outputs (fresh each run, from the pool)
  int64_t largest_live_bytes = 0;  // the most arena bytes live at one time
  int num_values = 0;
  int instructions = 0;
  int invokes = 0;
};

struct KernelReport {
  std::string op;
  std::string dtype;
  std::string chosen;  // the kernel the runtime would bind (name includes the backend)
  // Conv-family entries (compiler/conv_fusion.h): the layout of X, Y and the residual as the
  // compiler placed them ("X plain, Y channels-last"); empty for other kernels.
  std::string layout;
};

// What one pass of the pipeline (compiler/pipeline.h), or one shape inference it needed (named
// "infer_shapes"), did.
struct PassRecord {
  std::string name;
  double ms = 0;
  bool changed = false;
};

struct CompileResult {
  std::string bytes;    // the .dvm file
  std::string weights;  // the .dvw file (CompileOptions::weights_file_name), else empty
  std::vector<FunctionReport> functions;
  std::vector<KernelReport> kernels;
  // How often each pattern-rewrite rule fired (every rule, zeros included; empty when not
  // optimizing).
  std::map<std::string, int> rewrites;
  // Nodes NarrowSelectedRows made compute one row (compiler/narrow_rows.cc; 0 when not
  // optimizing). Reported as "narrow_rows: N" with the rewrites.
  int narrowed_nodes = 0;
  // Nodes GatherRowsEarly made compute the rows a run-time index picks (compiler/gather_rows.cc;
  // the prompt step of --decode). Reported as "gather_rows: N" when nonzero.
  int gathered_row_nodes = 0;
  // Loop-carried values UnstackLoopCarried carried apart as their slices (a stacked KV cache;
  // compiler/unstack_carried.cc). Reported as "unstack_loop_carried: N" when nonzero.
  int unstacked_carried = 0;
  // Constant [K, N] weights stored transposed for decode-shaped products
  // (compiler/transpose_weights.h; 0 when not optimizing, quantizing, or off the CPU).
  int transposed_weights = 0;
  // Constant [K, N] weights stored as the packed GEMM's panels for dynvm::MatMul and
  // dynvm::Linear with b_packed_n (the same pass; "pack_weights: N" with the rewrites).
  int packed_weights = 0;
  // What the conv-family fusion did (all zero when nothing fused or not optimizing): Conv nodes
  // fused, Pads / BatchNormalizations / residual Adds / activations folded into them, values
  // kept channels-last between conv-family ops, and chain boundaries (a reorder each, at run
  // time) where a channels-last value meets plain layout.
  std::map<std::string, int> conv_fusion;
  // What the caller should hear about but that does not stop the compile: a bound naming no
  // input dim or scalar input of the default function (a typo has no effect).
  std::vector<std::string> warnings;
  // One line per weight considered for quantization ("quantize NAME (NODE): ...").
  std::vector<std::string> quantized_weights;
  // The pass pipeline as it ran: each pass (and each shape inference it needed) with its time
  // and whether it changed the module (compiler/pipeline.h). Reported as "pass NAME: T ms".
  std::vector<PassRecord> passes;
  std::string ReportText() const;
};

absl::StatusOr<CompileResult> Compile(Module& module, const CompileOptions& options = {});

}  // namespace dynvm::compiler

#endif  // DYNVM_COMPILER_COMPILER_H_
