"""Llama-style decoders exported with their decode loop, against PyTorch (ctest:
llama_export_test).

tools/models/llama.py's decoder (RMSNorm, rotary, SwiGLU, grouped-query attention, a KV cache
carried through the loop), scripted and exported at opsets 14 and 17, with random weights. The
exports vary the layers, the heads, the KV heads (1, fewer than the heads, as many), the head
size and the form K and V are repeated in: repeat_interleave (exported as a Loop nested in the
decode loop, with 0 and -1 in its Reshape targets) or expand + reshape. Each compiles
(optimized, and with --no-optimize for the first of each form) and runs a greedy decode of
several prompts and batches: the tokens must equal PyTorch's exactly and every step's logits
within 1e-4; a sampled decode (pre-drawn uniforms, inverse CDF at temperature 0.8) must give
PyTorch's tokens too. Prompts whose top-2 logit gap (or a uniform's distance to a CDF edge) is
below 5e-4 are redrawn, so float rounding cannot flip a token. Exits 77 (a ctest skip) without
PyTorch.

    /usr/bin/python3 llama_export_test.py --vm-compile PATH --vm-run PATH
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (install python3-torch: tools/install-deps.sh test)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "models"))
import llama  # noqa: E402

MARGIN = 5e-4
# (name, opset, layers, heads, kv_heads, head_dim, repeat form)
CASES = [
    ("gqa_interleave", 17, 2, 4, 2, 8, "repeat_interleave"),
    ("gqa_expand", 17, 2, 4, 2, 8, "expand"),
    ("mqa_interleave_op14", 14, 1, 4, 1, 16, "repeat_interleave"),
    ("mha_expand", 14, 2, 4, 4, 8, "expand"),
    ("wide_interleave", 17, 3, 8, 2, 8, "repeat_interleave"),
    ("wide_expand_op14", 14, 1, 8, 4, 16, "expand"),
]


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def greedy_margin(history):
    top = np.sort(history, axis=-1)
    return float((top[..., -1] - top[..., -2]).min())


def sample_margin(cdfs, uniforms):
    return float(np.abs(cdfs - uniforms[..., None]).min())


def run_dvm(args, dvm, inputs, outputs, tmp, tag):
    flags = []
    for name, value in inputs.items():
        path = os.path.join(tmp, f"{tag}-{name}.npy")
        np.save(path, value)
        flags += ["-i", f"{name}={path}"]
    out_dir = os.path.join(tmp, f"out-{tag}")
    run([args.vm_run, dvm] + flags + ["--output-dir", out_dir])
    return [np.load(os.path.join(out_dir, f"{o}.npy")) for o in outputs]


def check_case(args, case, tmp):
    name, opset, layers, heads, kv_heads, head_dim, repeat = case
    failures = []
    torch.manual_seed(sum(map(ord, name)))
    lm = llama.Llama(vocab=64, d=32, layers=layers, heads=heads, kv_heads=kv_heads,
                     head_dim=head_dim, ffn=64, repeat=repeat).eval()
    greedy, sampled = llama.GreedyDecode(lm), llama.SampledDecode(lm)
    prompt = torch.randint(0, 64, (1, 5))
    paths = {}
    for kind, module, example, inputs, outputs, axes in (
            ("greedy", greedy, (prompt, torch.tensor(6)), ["prompt", "max_new_tokens"],
             ["tokens", "logits"], {"prompt": {0: "batch", 1: "prompt_len"}}),
            ("sampled", sampled, (prompt, torch.rand(1, 6)), ["prompt", "uniforms"],
             ["tokens", "cdfs"], {"prompt": {0: "batch", 1: "prompt_len"},
                                  "uniforms": {0: "batch", 1: "steps"}})):
        onnx_path = os.path.join(tmp, f"{name}-{kind}.onnx")
        torch.onnx.export(torch.jit.script(module), example, onnx_path, opset_version=opset,
                          input_names=inputs, output_names=outputs, dynamic_axes=axes)
        paths[kind] = onnx_path
    variants = [("optimized", [])]
    if name in ("gqa_interleave", "gqa_expand"):
        variants.append(("no-optimize", ["--no-optimize"]))
    dvms = {}
    for kind in paths:
        for variant, flags in variants:
            dvms[(kind, variant)] = os.path.join(tmp, f"{name}-{kind}-{variant}.dvm")
            run([args.vm_compile, paths[kind], "-o", dvms[(kind, variant)]] + flags)
    rng = np.random.default_rng(len(name))
    tested = 0
    for batch, prompt_len, steps in ((1, 5, 8), (2, 3, 6), (1, 1, 12)):
        for _ in range(100):  # draw until the margins hold
            p = torch.from_numpy(rng.integers(0, 64, (batch, prompt_len)))
            u = torch.from_numpy(rng.random((batch, steps)).astype(np.float32))
            with torch.no_grad():
                g_tokens, g_logits = greedy(p, torch.tensor(steps))
                s_tokens, s_cdfs = sampled(p, u)
            if (greedy_margin(g_logits.numpy()) > MARGIN and
                    sample_margin(s_cdfs.numpy(), u.numpy()) > MARGIN):
                break
        else:
            failures.append(f"{name}: no input with margins above {MARGIN} in 100 draws")
            continue
        tested += 1
        for variant, _ in variants:
            where = f"{name} {variant} batch {batch} prompt {prompt_len} steps {steps}"
            tokens, logits = run_dvm(args, dvms[("greedy", variant)],
                                     {"prompt": p.numpy(),
                                      "max_new_tokens": np.array(steps, np.int64)},
                                     ["tokens", "logits"], tmp, f"{name}-g-{variant}")
            if not np.array_equal(tokens, g_tokens.numpy()):
                failures.append(f"{where} greedy: {tokens.tolist()} != {g_tokens.tolist()}")
            elif np.abs(logits - g_logits.numpy()).max() > 1e-4:
                failures.append(f"{where}: logits differ by {np.abs(logits - g_logits.numpy()).max()}")
            tokens, _ = run_dvm(args, dvms[("sampled", variant)],
                                {"prompt": p.numpy(), "uniforms": u.numpy()},
                                ["tokens", "cdfs"], tmp, f"{name}-s-{variant}")
            if not np.array_equal(tokens, s_tokens.numpy()):
                failures.append(f"{where} sampled: {tokens.tolist()} != {s_tokens.tolist()}")
    distinct = len(set(g_tokens.numpy().ravel().tolist()))
    print(f"{name}: opset {opset}, {layers} layers, {heads} heads, {kv_heads} KV heads, head "
          f"{head_dim}, {repeat}: {tested} decodes x {len(variants)} builds; last greedy "
          f"decode has {distinct} distinct tokens")
    return failures


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vm-compile", required=True)
    ap.add_argument("--vm-run", required=True)
    args = ap.parse_args()
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in CASES:
            try:
                failures += check_case(args, case, tmp)
            except RuntimeError as e:
                failures.append(f"{case[0]}: {e}")
    for f in failures:
        print("FAIL:", f)
    print(f"{len(CASES)} exports, greedy and sampled: {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
