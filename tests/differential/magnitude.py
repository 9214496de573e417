"""Magnitude bounds: how large a value can be, so the generator knows which values are
*finite* (no NaN, no infinity, |x| <= SAFE).

ONNX leaves open what several operators do with NaN (max and min: ReduceMax, MaxPool, Max,
Clip, Relu, ArgMax, TopK, Unique, Sign ...) and the result of sums, products and transforms
with infinities depends on the order of operations (an FFT, a blocked GEMM, a pairwise sum).
Those operators read only finite values; NaN and infinities from the inputs still flow
through the elementwise arithmetic and math, where IEEE 754 defines the result.

`bound(op, inputs, attrs, outs)` is an upper bound on |output| from the inputs' bounds
(math.inf: no bound, maybe NaN), by a rule per operator; an operator without a rule gets no
bound.
"""
import math

SAFE = 1e6

# Outputs in [-1, 1] (or a small constant bound) whatever the input.
BOUNDED = {
    "Tanh": 1, "Sigmoid": 1, "Sin": 1, "Cos": 1, "Atan": 2, "Erf": 1, "Softsign": 1,
    "HardSigmoid": 1, "Softmax": 1, "Hardmax": 1, "Sign": 1, "IsNaN": 1, "IsInf": 1,
    "Equal": 1, "Greater": 1, "Less": 1, "GreaterOrEqual": 1, "LessOrEqual": 1, "And": 1,
    "Or": 1, "Xor": 1, "Not": 1, "EyeLike": 1, "Bernoulli": 1, "HannWindow": 1,
    "HammingWindow": 1, "BlackmanWindow": 1, "MelWeightMatrix": 2, "RandomUniform": 10,
    "RandomUniformLike": 10, "RandomNormal": 100, "RandomNormalLike": 100, "Shape": 1e4,
    "Size": 1e5, "NonZero": 1e4, "ArgMax": 1e4, "ArgMin": 1e4, "SequenceLength": 1e4,
    "OptionalHasElement": 1, "QuantizeLinear": 256, "DynamicQuantizeLinear": 256,
    "QLinearMatMul": 256, "QLinearConv": 256, "TfIdfVectorizer": 100, "StringNormalizer": 1,
    "NonMaxSuppression": 1e4, "Unique": 1e4,
}
# BOUNDED operators whose output is never NaN, whatever the inputs (a bool, an index or
# count, an integer, or a value that does not depend on the input's values).
NEVER_NAN = {
    "IsNaN", "IsInf", "Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "And",
    "Or", "Xor", "Not", "EyeLike", "HannWindow", "HammingWindow", "BlackmanWindow",
    "MelWeightMatrix", "RandomUniform", "RandomUniformLike", "RandomNormal",
    "RandomNormalLike", "Shape", "Size", "NonZero", "ArgMax", "ArgMin", "SequenceLength",
    "OptionalHasElement", "QuantizeLinear", "DynamicQuantizeLinear", "QLinearMatMul",
    "QLinearConv", "TfIdfVectorizer", "StringNormalizer", "NonMaxSuppression",
}
# |output| <= the largest |input| (data movement, selection, clamping, rounding).
SAME = {
    "Identity", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Transpose", "Concat", "Split",
    "Slice", "Gather", "GatherElements", "GatherND", "Expand", "Tile", "Pad",
    "DepthToSpace", "SpaceToDepth", "ReverseSequence", "Compress", "Scatter",
    "ScatterElements", "ScatterND", "Abs", "Neg", "Relu", "Floor", "Ceil", "Round", "Max",
    "Min", "Clip", "MaxPool", "GlobalMaxPool", "ReduceMax", "ReduceMin", "Where", "Dropout",
    "Cast", "CastLike", "LeakyRelu", "ThresholdedRelu", "Shrink", "Mean", "AveragePool",
    "GlobalAveragePool", "ReduceMean", "TopK", "Trilu", "Mod", "ConstantOfShape",
    "SequenceAt", "ConcatFromSequence", "SplitToSequence", "SequenceConstruct",
    "SequenceInsert", "SequenceErase", "OptionalGetElement", "Optional", "MaxUnpool",
    "HardSwish", "If", "Loop", "Scan", "Range", "OneHot", "Upsample",
}


def _n(outs_or_inputs):
    return 1


def bound(op, in_mags, reduced=1, extra=None):
    """|output| bound of `op` from its inputs' bounds; `reduced`: elements summed per output
    (reductions, products), `extra`: a bound an op generator knows better."""
    if extra is not None:
        return extra
    m = max(in_mags, default=0.0)
    if math.isinf(m) and op not in NEVER_NAN:
        return math.inf
    if op in BOUNDED:
        return float(BOUNDED[op])
    if op in SAME:
        return m
    if op in ("Add", "Sub", "Sum"):
        return sum(in_mags)
    if op == "Mul":
        return math.prod(in_mags)
    if op in ("ReduceSum", "ReduceL1", "CumSum", "DFT", "STFT"):
        return m * reduced
    if op == "ReduceL2":
        return m * math.sqrt(reduced)
    if op == "ReduceSumSquare":
        return m * m * reduced
    if op in ("MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "MatMulInteger",
              "ConvInteger"):
        return math.prod(in_mags[:2]) * reduced + (in_mags[2] if len(in_mags) > 2 else 0) * 2
    if op == "Exp":
        return math.exp(m) if m < 80 else math.inf
    if op in ("Softplus", "Elu", "Selu", "Celu", "PRelu"):
        return 2 * m + 2
    if op in ("LogSoftmax", "SoftmaxCrossEntropyLoss", "NegativeLogLikelihoodLoss",
              "ReduceLogSumExp"):
        return 2 * m + math.log(reduced + 1) + 1
    if op in ("BatchNormalization", "InstanceNormalization", "LayerNormalization",
              "MeanVarianceNormalization", "LRN", "Resize", "GridSample", "RoiAlign",
              "DequantizeLinear"):
        return 1e3 * (m + 1)
    if op in ("LSTM", "GRU", "RNN"):
        return float(reduced + 1)
    return math.inf
