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
from onnx import shape_inference

# ONNX Runtime has no kernel for this type (or this op at this opset): no oracle for the
# graph, which is then compared between dynvm's configurations only.
ORT_NO_KERNEL = re.compile(r"Could not find an implementation for|NOT_IMPLEMENTED")


def ort_has_no_kernel(message):
    return bool(ORT_NO_KERNEL.search(message))


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
    # Open bug: a Scan that moves a scan output's axis (scan_output_axes) is inferred with the
    # axis in front until it is lowered; a consumer that reads its dims fails to compile
    # (a broadcast, a Squeeze of the moved axis).
    ("dynvm-bug-scan-output-axes-inferred-late",
     lambda msg, m: re.search(r"do not broadcast|cannot squeeze", msg) and " pc " not in msg
     and any(any(a.name == "scan_output_axes" and any(a.ints) for a in n.attribute)
             for n in _nodes(m, "Scan"))),
]


def explain_dynvm_error(message, model):
    for name, pred in DYNVM_ERRORS:
        if pred(message, model):
            return name
    return None


def renamed_outputs(renamed, right):
    """Open bug: with optimization, two graph outputs that compute the same value (merged by
    CSE) come out under another value's name (the first output's with "_1", or the merged
    intermediate's): the output's own name is gone. True when the {name: array} dicts
    `renamed` (optimized) and `right` (unoptimized) differ only that way: as many names, and
    every missing name's array equal to an extra name's."""
    extra = set(renamed) - set(right)
    missing = set(right) - set(renamed)
    if not extra or len(extra) != len(missing):
        return False
    for m in missing:
        if not any(renamed[e].shape == right[m].shape and renamed[e].dtype == right[m].dtype
                   and np.array_equal(renamed[e], right[m], equal_nan=right[m].dtype.kind == "f")
                   for e in extra):
            return False
    return True


# -- ONNX Runtime refuses a valid model that dynvm runs ------------------------------------------
ORT_ERRORS = [
    # ONNX Runtime's MatMul refuses an empty batch dim against a 1-D operand.
    ("ort-matmul-empty-batch", lambda msg, m: "matmul_helper" in msg and
     "cannot broadcast" in msg),
    # ONNX Runtime's elementwise broadcaster refuses a dim of 1 against an empty one.
    ("ort-broadcast-of-one-and-empty", lambda msg, m: "Broadcaster" in msg and
     "element_wise_ops" in msg),
    # ONNX Runtime reuses an If output's buffer of the previous shape inside a subgraph.
    ("ort-if-output-buffer-shape", lambda msg, m: "pre-allocated output OrtValue" in msg),
]


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


# (name, predicate over (model, inputs, output name, dynvm value, ORT value, the shape the
# generator expects)).
VALUE_DIFFERENCES = [
    ("ort-shape-departs-from-the-spec", ort_shape_departs_from_spec),
    # The spec is ambiguous: dynvm reads MaxUnpool's indices in the inferred shape (ONNX's
    # own test data), ONNX Runtime and PyTorch in output_shape.
    ("maxunpool-indices-in-the-inferred-shape", lambda m, ins, name, got, want, e: any(
        len(n.input) > 2 and n.input[2] for n in _nodes(m, "MaxUnpool"))),
    # Open bug (kernels/dnnl): the oneDNN Gemm scales C by alpha when C is one row.
    ("dynvm-bug-dnnl-gemm-alpha-scales-c", lambda m, ins, name, got, want, e: any(
        len(n.input) > 2 and n.input[2] and
        any(a.name == "alpha" and a.f != 1.0 for a in n.attribute) and
        not any(a.name == "beta" and a.f != 1.0 for a in n.attribute)
        for n in _nodes(m, "Gemm"))),
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
