"""The fuzzer's graph model: values with known dtypes and shapes, nodes, and ONNX emission.

A generated graph is kept abstract enough to be written at several opsets: a node whose
operand moved from an attribute to an input between opsets (Squeeze's axes at 13, Slice's
starts at 10, Clip's min at 11, TopK's k at 10, ...) records it as a *form*, and `emit`
writes the attribute or a Constant feeding the input, whichever the target opset takes.

Shapes are concrete (the generator chose every input), except where data decides them
(NonZero, Compress, TopK with a computed k, Unique, NonMaxSuppression, a Loop that may stop
early): such a dim is a string token ("?3"); two dims with the same token are equal.

Every value also carries what the oracle needs to compare it fairly (compare.py):
`depth`, the number of inexactly rounded operations (transcendentals, reductions, products)
on its longest path from the inputs; `exact`, whether both engines must produce it bit for
bit (inputs, data movement, and IEEE operations that round once: +, -, *, /, sqrt ...);
`unit`, the coarsest precision those operations ran at (compare.py); `mag`, a bound on |x|
(magnitude.py), so the operators whose NaN or overflow behaviour ONNX leaves open read only
finite values, and a cast to an integer is defined; `random`, whether it comes from a random operator (only its type and shape can be
compared with ONNX Runtime).
"""
import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

F32, F64, F16 = np.dtype(np.float32), np.dtype(np.float64), np.dtype(np.float16)
I8, U8, I16, U16 = np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.uint16)
I32, U32, I64, U64 = np.dtype(np.int32), np.dtype(np.uint32), np.dtype(np.int64), np.dtype(np.uint64)
BOOL = np.dtype(np.bool_)
FLOATS = (F32, F64, F16)
INTS = (I8, U8, I16, U16, I32, U32, I64, U64)
SIGNED = (I8, I16, I32, I64)

ONNX_DTYPE = {
    F32: TensorProto.FLOAT, F64: TensorProto.DOUBLE, F16: TensorProto.FLOAT16,
    I8: TensorProto.INT8, U8: TensorProto.UINT8, I16: TensorProto.INT16,
    U16: TensorProto.UINT16, I32: TensorProto.INT32, U32: TensorProto.UINT32,
    I64: TensorProto.INT64, U64: TensorProto.UINT64, BOOL: TensorProto.BOOL,
}


def is_float(dt):
    return dt in FLOATS


def is_int(dt):
    return dt in INTS


def known(shape):
    """Whether every dim of `shape` is a number (no data-dependent token)."""
    return all(isinstance(d, int) for d in shape)


def numel(shape):
    n = 1
    for d in shape:
        n *= d
    return n


class Val:
    """A tensor or sequence value of the graph being generated."""

    def __init__(self, name, dtype, shape, depth=0, exact=True, mag=0.0, random=False,
                 seq=None, quant=0, unit=0.0):
        self.name = name
        self.dtype = dtype
        self.shape = tuple(shape) if shape is not None else None
        self.depth = depth
        self.exact = exact
        self.mag = mag  # a bound on |x| (math.inf: none; magnitude.py)
        self.random = random
        self.quant = quant  # integer tolerance: a value quantized from a float computation
        # The coarsest rounding unit of the inexact operations behind it (0: none), so a
        # float64 value computed from float32 arithmetic is compared at float32's precision.
        self.unit = unit
        self.seq = seq  # for a sequence: (element Val template, length or token)
        self.uses = 0

    @property
    def safe(self):
        """Finite and moderate: no NaN, no infinity, |x| <= magnitude.SAFE."""
        return self.mag <= 1e6

    @property
    def rank(self):
        return len(self.shape)

    @property
    def is_seq(self):
        return self.seq is not None

    def __repr__(self):
        return f"{self.name}:{self.dtype}{list(self.shape) if self.shape is not None else ''}"


class Node:
    """One ONNX node; `forms` maps an attribute to (input index, first opset as an input,
    ndarray) for operands that became inputs; `graphs` holds subgraph attributes."""

    def __init__(self, op, inputs, outputs, attrs=None, forms=None, graphs=None, domain=""):
        self.op = op
        self.inputs = list(inputs)
        self.outputs = list(outputs)
        self.attrs = dict(attrs or {})
        self.forms = dict(forms or {})
        self.graphs = dict(graphs or {})
        self.domain = domain


class Graph:
    """A graph or subgraph: nodes, inputs and outputs (name, dtype or 'seq', declared shape)."""

    def __init__(self, name):
        self.name = name
        self.nodes = []
        self.inputs = []  # (Val, declared dims or None, seq element dtype or None)
        self.outputs = []  # (Val, declare_shape)
        self.initializers = {}  # name -> ndarray


def _value_info(v, dims):
    if v.is_seq:
        elem = helper.make_tensor_type_proto(ONNX_DTYPE[v.seq[0].dtype], None)
        return helper.make_value_info(v.name, helper.make_sequence_type_proto(elem))
    return helper.make_tensor_value_info(v.name, ONNX_DTYPE[v.dtype], dims)


def _attr(name, value):
    if isinstance(value, np.ndarray):
        return helper.make_attribute(name, numpy_helper.from_array(value))
    return helper.make_attribute(name, value)


def _form_attr_value(arr):
    """The attribute form of a form's ndarray: a list of ints/floats, or a scalar."""
    if arr.ndim == 0:
        v = arr.item()
        return float(v) if arr.dtype.kind == "f" else int(v)
    if arr.dtype.kind == "f":
        return [float(x) for x in arr.reshape(-1)]
    return [int(x) for x in arr.reshape(-1)]


class Emitter:
    """Writes a Graph as ONNX at one opset."""

    def __init__(self, opset):
        self.opset = opset
        self.counter = 0

    def _fresh(self, base):
        self.counter += 1
        return f"{base}__c{self.counter}"

    def nodes(self, graph):
        out = []
        for n in graph.nodes:
            inputs = list(n.inputs)
            attrs = dict(n.attrs)
            for attr, (index, since, arr) in sorted(n.forms.items()):
                if self.opset >= since:
                    name = self._fresh(n.outputs[0] if n.outputs[0] else n.op)
                    out.append(helper.make_node(
                        "Constant", [], [name], value=numpy_helper.from_array(arr)))
                    while len(inputs) <= index:
                        inputs.append("")
                    inputs[index] = name
                else:
                    attrs[attr] = _form_attr_value(arr)
            while inputs and inputs[-1] == "":
                inputs.pop()
            proto = helper.make_node(n.op, [i or "" for i in inputs], n.outputs, domain=n.domain)
            for k in sorted(attrs):
                proto.attribute.append(_attr(k, attrs[k]))
            for k in sorted(n.graphs):
                proto.attribute.append(helper.make_attribute(k, self.graph(n.graphs[k])))
            out.append(proto)
        return out

    def graph(self, graph):
        nodes = self.nodes(graph)
        inputs = [_value_info(v, dims) for v, dims in graph.inputs]
        outputs = []
        for v, declare in graph.outputs:
            outputs.append(_value_info(v, list(v.shape) if declare and known(v.shape) else None))
        inits = [numpy_helper.from_array(a, name) for name, a in sorted(graph.initializers.items())]
        return helper.make_graph(nodes, graph.name, inputs, outputs, initializer=inits)


def to_model(graph, opset):
    """The ONNX model of `graph` at `opset` (default domain)."""
    g = Emitter(opset).graph(graph)
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)],
                              producer_name="dynvm-difftest")
    model.ir_version = 8
    return model


def op_types(model):
    """Every (domain, op_type) in the model, subgraphs included."""
    found = set()

    def walk(g):
        for n in g.node:
            found.add((n.domain, n.op_type))
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    walk(a.g)
                for sg in a.graphs:
                    walk(sg)

    walk(model.graph)
    return found


def describe(model):
    """A readable listing of a model: inputs, nodes (subgraphs indented), outputs."""
    lines = [f"opset {model.opset_import[0].version}"]

    def vi(v):
        t = v.type
        if t.HasField("sequence_type"):
            return f"{v.name}: seq"
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                for d in t.tensor_type.shape.dim]
        elem = TensorProto.DataType.Name(t.tensor_type.elem_type).lower()
        shape = str(dims) if t.tensor_type.HasField("shape") else "unranked"
        return f"{v.name}: {elem}{shape}"

    def attr_str(a):
        if a.type == onnx.AttributeProto.GRAPH:
            return None
        v = helper.get_attribute_value(a)
        if isinstance(v, TensorProto):
            arr = numpy_helper.to_array(v)
            v = arr.tolist() if arr.size <= 8 else f"<{arr.dtype}{list(arr.shape)}>"
        if isinstance(v, bytes):
            v = v.decode()
        return f"{a.name}={v}"

    def walk(g, indent):
        pad = "  " * indent
        lines.append(pad + "inputs: " + ", ".join(vi(v) for v in g.input))
        for init in g.initializer:
            arr = numpy_helper.to_array(init)
            shown = arr.tolist() if arr.size <= 8 else f"<{arr.dtype}{list(arr.shape)}>"
            lines.append(f"{pad}init {init.name} = {shown}")
        for n in g.node:
            attrs = [s for s in (attr_str(a) for a in n.attribute) if s]
            lines.append(f"{pad}{', '.join(n.output)} = {n.op_type}({', '.join(n.input)})"
                         + (f" {{{', '.join(attrs)}}}" if attrs else ""))
            for a in n.attribute:
                if a.type == onnx.AttributeProto.GRAPH:
                    lines.append(f"{pad}  {a.name}:")
                    walk(a.g, indent + 2)
        lines.append(pad + "outputs: " + ", ".join(vi(v) for v in g.output))

    walk(model.graph, 0)
    return "\n".join(lines)
