"""Known, justified differences between dynvm and ONNX Runtime (docs/differential.md lists
each one with its reason). `explain` returns the reason a verdict is not a mismatch, or None.
"""
import copy
import re

from onnx import shape_inference

# ONNX Runtime has no kernel for this type (or this op at this opset): no oracle for the
# graph, which is then compared between dynvm's configurations only.
ORT_NO_KERNEL = re.compile(r"Could not find an implementation for|NOT_IMPLEMENTED")


def ort_has_no_kernel(message):
    return bool(ORT_NO_KERNEL.search(message))


# (name, predicate over (ort error message, the model)) for errors ORT raises where dynvm
# computes a result the spec defines. Each is in docs/differential.md.
ORT_ERRORS = []


def explain_ort_error(message, model):
    for name, pred in ORT_ERRORS:
        if pred(message, model):
            return name
    return None


# (name, predicate over (model, inputs, output name, dynvm value, ORT value)) for values
# where ORT departs from the ONNX specification and dynvm follows it.
VALUE_DIFFERENCES = []


def explain_value(model, inputs, name, got, want):
    for reason, pred in VALUE_DIFFERENCES:
        if pred(model, inputs, name, got, want):
            return reason
    return None


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


def ort_shape_departs_from_spec(model, inputs, name, got, want):
    """ORT's output has another shape than the one ONNX's shape inference gives, and dynvm's
    has that one (ORT's reductions over empty tensors, Slice ends of INT64_MAX stepping
    backwards: docs/differential.md)."""
    if got.shape == want.shape:
        return False
    s = spec_shape(model, inputs, name)
    return s is not None and s == got.shape


VALUE_DIFFERENCES.append(("onnxruntime's output shape departs from ONNX's shape inference",
                          ort_shape_departs_from_spec))
