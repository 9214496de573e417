"""Shared fixtures of the dynvm Python tests (run by ctest as python_test: python/CMakeLists.txt).

The models: tools/models' PyTorch-exported decoders and tools/lm's character LM (checked in with
their reference outputs), and single-operator models from ONNX's test data (libonnx-testdata,
installed by tools/install-deps.sh test).
"""

import os
import pathlib

import numpy as np
import pytest

import dynvm

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILD = pathlib.Path(os.environ.get("DYNVM_BUILD_DIR", ROOT / "build" / "release"))
ONNX_NODE = pathlib.Path("/usr/share/libonnx-testdata/data/node")
DECODERS = ["gpt", "lstm_cat", "lstm_list", "lstm_scatter"]
CHARLM_BOUNDS = {"batch": 4, "max_new_tokens": 4096, "prompt_len": 64}


def onnx_node_model(name):
    path = ONNX_NODE / name / "model.onnx"
    assert path.exists(), f"{path} is missing: bash tools/install-deps.sh test (libonnx-testdata)"
    return str(path)


@pytest.fixture(scope="session")
def add_exe():
    """Add of two float32 [3, 4, 5] tensors into `sum`."""
    return dynvm.compile(onnx_node_model("test_add"))


@pytest.fixture()
def add_inputs():
    x = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    y = np.full((3, 4, 5), 0.5, np.float32)
    return x, y


@pytest.fixture(scope="session")
def charlm_exe():
    return dynvm.compile(str(ROOT / "tools/lm/charlm.onnx"), bounds=CHARLM_BOUNDS)


def charlm_case(name):
    """Inputs and the reference tokens of one tools/lm/testdata case (export_charlm.py)."""
    d = ROOT / "tools/lm/testdata"
    inputs = {k: np.load(d / f"{name}_{k}.npy")
              for k in ("prompt", "max_new_tokens", "temperature", "seed", "stop_token")}
    return inputs, np.load(d / f"{name}_tokens.npy")


def long_charlm_inputs():
    """A greedy run of 4096 steps with no stop token: long enough to cancel or time out."""
    inputs, _ = charlm_case("greedy_b1")
    inputs["max_new_tokens"] = np.array(4096, np.int64)
    return inputs
