// Internal. The names of the operators that code outside their definitions refers to: a pass
// that matches or makes a node names its op through these constants, so each operator's name is
// written once (the definitions themselves, compiler/ops/<family>.cc, use them too). ONNX's
// default domain is ""; dynvm's own ops are in kDynvmDomain (several share a name with an ONNX
// operator: MatMul, Gelu; the domain tells them apart).
#ifndef DYNVM_COMPILER_OPS_NAMES_H_
#define DYNVM_COMPILER_OPS_NAMES_H_

namespace dynvm::compiler::ops {

inline constexpr char kDynvmDomain[] = "dynvm";
// ONNX Runtime's contrib operators (compiler/ops/msft.cc).
inline constexpr char kMsftDomain[] = "com.microsoft";

inline constexpr char kAdd[] = "Add";
inline constexpr char kAnd[] = "And";
inline constexpr char kAttention[] = "Attention";
inline constexpr char kAveragePool[] = "AveragePool";
inline constexpr char kBatchNormalization[] = "BatchNormalization";
inline constexpr char kBernoulli[] = "Bernoulli";
inline constexpr char kCast[] = "Cast";
inline constexpr char kClip[] = "Clip";
inline constexpr char kConcat[] = "Concat";
inline constexpr char kConcatFromSequence[] = "ConcatFromSequence";
inline constexpr char kConstant[] = "Constant";
inline constexpr char kConv[] = "Conv";
inline constexpr char kDequantizeLinear[] = "DequantizeLinear";
inline constexpr char kDiv[] = "Div";
inline constexpr char kDropout[] = "Dropout";
inline constexpr char kEmit[] = "Emit";
inline constexpr char kEqual[] = "Equal";
inline constexpr char kFlatten[] = "Flatten";
inline constexpr char kFusedConv[] = "FusedConv";
inline constexpr char kChannelMul[] = "ChannelMul";
inline constexpr char kChannelPad[] = "ChannelPad";
inline constexpr char kGRU[] = "GRU";
inline constexpr char kGather[] = "Gather";
inline constexpr char kGelu[] = "Gelu";
inline constexpr char kGeluTanh[] = "GeluTanh";
inline constexpr char kGemm[] = "Gemm";
inline constexpr char kGlobalAveragePool[] = "GlobalAveragePool";
inline constexpr char kGlobalMaxPool[] = "GlobalMaxPool";
inline constexpr char kGreater[] = "Greater";
inline constexpr char kHardSwish[] = "HardSwish";
inline constexpr char kHardmax[] = "Hardmax";
inline constexpr char kIdentity[] = "Identity";
inline constexpr char kIf[] = "If";
inline constexpr char kLSTM[] = "LSTM";
inline constexpr char kLayerNormalization[] = "LayerNormalization";
inline constexpr char kLeakyRelu[] = "LeakyRelu";
inline constexpr char kLess[] = "Less";
inline constexpr char kLinear[] = "Linear";
inline constexpr char kLogSoftmax[] = "LogSoftmax";
inline constexpr char kLoop[] = "Loop";
inline constexpr char kMatMul[] = "MatMul";
inline constexpr char kMaxPool[] = "MaxPool";
inline constexpr char kMul[] = "Mul";
inline constexpr char kOptional[] = "Optional";
inline constexpr char kOptionalGetElement[] = "OptionalGetElement";
inline constexpr char kOptionalHasElement[] = "OptionalHasElement";
inline constexpr char kOr[] = "Or";
inline constexpr char kPRelu[] = "PRelu";
inline constexpr char kPad[] = "Pad";
inline constexpr char kPow[] = "Pow";
inline constexpr char kQMatMul[] = "QMatMul";
inline constexpr char kRequantize[] = "Requantize";
inline constexpr char kQLinearAdd[] = "QLinearAdd";
inline constexpr char kRMSNorm[] = "RMSNorm";
inline constexpr char kRotateHalf[] = "RotateHalf";
inline constexpr char kSwiGlu[] = "SwiGlu";
inline constexpr char kRNN[] = "RNN";
inline constexpr char kRelu[] = "Relu";
inline constexpr char kReshape[] = "Reshape";
inline constexpr char kResize[] = "Resize";
inline constexpr char kSample[] = "Sample";
inline constexpr char kScan[] = "Scan";
inline constexpr char kSequenceAt[] = "SequenceAt";
inline constexpr char kSequenceConstruct[] = "SequenceConstruct";
inline constexpr char kSequenceEmpty[] = "SequenceEmpty";
inline constexpr char kSequenceErase[] = "SequenceErase";
inline constexpr char kSequenceInsert[] = "SequenceInsert";
inline constexpr char kSequenceLength[] = "SequenceLength";
inline constexpr char kSequenceMap[] = "SequenceMap";
inline constexpr char kShape[] = "Shape";
inline constexpr char kSigmoid[] = "Sigmoid";
inline constexpr char kSilu[] = "Silu";
inline constexpr char kSize[] = "Size";
inline constexpr char kSlice[] = "Slice";
inline constexpr char kSoftmax[] = "Softmax";
inline constexpr char kSplitToSequence[] = "SplitToSequence";
inline constexpr char kSqueeze[] = "Squeeze";
inline constexpr char kSub[] = "Sub";
inline constexpr char kTanh[] = "Tanh";
inline constexpr char kTranspose[] = "Transpose";
inline constexpr char kUnsqueeze[] = "Unsqueeze";
inline constexpr char kUpsample[] = "Upsample";
inline constexpr char kWhere[] = "Where";
inline constexpr char kXor[] = "Xor";

}  // namespace dynvm::compiler::ops

#endif  // DYNVM_COMPILER_OPS_NAMES_H_
