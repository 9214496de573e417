#!/usr/bin/python3
"""Test data for the reference LSTM, GRU and RNN kernels (kernels/reference/rnn_test.cc).

Writes two C++ include files next to this script:
  rnn_onnx_cases.inc    the ONNX node tests (/usr/share/libonnx-testdata) as literals;
  rnn_oracle_cases.inc  cases for what the ONNX tests do not cover (reverse and bidirectional,
                        clip, input_forget, every activation with alpha/beta,
                        linear_before_reset, short sequence_lens, layout=1, initial states,
                        peepholes, f64), computed by the NumPy oracle below.

The oracle is written from the ONNX operator spec, one batch row and one time step at a time, in
float64, and is independent of the C++ code (which works on whole batches with a GEMM per step).
Before writing anything it checks itself against every ONNX node test.

Conventions the spec leaves open, chosen as ONNX Runtime does:
  - activation_alpha / activation_beta are consumed in activation order, one value per activation
    that takes that parameter; missing values take the ONNX operator's default;
  - clip bounds the input of every gate activation, not the cell state fed to h();
  - input_forget=1 sets f = 1 - i;
  - a sequence of length 0 gives all-zero Y rows and zero Y_h / Y_c.

Run with Debian's python (it has numpy and onnx):
  /usr/bin/python3 kernels/reference/testdata/rnn_oracle.py
"""

import glob
import os

import numpy as np
import onnx
from onnx import numpy_helper

ONNX_NODE_DIR = "/usr/share/libonnx-testdata/data/node"
HERE = os.path.dirname(os.path.abspath(__file__))

GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
DEFAULT_ACTS = {"RNN": ["Tanh"], "GRU": ["Sigmoid", "Tanh"], "LSTM": ["Sigmoid", "Tanh", "Tanh"]}
# name -> (uses alpha, uses beta, default alpha, default beta)
ACT_PARAMS = {
    "Relu": (False, False, 0.0, 0.0),
    "Tanh": (False, False, 0.0, 0.0),
    "Sigmoid": (False, False, 0.0, 0.0),
    "Affine": (True, True, 1.0, 0.0),
    "LeakyRelu": (True, False, 0.01, 0.0),
    "ThresholdedRelu": (True, False, 1.0, 0.0),
    "ScaledTanh": (True, True, 1.0, 1.0),
    "HardSigmoid": (True, True, 0.2, 0.5),
    "Elu": (True, False, 1.0, 0.0),
    "Softsign": (False, False, 0.0, 0.0),
    "Softplus": (False, False, 0.0, 0.0),
}


def activation(name, alpha, beta, x):
  if name == "Relu":
    return np.maximum(x, 0.0)
  if name == "Tanh":
    return np.tanh(x)
  if name == "Sigmoid":
    return 1.0 / (1.0 + np.exp(-x))
  if name == "Affine":
    return alpha * x + beta
  if name == "LeakyRelu":
    return np.where(x >= 0, x, alpha * x)
  if name == "ThresholdedRelu":
    return np.where(x > alpha, x, 0.0)
  if name == "ScaledTanh":
    return alpha * np.tanh(beta * x)
  if name == "HardSigmoid":
    return np.minimum(np.maximum(alpha * x + beta, 0.0), 1.0)
  if name == "Elu":
    return np.where(x >= 0, x, alpha * (np.exp(x) - 1.0))
  if name == "Softsign":
    return x / (1.0 + np.abs(x))
  if name == "Softplus":
    return np.log1p(np.exp(x))
  raise ValueError(name)


def parse_activations(op, attrs, num_directions):
  names = list(attrs.get("activations", []))
  per_dir = len(DEFAULT_ACTS[op])
  if not names:
    names = DEFAULT_ACTS[op] * num_directions
  if op == "RNN" and num_directions == 1 and len(names) == 2:
    names = names[:1]  # the schema's default ["Tanh", "Tanh"]
  assert len(names) == per_dir * num_directions, names
  alphas = list(attrs.get("activation_alpha", []))
  betas = list(attrs.get("activation_beta", []))
  acts = []
  for n in names:
    uses_a, uses_b, def_a, def_b = ACT_PARAMS[n]
    a, b = def_a, def_b
    if uses_a and alphas:
      a = alphas.pop(0)
    if uses_b and betas:
      b = betas.pop(0)
    acts.append((n, float(np.float32(a)), float(np.float32(b))))
  return [acts[d * per_dir:(d + 1) * per_dir] for d in range(num_directions)]


def oracle(op, attrs, X, W, R, B=None, seq_lens=None, init_h=None, init_c=None, P=None):
  """Returns Y, Y_h and (LSTM) Y_c in float64."""
  direction = attrs.get("direction", "forward")
  nd = 2 if direction == "bidirectional" else 1
  layout = attrs.get("layout", 0)
  G = GATES[op]
  H = R.shape[-1]
  X = X.astype(np.float64)
  if layout == 1:
    X = X.transpose(1, 0, 2)
    init_h = None if init_h is None else init_h.transpose(1, 0, 2)
    init_c = None if init_c is None else init_c.transpose(1, 0, 2)
  S, NB, _ = X.shape
  clip = attrs.get("clip")
  if clip is not None:
    clip = float(np.float32(clip))  # the kernel sees a float attribute
  cl = (lambda v: v) if clip is None else (lambda v: np.clip(v, -clip, clip))
  acts = parse_activations(op, attrs, nd)
  lens = np.full(NB, S) if seq_lens is None else seq_lens
  Y = np.zeros((S, nd, NB, H))
  Y_h = np.zeros((nd, NB, H))
  Y_c = np.zeros((nd, NB, H))
  for d in range(nd):
    reverse = direction == "reverse" or d == 1
    w = W[d].astype(np.float64)
    r = R[d].astype(np.float64)
    wb = np.zeros(G * H) if B is None else B[d, :G * H].astype(np.float64)
    rb = np.zeros(G * H) if B is None else B[d, G * H:].astype(np.float64)
    p = np.zeros(3 * H) if P is None else P[d].astype(np.float64)
    f = lambda k, v: activation(acts[d][k][0], acts[d][k][1], acts[d][k][2], v)
    for b in range(NB):
      h = np.zeros(H) if init_h is None else init_h[d, b].astype(np.float64)
      c = np.zeros(H) if init_c is None else init_c[d, b].astype(np.float64)
      L = int(lens[b])
      for t in (range(L - 1, -1, -1) if reverse else range(L)):
        x = X[t, b]
        if op == "RNN":
          h = f(0, cl(w @ x + r @ h + wb + rb))
        elif op == "GRU":
          xw = w @ x + wb
          z = f(0, cl(xw[:H] + r[:H] @ h + rb[:H]))
          rr = f(0, cl(xw[H:2 * H] + r[H:2 * H] @ h + rb[H:2 * H]))
          if attrs.get("linear_before_reset", 0):
            hh = f(1, cl(xw[2 * H:] + rr * (r[2 * H:] @ h + rb[2 * H:])))
          else:
            hh = f(1, cl(xw[2 * H:] + r[2 * H:] @ (rr * h) + rb[2 * H:]))
          h = (1.0 - z) * hh + z * h
        else:
          g = w @ x + r @ h + wb + rb
          gi, go, gf, gc = g[:H], g[H:2 * H], g[2 * H:3 * H], g[3 * H:]
          i = f(0, cl(gi + p[:H] * c))
          if attrs.get("input_forget", 0):
            fg = 1.0 - i
          else:
            fg = f(0, cl(gf + p[2 * H:] * c))
          c = fg * c + i * f(1, cl(gc))
          o = f(0, cl(go + p[H:2 * H] * c))
          h = o * f(2, c)
        Y[t, d, b] = h
      if L > 0:
        Y_h[d, b] = h
        Y_c[d, b] = c
  if layout == 1:
    Y = Y.transpose(2, 0, 1, 3)
    Y_h = Y_h.transpose(1, 0, 2)
    Y_c = Y_c.transpose(1, 0, 2)
  return [Y, Y_h, Y_c] if op == "LSTM" else [Y, Y_h]


# ---- C++ literal output ----

DTYPES = {np.dtype(np.float32): "kF32", np.dtype(np.float64): "kF64",
          np.dtype(np.int32): "kI32", np.dtype(np.int64): "kI64"}


def fmt_values(a):
  flat = a.reshape(-1)
  if a.dtype == np.float32:
    vals = ["%.9g" % v for v in flat]
  elif a.dtype == np.float64:
    vals = ["%.17g" % v for v in flat]
  else:
    vals = ["%d" % v for v in flat]
  lines = []
  for k in range(0, len(vals), 8):
    lines.append("       " + ", ".join(vals[k:k + 8]) + ",")
  return "\n".join(lines)


def fmt_lit(a):
  if a is None:
    return "    {},"
  dims = ", ".join(str(d) for d in a.shape)
  return "    {true, DType::%s, {%s}, {\n%s\n    }}," % (DTYPES[a.dtype], dims, fmt_values(a))


def fmt_case(name, op, attrs, inputs, outputs, tol):
  ints, floats, strs, flists, slists = [], [], [], [], []
  for k, v in sorted(attrs.items()):
    if isinstance(v, str):
      strs.append('{"%s", "%s"}' % (k, v))
    elif isinstance(v, int):
      ints.append('{"%s", %d}' % (k, v))
    elif isinstance(v, float):
      floats.append('{"%s", %.9gf}' % (k, v))
    elif all(isinstance(e, str) for e in v):
      slists.append('{"%s", {%s}}' % (k, ", ".join('"%s"' % e for e in v)))
    else:
      flists.append('{"%s", {%s}}' % (k, ", ".join("%.9gf" % e for e in v)))
  out = ["{", '  "%s", "%s",' % (name, op)]
  for group in (ints, floats, strs, flists, slists):
    out.append("  {%s}," % ", ".join(group))
  out.append("  {  // inputs")
  out += [fmt_lit(a) for a in inputs]
  out.append("  },")
  out.append("  {  // outputs")
  out += [fmt_lit(a) for a in outputs]
  out.append("  },")
  out.append("  %g," % tol)
  out.append("},")
  return "\n".join(out)


HEADER = ("// Generated by kernels/reference/testdata/rnn_oracle.py; do not edit.\n"
          "// RnnCase initializers: name, op, int / float / string / float-list / string-list\n"
          "// attributes, inputs and expected outputs in ONNX order ({} = absent), tolerance.\n")


# ---- the ONNX node tests ----

def onnx_cases():
  cases = []
  for d in sorted(glob.glob(os.path.join(ONNX_NODE_DIR, "test_*"))):
    base = os.path.basename(d)
    if not any(k in base for k in ("lstm", "gru", "rnn")):
      continue
    model = onnx.load(os.path.join(d, "model.onnx"))
    node = model.graph.node[0]
    attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
    attrs = {k: (v.decode() if isinstance(v, bytes) else v) for k, v in attrs.items()}
    data = os.path.join(d, "test_data_set_0")
    files = iter(sorted(glob.glob(os.path.join(data, "input_*.pb"))))
    inputs = [None if n == "" else numpy_helper.to_array(onnx.load_tensor(next(files)))
              for n in node.input]
    files = iter(sorted(glob.glob(os.path.join(data, "output_*.pb"))))
    outputs = [None if n == "" else numpy_helper.to_array(onnx.load_tensor(next(files)))
               for n in node.output]
    # Check the oracle against ONNX's expected outputs.
    padded = inputs + [None] * (8 - len(inputs))
    mine = oracle(node.op_type, attrs, *padded)
    for k, e in enumerate(outputs):
      if e is not None:
        np.testing.assert_allclose(mine[k], e, rtol=1e-5, atol=1e-6, err_msg=base)
    cases.append(fmt_case(base[len("test_"):], node.op_type, attrs, inputs, outputs, 1e-5))
  return cases


# ---- oracle cases ----

def make_case(rng, name, op, attrs, S, NB, I, H, dtype=np.float32, bias=True, seq_lens=None,
              init_h=False, init_c=False, peep=False, outputs=(True, True, True)):
  nd = 2 if attrs.get("direction") == "bidirectional" else 1
  G = GATES[op]
  layout = attrs.get("layout", 0)
  u = lambda *shape, s=1.0: (rng.uniform(-s, s, size=shape)).astype(dtype)
  X = u(NB, S, I) if layout else u(S, NB, I)
  W = u(nd, G * H, I, s=0.8)
  R = u(nd, G * H, H, s=0.8)
  B = u(nd, 2 * G * H, s=0.5) if bias else None
  L = None if seq_lens is None else np.array(seq_lens, dtype=np.int32)
  state = lambda on: (u(NB, nd, H) if layout else u(nd, NB, H)) if on else None
  h0 = state(init_h)
  c0 = state(init_c)
  P = u(nd, 3 * H, s=0.5) if peep else None
  inputs = [X, W, R, B, L, h0]
  if op == "LSTM":
    inputs += [c0, P]
  while inputs[-1] is None:
    inputs.pop()
  ref = oracle(op, attrs, *(inputs + [None] * (8 - len(inputs))))
  outs = [o.astype(dtype) if keep else None for o, keep in zip(ref, outputs)]
  tol = 1e-5 if dtype == np.float32 else 1e-12
  return fmt_case(name, op, attrs, inputs, outs, tol)


def oracle_cases():
  rng = np.random.default_rng(20240607)
  c = []
  # LSTM
  c.append(make_case(rng, "lstm_reverse_seq_lens_initial_state", "LSTM",
                     {"hidden_size": 3, "direction": "reverse"}, S=3, NB=3, I=2, H=3,
                     seq_lens=[3, 1, 2], init_h=True, init_c=True))
  c.append(make_case(rng, "lstm_bidirectional_peepholes_clip", "LSTM",
                     {"hidden_size": 3, "direction": "bidirectional", "clip": 0.6},
                     S=4, NB=2, I=3, H=3, seq_lens=[4, 2], init_h=True, init_c=True, peep=True))
  c.append(make_case(rng, "lstm_input_forget_relu", "LSTM",
                     {"hidden_size": 2, "input_forget": 1,
                      "activations": ["Relu", "Tanh", "Sigmoid"]},
                     S=3, NB=2, I=2, H=2, init_c=True, peep=True))
  c.append(make_case(rng, "lstm_bidirectional_alpha_beta_activations", "LSTM",
                     {"hidden_size": 2, "direction": "bidirectional",
                      "activations": ["HardSigmoid", "ScaledTanh", "LeakyRelu",
                                      "Sigmoid", "Affine", "Elu"],
                      "activation_alpha": [0.3, 0.9, 0.05, 0.8, 1.5],
                      "activation_beta": [0.4, 1.2, 0.1]},
                     S=3, NB=2, I=3, H=2, init_h=True, init_c=True))
  c.append(make_case(rng, "lstm_softsign_softplus_thresholded_relu", "LSTM",
                     {"hidden_size": 3, "activations": ["Softsign", "Softplus", "ThresholdedRelu"],
                      "activation_alpha": [0.1]},
                     S=3, NB=2, I=2, H=3, init_c=True))
  c.append(make_case(rng, "lstm_default_alphas", "LSTM",
                     {"hidden_size": 2,
                      "activations": ["HardSigmoid", "Elu", "LeakyRelu"]},
                     S=2, NB=2, I=2, H=2, init_h=True, init_c=True))
  c.append(make_case(rng, "lstm_layout1_bidirectional", "LSTM",
                     {"hidden_size": 3, "direction": "bidirectional", "layout": 1},
                     S=3, NB=2, I=2, H=3, seq_lens=[2, 3], init_h=True, init_c=True, peep=True))
  c.append(make_case(rng, "lstm_zero_length_sequence", "LSTM", {"hidden_size": 2},
                     S=2, NB=3, I=2, H=2, seq_lens=[2, 0, 1], init_h=True, init_c=True))
  c.append(make_case(rng, "lstm_single_step", "LSTM", {"hidden_size": 4},
                     S=1, NB=3, I=5, H=4, init_h=True, init_c=True))
  c.append(make_case(rng, "lstm_only_y_c", "LSTM", {"hidden_size": 2, "direction": "reverse"},
                     S=3, NB=2, I=2, H=2, outputs=(False, False, True)))
  c.append(make_case(rng, "lstm_f64_bidirectional", "LSTM",
                     {"hidden_size": 3, "direction": "bidirectional", "clip": 0.9},
                     S=3, NB=2, I=2, H=3, dtype=np.float64, seq_lens=[1, 3], init_h=True,
                     init_c=True, peep=True))
  # GRU
  c.append(make_case(rng, "gru_linear_before_reset_bidirectional", "GRU",
                     {"hidden_size": 3, "direction": "bidirectional", "linear_before_reset": 1},
                     S=3, NB=2, I=2, H=3, init_h=True))
  c.append(make_case(rng, "gru_reverse_seq_lens", "GRU",
                     {"hidden_size": 3, "direction": "reverse"},
                     S=3, NB=3, I=2, H=3, seq_lens=[3, 1, 2], init_h=True))
  c.append(make_case(rng, "gru_activations_clip", "GRU",
                     {"hidden_size": 2, "activations": ["LeakyRelu", "Softsign"], "clip": 0.5},
                     S=3, NB=2, I=3, H=2, init_h=True))
  c.append(make_case(rng, "gru_bidirectional_alpha_beta_activations", "GRU",
                     {"hidden_size": 2, "direction": "bidirectional",
                      "activations": ["HardSigmoid", "ScaledTanh", "Sigmoid", "Affine"],
                      "activation_alpha": [0.25, 0.7, 0.6], "activation_beta": [0.45, 1.3, -0.2]},
                     S=2, NB=2, I=2, H=2, init_h=True))
  c.append(make_case(rng, "gru_layout1_linear_before_reset_seq_lens", "GRU",
                     {"hidden_size": 2, "layout": 1, "linear_before_reset": 1},
                     S=3, NB=3, I=2, H=2, seq_lens=[1, 3, 2], init_h=True))
  c.append(make_case(rng, "gru_f64_bidirectional_seq_lens", "GRU",
                     {"hidden_size": 2, "direction": "bidirectional"},
                     S=3, NB=2, I=3, H=2, dtype=np.float64, seq_lens=[3, 2], init_h=True))
  # RNN
  c.append(make_case(rng, "rnn_bidirectional_seq_lens", "RNN",
                     {"hidden_size": 3, "direction": "bidirectional"},
                     S=3, NB=3, I=2, H=3, seq_lens=[2, 3, 1], init_h=True))
  c.append(make_case(rng, "rnn_reverse_relu_clip", "RNN",
                     {"hidden_size": 3, "direction": "reverse", "activations": ["Relu"],
                      "clip": 0.4},
                     S=3, NB=2, I=2, H=3, init_h=True))
  c.append(make_case(rng, "rnn_bidirectional_elu_hardsigmoid", "RNN",
                     {"hidden_size": 2, "direction": "bidirectional",
                      "activations": ["Elu", "HardSigmoid"], "activation_alpha": [0.7, 0.3],
                      "activation_beta": [0.6]},
                     S=3, NB=2, I=2, H=2))
  c.append(make_case(rng, "rnn_schema_default_activations", "RNN",
                     {"hidden_size": 2, "activations": ["Tanh", "Tanh"]},
                     S=2, NB=2, I=2, H=2, bias=False))
  c.append(make_case(rng, "rnn_layout1_seq_lens", "RNN", {"hidden_size": 3, "layout": 1},
                     S=3, NB=2, I=2, H=3, seq_lens=[3, 1], init_h=True))
  c.append(make_case(rng, "rnn_f64_scaled_tanh", "RNN",
                     {"hidden_size": 2, "activations": ["ScaledTanh"], "activation_alpha": [1.7],
                      "activation_beta": [0.6]},
                     S=3, NB=2, I=2, H=2, dtype=np.float64, init_h=True))
  return c


def write(path, cases):
  with open(path, "w") as f:
    f.write(HEADER)
    f.write("\n".join(cases))
    f.write("\n")


def main():
  write(os.path.join(HERE, "rnn_onnx_cases.inc"), onnx_cases())
  write(os.path.join(HERE, "rnn_oracle_cases.inc"), oracle_cases())


if __name__ == "__main__":
  main()
