#!/usr/bin/env python3
"""Streams text from the char-LM demo (tools/lm/charlm.onnx) with the dynvm Python package.

    PYTHONPATH=build/release/python python3 tools/examples/generate.py \\
        --prompt "In the beginning" --length 300 --temperature 0.8 --seed 7

The same job as tools/demo.sh: the whole decode (prompt, LSTM steps, output layer, sampling,
stop at an end token) runs inside one VirtualMachine call, and the characters are printed as
the program emits them (VirtualMachine.stream).
"""

import argparse
import pathlib
import sys

import numpy as np

import dynvm

ROOT = pathlib.Path(__file__).resolve().parents[2]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prompt", default="And it came to pass")
    parser.add_argument("--length", type=int, default=400, help="characters to generate")
    parser.add_argument("--temperature", type=float, default=0.7, help="0 is greedy")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--stop-at-newline", action="store_true")
    parser.add_argument("--model", default=str(ROOT / "tools/lm/charlm.onnx"))
    parser.add_argument("--vocab", default=str(ROOT / "tools/lm/vocab.txt"),
                        help="one code point per line; token id = line number")
    args = parser.parse_args(argv)

    vocab = [chr(int(line)) for line in pathlib.Path(args.vocab).read_text().split()]
    try:
        prompt = [vocab.index(c) for c in args.prompt]
    except ValueError:
        bad = next(c for c in args.prompt if c not in vocab)
        parser.error(f"character {bad!r} is not in the vocabulary")
    if not 0 < len(prompt) <= 1024 or not 0 < args.length <= 4096:
        parser.error("the prompt must have 1 to 1024 characters and --length be 1 to 4096")

    exe = dynvm.compile(args.model, bounds={"batch": 1, "max_new_tokens": 4096,
                                            "prompt_len": 1024})
    vm = dynvm.VirtualMachine(exe)
    inputs = {
        "prompt": np.array([prompt], np.int64),
        "max_new_tokens": np.array(args.length, np.int64),
        "temperature": np.array(args.temperature, np.float32),
        "seed": np.array(args.seed, np.int64),
        "stop_token": np.array(vocab.index("\n") if args.stop_at_newline else -1, np.int64),
    }
    sys.stdout.write(args.prompt)
    text = ""
    for _, token in vm.stream(inputs):  # one [batch] tensor per generated step
        text = vocab[int(token[0])]
        sys.stdout.write(text)
        sys.stdout.flush()
    if text != "\n":
        sys.stdout.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
