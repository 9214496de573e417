"""vm-compile --decode (docs/llm.md) on step models whose attention is one fused node per layer
(tools/models/llama_step_fused.py: com.microsoft GroupQueryAttention in ONNX Runtime GenAI's
layout, with rotary inside it and packed QKV or outside it with separate q/k/v; com.microsoft
MultiHeadAttention with past/present; ONNX opset 23 Attention with past/present), built from one
random llama.Llama (ctest: llm_decode_attention_test).

- Greedy tokens, 48 new tokens for prompts of 1, 7 and 16 tokens at batches 1-3 and 64 for one
  more, equal those of PyTorch running tools/models/llama_step.py's step module in a host loop
  (prompts whose top-2 logit gap falls below 5e-4 at some step are redrawn, so float rounding
  cannot flip a token) and those of ONNX Runtime 1.30 running the same step model in a host
  loop (tools/bench/llm/ort_host_loop.js).
- With every dim bounded, the compile report's loop_alloc_sites=0 and no system allocation of
  the VM's pool after the first iteration (vm-run --stats): the KV cache is extended in place
  (docs/llm.md), the tokens still PyTorch's.
- MultiHeadAttention with packed QKV is refused at compile time naming the form.
Exits 77 (a ctest skip) without PyTorch, python3-onnx or ONNX Runtime (onnxruntime-node: set
DYNVM_ORT_DIR or see tests/differential/workers.py).

    /usr/bin/python3 llm_decode_attention_test.py --vm-compile PATH --vm-run PATH [--ort-dir D]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, "..")
try:
    import numpy as np
    import onnx
    import torch
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (install python3-torch and python3-onnx: tools/install-deps.sh test)")
    sys.exit(77)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tools", "models"))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "differential"))
import llama  # noqa: E402
import llama_step  # noqa: E402
import llama_step_fused  # noqa: E402
from workers import find_ort  # noqa: E402

MARGIN = 5e-4
# (batch, prompt length, new tokens)
PROMPTS = ((1, 1, 48), (2, 7, 48), (3, 16, 48), (1, 5, 64))
# The existing step test's GQA shape (tests/llm_decode_test.py: 2 layers, 4 heads over 2 KV
# heads of 16, vocab 128, width 64, ffn 128), its seed.
SHAPE = dict(vocab=128, d=64, layers=2, heads=4, kv_heads=2, head_dim=16, ffn=128)


def run(cmd, ok=True):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if ok and r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r


def feeds(prompt, new):
    return {"prompt": prompt.astype(np.int64), "max_new_tokens": np.array(new, np.int64),
            "temperature": np.array(0, np.float32), "top_k": np.array(0, np.int64),
            "top_p": np.array(1, np.float32), "repetition_penalty": np.array(1, np.float32),
            "seed": np.array(1, np.int64), "stop_token": np.array(-1, np.int64)}


def run_dvm(args, dvm, prompt, new, tmp, tag, extra=(), ok=True):
    flags = []
    for name, value in feeds(prompt, new).items():
        path = os.path.join(tmp, f"{tag}-{name}.npy")
        np.save(path, value)
        flags += ["-i", f"{name}={path}"]
    out_dir = os.path.join(tmp, f"out-{tag}")
    r = run([args.vm_run, dvm] + flags + list(extra) + ["--output-dir", out_dir], ok)
    if not ok:
        return r
    return np.load(os.path.join(out_dir, "tokens.npy")), r.stdout


def run_ort(node_modules, model, variant, lm, prompt, new, tmp):
    spec = {"prompt": prompt.tolist(), "new_tokens": new, "layers": len(lm.layers),
            "kv_heads": llama_step_fused.cache_heads(lm, variant), "head_dim": lm.head_dim,
            "mask_type": "int32" if variant == "gqa_rotary" else "int64",
            "position_ids": variant != "gqa_rotary"}
    path = os.path.join(tmp, "spec.json")
    with open(path, "w") as f:
        json.dump(spec, f)
    r = run(["node", os.path.join(ROOT, "tools", "bench", "llm", "ort_host_loop.js"),
             "--node-modules", node_modules, "--model", model, "--spec", path])
    return np.array(json.loads(r.stdout.strip().splitlines()[-1])["tokens"], np.int64)


def pick_prompt(step, rng, batch, plen, new):
    for _ in range(30):
        prompt = torch.as_tensor(rng.integers(0, SHAPE["vocab"], (batch, plen)))
        want, history = llama_step.greedy(step, prompt, new)
        top = np.sort(history.numpy(), -1)
        if float((top[..., -1] - top[..., -2]).min()) >= MARGIN:
            return prompt.numpy(), want.numpy()
    raise RuntimeError(f"no prompt of {plen} with a top-2 logit gap of {MARGIN}")


def check_variant(args, variant, lm, step, node_modules, tmp, failures):
    model = os.path.join(tmp, f"{variant}.onnx")
    onnx.save(llama_step_fused.build(lm, variant), model)
    dvm = os.path.join(tmp, f"{variant}.dvm")
    run([args.vm_compile, model, "-o", dvm, "--decode"])
    rng = np.random.default_rng(34)
    for batch, plen, new in PROMPTS:
        prompt, want = pick_prompt(step, rng, batch, plen, new)
        got, _ = run_dvm(args, dvm, prompt, new, tmp, f"{variant}-{batch}-{plen}")
        ort = run_ort(node_modules, model, variant, lm, prompt, new, tmp)
        where = f"{variant} batch {batch} prompt {plen}, {new} tokens"
        if got.shape != want.shape or not (got == want).all():
            failures.append(f"{where}: dynvm's tokens differ from PyTorch's\n"
                            f"  dynvm   {got.tolist()}\n  pytorch {want.tolist()}")
        if ort.shape != want.shape or not (ort == want).all():
            failures.append(f"{where}: ONNX Runtime's tokens differ from PyTorch's\n"
                            f"  ort     {ort.tolist()}\n  pytorch {want.tolist()}")
    check_bounded(args, variant, model, step, rng, tmp, failures)
    check_padding(args, variant, dvm, step, rng, tmp, failures)


def check_padding(args, variant, dvm, step, rng, tmp, failures):
    """Prompt rows of different lengths (-1 padding at the end): Attention 23, whose mask is a
    plain mask, gives each row PyTorch's tokens for that row alone; the com.microsoft forms
    (GroupQueryAttention reads the mask as lengths) refuse the padding naming why."""
    lengths = (6, 2)
    padded = np.full((len(lengths), max(lengths)), -1, np.int64)
    wants = []
    for r, n in enumerate(lengths):
        row, want = pick_prompt(step, rng, 1, n, 12)
        padded[r, :n] = row[0]
        wants.append(want[0])
    if variant.startswith("attention23"):
        got, _ = run_dvm(args, dvm, padded, 12, tmp, f"{variant}-padded")
        want = np.stack(wants)
        if got.shape != want.shape or not (got == want).all():
            failures.append(f"{variant} prompts of lengths {lengths}: {got.tolist()} vs "
                            f"PyTorch's {want.tolist()}")
        return
    r = run_dvm(args, dvm, padded, 12, tmp, f"{variant}-padded", ok=False)
    want = "prompt rows of different lengths (-1 padding) cannot be decoded: "
    if r.returncode == 0 or want not in r.stderr:
        failures.append(f"{variant} padded prompt: exit {r.returncode}, {r.stderr}")


def check_bounded(args, variant, model, step, rng, tmp, failures):
    """Every dim bounded: the cache is allocated once and appended in place, nothing is
    allocated after the first token (vm-run --stats), and the tokens are still PyTorch's."""
    dvm = os.path.join(tmp, f"{variant}-bounded.dvm")
    r = run([args.vm_compile, model, "-o", dvm, "--decode", "--bound", "batch=2", "--bound",
             "prompt_len=8", "--bound", "max_new_tokens=40", "--report"])
    report = r.stdout + r.stderr
    if "loop_alloc_sites=0" not in report:
        failures.append(f"{variant} bounded: the loop allocates ({[ln for ln in report.splitlines() if 'loop_alloc_sites' in ln]})")
    prompt, want = pick_prompt(step, rng, 2, 8, 40)
    got, out = run_dvm(args, dvm, prompt, 40, tmp, f"{variant}-bounded", ["--stats"])
    if got.shape != want.shape or not (got == want).all():
        failures.append(f"{variant} bounded: {got.tolist()} vs PyTorch's {want.tolist()}")
    after = [ln for ln in out.splitlines() if ln.startswith("run_system_allocs=")]
    if len(after) != 1 or not after[0].endswith("after_first_iteration=0"):
        failures.append(f"{variant} bounded, 40 tokens: {after} (want after_first_iteration=0)")


def check_refusal(args, lm, tmp, failures):
    """A form dynvm does not run is refused at compile time naming it: MultiHeadAttention with
    packed QKV (no key and value inputs; ONNX Runtime's CPU kernel has none either)."""
    model = llama_step_fused.build(lm, "mha")
    for node in model.graph.node:
        if node.op_type == "MultiHeadAttention":
            node.input[1] = ""
            node.input[2] = ""
    path = os.path.join(tmp, "mha_packed.onnx")
    onnx.save(model, path)
    r = run([args.vm_compile, path, "-o", path + ".dvm", "--decode"], ok=False)
    want = "MultiHeadAttention (com.microsoft): key and value are required (packed QKV is not"
    if r.returncode == 0 or want not in r.stderr:
        failures.append(f"MultiHeadAttention packed QKV: exit {r.returncode}, {r.stderr}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vm-compile", required=True)
    ap.add_argument("--vm-run", required=True)
    ap.add_argument("--ort-dir", default="")
    ap.add_argument("--variants", default=",".join(llama_step_fused.VARIANTS))
    args = ap.parse_args()
    node_modules = find_ort(args.ort_dir or None)
    if node_modules is None:
        print("SKIPPED: ONNX Runtime (onnxruntime-node) not found: set DYNVM_ORT_DIR")
        return 77
    torch.manual_seed(len("gqa") * 7 + SHAPE["layers"])
    lm = llama.Llama(repeat="expand", **SHAPE).eval()
    step = llama_step.LlamaStep(lm)
    failures = []
    variants = args.variants.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        for variant in variants:
            check_variant(args, variant, lm, step, node_modules, tmp, failures)
        check_refusal(args, lm, tmp, failures)
    for f in failures:
        print("FAIL", f)
    print(f"{'FAILED' if failures else 'PASSED'}: {len(variants)} step models "
          f"({', '.join(variants)}), {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
