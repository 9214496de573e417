#include "compiler/onnx/op_support.h"

#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"

namespace dynvm::compiler::onnx {
namespace {

using AttrType = ::onnx::AttributeProto::AttributeType;

// One line per operator: its name, the opset its opset-7 schema dates from (so a model of an
// older opset may use it only when the operator has not changed since), its input arity per
// schema version, and its attributes "name:T ..." where T is i (INT), f (FLOAT), s (STRING), I
// (INTS), F (FLOATS), S (STRINGS), t (TENSOR), g (GRAPH), T (TYPE_PROTO), x (SPARSE_TENSOR). Taken
// from the ONNX operator schemas of opsets 7 to 17; every operator listed has a reference kernel,
// or is control flow (If, Loop, Scan) or a Constant, which the importer turns into a value, or a
// sequence or optional operator, which the code generator lowers to seq_*/opt_* instructions.
struct OpEntry {
  const char* op;
  int since;  // the schema in force at opset 7 dates from this opset (7: from 7 or later)
  // Per schema version "since:max_inputs:required_mask": from opset `since` on, at most
  // `max_inputs` inputs (0: any number) and the inputs whose bit is set in `required_mask`
  // must be present.
  const char* arity;
  const char* attrs;
};
constexpr OpEntry kOps[] = {
    {"Abs", 6, "1:1:1 6:1:1 13:1:1", ""},
    {"Acos", 7, "7:1:1", ""},
    {"Acosh", 7, "9:1:1", ""},
    {"Add", 7, "1:2:3 6:2:3 7:2:3 13:2:3 14:2:3", ""},
    {"And", 7, "1:2:3 7:2:3", ""},
    {"ArgMax", 1, "1:1:1 11:1:1 12:1:1 13:1:1", "axis:i keepdims:i select_last_index:i"},
    {"ArgMin", 1, "1:1:1 11:1:1 12:1:1 13:1:1", "axis:i keepdims:i select_last_index:i"},
    {"Asin", 7, "7:1:1", ""},
    {"Asinh", 7, "9:1:1", ""},
    {"Atan", 7, "7:1:1", ""},
    {"Atanh", 7, "9:1:1", ""},
    {"AveragePool", 1, "1:1:1 7:1:1 10:1:1 11:1:1",
     "auto_pad:s ceil_mode:i count_include_pad:i kernel_shape:I pads:I strides:I"},
    {"BatchNormalization", 6, "6:5:31 7:5:31 9:5:31 14:5:31 15:5:31",
     "epsilon:f is_test:i momentum:f spatial:i training_mode:i"},
    {"Bernoulli", 7, "15:1:1", "dtype:i seed:f"},
    {"BitShift", 7, "11:2:3", "direction:s"},
    {"BlackmanWindow", 7, "17:1:1", "output_datatype:i periodic:i"},
    {"Cast", 6, "1:1:1 6:1:1 9:1:1 13:1:1", "to:i"},
    {"CastLike", 7, "15:2:3", ""},
    {"Ceil", 6, "1:1:1 6:1:1 13:1:1", ""},
    {"Celu", 7, "12:1:1", "alpha:f"},
    {"Clip", 6, "1:1:1 6:1:1 11:3:1 12:3:1 13:3:1", "max:f min:f"},
    {"Compress", 7, "9:2:3 11:2:3", "axis:i"},
    {"Concat", 4, "1:0:1 4:0:1 11:0:1 13:0:1", "axis:i"},
    {"ConcatFromSequence", 7, "11:1:1", "axis:i new_axis:i"},
    {"Constant", 1, "1:0:0 9:0:0 11:0:0 12:0:0 13:0:0",
     "sparse_value:x value:t value_float:f value_floats:F value_int:i value_ints:I value_string:s "
     "value_strings:S"},
    {"ConstantOfShape", 7, "9:1:1", "value:t"},
    {"Conv", 1, "1:3:3 11:3:3", "auto_pad:s dilations:I group:i kernel_shape:I pads:I strides:I"},
    {"ConvInteger", 7, "10:4:3", "auto_pad:s dilations:I group:i kernel_shape:I pads:I strides:I"},
    {"ConvTranspose", 1, "1:3:3 11:3:3",
     "auto_pad:s dilations:I group:i kernel_shape:I output_padding:I output_shape:I pads:I "
     "strides:I"},
    {"Cos", 7, "7:1:1", ""},
    {"Cosh", 7, "9:1:1", ""},
    {"CumSum", 7, "11:2:3 14:2:3", "exclusive:i reverse:i"},
    {"DFT", 7, "17:2:1", "axis:i inverse:i onesided:i"},
    {"DepthToSpace", 1, "1:1:1 11:1:1 13:1:1", "blocksize:i mode:s"},
    {"DequantizeLinear", 7, "10:3:3 13:3:3", "axis:i"},
    {"Det", 7, "11:1:1", ""},
    {"Div", 7, "1:2:3 6:2:3 7:2:3 13:2:3 14:2:3", ""},
    {"Dropout", 7, "1:1:1 6:1:1 7:1:1 10:1:1 12:3:1 13:3:1", "ratio:f seed:i"},
    {"DynamicQuantizeLinear", 7, "11:1:1", ""},
    {"Einsum", 7, "12:0:1", "equation:s"},
    {"Elu", 6, "1:1:1 6:1:1", "alpha:f"},
    {"Equal", 7, "1:2:3 7:2:3 11:2:3 13:2:3", ""},
    {"Erf", 7, "9:1:1 13:1:1", ""},
    {"Exp", 6, "1:1:1 6:1:1 13:1:1", ""},
    {"Expand", 7, "8:2:3 13:2:3", ""},
    {"EyeLike", 7, "9:1:1", "dtype:i k:i"},
    {"Flatten", 1, "1:1:1 9:1:1 11:1:1 13:1:1", "axis:i"},
    {"Floor", 6, "1:1:1 6:1:1 13:1:1", ""},
    {"GRU", 7, "1:6:7 3:6:7 7:6:7 14:6:7",
     "activation_alpha:F activation_beta:F activations:S clip:f direction:s hidden_size:i layout:i "
     "linear_before_reset:i"},
    {"Gather", 1, "1:2:3 11:2:3 13:2:3", "axis:i"},
    {"GatherElements", 7, "11:2:3 13:2:3", "axis:i"},
    {"GatherND", 7, "11:2:3 12:2:3 13:2:3", "batch_dims:i"},
    {"Gemm", 7, "1:3:7 6:3:7 7:3:7 9:3:7 11:3:3 13:3:3", "alpha:f beta:f transA:i transB:i"},
    {"GlobalAveragePool", 1, "1:1:1", ""},
    {"GlobalMaxPool", 1, "1:1:1", ""},
    {"Greater", 7, "1:2:3 7:2:3 9:2:3 13:2:3", ""},
    {"GreaterOrEqual", 7, "12:2:3 16:2:3", ""},
    {"GridSample", 7, "16:2:3", "align_corners:i mode:s padding_mode:s"},
    {"HammingWindow", 7, "17:1:1", "output_datatype:i periodic:i"},
    {"HannWindow", 7, "17:1:1", "output_datatype:i periodic:i"},
    {"HardSigmoid", 6, "1:1:1 6:1:1", "alpha:f beta:f"},
    {"HardSwish", 7, "14:1:1", ""},
    {"Hardmax", 1, "1:1:1 11:1:1 13:1:1", "axis:i"},
    {"Identity", 1, "1:1:1 13:1:1 14:1:1 16:1:1", ""},
    {"If", 1, "1:1:1 11:1:1 13:1:1 16:1:1", "else_branch:g then_branch:g"},
    {"InstanceNormalization", 6, "6:3:7", "epsilon:f"},
    {"IsInf", 7, "10:1:1", "detect_negative:i detect_positive:i"},
    {"IsNaN", 7, "9:1:1 13:1:1", ""},
    {"LRN", 1, "1:1:1 13:1:1", "alpha:f beta:f bias:f size:i"},
    {"LSTM", 7, "1:8:7 7:8:7 14:8:7",
     "activation_alpha:F activation_beta:F activations:S clip:f direction:s hidden_size:i "
     "input_forget:i layout:i"},
    {"LayerNormalization", 7, "17:3:3", "axis:i epsilon:f stash_type:i"},
    {"LeakyRelu", 6, "1:1:1 6:1:1 16:1:1", "alpha:f"},
    {"Less", 7, "1:2:3 7:2:3 9:2:3 13:2:3", ""},
    {"LessOrEqual", 7, "12:2:3 16:2:3", ""},
    {"Log", 6, "1:1:1 6:1:1 13:1:1", ""},
    {"LogSoftmax", 1, "1:1:1 11:1:1 13:1:1", "axis:i"},
    {"Loop", 1, "1:0:0 11:0:0 13:0:0 16:0:0", "body:g"},
    {"MatMul", 1, "1:2:3 9:2:3 13:2:3", ""},
    {"MatMulInteger", 7, "10:4:3", ""},
    {"Max", 6, "1:0:1 6:0:1 8:0:1 12:0:1 13:0:1", ""},
    {"MaxPool", 1, "1:1:1 8:1:1 10:1:1 11:1:1 12:1:1",
     "auto_pad:s ceil_mode:i dilations:I kernel_shape:I pads:I storage_order:i strides:I"},
    {"MaxUnpool", 7, "9:2:3 11:3:3", "kernel_shape:I pads:I strides:I"},
    {"Mean", 6, "1:0:1 6:0:1 8:0:1 13:0:1", ""},
    {"MeanVarianceNormalization", 7, "9:1:1 13:1:1", "axes:I"},
    {"MelWeightMatrix", 7, "17:5:31", "output_datatype:i"},
    {"Min", 6, "1:0:1 6:0:1 8:0:1 12:0:1 13:0:1", ""},
    {"Mod", 7, "10:2:3 13:2:3", "fmod:i"},
    {"Mul", 7, "1:2:3 6:2:3 7:2:3 13:2:3 14:2:3", ""},
    {"Neg", 6, "1:1:1 6:1:1 13:1:1", ""},
    {"NegativeLogLikelihoodLoss", 7, "12:3:3 13:3:3", "ignore_index:i reduction:s"},
    {"NonMaxSuppression", 7, "10:5:3 11:5:3", "center_point_box:i"},
    {"NonZero", 7, "9:1:1 13:1:1", ""},
    {"Not", 1, "1:1:1", ""},
    {"OneHot", 7, "9:3:7 11:3:7", "axis:i"},
    {"Optional", 7, "15:1:0", "type:T"},
    {"OptionalGetElement", 7, "15:1:1", ""},
    {"OptionalHasElement", 7, "15:1:1", ""},
    {"Or", 7, "1:2:3 7:2:3", ""},
    {"PRelu", 7, "1:2:3 6:2:3 7:2:3 9:2:3 16:2:3", ""},
    {"Pad", 2, "1:1:1 2:1:1 11:3:3 13:3:3", "mode:s pads:I value:f"},
    {"Pow", 7, "1:2:3 7:2:3 12:2:3 13:2:3 15:2:3", ""},
    {"QLinearConv", 7, "10:9:255",
     "auto_pad:s dilations:I group:i kernel_shape:I pads:I strides:I"},
    {"QLinearMatMul", 7, "10:8:255", ""},
    {"QuantizeLinear", 7, "10:3:3 13:3:3", "axis:i"},
    {"RNN", 7, "1:6:7 7:6:7 14:6:7",
     "activation_alpha:F activation_beta:F activations:S clip:f direction:s hidden_size:i "
     "layout:i"},
    {"RandomNormal", 1, "1:0:0", "dtype:i mean:f scale:f seed:f shape:I"},
    {"RandomNormalLike", 1, "1:1:1", "dtype:i mean:f scale:f seed:f"},
    {"RandomUniform", 1, "1:0:0", "dtype:i high:f low:f seed:f shape:I"},
    {"RandomUniformLike", 1, "1:1:1", "dtype:i high:f low:f seed:f"},
    {"Range", 7, "11:3:7", ""},
    {"Reciprocal", 6, "1:1:1 6:1:1 13:1:1", ""},
    {"ReduceL1", 1, "1:1:1 11:1:1 13:1:1", "axes:I keepdims:i"},
    {"ReduceL2", 1, "1:1:1 11:1:1 13:1:1", "axes:I keepdims:i"},
    {"ReduceLogSum", 1, "1:1:1 11:1:1 13:1:1", "axes:I keepdims:i"},
    {"ReduceLogSumExp", 1, "1:1:1 11:1:1 13:1:1", "axes:I keepdims:i"},
    {"ReduceMax", 1, "1:1:1 11:1:1 12:1:1 13:1:1", "axes:I keepdims:i"},
    {"ReduceMean", 1, "1:1:1 11:1:1 13:1:1", "axes:I keepdims:i"},
    {"ReduceMin", 1, "1:1:1 11:1:1 12:1:1 13:1:1", "axes:I keepdims:i"},
    {"ReduceProd", 1, "1:1:1 11:1:1 13:1:1", "axes:I keepdims:i"},
    {"ReduceSum", 1, "1:1:1 11:1:1 13:2:1", "axes:I keepdims:i noop_with_empty_axes:i"},
    {"ReduceSumSquare", 1, "1:1:1 11:1:1 13:1:1", "axes:I keepdims:i"},
    {"Relu", 6, "1:1:1 6:1:1 13:1:1 14:1:1", ""},
    {"Reshape", 5, "1:1:1 5:2:3 13:2:3 14:2:3", "allowzero:i"},
    {"Resize", 7, "10:2:3 11:4:1 13:4:1",
     "coordinate_transformation_mode:s cubic_coeff_a:f exclude_outside:i extrapolation_value:f "
     "mode:s nearest_mode:s"},
    {"ReverseSequence", 7, "10:2:3", "batch_axis:i time_axis:i"},
    {"RoiAlign", 7, "16:3:7",
     "coordinate_transformation_mode:s mode:s output_height:i output_width:i sampling_ratio:i "
     "spatial_scale:f"},
    {"Round", 7, "11:1:1", ""},
    {"STFT", 7, "17:4:3", "onesided:i"},
    {"Scan", 7, "8:0:2 9:0:1 11:0:1 16:0:1",
     "body:g directions:I num_scan_inputs:i scan_input_axes:I scan_input_directions:I "
     "scan_output_axes:I scan_output_directions:I"},
    {"Scatter", 7, "9:3:7 11:3:7", "axis:i"},
    {"ScatterElements", 7, "11:3:7 13:3:7 16:3:7", "axis:i reduction:s"},
    {"ScatterND", 7, "11:3:7 13:3:7 16:3:7", "reduction:s"},
    {"Selu", 6, "1:1:1 6:1:1", "alpha:f gamma:f"},
    {"SequenceAt", 7, "11:2:3", ""},
    {"SequenceConstruct", 7, "11:0:1", ""},
    {"SequenceEmpty", 7, "11:0:0", "dtype:i"},
    {"SequenceErase", 7, "11:2:1", ""},
    {"SequenceInsert", 7, "11:3:3", ""},
    {"SequenceLength", 7, "11:1:1", ""},
    {"SequenceMap", 7, "17:0:1", "body:g"},
    {"Shape", 1, "1:1:1 13:1:1 15:1:1", "end:i start:i"},
    {"Shrink", 7, "9:1:1", "bias:f lambd:f"},
    {"Sigmoid", 6, "1:1:1 6:1:1 13:1:1", ""},
    {"Sign", 7, "9:1:1 13:1:1", ""},
    {"Sin", 7, "7:1:1", ""},
    {"Sinh", 7, "9:1:1", ""},
    {"Size", 1, "1:1:1 13:1:1", ""},
    {"Slice", 1, "1:1:1 10:5:7 11:5:7 13:5:7", "axes:I ends:I starts:I"},
    {"Softmax", 1, "1:1:1 11:1:1 13:1:1", "axis:i"},
    {"SoftmaxCrossEntropyLoss", 7, "12:3:3 13:3:3", "ignore_index:i reduction:s"},
    {"Softplus", 1, "1:1:1", ""},
    {"Softsign", 1, "1:1:1", ""},
    {"SpaceToDepth", 1, "1:1:1 13:1:1", "blocksize:i"},
    {"Split", 2, "1:2:1 2:1:1 11:1:1 13:2:1", "axis:i split:I"},
    {"SplitToSequence", 7, "11:2:1", "axis:i keepdims:i"},
    {"Sqrt", 6, "1:1:1 6:1:1 13:1:1", ""},
    {"Squeeze", 1, "1:1:1 11:1:1 13:2:1", "axes:I"},
    {"StringNormalizer", 7, "10:1:1",
     "case_change_action:s is_case_sensitive:i locale:s stopwords:S"},
    {"Sub", 7, "1:2:3 6:2:3 7:2:3 13:2:3 14:2:3", ""},
    {"Sum", 6, "1:0:1 6:0:1 8:0:1 13:0:1", ""},
    {"Tan", 7, "7:1:1", ""},
    {"Tanh", 6, "1:1:1 6:1:1 13:1:1", ""},
    {"TfIdfVectorizer", 7, "9:1:1",
     "max_gram_length:i max_skip_count:i min_gram_length:i mode:s ngram_counts:I ngram_indexes:I "
     "pool_int64s:I pool_strings:S weights:F"},
    {"ThresholdedRelu", 7, "10:1:1", "alpha:f"},
    {"Tile", 6, "1:3:7 6:2:3 13:2:3", ""},
    {"TopK", 1, "1:1:1 10:2:3 11:2:3", "axis:i k:i largest:i sorted:i"},
    {"Transpose", 1, "1:1:1 13:1:1", "perm:I"},
    {"Trilu", 7, "14:2:1", "upper:i"},
    {"Unique", 7, "11:1:1", "axis:i sorted:i"},
    {"Unsqueeze", 1, "1:1:1 11:1:1 13:2:3", "axes:I"},
    {"Upsample", 7, "7:1:1 9:2:3", "mode:s scales:F"},
    {"Where", 7, "9:3:7 16:3:7", ""},
    {"Xor", 7, "1:2:3 7:2:3", ""},
};

AttrType TypeOfCode(char c) {
  switch (c) {
    case 'i':
      return ::onnx::AttributeProto::INT;
    case 'f':
      return ::onnx::AttributeProto::FLOAT;
    case 's':
      return ::onnx::AttributeProto::STRING;
    case 'I':
      return ::onnx::AttributeProto::INTS;
    case 'F':
      return ::onnx::AttributeProto::FLOATS;
    case 'S':
      return ::onnx::AttributeProto::STRINGS;
    case 't':
      return ::onnx::AttributeProto::TENSOR;
    case 'g':
      return ::onnx::AttributeProto::GRAPH;
    case 'T':
      return ::onnx::AttributeProto::TYPE_PROTO;
    default:
      return ::onnx::AttributeProto::SPARSE_TENSOR;
  }
}

const absl::flat_hash_map<std::string, OpSupport>& Table() {
  static const auto* table = [] {
    auto* t = new absl::flat_hash_map<std::string, OpSupport>();
    for (const OpEntry& e : kOps) {
      OpSupport& s = (*t)[e.op];
      s.since = e.since;
      for (absl::string_view item : absl::StrSplit(e.arity, ' ', absl::SkipEmpty())) {
        std::vector<absl::string_view> f = absl::StrSplit(item, ':');
        OpSupport::Arity a;
        (void)absl::SimpleAtoi(f[0], &a.since);
        (void)absl::SimpleAtoi(f[1], &a.max_inputs);
        (void)absl::SimpleAtoi(f[2], &a.required_mask);
        s.arity.push_back(a);
      }
      for (absl::string_view item : absl::StrSplit(e.attrs, ' ', absl::SkipEmpty())) {
        const size_t colon = item.find(':');
        s.attrs[std::string(item.substr(0, colon))] = TypeOfCode(item[colon + 1]);
      }
    }
    return t;
  }();
  return *table;
}

}  // namespace

const OpSupport::Arity* OpSupport::ArityAt(int64_t opset) const {
  const Arity* found = nullptr;
  for (const Arity& a : arity) {
    if (a.since <= opset) found = &a;
  }
  return found;
}

const OpSupport* FindOpSupport(absl::string_view op) {
  auto it = Table().find(op);
  return it == Table().end() ? nullptr : &it->second;
}

std::vector<std::string> SupportedOps() {
  std::vector<std::string> ops;
  for (const OpEntry& e : kOps) ops.push_back(e.op);
  return ops;
}

std::string AttrTypeName(AttrType type) {
  if (::onnx::AttributeProto::AttributeType_IsValid(type)) {
    return ::onnx::AttributeProto::AttributeType_Name(type);
  }
  return "UNKNOWN";
}

}  // namespace dynvm::compiler::onnx
