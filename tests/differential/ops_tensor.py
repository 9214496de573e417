"""Op generators: shapes and data movement (Reshape ... Pad), indexing (Gather*, Scatter*,
OneHot, Compress), and the operators whose output size depends on data (NonZero, Unique).

Data movement is exact for every dtype, so these ops take any dtype and any value. Index
operands are drawn inside their valid range (negative indices included), and scatters get
distinct destinations where ONNX leaves duplicates undefined. Targets of Reshape, Expand,
ConstantOfShape and Tile are sometimes computed from Shape(x) (Shape -> Gather -> Concat),
the way exported models compute them.
"""
import numpy as np

from builder import Skip, op
from graph import BOOL, F32, F64, I32, I64, U8, I8, is_float, known, numel
from ops_elementwise import pick_x

ANY = (F32, F32, F32, I64, I64, I32, BOOL, F64, U8, I8)
INT64_MAX = np.iinfo(np.int64).max


def new_token(b):
    return "?" + str(b.ctx.name(""))


def int_list(b, values):
    """A 1-D int64 value holding `values`: a constant, or computed from shapes."""
    return b.constant(np.array(values, np.int64))


def shape_of(b, x, start=None, end=None):
    attrs = {}
    dims = list(x.shape)
    if start is not None and b.ctx.lo >= 15:
        attrs["start"] = start
        dims = dims[start:end] if end is not None else dims[start:]
        if end is not None:
            attrs["end"] = end
    return b.node1("Shape", [x], attrs, outs=[(I64, (len(dims),))]), dims


def computed_list(b, x, target):
    """A 1-D int64 value equal to `target`, computed from Shape(x) where target's entries
    are x's dims (so the compiler sees shape arithmetic), else a constant."""
    if not b.chance(0.5) or x.rank == 0:
        return int_list(b, target)
    shp, dims = shape_of(b, x)
    parts = []
    for t in target:
        if t in dims and isinstance(t, int) and b.chance(0.8):
            i = dims.index(t)
            g = b.node1("Gather", [shp, b.constant(np.array([i], np.int64))], {"axis": 0},
                        outs=[(I64, (1,))])
            parts.append(g)
        else:
            parts.append(b.constant(np.array([t], np.int64)))
    if len(parts) == 1:
        return parts[0]
    return b.node1("Concat", parts, {"axis": 0}, outs=[(I64, (len(parts),))])


@op("Reshape", lo=7)
def reshape(b):
    x = pick_x(b, ANY)
    if not known(x.shape):
        target = [-1] if b.chance(0.5) else [1, -1]
        if b.chance(0.5) and x.rank >= 1:  # computed: Shape(x) itself, reversed dims
            s, _ = shape_of(b, x)
            out = b.node1("Reshape", [x, s], outs=[(x.dtype, x.shape)])
            return out
        out_shape = (new_token(b),) if target == [-1] else (1, new_token(b))
        return b.node1("Reshape", [x, int_list(b, target)], outs=[(x.dtype, out_shape)])
    n = numel(x.shape)
    dims = _factor(b, n)
    target = list(dims)
    if n > 0 and target and b.chance(0.4):
        target[b.randint(0, len(target) - 1)] = -1
    attrs = {}
    allow = b.ctx.lo >= 14 and b.chance(0.3)
    if allow:
        attrs["allowzero"] = 1
    elif x.rank and b.chance(0.3):  # 0 copies the input's dim at that position
        for i in range(min(len(target), x.rank)):
            if dims[i] == x.shape[i] and b.chance(0.5) and target[i] != -1:
                target[i] = 0
        if n == 0 and -1 in target:
            raise Skip()
    if n == 0 and -1 in target:
        target = list(dims)
    for i, t in enumerate(target):
        # Without allowzero a 0 copies the input's dim: it must be the dim wanted there.
        if t == 0 and not allow and (i >= x.rank or x.shape[i] != dims[i]):
            raise Skip()
    t = computed_list(b, x, target) if 0 not in target and -1 not in target \
        else int_list(b, target)
    return b.node1("Reshape", [x, t], attrs, outs=[(x.dtype, tuple(dims))])


def _factor(b, n):
    """A random shape with n elements (rank 0-4)."""
    if n == 0:
        return tuple(b.choice([(0,), (0, 3), (2, 0), (1, 0, 2)]))
    if n == 1 and b.chance(0.3):
        return ()
    dims = []
    m = n
    for _ in range(b.randint(0, 3)):
        divs = [d for d in range(1, m + 1) if m % d == 0]
        d = b.choice(divs)
        dims.append(d)
        m //= d
    dims.append(m)
    b.rng.shuffle(dims)
    return tuple(int(d) for d in dims)


@op("Flatten")
def flatten(b):
    x = pick_x(b, ANY, need_known=True)
    lo = -x.rank if b.ctx.lo >= 11 else 0
    axis = b.randint(lo, x.rank)
    a = axis + x.rank if axis < 0 else axis
    out = (numel(x.shape[:a]), numel(x.shape[a:]))
    attrs = {"axis": axis} if b.chance(0.8) or axis != 1 else {}
    if "axis" not in attrs:
        out = (numel(x.shape[:1]), numel(x.shape[1:]))
    return b.node1("Flatten", [x], attrs, outs=[(x.dtype, out)])


@op("Squeeze")
def squeeze(b):
    x = b.pick(lambda v: 1 in v.shape and v.dtype in ANY)
    if x is None:
        x = b.fresh(b.choice(ANY), tuple(b.choice([1, 2, 1, 3]) for _ in range(b.randint(1, 4))))
        if 1 not in x.shape:
            raise Skip()
    ones = [i for i, d in enumerate(x.shape) if d == 1]
    forms = {}
    if b.chance(0.2) and known(x.shape):
        out = tuple(d for d in x.shape if d != 1)
    else:
        axes = sorted(set(b.choice(ones) for _ in range(b.randint(1, len(ones)))))
        out = tuple(d for i, d in enumerate(x.shape) if i not in axes)
        if b.ctx.lo >= 11 and b.chance(0.5):
            axes = [a - x.rank if b.chance(0.5) else a for a in axes]
        forms["axes"] = (1, 13, np.array(axes, np.int64))
    return b.node1("Squeeze", [x], forms=forms, outs=[(x.dtype, out)])


@op("Unsqueeze")
def unsqueeze(b):
    x = pick_x(b, ANY, max_rank=4)
    k = b.randint(1, 2)
    r = x.rank + k
    axes = sorted(b.rng.choice(r, size=k, replace=False).tolist())
    out, it = [], iter(x.shape)
    for i in range(r):
        out.append(1 if i in axes else next(it))
    if b.ctx.lo >= 11 and b.chance(0.5):
        axes = [a - r if b.chance(0.5) else a for a in axes]
    if b.chance(0.3):
        b.rng.shuffle(axes)
    return b.node1("Unsqueeze", [x], forms={"axes": (1, 13, np.array(axes, np.int64))},
                   outs=[(x.dtype, tuple(out))])


@op("Transpose")
def transpose(b):
    x = pick_x(b, ANY, min_rank=1)
    attrs = {}
    if b.chance(0.8):
        perm = b.rng.permutation(x.rank).tolist()
        attrs["perm"] = perm
    else:
        perm = list(range(x.rank))[::-1]
    return b.node1("Transpose", [x], attrs, outs=[(x.dtype, tuple(x.shape[p] for p in perm))])


@op("Concat")
def concat(b):
    x = pick_x(b, ANY, min_rank=1)
    axis = b.randint(0, x.rank - 1)
    vals = [x]
    total = x.shape[axis]
    for _ in range(b.randint(0, 3)):
        def ok(v):
            return v.dtype == x.dtype and v.rank == x.rank and all(
                v.shape[i] == x.shape[i] for i in range(x.rank) if i != axis)
        shp = list(x.shape)
        shp[axis] = b.choice([0, 1, 2, 3])
        if not known(shp):
            continue
        y = b.pick(ok, lambda: b.fresh(x.dtype, tuple(shp)), p_fresh=0.6)
        vals.append(y)
        if isinstance(total, int) and isinstance(y.shape[axis], int):
            total += y.shape[axis]
        else:
            total = new_token(b)
    b.rng.shuffle(vals)
    out = list(x.shape)
    out[axis] = total
    ax = axis - x.rank if b.ctx.lo >= 11 and b.chance(0.4) else axis
    return b.node1("Concat", vals, {"axis": ax}, outs=[(x.dtype, tuple(out))])


@op("Split", lo=7)
def split(b):
    x = pick_x(b, ANY, min_rank=1, need_known=True)
    axis = b.randint(0, x.rank - 1)
    d = x.shape[axis]
    forms = {}
    if b.chance(0.5) and d > 0:
        n = b.choice([k for k in range(1, min(d, 4) + 1) if d % k == 0])
        sizes = [d // n] * n
    else:
        n = b.randint(1, 3)
        cuts = sorted(b.rng.integers(0, d + 1, size=n - 1).tolist())
        sizes = [e - s for s, e in zip([0] + cuts, cuts + [d])]
        forms["split"] = (1, 13, np.array(sizes, np.int64))
    attrs = {"axis": axis - x.rank if b.ctx.lo >= 11 and b.chance(0.4) else axis}
    outs = []
    for s in sizes:
        shp = list(x.shape)
        shp[axis] = s
        outs.append((x.dtype, tuple(shp)))
    vals = b.node("Split", [x], attrs, outs=outs, forms=forms)
    return vals


def slice_len(d, start, end, step):
    """Elements of Slice over a dim of d, by the spec's clamping (which differs from
    Python's: stepping backwards, a start before the first element takes it)."""
    if start < 0:
        start += d
    if end < 0:
        end += d
    if step > 0:
        start, end = min(max(start, 0), d), min(max(end, 0), d)
        return max(0, (end - start + step - 1) // step)
    if d == 0:
        return 0
    start, end = min(max(start, 0), d - 1), min(max(end, -1), d - 1)
    return max(0, (start - end + (-step) - 1) // (-step))


@op("Slice")
def slice_(b):
    x = pick_x(b, ANY, min_rank=1)
    k = b.randint(1, x.rank)
    axes = sorted(b.rng.choice(x.rank, size=k, replace=False).tolist())
    steps_ok = b.ctx.lo >= 10
    starts, ends, steps, out = [], [], [], list(x.shape)
    for a in axes:
        d = x.shape[a]
        step = b.choice([1, 1, 1, 2, -1, -2, 3]) if steps_ok else 1
        if isinstance(d, int):
            s = b.randint(-d - 2, d + 2)
            e = b.choice([b.randint(-d - 2, d + 2), INT64_MAX, -INT64_MAX - 1 if step < 0 else 0])
            out[a] = slice_len(d, s, e, step)
        else:
            s, e = (0, INT64_MAX) if step > 0 else (-1, -INT64_MAX - 1)
            out[a] = d if abs(step) == 1 else new_token(b)
        starts.append(s)
        ends.append(e)
        steps.append(step)
    if b.ctx.lo >= 11 and b.chance(0.3):
        axes = [a - x.rank for a in axes]
    forms = {"starts": (1, 10, np.array(starts, np.int64)),
             "ends": (2, 10, np.array(ends, np.int64))}
    if b.chance(0.8) or any(a < 0 for a in axes) or sorted(axes) != list(range(len(axes))):
        forms["axes"] = (3, 10, np.array(axes, np.int64))
    else:
        axes = list(range(len(axes)))
    if steps_ok and (b.chance(0.7) or any(s != 1 for s in steps)):
        forms["steps"] = (4, 10, np.array(steps, np.int64))
    return b.node1("Slice", [x], forms=forms, outs=[(x.dtype, tuple(out))])


def index_tensor(b, d, shape, dtype=None):
    """Indices into a dim of size d (negative ones too)."""
    dtype = dtype or b.choice([I64, I64, I32])
    if d == 0:
        shape = tuple(0 if i == 0 else s for i, s in enumerate(shape)) or (0,)
        return b.fresh(dtype, shape, kind="index", lo=0, hi=1)
    return b.fresh(dtype, shape, kind="index", lo=-d, hi=d)


@op("Gather")
def gather(b):
    x = pick_x(b, ANY, min_rank=1)
    axes = [i for i in range(x.rank) if isinstance(x.shape[i], int)]
    if not axes:
        raise Skip()
    axis = b.choice(axes)
    ishape = b.choice([(), (b.randint(1, 4),), (2, b.randint(1, 3)), (0,)])
    ind = index_tensor(b, x.shape[axis], ishape)
    out = x.shape[:axis] + ind.shape + x.shape[axis + 1:]
    attrs = {"axis": axis - x.rank if b.ctx.lo >= 11 and b.chance(0.3) else axis}
    return b.node1("Gather", [x, ind], attrs, outs=[(x.dtype, out)])


@op("Expand", lo=8)
def expand(b):
    x = pick_x(b, ANY, max_rank=3)
    target = [d if not (d == 1 and b.chance(0.5)) else b.randint(0, 3) for d in x.shape]
    target = [1 if (b.chance(0.3) and isinstance(d, int)) or not isinstance(d, int) else d
              for d in target]
    lead = [b.randint(1, 3) for _ in range(b.randint(0, 2))]
    target = lead + target
    out = []
    from ops_elementwise import broadcast
    out = broadcast(x.shape, tuple(target))
    if out is None:
        raise Skip()
    return b.node1("Expand", [x, computed_list(b, x, target)], outs=[(x.dtype, out)])


@op("Tile")
def tile(b):
    x = pick_x(b, ANY, min_rank=1, max_rank=3, need_known=True)
    reps = [b.choice([1, 1, 2, 3, 0]) for _ in x.shape]
    out = tuple(d * r for d, r in zip(x.shape, reps))
    return b.node1("Tile", [x, int_list(b, reps)], outs=[(x.dtype, out)])


@op("ConstantOfShape", lo=9)
def constant_of_shape(b):
    x = b.pick(lambda v: known(v.shape) and v.rank >= 1)
    dims = [b.randint(0, 4) for _ in range(b.randint(0, 3))]
    if x is not None and b.chance(0.5):
        dims = [d for d in x.shape]
        shp = computed_list(b, x, dims) if dims else int_list(b, dims)
    else:
        shp = int_list(b, dims)
    dt = b.choice([F32, I64, I32, BOOL, F64])
    attrs = {}
    if b.chance(0.8):
        v = np.array([b.choice([0, 1, 2.5, -3])]).astype(dt)
        attrs["value"] = v
    else:
        dt = F32
    return b.node1("ConstantOfShape", [shp], attrs, outs=[(dt, tuple(dims))])


@op("Range", lo=11)
def range_(b):
    dt = b.choice([I64, I32, F32])
    if dt == F32:
        start, delta = b.choice([0.0, 0.5, -2.0, 1.25]), b.choice([0.5, 1.0, -0.25, 2.0])
        limit = start + delta * b.randint(-1, 6) + b.choice([0.0, 0.125])
    else:
        start, delta = b.randint(-5, 5), b.choice([1, 2, 3, -1, -2])
        limit = start + delta * b.randint(-1, 6) + b.choice([0, 1 if delta > 0 else -1])
    n = max(int(np.ceil((limit - start) / delta)), 0)
    vals = [b.constant(np.array(v, dt)) for v in (start, limit, delta)]
    if b.chance(0.3):  # a computed limit: the length is data-dependent
        lim_in = b.fresh(dt, (), kind="index", lo=-3, hi=8) if dt != F32 else None
        if lim_in is not None:
            vals[1] = lim_in
            n = new_token(b)
    return b.node1("Range", vals, outs=[(dt, (n,))], exact=dt != F32)


@op("Trilu", lo=14)
def trilu(b):
    x = pick_x(b, (F32, I64, F64, BOOL, I32), min_rank=2)
    ins = [x]
    if b.chance(0.6):
        ins.append(b.constant(np.array(b.randint(-3, 3), np.int64)))
    attrs = {"upper": b.choice([0, 1])} if b.chance(0.8) else {}
    return b.node1("Trilu", ins, attrs)


@op("EyeLike", lo=9)
def eye_like(b):
    x = pick_x(b, (F32, I64, I32, F64), min_rank=2, max_rank=2)
    attrs = {}
    dt = x.dtype
    if b.chance(0.5):
        dt = b.choice([F32, I64, I32, F64])
        attrs["dtype"] = int(__import__("graph").ONNX_DTYPE[dt])
    if b.chance(0.6):
        attrs["k"] = b.randint(-3, 3)
    return b.node1("EyeLike", [x], attrs, outs=[(dt, x.shape)])


@op("Shape")
def shape_(b):
    x = pick_x(b, ANY)
    if b.ctx.lo >= 15 and b.chance(0.5) and x.rank:
        start = b.randint(-x.rank - 1, x.rank)
        end = b.choice([None, b.randint(-x.rank - 1, x.rank + 1)])
        attrs = {"start": start}
        if end is not None:
            attrs["end"] = end
        n = len(range(*slice(start, end).indices(x.rank)))
        return b.node1("Shape", [x], attrs, outs=[(I64, (n,))])
    return b.node1("Shape", [x], outs=[(I64, (x.rank,))])


@op("Size")
def size_(b):
    x = pick_x(b, ANY)
    return b.node1("Size", [x], outs=[(I64, ())])


@op("Identity")
def identity(b):
    x = pick_x(b, ANY)
    return b.node1("Identity", [x])


@op("Pad", lo=7)
def pad(b):
    x = pick_x(b, (F32, F32, I64, I32, F64), min_rank=1, max_rank=4, need_known=True)
    mode = b.choice(["constant", "constant", "reflect", "edge"])
    if x.dtype in (I32, I64) and b.ctx.lo < 11:
        mode = "constant" if False else mode
        if b.ctx.lo < 11:
            raise Skip()  # opset 2-10 Pad is float-only
    pads_b, pads_e, out = [], [], []
    for d in x.shape:
        def one():
            if mode == "reflect":
                return b.randint(0, max(d - 1, 0))
            if mode == "edge" and d == 0:
                return 0
            return b.randint(-d if mode == "constant" else 0, 2) if b.chance(0.8) else 0
        pb, pe = one(), one()
        if d + pb + pe < 0:
            pb, pe = 0, 0
        pads_b.append(pb)
        pads_e.append(pe)
        out.append(d + pb + pe)
    if mode == "reflect" and any(d <= 1 for d in x.shape):
        mode = "constant"
    attrs = {"mode": mode} if mode != "constant" or b.chance(0.5) else {}
    forms = {"pads": (1, 11, np.array(pads_b + pads_e, np.int64))}
    if mode == "constant" and b.chance(0.6):
        forms["value"] = (2, 11, np.array(b.choice([0, 1.5, -2]), x.dtype))
    return b.node1("Pad", [x], attrs, forms=forms, outs=[(x.dtype, tuple(out))])


@op("DepthToSpace")
def depth_to_space(b):
    bs = b.choice([1, 2, 3])
    x = b.pick(lambda v: v.rank == 4 and known(v.shape) and v.shape[1] % (bs * bs) == 0,
               lambda: b.fresh(b.choice(ANY), (b.randint(1, 2), bs * bs * b.randint(1, 2),
                                               b.randint(1, 3), b.randint(1, 3))))
    attrs = {"blocksize": bs}
    if b.ctx.lo >= 11 and b.chance(0.6):
        attrs["mode"] = b.choice(["DCR", "CRD"])
    n, c, h, w = x.shape
    return b.node1("DepthToSpace", [x], attrs, outs=[(x.dtype, (n, c // (bs * bs), h * bs,
                                                                  w * bs))])


@op("SpaceToDepth")
def space_to_depth(b):
    bs = b.choice([1, 2, 3])
    x = b.pick(lambda v: v.rank == 4 and known(v.shape) and v.shape[2] % bs == 0 and
               v.shape[3] % bs == 0,
               lambda: b.fresh(b.choice(ANY), (b.randint(1, 2), b.randint(1, 3),
                                               bs * b.randint(1, 2), bs * b.randint(1, 2))))
    n, c, h, w = x.shape
    return b.node1("SpaceToDepth", [x], {"blocksize": bs},
                   outs=[(x.dtype, (n, c * bs * bs, h // bs, w // bs))])


@op("ReverseSequence", lo=10)
def reverse_sequence(b):
    x = pick_x(b, ANY, min_rank=2, need_known=True)
    time_axis = b.choice([0, 1])
    batch_axis = 1 - time_axis
    t = x.shape[time_axis]
    lens = b.fresh(I64, (x.shape[batch_axis],), kind="index", lo=min(1, t), hi=t + 1)
    attrs = {"time_axis": time_axis, "batch_axis": batch_axis}
    return b.node1("ReverseSequence", [x, lens], attrs)


@op("Compress", lo=9)
def compress(b):
    x = pick_x(b, ANY, min_rank=1)
    attrs = {}
    if b.chance(0.8):
        axes = [i for i in range(x.rank) if isinstance(x.shape[i], int)]
        if not axes:
            raise Skip()
        axis = b.choice(axes)
        d = x.shape[axis]
        cond = b.pick(lambda v: v.dtype == BOOL and v.rank == 1 and isinstance(v.shape[0], int)
                      and v.shape[0] <= d and v.exact,
                      lambda: b.fresh(BOOL, (b.randint(max(d - 1, 0), d),)))
        attrs["axis"] = axis - x.rank if b.ctx.lo >= 11 and b.chance(0.3) else axis
        out = list(x.shape)
        out[axis] = new_token(b)
        out = tuple(out)
    else:
        if not known(x.shape):
            raise Skip()
        cond = b.fresh(BOOL, (b.randint(0, numel(x.shape)),))
        out = (new_token(b),)
    return b.node1("Compress", [x, cond], attrs, outs=[(x.dtype, out)])


@op("OneHot", lo=9)
def one_hot(b):
    depth = b.randint(1, 5)
    ind = b.fresh(b.choice([I64, I32, F32]), b.rand_shape(1, 2), kind="index", lo=-depth - 1,
                  hi=depth + 1)
    vdt = b.choice([F32, I64, I32])
    values = b.constant(np.array([b.randint(-2, 1), b.randint(2, 5)], vdt))
    d = b.constant(np.array(depth if b.chance(0.7) else [depth], b.choice([np.int64, np.float32])))
    axis = b.randint(-ind.rank - 1, ind.rank)
    a = axis + ind.rank + 1 if axis < 0 else axis
    out = list(ind.shape)
    out.insert(a, depth)
    attrs = {"axis": axis} if b.chance(0.8) or axis != -1 else {}
    if "axis" not in attrs:
        out = list(ind.shape) + [depth]
    return b.node1("OneHot", [ind, d, values], attrs, outs=[(vdt, tuple(out))])


@op("GatherElements", lo=11)
def gather_elements(b):
    x = pick_x(b, ANY, min_rank=1, need_known=True)
    axis = b.randint(0, x.rank - 1)
    ishape = tuple(b.randint(0, d) if i != axis else b.randint(1, 4) for i, d in
                   enumerate(x.shape))
    if x.shape[axis] == 0:
        ishape = tuple(0 if i == axis else s for i, s in enumerate(ishape))
    ind = index_tensor(b, x.shape[axis], ishape)
    return b.node1("GatherElements", [x, ind], {"axis": axis - x.rank if b.chance(0.3) else axis},
                   outs=[(x.dtype, ind.shape)])


@op("GatherND", lo=11)
def gather_nd(b):
    x = pick_x(b, ANY, min_rank=1, need_known=True)
    bd = b.randint(0, min(x.rank - 1, 1)) if b.ctx.lo >= 12 else 0
    k = b.randint(1, x.rank - bd)
    lead = x.shape[:bd]
    mid = tuple(b.randint(1, 3) for _ in range(b.randint(0, 2)))
    cols = []
    n = numel(lead + mid)
    for j in range(k):
        d = x.shape[bd + j]
        if d == 0:
            raise Skip()
        cols.append(b.rng.integers(-d, d, size=n))
    arr = np.stack(cols, -1).reshape(lead + mid + (k,)).astype(np.int64)
    ind = b.constant(arr) if b.chance(0.5) else _as_input(b, arr)
    out = lead + mid + x.shape[bd + k:]
    attrs = {"batch_dims": bd} if bd or b.chance(0.2) and b.ctx.lo >= 12 else {}
    return b.node1("GatherND", [x, ind], attrs, outs=[(x.dtype, out)])


def _as_input(b, arr):
    v = b.fresh(arr.dtype, arr.shape, const=False)
    b.ctx.root.input_data[v.name] = arr
    return v


def _distinct_positions(b, shape, count):
    n = numel(shape)
    count = min(count, n)
    flat = b.rng.choice(n, size=count, replace=False)
    return np.stack(np.unravel_index(flat, shape), -1) if count else \
        np.zeros((0, len(shape)), np.int64)


@op("ScatterElements", lo=11)
def scatter_elements(b):
    x = pick_x(b, (F32, F32, I64, F64, I32), min_rank=1, need_known=True)
    axis = b.randint(0, x.rank - 1)
    ishape = tuple(b.randint(0, d) for d in x.shape)
    reduction = b.choice(["none", "none", "add", "mul"]) if b.ctx.lo >= 16 else "none"
    # Distinct destinations along the axis for each position of the other axes.
    ind = np.zeros(ishape, np.int64)
    for idx in np.ndindex(*[s for i, s in enumerate(ishape) if i != axis]):
        perm = b.rng.permutation(x.shape[axis])[:ishape[axis]]
        sl = list(idx)
        sl.insert(axis, slice(None))
        ind[tuple(sl)] = perm
    ind = np.where(b.rng.random(ishape) < 0.3, ind - x.shape[axis], ind)
    iv = b.constant(ind) if b.chance(0.5) else _as_input(b, ind)
    upd = b.fresh(x.dtype, ishape)
    attrs = {"axis": axis}
    if reduction != "none" or b.chance(0.2) and b.ctx.lo >= 16:
        attrs["reduction"] = reduction
    return b.node1("ScatterElements", [x, iv, upd], attrs, exact=reduction == "none")


@op("ScatterND", lo=11)
def scatter_nd(b):
    x = pick_x(b, (F32, F32, I64, F64, I32), min_rank=1, need_known=True)
    k = b.randint(1, x.rank)
    count = b.randint(0, 4)
    pos = _distinct_positions(b, x.shape[:k], count)
    ind = pos.astype(np.int64).reshape((pos.shape[0], k))
    if b.chance(0.3) and ind.shape[0] == 2:
        ind = ind.reshape((1, 2, k))
    iv = b.constant(ind) if b.chance(0.5) else _as_input(b, ind)
    upd = b.fresh(x.dtype, ind.shape[:-1] + x.shape[k:])
    reduction = b.choice(["none", "add", "mul"]) if b.ctx.lo >= 16 else "none"
    attrs = {"reduction": reduction} if reduction != "none" else {}
    return b.node1("ScatterND", [x, iv, upd], attrs, exact=reduction == "none")


@op("Scatter", lo=9, hi=10)
def scatter(b):
    x = pick_x(b, (F32, I64), min_rank=1, need_known=True)
    axis = b.randint(0, x.rank - 1)
    ishape = tuple(b.randint(0, d) for d in x.shape)
    ind = np.zeros(ishape, np.int64)
    for idx in np.ndindex(*[s for i, s in enumerate(ishape) if i != axis]):
        sl = list(idx)
        sl.insert(axis, slice(None))
        ind[tuple(sl)] = b.rng.permutation(x.shape[axis])[:ishape[axis]]
    upd = b.fresh(x.dtype, ishape)
    return b.node1("Scatter", [x, b.constant(ind), upd], {"axis": axis})


@op("NonZero", lo=9)
def non_zero(b):
    x = b.pick(lambda v: v.dtype in (BOOL, F32, I64, I32) and v.exact,
               lambda: b.fresh(b.choice([BOOL, BOOL, F32, I64]), b.rand_shape(0, 3)))
    # A scalar reads as a one-element vector: one row (ONNX Runtime, numpy and dynvm; the
    # spec's shape is [0, nnz]), docs/differential.md.
    return b.node1("NonZero", [x], outs=[(I64, (max(x.rank, 1), new_token(b)))])


@op("Unique", lo=11)
def unique(b):
    x = b.pick(lambda v: v.dtype in (F32, I64) and v.exact and v.rank >= 1,
               lambda: b.fresh(b.choice([F32, I64]), b.rand_shape(1, 3), kind="index",
                               lo=-3, hi=4))
    attrs = {}
    if b.chance(0.7):
        attrs["sorted"] = b.choice([0, 1])
    if b.chance(0.4) and known(x.shape) and 0 not in x.shape:  # ORT aborts on an empty one
        axis = b.randint(-x.rank, x.rank - 1)
        attrs["axis"] = axis
        a = axis % x.rank
        t = new_token(b)
        yshape = tuple(t if i == a else d for i, d in enumerate(x.shape))
        inv = (x.shape[a],)
    else:
        t = new_token(b)
        yshape = (t,)
        inv = (numel(x.shape),) if known(x.shape) else (new_token(b),)
    n_out = b.randint(1, 4)
    outs = [(x.dtype, yshape), (I64, (t,)), (I64, inv), (I64, (t,))][:n_out]
    outs = [o if i == 0 or b.chance(0.7) else None for i, o in enumerate(outs)]
    return b.node("Unique", [x], attrs, outs=outs)


@op("Dropout")
def dropout(b):
    x = pick_x(b, (F32, F64))
    forms = {}
    if b.chance(0.5):
        forms["ratio"] = (1, 12, np.array(b.choice([0.0, 0.5, 0.25]), np.float32))
    outs = [(x.dtype, x.shape)]
    if b.ctx.lo >= 12 and b.chance(0.4):
        outs.append((BOOL, x.shape))
    return b.node("Dropout", [x], forms=forms, outs=outs)
