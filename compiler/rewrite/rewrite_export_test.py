"""Proof of the pattern rewrites on real torch.onnx.export output (ctest: rewrite_export_test).

For every case of export_modules.py at every opset listed: export a module of random sizes,
compile it with rewrites (vm-compile --report) and without (--no-optimize), check from the
report that the expected rules fired (or, for a near miss, did not) and that no kernel of the
decomposed form is left, run both programs on the same inputs and require equal outputs (and
equal to PyTorch's) within tolerance. The randomized cases (an nn.TransformerEncoderLayer and a
GPT block) draw their sizes and opset from a seed printed at the start (DYNVM_REWRITE_SEED sets
it). Exits 77 (a ctest skip) when PyTorch is missing.

    /usr/bin/python3 rewrite_export_test.py --vm-compile PATH --vm-run PATH
"""
import argparse
import os
import random
import re
import subprocess
import sys
import tempfile
import time

try:
    import numpy as np
    import torch
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (install python3-torch: tools/install-deps.sh test)")
    sys.exit(77)

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import export_modules  # noqa: E402

OLD = [11, 13, 14]
ALL = OLD + [17]

# case -> (opsets, {rule: True (fired at least once) | False (never fired)}, ops that must be
# gone from the optimized program's kernels)
CASES = {
    "layer_norm": (OLD, {"layer_norm": True, "layer_norm_scale": True, "layer_norm_bias": True},
                   ["ReduceMean", "Pow", "Sqrt"]),
    "layer_norm_opset17": ([17], {}, ["ReduceMean"]),
    "layer_norm_2d": (OLD, {"layer_norm": True, "layer_norm_scale": True}, ["ReduceMean"]),
    "layer_norm_no_affine": (OLD, {"layer_norm": True}, ["ReduceMean"]),
    "layer_norm_by_hand": (ALL, {"layer_norm": True, "layer_norm_scale": True}, ["ReduceMean"]),
    "layer_norm_other_axis": ([14], {"layer_norm": False}, []),
    "layer_norm_shared": ([14], {"layer_norm": False}, []),
    "pow_2": (ALL, {"pow_const": True}, ["Pow"]),
    "pow_3": ([14], {"pow_const": True}, ["Pow"]),
    "pow_half": ([14], {"pow_const": False}, []),  # Sqrt is not pow at -inf (pow_const.cc)
    "pow_1": ([14], {"pow_const": True}, ["Pow"]),
    "pow_m1": ([14], {"pow_const": True}, ["Pow"]),
    "pow_2_5": ([14], {"pow_const": False}, []),
    "pow_tensor": ([14], {"pow_const": False}, []),
    "gelu": (ALL, {"gelu": True}, ["Erf"]),
    "gelu_tanh": (ALL, {"gelu_tanh": True}, ["Tanh"]),
    "gelu_other_constant": ([14], {"gelu": False}, []),
    "gelu_shared": ([14], {"gelu": False}, []),
    "silu": (ALL, {"silu": True}, ["Sigmoid"]),
    "silu_other_input": ([14], {"silu": False}, []),
    "swiglu": (ALL, {"silu": True, "swiglu": True}, ["Sigmoid", "dynvm::Silu"]),
    "hard_swish": ([11, 13], {"hard_swish": True}, ["HardSigmoid"]),
    "mha": (ALL, {"attention": True, "attention_transpose": True}, ["Softmax"]),
    "mha_padded": (ALL, {"attention": True, "attention_transpose": True}, ["Softmax"]),
    # need_weights=True: attention refused, Q's and K's head Transposes become strides.
    "mha_weights": ([14], {"attention": False, "matmul_transpose": True}, []),
    # attention refused: the product's K Transpose becomes strides all the same.
    "attention_other_axis": ([14], {"attention": False, "matmul_transpose": True}, []),
    "attention_mask_bigger": ([14], {"attention": False}, []),
    "rms_norm_t5": (ALL, {"rms_norm": True, "rms_norm_scale": True}, ["ReduceMean", "Sqrt", "Mul"]),
    "rms_norm_llama": (ALL, {"rms_norm": True, "rms_norm_scale": True},
                       ["ReduceMean", "Sqrt", "Mul", "Cast"]),
    "rms_norm_mul_div": (ALL, {"rms_norm": True, "rms_norm_scale": True},
                         ["ReduceMean", "Sqrt", "Mul"]),
    "rms_norm_no_weight": ([14], {"rms_norm": True}, ["ReduceMean", "Sqrt"]),
    "rms_norm_other_axis": ([14], {"rms_norm": False}, []),
    "rms_norm_no_keepdims": ([14], {"rms_norm": False}, []),
    "rms_norm_shared": ([14], {"rms_norm": False}, []),
    "rms_norm_eps_input": ([14], {"rms_norm": False}, []),
    # Llama / GPT-NeoX rotary (rotate_half) in full and partial form; the sign on the first half
    # is a near miss.
    "rope": (ALL, {"rotate_half": True}, ["Neg", "Concat"]),
    "rope_partial": (ALL, {"rotate_half": True}, ["Neg"]),
    "rope_sign_first": ([14], {"rotate_half": False}, []),
    # nn.Linear: MatMul + Add at 3-D input, Gemm transB=1 at 2-D, then an activation.
    "linear": (ALL, {"matmul_bias": True}, ["MatMul", "Add"]),
    "linear_relu": (ALL, {"matmul_bias": True, "linear_activation": True},
                    ["MatMul", "Add", "Relu"]),
    "linear_gelu": (ALL, {"matmul_bias": True, "gelu": True, "linear_activation": True},
                    ["MatMul", "Add", "Erf", "dynvm::Gelu"]),
    "linear_gelu_tanh": (ALL, {"matmul_bias": True, "gelu_tanh": True, "linear_activation": True},
                         ["MatMul", "Add", "Tanh", "dynvm::GeluTanh"]),
    "linear_tanh": (ALL, {"matmul_bias": True, "linear_activation": True}, ["MatMul", "Tanh"]),
    "linear_sigmoid": (ALL, {"matmul_bias": True, "linear_activation": True},
                       ["MatMul", "Sigmoid"]),
    "linear_silu": (ALL, {"matmul_bias": True, "silu": True, "linear_activation": True},
                    ["MatMul", "Sigmoid", "dynvm::Silu"]),
    "linear_relu_2d": (ALL, {"gemm_activation": True}, ["Gemm", "Relu"]),
    "linear_gelu_2d": (ALL, {"gelu": True, "gemm_activation": True}, ["Gemm", "dynvm::Gelu"]),
    "linear_bias_other_shape": ([14], {"matmul_bias": False}, []),
    "linear_product_shared": ([14], {"matmul_bias": False}, []),
    "linear_act_shared": ([14], {"matmul_bias": True, "linear_activation": False}, []),
    # Transposes before a MatMul outside attention become operand strides (dynvm::MatMul).
    "matmul_qkt": (ALL, {"matmul_transpose": True}, ["Transpose", "MatMul"]),
    "matmul_at_b": (ALL, {"matmul_transpose": True}, ["Transpose", "MatMul"]),
    "matmul_x_wt": (ALL, {"matmul_transpose": True}, ["Transpose", "MatMul"]),
    "matmul_heads": (ALL, {"matmul_transpose": True}, ["Transpose", "MatMul"]),
    "linear_x_wt_bias": (ALL, {"matmul_bias": True, "linear_transpose": True},
                         ["Transpose", "MatMul", "Add"]),
    "batch_first_swap": (ALL, {"transpose_unit_axes": True}, ["Transpose"]),
    "matmul_transpose_shared": ([14], {"matmul_transpose": False}, []),
    "matmul_last_axis_to_batch": ([14], {"matmul_transpose": False}, []),
}
RANDOMIZED = {
    "encoder_layer": {"layer_norm": True, "gelu": True, "attention": True},
    "encoder_layer_padded": {"layer_norm": True, "gelu": True, "attention": True},
    "gpt_block": {"layer_norm": True, "gelu_tanh": True, "attention": True},
}


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({p.returncode}): {p.stderr.strip()}")
    return p.stdout


def compile_and_run(args, d, names, n_out, extra):
    dvm = os.path.join(d, f"m{len(extra)}.dvm")
    report = run([args.vm_compile, os.path.join(d, "model.onnx"), "-o", dvm, "--report"] + extra)
    out_dir = os.path.join(d, f"out{len(extra)}")
    os.makedirs(out_dir, exist_ok=True)
    cmd = [args.vm_run, dvm, "--output-dir", out_dir]
    for n in names:
        cmd += ["--input", f"{n}={os.path.join(d, f'input_{n}.npy')}"]
    run(cmd)
    outs = [np.load(os.path.join(out_dir, f"y{i}.npy")) for i in range(n_out)]
    fired = {m.group(1): int(m.group(2)) for m in re.finditer(r"^rewrite (\S+): (\d+)$", report, re.M)}
    kernels = re.findall(r"^kernel \d+: (\S+)", report, re.M)
    return outs, fired, kernels


def check(args, case, opset, seed, expect, gone):
    label = f"{case} opset {opset} seed {seed}"
    with tempfile.TemporaryDirectory() as d:
        export_case = "layer_norm" if case == "layer_norm_opset17" else case
        names, n_out = export_modules.export(export_case, opset, seed, d)
        opt, fired, kernels = compile_and_run(args, d, names, n_out, [])
        ref, _, _ = compile_and_run(args, d, names, n_out, ["--no-optimize"])
        failures = []
        for rule, should in expect.items():
            if rule not in fired:
                failures.append(f"rule {rule} not in the report")
            elif should and fired[rule] == 0:
                failures.append(f"rule {rule} did not fire")
            elif not should and fired[rule] != 0:
                failures.append(f"rule {rule} fired {fired[rule]} times on a near miss")
        for op in gone:
            if op in kernels:
                failures.append(f"{op} is still a kernel: {kernels}")
        for i, (a, b) in enumerate(zip(opt, ref)):
            if a.shape != b.shape or not np.allclose(a, b, rtol=1e-4, atol=1e-4, equal_nan=True):
                err = np.max(np.abs(a - b)) if a.shape == b.shape else f"{a.shape} vs {b.shape}"
                failures.append(f"output y{i} differs from --no-optimize: {err}")
        return [f"{label}: {f}" for f in failures], fired


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--vm-compile", required=True)
    parser.add_argument("--vm-run", required=True)
    parser.add_argument("--random-draws", type=int, default=3)
    args = parser.parse_args()
    seed = int(os.environ.get("DYNVM_REWRITE_SEED", time.time_ns() % 1000000))
    print(f"seed {seed} (DYNVM_REWRITE_SEED={seed} repeats this run)")
    rng = random.Random(seed)
    failures, checked = [], 0
    for case, (opsets, expect, gone) in CASES.items():
        for opset in opsets:
            f, _ = check(args, case, opset, rng.randrange(1 << 30), expect, gone)
            failures += f
            checked += 1
    for case, expect in RANDOMIZED.items():
        for _ in range(args.random_draws):
            opset = rng.choice(ALL)
            exp = dict(expect)
            if opset == 17:  # LayerNormalization is exported as it is
                exp.pop("layer_norm")
            f, fired = check(args, case, opset, rng.randrange(1 << 30), exp, [])
            failures += f
            checked += 1
            print(f"{case} opset {opset}: fired {fired}")
    for f in failures:
        print("FAIL", f)
    print(f"{checked} exports checked, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
