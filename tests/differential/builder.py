"""The generator's state while it writes one graph: the values in scope, fresh inputs and
constants with their data, and node creation that tracks dtypes, shapes and exactness.

Op generators (ops_*.py) are functions of a Builder registered with `@op(NAME, ...)`: each
picks operands from the values in scope (or makes fresh ones of the dtypes and shapes it
needs), writes its node(s) and returns the new values, or returns None when it does not apply
(no operand of a usable type, for instance). A subgraph (an If branch, a Loop or Scan body) has
a Builder of its own whose scope includes the enclosing graphs' values, so bodies read outer
values the way exported models do.
"""
import math

import numpy as np

import compare
import magnitude
import schema_check
from graph import (BOOL, F16, F32, F64, FLOATS, I8, I16, I32, I64, INTS, U8, U16, U32, U64,
                   Graph, Node, Val, is_float, is_int, known)

# Float values an input may hold besides ordinary numbers (NaN, infinities, signed zero,
# values near overflow and subnormals): inputs draw them with probability P_SPECIAL.
SPECIALS = [np.nan, np.inf, -np.inf, -0.0, 0.0, 1e30, -1e30, 3e38, -3e38, 1e-40, -1e-40,
            65504.0, 1e-8]
P_SPECIAL = 0.08
P_EMPTY_DIM = 0.04

INT_RANGE = {I8: (-100, 100), U8: (0, 200), I16: (-1000, 1000), U16: (0, 2000),
             I32: (-1000, 1000), U32: (0, 2000), I64: (-1000, 1000), U64: (0, 2000)}


class OpGen:
    def __init__(self, name, fn, lo, hi, weight, cf, finite):
        self.name = name
        self.fn = fn
        self.lo = lo
        self.hi = hi
        self.weight = weight
        self.cf = cf  # makes control flow (counted as a control-flow graph)
        self.finite = finite  # reads only finite values (magnitude.py)


REGISTRY = {}


# Operators whose result with NaN or infinite operands ONNX leaves open (max/min, NaN in
# comparisons inside kernels) or depends on the order of operations (sums, products,
# transforms): their generators read finite values only (magnitude.py).
FINITE_OPS = {
    "ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
    "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare", "ArgMax", "ArgMin", "TopK", "Max",
    "Min", "Sum", "Mean", "MaxPool", "AveragePool", "GlobalMaxPool", "GlobalAveragePool",
    "Clip", "Relu", "HardSigmoid", "HardSwish", "Sign", "Softmax", "LogSoftmax", "Hardmax",
    "CumSum", "MatMul", "Gemm", "Einsum", "Det", "Conv", "ConvTranspose",
    "BatchNormalization", "InstanceNormalization", "LRN", "LayerNormalization",
    "MeanVarianceNormalization", "Resize", "Upsample", "GridSample", "RoiAlign", "LSTM", "GRU",
    "RNN", "NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss", "DFT", "STFT", "Unique",
    "QuantizeLinear", "DynamicQuantizeLinear", "MaxUnpool", "NonMaxSuppression",
}


def op(name, lo=7, hi=17, weight=1.0, cf=False, key=None, finite=None):
    """Registers an op generator for opsets [lo, hi] (intersected with the op's definition)."""

    def wrap(fn):
        fin = name in FINITE_OPS if finite is None else finite
        REGISTRY[key or name] = OpGen(name, fn, lo, hi, weight, cf, fin)
        return fn

    return wrap


class Skip(Exception):
    """Raised by a generator that finds it does not apply after all."""


class Ctx:
    """What every builder of one generated graph shares."""

    def __init__(self, rng, opsets, opdefs, max_cf_depth=2):
        self.rng = rng
        self.opsets = opsets
        self.lo = min(opsets)
        self.hi = max(opsets)
        self.opdefs = opdefs
        self.counter = 0
        self.root = None
        self.max_cf_depth = max_cf_depth
        self.control_flow = False
        self.values = {}  # every value made, by name (the reducer's tolerances)

    def name(self, base="v"):
        self.counter += 1
        return f"{base}{self.counter}"

    def valid(self, op, attr=None):
        """Whether `op` (and its attribute `attr`) exists at every opset of this graph."""
        d = self.opdefs.get(op)
        if d is None:
            return False
        for o in self.opsets:
            if d.version_at(o) is None:
                return False
            if attr is not None and d.attr_at(attr, o) is None:
                return False
        return True


class Builder:
    def __init__(self, ctx, graph, parent=None):
        self.ctx = ctx
        self.graph = graph
        self.parent = parent
        self.pool = list(parent.pool) if parent else []
        self.cf_depth = parent.cf_depth + 1 if parent else 0
        self.finite = False  # set while a FINITE_OPS generator runs
        if parent is None:
            ctx.root = self
            self.input_data = {}

    # -- randomness --------------------------------------------------------------------------
    @property
    def rng(self):
        return self.ctx.rng

    def chance(self, p):
        return self.rng.random() < p

    def choice(self, items):
        items = list(items)
        return items[int(self.rng.integers(len(items)))]

    def randint(self, lo, hi):
        """An int in [lo, hi] (inclusive)."""
        return int(self.rng.integers(lo, hi + 1))

    def name(self, base="v"):
        return self.ctx.name(base)

    def rand_dim(self, allow_zero=True):
        if allow_zero and self.chance(P_EMPTY_DIM):
            return 0
        return self.choice([1, 1, 2, 2, 3, 3, 4, 5, 6])

    def rand_shape(self, lo=0, hi=4, allow_zero=True):
        rank = self.choice([r for r in [0, 1, 1, 2, 2, 2, 3, 3, 4] if lo <= r <= hi] or [lo])
        return tuple(self.rand_dim(allow_zero) for _ in range(rank))

    # -- data ----------------------------------------------------------------------------------
    def data(self, dtype, shape, kind="data", lo=None, hi=None):
        """Random data of `kind`: data, pos, unit, nonzero, index (in [lo, hi)), bool."""
        n = int(np.prod(shape)) if len(shape) else 1
        rng = self.rng
        special = False
        if dtype == BOOL:
            a = rng.random(n) < (self.rng.random() if kind != "true" else 1.1)
        elif kind == "index":
            a = rng.integers(lo, hi, size=n) if hi > lo else np.zeros(n, np.int64)
        elif is_float(dtype):
            if kind == "pos":
                a = rng.uniform(0.25, 3.0, n)
            elif kind == "unit":
                a = rng.uniform(-0.99, 0.99, n)
            elif self.chance(0.5):
                a = rng.integers(-32, 33, n) / 8.0
            else:
                a = rng.uniform(-4, 4, n)
            if kind == "nonzero":
                a[a == 0] = 0.5
            if kind == "data" and n and self.chance(P_SPECIAL):  # "finite": never
                special = True
                mask = rng.random(n) < 0.3
                a[mask] = rng.choice(np.array(SPECIALS), size=int(mask.sum()))
        else:
            ilo, ihi = INT_RANGE[dtype]
            if lo is not None:
                ilo, ihi = lo, hi
            if kind == "pos":
                ilo = max(ilo, 1)
            a = rng.integers(ilo, ihi, size=n)
            if kind == "nonzero":
                a[a == 0] = 1 if ihi > 1 else -1
        with np.errstate(all="ignore"):
            arr = np.asarray(a).astype(dtype).reshape(shape)
        return arr, special

    # -- values --------------------------------------------------------------------------------
    def fresh(self, dtype, shape, kind="data", lo=None, hi=None, const=None):
        """A new value: a graph input (its data kept for the run) or a constant.

        In a subgraph a fresh input is added to the root graph and read from the body.
        """
        if not known(shape):
            raise Skip()  # data-dependent dims: only values computed in the graph have them
        if self.finite and kind == "data":
            kind = "finite"
        arr, special = self.data(dtype, shape, kind, lo, hi)
        if const is None:
            const = self.chance(0.3) or kind == "index" and self.chance(0.5)
        if const:
            return self.constant(arr, special=special)
        root = self.ctx.root
        v = Val(self.name("in"), dtype, shape, mag=data_mag(arr))
        root.graph.inputs.append((v, self.declared_dims(shape)))
        root.input_data[v.name] = arr
        root.pool.append(v)
        if root is not self:
            self.pool.append(v)
        return v

    def declared_dims(self, shape):
        r = self.rng.random()
        if r < 0.05:
            return None  # no shape at all
        dims = []
        for d in shape:
            r = self.rng.random()
            if r < 0.55:
                dims.append(d)
            elif r < 0.75:
                dims.append(f"n{d}")
            elif r < 0.9:
                dims.append(self.name("sym"))
            else:
                dims.append("")
        # helper.make_tensor_value_info reads "" as an unnamed dim.
        return [d if d != "" else None for d in dims]

    def constant(self, arr, special=False, node=None):
        """A constant value: an initializer of the root graph, or a Constant node."""
        arr = np.asarray(arr)
        name = self.name("c")
        use_node = node if node is not None else (self.parent is not None or self.chance(0.4))
        if use_node:
            self.graph.nodes.append(Node("Constant", [], [name],
                                         {"value": arr}))
        else:
            self.graph.initializers[name] = arr
        v = Val(name, arr.dtype, arr.shape, mag=data_mag(arr))
        v.const = arr
        self.pool.append(v)
        return v

    def pick(self, pred=lambda v: True, make=None, p_fresh=0.2, exact=False):
        """A tensor value in scope that satisfies `pred` (recent ones preferred), else
        make() (a fresh value) when given, else None."""
        cands = [v for v in self.pool if not v.is_seq and pred(v) and (v.exact or not exact) and
                 (v.safe or not self.finite)]
        if make is not None and (not cands or self.chance(p_fresh)):
            return make()
        if not cands:
            return None
        w = np.arange(1, len(cands) + 1, dtype=np.float64) ** 1.5
        return cands[int(self.rng.choice(len(cands), p=w / w.sum()))]

    def node(self, op, inputs, attrs=None, outs=((None, None),), exact=True, mag=None,
             forms=None, graphs=None, extra_depth=0, domain="", random=False, quant=0,
             unit=None):
        """Adds a node; `outs` lists (dtype, shape) per output ((None, None): like input 0).

        Returns the output Vals (None for an output given as None)."""
        data = [v for v in inputs if v is not None]
        depth = max([v.depth for v in data], default=0) + (0 if exact else 1) + extra_depth
        all_exact = exact and all(v.exact for v in data)
        rnd = random or any(v.random for v in data)
        q = max([quant] + [v.quant for v in data])
        if unit is None:
            floats = [v.dtype for v in data if v.dtype in FLOATS] + \
                [spec[0] or inputs[0].dtype for spec in outs if spec is not None and
                 (spec[0] or inputs[0].dtype) in FLOATS]
            unit = 0.0 if exact else max([compare.UNIT[d] for d in floats] or [2.0 ** -16])
        unit = max([unit] + [v.unit for v in data])
        out_mag = magnitude.bound(op, [v.mag for v in data], _reduced(op, inputs, outs), mag)
        vals, names = [], []
        for spec in outs:
            if spec is None:
                vals.append(None)
                names.append("")
                continue
            dtype, shape = spec[0], spec[1]
            if dtype is None:
                dtype = inputs[0].dtype
            if shape is None:
                shape = inputs[0].shape
            v = Val(self.name(), dtype, shape, depth=depth, exact=all_exact, mag=out_mag,
                    random=rnd, quant=q, unit=unit)
            if len(spec) > 2:  # "seq" or "opt": its producer fills v.seq in
                v.seq = ("optional", None) if spec[2] == "opt" else ("pending", None)
            vals.append(v)
            names.append(v.name)
        if not domain:
            problem = schema_check.check(op, inputs, vals, self.ctx.opsets)
            if problem:
                raise Skip(problem)
        for v in data:
            v.uses += 1
        self.graph.nodes.append(Node(op, [v.name if v is not None else "" for v in inputs],
                                     names, attrs, forms, graphs, domain))
        for v in vals:
            if v is not None:
                self.pool.append(v)
                self.ctx.values[v.name] = v
        return vals

    def node1(self, *args, **kwargs):
        return self.node(*args, **kwargs)[0]

    # -- helpers used by many generators -----------------------------------------------------
    def cast(self, v, dtype):
        if v.dtype == dtype:
            return v
        return self.node1("Cast", [v], {"to": int(ONNX(dtype))}, outs=[(dtype, v.shape)],
                          exact=True)

    def _reduce_all(self, v, op):
        forms, attrs = {}, {"keepdims": 0}
        if op == "ReduceSum":
            forms["axes"] = (1, 13, np.arange(v.rank, dtype=np.int64))
        else:
            attrs["axes"] = list(range(v.rank))
        return self.node1(op, [v], attrs, outs=[(v.dtype, ())], exact=op != "ReduceSum",
                          forms=forms)

    def scalar_of(self, v, exact_only=False):
        """A float32 scalar computed from v, to fold v into a value of another shape (every
        result of a body must reach an output to be compared).

        A finite value is reduced (max or min, exact; or a sum); a value that may hold NaN or
        infinities, or an inexact one where the scalar must be exact, gives its element count
        instead: whether an inexact value is 0, or which NaN a max picks, is not the same in
        every engine (LogSoftmax over one element is 0 in one and -1e-8 in another)."""
        nonempty = known(v.shape) and 0 not in v.shape
        if v.dtype == BOOL:
            v = self.cast(v, F32)
        usable = v.safe and (v.exact or not exact_only) and (is_float(v.dtype) or
                                                              v.dtype in (I32, I64))
        if not usable:
            size = self.node1("Size", [v], outs=[(I64, ())])
            return self.cast(size, F32)
        v = self.cast(v, F32) if v.dtype not in (F32, F64) else v
        if v.rank > 0:
            op = self.choice(["ReduceMax", "ReduceMin"]) if nonempty else "ReduceSum"
            if not exact_only and nonempty and self.chance(0.3):
                op = "ReduceSum"
            v = self._reduce_all(v, op)
        return self.cast(v, F32)

    def fold(self, target, extra):
        """target combined with every value of `extra` (reduced to scalars): same dtype and
        shape as target. Integer and bool targets take exact scalars only, so an ulp of
        difference in a folded float cannot change an integer."""
        for e in extra:
            if e is target or e.is_seq:
                continue
            dt = target.dtype
            if dt == BOOL:
                s = self.scalar_of(e, exact_only=True)
                s = self.node1("Greater", [s, self.constant(np.array(0, np.float32))],
                               outs=[(BOOL, ())], exact=True)
                target = self.node1("Xor", [target, s], outs=[(BOOL, target.shape)])
            elif is_int(dt):
                s = self.scalar_of(e, exact_only=True)
                s = self.node1("Clip", [s], forms={"min": (1, 11, np.array(-50, np.float32)),
                                                   "max": (2, 11, np.array(50, np.float32))},
                               outs=[(F32, ())], exact=True)
                s = self.node1("Floor", [s], exact=True)
                if dt in (U8, U16, U32, U64):
                    s = self.node1("Abs", [s], exact=True)
                s = self.cast(s, dt)
                # Only Add of int32/int64 is in every ONNX Runtime build; others via a cast.
                if dt in (I32, I64):
                    target = self.node1("Add", [target, s], outs=[(dt, target.shape)])
                else:
                    t = self.node1("Add", [self.cast(target, I32), self.cast(s, I32)],
                                   outs=[(I32, target.shape)])
                    t = self.node1("Clip", [self.cast(t, F32)],
                                   forms={"min": (1, 11, np.array(INT_LIMITS[dt][0], np.float32)),
                                          "max": (2, 11, np.array(INT_LIMITS[dt][1], np.float32))},
                                   exact=True)
                    target = self.cast(t, dt)
            else:
                s = self.cast(self.scalar_of(e), dt)
                target = self.node1("Add", [target, s], outs=[(dt, target.shape)])
        return target


def data_mag(arr):
    """The bound of an array's values (math.inf when it holds NaN or infinity)."""
    if arr.dtype == object or arr.size == 0:
        return 0.0
    with np.errstate(all="ignore"):
        a = np.abs(arr.astype(np.float64))
    if not np.isfinite(a).all():
        return math.inf
    return float(a.max())


def _numel(shape):
    n = 1
    for d in shape or ():
        n *= d if isinstance(d, int) else 16
    return n


def _reduced(op, inputs, outs):
    """Elements one output element sums over (an upper bound), for magnitude.bound."""
    ins = [v for v in inputs if v is not None]
    if not ins:
        return 1
    if op in ("MatMul", "Gemm", "Conv", "ConvTranspose", "Einsum", "MatMulInteger",
              "ConvInteger") and len(ins) > 1:
        return _numel(ins[1].shape)
    out = outs[0] if outs and outs[0] is not None else None
    n_out = _numel(out[1]) if out is not None and out[1] is not None else 1
    return max(1, _numel(ins[0].shape) // max(n_out, 1))


INT_LIMITS = {I8: (-128, 127), U8: (0, 255), I16: (-32768, 32767), U16: (0, 65535),
              U32: (0, 65535), U64: (0, 65535)}


def ONNX(dtype):
    from graph import ONNX_DTYPE
    return ONNX_DTYPE[dtype]
