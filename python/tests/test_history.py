"""History independence (docs/determinism.md): one VirtualMachine runs a model's first case, then
a seeded random sequence of other cases, inputs cut and tiled to other shapes (batch, prompt
length, steps, max_new_tokens, seed), earlier inputs again, other models and a second VM of 2
threads on the same executable, then a larger input, then the first input again: every input run
twice gives the same bytes both times (NaN included: the raw bytes are compared), and every
checked-in case its reference outputs.

Every model under tools/models and tools/lm is covered (enumerated from the folders, like
tests/history_test.cc); one the test cannot drive fails it.
"""

import pathlib

import numpy as np
import pytest

import dynvm
from conftest import ROOT


def discover():
    """(name, onnx path, cases folder, prefixed) for every model of tools/models and tools/lm."""
    out = []
    for d in sorted((ROOT / "tools/models").iterdir()):
        if d.is_dir() and not d.name.startswith(("__", ".")):
            onnx = sorted(d.glob("*.onnx"))
            out.append((d.name, onnx[0] if len(onnx) == 1 else None, d, False))
    for f in sorted((ROOT / "tools/lm").glob("*.onnx")):
        out.append((f.stem, f, ROOT / "tools/lm/testdata", True))
    return out


MODELS = {m[0]: m for m in discover()}


def load_cases(model, exe):
    """[(name, inputs, references)] of a model: case* folders of input_/output_ files (or the
    model's folder itself), or <case>_<name>.npy files in tools/lm/testdata."""
    _, _, data, prefixed = MODELS[model]
    cases = []
    if not prefixed:
        dirs = sorted(p for p in data.iterdir() if p.is_dir() and p.name.startswith("case"))
        for d in dirs or [data]:
            ins = {f.stem[6:]: np.load(f) for f in sorted(d.glob("input_*.npy"))}
            refs = {f.stem[7:]: np.load(f) for f in sorted(d.glob("output_*.npy"))}
            cases.append((d.name, ins, refs))
        return cases
    first = exe.inputs[0].name
    for f in sorted(data.glob(f"*_{first}.npy")):
        prefix = f.name[: -len(f"_{first}.npy")]
        ins = {i.name: np.load(data / f"{prefix}_{i.name}.npy") for i in exe.inputs}
        refs = {o.name: np.load(data / f"{prefix}_{o.name}.npy")
                for o in exe.outputs if (data / f"{prefix}_{o.name}.npy").exists()}
        cases.append((prefix, ins, refs))
    return cases


_COMPILED = {}


def compiled(model):
    """(executable, cases, largest value of each input symbol), compiled once per session."""
    if model not in _COMPILED:
        name, onnx, _, _ = MODELS[model]
        assert onnx is not None, f"{name}: not one .onnx in its folder"
        exe = dynvm.compile(str(onnx))
        cases = load_cases(model, exe)
        assert cases, f"{name}: no cases"
        names = {i.name for i in exe.inputs}
        for case, ins, refs in cases:
            assert set(ins) == names, f"{name}/{case} binds {sorted(ins)}, not {sorted(names)}"
            assert refs, f"{name}/{case} has no reference outputs"
        sizes = {"batch": 4}
        for _, ins, _ in cases:
            for i in exe.inputs:
                for axis, dim in enumerate(i.shape or ()):
                    if isinstance(dim, str):
                        sizes[dim] = max(sizes.get(dim, 0), ins[i.name].shape[axis])
        _COMPILED[model] = (exe, cases, sizes)
    return _COMPILED[model]


def up_to(rng, hi):
    return int(rng.integers(min(1, hi), hi + 1))


def variant(exe, sizes, ins, rng, largest=False, grow=1):
    """`ins` cut or tiled (cyclically: every value is one the case had) to other symbol sizes:
    the batch up to its maximum, the others up to the case's; max_new_tokens up to the case's;
    a new seed. `largest`: the batch at its maximum, the other symbols `grow` times the case's."""
    chosen, out = {}, {}
    for i in exe.inputs:
        v = ins[i.name]
        dims = list(v.shape)
        for axis, dim in enumerate(i.shape or ()):
            if isinstance(dim, str):
                hi = sizes["batch"] if dim == "batch" else v.shape[axis]
                chosen.setdefault(dim, (hi if dim == "batch" else hi * grow) if largest
                                  else up_to(rng, hi))
                dims[axis] = chosen[dim]
        idx = np.ix_(*[np.arange(n) % max(v.shape[a], 1) for a, n in enumerate(dims)])
        v = v[idx] if v.ndim else v.copy()
        if not largest and i.name == "max_new_tokens" and v.size == 1:
            v = np.full(v.shape, up_to(rng, int(v.reshape(-1)[0])), v.dtype)
        if not largest and i.name == "seed" and v.size == 1:
            v = np.full(v.shape, int(rng.integers(0, 1 << 30)), v.dtype)
        out[i.name] = np.array(v, order="C")  # (ascontiguousarray makes a scalar 1-d)
    return out


def raw(outputs):
    """Each output's dtype, shape and bytes (the bytes of each element of a sequence)."""
    def one(v):
        if isinstance(v, (list, tuple)):
            return [one(x) for x in v]
        a = np.array(v, order="C")
        return (a.dtype.str, a.shape, a.reshape(-1).view(np.uint8).tobytes())
    return {k: one(v) for k, v in outputs.items()}


def key(ins):
    return tuple(sorted((k, v.dtype.str, v.shape, v.tobytes()) for k, v in ins.items()))


def check_references(outputs, refs, what):
    for name, want in refs.items():
        got = np.asarray(outputs[name])
        assert got.shape == want.shape, f"{what}: {name} {got.shape} != {want.shape}"
        if want.dtype == np.float32:
            np.testing.assert_allclose(got, want, atol=1e-4, rtol=0, err_msg=f"{what}: {name}")
        else:
            np.testing.assert_array_equal(got, want, err_msg=f"{what}: {name}")


class History:
    """Runs inputs and checks every repeat of an input against its first run's bytes."""

    def __init__(self):
        self.seen, self.inputs, self.repeats = {}, [], 0

    def run(self, vm, ins, what):
        outputs = vm.run(ins)
        k, bits = key(ins), raw(outputs)
        if k in self.seen:
            self.repeats += 1
            first_what, first_bits = self.seen[k]
            assert bits == first_bits, f"{what}: other bytes than {first_what} on the same input"
        else:
            self.seen[k] = (what, bits)
            self.inputs.append(ins)
        return outputs


def run_step(step, i, model, vm, vm2, history, rng, others):
    exe, cases, sizes = compiled(model)
    case = cases[rng.integers(len(cases))]
    what = f"step {i} ({step})"
    if step == "case":
        check_references(history.run(vm, case[1], what), case[2], f"{what}: {case[0]}")
    elif step == "variant":
        history.run(vm, variant(exe, sizes, case[1], rng), what)
    elif step == "repeat":
        history.run(vm, history.inputs[rng.integers(len(history.inputs))], what)
    elif step == "second_vm":
        history.run(vm2, variant(exe, sizes, case[1], rng), what)
    else:  # another model in the same process, on its own VM
        names = [m for m in MODELS if m != model]
        other = names[rng.integers(len(names))]
        o_exe, o_cases, _ = compiled(other)
        if other not in others:
            others[other] = dynvm.VirtualMachine(o_exe)
        name, ins, refs = o_cases[rng.integers(len(o_cases))]
        check_references(others[other].run(ins), refs, f"{what}: {other}/{name}")


@pytest.mark.parametrize("model", sorted(MODELS))
def test_the_first_input_again_gives_the_same_bytes(model):
    exe, cases, sizes = compiled(model)
    rng = np.random.default_rng(sum(map(ord, model)))
    vm = dynvm.VirtualMachine(exe)
    vm2 = dynvm.VirtualMachine(exe, threads=2)  # the same executable, 2 intra-op threads
    history, others = History(), {}
    name, first, refs = cases[0]
    first_outputs = history.run(vm, first, "the first run")
    check_references(first_outputs, refs, f"{model}/{name}")
    first_bits = raw(first_outputs)

    steps = ["case", "variant", "repeat", "second_vm", "other_model"] * 5
    rng.shuffle(steps)
    for i, step in enumerate(steps):
        run_step(step, i, model, vm, vm2, history, rng, others)

    # A larger input (the pool's blocks grow dirty), then the first input again.
    big = max(cases, key=lambda c: sum(v.size for v in c[1].values()))[1]
    large = variant(exe, sizes, big, rng, largest=True)
    if sum(v.size for v in large.values()) <= sum(v.size for v in first.values()):
        large = variant(exe, sizes, big, rng, largest=True, grow=2)  # a fixed batch: longer
    assert sum(v.size for v in large.values()) > sum(v.size for v in first.values())
    history.run(vm, large, "the larger input")
    again = vm.run(first)
    assert raw(again) == first_bits, f"{model}: the first input again gives other bytes"
    check_references(again, refs, f"{model}/{name} again")
    assert history.repeats >= 5


def test_every_folder_is_enumerated():
    assert sum(not m[3] for m in MODELS.values()) >= 10
    assert any(m[3] for m in MODELS.values())  # tools/lm
    assert all(m[1] is not None for m in MODELS.values()), "a model folder without one .onnx"
