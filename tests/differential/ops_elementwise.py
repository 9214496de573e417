"""Op generators: elementwise arithmetic, logic, comparisons, unary math and activations,
casts, Where, Clip, and the row-wise Softmax family and CumSum.

Operands broadcast the NumPy way (a suffix, 1s, extra leading dims, a scalar). An operation
whose output jumps where its input moves by an ulp (Floor, Sign, comparisons, casts to
integers...) reads only exact values (graph.py), so that a last-bit difference upstream
cannot turn into a different integer downstream.
"""
import numpy as np

from builder import Skip, op
from graph import (BOOL, F16, F32, F64, I8, I16, I32, I64, ONNX_DTYPE, U8, U16, U32, U64,
                   is_float, is_int, known)

FL = (F32, F32, F32, F64)  # float dtypes, f32 preferred


def broadcast(a, b):
    """NumPy broadcast of two shapes with data-dependent tokens; None when they do not."""
    out = []
    for i in range(max(len(a), len(b))):
        x = a[len(a) - 1 - i] if i < len(a) else 1
        y = b[len(b) - 1 - i] if i < len(b) else 1
        if x == y or y == 1:
            out.append(x)
        elif x == 1:
            out.append(y)
        else:
            return None
    return tuple(reversed(out))


def compatible_shape(b, shape, unidirectional=False):
    """A shape that broadcasts with `shape` (to it, with `unidirectional`)."""
    r = b.rng.random()
    if r < 0.4:
        return tuple(shape)
    dims = list(shape)
    if r < 0.6 and dims:
        dims = dims[b.randint(0, len(dims)):]  # a suffix
    elif r < 0.8:
        dims = [1 if b.chance(0.5) else d for d in dims]
    elif r < 0.9:
        dims = []
    if not unidirectional and b.chance(0.2) and len(dims) < 5:
        dims = [b.choice([1, 2, 3])] + dims
        if len(dims) <= len(shape):
            dims = dims[1:]
        elif dims[0] != 1 and len(dims) > len(shape):
            pass
    dims = [d if isinstance(d, int) or b.chance(0.7) else 1 for d in dims]
    return tuple(dims)


def operand_like(b, x, dtype=None, unidirectional=False, kind="data", exact=False):
    """A second operand broadcast-compatible with x: one in scope, or a fresh one."""
    dtype = dtype or x.dtype
    target = compatible_shape(b, x.shape, unidirectional)

    def ok(v):
        if v.dtype != dtype or v is x:
            return False
        out = broadcast(x.shape, v.shape)
        if out is None:
            return False
        return not unidirectional or tuple(out) == tuple(x.shape)

    def make():
        shp = tuple(d if isinstance(d, int) else 1 for d in target) if not known(target) \
            and b.chance(0.5) else target
        if not known(shp):
            shp = tuple(d if isinstance(d, int) else 1 for d in shp)
        return b.fresh(dtype, shp, kind)

    if kind != "data":
        return make()
    return b.pick(ok, make, p_fresh=0.5, exact=exact)


def pick_x(b, dtypes, exact=False, min_rank=0, max_rank=8, need_known=False,
           pred=lambda v: True):
    def ok(v):
        return v.dtype in dtypes and min_rank <= v.rank <= max_rank and \
            (known(v.shape) or not need_known) and pred(v)

    def make():
        return b.fresh(b.choice(dtypes), b.rand_shape(min_rank, min(max_rank, 4)))

    return b.pick(ok, make, exact=exact)


# -- binary arithmetic -------------------------------------------------------------------------

def _binary(b, op, dtypes, exact=True, out_bool=False, kind="data", need_exact=False):
    x = pick_x(b, dtypes, exact=need_exact)
    y = operand_like(b, x, kind=kind, exact=need_exact)
    if b.chance(0.5) and not op.startswith("B"):
        x, y = y, x
    shape = broadcast(x.shape, y.shape)
    if shape is None:
        raise Skip()
    return b.node1(op, [x, y], outs=[(BOOL if out_bool else x.dtype, shape)], exact=exact)


@op("Add")
def add(b):
    return _binary(b, "Add", FL + (I32, I64))


@op("Sub")
def sub(b):
    return _binary(b, "Sub", FL + (I32, I64))


@op("Mul")
def mul(b):
    return _binary(b, "Mul", FL + (I32, I64))


@op("Div")
def div(b):
    x = pick_x(b, FL + (I32, I64))
    if is_int(x.dtype):  # an integer divisor must not be 0
        y = operand_like(b, x, kind="nonzero")
    else:  # an exact divisor: dividing by a value near 0 is ill-conditioned
        y = operand_like(b, x, exact=True)
    shape = broadcast(x.shape, y.shape)
    return b.node1("Div", [x, y], outs=[(x.dtype, shape)], exact=True)


@op("Pow")
def pow_(b):
    x = pick_x(b, (F32, F32, F64), exact=True)
    if b.ctx.lo >= 12 and b.chance(0.3):
        y = b.fresh(b.choice([I32, I64]), (), kind="index", lo=-3, hi=4)
    elif b.chance(0.5):
        y = b.constant(np.array(b.choice([2.0, 0.5, 3.0, -1.0, 1.0, -0.5, 1.5]), x.dtype))
    else:
        y = operand_like(b, x, exact=True)
    shape = broadcast(x.shape, y.shape)
    if shape is None:
        raise Skip()
    return b.node1("Pow", [x, y], outs=[(x.dtype, shape)], exact=False)


@op("Mod", lo=10)
def mod(b):
    x = pick_x(b, (F32, F64, I32, I64), exact=True)
    fmod = 1 if is_float(x.dtype) else b.choice([0, 1])
    y = operand_like(b, x, kind="nonzero")
    shape = broadcast(x.shape, y.shape)
    return b.node1("Mod", [x, y], {"fmod": fmod}, outs=[(x.dtype, shape)], exact=True)


@op("BitShift", lo=11)
def bitshift(b):
    dt = b.choice([U8, U16, U32, U64])
    x = pick_x(b, (dt,))
    y = b.fresh(dt, compatible_shape(b, x.shape), kind="index", lo=0, hi=8)
    shape = broadcast(x.shape, y.shape)
    if shape is None:
        raise Skip()
    return b.node1("BitShift", [x, y], {"direction": b.choice(["LEFT", "RIGHT"])},
                   outs=[(dt, shape)])


@op("And")
def and_(b):
    return _binary(b, "And", (BOOL,))


@op("Or")
def or_(b):
    return _binary(b, "Or", (BOOL,))


@op("Xor")
def xor_(b):
    return _binary(b, "Xor", (BOOL,))


def _compare(b, op, lo_dtypes, hi_dtypes, since):
    dtypes = hi_dtypes if b.ctx.lo >= since else lo_dtypes
    return _binary(b, op, dtypes, out_bool=True, need_exact=True)


@op("Equal")
def equal(b):
    return _compare(b, "Equal", (BOOL, I32, I64), (BOOL, I32, I64, F32, F32), 11)


@op("Greater")
def greater(b):
    return _compare(b, "Greater", (F32,), (F32, F64, I32, I64), 9)


@op("Less")
def less(b):
    return _compare(b, "Less", (F32,), (F32, F64, I32, I64), 9)


@op("GreaterOrEqual", lo=12)
def greater_equal(b):
    return _compare(b, "GreaterOrEqual", (F32,), (F32, F64, I32, I64), 12)


@op("LessOrEqual", lo=12)
def less_equal(b):
    return _compare(b, "LessOrEqual", (F32,), (F32, F64, I32, I64), 12)


def _variadic(b, op, dtypes, exact):
    x = pick_x(b, dtypes)
    n = b.randint(1, 4)
    vals, shape = [x], x.shape
    for _ in range(n - 1):
        if b.ctx.lo < 8:  # opset 7 has no broadcasting for these
            y = b.pick(lambda v: v.dtype == x.dtype and v.shape == x.shape and v is not x,
                       lambda: b.fresh(x.dtype, x.shape))
        else:
            y = operand_like(b, x)
        s = broadcast(shape, y.shape)
        if s is None:
            continue
        shape = s
        vals.append(y)
    if b.chance(0.5):
        vals = vals[::-1]
    return b.node1(op, vals, outs=[(x.dtype, shape)], exact=exact and len(vals) <= 2)


@op("Max")
def max_(b):
    return _variadic(b, "Max", FL + ((I32, I64) if b.ctx.lo >= 12 else ()), True)


@op("Min")
def min_(b):
    return _variadic(b, "Min", FL + ((I32, I64) if b.ctx.lo >= 12 else ()), True)


@op("Sum")
def sum_(b):
    return _variadic(b, "Sum", FL, True)


@op("Mean")
def mean_(b):
    return _variadic(b, "Mean", FL, False)


@op("PRelu")
def prelu(b):
    x = pick_x(b, FL, min_rank=1)
    y = operand_like(b, x, unidirectional=True)
    return b.node1("PRelu", [x, y], outs=[(x.dtype, x.shape)], exact=True)


@op("Where", lo=9)
def where(b):
    x = pick_x(b, FL + (I32, I64, BOOL))
    y = operand_like(b, x)
    shape = broadcast(x.shape, y.shape)
    c = b.pick(lambda v: v.dtype == BOOL and broadcast(shape, v.shape) is not None and v.exact,
               lambda: b.fresh(BOOL, compatible_shape(b, shape)), p_fresh=0.4)
    out = broadcast(shape, c.shape)
    if out is None:
        raise Skip()
    return b.node1("Where", [c, x, y], outs=[(x.dtype, out)], exact=True)


@op("Not")
def not_(b):
    x = pick_x(b, (BOOL,))
    return b.node1("Not", [x])


# -- unary math ----------------------------------------------------------------------------
# name: (first opset, dtypes, exact, needs exact input). An op needs an exact input when its
# output jumps where the input moves by an ulp (Floor, Sign ...) or when it is ill-conditioned
# (Log near 0, Asin and Acos near +-1, Tan near pi/2, 1/x near 0 ...): a last-bit difference
# upstream would become a large one. Sin and Cos take an exact input or a small one
# (PERIODIC_MAG): a rounding error relative to a large argument (Sin(Exp(x))) is a large
# absolute error in the phase.
PERIODIC_MAG = 64.0
UNARY = {
    "Abs": (7, FL + (I32, I64, I8), True, False),
    "Neg": (7, FL + (I32, I64, I8), True, False),
    "Sqrt": (7, FL, True, True),
    "Reciprocal": (7, FL, True, True),
    "Floor": (7, FL, True, True),
    "Ceil": (7, FL, True, True),
    "Round": (11, FL, True, True),
    "Sign": (9, FL + (I32, I64), True, True),
    "Exp": (7, FL, False, False),
    "Log": (7, FL, False, True),
    "Erf": (9, (F32, F32, F64), False, False),
    "Tanh": (7, FL, False, False),
    "Sigmoid": (7, FL, False, False),
    "Sin": (7, FL, False, False),
    "Cos": (7, FL, False, False),
    "Tan": (7, (F32,), False, True),
    "Asin": (7, (F32,), False, True),
    "Acos": (7, (F32,), False, True),
    "Atan": (7, (F32,), False, False),
    "Sinh": (9, (F32,), False, False),
    "Cosh": (9, (F32,), False, False),
    "Asinh": (9, (F32,), False, False),
    "Acosh": (9, (F32,), False, True),
    "Atanh": (9, (F32,), False, True),
    "Softplus": (7, (F32,), False, False),
    "Softsign": (7, (F32,), False, False),
    "Relu": (7, FL, True, False),
    "IsNaN": (9, (F32, F64), True, True),
}


def _make_unary(name, since, dtypes, exact, disc):
    @op(name, lo=since)
    def gen(b):
        dts = dtypes
        if name == "Relu" and b.ctx.lo >= 14:
            dts = dtypes + (I32, I8)
        pred = (lambda v: True)
        if name in ("Sin", "Cos"):
            pred = (lambda v: v.exact or v.mag <= PERIODIC_MAG)
        x = pick_x(b, dts, exact=disc, pred=pred)
        out = BOOL if name == "IsNaN" else x.dtype
        return b.node1(name, [x], outs=[(out, x.shape)], exact=exact)
    return gen


for _n, (_s, _d, _e, _disc) in UNARY.items():
    _make_unary(_n, _s, _d, _e, _disc)


@op("IsInf", lo=10)
def isinf(b):
    x = pick_x(b, (F32, F64), exact=True)
    attrs = {}
    if b.chance(0.5):
        attrs["detect_negative"] = b.choice([0, 1])
    if b.chance(0.5):
        attrs["detect_positive"] = b.choice([0, 1])
    return b.node1("IsInf", [x], attrs, outs=[(BOOL, x.shape)])


def _act(name, attrs_fn, exact=False, lo=7, dtypes=(F32, F32, F64)):
    @op(name, lo=lo)
    def gen(b):
        x = pick_x(b, dtypes)
        return b.node1(name, [x], attrs_fn(b), outs=[(x.dtype, x.shape)], exact=exact)
    return gen


def _maybe(b, name, lo, hi, p=0.6):
    return {name: float(np.float32(b.rng.uniform(lo, hi)))} if b.chance(p) else {}


_act("Elu", lambda b: _maybe(b, "alpha", 0.1, 2.0))
_act("Selu", lambda b: {**_maybe(b, "alpha", 0.5, 2.0), **_maybe(b, "gamma", 0.5, 2.0)})
_act("Celu", lambda b: _maybe(b, "alpha", 0.2, 2.0), lo=12, dtypes=(F32,))
_act("HardSigmoid", lambda b: {**_maybe(b, "alpha", 0.05, 0.5), **_maybe(b, "beta", 0.0, 1.0)})
_act("HardSwish", lambda b: {}, lo=14, dtypes=(F32,))
_act("LeakyRelu", lambda b: _maybe(b, "alpha", 0.0, 0.5), exact=True)
_act("ThresholdedRelu", lambda b: _maybe(b, "alpha", -1.0, 2.0), exact=True, lo=10)
@op("Shrink", lo=9)
def shrink(b):
    x = pick_x(b, (F32, F32, F64), exact=True)
    attrs = {**_maybe(b, "bias", 0.0, 1.0), **_maybe(b, "lambd", 0.0, 1.5)}
    # ONNX Runtime computes Shrink of float64 in float32 (docs/differential.md): compared at
    # float32's precision.
    return b.node1("Shrink", [x], attrs, outs=[(x.dtype, x.shape)], exact=x.dtype == F32,
                   unit=2.0 ** -16 if x.dtype == F64 else None)


@op("Clip")
def clip(b):
    ints = b.ctx.lo >= 12
    x = pick_x(b, FL + ((I32, I64) if ints else ()))
    if b.ctx.lo < 11 and not b.ctx.hi < 11 and x.dtype != F32:
        x = pick_x(b, (F32,))
    forms = {}
    lo_v = b.rng.uniform(-3, 1)
    hi_v = lo_v + b.rng.uniform(0, 3)
    if b.chance(0.25):
        hi_v = lo_v - 0.5  # min > max: every element becomes max (ONNX: min(max(x, lo), hi))
    if b.ctx.lo < 11:
        hi_v = max(hi_v, lo_v)  # ONNX Runtime's Clip-6 refuses min > max
    if is_int(x.dtype):
        lo_v, hi_v = np.floor(lo_v * 10), np.floor(hi_v * 10)
    if b.chance(0.8):
        forms["min"] = (1, 11, np.array(lo_v, x.dtype))
    if b.chance(0.8):
        forms["max"] = (2, 11, np.array(hi_v, x.dtype))
    return b.node1("Clip", [x], forms=forms, outs=[(x.dtype, x.shape)], exact=True)


@op("Cast")
def cast(b):
    # Strings stay in StringNormalizer's Cast to float (a string to bool or int is not
    # defined by the spec).
    x = b.pick(lambda v: v.dtype != "str", lambda: b.fresh(b.choice(FL + (I32, I64, BOOL, U8, I8)),
                                                            b.rand_shape()))
    if is_float(x.dtype):
        targets = [F32, F64, F16] if b.ctx.lo >= 7 else [F32, F64]
        if x.exact:
            targets += [BOOL]
            if x.safe:
                targets += [I32, I64]
    else:
        targets = [F32, F64, I32, I64, BOOL, I8, U8, I16, U16, U32, U64]
    to = b.choice(targets)
    return b.node1("Cast", [x], {"to": int(ONNX_DTYPE[to])}, outs=[(to, x.shape)])


@op("CastLike", lo=15)
def cast_like(b):
    x = b.pick(lambda v: v.dtype in (F32, F64, I32, I64, BOOL) and
               (not is_float(v.dtype) or v.exact and v.safe),
               lambda: b.fresh(b.choice([F32, I32, I64]), b.rand_shape(), kind="unit"))
    like = b.pick(lambda v: v.dtype in (F32, F64, I32, I64, BOOL) and v is not x,
                  lambda: b.fresh(b.choice([F32, F64, I64]), ()))
    return b.node1("CastLike", [x, like], outs=[(like.dtype, x.shape)], exact=True)


# -- row-wise ------------------------------------------------------------------------------

def _softmax_like(b, name, exact):
    x = pick_x(b, (F32, F32, F64), min_rank=1, exact=exact)
    attrs = {}
    # Without the attribute the axis is 1 before opset 13 (-1 from 13): give it explicitly
    # where the opsets disagree or where 1 is out of range.
    if b.chance(0.7) or b.ctx.lo < 13 <= b.ctx.hi or b.ctx.lo < 13 and x.rank < 2:
        attrs["axis"] = b.randint(-x.rank, x.rank - 1)
    return b.node1(name, [x], attrs, outs=[(x.dtype, x.shape)], exact=exact)


@op("Softmax")
def softmax(b):
    return _softmax_like(b, "Softmax", False)


@op("LogSoftmax")
def log_softmax(b):
    return _softmax_like(b, "LogSoftmax", False)


@op("Hardmax")
def hardmax(b):
    return _softmax_like(b, "Hardmax", True)


@op("CumSum", lo=11)
def cumsum(b):
    x = pick_x(b, (F32, F64, I32, I64), min_rank=1)
    axis = b.randint(-x.rank, x.rank - 1)
    axis_v = b.constant(np.array(axis, b.choice([np.int64, np.int32])))
    attrs = {}
    if b.chance(0.5):
        attrs["exclusive"] = b.choice([0, 1])
    if b.chance(0.5):
        attrs["reverse"] = b.choice([0, 1])
    return b.node1("CumSum", [x, axis_v], attrs, outs=[(x.dtype, x.shape)],
                   exact=not is_float(x.dtype))
