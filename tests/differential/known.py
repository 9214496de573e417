"""Known, justified differences between dynvm and ONNX Runtime, and dynvm's open bugs: each
entry here is listed in docs/differential.md (by its name) with its reproducer and reason.
The fuzzer calls a verdict that one of these explains "explained", not a mismatch; the
regression cases in tests/differential/regressions/ pin each one.

An entry is as narrow as its predicate can make it: an error message and the operators of
the model, never a whole class of failures.
"""
import copy
import re

import numpy as np
from onnx import helper, shape_inference

# ONNX Runtime has no kernel for this type (or this op at this opset): no oracle for the
# graph, which is then compared between dynvm's configurations only.
ORT_NO_KERNEL = re.compile(r"Could not find an implementation for|NOT_IMPLEMENTED")


def ort_has_no_kernel(message):
    return bool(ORT_NO_KERNEL.search(message))


def _ops(model):
    found = set()

    def walk(g):
        for n in g.node:
            found.add(n.op_type)
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)

    walk(model.graph)
    return found


def _nodes(model, op):
    out = []

    def walk(g):
        for n in g.node:
            if n.op_type == op:
                out.append(n)
            for a in n.attribute:
                if a.HasField("g"):
                    walk(a.g)

    walk(model.graph)
    return out


def _has_unranked_input(model):
    return any(not v.type.tensor_type.HasField("shape") for v in model.graph.input
               if v.type.HasField("tensor_type"))


# -- dynvm refuses or fails, ONNX Runtime runs -------------------------------------------------
# (name, predicate over (dynvm's error message, the model)).
DYNVM_ERRORS = [
    # docs/onnx.md: a sequence element, a scan output, ConcatFromSequence need their rank at
    # compile time; a model input without a declared shape has none.
    ("dynvm-needs-a-rank", lambda msg, m: "UnimplementedError" in msg and bool(
        re.search(r"unknown rank|rank is unknown|needs the elements' rank|the rank of", msg))),
    # The spec is ambiguous: dynvm reads MaxUnpool's indices in the inferred shape (ONNX's
    # own test data), ONNX Runtime and PyTorch in output_shape.
    ("maxunpool-indices-in-the-inferred-shape",
     lambda msg, m: "MaxUnpool: index" in msg and any(
         len(n.input) > 2 and n.input[2] for n in _nodes(m, "MaxUnpool"))),
    # Not a dynvm bug: a Loop scan output whose value changes shape between iterations (a
    # carried value grown by Concat) cannot be stacked, and dynvm refuses it where the Loop
    # runs, as ONNX Runtime does ("Inconsistent shape in loop output"). Where ONNX Runtime
    # runs the model, such a Loop's outputs are dead: ONNX Runtime and dynvm's optimized
    # program never run it, --no-optimize does (docs/differential.md).
    ("loop-scan-output-of-varying-shape", lambda msg, m: bool(
        re.search(r"append of \S+ to \S+ along axis \d+: other dims differ", msg))),
    # An ArgMax or ArgMin over an axis of no element has no index to give: dynvm refuses it,
    # as numpy does ("attempt to get argmax of an empty sequence"); ONNX Runtime returns an
    # empty tensor that keeps the axis, a shape the spec does not give either (seed 7 graphs
    # 20278, and 37036, where --no-optimize runs a dead ArgMin the optimizer removes).
    ("argmax-of-an-empty-axis", lambda msg, m: bool(
        re.search(r"Arg(Max|Min): cannot reduce the empty axis", msg)) and bool(
        _nodes(m, "ArgMax") or _nodes(m, "ArgMin"))),
]


def explain_dynvm_error(message, model):
    for name, pred in DYNVM_ERRORS:
        if pred(message, model):
            return name
    return None




# -- ONNX Runtime refuses a valid model that dynvm runs ------------------------------------------
ORT_ERRORS = [
    # ONNX Runtime's MatMul refuses an empty batch dim against a 1-D operand.
    ("ort-matmul-empty-batch", lambda msg, m: "matmul_helper" in msg and
     "cannot broadcast" in msg),
    # ONNX Runtime's LayerNormalization refuses normalized dims holding no element; their
    # output is as empty as the input (regressions/layernorm-over-empty-normalized-dims).
    ("ort-layernorm-over-empty-normalized-dims", lambda msg, m:
     "Size of X.shape[axis:] must be at least 1, got 0" in msg and
     "LayerNormalization" in _ops(m)),
    # ONNX Runtime's elementwise broadcaster refuses a dim of 1 against an empty one.
    ("ort-broadcast-of-one-and-empty", lambda msg, m: "Broadcaster" in msg and
     "element_wise_ops" in msg),
    # ONNX Runtime's reduction over an empty axis keeps it empty (keepdims: the spec, numpy
    # and dynvm give 1); a BatchNormalization downstream then sees 0 channels against a
    # scale of one value and refuses what dynvm runs.
    ("ort-empty-reduction-then-batchnorm", lambda msg, m: bool(
        re.search(r"Invalid input (scale|B|mean|var): 0th dimension != 0", msg)) and
     any(t.startswith("Reduce") for t in _ops(m))),
    # ONNX Runtime reuses an If output's buffer of the previous shape inside a subgraph.
    ("ort-if-output-buffer-shape", lambda msg, m: "pre-allocated output OrtValue" in msg),
    # NonZero of a scalar: ONNX's shape inference (which ONNX Runtime runs when it loads a
    # model) gives it rank(input) = 0 rows, and refuses a Squeeze of that axis; ONNX Runtime's
    # kernel, numpy and dynvm give one row ([1, nnz]: regression nonzero-of-a-scalar), so the
    # Squeeze is valid (seed 7 graphs 12412, 19760, 29098, 39359, 45433).
    ("ort-nonzero-of-a-scalar-inferred-with-no-rows", lambda msg, m:
     "Op (Squeeze) [ShapeInferenceError] Dimension of input 0 must be 1 instead of 0" in msg
     and _squeezes_a_nonzero(m)),
    # ONNX Runtime's Slice takes elements where the spec clamps an end of INT64_MAX stepping
    # backwards (the value difference of the same name); an operator downstream then refuses
    # ONNX Runtime's larger tensor (seed 7 graphs 16027, a ScatterND's updates, and 36012, a
    # Resize to sizes [0] of what is [1] for ONNX Runtime and [0] for the spec).
    ("ort-slice-int64-max-end-stepping-backwards", lambda msg, m:
     "Non-zero status code returned while running" in msg and
     _slices_backwards_to_int64_max(m)),
    # ONNX Runtime's reduction over an empty axis keeps the axis (the value difference of
    # the same name); a broadcast downstream then gives an empty tensor where the graph's
    # shapes (and the spec's) give one element, and ONNX Runtime fails reusing a buffer of
    # the spec's size (seed 7 graph 39588: ReduceSum of an empty slice, keepdims 0, Xor'd
    # with a [1] inside an If).
    ("ort-empty-reduction-keeps-the-axis", lambda msg, m:
     "Shape mismatch attempting to re-use buffer" in msg and
     any(t.startswith("Reduce") for t in _ops(m))),
]


def _squeezes_a_nonzero(model):
    """A Squeeze reads a NonZero's output (ONNX's inference gave its first dim 0 rows: the
    NonZero's input is a scalar)."""
    nonzero = {n.output[0] for n in _nodes(model, "NonZero")}
    return any(n.input and n.input[0] in nonzero for n in _nodes(model, "Squeeze"))


def explain_ort_error(message, model):
    for name, pred in ORT_ERRORS:
        if pred(message, model):
            return name
    return None


# -- different values ----------------------------------------------------------------------------
def spec_shape(model, inputs, name):
    """The static shape ONNX's own shape inference gives output `name` once the inputs'
    shapes are declared as they are, or None."""
    m = copy.deepcopy(model)
    for v in m.graph.input:
        if v.name in inputs and v.type.HasField("tensor_type"):
            shape = inputs[v.name].shape
            t = v.type.tensor_type
            t.ClearField("shape")
            t.shape.SetInParent()
            for d in shape:
                t.shape.dim.add().dim_value = int(d)
    for o in m.graph.output:
        if o.name == name:
            o.type.tensor_type.ClearField("shape")
    try:
        inferred = shape_inference.infer_shapes(m, strict_mode=True)
    except Exception:  # noqa: BLE001 - no answer from the spec's inference
        return None
    for v in list(inferred.graph.output) + list(inferred.graph.value_info):
        if v.name == name and v.type.HasField("tensor_type") and \
                v.type.tensor_type.HasField("shape"):
            dims = v.type.tensor_type.shape.dim
            if all(d.HasField("dim_value") for d in dims):
                return tuple(d.dim_value for d in dims)
    return None


def ort_shape_departs_from_spec(model, inputs, name, got, want, expected=None):
    """ORT's output has another shape than the spec's, and dynvm's has the spec's: the one
    ONNX's own shape inference gives, or where that cannot tell (a data-dependent input), the
    generator's (ORT's ArgMax/ArgMin and reductions over empty tensors, Slice ends of
    INT64_MAX stepping backwards: docs/differential.md)."""
    if got.shape == want.shape:
        return False
    s = spec_shape(model, inputs, name)
    if s is None:
        s = expected
    return s is not None and tuple(s) == got.shape and tuple(s) != want.shape


def _constants(model):
    """{name: array} of the model's initializers and Constant nodes (bodies included)."""
    from onnx import numpy_helper
    found = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
    for n in _nodes(model, "Constant"):
        for a in n.attribute:
            if a.name == "value" and a.HasField("t"):
                found[n.output[0]] = numpy_helper.to_array(a.t)
    return found


def _slices_backwards_to_int64_max(model):
    """A Slice (opset >= 10) with a constant end of INT64_MAX on an axis it steps backwards."""
    consts = _constants(model)
    for n in _nodes(model, "Slice"):
        if len(n.input) < 5 or n.input[2] not in consts or n.input[4] not in consts:
            continue
        ends, steps = consts[n.input[2]].ravel(), consts[n.input[4]].ravel()
        if ends.shape == steps.shape and \
                any(e == np.iinfo(np.int64).max and s < 0 for e, s in zip(ends, steps)):
            return True
    return False


def _nan_only_in_want(got, want):
    """ORT's output has NaN where dynvm's is finite, and the two agree everywhere else."""
    if got.shape != want.shape or got.dtype.kind != "f":
        return False
    g, w = got.astype(np.float64), want.astype(np.float64)
    nan = np.isnan(w)
    if not (nan & np.isfinite(g)).any() or np.isnan(g[~nan]).any():
        return False
    rest_g, rest_w = g[~nan], w[~nan]
    scale = max(1.0, float(np.abs(rest_w[np.isfinite(rest_w)]).max(initial=0.0)))
    return bool(np.allclose(rest_g, rest_w, rtol=1e-3, atol=1e-3 * scale, equal_nan=True))


def _log_of_a_normalized_sum(model):
    mvn = {n.output[0] for n in _nodes(model, "MeanVarianceNormalization")}
    return any(n.input[0] in mvn for n in _nodes(model, "ReduceLogSum"))


def _all_log_of_noise(x):
    """Every element NaN, -inf, or the log of a value below 0.007 (a cancelled sum)."""
    x = np.asarray(x, np.float64)
    return x.dtype.kind == "f" and bool(np.all(np.isnan(x) | (x < -5)))


# (name, predicate over (model, inputs, output name, dynvm value, ORT value, the shape the
# generator expects)).
def _matmul_behind(graph, name):
    """The MatMul node whose result output `name` of `graph` is: directly, through Identity,
    or as a Loop's or Scan's output (carried or stacked) that its body's MatMul makes."""
    for n in graph.node:
        if name not in n.output:
            continue
        if n.op_type == "MatMul":
            return n
        if n.op_type == "Identity":
            return _matmul_behind(graph, n.input[0])
        if n.op_type in ("Loop", "Scan"):
            body = next((a.g for a in n.attribute if a.name == "body"), None)
            # Loop's body outputs lead with the condition; Scan's match its outputs.
            j = list(n.output).index(name) + (1 if n.op_type == "Loop" else 0)
            if body is not None and j < len(body.output):
                return _matmul_behind(body, body.output[j].name)
        return None
    return None


def ort_matmul_of_empty_k(model, inputs, name, got):
    """ONNX Runtime's MatMul with an empty contraction dim and a 1-D operand leaves its output
    unwritten (garbage or NaN): the output is a MatMul's (or a Loop's or Scan's that stacks or
    carries one: seed 7 graph 9321) whose operand is an empty model input or initializer, and
    dynvm's is all zeros, the sum over nothing (numpy.matmul's)."""
    if got.size == 0 or got.dtype.kind != "f" or np.any(got):
        return False
    mm = _matmul_behind(model.graph, name)
    if mm is None:
        return False
    # An operand with no element and a result with some: the contraction dim is 0.
    empty = {k for k, v in inputs.items() if np.asarray(v).size == 0}
    empty |= {k for k, v in _constants(model).items() if v.size == 0}
    if any(i in empty for i in mm.input):
        return True
    shapes = _inferred_shapes(model, inputs)
    return any(i in shapes and 0 in shapes[i] for i in mm.input)


def _inferred_shapes(model, inputs):
    """{name: static shape} of the values ONNX's shape inference gives once the inputs'
    shapes are declared as they are (a Tile by [0] of an input, a Constant's), {} when it
    fails."""
    m = copy.deepcopy(model)
    for v in m.graph.input:
        if v.name in inputs and v.type.HasField("tensor_type"):
            t = v.type.tensor_type
            t.ClearField("shape")
            t.shape.SetInParent()
            for d in np.asarray(inputs[v.name]).shape:
                t.shape.dim.add().dim_value = int(d)
    try:
        inferred = shape_inference.infer_shapes(m, data_prop=True)
    except Exception:  # noqa: BLE001 - no answer from the spec's inference
        return {}
    found = {}
    for v in list(inferred.graph.input) + list(inferred.graph.value_info) + \
            list(inferred.graph.output):
        t = v.type.tensor_type if v.type.HasField("tensor_type") else None
        if t is not None and t.HasField("shape") and \
                all(d.HasField("dim_value") for d in t.shape.dim):
            found[v.name] = tuple(d.dim_value for d in t.shape.dim)
    return found


def ort_empty_reduction_keeps_the_axis(model, name, got, want):
    """ONNX Runtime's reduction (ReduceX, ArgMax, ArgMin) of an empty tensor returns the input
    as it is; the spec (and numpy, and dynvm) reduce its axes: dynvm's shape is the spec's
    reduction of ONNX Runtime's (seed 7 graph 13853: ReduceLogSumExp over axes [-3, -1] of a
    [1, 0, 1] TopK output with a computed k of 0, [0] against [1, 0, 1])."""
    if want.size != 0 or got.shape == want.shape:
        return False
    node = next((n for n in model.graph.node if name in n.output), None)
    if node is None or not (node.op_type.startswith("Reduce") or
                            node.op_type in ("ArgMax", "ArgMin")):
        return False
    attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    rank = want.ndim
    if node.op_type in ("ArgMax", "ArgMin"):
        axes = [attrs.get("axis", 0)]
    else:
        axes = attrs.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            found = _constants(model).get(node.input[1])
            if found is None:
                return False
            axes = found.ravel().tolist()
        if not axes:
            if attrs.get("noop_with_empty_axes", 0):
                return False
            axes = list(range(rank))
    axes = {int(a) % rank for a in axes} if rank else set()
    keep = attrs.get("keepdims", 1)
    spec = tuple(1 if i in axes else d for i, d in enumerate(want.shape) if keep or i not in axes)
    return spec == got.shape


def ort_shrink_of_float64(model, name, got, want):
    """ONNX Runtime's float64 Shrink computes in float32 (regression shrink-of-float64): its
    output is dynvm's float64 one rounded to float32, and infinite where that overflows float32
    (seed 7 graph 21129: 1e40 against inf)."""
    if got.dtype != np.float64 or got.shape != want.shape or not any(
            name in n.output for n in _nodes(model, "Shrink")):
        return False
    with np.errstate(all="ignore"):
        rounded = got.astype(np.float32).astype(np.float64)
    finite = np.abs(want[np.isfinite(want)])
    scale = 1.0 + float(finite.max(initial=0.0))
    return bool(np.allclose(rounded, want, rtol=2.0 ** -21, atol=2.0 ** -21 * scale,
                            equal_nan=True))


VALUE_DIFFERENCES = [
    ("ort-shape-departs-from-the-spec", ort_shape_departs_from_spec),
    ("ort-matmul-of-empty-k-unwritten",
     lambda m, ins, name, got, want, e: ort_matmul_of_empty_k(m, ins, name, got)),
    ("ort-empty-reduction-keeps-the-axis",
     lambda m, ins, name, got, want, e: ort_empty_reduction_keeps_the_axis(m, name, got, want)),
    ("ort-shrink-of-float64-rounds-through-float32",
     lambda m, ins, name, got, want, e: ort_shrink_of_float64(m, name, got, want)),
    # The spec is ambiguous: dynvm reads MaxUnpool's indices in the inferred shape (ONNX's
    # own test data), ONNX Runtime and PyTorch in output_shape.
    ("maxunpool-indices-in-the-inferred-shape", lambda m, ins, name, got, want, e: any(
        len(n.input) > 2 and n.input[2] for n in _nodes(m, "MaxUnpool"))),
    # A Slice end of INT64_MAX stepping backwards clamps to n - 1 (the spec; numpy): nothing
    # from a start at n - 1 or past it; ONNX Runtime takes elements. Where the Slice's
    # shape is an output, ort-shape-departs-from-the-spec sees it; here a Size, a Shape or
    # a fold of the result carries the element count on into a value.
    ("ort-slice-int64-max-end-stepping-backwards", lambda m, ins, name, got, want, e:
     _slices_backwards_to_int64_max(m)),
    # The spec's function body divides by sqrt(var) + 1e-9: a slice of one value (or of
    # equal values) normalizes to 0; ONNX Runtime leaves the epsilon out and gives 0/0 = NaN.
    ("ort-mvn-leaves-out-the-epsilon", lambda m, ins, name, got, want, e:
     bool(_nodes(m, "MeanVarianceNormalization")) and _nan_only_in_want(got, want)),
    # The log of a sum that cancels: ReduceLogSum of a MeanVarianceNormalization output (which
    # sums to 0 over the normalized axes) is the log of rounding noise, NaN or about -15 by
    # summation order; neither engine is wrong.
    ("reducelogsum-of-a-normalized-sum", lambda m, ins, name, got, want, e:
     _log_of_a_normalized_sum(m) and _all_log_of_noise(got) and _all_log_of_noise(want)),
    # The spec's formula gives scale 0 for an input of zeros; ONNX Runtime gives 1.
    ("dynamicquantizelinear-of-zeros", lambda m, ins, name, got, want, e:
     got.shape == () and got.dtype == np.float32 and got == 0 and want == 1 and
     bool(_nodes(m, "DynamicQuantizeLinear"))),
]


def explain_value(model, inputs, name, got, want, expected=None):
    for reason, pred in VALUE_DIFFERENCES:
        if pred(model, inputs, name, got, want, expected):
            return reason
    return None
