"""Op generators: quantization, the signal operators (DFT, STFT, windows, MelWeightMatrix),
the random operators, and string operators whose strings stay inside the graph.

Quantized results of a float computation may differ by one step at a rounding tie between
engines (ONNX rounds half to even of a real value each engine computes in its own float
order): such values carry `quant = 1`, an integer tolerance of one step (compare.py).
Random operators are seeded; their values are compared between dynvm's configurations, and
only their type and shape against ONNX Runtime (the generators differ).
"""
import numpy as np

from builder import Skip, op
from graph import BOOL, F32, F64, I32, I64, U8, I8, known
from ops_elementwise import pick_x


def _scale_zp(b, dt, shape=()):
    scale = b.constant(np.array(b.rng.uniform(0.01, 0.5, size=shape) if shape else
                                b.rng.uniform(0.01, 0.5), np.float32))
    lo, hi = (0, 255) if dt == U8 else (-128, 127)
    zp = b.constant(np.array(b.rng.integers(lo // 2 + 64 if dt == U8 else -20,
                                            hi // 2 if dt == U8 else 20, size=shape) if shape
                             else b.randint(lo // 2 + 64 if dt == U8 else -20,
                                            hi // 2 if dt == U8 else 20)).astype(dt))
    return scale, zp


@op("QuantizeLinear", lo=10)
def quantize(b):
    x = pick_x(b, (F32,), exact=True)
    dt = b.choice([U8, I8])
    per_axis = b.ctx.lo >= 13 and x.rank >= 1 and known(x.shape) and b.chance(0.4)
    attrs = {}
    if per_axis:
        axis = b.randint(0, x.rank - 1)
        scale, zp = _scale_zp(b, dt, (x.shape[axis],))
        attrs["axis"] = axis
    else:
        scale, zp = _scale_zp(b, dt)
    ins = [x, scale] + ([zp] if b.chance(0.8) or dt == I8 else [])
    out_dt = dt if len(ins) == 3 else U8
    return b.node1("QuantizeLinear", ins, attrs, outs=[(out_dt, x.shape)], exact=True)


@op("DequantizeLinear", lo=10)
def dequantize(b):
    x = b.pick(lambda v: v.dtype in (U8, I8), lambda: b.fresh(b.choice([U8, I8, I32]),
                                                              b.rand_shape()))
    attrs = {}
    if x.dtype == I32:
        scale = b.constant(np.array(b.rng.uniform(0.01, 0.5), np.float32))
        ins = [x, scale]
    else:
        per_axis = b.ctx.lo >= 13 and x.rank >= 1 and known(x.shape) and b.chance(0.4)
        if per_axis:
            axis = b.randint(0, x.rank - 1)
            scale, zp = _scale_zp(b, x.dtype, (x.shape[axis],))
            attrs["axis"] = axis
        else:
            scale, zp = _scale_zp(b, x.dtype)
        ins = [x, scale] + ([zp] if b.chance(0.8) or x.dtype == I8 else [])
    return b.node1("DequantizeLinear", ins, attrs, outs=[(F32, x.shape)], exact=True)


@op("DynamicQuantizeLinear", lo=11)
def dynamic_quantize(b):
    x = pick_x(b, (F32,), exact=True)
    if not x.safe or not known(x.shape) or 0 in x.shape:
        # Nothing, or only zeros: scale 0 by the spec's formula, 1 in ONNX Runtime (a spec
        # test, docs/differential.md).
        x = b.fresh(F32, b.rand_shape(allow_zero=False), kind="unit")
    if getattr(x, "const", None) is not None and not np.any(x.const):
        raise Skip()
    return b.node("DynamicQuantizeLinear", [x], outs=[(U8, x.shape), (F32, ()), (U8, ())],
                  exact=True, quant=1)


@op("MatMulInteger", lo=10)
def matmul_integer(b):
    m, k, n = b.randint(1, 4), b.randint(1, 5), b.randint(1, 4)
    lead = b.choice([(), (2,)])
    adt = b.choice([U8, I8])
    bdt = b.choice([U8, I8]) if adt == U8 else I8
    a = b.fresh(adt, lead + (m, k))
    w = b.fresh(bdt, (k, n))
    ins = [a, w]
    if b.chance(0.6):
        ins.append(b.constant(np.array(b.randint(0, 20), adt)))
        if b.chance(0.5):
            ins.append(b.constant(np.array(b.randint(0, 20), bdt)))
    return b.node1("MatMulInteger", ins, outs=[(I32, lead + (m, n))])


@op("QLinearMatMul", lo=10)
def qlinear_matmul(b):
    m, k, n = b.randint(1, 4), b.randint(1, 5), b.randint(1, 4)
    dt = b.choice([U8, I8])
    a, w = b.fresh(dt, (m, k)), b.fresh(dt, (k, n))
    sa, za = _scale_zp(b, dt)
    sw, zw = _scale_zp(b, dt)
    sy, zy = _scale_zp(b, dt)
    return b.node1("QLinearMatMul", [a, sa, za, w, sw, zw, sy, zy], outs=[(dt, (m, n))],
                   quant=1)


@op("ConvInteger", lo=10)
def conv_integer(b):
    n, c, m = 1, b.randint(1, 2), b.randint(1, 2)
    h, w = b.randint(1, 4), b.randint(1, 4)
    kh, kw = b.randint(1, h), b.randint(1, w)
    x = b.fresh(U8, (n, c, h, w))
    wt = b.fresh(U8, (m, c, kh, kw))
    ins = [x, wt]
    if b.chance(0.5):
        ins.append(b.constant(np.array(b.randint(0, 20), np.uint8)))
    return b.node1("ConvInteger", ins, {"kernel_shape": [kh, kw]} if b.chance(0.5) else {},
                   outs=[(I32, (n, m, h - kh + 1, w - kw + 1))])


@op("QLinearConv", lo=10)
def qlinear_conv(b):
    n, c, m = 1, b.randint(1, 2), b.randint(1, 3)
    h, w = b.randint(1, 4), b.randint(1, 4)
    kh, kw = b.randint(1, h), b.randint(1, w)
    dt = U8
    x = b.fresh(dt, (n, c, h, w))
    wt = b.fresh(dt, (m, c, kh, kw))
    sx, zx = _scale_zp(b, dt)
    sw, zw = _scale_zp(b, dt)
    sy, zy = _scale_zp(b, dt)
    ins = [x, sx, zx, wt, sw, zw, sy, zy]
    if b.chance(0.4):
        ins.append(b.fresh(I32, (m,), kind="index", lo=-100, hi=100))
    return b.node1("QLinearConv", ins, outs=[(dt, (n, m, h - kh + 1, w - kw + 1))], quant=1)


# -- signal ------------------------------------------------------------------------------------

@op("DFT", lo=17)
def dft(b):
    complex_in = b.chance(0.4)
    n = b.randint(1, 6)
    batch = b.randint(1, 2)
    x = b.fresh(F32, (batch, n, 2 if complex_in else 1))
    axis = 1
    attrs = {"axis": axis} if b.chance(0.5) else {}
    inverse = b.chance(0.3)
    onesided = not inverse and b.chance(0.3) and not complex_in
    if inverse:
        attrs["inverse"] = 1
    if onesided:
        attrs["onesided"] = 1
    ins = [x]
    length = n
    if b.chance(0.3):
        length = b.randint(1, 7)
        ins.append(b.constant(np.array(length, np.int64)))
    out_n = length // 2 + 1 if onesided else length
    return b.node1("DFT", ins, attrs, outs=[(F32, (batch, out_n, 2))], exact=False,
                   extra_depth=2)


@op("STFT", lo=17)
def stft(b):
    batch, n = b.randint(1, 2), b.randint(4, 16)
    sig = b.fresh(F32, (batch, n, 1))
    step = b.randint(1, 4)
    flen = b.randint(2, min(n, 8))
    ins = [sig, b.constant(np.array(step, np.int64))]
    if b.chance(0.5):
        ins.append(b.constant(np.hanning(flen).astype(np.float32)))
        if b.chance(0.5):
            ins.append(b.constant(np.array(flen, np.int64)))
    else:
        ins.append(None)
        ins.append(b.constant(np.array(flen, np.int64)))
    onesided = b.choice([0, 1])
    frames = (n - flen) // step + 1
    bins = flen // 2 + 1 if onesided else flen
    return b.node1("STFT", ins, {"onesided": onesided}, outs=[(F32, (batch, frames, bins, 2))],
                   exact=False, extra_depth=2)


def _window(name):
    @op(name, lo=17)
    def gen(b):
        n = b.randint(1, 8)  # ONNX's shape inference refuses size 0
        size = b.constant(np.array(n, b.choice([np.int64, np.int32])))
        attrs = {}
        if b.chance(0.5) or n == 1:
            # A symmetric window of one element divides by N - 1 = 0: undefined.
            attrs["periodic"] = b.choice([0, 1]) if n > 1 else 1
        dt = F32
        if b.chance(0.3):
            dt = F64
            attrs["output_datatype"] = 11
        # ONNX Runtime computes the window in float32 whatever the output type
        # (docs/differential.md): compared at float32's precision.
        return b.node1(name, [size], attrs, outs=[(dt, (n,))], exact=False, unit=2.0 ** -16)
    return gen


for _w in ("HannWindow", "HammingWindow", "BlackmanWindow"):
    _window(_w)


@op("MelWeightMatrix", lo=17)
def mel(b):
    bins, dft_len, rate = b.randint(1, 6), b.choice([8, 16, 32]), b.choice([8000, 16000])
    lo = b.choice([0.0, 100.0])
    hi = b.choice([rate / 2.0, rate / 4.0])
    ins = [b.constant(np.array(bins, np.int64)), b.constant(np.array(dft_len, np.int64)),
           b.constant(np.array(rate, np.int64)), b.constant(np.array(lo, np.float32)),
           b.constant(np.array(hi, np.float32))]
    return b.node1("MelWeightMatrix", ins, outs=[(F32, (dft_len // 2 + 1, bins))], exact=False)


# -- random --------------------------------------------------------------------------------

def _seed(b):
    return float(b.randint(0, 1000))


@op("RandomUniformLike")
def random_uniform_like(b):
    x = pick_x(b, (F32, F64))
    attrs = {"seed": _seed(b)}
    if b.chance(0.5):
        attrs["low"], attrs["high"] = -2.0, 3.0
    return b.node1("RandomUniformLike", [x], attrs, random=True, exact=False)


@op("RandomNormalLike")
def random_normal_like(b):
    x = pick_x(b, (F32, F64))
    attrs = {"seed": _seed(b)}
    if b.chance(0.5):
        attrs["mean"], attrs["scale"] = 1.0, 0.5
    return b.node1("RandomNormalLike", [x], attrs, random=True, exact=False)


@op("RandomUniform")
def random_uniform(b):
    shape = b.rand_shape(0, 3)
    return b.node1("RandomUniform", [], {"shape": list(shape), "seed": _seed(b)},
                   outs=[(F32, shape)], random=True, exact=False)


@op("RandomNormal")
def random_normal(b):
    shape = b.rand_shape(0, 3)
    return b.node1("RandomNormal", [], {"shape": list(shape), "seed": _seed(b)},
                   outs=[(F32, shape)], random=True, exact=False)


@op("Bernoulli", lo=15)
def bernoulli(b):
    p = b.fresh(F32, b.rand_shape(), kind="unit")
    p = b.node1("Abs", [p])
    return b.node1("Bernoulli", [p], {"seed": _seed(b)}, random=True, exact=False)


# -- strings, kept inside the graph (no string crosses the engines' interfaces) -------------

NUMBERS = ["1", "2.5", "-3", "1e2", "1E2", "0.25", "-0.5", "7"]


@op("StringNormalizer", lo=10)
def string_normalizer(b):
    """Strings stay inside the graph: numeric words, normalized (stopwords removed, case
    changed), then Cast to float (opset 9 parses strings)."""
    n = b.randint(1, 5)
    words = [b.choice(NUMBERS) for _ in range(n)]
    arr = np.array(words, dtype=object)
    if b.chance(0.4):
        arr = arr.reshape(1, n)
    x = b.constant(arr, node=True)
    x.dtype = "str"
    # ONNX Runtime's default locale (en_US.UTF-8) need not exist: name one that does.
    attrs = {"case_change_action": b.choice(["LOWER", "UPPER", "NONE"]), "locale": "C"}
    kept = len(words)
    if b.chance(0.6):
        stop = sorted(set(b.choice(NUMBERS) for _ in range(b.randint(1, 2))))
        attrs["stopwords"] = stop
        attrs["is_case_sensitive"] = 1
        kept = sum(w not in stop for w in words)
        if kept == 0:  # all removed: ONNX gives one empty string, which Cast cannot parse
            raise Skip()
    shape = (kept,) if arr.ndim == 1 else (1, kept)
    norm = b.node1("StringNormalizer", [x], attrs, outs=[("str", shape)])
    return b.node1("Cast", [norm], {"to": 1}, outs=[(F32, shape)])


@op("TfIdfVectorizer", lo=9)
def tfidf(b):
    pool = [1, 2, 3, 4, 2, 3]
    x = b.fresh(b.choice([I64, I32]), (b.randint(1, 2), b.randint(1, 6)), kind="index", lo=0,
                hi=6)
    mode = b.choice(["TF", "IDF", "TFIDF"])
    attrs = {"mode": mode, "min_gram_length": 1, "max_gram_length": 2, "max_skip_count":
             b.randint(0, 2), "ngram_counts": [0, 4], "ngram_indexes": [0, 1, 2, 3, 4],
             "pool_int64s": pool}
    if mode != "TF":
        attrs["weights"] = [0.5, 1.0, 1.5, 2.0, 0.25]
    if b.chance(0.5):
        attrs["min_gram_length"] = 2
    return b.node1("TfIdfVectorizer", [x], attrs, outs=[(F32, (x.shape[0], 5))], exact=True)
