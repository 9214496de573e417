"""vm-compile --decode (compiler/onnx/decode_wrap.h, docs/llm.md) on Llama-style step models
exported from PyTorch in Optimum's layout (tools/models/llama_step.py: input_ids,
attention_mask, position_ids, past_key_values.{i}.key/value -> logits, present.{i}.key/value;
random weights, attention as plain MatMul/Softmax), against PyTorch running the same step module
in a host loop (ctest: llm_decode_test).

- Greedy: 48 new tokens for prompts of several lengths and batches equal PyTorch's exactly
  (prompts whose top-2 logit gap falls below 5e-4 at some step are redrawn, so float rounding
  cannot flip a token), for GQA and MHA shapes, f32 and with --quantize-weights int8.
- Sampled (temperature 0.8, a seed): the tokens equal those of PyTorch's logits drawn with the
  independent Philox/inverse-CDF implementation of tools/lm/export_charlm.py (docs/sampling.md);
  seeds whose uniform falls within 1e-4 of a CDF edge are redrawn.
- top_k, top_p, repetition_penalty (check_filters): top_k = 1 and top_p = 1e-6 at temperature
  0.8 give the greedy tokens; sampled with all three, and greedy with a penalty, the tokens equal
  a NumPy implementation of Hugging Face generate's processors (HfPicker) on PyTorch's logits;
  bad values are errors naming the input.
- stop_token ends the loop once every row has produced it; a stop token outside the vocabulary
  is an error naming the check; a prompt longer than --bound prompt_len is an error naming the
  symbol; a model that is not a step model is refused naming the unexpected or missing input.
Exits 77 (a ctest skip) without PyTorch or python3-onnx.

    /usr/bin/python3 llm_decode_test.py --vm-compile PATH --vm-run PATH
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    import torch
    from onnx import TensorProto, helper
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (install python3-torch and python3-onnx: tools/install-deps.sh test)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "models"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "lm"))
import llama  # noqa: E402
import llama_step  # noqa: E402
from export_charlm import philox_uniform, sample_rows  # noqa: E402

MARGIN = 5e-4
NEW = 48
# (name, layers, heads, kv_heads, head_dim, vocab, width, ffn)
# "wide": weights of at least 16K floats, which vm-compile stores as panels of 16 columns
# (compiler/transpose_weights.h; the others' are below the rule's size and stay plain).
CASES = [("gqa", 2, 4, 2, 16, 128, 64, 128), ("mha", 1, 4, 4, 8, 96, 32, 64),
         ("wide", 1, 4, 2, 32, 128, 128, 256)]


def run(cmd, ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r


RUNS = [0]


def run_dvm(args, dvm, inputs, tmp, tag, ok=True):
    RUNS[0] += 1
    flags = []
    for name, value in inputs.items():
        path = os.path.join(tmp, f"{tag}-{name}.npy")
        np.save(path, value)
        flags += ["-i", f"{name}={path}"]
    out_dir = os.path.join(tmp, f"out-{tag}")
    r = run([args.vm_run, dvm] + flags + ["--output-dir", out_dir], ok)
    if not ok:
        return r
    return np.load(os.path.join(out_dir, "tokens.npy"))


def feeds(prompt, new, temperature=0.0, seed=1, stop=-1, top_k=0, top_p=1.0, penalty=1.0):
    return {"prompt": prompt.numpy().astype(np.int64), "max_new_tokens": np.array(new, np.int64),
            "temperature": np.array(temperature, np.float32), "top_k": np.array(top_k, np.int64),
            "top_p": np.array(top_p, np.float32),
            "repetition_penalty": np.array(penalty, np.float32), "seed": np.array(seed, np.int64),
            "stop_token": np.array(stop, np.int64)}


class HfPicker:
    """The oracle of top-k, top-p and the repetition penalty: Hugging Face generate's order
    (RepetitionPenaltyLogitsProcessor over prompt + output, then temperature, TopK (ties with the
    k-th logit kept), TopP (the smallest most-probable set of mass >= p)) in NumPy, drawing with
    the independent Philox of tools/lm/export_charlm.py by inverse CDF in index order
    (docs/sampling.md). `margin` is the closest any decision came to flipping: the uniform to a
    CDF edge, the top-p mass to p, the k-th logit to the next, the greedy pick to the runner-up."""

    def __init__(self, prompt, temperature, top_k, top_p, penalty, seed):
        self.seen = [list(r) for r in prompt.numpy()]
        self.t, self.k, self.p, self.pen, self.seed = temperature, top_k, top_p, penalty, seed
        self.margin = 1.0

    def __call__(self, logits, i):
        out = [self.pick(row.astype(np.float64), r, i) for r, row in enumerate(logits)]
        for r, tok in enumerate(out):
            self.seen[r].append(tok)
        return np.array(out, np.int64)

    def pick(self, x, r, step):
        x = x.copy()
        ids = np.unique(np.array(self.seen[r]))
        x[ids] = np.where(x[ids] < 0, x[ids] * np.float64(np.float32(self.pen)),
                          x[ids] / np.float64(np.float32(self.pen)))
        desc = np.sort(x)[::-1]
        if self.t <= 0:
            self.margin = min(self.margin, desc[0] - desc[1])
            return int(np.argmax(x))
        if 0 < self.k < len(x):
            self.margin = min(self.margin, desc[self.k - 1] - desc[self.k])
            x = np.where(x < desc[self.k - 1], -np.inf, x)
        w = np.exp((x - x.max()) / np.float64(np.float32(self.t)))
        if self.p < 1:
            order = np.lexsort((np.arange(len(w)), -w))
            mass = np.cumsum(w[order]) / w.sum()
            p = np.float64(np.float32(self.p))
            n = int(np.argmax(mass >= p)) + 1
            self.margin = min(self.margin, float(np.abs(mass - p).min()))
            w[order[n:]] = 0
        c = np.cumsum(w) / w.sum()
        u = philox_uniform(self.seed, step, r)
        self.margin = min(self.margin, float(np.abs(c - u).min()))
        return int(np.argmax(c > u))


def sample_margin(history, temperature, seed):
    m = 1.0
    for i, logits in enumerate(history.transpose(1, 0, 2).astype(np.float64)):
        for r, row in enumerate(logits):
            p = np.exp((row - row.max()) / temperature)
            c = np.cumsum(p) / p.sum()
            m = min(m, float(np.abs(c - philox_uniform(seed, i, r)).min()))
    return m


def clear_prompt(step, rng, vocab, batch, plen):
    """A random prompt [batch, plen] whose greedy steps keep a top-2 logit gap of at least MARGIN
    (redrawn up to 20 times), and PyTorch's NEW greedy tokens for it."""
    for _ in range(20):
        prompt = torch.as_tensor(rng.integers(0, vocab, (batch, plen)))
        want, history = llama_step.greedy(step, prompt, NEW)
        top = np.sort(history.numpy(), -1)
        if float((top[..., -1] - top[..., -2]).min()) >= MARGIN:
            break
    return prompt, want


def check_case(args, case, tmp, failures):
    name, layers, heads, kv_heads, head_dim, vocab, width, ffn = case
    torch.manual_seed(len(name) * 7 + layers)
    lm = llama.Llama(vocab=vocab, d=width, layers=layers, heads=heads, kv_heads=kv_heads,
                     head_dim=head_dim, ffn=ffn, repeat="expand").eval()
    step = llama_step.LlamaStep(lm)
    path = os.path.join(tmp, f"{name}.onnx")
    llama_step.export(step, path)
    dvms = {}
    for q in ("f32", "int8"):
        dvms[q] = os.path.join(tmp, f"{name}-{q}.dvm")
        extra = [] if q == "f32" else ["--quantize-weights", "int8", "--quantize-min-bytes", "0"]
        r = run([args.vm_compile, path, "-o", dvms[q], "--decode", "--report"] + extra)
        packed = [ln for ln in r.stdout.splitlines() if ln.startswith("pack_weights: ")]
        want_packed = "pack_weights: 6" if name == "wide" and q == "f32" else "pack_weights: 0"
        if q == "f32" and packed != [want_packed]:
            failures.append(f"{name}: vm-compile --report says {packed}, want {want_packed}")
    rng = np.random.default_rng(3)
    for batch, plen in ((1, 1), (2, 7), (3, 16)):
        prompt, want = clear_prompt(step, rng, vocab, batch, plen)
        got = run_dvm(args, dvms["f32"], feeds(prompt, NEW), tmp, f"{name}-{batch}")
        if got.shape != want.shape or not (got == want.numpy()).all():
            failures.append(f"{name} batch {batch} prompt {plen}: greedy tokens differ\n"
                            f"  dynvm   {got.tolist()}\n  pytorch {want.tolist()}")
        got8 = run_dvm(args, dvms["int8"], feeds(prompt, NEW), tmp, f"{name}-{batch}-q")
        # int8 weights: the first tokens match f32's (a random model's later logit gaps are
        # smaller than int8's rounding).
        if got8.shape != want.shape or not (got8[:, :4] == want.numpy()[:, :4]).all():
            failures.append(f"{name} batch {batch}: int8 first tokens {got8[:, :4].tolist()} "
                            f"vs {want.numpy()[:, :4].tolist()}")
    want_greedy = (prompt, want)
    # Sampled, temperature 0.8.
    prompt = torch.as_tensor(rng.integers(0, vocab, (2, 5)))
    for seed in range(1, 40):
        want, history = llama_step.greedy(step, prompt, 24,
                                          pick=lambda l, i: sample_rows(l, 0.8, seed, i))
        if sample_margin(history.numpy(), 0.8, seed) >= 1e-4:
            break
    got = run_dvm(args, dvms["f32"], feeds(prompt, 24, 0.8, seed), tmp, f"{name}-sampled")
    if got.shape != want.shape or not (got == want.numpy()).all():
        failures.append(f"{name} sampled seed {seed}: {got.tolist()} vs {want.tolist()}")
    check_filters(args, step, dvms["f32"], want_greedy, vocab, tmp, name, failures)
    check_ragged(args, step, dvms["f32"], vocab, tmp, name, failures)
    # Stop token: every row stops at its first occurrence; the loop ends when all have.
    want, _ = llama_step.greedy(step, prompt[:1], NEW)
    stop = int(want[0, 5])
    first = int(np.argmax(want[0].numpy() == stop))
    got = run_dvm(args, dvms["f32"], feeds(prompt[:1], NEW, stop=stop), tmp, f"{name}-stop")
    if got.shape != (1, first + 1) or not (got == want.numpy()[:, :first + 1]).all():
        failures.append(f"{name} stop {stop}: {got.tolist()} vs the first {first + 1} of "
                        f"{want.tolist()}")
    for bad in (vocab, -2):
        r = run_dvm(args, dvms["f32"], feeds(prompt, 4, stop=bad), tmp, f"{name}-bad", ok=False)
        if r.returncode == 0 or "stop_token must be -1 or a token id in [0, " not in r.stderr:
            failures.append(f"{name} stop_token {bad}: {r.returncode} {r.stderr}")
    # A prompt longer than the bound.
    bounded = os.path.join(tmp, f"{name}-bounded.dvm")
    run([args.vm_compile, path, "-o", bounded, "--decode", "--bound", "prompt_len=4",
         "--bound", "max_new_tokens=16", "--bound", "batch=2"])
    r = run_dvm(args, bounded, feeds(prompt, 4), tmp, f"{name}-long", ok=False)
    if r.returncode == 0 or "prompt_len" not in r.stderr:
        failures.append(f"{name} prompt of 5 over a bound of 4: {r.returncode} {r.stderr}")
    got = run_dvm(args, bounded, feeds(prompt[:, :4], 16), tmp, f"{name}-bounded")
    want, _ = llama_step.greedy(step, prompt[:, :4], 16)
    if not (got == want.numpy()).all():
        failures.append(f"{name} bounded: {got.tolist()} vs {want.tolist()}")
    check_bounded_steady_state(args, bounded, prompt[:1, :4], vocab, tmp, name, failures)


def check_ragged(args, step, dvm, vocab, tmp, name, failures):
    """Prompts of different lengths in one batch, each row padded with -1 at its end: every
    row's greedy tokens equal PyTorch's for that row decoded alone (its own positions, no
    padding), and a malformed padding is refused naming the check."""
    rng = np.random.default_rng(11)
    lengths = (7, 3, 5, 1)
    padded = np.full((len(lengths), max(lengths)), -1, np.int64)
    wants = []
    for r, n in enumerate(lengths):
        row, want = clear_prompt(step, rng, vocab, 1, n)
        padded[r, :n] = row.numpy()[0]
        wants.append(want.numpy()[0])
    want = np.stack(wants)
    got = run_dvm(args, dvm, feeds(torch.as_tensor(padded), NEW), tmp, f"{name}-ragged")
    if got.shape != want.shape or not (got == want).all():
        failures.append(f"{name} prompts of lengths {lengths}: greedy tokens differ\n"
                        f"  dynvm   {got.tolist()}\n  pytorch {want.tolist()}")
    hole, empty, negative = padded.copy(), padded.copy(), padded.copy()
    hole[1, 1] = -1  # a -1 before a token
    empty[3, 0] = -1  # a row of padding only
    negative[2, 5] = -2  # padding must be -1
    for bad, what in ((hole, "then -1 as padding"), (empty, "at least one token"),
                      (negative, "then -1 as padding")):
        r = run_dvm(args, dvm, feeds(torch.as_tensor(bad), 4), tmp, f"{name}-badpad", ok=False)
        if r.returncode == 0 or "decode_prompt_check" not in r.stderr or what not in r.stderr:
            failures.append(f"{name} malformed padding ({what}): {r.returncode} {r.stderr}")


def check_filters(args, step, dvm, greedy, vocab, tmp, name, failures):
    """top_k, top_p and repetition_penalty: top_k = 1 and a tiny top_p are greedy at any
    temperature; the tokens sampled with all three and those of a penalized greedy run equal
    the NumPy oracle's (HfPicker) on PyTorch's logits, and the penalty changes the greedy
    tokens; bad values are errors naming the input."""
    prompt, want = greedy
    new = want.shape[1]
    for k, p, tag in ((1, 1.0, "top_k=1"), (0, 1e-6, "top_p=1e-6")):
        got = run_dvm(args, dvm, feeds(prompt, new, 0.8, 3, top_k=k, top_p=p), tmp, f"{name}-{k}")
        if got.shape != want.shape or not (got == want.numpy()).all():
            failures.append(f"{name} {tag} at temperature 0.8 is not greedy: {got.tolist()} vs "
                            f"{want.tolist()}")
    rng = np.random.default_rng(5)
    # (temperature, top_k, top_p, penalty): sampled with all three; penalized greedy.
    for t, k, p, pen in ((0.8, 10, 0.9, 1.3), (0.0, 0, 1.0, 1.5)):
        for attempt in range(40):
            prompt = torch.as_tensor(rng.integers(0, vocab, (2, 6)))
            seed = attempt + 1
            picker = HfPicker(prompt, t, k, p, pen, seed)
            oracle, _ = llama_step.greedy(step, prompt, 24, pick=picker)
            if picker.margin >= (MARGIN if t <= 0 else 1e-4):
                break
        got = run_dvm(args, dvm, feeds(prompt, 24, t, seed, top_k=k, top_p=p, penalty=pen), tmp,
                      f"{name}-filters-{k}")
        if got.shape != oracle.shape or not (got == oracle.numpy()).all():
            failures.append(f"{name} temperature {t} top_k {k} top_p {p} penalty {pen} seed "
                            f"{seed}: {got.tolist()} vs the oracle's {oracle.tolist()}")
        if t <= 0:
            plain, _ = llama_step.greedy(step, prompt, 24)
            if (plain == oracle).all():
                failures.append(f"{name}: penalty {pen} changed no greedy token (vacuous)")
    for key, value in (("top_k", -1), ("top_p", 0.0), ("top_p", 1.5),
                       ("repetition_penalty", 0.0)):
        kw = {"top_k": -1} if key == "top_k" else {"top_p": value} if key == "top_p" else \
            {"penalty": value}
        r = run_dvm(args, dvm, feeds(prompt, 4, 0.8, **kw), tmp, f"{name}-bad-{key}", ok=False)
        if r.returncode == 0 or f"Sample: {key} must be" not in r.stderr:
            failures.append(f"{name} {key}={value}: {r.returncode} {r.stderr}")


def check_bounded_steady_state(args, dvm, prompt, vocab, tmp, name, failures):
    """Compiled with every dim bounded, the KV cache is allocated once at prompt_len + max_new_tokens - 1
    and appended in place: no system allocation after the first iteration (the VM pool's
    counter, vm-run --stats; tests/decode_alloc_test.cc counts malloc itself, with the
    reference and the default kernels). The streamed tokens are the returned ones, for 0, 1
    and 16 new tokens (the prompt step's token is emitted only when one is asked for)."""
    vocab_path = os.path.join(tmp, "vocab.txt")
    with open(vocab_path, "w") as f:
        f.write("".join(f"{0x4e00 + i}\n" for i in range(vocab)))
    for new in (0, 1, 16):
        flags = []
        for key, value in feeds(prompt, new).items():
            path = os.path.join(tmp, f"steady-{key}.npy")
            np.save(path, value)
            flags += ["-i", f"{key}={path}"]
        out_dir = os.path.join(tmp, f"steady-{name}-{new}")
        r = run([args.vm_run, dvm] + flags + ["--stats", "--vocab", vocab_path,
                                              "--stream-prefix", "S:", "--output-dir", out_dir])
        got = np.load(os.path.join(out_dir, "tokens.npy"))
        text = "".join(chr(0x4e00 + int(t)) for t in got[0])
        if got.shape != (1, new) or f"S:{text}\n" not in r.stdout:
            failures.append(f"{name} {new} new tokens: returned {got.tolist()}, streamed "
                            f"{r.stdout!r}")
        after = [ln for ln in r.stdout.splitlines() if ln.startswith("run_system_allocs=")]
        want = "after_first_iteration=" + ("0" if new > 1 else "none")
        if len(after) != 1 or not after[0].endswith(want):
            failures.append(f"{name} {new} new tokens, bounded: {after} (want {want})")


def merge_decoder(path, merged_path, kv_heads, head_dim):
    """Optimum's merged-decoder layout (decoder_model_merged.onnx) built from a step model: the
    inputs plus `use_cache_branch` (bool [1]) and one If whose then-branch is the step (reading
    the past) and whose else-branch is the step on an empty past it makes itself (reading no
    past input), each branch's values renamed apart, the weights initializers of the outer
    graph."""
    m = onnx.load(path)
    g = m.graph
    past = {i.name for i in g.input if i.name.startswith("past_key_values.")}

    def branch(prefix, no_past):
        nodes = []
        rename = {}
        if no_past:
            shape = f"{prefix}ids_shape"
            nodes += [helper.make_node("Shape", ["input_ids"], [shape], start=0, end=1),
                      helper.make_node("Constant", [], [f"{prefix}rest"],
                                       value=helper.make_tensor("r", TensorProto.INT64, [3],
                                                                [kv_heads, 0, head_dim])),
                      helper.make_node("Concat", [shape, f"{prefix}rest"], [f"{prefix}dims"],
                                       axis=0),
                      helper.make_node("ConstantOfShape", [f"{prefix}dims"], [f"{prefix}empty"],
                                       value=helper.make_tensor("z", TensorProto.FLOAT, [1], [0]))]
            rename.update({n: f"{prefix}empty" for n in past})
        for n in g.node:
            for o in n.output:
                rename.setdefault(o, prefix + o)
        for n in g.node:
            c = onnx.NodeProto()
            c.CopyFrom(n)
            c.name = prefix + n.name
            for k, v in enumerate(c.input):
                c.input[k] = rename.get(v, v)
            for k, v in enumerate(c.output):
                c.output[k] = rename.get(v, v)
            nodes.append(c)
        outs = [helper.make_tensor_value_info(rename[o.name], o.type.tensor_type.elem_type, None)
                for o in g.output]
        return helper.make_graph(nodes, prefix + "branch", [], outs)

    cond = helper.make_tensor_value_info("use_cache_branch", TensorProto.BOOL, [1])
    node = helper.make_node("If", ["use_cache_branch"], [o.name for o in g.output],
                            name="optimum::if", then_branch=branch("with_past/", False),
                            else_branch=branch("no_past/", True))
    merged = helper.make_graph([node], "merged", list(g.input) + [cond], list(g.output),
                               list(g.initializer))
    out = helper.make_model(merged, opset_imports=list(m.opset_import))
    onnx.save(out, merged_path)


def check_merged(args, tmp, failures):
    """Optimum's merged decoder (use_cache_branch): --decode runs the no-past branch on the
    prompt and the with-past branch in the loop; greedy tokens equal PyTorch's, the cache still
    appended in place (no allocation after the first token, bounded)."""
    torch.manual_seed(11)
    lm = llama.Llama(vocab=128, d=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128,
                     repeat="expand").eval()
    step = llama_step.LlamaStep(lm)
    path = os.path.join(tmp, "merged-step.onnx")
    llama_step.export(step, path)
    merged = os.path.join(tmp, "merged.onnx")
    merge_decoder(path, merged, 2, 16)
    dvm = os.path.join(tmp, "merged.dvm")
    run([args.vm_compile, merged, "-o", dvm, "--decode"])
    rng = np.random.default_rng(5)
    for batch, plen in ((1, 3), (2, 9)):
        prompt, want = clear_prompt(step, rng, 128, batch, plen)
        got = run_dvm(args, dvm, feeds(prompt, NEW), tmp, f"merged-{batch}")
        if got.shape != want.shape or not (got == want.numpy()).all():
            failures.append(f"merged decoder batch {batch} prompt {plen}: greedy tokens differ\n"
                            f"  dynvm   {got.tolist()}\n  pytorch {want.tolist()}")
    bounded = os.path.join(tmp, "merged-bounded.dvm")
    run([args.vm_compile, merged, "-o", bounded, "--decode", "--bound", "prompt_len=4",
         "--bound", "max_new_tokens=16", "--bound", "batch=2"])
    check_bounded_steady_state(args, bounded, prompt[:1, :4], 128, tmp, "merged", failures)
    # A use_cache_branch that is not a bool scalar is refused naming it.
    m = onnx.load(merged)
    m.graph.input[-1].type.tensor_type.elem_type = TensorProto.INT64
    bad = os.path.join(tmp, "merged-bad.onnx")
    onnx.save(m, bad)
    r = run([args.vm_compile, bad, "-o", bad + ".dvm", "--decode"], ok=False)
    if r.returncode == 0 or "input 'use_cache_branch' must be a bool" not in r.stderr:
        failures.append(f"use_cache_branch of int64: exit {r.returncode}, {r.stderr}")


def check_refusals(args, tmp, failures):
    def model(inputs, outputs):
        nodes = [helper.make_node("Identity", [inputs[0][0]], [o[0]]) for o in outputs]
        g = helper.make_graph(nodes, "m", [helper.make_tensor_value_info(n, t, d) for n, t, d in inputs],
                              [helper.make_tensor_value_info(n, t, d) for n, t, d in outputs])
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
        p = os.path.join(tmp, f"refuse{len(failures)}-{len(inputs)}-{len(outputs)}.onnx")
        onnx.save(m, p)
        return p

    f, i = TensorProto.FLOAT, TensorProto.INT64
    cache = [("past_key_values.0.key", f, ["b", 2, "p", 4]), ("past_key_values.0.value", f, ["b", 2, "p", 4])]
    outs = [("logits", f, ["b", "s", 8]), ("present.0.key", f, None), ("present.0.value", f, None)]
    cases = [
        ([("input_ids", i, ["b", "s"]), ("attention_mask", i, ["b", "t"]), ("pixel_values", f, [1])] + cache,
         outs, "unexpected input 'pixel_values'"),
        ([("input_ids", i, ["b", "s"])] + cache, outs, "missing input 'attention_mask'"),
        ([("input_ids", i, ["b", "s"]), ("attention_mask", i, ["b", "t"]), cache[0]], outs,
         "missing input 'past_key_values.0.value'"),
        ([("input_ids", i, ["b", "s"]), ("attention_mask", i, ["b", "t"])] + cache, outs[:2],
         "missing output 'present.0.value'"),
    ]
    for inputs, outputs, message in cases:
        p = model(inputs, outputs)
        r = run([args.vm_compile, p, "-o", p + ".dvm", "--decode"], ok=False)
        if r.returncode == 0 or message not in r.stderr:
            failures.append(f"refusal '{message}': exit {r.returncode}, {r.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vm-compile", required=True)
    ap.add_argument("--vm-run", required=True)
    args = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            check_case(args, case, tmp, failures)
        check_merged(args, tmp, failures)
        check_refusals(args, tmp, failures)
    for f in failures:
        print("FAIL", f)
    print(f"{'FAILED' if failures else 'PASSED'}: {len(CASES)} step models, {RUNS[0]} decode runs, "
          f"{len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
