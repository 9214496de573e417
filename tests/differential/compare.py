"""How outputs are compared: the oracle's rules.

Integers and bools must be equal, except values quantized from a float computation
(`quant` = 1: QLinearMatMul, QLinearConv, DynamicQuantizeLinear), which may differ by one
quantization step at a rounding tie. Floats of a value at depth d (the number of inexactly
rounded operations on its longest path from the inputs, graph.py) must satisfy

    |got - want| <= rtol(d) * (|want| + scale),   rtol(d) = unit(dtype) * (d + 1)

where unit is 2^-16 for float32 (about 128 ulps), 2^-44 for float64 and 2^-7 for float16 --
the coarsest of the dtypes the inexact operations on the value's path ran in (a float64 value
computed from float32 arithmetic is compared at float32's unit) --
and scale is the largest finite |want| of that output, at least 1: a norm-wise bound, since
summation order alone moves a small element of a sum by an error proportional to the large
ones. NaN equals NaN, infinities must match in sign, -0 equals +0. Exact values (depth 0,
only correctly rounded operations) get the same bound at d = 0, so a last-bit difference in
libm functions is not a mismatch but a wrong element, index or shape is.
Outputs of random operators are compared by dtype and shape only against ONNX Runtime (its
generator is not dynvm's), fully between dynvm's configurations.
"""
import numpy as np

UNIT = {np.dtype(np.float32): 2.0 ** -16, np.dtype(np.float64): 2.0 ** -44,
        np.dtype(np.float16): 2.0 ** -7}


def rtol(dtype, info):
    unit = info.unit or UNIT.get(np.dtype(dtype), 2.0 ** -16)
    return unit * (info.depth + 1)


class OutInfo:
    """What the comparison knows of one output: its depth, the coarsest precision it was
    computed at (unit; 0: its own dtype's), its integer tolerance (quant), whether it is
    random."""

    def __init__(self, depth=0, quant=0, random=False, unit=0.0, shape=None):
        self.depth = depth
        self.quant = quant
        self.random = random
        self.unit = unit
        self.shape = shape  # the shape the generator's own model of the spec gives, if known

    @staticmethod
    def of(v):
        known = v.shape is not None and all(isinstance(d, int) for d in v.shape) and \
            not v.is_seq
        return OutInfo(v.depth, v.quant, v.random, v.unit, tuple(v.shape) if known else None)

    def to_json(self):
        return {"depth": self.depth, "quant": self.quant, "random": self.random,
                "unit": self.unit}

    @staticmethod
    def from_json(d):
        return OutInfo(d.get("depth", 0), d.get("quant", 0), d.get("random", False),
                       d.get("unit", 0.0))


def diff(got, want, info, shape_only=False):
    """None when got matches want, else a one-line description of the first difference."""
    got, want = np.asarray(got), np.asarray(want)
    if got.dtype != want.dtype:
        return f"dtype {got.dtype} != {want.dtype}"
    if got.shape != want.shape:
        return f"shape {list(got.shape)} != {list(want.shape)}"
    if shape_only or got.size == 0:
        return None
    if want.dtype.kind in "biu":
        d = np.abs(got.astype(np.int64) - want.astype(np.int64)) if want.dtype.kind != "u" \
            else np.abs(got.astype(np.float64) - want.astype(np.float64))
        bad = d > info.quant
        if bad.any():
            i = np.unravel_index(np.argmax(bad), bad.shape)
            return (f"{int(bad.sum())} of {got.size} elements differ, first at {list(i)}: "
                    f"{got[i]} != {want[i]}")
        return None
    g = got.astype(np.float64)
    w = want.astype(np.float64)
    gn, wn = np.isnan(g), np.isnan(w)
    bad = gn != wn
    gi, wi = np.isinf(g), np.isinf(w)
    bad |= (gi | wi) & ~(gn | wn) & (g != w)
    fin = np.isfinite(g) & np.isfinite(w)
    finite_w = np.abs(w[np.isfinite(w)])
    scale = max(1.0, float(finite_w.max()) if finite_w.size else 1.0)
    tol = rtol(want.dtype, info)
    with np.errstate(all="ignore"):
        err = np.where(fin, np.abs(g - w), 0.0)
        bad |= fin & (err > tol * (np.abs(w) + scale))
    if bad.any():
        i = np.unravel_index(np.argmax(bad), bad.shape)
        return (f"{int(bad.sum())} of {got.size} elements differ, first at {list(i)}: "
                f"{got[i]!r} != {want[i]!r} (rtol {tol:.3g}, scale {scale:.3g})")
    return None


def diff_outputs(got, want, infos, shape_only_random=False):
    """Compares two {name: array} dicts; returns None or the first difference."""
    if set(got) != set(want):
        return f"outputs {sorted(got)} != {sorted(want)}"
    for name in sorted(want):
        info = infos.get(name, OutInfo())
        d = diff(got[name], want[name], info, shape_only=shape_only_random and info.random)
        if d:
            return f"output '{name}': {d}"
    return None
