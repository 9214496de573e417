"""Small PyTorch modules exported with torch.onnx.export, for the pattern-rewrite tests.

Each case builds a module of random sizes (from a seed) and exports it at one opset; the test
(rewrite_export_test.py) compiles it with and without rewrites, checks which rules fired and
compares the outputs. Nothing here is checked in but this script: models are made at test time.

    /usr/bin/python3 export_modules.py CASE OPSET SEED OUT_DIR   # writes model.onnx, input_*.npy
"""
import io
import math
import random
import sys
import warnings

import numpy as np
import torch
import torch.nn as nn

warnings.filterwarnings("ignore")


class Lambda(nn.Module):
    def __init__(self, fn, *params):
        super().__init__()
        self.fn = fn
        self.params = nn.ParameterList([nn.Parameter(p) for p in params])

    def forward(self, *xs):
        return self.fn(*xs, *self.params)


def _rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def _rope(x, cos, sin):
    # Llama / GPT-NeoX: x * cos + rotate_half(x) * sin.
    return x * cos + _rotate_half(x) * sin


def _rope_partial(x, cos, sin):
    # GPT-NeoX's partial rotary: the first half of each head rotated, the rest passed through.
    r = x.shape[-1] // 2
    return torch.cat((_rope(x[..., :r], cos[..., :r], sin[..., :r]), x[..., r:]), dim=-1)


def _rope_sign_first(x, cos, sin):
    # The sign on the first half: not rotate_half.
    h = x.shape[-1] // 2
    return x * cos + torch.cat((-x[..., :h], x[..., h:]), dim=-1) * sin


def _ln_other_axis(x):
    # Mean over axis 1, variance over the last: not a LayerNorm.
    d = x - x.mean(dim=1, keepdim=True)
    return d / torch.sqrt((d * d).mean(dim=-1, keepdim=True) + 1e-5)


def _ln_shared(x):
    # The centered value is a second output: the decomposition must stay.
    d = x - x.mean(dim=-1, keepdim=True)
    return d / torch.sqrt(d.pow(2).mean(dim=-1, keepdim=True) + 1e-5), d


def _gelu_shared(x):
    # The Erf is a second output: the GELU must stay decomposed.
    e = torch.erf(x / math.sqrt(2.0))
    return 0.5 * x * (1.0 + e), e


def _ln_by_hand(x, w):
    d = x - x.mean(-1, keepdim=True)
    return d / torch.sqrt(d.pow(2).mean(-1, keepdim=True) + 1e-6) * w


def _rms_t5(x, w):
    # T5's T5LayerNorm: pow(2), rsqrt, weight * h.
    v = x.pow(2).mean(-1, keepdim=True)
    return w * (x * torch.rsqrt(v + 1e-6))


def _rms_llama(x, w):
    # LLaMA's RMSNorm: computed in float, cast back to the input's dtype.
    h = x.to(torch.float32)
    v = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(v + 1e-5)
    return w * h.to(x.dtype)


def _rms_mul_div(x, w):
    # x * x and 1 / sqrt, weight on the right.
    return x * (1.0 / torch.sqrt((x * x).mean(dim=-1, keepdim=True) + 1e-5)) * w


def _rms_no_weight(x):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


def _rms_other_axis(x):
    # The mean square over axis 1: not an RMSNorm over the trailing axes.
    return x * torch.rsqrt(x.pow(2).mean(1, keepdim=True) + 1e-6)


def _rms_no_keepdims(x):
    return x * torch.rsqrt(x.pow(2).mean(-1) + 1e-6).unsqueeze(-1)


def _rms_shared(x):
    # The mean square is a second output: the decomposition must stay.
    v = x.pow(2).mean(-1, keepdim=True)
    return x * torch.rsqrt(v + 1e-6), v


def _rms_eps_input(x, eps):
    # eps a model input, not a constant.
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)


class GptBlock(nn.Module):
    """A GPT-2 style block: pre-LayerNorm, causal attention, tanh-GELU MLP."""

    def __init__(self, d, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        self.act = nn.GELU(approximate="tanh")

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=2)
        hd = d // self.heads
        q = q.view(b, t, self.heads, hd).transpose(1, 2)
        k = k.view(b, t, self.heads, hd).transpose(1, 2)
        v = v.view(b, t, self.heads, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        i = torch.arange(t)
        mask = i[None, :] <= i[:, None]  # causal (torch.tril exports from opset 14 only)
        att = att.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        return x + self.out(self.act(self.fc(self.ln2(x))))


class SelfAttention(nn.Module):
    """nn.MultiheadAttention over one sequence (batch_first), optionally with a key-padding
    mask and returning the averaged attention weights (a second consumer of the softmax)."""

    def __init__(self, d, heads, weights=False):
        super().__init__()
        self.mha = nn.MultiheadAttention(d, heads, batch_first=True)
        self.weights = weights

    def forward(self, x, pad=None):
        y, w = self.mha(x, x, x, key_padding_mask=pad, need_weights=self.weights)
        return (y, w) if self.weights else y


class PaddedEncoderLayer(nn.Module):
    def __init__(self, layer):
        super().__init__()
        self.layer = layer

    def forward(self, x, pad):
        return self.layer(x, src_key_padding_mask=pad)


def _padding(b, s):
    pad = torch.zeros(b, s, dtype=torch.bool)
    for i in range(b):  # never the first key: no row is masked throughout
        pad[i, s - (i % max(1, s - 1)):] = True if s > 1 else False
    return pad


def _attention_other_axis(q, k, v):
    return torch.softmax(q @ k.transpose(-2, -1) * 0.5, dim=-2) @ v


def _attention_mask_bigger(q, k, v, m):
    # The mask has a leading axis the scores lack: the sum broadcasts the scores.
    return torch.softmax(q @ k.transpose(-2, -1) * 0.5 + m, dim=-1) @ v


def _linear_product_shared(t, w, b):
    # The product is read besides the Add.
    p = t @ w
    return (p + b) * p


def _linear_act_shared(t, w, b):
    # The biased product is read besides its activation.
    y = t @ w + b
    return torch.relu(y) + y


_FOLDS_A_TRANSPOSE = ("linear_x_wt_bias", "mha_weights", "attention_other_axis")


def _matmul_transpose_case(case, rng, b, s, d):
    """Transposes torch leaves before a MatMul outside attention (matmul_transpose,
    linear_transpose) and the near misses."""
    n, heads = rng.randint(2, 9), rng.choice([1, 2, 3])
    if case == "matmul_qkt":  # scores without a softmax, 3-D or per head
        dims = [b, s, d] if rng.random() < 0.5 else [b, heads, s, d]
        return Lambda(lambda q, k: q @ k.transpose(-1, -2)), [torch.randn(*dims),
                                                              torch.randn(*dims)]
    if case == "matmul_at_b":  # torch.bmm(a.transpose(1, 2), b)
        return Lambda(lambda a, c: torch.bmm(a.transpose(1, 2), c)), [torch.randn(b, d, s),
                                                                     torch.randn(b, d, n)]
    if case == "matmul_x_wt":  # F.linear with a weight that is an input, 2-D or 3-D x
        x = torch.randn(b, s, d) if rng.random() < 0.5 else torch.randn(s, d)
        return Lambda(lambda t, w: nn.functional.linear(t, w)), [x, torch.randn(n, d)]
    if case == "matmul_heads":  # [S, B, H, hd] heads read per head: permute(1, 2, 0, 3)
        q, k = torch.randn(s, b, heads, d), torch.randn(s, b, heads, d)
        return Lambda(lambda q, k: q.permute(1, 2, 0, 3) @ k.permute(1, 2, 3, 0)), [q, k]
    if case == "linear_x_wt_bias":  # x @ w.t() + b, w an input: matmul_bias, then trans_b
        return Lambda(lambda t, w, c: t @ w.t() + c, torch.randn(n)), [torch.randn(b, s, d),
                                                                       torch.randn(n, d)]
    if case == "matmul_transpose_shared":  # the transposed value is read besides the product
        return Lambda(lambda a, c: (a.transpose(1, 2) @ c, a.transpose(1, 2) * 2)), [
            torch.randn(b, d, s), torch.randn(b, d, n)]
    if case == "batch_first_swap":  # x.transpose(0, 1) at batch 1 moves only a unit axis
        return Lambda(lambda t: t.transpose(0, 1) + 1.0), [torch.randn(1, s, d)]
    if case == "matmul_last_axis_to_batch":  # a.permute(2, 0, 1): no unit stride in the matrix
        return Lambda(lambda a, c: a.permute(2, 0, 1) @ c), [torch.randn(s, d, b),
                                                             torch.randn(b, d, n)]
    raise ValueError(f"unknown case {case}")


_LINEAR_ACTS = {"linear": None, "linear_relu": nn.ReLU, "linear_gelu": nn.GELU,
                "linear_gelu_tanh": lambda: nn.GELU(approximate="tanh"), "linear_tanh": nn.Tanh,
                "linear_sigmoid": nn.Sigmoid, "linear_silu": nn.SiLU}


def _linear_case(case, rng, x):
    """nn.Linear (3-D input: MatMul + Add; 2-D: Gemm), optionally with an activation, and the
    near misses of matmul_bias / linear_activation."""
    d, n = x.shape[-1], rng.choice([8, 24, 40, 72])
    if case.endswith("_2d"):  # Gemm transB=1
        act = _LINEAR_ACTS[case[:-3]]
        return nn.Sequential(nn.Linear(d, n), act()), [x.reshape(-1, d)]
    if case in _LINEAR_ACTS:
        act = _LINEAR_ACTS[case]
        lin = nn.Linear(d, n)
        return (lin if act is None else nn.Sequential(lin, act())), [x]
    w, b = torch.randn(d, n), torch.randn(n)
    if case == "linear_bias_other_shape":  # varies along the sequence axis (at least 2 long) too
        x = torch.randn(x.shape[0], max(x.shape[1], 2), d)
        return Lambda(lambda t, w, b: t @ w + b, w, torch.randn(x.shape[1], n)), [x]
    if case == "linear_product_shared":
        return Lambda(_linear_product_shared, w, b), [x]
    if case == "linear_act_shared":
        return Lambda(_linear_act_shared, w, b), [x]
    raise ValueError(f"unknown case {case}")


def make_case(case, rng):
    """Returns (module, inputs) for a case name, sizes drawn from rng."""
    b, s, d = rng.randint(1, 3), rng.randint(1, 9), rng.choice([8, 16, 24, 40])
    if case.startswith("matmul_") or case in _FOLDS_A_TRANSPOSE:
        # A sequence of 1 would make the Transpose move only axes of size 1: a view
        # (transpose_unit_axes), with nothing left for matmul_transpose to fold.
        s = max(s, 2)
    x = torch.randn(b, s, d)
    pos = torch.rand(b, s, d) + 0.1
    if case == "layer_norm":
        return nn.LayerNorm(d), [x]
    if case == "layer_norm_2d":
        return nn.LayerNorm([s, d]), [x]
    if case == "layer_norm_no_affine":
        return nn.LayerNorm(d, elementwise_affine=False), [x]
    if case == "layer_norm_by_hand":
        return Lambda(_ln_by_hand, torch.randn(d)), [x]
    if case == "layer_norm_other_axis":
        return Lambda(_ln_other_axis), [x]
    if case == "layer_norm_shared":
        return Lambda(_ln_shared), [x]
    if case == "pow_tensor":
        return Lambda(lambda t, e: t.pow(e)), [pos, torch.rand(b, s, d) * 3]
    if case in ("rope", "rope_partial", "rope_sign_first"):
        heads, hd = rng.choice([1, 2, 4]), 2 * rng.choice([2, 5, 8, 16])
        if case == "rope_partial":  # an even rotary dimension (half the head) to rotate
            hd = 4 * rng.choice([1, 3, 4])
        fn = {"rope": _rope, "rope_partial": _rope_partial,
              "rope_sign_first": _rope_sign_first}[case]
        return Lambda(fn), [torch.randn(b, heads, s, hd), torch.randn(s, hd), torch.randn(s, hd)]
    if case in ("rms_norm_t5", "rms_norm_llama", "rms_norm_mul_div"):
        fn = {"rms_norm_t5": _rms_t5, "rms_norm_llama": _rms_llama,
              "rms_norm_mul_div": _rms_mul_div}[case]
        return Lambda(fn, torch.randn(d)), [x]
    if case in ("rms_norm_no_weight", "rms_norm_other_axis", "rms_norm_no_keepdims",
                "rms_norm_shared"):
        return Lambda({"rms_norm_no_weight": _rms_no_weight, "rms_norm_other_axis": _rms_other_axis,
                       "rms_norm_no_keepdims": _rms_no_keepdims,
                       "rms_norm_shared": _rms_shared}[case]), [x]
    if case == "rms_norm_eps_input":
        return Lambda(_rms_eps_input), [x, torch.rand(1) * 1e-2 + 1e-3]
    if case.startswith("pow_"):
        e = {"pow_2": 2.0, "pow_3": 3.0, "pow_half": 0.5, "pow_1": 1.0, "pow_m1": -1.0,
             "pow_2_5": 2.5}[case]
        return Lambda(lambda t: t.pow(e) + 1.0), [pos]
    if case == "pow_tensor":
        return Lambda(lambda t, e: t.pow(e)), [pos, torch.rand(b, s, d) * 3]
    if case == "gelu":
        return nn.GELU(), [x]
    if case == "gelu_tanh":
        return nn.GELU(approximate="tanh"), [x]
    if case == "gelu_other_constant":
        return Lambda(lambda t: 0.5 * t * (1.0 + torch.erf(t / 1.5))), [x]
    if case == "gelu_shared":
        return Lambda(_gelu_shared), [x]
    if case == "silu":
        return nn.SiLU(), [x]
    if case == "swiglu":  # Llama's FFN: down(silu(gate(x)) * up(x)), no biases
        f = rng.choice([6, 11, 16])
        return Lambda(lambda t, wg, wu: torch.nn.functional.silu(t @ wg) * (t @ wu),
                      torch.randn(d, f), torch.randn(d, f)), [x]
    if case == "silu_other_input":
        return Lambda(lambda t, u: t * torch.sigmoid(u)), [x, torch.randn(b, s, d)]
    if case == "hard_swish":
        return nn.Hardswish(), [x * 4]
    if case == "encoder_layer":
        heads = rng.choice([1, 2, 4])
        dm = heads * rng.choice([4, 8, 12])
        layer = nn.TransformerEncoderLayer(dm, heads, dim_feedforward=2 * dm, dropout=0.0,
                                           activation="gelu", batch_first=True)
        return layer, [torch.randn(b, s, dm)]
    if case in ("mha", "mha_padded", "mha_weights"):
        heads = rng.choice([1, 2, 4])
        dm = heads * rng.choice([4, 8])
        x = torch.randn(b, s, dm)
        m = SelfAttention(dm, heads, weights=case == "mha_weights")
        return m, [x, _padding(b, s)] if case == "mha_padded" else [x]
    if case == "encoder_layer_padded":
        heads = rng.choice([1, 2, 4])
        dm = heads * rng.choice([4, 8, 12])
        layer = nn.TransformerEncoderLayer(dm, heads, dim_feedforward=2 * dm, dropout=0.0,
                                           activation="gelu", batch_first=True)
        return PaddedEncoderLayer(layer), [torch.randn(b, s, dm), _padding(b, s)]
    if case == "attention_other_axis":
        return Lambda(_attention_other_axis), [torch.randn(b, s, d) for _ in range(3)]
    if case == "attention_mask_bigger":
        return Lambda(_attention_mask_bigger), [torch.randn(b, s, d) for _ in range(3)] + [
            torch.randn(2, b, s, s)]
    if case == "gpt_block":
        heads = rng.choice([1, 2, 4])
        return GptBlock(d, heads if d % heads == 0 else 1), [x]
    if case.startswith("matmul_") or case in ("linear_x_wt_bias", "batch_first_swap"):
        return _matmul_transpose_case(case, rng, b, s, d)
    if case.startswith("linear"):
        return _linear_case(case, rng, x)
    raise ValueError(f"unknown case {case}")


def export(case, opset, seed, out_dir):
    rng = random.Random(seed)
    torch.manual_seed(seed)
    module, inputs = make_case(case, rng)
    module.eval()
    names = [f"x{i}" for i in range(len(inputs))]
    with torch.no_grad():
        outputs = module(*inputs)
    n_out = len(outputs) if isinstance(outputs, tuple) else 1
    torch.onnx.export(module, tuple(inputs), f"{out_dir}/model.onnx", opset_version=opset,
                      input_names=names, output_names=[f"y{i}" for i in range(n_out)])
    for name, t in zip(names, inputs):
        a = t.numpy()
        np.save(f"{out_dir}/input_{name}.npy", a if a.dtype == np.bool_ else a.astype(np.float32))
    return names, n_out


if __name__ == "__main__":
    export(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
