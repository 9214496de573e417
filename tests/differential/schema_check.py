"""Type checks against ONNX's own operator schemas (onnx.defs), at every opset of a graph.

ONNX Runtime checks a model's types against the schemas before it runs anything, and the
schemas' type constraints change between opsets (Flatten took only floats before opset 9,
Less only floats before 9, Loop carried no sequences before 13 ...). The generator asks here
before it writes a node, so every graph it emits is well typed at each of its opsets.
"""
import functools

import onnx.defs
from onnx.defs import OpSchema

TYPE_NAMES = {"float32": "float", "float64": "double", "float16": "float16", "int8": "int8",
              "uint8": "uint8", "int16": "int16", "uint16": "uint16", "int32": "int32",
              "uint32": "uint32", "int64": "int64", "uint64": "uint64", "bool": "bool",
              "str": "string"}


def type_str(v):
    """ONNX's type string of a generator value: tensor(float), seq(tensor(int64)) ..."""
    if v.seq is not None and v.seq[0] == "optional":
        return f"optional(tensor({TYPE_NAMES[str(v.dtype)]}))"
    base = f"tensor({TYPE_NAMES[str(v.dtype)]})"
    return f"seq({base})" if v.seq is not None else base


@functools.lru_cache(maxsize=None)
def _schema(op, opset, domain):
    try:
        return onnx.defs.get_schema(op, opset, domain)
    except Exception:  # noqa: BLE001 - no such op at that opset
        return None


def _formal(params, i):
    if i < len(params):
        return params[i]
    if params and params[-1].option == OpSchema.FormalParameterOption.Variadic:
        return params[-1]
    return None


def check(op, inputs, outputs, opsets, domain=""):
    """None when the node types check at every opset, else the first problem."""
    for opset in opsets:
        s = _schema(op, opset, domain)
        if s is None:
            return f"{op} does not exist at opset {opset}"
        allowed = {c.type_param_str: set(c.allowed_type_strs) for c in s.type_constraints}
        bound = {}
        for kind, params, vals in (("input", s.inputs, inputs), ("output", s.outputs, outputs)):
            for i, v in enumerate(vals):
                if v is None:
                    continue
                f = _formal(params, i)
                if f is None:
                    return f"{op}-{s.since_version}: too many {kind}s"
                t = type_str(v)
                ts = f.typeStr
                if ts in allowed:
                    if t not in allowed[ts]:
                        return f"{op}-{s.since_version}: {kind} {i} of type {t} not in {ts}"
                    homogeneous = f.option != OpSchema.FormalParameterOption.Variadic or \
                        f.isHomogeneous
                    if homogeneous and bound.setdefault(ts, t) != t:
                        return f"{op}-{s.since_version}: {ts} bound to {bound[ts]} and {t}"
                elif ts != t:
                    return f"{op}-{s.since_version}: {kind} {i} is {t}, not {ts}"
    return None
