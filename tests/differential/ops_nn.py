"""Op generators: reductions, ArgMax/ArgMin, TopK (a constant or a computed k), products
(MatMul, Gemm, Einsum, Det), convolutions and pooling, the normalizations, Resize/Upsample,
the recurrent cells, the losses, and the vision operators (GridSample, RoiAlign, MaxUnpool,
NonMaxSuppression).

Spatial sizes stay small (at most 7) and attributes stay in the ranges the ONNX schemas
allow: kernel, stride, dilation and padding give an output of at least one element; groups
divide the channels.
"""
import numpy as np

import magnitude
from builder import Skip, op
from graph import BOOL, F32, F64, I32, I64, U8, I8, known, numel
from ops_elementwise import pick_x
from ops_tensor import new_token

FL = (F32, F32, F32, F64)


# -- reductions ------------------------------------------------------------------------------

REDUCE = {
    "ReduceSum": (FL + (I32, I64), False), "ReduceMean": (FL + (I32,), False),
    "ReduceMax": (FL + (I32, I64), True), "ReduceMin": (FL + (I32, I64), True),
    "ReduceProd": (FL + (I32, I64), False), "ReduceL1": (FL + (I32, I64), False),
    "ReduceL2": (FL, False), "ReduceLogSum": (FL, False), "ReduceLogSumExp": (FL, False),
    "ReduceSumSquare": (FL + (I32, I64), False),
}


def _reduce_gen(name, dtypes, exact):
    @op(name)
    def gen(b):
        if name == "ReduceProd" and b.chance(0.5):
            # Integer products must not overflow (ONNX leaves it undefined): small values.
            x = b.fresh(b.choice([I32, I64]), b.rand_shape(0, 3), kind="index", lo=-2, hi=3)
        elif name == "ReduceProd":
            # A float product whose partial products overflow depends on the order and the
            # precision it is taken in (an infinity times a later 0 is NaN, the exact product
            # 0): seed 7 graph 45074, 0 folded in double against NaN multiplied in float32.
            # Values whose product cannot overflow, those of magnitude at most 1 among them.
            x = b.pick(lambda v: v.dtype in FL and v.rank <= 8 and _product_fits(v),
                       lambda: b.fresh(b.choice(FL), b.rand_shape(0, 4), kind="unit"))
        else:
            x = pick_x(b, dtypes, min_rank=0, pred=lambda v: _int_result_fits(name, v))
        attrs, forms = {}, {}
        keep = b.choice([0, 1])
        if b.chance(0.7) or keep == 0 and b.chance(0.5):
            attrs["keepdims"] = keep
        else:
            keep = 1
        if x.rank and b.chance(0.75):
            k = b.randint(1, x.rank)
            axes = sorted(b.rng.choice(x.rank, size=k, replace=False).tolist())
            shown = [a - x.rank if b.ctx.lo >= 11 and b.chance(0.3) else a for a in axes]
            if name == "ReduceSum":
                forms["axes"] = (1, 13, np.array(shown, np.int64))
            else:
                attrs["axes"] = shown
        else:
            axes = list(range(x.rank))
            if name == "ReduceSum" and b.ctx.lo >= 13 and b.chance(0.3):
                attrs["noop_with_empty_axes"] = 1
                axes = []
        if name in ("ReduceMax", "ReduceMin") and any(x.shape[a] == 0 for a in axes):
            raise Skip()  # the identity of max/min over nothing is not defined by ONNX <18
        if 0 in x.shape:
            # ONNX Runtime's reductions of empty tensors give other shapes than the spec's
            # (and 0 for a mean over nothing, where numpy gives NaN): spec tests
            # (docs/differential.md), not fuzzed.
            raise Skip()
        if name == "ReduceLogSum":
            # The log of a sum that cancels reads its rounding noise (seed 7 graph 26539: an
            # LRN's outputs summing to 7e-5, -9.604 against -9.611): the sum of magnitudes
            # does not cancel, and its log is as accurate as its terms.
            x = b.node1("Abs", [x], outs=[(x.dtype, x.shape)], exact=True)
        out = [1 if i in axes else d for i, d in enumerate(x.shape) if keep or i not in axes]
        ints = x.dtype in (I32, I64)
        return b.node1(name, [x], attrs, forms=forms, outs=[(x.dtype, tuple(out))],
                       exact=exact or ints and name != "ReduceMean",
                       extra_depth=0 if exact else 1)
    return gen


def _int_result_fits(name, v):
    """An integer reduction's result cannot overflow (ONNX leaves integer overflow undefined;
    seed 7 graph 14866: a ReduceSumSquare of 83226 in int32, wrapped as numpy does against
    ONNX Runtime's INT32_MAX). Floats always fit."""
    if v.dtype not in (I32, I64):
        return True
    if not known(v.shape):
        return False
    return magnitude.bound(name, [v.mag], numel(v.shape)) < np.iinfo(v.dtype).max


def _product_fits(v):
    """No partial product of v's elements can overflow v's dtype."""
    if not known(v.shape) or v.mag != v.mag or v.mag == float("inf"):
        return False
    if v.mag <= 1:
        return True
    limit = 30 if v.dtype == F32 else 300
    return numel(v.shape) * np.log10(v.mag) < limit


for _n, (_d, _e) in REDUCE.items():
    _reduce_gen(_n, _d, _e)


def _arg(b, name):
    x = pick_x(b, (F32, F32, I32, I64, F64), min_rank=1, exact=True)
    axis = b.randint(-x.rank, x.rank - 1)
    a = axis % x.rank
    if 0 in x.shape:  # ONNX Runtime keeps the reduced axis of an empty input (a spec test)
        raise Skip()
    attrs = {"axis": axis} if b.chance(0.8) or axis != 0 else {}
    keep = 1
    if b.chance(0.6):
        keep = b.choice([0, 1])
        attrs["keepdims"] = keep
    if b.ctx.lo >= 12 and b.chance(0.5):
        attrs["select_last_index"] = b.choice([0, 1])
    if "axis" not in attrs:
        a = 0
    out = [1 if i == a else d for i, d in enumerate(x.shape) if keep or i != a]
    return b.node1(name, [x], attrs, outs=[(I64, tuple(out))])


@op("ArgMax")
def argmax(b):
    return _arg(b, "ArgMax")


@op("ArgMin")
def argmin(b):
    return _arg(b, "ArgMin")


@op("TopK")
def topk(b):
    x = pick_x(b, (F32, F32, F64, I32, I64) if b.ctx.lo >= 11 else (F32,), min_rank=1,
               exact=True)
    if 0 in x.shape:  # ONNX Runtime crashes (SIGFPE) on TopK of an empty tensor
        raise Skip()
    axis = b.randint(-x.rank, x.rank - 1)
    a = axis % x.rank
    d = x.shape[a]
    attrs = {}
    if b.chance(0.7) or axis != -1:
        attrs["axis"] = axis
    forms = {}
    ins = [x]
    out = list(x.shape)
    if b.ctx.lo >= 10 and b.chance(0.5):
        # A computed k: the number of true elements of a mask along the axis (<= d).
        m = b.fresh(BOOL, (d,) if isinstance(d, int) else (1,)) if isinstance(d, int) else None
        if m is None:
            raise Skip()
        s = b.node1("Cast", [m], {"to": 7}, outs=[(I64, m.shape)])
        k = b.node1("ReduceSum", [s], {"keepdims": 1}, outs=[(I64, (1,))])
        ins.append(k)
        out[a] = new_token(b)
    else:
        if not isinstance(d, int):
            raise Skip()
        k = b.randint(0, d)
        forms["k"] = (1, 10, np.array([k], np.int64))
        out[a] = k
    if b.ctx.lo >= 11:
        if b.chance(0.5):
            attrs["largest"] = b.choice([0, 1])
        if b.chance(0.3):
            attrs["sorted"] = 1
    return b.node("TopK", ins, attrs, forms=forms, outs=[(x.dtype, tuple(out)),
                                                         (I64, tuple(out))])


# -- products ----------------------------------------------------------------------------------

@op("MatMul")
def matmul(b):
    a = pick_x(b, (F32, F32, F64) + ((I32, I64) if b.ctx.lo >= 9 else ()), min_rank=1,
               max_rank=4)
    k = a.shape[-1]
    if not isinstance(k, int):
        raise Skip()
    n = b.randint(1, 4)
    if a.rank == 1:
        bshape = b.choice([(k,), (k, n), (2, k, n)])
    else:
        lead = a.shape[:-2]
        lead = tuple(d if isinstance(d, int) and b.chance(0.7) else 1 for d in lead)
        lead = lead[b.randint(0, len(lead)):] if b.chance(0.3) else lead
        bshape = b.choice([lead + (k, n), (k,), (k, n)])
    if k == 0 and (a.rank == 1 or len(bshape) == 1):
        # ONNX Runtime leaves such a MatMul's output unwritten (ort-matmul-of-empty-k-unwritten;
        # the regressions seed7-g*-value with that `about` pin numpy's zeros), and its garbage
        # flows on through whatever reads it (seed 7 graph 19317: an Atan of it).
        raise Skip()
    w = b.pick(lambda v: v.dtype == a.dtype and v.shape == bshape,
               lambda: b.fresh(a.dtype, bshape), p_fresh=0.6)
    out = np.broadcast_shapes(*[tuple(1 if not isinstance(d, int) else d for d in s[:-2])
                                for s in (a.shape, bshape) if len(s) > 2]) \
        if max(a.rank, len(bshape)) > 2 else ()
    out = list(out)
    if a.rank > 2:  # keep tokens of a's batch dims
        tail = a.shape[:-2]
        out = [t if not isinstance(t, int) else o for t, o in
               zip(((1,) * (len(out) - len(tail))) + tuple(tail), out)]
    if a.rank >= 2:
        out.append(a.shape[-2])
    if len(bshape) >= 2:
        out.append(bshape[-1])
    ints = a.dtype in (I32, I64)
    return b.node1("MatMul", [a, w], outs=[(a.dtype, tuple(out))], exact=ints,
                   extra_depth=0 if ints else 1)


@op("Gemm")
def gemm(b):
    dt = b.choice([F32, F32, F64])
    m, k, n = b.randint(1, 4), b.randint(1, 5), b.randint(1, 4)
    ta, tb = b.choice([0, 1]), b.choice([0, 1])
    a = b.pick(lambda v: v.dtype == dt and v.shape == ((k, m) if ta else (m, k)),
               lambda: b.fresh(dt, (k, m) if ta else (m, k)), p_fresh=0.5)
    w = b.fresh(dt, (n, k) if tb else (k, n))
    ins = [a, w]
    attrs = {}
    if ta or b.chance(0.3):
        attrs["transA"] = ta
    if tb or b.chance(0.3):
        attrs["transB"] = tb
    if b.chance(0.4):
        attrs["alpha"] = float(b.choice([0.5, 2.0, -1.0]))
    if b.ctx.lo < 11 or b.chance(0.7):
        ins.append(b.fresh(dt, b.choice([(m, n), (n,), (1, n), (m, 1), ()])))
        if b.chance(0.4):
            attrs["beta"] = float(b.choice([0.5, 2.0, 0.0]))
    return b.node1("Gemm", ins, attrs, outs=[(dt, (m, n))], exact=False, extra_depth=1)


@op("Einsum", lo=12)
def einsum(b):
    letters = "abcde"
    form = b.choice(["mm", "bmm", "trace_like", "outer", "sum", "transpose", "dot"])
    d = {c: b.randint(1, 4) for c in letters}
    eqs = {"mm": ("ab,bc->ac", ["ab", "bc"]), "bmm": ("abc,acd->abd", ["abc", "acd"]),
           "trace_like": ("aa->a", ["aa"]), "outer": ("a,b->ab", ["a", "b"]),
           "sum": ("abc->b", ["abc"]), "transpose": ("abc->cab", ["abc"]),
           "dot": ("ab,ab->a", ["ab", "ab"])}
    eq, ops = eqs[form]
    if b.chance(0.3) and "->" in eq and form not in ("trace_like",):
        eq = eq.split("->")[0] if form in ("outer", "transpose") else eq
    ins = [b.fresh(b.choice([F32, F32, F64]) if i == 0 else None or F32,
                   tuple(d[c] for c in o)) for i, o in enumerate(ops)]
    ins = [v if v.dtype == ins[0].dtype else b.fresh(ins[0].dtype, v.shape) for v in ins]
    if "->" in eq:
        out = tuple(d[c] for c in eq.split("->")[1])
    else:
        letters_in = "".join(ops)
        out = tuple(d[c] for c in sorted(set(letters_in)) if letters_in.count(c) == 1)
    return b.node1("Einsum", ins, {"equation": eq}, outs=[(ins[0].dtype, out)], exact=False)


@op("Det", lo=11)
def det(b):
    n = b.randint(1, 4)
    lead = b.choice([(), (2,), (1, 2)])
    x = b.fresh(b.choice([F32, F64]), lead + (n, n), kind="unit")
    return b.node1("Det", [x], outs=[(x.dtype, lead)], exact=False, extra_depth=2)


# -- convolution and pooling -------------------------------------------------------------------

def _spatial(b, nd):
    return tuple(b.randint(1, 6) for _ in range(nd))


def _conv_geometry(b, sizes, allow_dilation=True):
    """kernel, strides, dilations, pads (or auto_pad) giving outputs >= 1."""
    nd = len(sizes)
    kernel = [b.randint(1, min(3, s + 1)) for s in sizes]
    strides = [b.choice([1, 1, 2]) for _ in sizes]
    dil = [b.choice([1, 1, 2]) if allow_dilation else 1 for _ in sizes]
    pads = [b.randint(0, k - 1) if k > 1 else 0 for k in kernel] * 2
    auto = None
    if b.chance(0.2):
        auto = b.choice(["SAME_UPPER", "SAME_LOWER", "VALID"])
        if auto != "VALID":
            dil = [1] * nd  # ONNX Runtime has no dilation with SAME padding
            # nor SAME padding with a stride larger than the kernel (a negative pad)
            strides = [min(s, k) for s, k in zip(strides, kernel)]
    outs = []
    for i, s in enumerate(sizes):
        ek = (kernel[i] - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            o = -(-s // strides[i])
        elif auto == "VALID":
            o = (s - ek) // strides[i] + 1
        else:
            o = (s + pads[i] + pads[i + nd] - ek) // strides[i] + 1
        if o < 1:
            return None
        outs.append(o)
    return kernel, strides, dil, pads, auto, outs


def _geom_attrs(b, kernel, strides, dil, pads, auto, with_kernel=True):
    attrs = {}
    if with_kernel or b.chance(0.5):
        attrs["kernel_shape"] = kernel
    if any(s != 1 for s in strides) or b.chance(0.3):
        attrs["strides"] = strides
    if dil is not None and (any(d != 1 for d in dil) or b.chance(0.2)):
        attrs["dilations"] = dil
    if auto:
        attrs["auto_pad"] = auto
    elif any(pads) or b.chance(0.3):
        attrs["pads"] = pads
    return attrs


@op("Conv")
def conv(b):
    nd = b.choice([1, 2, 2, 3]) if b.chance(0.9) else 2
    n, g = b.randint(1, 2), b.choice([1, 1, 2])
    c = g * b.randint(1, 2)
    m = g * b.randint(1, 2)
    sizes = _spatial(b, nd)
    geo = _conv_geometry(b, sizes)
    if geo is None:
        raise Skip()
    kernel, strides, dil, pads, auto, outs = geo
    dt = b.choice([F32, F32, F64])
    x = b.pick(lambda v: v.dtype == dt and v.shape == (n, c) + sizes,
               lambda: b.fresh(dt, (n, c) + sizes), p_fresh=0.7)
    w = b.fresh(dt, (m, c // g) + tuple(kernel))
    ins = [x, w]
    if b.chance(0.5):
        ins.append(b.fresh(dt, (m,)))
    attrs = _geom_attrs(b, kernel, strides, dil, pads, auto, with_kernel=b.chance(0.6))
    if g > 1 or b.chance(0.2):
        attrs["group"] = g
    return b.node1("Conv", ins, attrs, outs=[(dt, (n, m) + tuple(outs))], exact=False,
                   extra_depth=1)


@op("ConvTranspose")
def conv_transpose(b):
    nd = b.choice([1, 2, 2])
    n, g = b.randint(1, 2), b.choice([1, 1, 2])
    c, m = g * b.randint(1, 2), g * b.randint(1, 2)
    sizes = _spatial(b, nd)
    kernel = [b.randint(1, 3) for _ in sizes]
    strides = [b.choice([1, 2]) for _ in sizes]
    dil = [b.choice([1, 1, 2]) for _ in sizes]
    pads = [b.randint(0, k - 1) if k > 1 else 0 for k in kernel] * 2
    opad = [b.randint(0, s - 1) if s > 1 and b.chance(0.3) else 0 for s in strides]
    outs = []
    for i, s in enumerate(sizes):
        o = strides[i] * (s - 1) + opad[i] + ((kernel[i] - 1) * dil[i] + 1) - pads[i] - pads[i + nd]
        if o < 1:
            raise Skip()
        outs.append(o)
    dt = b.choice([F32, F32])
    x = b.fresh(dt, (n, c) + sizes)
    w = b.fresh(dt, (c, m // g) + tuple(kernel))
    ins = [x, w] + ([b.fresh(dt, (m,))] if b.chance(0.5) else [])
    attrs = {"kernel_shape": kernel} if b.chance(0.6) else {}
    if any(s != 1 for s in strides) or b.chance(0.3):
        attrs["strides"] = strides
    if any(d != 1 for d in dil):
        attrs["dilations"] = dil
    if any(pads):
        attrs["pads"] = pads
    if any(opad):
        attrs["output_padding"] = opad
    if g > 1:
        attrs["group"] = g
    return b.node1("ConvTranspose", ins, attrs, outs=[(dt, (n, m) + tuple(outs))], exact=False,
                   extra_depth=1)


def _pool(b, name):
    nd = b.choice([1, 2, 2, 3])
    sizes = _spatial(b, nd)
    dil_ok = name == "MaxPool" and b.ctx.lo >= 10
    geo = _conv_geometry(b, sizes, allow_dilation=dil_ok)
    if geo is None:
        raise Skip()
    kernel, strides, dil, pads, auto, outs = geo
    if any(p >= k for p, k in zip(pads, kernel * 2)):
        raise Skip()
    dt = b.choice([F32, F32, F64]) if name == "MaxPool" and b.ctx.lo >= 12 else F32
    n, c = b.randint(1, 2), b.randint(1, 3)
    x = b.pick(lambda v: v.dtype == dt and v.shape == (n, c) + sizes,
               lambda: b.fresh(dt, (n, c) + sizes), p_fresh=0.7)
    attrs = _geom_attrs(b, kernel, strides, dil if dil_ok else None, pads, auto)
    if b.ctx.lo >= 10 and not auto and b.chance(0.3):
        attrs["ceil_mode"] = 1
        outs = []
        for i, s in enumerate(sizes):
            ek = (kernel[i] - 1) * dil[i] + 1
            o = -(-(s + pads[i] + pads[i + nd] - ek) // strides[i]) + 1
            # The last window must start inside the input or its left padding.
            if (o - 1) * strides[i] >= s + pads[i]:
                o -= 1
            outs.append(o)
    if not _windows_hit_input(sizes, kernel, strides, dil, pads, auto, outs):
        # A window of padding only: ONNX leaves its value (and MaxPool's index) open.
        raise Skip()
    shape = (n, c) + tuple(outs)
    if name == "MaxPool":
        out_specs = [(dt, shape)]
        if b.ctx.lo >= 8 and b.chance(0.3):
            out_specs.append((I64, shape))
            if b.chance(0.5):
                attrs["storage_order"] = b.choice([0, 1])
        return b.node("MaxPool", [x], attrs, outs=out_specs, exact=True)
    if b.chance(0.5):
        attrs["count_include_pad"] = b.choice([0, 1])
    return b.node1("AveragePool", [x], attrs, outs=[(dt, shape)], exact=False)


def _windows_hit_input(sizes, kernel, strides, dil, pads, auto, outs):
    nd = len(sizes)
    for i, s in enumerate(sizes):
        ek = (kernel[i] - 1) * dil[i] + 1
        if auto in ("SAME_UPPER", "SAME_LOWER"):
            total = max((outs[i] - 1) * strides[i] + ek - s, 0)
            begin = total // 2 if auto == "SAME_UPPER" else total - total // 2
        elif auto == "VALID":
            begin = 0
        else:
            begin = pads[i]
        for o in range(outs[i]):
            start = o * strides[i] - begin
            if not any(0 <= start + k * dil[i] < s for k in range(kernel[i])):
                return False
    return True


@op("MaxPool")
def max_pool(b):
    return _pool(b, "MaxPool")


@op("AveragePool")
def average_pool(b):
    return _pool(b, "AveragePool")


@op("GlobalMaxPool")
def global_max_pool(b):
    x = pick_x(b, (F32, F64), min_rank=3, max_rank=5, need_known=True)
    if 0 in x.shape[1:]:  # ONNX Runtime: only N may be 0
        raise Skip()
    return b.node1("GlobalMaxPool", [x], outs=[(x.dtype, x.shape[:2] + (1,) * (x.rank - 2))])


@op("GlobalAveragePool")
def global_average_pool(b):
    x = pick_x(b, (F32, F64), min_rank=3, max_rank=5, need_known=True)
    if 0 in x.shape[1:]:
        raise Skip()
    return b.node1("GlobalAveragePool", [x], outs=[(x.dtype, x.shape[:2] + (1,) * (x.rank - 2))],
                   exact=False)


# -- normalization -----------------------------------------------------------------------------

@op("BatchNormalization")
def batch_norm(b):
    x = pick_x(b, (F32, F32, F64) if b.ctx.lo >= 9 else (F32,), min_rank=2, max_rank=4,
               need_known=True)
    c = x.shape[1]
    params = [b.fresh(x.dtype, (c,)), b.fresh(x.dtype, (c,)), b.fresh(x.dtype, (c,)),
              b.fresh(x.dtype, (c,), kind="pos")]
    attrs = {"epsilon": float(b.choice([1e-5, 1e-3, 0.1]))} if b.chance(0.5) else {}
    return b.node1("BatchNormalization", [x] + params, attrs, exact=False)


@op("InstanceNormalization")
def instance_norm(b):
    x = pick_x(b, (F32,), min_rank=3, max_rank=4, need_known=True)
    c = x.shape[1]
    if 0 in x.shape or numel(x.shape[2:]) < 2:
        raise Skip()  # one element per channel: 0 / sqrt(eps), which ORT computes inexactly
    ins = [x, b.fresh(F32, (c,)), b.fresh(F32, (c,))]
    attrs = {"epsilon": float(b.choice([1e-5, 1e-2]))} if b.chance(0.5) else {}
    return b.node1("InstanceNormalization", ins, attrs, exact=False, extra_depth=1)


@op("LRN")
def lrn(b):
    # ONNX Runtime takes only 4-D inputs and odd sizes (the spec allows more).
    x = pick_x(b, (F32,), min_rank=4, max_rank=4, need_known=True)
    attrs = {"size": b.choice([1, 3, 5])}
    if b.chance(0.5):
        attrs["alpha"] = float(b.choice([1e-4, 0.01, 0.5]))
    if b.chance(0.5):
        attrs["beta"] = float(b.choice([0.75, 0.5, 1.0]))
    if b.chance(0.5):
        attrs["bias"] = float(b.choice([1.0, 2.0]))
    return b.node1("LRN", [x], attrs, exact=False, extra_depth=1)


@op("LayerNormalization", lo=17)
def layer_norm(b):
    x = pick_x(b, (F32,), min_rank=1, need_known=True)
    axis = b.randint(-x.rank, x.rank - 1)
    a = axis % x.rank
    norm = x.shape[a:]
    ins = [x, b.fresh(F32, norm)]
    if b.chance(0.5):
        ins.append(b.fresh(F32, norm))
    attrs = {"axis": axis} if b.chance(0.8) or axis != -1 else {}
    if b.chance(0.3):
        attrs["epsilon"] = float(b.choice([1e-5, 1e-3]))
    outs = [(F32, x.shape)]
    return b.node1("LayerNormalization", ins, attrs, outs=outs, exact=False, extra_depth=1)


@op("MeanVarianceNormalization", lo=9)
def mvn(b):
    # ONNX Runtime's kernel takes 4-D inputs normalized over [0, 2, 3] or [0, 1, 2, 3] only,
    # and leaves the spec's epsilon out (NaN for a constant slice): other axes and slices of
    # one element are spec tests (docs/differential.md), not fuzzed.
    x = pick_x(b, (F32,), min_rank=4, max_rank=4, need_known=True)
    attrs = {}
    axes = [0, 2, 3]
    if b.chance(0.5):
        axes = b.choice([[0, 2, 3], [0, 1, 2, 3]])
        attrs["axes"] = axes
    if np.prod([x.shape[a] for a in axes]) < 2:
        raise Skip()
    return b.node1("MeanVarianceNormalization", [x], attrs, exact=False, extra_depth=1)


# -- resizing ----------------------------------------------------------------------------------

@op("Resize", lo=11)
def resize(b):
    x = pick_x(b, (F32, F32), min_rank=1, max_rank=4, need_known=True)
    mode = b.choice(["nearest", "linear", "cubic"])
    if mode != "nearest" and x.rank not in (2, 4):
        mode = "nearest"  # ONNX Runtime: linear and cubic on 2-D and 4-D inputs
    # linear and cubic act on the last two axes (ORT's CPU kernel): scale 1 elsewhere.
    free = list(range(x.rank)) if mode == "nearest" else list(range(max(x.rank - 2, 0),
                                                                       x.rank))
    free = [i for i in free if x.shape[i] > 0]  # a 0 dim cannot grow
    attrs = {"mode": mode}
    ctm = b.choice(["half_pixel", "asymmetric", "align_corners", "pytorch_half_pixel"])
    attrs["coordinate_transformation_mode"] = ctm
    if mode == "nearest" and b.chance(0.7):
        attrs["nearest_mode"] = b.choice(["round_prefer_floor", "round_prefer_ceil", "floor",
                                          "ceil"])
    if mode == "cubic" and b.chance(0.5):
        attrs["cubic_coeff_a"] = float(b.choice([-0.75, -0.5]))
        if b.chance(0.5):
            attrs["exclude_outside"] = 1
    roi = b.constant(np.zeros(0, np.float32)) if b.ctx.lo < 13 or b.chance(0.3) else None
    if b.chance(0.5):
        sizes = [b.randint(1, 7) if i in free else d for i, d in enumerate(x.shape)]
        ins = [x, roi, None, b.constant(np.array(sizes, np.int64))]
        if b.ctx.lo < 13:
            ins[2] = b.constant(np.zeros(0, np.float32))
        out = tuple(sizes)
    else:
        scales = [float(b.choice([0.5, 1.0, 2.0, 1.5, 3.0, 0.75])) if i in free else 1.0
                  for i in range(x.rank)]
        if ctm in ("align_corners", "pytorch_half_pixel"):
            # The spec's text takes the rounded output length here, ONNX's reference
            # implementation (and dynvm) scale x input: they differ unless that is an integer
            # (docs/differential.md; a spec test).
            scales = [s if float(d * s).is_integer() else 1.0 for d, s in zip(x.shape, scales)]
        out = tuple(int(np.floor(d * s)) for d, s in zip(x.shape, scales))
        if 0 in out and 0 not in x.shape:
            raise Skip()
        ins = [x, roi, b.constant(np.array(scales, np.float32))]
    if ins[1] is None and b.ctx.lo < 13:
        ins[1] = b.constant(np.zeros(0, np.float32))
    return b.node1("Resize", ins, attrs, outs=[(F32, out)], exact=mode == "nearest",
                   extra_depth=0 if mode == "nearest" else 1)


@op("Upsample", lo=7, hi=9)
def upsample(b):
    x = pick_x(b, (F32,), min_rank=2, max_rank=4, need_known=True)
    scales = [1.0] * (x.rank - 2) + [float(b.choice([1, 2, 3])), float(b.choice([1, 2]))]
    mode = b.choice(["nearest", "linear"]) if x.rank == 4 else "nearest"
    out = tuple(int(np.floor(d * s)) for d, s in zip(x.shape, scales))
    return b.node1("Upsample", [x], {"mode": mode},
                   forms={"scales": (1, 9, np.array(scales, np.float32))},
                   outs=[(F32, out)], exact=mode == "nearest")


# -- recurrent cells ---------------------------------------------------------------------------

def _rnn(b, name, gates):
    seq, batch, inp, hid = b.randint(1, 4), b.randint(1, 3), b.randint(1, 4), b.randint(1, 4)
    dirs = b.choice(["forward", "reverse", "bidirectional"])
    nd = 2 if dirs == "bidirectional" else 1
    layout = 0  # ONNX Runtime refuses layout 1 ("batchwise recurrent operations")
    xs = (batch, seq, inp) if layout else (seq, batch, inp)
    x = b.fresh(F32, xs, kind="unit")
    w = b.fresh(F32, (nd, gates * hid, inp), kind="unit")
    r = b.fresh(F32, (nd, gates * hid, hid), kind="unit")
    ins = [x, w, r]
    if b.chance(0.6):
        ins.append(b.fresh(F32, (nd, 2 * gates * hid), kind="unit"))
    else:
        ins.append(None)
    if b.chance(0.3):
        ins.append(b.fresh(I32, (batch,), kind="index", lo=1, hi=seq + 1))
    else:
        ins.append(None)
    hs = (batch, nd, hid) if layout else (nd, batch, hid)
    if b.chance(0.5):
        ins.append(b.fresh(F32, hs, kind="unit"))
    else:
        ins.append(None)
    if name == "LSTM" and b.chance(0.4):
        ins.append(b.fresh(F32, hs, kind="unit"))
    while ins and ins[-1] is None:
        ins.pop()
    attrs = {"hidden_size": hid}
    if dirs != "forward" or b.chance(0.3):
        attrs["direction"] = dirs
    if layout:
        attrs["layout"] = 1
    if name == "GRU" and b.chance(0.5):
        attrs["linear_before_reset"] = b.choice([0, 1])
    if b.chance(0.2):
        attrs["clip"] = float(b.choice([0.5, 2.0]))
    ys = (batch, seq, nd, hid) if layout else (seq, nd, batch, hid)
    outs = [(F32, ys), (F32, hs)]
    if name == "LSTM":
        outs.append((F32, hs))
    outs = [o if b.chance(0.7) else None for o in outs]
    if all(o is None for o in outs):
        outs[0] = (F32, ys)
    while outs[-1] is None:
        outs.pop()
    return b.node(name, ins, attrs, outs=outs, exact=False, extra_depth=seq)


@op("LSTM")
def lstm(b):
    return _rnn(b, "LSTM", 4)


@op("GRU")
def gru(b):
    return _rnn(b, "GRU", 3)


@op("RNN")
def rnn(b):
    return _rnn(b, "RNN", 1)


# -- losses ------------------------------------------------------------------------------------

def _loss(b, name):
    n, c = b.randint(1, 4), b.randint(2, 4)
    extra = tuple(b.randint(1, 3) for _ in range(b.randint(0, 2)))
    x = b.fresh(F32, (n, c) + extra, kind="unit")
    if name == "NegativeLogLikelihoodLoss":
        x = b.fresh(F32, (n, c) + extra)
    tgt_arr = b.rng.integers(0, c, size=(n,) + extra).astype(np.int64)
    attrs = {}
    if b.chance(0.3):
        ign = int(b.randint(0, c - 1))
        attrs["ignore_index"] = ign
        if (tgt_arr != ign).sum() == 0:
            tgt_arr[...] = (ign + 1) % c
    t = b.constant(tgt_arr) if b.chance(0.5) else None
    if t is None:
        t = b.fresh(I64, tgt_arr.shape, const=False)
        b.ctx.root.input_data[t.name] = tgt_arr
    ins = [x, t]
    if b.chance(0.4):
        ins.append(b.fresh(F32, (c,), kind="pos"))
    red = b.choice(["mean", "sum", "none"])
    if red != "mean" or b.chance(0.3):
        attrs["reduction"] = red
    out = (n,) + extra if red == "none" else ()
    outs = [(F32, out)]
    if name == "SoftmaxCrossEntropyLoss" and b.chance(0.4):
        outs.append((F32, x.shape))
    return b.node(name, ins, attrs, outs=outs, exact=False, extra_depth=2)


@op("NegativeLogLikelihoodLoss", lo=13)
def nll_loss(b):
    return _loss(b, "NegativeLogLikelihoodLoss")


@op("SoftmaxCrossEntropyLoss", lo=13)
def sce_loss(b):
    return _loss(b, "SoftmaxCrossEntropyLoss")


# -- vision ------------------------------------------------------------------------------------

@op("GridSample", lo=16)
def grid_sample(b):
    n, c, h, w = b.randint(1, 2), b.randint(1, 2), b.randint(1, 5), b.randint(1, 5)
    x = b.fresh(F32, (n, c, h, w))
    oh, ow = b.randint(1, 4), b.randint(1, 4)
    grid = b.fresh(F32, (n, oh, ow, 2), kind="unit")
    attrs = {}
    mode = b.choice(["bilinear", "nearest", "bicubic"])
    if mode != "bilinear" or b.chance(0.3):
        attrs["mode"] = mode
    if b.chance(0.6):
        attrs["padding_mode"] = b.choice(["zeros", "border", "reflection"])
    if b.chance(0.5):
        attrs["align_corners"] = b.choice([0, 1])
    return b.node1("GridSample", [x, grid], attrs, outs=[(F32, (n, c, oh, ow))], exact=False,
                   extra_depth=1)


@op("RoiAlign", lo=16)
def roi_align(b):
    n, c, h, w = b.randint(1, 2), b.randint(1, 2), b.randint(2, 6), b.randint(2, 6)
    x = b.fresh(F32, (n, c, h, w))
    r = b.randint(1, 3)
    x1 = b.rng.uniform(0, w - 1, r)
    y1 = b.rng.uniform(0, h - 1, r)
    rois = np.stack([x1, y1, x1 + b.rng.uniform(0.5, 3, r), y1 + b.rng.uniform(0.5, 3, r)],
                    -1).astype(np.float32)
    idx = b.rng.integers(0, n, r).astype(np.int64)
    attrs = {"output_height": b.randint(1, 3), "output_width": b.randint(1, 3)}
    if b.chance(0.5):
        attrs["mode"] = b.choice(["avg", "max"])
    if b.chance(0.5):
        attrs["sampling_ratio"] = b.randint(1, 2)
    if b.chance(0.5):
        attrs["spatial_scale"] = float(b.choice([1.0, 0.5]))
    if b.chance(0.5):
        attrs["coordinate_transformation_mode"] = b.choice(["half_pixel", "output_half_pixel"])
    return b.node1("RoiAlign", [x, b.constant(rois), b.constant(idx)], attrs,
                   outs=[(F32, (r, c, attrs["output_height"], attrs["output_width"]))],
                   exact=False, extra_depth=2)


@op("MaxUnpool", lo=11)
def max_unpool(b):
    n, c = b.randint(1, 2), b.randint(1, 2)
    sizes = _spatial(b, 2)
    k = [b.randint(1, 2) for _ in sizes]
    strides = [b.randint(1, 2) for _ in sizes]
    outs = [(s - kk) // st + 1 for s, kk, st in zip(sizes, k, strides)]
    if min(outs) < 1:
        raise Skip()
    x = b.fresh(F32, (n, c) + sizes)
    pooled, ind = b.node("MaxPool", [x], {"kernel_shape": k, "strides": strides},
                         outs=[(F32, (n, c) + tuple(outs)), (I64, (n, c) + tuple(outs))])
    unpooled = tuple((o - 1) * st + kk for o, st, kk in zip(outs, strides, k))
    ins = [pooled, ind]
    # The indices address the pooled input: unpool into its shape unless the inferred one
    # already is it.
    if unpooled != sizes or b.chance(0.4):
        ins.append(b.constant(np.array((n, c) + sizes, np.int64)))
    shape = (n, c) + sizes
    attrs = {"kernel_shape": k, "strides": strides}
    return b.node1("MaxUnpool", ins, attrs, outs=[(F32, shape)])


@op("NonMaxSuppression", lo=10)
def nms(b):
    nb, nc, n = b.randint(1, 2), b.randint(1, 3), b.randint(0, 8)
    xy = b.rng.integers(0, 8, size=(nb, n, 2)).astype(np.float32)
    wh = b.rng.integers(1, 5, size=(nb, n, 2)).astype(np.float32)
    center = b.choice([0, 1])
    if center:
        boxes = np.concatenate([xy, wh], -1)
    else:
        boxes = np.concatenate([xy, xy + wh], -1)
        if b.chance(0.3):  # corners in either order
            boxes = boxes[..., [2, 3, 0, 1]]
    scores = (b.rng.permutation(max(nb * nc * n, 1))[:nb * nc * n] / max(nb * nc * n, 1) +
              0.01).reshape(nb, nc, n).astype(np.float32)
    bv = b.constant(boxes) if b.chance(0.5) else _input(b, boxes)
    sv = b.constant(scores) if b.chance(0.5) else _input(b, scores)
    ins = [bv, sv]
    if b.chance(0.8):
        ins.append(b.constant(np.array([b.choice([0, 1, 2, 5, 100, 2 ** 62])], np.int64)))
        if b.chance(0.8):
            ins.append(b.constant(np.array([b.choice([0.0, 0.3, 0.5, 0.7])], np.float32)))
            if b.chance(0.5):
                ins.append(b.constant(np.array([b.choice([0.0, 0.2, 0.5])], np.float32)))
    attrs = {"center_point_box": center} if center or b.chance(0.3) else {}
    return b.node1("NonMaxSuppression", ins, attrs, outs=[(I64, (new_token(b), 3))])


def _input(b, arr):
    v = b.fresh(arr.dtype, arr.shape, const=False)
    b.ctx.root.input_data[v.name] = arr
    return v
