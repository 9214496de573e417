#!/usr/bin/python3
"""Greedy decode of a Llama-style decoder (tools/models/llama.py: RMSNorm, rotary, SwiGLU,
grouped-query attention, a KV cache) exported with its decode loop, in dynvm and in ONNX Runtime
on the same .onnx file, side by side (docs/benchmarks.md, "Llama-style decode").

For each repeat form of K and V (repeat_interleave, which exports as a Loop nested in the decode
loop, and expand + reshape) it exports the model with random weights (vocab 1000, width 256, 4
layers, 8 heads, 2 KV heads, head size 32, SwiGLU 688), checks that dynvm's tokens equal
PyTorch's, then times `rounds` interleaved rounds of one decode (a 16-token prompt, 64 new
tokens) in dynvm (Python, one thread) and in onnxruntime-node (one intra-op and inter-op thread),
and prints the medians and their ratio. Needs python3-torch and onnxruntime-node (--ort-dir, a
folder whose node_modules holds it; tools/bench/compare.sh installs it into build/bench).

    PYTHONPATH=build/release/python /usr/bin/python3 tools/bench/llama_bench.py --ort-dir build/bench

--disabled-rewrite NAME also times, in the same rounds, dynvm compiled without that rewrite (e.g.
unstack_loop_carried: the loop copying its stacked KV cache every token), as "dynvm without NAME".
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "models"))
import llama  # noqa: E402

ORT_JS = r"""
const ort = require(process.argv[2]);
const fs = require('fs');
const readline = require('readline');
(async () => {
  const sess = await ort.InferenceSession.create(process.argv[3], {
      intraOpNumThreads: 1, interOpNumThreads: 1, logSeverityLevel: 3});
  const p = JSON.parse(process.argv[4]);
  const feeds = {
    prompt: new ort.Tensor('int64', BigInt64Array.from(p.prompt.map(BigInt)), p.dims),
    max_new_tokens: new ort.Tensor('int64', BigInt64Array.from([BigInt(p.steps)]), []),
  };
  const rl = readline.createInterface({input: process.stdin});
  for await (const line of rl) {  // one decode per line; prints its milliseconds
    const t = process.hrtime.bigint();
    const out = await sess.run(feeds);
    const ms = Number(process.hrtime.bigint() - t) / 1e6;
    console.log(JSON.stringify({ms, tokens: Array.from(out.tokens.data, Number)}));
  }
})().catch(e => { console.error(e.message); process.exit(1); });
"""


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ort-dir", required=True)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--steps", type=int, default=64)
    ap.add_argument("--disabled-rewrite", default=None,
                    help="also time dynvm compiled with this rewrite disabled")
    ap.add_argument("--repeats", default="repeat_interleave,expand",
                    help="the K/V repeat forms to export, comma-separated")
    args = ap.parse_args()
    import dynvm
    ort_module = os.path.join(os.path.abspath(args.ort_dir), "node_modules", "onnxruntime-node")
    print(f"CPU: {cpu_name()}; dynvm and ONNX Runtime (onnxruntime-node) at 1 thread")
    with tempfile.TemporaryDirectory() as tmp:
        script = os.path.join(tmp, "ort.js")
        with open(script, "w") as f:
            f.write(ORT_JS)
        for repeat in args.repeats.split(","):
            torch.manual_seed(0)
            lm = llama.Llama(vocab=1000, d=256, layers=4, heads=8, kv_heads=2, head_dim=32,
                             ffn=688, repeat=repeat).eval()
            decode = llama.GreedyDecode(lm)
            prompt = torch.randint(0, 1000, (1, 16))
            path = os.path.join(tmp, f"llama_{repeat}.onnx")
            torch.onnx.export(torch.jit.script(decode), (prompt, torch.tensor(args.steps)), path,
                              opset_version=17, input_names=["prompt", "max_new_tokens"],
                              output_names=["tokens", "logits"],
                              dynamic_axes={"prompt": {0: "batch", 1: "prompt_len"}})
            with torch.no_grad():
                want = decode(prompt, torch.tensor(args.steps))[0].numpy()
            vm = dynvm.VirtualMachine(dynvm.compile(path), threads=1)
            feeds = {"prompt": prompt.numpy(), "max_new_tokens": np.array(args.steps, np.int64)}
            got = vm.run(feeds)["tokens"]
            base = None
            if args.disabled_rewrite:
                base = dynvm.VirtualMachine(
                    dynvm.compile(path, disable_rewrites=[args.disabled_rewrite]), threads=1)
                base_got = base.run(feeds)["tokens"]
            ort = subprocess.Popen(
                ["node", script, ort_module, path,
                 json.dumps({"prompt": prompt.numpy().ravel().tolist(),
                             "dims": list(prompt.shape), "steps": args.steps})],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

            def ort_run():
                ort.stdin.write("run\n")
                ort.stdin.flush()
                return json.loads(ort.stdout.readline())

            ort_tokens = np.array(ort_run()["tokens"]).reshape(want.shape)  # warm-up
            dynvm_ms, ort_ms, base_ms = [], [], []
            for _ in range(args.rounds):
                start = time.perf_counter()
                vm.run(feeds)
                dynvm_ms.append((time.perf_counter() - start) * 1e3)
                if base is not None:
                    start = time.perf_counter()
                    base.run(feeds)
                    base_ms.append((time.perf_counter() - start) * 1e3)
                ort_ms.append(ort_run()["ms"])
            ort.stdin.close()
            ort.wait()
            d, o = float(np.median(dynvm_ms)), float(np.median(ort_ms))
            print(f"{repeat}: tokens equal PyTorch: dynvm {np.array_equal(got, want)}, "
                  f"ONNX Runtime {np.array_equal(ort_tokens, want)}; {args.steps} tokens: dynvm "
                  f"{d:.1f} ms ({args.steps / d * 1e3:.0f} tok/s), ONNX Runtime {o:.1f} ms "
                  f"({args.steps / o * 1e3:.0f} tok/s): {o / d:.2f}x")
            if base is not None:
                b = float(np.median(base_ms))
                print(f"{repeat}: dynvm without {args.disabled_rewrite}: tokens equal PyTorch "
                      f"{np.array_equal(base_got, want)}; {b:.1f} ms ({args.steps / b * 1e3:.0f} "
                      f"tok/s): ONNX Runtime / it {o / b:.2f}x, with it / without "
                      f"{b / d:.2f}x; rounds (ms) with {[round(x, 1) for x in dynvm_ms]}, "
                      f"without {[round(x, 1) for x in base_ms]}, ORT "
                      f"{[round(x, 1) for x in ort_ms]}")
    return 0


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
