#!/usr/bin/python3
"""One GroupQueryAttention (com.microsoft) decode step, dynvm against ONNX Runtime
(onnxruntime-node) on the same one-node .onnx file, interleaved (docs/benchmarks.md).

For each past length and head size it builds the node (batch 1, 32 query heads, 8 KV heads by
default; a query of one token after a past of P keys; the present outputs), checks that dynvm's
outputs match ONNX Runtime's, then times `rounds` interleaved rounds of `calls` steps in each:
dynvm from Python (inputs bound without a copy; its three outputs fresh arrays each call, as
ONNX Runtime's are) and onnxruntime-node (intra-op threads as
dynvm's, sequential). Prints the median milliseconds per step and ORT / dynvm.

    PYTHONPATH=build/release/python /usr/bin/python3 tools/bench/gqa_bench.py \
        --ort-dir /work/ort [--threads 1,2] [--past 128,512,1024,2048] [--head 64,128]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np
import onnx
from onnx import TensorProto, helper

ORT_JS = r"""
const ort = require(process.argv[2]);
const fs = require('fs');
const readline = require('readline');
(async () => {
  const p = JSON.parse(process.argv[4]);
  const sess = await ort.InferenceSession.create(process.argv[3], {
      intraOpNumThreads: p.threads, interOpNumThreads: 1, executionMode: 'sequential',
      logSeverityLevel: 3});
  const feeds = {};
  for (const [name, spec] of Object.entries(p.inputs)) {
    const buf = fs.readFileSync(spec.file);
    const data = spec.dtype === 'float32'
        ? new Float32Array(buf.buffer, buf.byteOffset, buf.length / 4)
        : new Int32Array(buf.buffer, buf.byteOffset, buf.length / 4);
    feeds[name] = new ort.Tensor(spec.dtype, data, spec.dims);
  }
  const rl = readline.createInterface({input: process.stdin});
  for await (const line of rl) {  // "check" writes the outputs; a number N times N steps
    if (line === 'check') {
      const out = await sess.run(feeds);
      for (const k of Object.keys(out)) {
        fs.writeFileSync(p.out + '.' + k, Buffer.from(out[k].data.buffer, out[k].data.byteOffset,
                                                      out[k].data.byteLength));
      }
      console.log(JSON.stringify({ok: true}));
      continue;
    }
    const n = parseInt(line, 10);
    const t = process.hrtime.bigint();
    for (let i = 0; i < n; ++i) await sess.run(feeds);
    console.log(JSON.stringify({ms: Number(process.hrtime.bigint() - t) / 1e6 / n}));
  }
})().catch(e => { console.error(e.message); process.exit(1); });
"""


def gqa_model(n, nkv, h, past):
    f = TensorProto.FLOAT
    i32 = TensorProto.INT32
    node = helper.make_node(
        "GroupQueryAttention",
        ["query", "key", "value", "past_key", "past_value", "seqlens_k", "total_sequence_length"],
        ["output", "present_key", "present_value"], domain="com.microsoft", num_heads=n,
        kv_num_heads=nkv)
    graph = helper.make_graph(
        [node], "gqa_decode",
        [helper.make_tensor_value_info("query", f, [1, 1, n * h]),
         helper.make_tensor_value_info("key", f, [1, 1, nkv * h]),
         helper.make_tensor_value_info("value", f, [1, 1, nkv * h]),
         helper.make_tensor_value_info("past_key", f, [1, nkv, past, h]),
         helper.make_tensor_value_info("past_value", f, [1, nkv, past, h]),
         helper.make_tensor_value_info("seqlens_k", i32, [1]),
         helper.make_tensor_value_info("total_sequence_length", i32, [])],
        [helper.make_tensor_value_info("output", f, [1, 1, n * h]),
         helper.make_tensor_value_info("present_key", f, [1, nkv, past + 1, h]),
         helper.make_tensor_value_info("present_value", f, [1, nkv, past + 1, h])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.microsoft", 1)])
    model.ir_version = 8
    return model


def inputs_for(n, nkv, h, past, seed):
    r = np.random.default_rng(seed)
    f = lambda *shape: r.uniform(-1, 1, shape).astype(np.float32)  # noqa: E731
    return {"query": f(1, 1, n * h), "key": f(1, 1, nkv * h), "value": f(1, 1, nkv * h),
            "past_key": f(1, nkv, past, h), "past_value": f(1, nkv, past, h),
            "seqlens_k": np.array([past], np.int32),
            "total_sequence_length": np.array(past + 1, np.int32)}


def bench_one(dynvm, args, ort_module, tmp, threads, n, nkv, h, past):
    path = os.path.join(tmp, f"gqa_{h}_{past}.onnx")
    onnx.save(gqa_model(n, nkv, h, past), path)
    feeds = inputs_for(n, nkv, h, past, seed=past * 7 + h)
    spec = {}
    for name, a in feeds.items():
        file = os.path.join(tmp, f"{name}.bin")
        a.tofile(file)
        spec[name] = {"file": file, "dims": list(a.shape),
                      "dtype": "float32" if a.dtype == np.float32 else "int32"}
    out_base = os.path.join(tmp, "ort_out")
    ort = subprocess.Popen(
        ["node", os.path.join(tmp, "ort.js"), ort_module, path,
         json.dumps({"threads": threads, "inputs": spec, "out": out_base})],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def ort_cmd(line):
        ort.stdin.write(line + "\n")
        ort.stdin.flush()
        return json.loads(ort.stdout.readline())

    vm = dynvm.VirtualMachine(dynvm.compile(path), threads=threads)
    got = vm.run(feeds)
    ort_cmd("check")
    worst = 0.0
    for name in ("output", "present_key", "present_value"):
        want = np.fromfile(f"{out_base}.{name}", np.float32).reshape(got[name].shape)
        worst = max(worst, float(np.max(np.abs(got[name] - want) / (1 + np.abs(want)))))
    # Warm-up: each dynvm call returns three fresh output arrays (the presents 0.25-8 MiB each):
    # glibc's mmap threshold adapts to them over the first calls, which page-fault until then.
    for _ in range(2 * args.calls):
        vm.run(feeds)
    ort_cmd(str(args.calls))
    dynvm_ms, ort_ms = [], []
    for _ in range(args.rounds):
        start = time.perf_counter()
        for _ in range(args.calls):
            vm.run(feeds)
        dynvm_ms.append((time.perf_counter() - start) * 1e3 / args.calls)
        ort_ms.append(ort_cmd(str(args.calls))["ms"])
    ort.stdin.close()
    ort.wait()
    d, o = float(np.median(dynvm_ms)), float(np.median(ort_ms))
    print(f"threads {threads} N {n} N_kv {nkv} H {h} past {past:5d}: dynvm {d:7.3f} ms, "
          f"ONNX Runtime {o:7.3f} ms: {o / d:5.2f}x (max rel diff {worst:.1e})", flush=True)
    return worst


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ort-dir", required=True)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--past", default="128,512,1024,2048")
    ap.add_argument("--head", default="64,128")
    ap.add_argument("--heads", type=int, default=32)
    ap.add_argument("--kv-heads", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args()
    import dynvm
    ort_module = os.path.join(os.path.abspath(args.ort_dir), "node_modules", "onnxruntime-node")
    print(f"CPU: {cpu_name()}; one GroupQueryAttention decode step (batch 1, one query token), "
          f"{args.rounds} interleaved rounds of {args.calls} steps, medians")
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        with open(os.path.join(tmp, "ort.js"), "w") as f:
            f.write(ORT_JS)
        for threads in [int(t) for t in args.threads.split(",")]:
            for h in [int(v) for v in args.head.split(",")]:
                for past in [int(v) for v in args.past.split(",")]:
                    worst = max(worst, bench_one(dynvm, args, ort_module, tmp, threads,
                                                 args.heads, args.kv_heads, h, past))
    if worst > 1e-4:
        print(f"FAILED: dynvm's outputs differ from ONNX Runtime's ({worst:.1e})")
        return 1
    return 0


def cpu_name():
    with open("/proc/cpuinfo") as f:
        for line in f:
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown"


if __name__ == "__main__":
    sys.exit(main())
