"""Outputs of dynvm.VirtualMachine.run against PyTorch's references and against the C++ path
(vm-run on the same executable): equal tokens, bit-identical logits."""

import subprocess

import numpy as np
import pytest

import dynvm
from conftest import BUILD, DECODERS, ROOT, charlm_case


def cases(model):
    return sorted(p for p in (ROOT / "tools/models" / model).iterdir()
                  if p.is_dir() and p.name.startswith("case"))


@pytest.mark.parametrize("model", DECODERS)
def test_decoders_match_pytorch_and_the_cpp_path(model, tmp_path):
    exe = dynvm.compile(str(ROOT / "tools/models" / model / "model.onnx"))
    dvm = tmp_path / "model.dvm"
    exe.save(str(dvm))
    vm = dynvm.VirtualMachine(exe)
    found = cases(model)
    assert found
    for case in found:
        inputs = {k: np.load(case / f"input_{k}.npy") for k in ("prompt", "max_new_tokens")}
        out = vm.run(inputs)
        want_tokens = np.load(case / "output_tokens.npy")
        want_logits = np.load(case / "output_logits.npy")
        np.testing.assert_array_equal(out["tokens"], want_tokens)
        np.testing.assert_allclose(out["logits"], want_logits, rtol=0, atol=1e-4)
        # The C++ path: vm-run on the saved executable.
        out_dir = tmp_path / case.name
        cmd = [str(BUILD / "tools/vm-run"), str(dvm), "--output-dir", str(out_dir)]
        for k in inputs:
            cmd += ["-i", f"{k}={case / f'input_{k}.npy'}"]
        subprocess.run(cmd, check=True, capture_output=True)
        for name, value in out.items():
            cpp = np.load(out_dir / f"{name}.npy")
            assert cpp.dtype == value.dtype and cpp.shape == value.shape
            assert cpp.tobytes() == value.tobytes(), f"{model} {case.name} {name}"


@pytest.mark.parametrize("case", ["greedy_b1", "greedy_b3", "sampled_b2", "stop_b1"])
def test_charlm_matches_its_references(charlm_exe, case):
    inputs, want = charlm_case(case)
    out = dynvm.VirtualMachine(charlm_exe).run(inputs)
    np.testing.assert_array_equal(out["tokens"], want)


def test_loaded_executable_runs_like_the_compiled_one(tmp_path):
    onnx = str(ROOT / "tools/models/lstm_scatter/model.onnx")
    case = ROOT / "tools/models/lstm_scatter/case1"
    inputs = {k: np.load(case / f"input_{k}.npy") for k in ("prompt", "max_new_tokens")}
    compiled = dynvm.compile(onnx, bounds={"batch": 4, "prompt_len": 16})
    want = dynvm.VirtualMachine(compiled).run(inputs)
    # Weights apart: save() writes the .dvw beside the .dvm; load finds it there.
    apart = dynvm.compile(onnx, weights="lstm.dvw", compress=True)
    apart.save(str(tmp_path / "lstm.dvm"))
    assert (tmp_path / "lstm.dvw").stat().st_size > 0
    compiled.save(str(tmp_path / "one.dvm"))
    for path in ("lstm.dvm", "one.dvm"):
        loaded = dynvm.load(str(tmp_path / path))
        assert [i.name for i in loaded.inputs] == ["prompt", "max_new_tokens"]
        got = dynvm.VirtualMachine(loaded).run(inputs)
        for name in want:
            np.testing.assert_array_equal(got[name], want[name])
    assert compiled.bounds() == {"batch": 4, "prompt_len": 16}
    # A loaded executable saves its own bytes.
    dynvm.load(str(tmp_path / "one.dvm")).save(str(tmp_path / "again.dvm"))
    assert (tmp_path / "again.dvm").read_bytes() == (tmp_path / "one.dvm").read_bytes()
