#include "compiler/compiler.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "allocator/cuda_allocator.h"
#include "common/status_macros.h"
#include "compiler/codegen.h"
#include "compiler/conv_fusion.h"
#include "compiler/memory_plan.h"
#include "compiler/ops/names.h"
#include "compiler/passes.h"
#include "compiler/pipeline.h"
#include "compiler/quantize_weights.h"
#include "compiler/rewrite/rewrite.h"
#include "compiler/transpose_weights.h"
#include "kernels/registry.h"

namespace dynvm::compiler {

namespace {

// The layouts the conv fusion gave a conv-family kernel's operands (its channels_last_*
// flags), with where a reorder runs: a plain operand of a conv is reordered into oneDNN's
// chosen layout when that differs; a channels-last one is passed as is. Empty for other ops.
std::string ConvLayout(const KernelSpec& spec) {
  const AttrValue* in = spec.Find("channels_last_in");
  const AttrValue* out = spec.Find("channels_last_out");
  const AttrValue* sum = spec.Find("channels_last_sum");
  if (in == nullptr && out == nullptr && sum == nullptr) return "";
  auto flag = [](const AttrValue* a) { return a != nullptr && a->i != 0; };
  std::string s = absl::StrCat("layout X ", flag(in) ? "channels-last" : "plain", ", Y ",
                               flag(out) ? "channels-last" : "plain");
  if (sum != nullptr) absl::StrAppend(&s, ", residual ", flag(sum) ? "channels-last" : "plain");
  return s;
}

// Marks each dynvm::Linear, com.microsoft DynamicQuantizeMatMul and QLinearConv whose weight is a
// constant of the executable (constant segment: immutable, outliving the kernels) with
// constant_weights = 1, so that its kernel may keep a packed copy (kernels/dnnl/linear.cc,
// quant.cc, qconv.cc). Returns how many.
int MarkConstantLinearWeights(Graph& g) {
  int count = 0;
  for (auto& n : g.nodes) {
    for (auto& [name, sub] : n->subgraphs) count += MarkConstantLinearWeights(*sub);
    const bool linear = n->domain == ops::kDynvmDomain && n->op == ops::kLinear;
    const bool dynquant = n->domain == ops::kMsftDomain && n->op == "DynamicQuantizeMatMul";
    const bool qconv = n->domain.empty() && n->op == "QLinearConv";
    const size_t wi = qconv ? 3 : 1;
    if ((!linear && !dynquant && !qconv) || n->inputs.size() <= wi || n->inputs[wi] == nullptr ||
        !n->inputs[wi]->constant) {
      continue;
    }
    AttrValue one;
    one.type = AttrValue::Type::kInt;
    one.i = 1;
    n->attrs["constant_weights"] = one;
    ++count;
  }
  return count;
}

// Bounds that name neither a symbolic dim of the first function's inputs nor a one-element
// integer input (a trip count such as max_new_tokens): they would have no effect.
std::vector<std::string> UnknownBounds(const Module& module, const CompileOptions& options) {
  std::vector<std::string> warnings;
  for (const auto& [name, bound] : options.bounds) {
    bool found = false;
    for (const Value* in : module.functions()[0].graph->inputs) {
      if (!in->shape) continue;
      bool one = IsInteger(in->dtype);
      for (Dim d : *in->shape) {
        found |= SymbolicContext::IsSymbol(d) && d->name == name;
        one &= SymbolicContext::AsConst(d) == 1;
      }
      found |= one && in->name == name;
    }
    if (!found) {
      warnings.push_back(
          absl::StrCat("bound ", name, ": no input dim or scalar input is named '", name, "'"));
    }
  }
  return warnings;
}

// The passes of Compile, in order (docs/compiler.md, "The pass pipeline"). Each pass's counts go
// to `result`.
Pipeline BuildPipeline(const CompileOptions& options, CompileResult& result) {
  Pipeline p;
  p.Add({"bind_scalar_inputs", /*needs_shapes=*/false, /*invalidates_shapes=*/false,
         [](Module& m) -> absl::StatusOr<bool> { return BindScalarInputs(m) > 0; }});
  // Scan runs as a Loop. A Scan whose output axes need ranks is lowered after inference.
  auto scans_left = std::make_shared<int>(0);
  // Nothing is inferred yet when it runs: it reports a change so that inference follows.
  p.Add({"lower_scans", false, true, [scans_left](Module& m) -> absl::StatusOr<bool> {
           DYNVM_ASSIGN_OR_RETURN(*scans_left, LowerScans(m));
           return true;
         }});
  p.Add({"lower_scans_late", true, true, [scans_left](Module& m) -> absl::StatusOr<bool> {
           if (*scans_left == 0) return false;
           DYNVM_ASSIGN_OR_RETURN(const int left, LowerScans(m));
           if (left > 0) {
             return absl::UnimplementedError("a Scan output of unknown rank moves its scan axis");
           }
           return true;
         }});
  const bool quantize = options.quantize_weights != DType::kF32;
  if (options.optimize) {
    // Folding removes kernels whose outputs were dynamic (fresh symbols they defined): shapes
    // are inferred again after it. Quantized MatMul weights stay for qdq_matmul.
    p.Add({"fold_constants_keep_quantized", true, true, [](Module& m) -> absl::StatusOr<bool> {
             DYNVM_RETURN_IF_ERROR(FoldConstants(m, 1 << 20, /*keep_quantized_weights=*/true));
             return true;
           }});
    // The rewrites infer shapes after each sweep that changed something.
    // --disable-rewrite unstack_loop_carried turns the loop-carried unstacking off (a pass of
    // its own, compiler/unstack_carried.cc), and "transpose_weights" the pass below; the other
    // names are pattern rules.
    std::vector<std::string> disabled = options.disabled_rewrites;
    const bool unstack = std::erase(disabled, std::string("unstack_loop_carried")) == 0;
    std::erase(disabled, std::string(kTransposeWeightsSwitch));
    const bool pack_weights = std::erase(disabled, std::string(kPackWeightsSwitch)) == 0;
    std::erase(disabled, std::string(kPresentInPlaceSwitch));  // the memory plan reads it
    rewrite::RewriteOptions rewrites{std::move(disabled), options.device};
    rewrites.other_switches = {"unstack_loop_carried", std::string(kTransposeWeightsSwitch),
                               std::string(kPackWeightsSwitch), std::string(kPresentInPlaceSwitch)};
    rewrites.keep_weight_products = quantize;  // quantize_weights takes MatMul/Gemm weights
    p.Add({"rewrite", true, false, [rewrites, &result](Module& m) -> absl::StatusOr<bool> {
             DYNVM_ASSIGN_OR_RETURN(result.rewrites, rewrite::ApplyRewrites(m, rewrites));
             for (const auto& [rule, count] : result.rewrites) {
               if (count > 0) return true;
             }
             return false;
           }});
    p.Add({"narrow_rows", true, true, [&result](Module& m) -> absl::StatusOr<bool> {
             result.narrowed_nodes = NarrowSelectedRows(m);
             return result.narrowed_nodes > 0;
           }});
    p.Add({"gather_rows", true, true, [&result](Module& m) -> absl::StatusOr<bool> {
             result.gathered_row_nodes = GatherRowsEarly(m);
             return result.gathered_row_nodes > 0;
           }});
    p.Add({"cse", true, false, [](Module& m) -> absl::StatusOr<bool> {
             EliminateCommonSubexpressions(m);
             return true;
           }});
    p.Add({"hoist_loop_invariants", true, false, [](Module& m) -> absl::StatusOr<bool> {
             HoistLoopInvariants(m);
             return true;
           }});
    p.Add({"fold_constants", true, true, [](Module& m) -> absl::StatusOr<bool> {
             DYNVM_RETURN_IF_ERROR(FoldConstants(m));
             return true;
           }});
    if (unstack) {
      p.Add({"unstack_loop_carried", true, false, [&result](Module& m) -> absl::StatusOr<bool> {
               DYNVM_ASSIGN_OR_RETURN(result.unstacked_carried, UnstackLoopCarried(m));
               return result.unstacked_carried > 0;
             }});
    }
    p.Add({"fuse_convolutions", true, true, [&result](Module& m) -> absl::StatusOr<bool> {
             DYNVM_ASSIGN_OR_RETURN(ConvFusionCounts fused, FuseConvolutions(m));
             if (fused.convs == 0 && fused.transposes == 0 && fused.quantized_blocked == 0 &&
                 fused.channel_pads == 0) {
               return false;
             }
             result.conv_fusion = {{"convs", fused.convs},
                                   {"pads", fused.pads},
                                   {"batch_norms", fused.batch_norms},
                                   {"scales", fused.scales},
                                   {"transposes", fused.transposes},
                                   {"sums", fused.sums},
                                   {"activations", fused.activations},
                                   {"depthwise_pairs", fused.depthwise},
                                   {"channel_splits", fused.splits},
                                   {"channel_muls", fused.channel_muls},
                                   {"channel_pads", fused.channel_pads},
                                   {"channels_last_values", fused.blocked},
                                   {"quantized_channels_last_values", fused.quantized_blocked}};
             return true;
           }});
    // Decode-shaped products read constant weights as panels of 16 columns or [N, K] rows
    // (compiler/transpose_weights.h); kPackWeightsSwitch turns the panels off.
    // Not when weights are quantized (quantize_weights takes MatMul's [K, N] weights) nor off
    // the CPU; kTransposeWeightsSwitch in disabled_rewrites turns it off (A/B).
    const bool transpose_weights =
        !quantize && options.device == Device::kCPU &&
        std::find(options.disabled_rewrites.begin(), options.disabled_rewrites.end(),
                  kTransposeWeightsSwitch) == options.disabled_rewrites.end();
    if (transpose_weights) {
      p.Add({"transpose_weights", true, true,
             [&result, pack_weights](Module& m) -> absl::StatusOr<bool> {
               const WeightLayouts done = TransposeConstantWeights(m, pack_weights);
               result.transposed_weights = done.transposed;
               result.packed_weights = done.packed;
               return done.transposed + done.packed > 0;
             }});
    }
    p.Add({"dead_code", false, false, [](Module& m) -> absl::StatusOr<bool> {
             EliminateDeadCode(m);
             return true;
           }});
    p.Add({"mark_constant_weights", false, false, [](Module& m) -> absl::StatusOr<bool> {
             int marked = 0;
             for (Function& f : m.functions()) marked += MarkConstantLinearWeights(*f.graph);
             return marked > 0;
           }});
  }
  if (quantize) {
    QuantizeWeightsOptions q{options.quantize_weights, options.quantize_min_bytes,
                             options.quantize_block, options.quantize_zero_points,
                             options.quantize_accuracy_level};
    p.Add({"quantize_weights", true, true, [q, &result](Module& m) -> absl::StatusOr<bool> {
             DYNVM_ASSIGN_OR_RETURN(std::vector<QuantizedWeightReport> quantized,
                                    QuantizeWeights(m, q));
             for (const QuantizedWeightReport& r : quantized) {
               result.quantized_weights.push_back(r.Text());
             }
             return true;
           }});
  }
  return p;
}

}  // namespace

absl::StatusOr<CompileResult> Compile(Module& module, const CompileOptions& options) {
  if (options.device == Device::kCUDA && !CudaBuildEnabled()) {
    return absl::UnimplementedError(
        "cannot compile for the cuda device: this build has no CUDA device support");
  }
  if (options.device == Device::kCUDA) {  // the CUDA kernels come with the CUDA module
    DYNVM_RETURN_IF_ERROR(KernelRegistry::Global().LoadDeviceKernels(Device::kCUDA),
                          "cannot compile for the cuda device");
  }
  for (const auto& [name, bound] : options.bounds) {
    if (bound < 0)
      return absl::InvalidArgumentError(absl::StrCat("bound of '", name, "' is negative"));
    module.sym().SetBound(name, bound);
  }
  if (module.functions().empty()) return absl::InvalidArgumentError("module has no functions");
  for (Function& f : module.functions()) {
    if (f.output_names.size() == f.graph->outputs.size()) continue;
    f.output_names.clear();
    for (const Value* out : f.graph->outputs) f.output_names.push_back(out ? out->name : "");
  }
  CompileResult result;
  result.warnings = UnknownBounds(module, options);
  Pipeline pipeline = BuildPipeline(options, result);
  DYNVM_RETURN_IF_ERROR(pipeline.Run(module));
  result.passes = pipeline.records();
  ExecutableBuilder builder;
  builder.exe().producer = options.producer;
  // Planning and emission per function, reported after the passes.
  const auto codegen_start = std::chrono::steady_clock::now();
  for (size_t i = 0; i < module.functions().size(); ++i) {
    DYNVM_ASSIGN_OR_RETURN(FunctionReport r,
                           GenerateFunction(module, module.functions()[i], static_cast<uint32_t>(i),
                                            builder, options));
    result.functions.push_back(std::move(r));
  }
  result.passes.push_back(
      {"codegen",
       std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - codegen_start)
           .count(),
       true});
  // Which kernel the runtime would bind to each kernel-table entry.
  for (size_t i = 0; i < builder.exe().kernels.size(); ++i) {
    const fb::KernelT& k = *builder.exe().kernels[i];
    const KernelSpec& spec = builder.spec(static_cast<uint32_t>(i));
    KernelReport kr;
    kr.op = k.domain.empty() ? k.op : absl::StrCat(k.domain, "::", k.op);
    kr.dtype = !spec.outputs.empty() && spec.outputs[0].dtype != kAnyDType
                   ? std::string(DTypeName(static_cast<DType>(spec.outputs[0].dtype)))
                   : "";
    // Attributes matter for which backend accepts the entry; tensor attributes are checked
    // at load, so the report names the op's first registered backend in that case.
    bool has_tensor_attr = false;
    for (const auto& [name, a] : spec.attrs) has_tensor_attr |= a.type == AttrValue::Type::kTensor;
    if (has_tensor_attr) {
      kr.chosen = "(decided at load)";
    } else {
      absl::StatusOr<std::unique_ptr<Kernel>> kernel = KernelRegistry::Global().Create(spec);
      kr.chosen = kernel.ok() ? (*kernel)->name()
                              : absl::StrCat("unavailable: ", kernel.status().message());
    }
    kr.layout = ConvLayout(spec);
    result.kernels.push_back(std::move(kr));
  }
  schema::WriteOptions write;
  write.strip_debug = options.strip_debug;
  write.compress = options.compress;
  write.compression_level = options.compression_level;
  write.weights_file_name = options.weights_file_name;
  DYNVM_ASSIGN_OR_RETURN(schema::SerializedFiles files, builder.Serialize(write));
  result.bytes = std::move(files.executable);
  result.weights = std::move(files.weights);
  return result;
}

std::string CompileResult::ReportText() const {
  std::string out;
  for (const FunctionReport& f : functions) {
    absl::StrAppendFormat(
        &out,
        "function %s: arena_bytes=%d arenas=%d dynamic_alloc_sites=%d loop_alloc_sites=%d "
        "output_allocs=%d largest_live_bytes=%d instructions=%d invokes=%d\n",
        f.name, f.arena_bytes, f.arena_bytes > 0 ? 1 : 0, f.dynamic_alloc_sites, f.loop_alloc_sites,
        f.output_allocs, f.largest_live_bytes, f.instructions, f.invokes);
  }
  for (const auto& [rule, count] : rewrites) {
    absl::StrAppendFormat(&out, "rewrite %s: %d\n", rule, count);
  }
  if (!rewrites.empty()) absl::StrAppendFormat(&out, "narrow_rows: %d\n", narrowed_nodes);
  if (gathered_row_nodes > 0) {
    absl::StrAppendFormat(&out, "gather_rows: %d\n", gathered_row_nodes);
  }
  if (unstacked_carried > 0) {
    absl::StrAppendFormat(&out, "unstack_loop_carried: %d\n", unstacked_carried);
  }
  if (!rewrites.empty()) {
    absl::StrAppendFormat(&out, "transpose_weights: %d\n", transposed_weights);
    absl::StrAppendFormat(&out, "pack_weights: %d\n", packed_weights);
  }
  for (const auto& [what, count] : conv_fusion) {
    absl::StrAppendFormat(&out, "conv_fusion %s: %d\n", what, count);
  }
  for (const std::string& q : quantized_weights) absl::StrAppend(&out, q, "\n");
  for (const PassRecord& p : passes) {
    absl::StrAppendFormat(&out, "pass %s: %.3f ms%s\n", p.name, p.ms,
                          p.changed ? "" : " (no change)");
  }
  for (size_t i = 0; i < kernels.size(); ++i) {
    absl::StrAppendFormat(&out, "kernel %d: %s %s -> %s%s%s\n", i, kernels[i].op, kernels[i].dtype,
                          kernels[i].chosen, kernels[i].layout.empty() ? "" : "; ",
                          kernels[i].layout);
  }
  return out;
}

}  // namespace dynvm::compiler
