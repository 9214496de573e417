#!/usr/bin/python3
"""Times greedy decoding with TorchScript for tools/bench/compare.py: a scripted decode module
with the loop in TorchScript (--mode loop) or a scripted single-step module
(token, h, c) -> (next, h, c) driven by a Python loop (--mode step). The module is frozen
(torch.jit.freeze) and run under torch.inference_mode. Warm-up decodes (the profiling executor
specializes on the first runs), then --repeat timed decodes; prints one JSON line
{"mode", "tokens", "ms"}.

  /usr/bin/python3 torch_bench.py --model FILE.pt --mode loop|step --threads N --repeat N
      --prompt 3,14,15,9 --max-new-tokens N [--stop-token T] [--state-dims 2,1,256]
"""
import argparse
import json
import time

import torch


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--model", required=True)
    p.add_argument("--mode", choices=["loop", "step"], required=True)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeat", type=int, default=10)
    p.add_argument("--prompt", required=True)
    p.add_argument("--max-new-tokens", type=int, required=True)
    p.add_argument("--stop-token", type=int, default=-1)
    p.add_argument("--state-dims", default="")
    a = p.parse_args()
    torch.set_num_threads(a.threads)
    torch.set_num_interop_threads(1)
    prompt_ids = [int(t) for t in a.prompt.split(",")]
    module = torch.jit.freeze(torch.jit.load(a.model).eval())

    if a.mode == "loop":
        prompt = torch.tensor([prompt_ids], dtype=torch.long)
        args = [prompt, torch.tensor(a.max_new_tokens)]
        if "stop_token" in [i.debugName().split(".")[0] for i in module.graph.inputs()]:
            args.append(torch.tensor(a.stop_token))

        def decode():
            return module(*args)[0].tolist()
    else:
        dims = [int(d) for d in a.state_dims.split(",")]
        zeros = torch.zeros(dims)

        def decode():
            h = c = zeros
            nxt = 0
            for t in prompt_ids:
                n, h, c = module(torch.tensor([[t]]), h, c)
                nxt = int(n)
            out = []
            for i in range(a.max_new_tokens):
                out.append(nxt)
                if nxt == a.stop_token or i + 1 == a.max_new_tokens:
                    break
                n, h, c = module(torch.tensor([[nxt]]), h, c)
                nxt = int(n)
            return out

    with torch.inference_mode():
        tokens = decode()
        for _ in range(2):
            decode()
        ms = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            got = decode()
            ms.append((time.perf_counter() - t0) * 1000.0)
            if got != tokens:
                raise SystemExit("torch_bench: a repeated decode gave other tokens")
    print(json.dumps({"mode": a.mode, "tokens": tokens, "ms": ms}))


if __name__ == "__main__":
    main()
