"""UnstackLoopCarried (compiler/unstack_carried.cc): a Loop that carries a stacked KV cache
(each slice read by Gather(cache, i), the grown slices re-stacked by Unsqueeze + Concat every
iteration) carries the slices apart, and each slice's Concat growth becomes an in-place append
(ctest: unstack_carried_test).

Loops built with onnx.helper, for 1, 2 and 3 layers and several stacking forms: [layers, 2, ...]
(a stack of stacks, torch.stack([torch.stack([k, v]) ...])), [2 * layers, ...] (one flat
stack), Unsqueeze's axes as an attribute (opset 11) or an input (opset 17), negative Gather
indices and Concat / Unsqueeze axes, the past length read through Shape(cache), the final
cache returned (stacked again after the loop) or not, 0, 1 and 5 iterations. Each is checked
against a NumPy implementation of the same loop, compiled with and without the rewrite
(--disable-rewrite unstack_loop_carried): `vm-compile --report` names how many carried values
were unstacked, and the bytecode (vm-dis) has one `append` per K/V slice with it and none
without. A cache that something else reads whole (a ReduceSum of it) is left stacked, and its
answer is still right. A stack of fixed-size states whose second slice passes through unchanged
is unstacked too (that slice's next value is the carried slice itself).

    /usr/bin/python3 unstack_carried_test.py --vm-compile PATH --vm-run PATH --vm-dis PATH
"""
import argparse
import os
import subprocess
import sys
import tempfile

try:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper
except ImportError as e:  # pragma: no cover
    print(f"SKIP: {e} (install python3-onnx: tools/install-deps.sh test)")
    sys.exit(77)

B, H, D = 2, 3, 4


def const(name, value, dtype=np.int64):
    return helper.make_node("Constant", [], [name], value=helper.make_tensor(
        name + "_t", TensorProto.INT64 if dtype == np.int64 else TensorProto.FLOAT,
        np.shape(value), np.array(value, dtype).ravel().tolist()))


class Body:
    def __init__(self, opset):
        self.nodes, self.opset, self.n = [], opset, 0

    def v(self):
        self.n += 1
        return f"v{self.n}"

    def op(self, op, inputs, **attrs):
        out = self.v()
        self.nodes.append(helper.make_node(op, inputs, [out], **attrs))
        return out

    def c(self, value, dtype=np.int64):
        out = self.v()
        self.nodes.append(const(out, value, dtype))
        return out

    def unsqueeze(self, x, axis):
        if self.opset >= 13:
            return self.op("Unsqueeze", [x, self.c([axis])])
        return self.op("Unsqueeze", [x], axes=[axis])


def build(layers, form, opset, negative, return_cache, whole_reader):
    """The model: inputs x [B, H, D], past [stack dims..., B, H, P, D], trips; outputs y (and
    cache). Each iteration, slice s (layer l, K or V) grows by x * (s + 1) along the past axis;
    x becomes 0.5 x + 0.1 sum_s mean_past(slice s) + 0.01 past_len."""
    lead = [layers, 2] if form == "nested" else [2 * layers]
    rank = len(lead) + 4
    b = Body(opset)
    past_axis = -2 if negative else 2
    slices = []
    for s in range(2 * layers):
        l, kv = divmod(s, 2)
        if form == "nested":
            layer = b.op("Gather", ["cache_in", b.c(l - layers if negative else l)], axis=0)
            old = b.op("Gather", [layer, b.c(kv - 2 if negative else kv)], axis=0)
        else:
            old = b.op("Gather", ["cache_in", b.c(s - 2 * layers if negative else s)], axis=0)
        new = b.unsqueeze(b.op("Mul", ["x_in", b.c(float(s + 1), np.float32)]), 2)
        slices.append(b.op("Concat", [old, new], axis=past_axis))
    past_len = b.op("Gather", [b.op("Shape", ["cache_in"]), b.c(rank - 2)], axis=0)
    acc = b.op("Mul", ["x_in", b.c(0.5, np.float32)])
    for k in slices:
        mean = b.op("ReduceMean", [k], axes=[2], keepdims=0)
        acc = b.op("Add", [acc, b.op("Mul", [mean, b.c(0.1, np.float32)])])
    acc = b.op("Add", [acc, b.op("Mul", [b.op("Cast", [past_len], to=TensorProto.FLOAT),
                                           b.c(0.01, np.float32)])])
    if whole_reader:
        acc = b.op("Add", [acc, b.op("Mul", [b.op("ReduceSum", ["cache_in"], keepdims=0),
                                               b.c(0.001, np.float32)])])
    b.nodes.append(helper.make_node("Identity", [acc], ["x_out"]))
    front = -(rank) if negative else 0
    if form == "nested":
        layers_out = []
        for l in range(layers):
            kv = [b.unsqueeze(slices[2 * l + j], -(rank - 1) if negative else 0) for j in (0, 1)]
            layers_out.append(b.unsqueeze(b.op("Concat", kv, axis=-(rank - 1) if negative else 0),
                                          front))
        stacked = b.op("Concat", layers_out, axis=front)
    else:
        stacked = b.op("Concat", [b.unsqueeze(k, front) for k in slices], axis=front)
    b.nodes.append(helper.make_node("Identity", [stacked], ["cache_out"]))
    b.nodes.append(helper.make_node("Identity", ["cond_in"], ["cond_out"]))
    f = TensorProto.FLOAT
    body = helper.make_graph(
        b.nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", f, None),
         helper.make_tensor_value_info("cache_in", f, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", f, None),
         helper.make_tensor_value_info("cache_out", f, None)])
    nodes = [helper.make_node("Constant", [], ["cond"],
                              value=helper.make_tensor("cond_t", TensorProto.BOOL, [], [True])),
             helper.make_node("Loop", ["trips", "cond", "x", "past"], ["y", "cache"], body=body)]
    outputs = [helper.make_tensor_value_info("y", f, [B, H, D])]
    if return_cache:
        outputs.append(helper.make_tensor_value_info("cache", f, None))
    g = helper.make_graph(
        nodes, "stacked_cache",
        [helper.make_tensor_value_info("x", f, [B, H, D]),
         helper.make_tensor_value_info("past", f, lead + [B, H, "P", D]),
         helper.make_tensor_value_info("trips", TensorProto.INT64, [])], outputs)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])


def reference(layers, form, x, past, trips, whole_reader):
    lead = [layers, 2] if form == "nested" else [2 * layers]
    cache = past.reshape([2 * layers] + list(past.shape[len(lead):])).astype(np.float64)
    x = x.astype(np.float64)
    for _ in range(trips):
        slices = [np.concatenate([cache[s], (x * (s + 1))[:, :, None, :]], axis=2)
                  for s in range(2 * layers)]
        acc = 0.5 * x + sum(0.1 * k.mean(axis=2) for k in slices) + 0.01 * cache.shape[-2]
        if whole_reader:
            acc = acc + 0.001 * cache.sum()
        x, cache = acc, np.stack(slices)
    return x, cache.reshape(lead + list(cache.shape[1:]))


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr}")
    return r.stdout


def check(args, tmp, case, failures):
    layers, form, opset, negative, return_cache, whole_reader = case
    tag = "-".join(str(c) for c in case)
    path = os.path.join(tmp, f"{tag}.onnx")
    onnx.save(build(layers, form, opset, negative, return_cache, whole_reader), path)
    rng = np.random.default_rng(layers * 10 + opset)
    lead = [layers, 2] if form == "nested" else [2 * layers]
    x = rng.standard_normal((B, H, D)).astype(np.float32)
    past = rng.standard_normal(lead + [B, H, 3, D]).astype(np.float32)
    want_unstacked = 0 if whole_reader else (1 + layers if form == "nested" else 1)
    for disabled in (False, True):
        dvm = os.path.join(tmp, f"{tag}-{disabled}.dvm")
        extra = ["--disable-rewrite", "unstack_loop_carried"] if disabled else []
        report = run([args.vm_compile, path, "-o", dvm, "--report"] + extra)
        got_unstacked = 0
        for line in report.splitlines():
            if line.startswith("unstack_loop_carried: "):
                got_unstacked = int(line.split()[1])
        want = 0 if disabled else want_unstacked
        appends = run([args.vm_dis, dvm]).count(" append ")
        want_appends = 2 * layers if want else 0
        if got_unstacked != want or appends != want_appends:
            failures.append(f"{tag} disabled={disabled}: unstacked {got_unstacked} (want {want}), "
                            f"{appends} appends (want {want_appends})")
        for trips in (0, 1, 5):
            inputs = {"x": x, "past": past, "trips": np.array(trips, np.int64)}
            flags = []
            for name, value in inputs.items():
                p = os.path.join(tmp, f"{tag}-{name}.npy")
                np.save(p, value)
                flags += ["-i", f"{name}={p}"]
            out = os.path.join(tmp, f"out-{tag}-{disabled}-{trips}")
            run([args.vm_run, dvm] + flags + ["--output-dir", out])
            want_y, want_cache = reference(layers, form, x, past, trips, whole_reader)
            y = np.load(os.path.join(out, "y.npy"))
            if not np.allclose(y, want_y, rtol=1e-5, atol=1e-5):
                failures.append(f"{tag} disabled={disabled} trips={trips}: y differs by "
                                f"{np.abs(y - want_y).max()}")
            if return_cache:
                cache = np.load(os.path.join(out, "cache.npy"))
                if cache.shape != want_cache.shape or not np.allclose(cache, want_cache, 1e-5, 1e-5):
                    failures.append(f"{tag} disabled={disabled} trips={trips}: cache "
                                    f"{cache.shape} vs {want_cache.shape}")


def check_passthrough(args, tmp, failures):
    """A stack of fixed-size states [2, B, D]: slice 0 updated (+ x), slice 1 passed on
    unchanged (its next value is the carried slice itself); unstacked, the final stack returned."""
    b = Body(17)
    s0 = b.op("Gather", ["cache_in", b.c(0)], axis=0)
    s1 = b.op("Gather", ["cache_in", b.c(1)], axis=0)
    new0 = b.op("Add", [s0, "x_in"])
    stacked = b.op("Concat", [b.unsqueeze(new0, 0), b.unsqueeze(s1, 0)], axis=0)
    b.nodes += [helper.make_node("Identity", [stacked], ["cache_out"]),
                helper.make_node("Identity", ["x_in"], ["x_out"]),
                helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    f = TensorProto.FLOAT
    body = helper.make_graph(
        b.nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", f, None),
         helper.make_tensor_value_info("cache_in", f, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", f, None),
         helper.make_tensor_value_info("cache_out", f, None)])
    g = helper.make_graph(
        [helper.make_node("Constant", [], ["cond"],
                          value=helper.make_tensor("cond_t", TensorProto.BOOL, [], [True])),
         helper.make_node("Loop", ["trips", "cond", "x", "past"], ["y", "cache"], body=body)],
        "passthrough",
        [helper.make_tensor_value_info("x", f, [B, D]),
         helper.make_tensor_value_info("past", f, [2, B, D]),
         helper.make_tensor_value_info("trips", TensorProto.INT64, [])],
        [helper.make_tensor_value_info("cache", f, None)])
    path = os.path.join(tmp, "passthrough.onnx")
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), path)
    dvm = os.path.join(tmp, "passthrough.dvm")
    report = run([args.vm_compile, path, "-o", dvm, "--report"])
    if "unstack_loop_carried: 1" not in report:
        failures.append(f"passthrough: not unstacked once:\n{report}")
    rng = np.random.default_rng(9)
    x = rng.standard_normal((B, D)).astype(np.float32)
    past = rng.standard_normal((2, B, D)).astype(np.float32)
    for trips in (0, 3):
        flags = []
        for name, value in {"x": x, "past": past, "trips": np.array(trips, np.int64)}.items():
            p = os.path.join(tmp, f"pt-{name}.npy")
            np.save(p, value)
            flags += ["-i", f"{name}={p}"]
        out = os.path.join(tmp, f"out-pt-{trips}")
        run([args.vm_run, dvm] + flags + ["--output-dir", out])
        want = past.copy()
        want[0] += trips * x
        got = np.load(os.path.join(out, "cache.npy"))
        if got.shape != want.shape or not np.allclose(got, want, 1e-5, 1e-5):
            failures.append(f"passthrough trips={trips}: {got.tolist()} vs {want.tolist()}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--vm-compile", required=True)
    ap.add_argument("--vm-run", required=True)
    ap.add_argument("--vm-dis", required=True)
    args = ap.parse_args()
    # (layers, form, opset, negative indices/axes, final cache returned, a whole-cache reader)
    cases = [(1, "nested", 17, False, True, False), (2, "nested", 17, False, False, False),
             (3, "nested", 11, True, True, False), (2, "flat", 17, True, True, False),
             (3, "flat", 11, False, False, False), (2, "nested", 17, False, True, True)]
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for case in cases:
            check(args, tmp, case, failures)
        check_passthrough(args, tmp, failures)
    for f in failures:
        print("FAIL", f)
    print(f"{'FAILED' if failures else 'PASSED'}: {len(cases)} loops, {len(failures)} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
