#!/usr/bin/python3
"""Exports decoding strategies over a tiny character LSTM LM, each scripted (torch.jit.script)
so that the whole search runs inside the graph as an ONNX Loop, at opsets 14 and 17, with
reference outputs computed by PyTorch for the tests (tools/models/models_test.cc).

  beam<opset>  beam search, 4 beams, GNMT length penalty ((5 + len) / 6) ** 0.6, per-beam end
               token: a finished beam only extends with the end token at an unchanged score.
               The body does a TopK over beam x vocab scores and reorders the LSTM state and
               the token history by the chosen beams (Gather, GatherElements, index_select).
               Outputs: tokens [batch, 4, n] and scores [batch, 4] (length-normalized, best
               first), best [batch, n].
  topk<opset>  top-k sampling (k = 5, temperature 4.0); the randomness comes from an input of
               pre-drawn uniforms [batch, n], so the tokens are exact.
  topk_sample<opset>  top-k sampling whose draw is dynvm::Sample (docs/sampling.md) over the k
               largest logits, seeded (input seed): a scripted call of the PyTorch operator
               dynvm::sample registered here, run by PyTorch with tools/lm/export_charlm.py's
               Python Philox and exported as the node Sample of domain "dynvm".
  topp<opset>  top-p (nucleus) sampling, p = 0.9, temperature 4.0, with a repetition penalty of 1.3 on every
               token already generated (a [batch, vocab] mask updated by ScatterElements); the
               same uniforms input.

Each folder holds model.onnx and case<k>/ with input_<name>.npy and output_<name>.npy. The LM
is small (embedding 16, hidden 32: each model.onnx is a few tens of KB). Every case is checked
for margins: beam candidates that PyTorch ranks must differ by more than MIN_MARGIN (so float
rounding cannot reorder them) and every uniform must lie more than MIN_MARGIN from the CDF
boundaries it is compared with (MIN_SAMPLE_MARGIN), and each sampled case must pick other
than the most likely token at least twice (the high temperature makes sure of that).

Needs Debian's python3-torch and python3-onnx: /usr/bin/python3 tools/models/export_search.py
[NAME ...] (only the named models; all by default). `--bench DIR HIDDEN` instead writes a larger
beam search (DIR/beam17_h<HIDDEN>.onnx, opset 17) for tools/bench/search_compare.sh.
"""
import os
import sys
from typing import Tuple

import numpy as np
import onnx
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "lm"))
from export_decoders import LstmLM, VOCAB, encode, train  # noqa: E402
from export_charlm import philox_uniform, sample_rows  # noqa: E402

# dynvm::Sample (docs/sampling.md) as a PyTorch operator, so that a scripted module can call it:
# PyTorch runs it with export_charlm.py's independent implementation (Philox in Python), and
# the ONNX export writes it as the node Sample of domain "dynvm".
_LIB = torch.library.Library("dynvm", "DEF")
_LIB.define("sample(Tensor logits, Tensor temperature, Tensor seed, Tensor step) -> Tensor")
_LIB.impl("sample", lambda logits, temperature, seed, step: torch.from_numpy(sample_rows(
    logits.detach().numpy(), float(temperature.reshape(-1)[0]), int(seed.reshape(-1)[0]),
    int(step.reshape(-1)[0]))), "CPU")


def _sample_symbolic(g, logits, t, seed, step):
    # The output's type ([batch] int64) tells the exporter the ranks that follow: without it,
    # the LSTM's batched/unbatched choice would be exported as a run-time If.
    out = g.op("dynvm::Sample", logits, t, seed, step)
    sizes = logits.type().varyingSizes()
    out.setType(logits.type().with_dtype(torch.int64).with_sizes(sizes[:1] if sizes else [None]))
    return out


for _opset in (14, 17):
    torch.onnx.register_custom_op_symbolic("dynvm::sample", _sample_symbolic, _opset)

HERE = os.path.dirname(os.path.abspath(__file__))
MIN_MARGIN = 1e-3
# The sampling CDFs are sums of probabilities that dynvm computes within ~1e-6 of PyTorch.
MIN_SAMPLE_MARGIN = 2e-4
BEAMS = 4
EOS = VOCAB.index(".")
NEG = -1e9


class BeamSearch(nn.Module):
    def __init__(self, lm: LstmLM):
        super().__init__()
        self.embed = lm.embed
        self.lstm = lm.lstm
        self.out = lm.out
        self.vocab = lm.out.out_features
        self.hidden = lm.lstm.hidden_size
        self.eos = EOS
        self.alpha = 0.6
        self.beams = BEAMS
        self.neg = NEG

    def forward(self, prompt: torch.Tensor, max_new_tokens: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        k = self.beams
        v = self.vocab
        b = prompt.size(0)
        y, (h, c) = self.lstm(self.embed(prompt))
        logp = F.log_softmax(self.out(y[:, -1]), dim=-1)          # [b, v]
        logp = logp.unsqueeze(1).expand(b, k, v).reshape(b * k, v)
        # [1, b, hidden] -> [1, b * k, hidden], each batch row repeated per beam.
        h = h.unsqueeze(2).expand(1, b, k, self.hidden).reshape(1, b * k, self.hidden)
        c = c.unsqueeze(2).expand(1, b, k, self.hidden).reshape(1, b * k, self.hidden)
        # Only beam 0 is live at the start, so the first step picks k distinct tokens.
        scores = torch.full((b, k), self.neg)
        scores[:, 0] = 0.0
        finished = torch.zeros(b, k, dtype=torch.bool)
        lengths = torch.zeros(b, k, dtype=torch.long)
        tokens = torch.zeros(b, k, 0, dtype=torch.long)
        eos_row = torch.full((v,), self.neg)
        eos_row[self.eos] = 0.0
        offsets = (torch.arange(b) * k).unsqueeze(1)
        for i in range(int(max_new_tokens)):
            step = logp.reshape(b, k, v)
            step = torch.where(finished.unsqueeze(2), eos_row, step)
            cand = (scores.unsqueeze(2) + step).reshape(b, k * v)
            scores, flat = cand.topk(k, dim=1)
            beam = torch.div(flat, v, rounding_mode="floor")
            tok = flat % v
            tokens = tokens.gather(1, beam.unsqueeze(2).expand(b, k, tokens.size(2)))
            tokens = torch.cat([tokens, tok.unsqueeze(2)], 2)
            was_done = finished.gather(1, beam)
            lengths = lengths.gather(1, beam) + (~was_done).long()
            finished = was_done | (tok == self.eos)
            rows = (beam + offsets).reshape(b * k)
            h = h.index_select(1, rows)
            c = c.index_select(1, rows)
            y, (h, c) = self.lstm(self.embed(tok.reshape(b * k, 1)), (h, c))
            logp = F.log_softmax(self.out(y[:, -1]), dim=-1)
        penalty = ((5.0 + lengths.float()) / 6.0) ** self.alpha
        normed = scores / penalty
        normed, order = normed.sort(dim=1, descending=True)
        tokens = tokens.gather(1, order.unsqueeze(2).expand(b, k, tokens.size(2)))
        return tokens, normed, tokens[:, 0]


class TopK(nn.Module):
    def __init__(self, lm: LstmLM):
        super().__init__()
        self.embed = lm.embed
        self.lstm = lm.lstm
        self.out = lm.out
        self.top = 5
        self.temperature = 4.0

    def forward(self, prompt: torch.Tensor, uniforms: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        y, (h, c) = self.lstm(self.embed(prompt))
        logits = self.out(y[:, -1])
        tokens = prompt[:, :0]
        for i in range(uniforms.size(1)):
            vals, idx = (logits / self.temperature).topk(self.top, dim=-1)
            cdf = torch.softmax(vals, dim=-1).cumsum(-1)
            u = uniforms[:, i].unsqueeze(1)
            choice = (cdf < u).long().sum(-1, keepdim=True).clamp(max=self.top - 1)
            tok = idx.gather(1, choice)
            tokens = torch.cat([tokens, tok], 1)
            y, (h, c) = self.lstm(self.embed(tok), (h, c))
            logits = self.out(y[:, -1])
        return tokens, logits


class TopP(nn.Module):
    def __init__(self, lm: LstmLM):
        super().__init__()
        self.embed = lm.embed
        self.lstm = lm.lstm
        self.out = lm.out
        self.vocab = lm.out.out_features
        self.p = 0.9
        self.penalty = 1.3
        self.temperature = 4.0

    def forward(self, prompt: torch.Tensor, uniforms: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        b = prompt.size(0)
        y, (h, c) = self.lstm(self.embed(prompt))
        logits = self.out(y[:, -1])
        tokens = prompt[:, :0]
        seen = torch.zeros(b, self.vocab)
        for i in range(uniforms.size(1)):
            logits = logits / self.temperature
            penalized = torch.where(logits > 0, logits / self.penalty, logits * self.penalty)
            logits = torch.where(seen > 0.5, penalized, logits)
            sorted_logits, idx = logits.sort(dim=-1, descending=True)
            probs = torch.softmax(sorted_logits, dim=-1)
            cum = probs.cumsum(-1)
            probs = probs.masked_fill(cum - probs > self.p, 0.0)
            cdf = (probs / probs.sum(-1, keepdim=True)).cumsum(-1)
            u = uniforms[:, i].unsqueeze(1)
            choice = (cdf < u).long().sum(-1, keepdim=True).clamp(max=self.vocab - 1)
            tok = idx.gather(1, choice)
            tokens = torch.cat([tokens, tok], 1)
            seen = seen.scatter(1, tok, 1.0)
            y, (h, c) = self.lstm(self.embed(tok), (h, c))
            logits = self.out(y[:, -1])
        return tokens, logits


class TopKSample(nn.Module):
    """Top-k sampling whose draw is dynvm::Sample over the k largest logits (seeded Philox: the
    token depends only on the seed, the step and the row)."""

    def __init__(self, lm: LstmLM):
        super().__init__()
        self.embed = lm.embed
        self.lstm = lm.lstm
        self.out = lm.out
        self.top = 5
        self.temperature = 4.0

    def forward(self, prompt: torch.Tensor, max_new_tokens: torch.Tensor, seed: torch.Tensor
                ) -> Tuple[torch.Tensor, torch.Tensor]:
        y, (h, c) = self.lstm(self.embed(prompt))
        logits = self.out(y[:, -1])
        tokens = prompt[:, :0]
        t = torch.tensor([self.temperature])
        for i in range(int(max_new_tokens)):
            vals, idx = logits.topk(self.top, dim=-1)
            choice = torch.ops.dynvm.sample(vals, t, seed, torch.tensor([i]))
            tok = idx.gather(1, choice.unsqueeze(1))
            tokens = torch.cat([tokens, tok], 1)
            y, (h, c) = self.lstm(self.embed(tok), (h, c))
            logits = self.out(y[:, -1])
        return tokens, logits


def sample_op_margin(module, prompt, n, seed):
    """The smallest relative distance between u * sum(p) and a CDF entry dynvm::Sample compares
    it with, and how many draws picked other than the most likely token."""
    worst, others = 1.0, 0
    with torch.no_grad():
        y, (h, c) = module.lstm(module.embed(prompt))
        logits = module.out(y[:, -1])
        for i in range(n):
            vals, idx = logits.topk(module.top, dim=-1)
            rows = vals.numpy().astype(np.float64)
            for r, row in enumerate(rows):
                p = np.exp((row - row.max()) / module.temperature)
                u = philox_uniform(int(seed[0]), i, r) * p.sum()
                worst = min(worst, float(np.abs(np.cumsum(p) - u).min() / p.sum()))
            choice = torch.from_numpy(sample_rows(rows, module.temperature, int(seed[0]), i))
            others += int((choice > 0).sum())
            tok = idx.gather(1, choice.unsqueeze(1))
            y, (h, c) = module.lstm(module.embed(tok), (h, c))
            logits = module.out(y[:, -1])
    return worst, others


def beam_margins(lm, prompt, n):
    """Replays the beam search eagerly and checks that no ranking PyTorch made is a near tie."""
    bs = BeamSearch(lm)
    k, v = BEAMS, bs.vocab
    with torch.no_grad():
        b = prompt.size(0)
        y, (h, c) = lm.lstm(lm.embed(prompt))
        logp = F.log_softmax(lm.out(y[:, -1]), -1).unsqueeze(1).expand(b, k, v).reshape(b * k, v)
        h = h.repeat_interleave(k, 1)
        c = c.repeat_interleave(k, 1)
        scores = torch.full((b, k), NEG)
        scores[:, 0] = 0
        finished = torch.zeros(b, k, dtype=torch.bool)
        lengths = torch.zeros(b, k, dtype=torch.long)
        eos_row = torch.full((v,), NEG)
        eos_row[EOS] = 0
        for _ in range(n):
            step = torch.where(finished.unsqueeze(2), eos_row, logp.reshape(b, k, v))
            cand = (scores.unsqueeze(2) + step).reshape(b, k * v)
            top = cand.topk(k + 1, dim=1).values
            live = top > NEG / 2
            gaps = (top[:, :-1] - top[:, 1:])[live[:, 1:]]
            if gaps.numel() and float(gaps.min()) < MIN_MARGIN:
                return float(gaps.min())
            scores, flat = cand.topk(k, dim=1)
            beam, tok = flat // v, flat % v
            was = finished.gather(1, beam)
            lengths = lengths.gather(1, beam) + (~was).long()
            finished = was | (tok == EOS)
            rows = (beam + torch.arange(b).unsqueeze(1) * k).reshape(-1)
            h, c = h.index_select(1, rows), c.index_select(1, rows)
            y, (h, c) = lm.lstm(lm.embed(tok.reshape(-1, 1)), (h, c))
            logp = F.log_softmax(lm.out(y[:, -1]), -1)
        normed = (scores / ((5.0 + lengths.float()) / 6.0) ** 0.6).sort(1, descending=True).values
        # Beams never made live (only with no step) tie at NEG: their order does not matter.
        gaps = (normed[:, :-1] - normed[:, 1:])[normed[:, 1:] > NEG / 2]
        return float(gaps.min()) if gaps.numel() else 1.0


def sample_margin(module, prompt, uniforms):
    """The smallest distance between a uniform and a CDF entry it was compared with, and how
    many steps picked other than the most likely token (so sampling is not greedy decoding)."""
    worst = [1.0]
    others = 0

    def hook(cdf, u):
        worst[0] = min(worst[0], float((cdf - u).abs().min()))

    with torch.no_grad():
        y, (h, c) = module.lstm(module.embed(prompt))
        logits = module.out(y[:, -1])
        seen = torch.zeros(prompt.size(0), logits.size(1))
        for i in range(uniforms.size(1)):
            u = uniforms[:, i].unsqueeze(1)
            if isinstance(module, TopK):
                vals, idx = (logits / module.temperature).topk(module.top, dim=-1)
                cdf = torch.softmax(vals, -1).cumsum(-1)
            else:
                logits = logits / module.temperature
                pen = torch.where(logits > 0, logits / module.penalty, logits * module.penalty)
                logits = torch.where(seen > 0.5, pen, logits)
                s, idx = logits.sort(dim=-1, descending=True)
                probs = torch.softmax(s, -1)
                probs = probs.masked_fill(probs.cumsum(-1) - probs > module.p, 0.0)
                cdf = (probs / probs.sum(-1, keepdim=True)).cumsum(-1)
                edge = (probs.cumsum(-1) - probs) - module.p
                worst[0] = min(worst[0], float(edge.abs().min()))
            hook(cdf[:, :-1], u)
            choice = (cdf < u).long().sum(-1, keepdim=True).clamp(max=idx.size(1) - 1)
            others += int((choice > 0).sum())
            tok = idx.gather(1, choice)
            seen = seen.scatter(1, tok, 1.0)
            y, (h, c) = module.lstm(module.embed(tok), (h, c))
            logits = module.out(y[:, -1])
    return worst[0], others


def export(name, module, opset, input_names, output_names, dynamic_axes, cases):
    folder = os.path.join(HERE, name)
    os.makedirs(folder, exist_ok=True)
    scripted = torch.jit.script(module)
    path = os.path.join(folder, "model.onnx")
    torch.onnx.export(scripted, cases[0], path, opset_version=opset, input_names=input_names,
                      output_names=output_names, dynamic_axes=dynamic_axes,
                      custom_opsets={"dynvm": 1})
    onnx.checker.check_model(onnx.load(path))
    for k, inputs in enumerate(cases):
        case = os.path.join(folder, f"case{k}")
        os.makedirs(case, exist_ok=True)
        with torch.no_grad():
            outs = scripted(*inputs)
        for n, t in zip(input_names, inputs):
            np.save(os.path.join(case, f"input_{n}.npy"), t.numpy())
        for n, t in zip(output_names, outs):
            np.save(os.path.join(case, f"output_{n}.npy"), t.numpy())
        best = outs[-1] if name.startswith("beam") else outs[0]
        print(f"{name} case{k}: -> {''.join(VOCAB[i] for i in best[0].tolist())!r}")
    print(f"{name}: {os.path.getsize(path)} bytes")


def export_bench(out, hidden):
    """A larger beam search LM for tools/bench/search_compare.sh (not checked in; no margins)."""
    torch.manual_seed(3)
    lm = LstmLM(len(VOCAB), emb=64, hidden=hidden)
    print("lstm loss", train(lm, steps=100, seq_len=32, lr=1e-2, seed=3))
    os.makedirs(out, exist_ok=True)
    path = os.path.join(out, f"beam17_h{hidden}.onnx")
    prompt = torch.tensor([encode("the loop")])
    torch.onnx.export(torch.jit.script(BeamSearch(lm)), (prompt, torch.tensor(8)), path,
                      opset_version=17, input_names=["prompt", "max_new_tokens"],
                      output_names=["tokens", "scores", "best"],
                      dynamic_axes={"prompt": {0: "batch", 1: "prompt_len"}})
    print(path)


def main():
    torch.set_num_threads(1)
    if len(sys.argv) == 4 and sys.argv[1] == "--bench":
        export_bench(sys.argv[2], int(sys.argv[3]))
        return
    torch.manual_seed(3)
    lm = LstmLM(len(VOCAB), emb=16, hidden=32)
    print("lstm loss", train(lm, steps=400, seq_len=32, lr=1e-2, seed=3))
    prompts = [torch.tensor([encode("the loop")]), torch.tensor([encode("a small"), encode("greedy ")])]

    # Batch 1 and 2; "is spen" and "the tex" end at once ("t." then end tokens only), the others
    # do not within the budget, so finished and live beams are mixed in one batch.
    beam_cases = [(prompts[0], torch.tensor(12, dtype=torch.long)),
                  (torch.tensor([encode("a small"), encode("is spen")]), torch.tensor(10)),
                  (torch.tensor([encode("the tex")]), torch.tensor(8)),
                  (prompts[0], torch.tensor(0, dtype=torch.long))]
    for p, n in beam_cases:
        gap = beam_margins(lm, p, int(n))
        if gap < MIN_MARGIN:
            raise SystemExit(f"beam search case has a near tie ({gap}): pick another seed")

    gen = torch.Generator().manual_seed(7)
    sample_cases = [(prompts[0], torch.rand(1, 16, generator=gen)),
                    (prompts[1], torch.rand(2, 12, generator=gen)),
                    (prompts[1], torch.rand(2, 0, generator=gen))]
    for cls in (TopK, TopP):
        for p, u in sample_cases:
            gap, others = sample_margin(cls(lm), p, u)
            if gap < MIN_SAMPLE_MARGIN:
                raise SystemExit(f"{cls.__name__}: a uniform is {gap} from a CDF edge")
            if u.size(1) and others < 2:
                raise SystemExit(f"{cls.__name__}: only {others} non-greedy picks")

    seeded_cases = [(prompts[0], torch.tensor(16), torch.tensor([11])),
                    (prompts[1], torch.tensor(12), torch.tensor([12345678901])),
                    (prompts[1], torch.tensor(0), torch.tensor([5]))]
    for p, n, seed in seeded_cases:
        gap, others = sample_op_margin(TopKSample(lm), p, int(n), seed)
        if gap < MIN_SAMPLE_MARGIN:
            raise SystemExit(f"TopKSample: a draw is {gap} from a CDF edge")
        if int(n) and others < 2:
            raise SystemExit(f"TopKSample: only {others} non-greedy picks")

    only = set(sys.argv[1:])
    for opset in (14, 17):
        if not only or f"beam{opset}" in only:
            export(f"beam{opset}", BeamSearch(lm), opset, ["prompt", "max_new_tokens"],
                   ["tokens", "scores", "best"],
                   {"prompt": {0: "batch", 1: "prompt_len"}}, beam_cases)
        if not only or f"topk_sample{opset}" in only:
            export(f"topk_sample{opset}", TopKSample(lm), opset,
                   ["prompt", "max_new_tokens", "seed"], ["tokens", "logits"],
                   {"prompt": {0: "batch", 1: "prompt_len"}}, seeded_cases)
        for name, cls in (("topk", TopK), ("topp", TopP)):
            if not only or f"{name}{opset}" in only:
                export(f"{name}{opset}", cls(lm), opset, ["prompt", "uniforms"],
                       ["tokens", "logits"],
                       {"prompt": {0: "batch", 1: "prompt_len"},
                        "uniforms": {0: "batch", 1: "steps"}}, sample_cases)


if __name__ == "__main__":
    main()
