"""Every error class, its built-in base and its message; bad input raises and leaves the VM
usable."""

import os

import numpy as np
import pytest

import dynvm
from conftest import ROOT, charlm_case, long_charlm_inputs, onnx_node_model

# Status code -> (class, the built-in it also derives from).
CLASSES = {
    "INVALID_ARGUMENT": (dynvm.InvalidArgumentError, ValueError),
    "NOT_FOUND": (dynvm.NotFoundError, KeyError),
    "RESOURCE_EXHAUSTED": (dynvm.ResourceExhaustedError, MemoryError),
    "DEADLINE_EXCEEDED": (dynvm.DeadlineExceededError, TimeoutError),
    "CANCELLED": (dynvm.CancelledError, dynvm.Error),
    "FAILED_PRECONDITION": (dynvm.FailedPreconditionError, RuntimeError),
    "OUT_OF_RANGE": (dynvm.OutOfRangeError, IndexError),
    "UNIMPLEMENTED": (dynvm.UnimplementedError, NotImplementedError),
    "INTERNAL": (dynvm.InternalError, dynvm.Error),
    "DATA_LOSS": (dynvm.DataLossError, dynvm.Error),
    "ABORTED": (dynvm.Error, Exception),
}


@pytest.mark.parametrize("code", sorted(CLASSES))
def test_each_status_code_maps_to_its_class(code):
    cls, builtin = CLASSES[code]
    with pytest.raises(cls) as info:
        dynvm._dynvm._raise_status(code, "the message")
    assert type(info.value) is cls
    assert isinstance(info.value, builtin) and isinstance(info.value, dynvm.Error)
    assert str(info.value) == "the message" and info.value.code == code


def test_real_errors_carry_the_vm_message(add_exe, charlm_exe, tmp_path):
    # Adagrad lives in the ai.onnx.preview.training domain, which dynvm does not import.
    with pytest.raises(dynvm.UnimplementedError, match="imports no opset of the default ONNX"):
        dynvm.compile(onnx_node_model("test_adagrad"))
    with pytest.raises(dynvm.NotFoundError, match="cannot open"):
        dynvm.load(str(tmp_path / "missing.dvm"))
    (tmp_path / "bad.dvm").write_bytes(b"DVM0" + bytes(200))
    with pytest.raises(dynvm.InvalidArgumentError, match="not a dynvm executable"):
        dynvm.load(str(tmp_path / "bad.dvm"))
    inputs, want = charlm_case("greedy_b1")
    vm = dynvm.VirtualMachine(charlm_exe, memory_limit=1024)
    with pytest.raises(MemoryError, match=r"function 'main' pc \d+ .*memory limit"):
        vm.run(inputs)
    vm = dynvm.VirtualMachine(charlm_exe)
    with pytest.raises(KeyError, match="no function named 'step'"):
        vm.run(inputs, function="step")
    with pytest.raises(dynvm.InvalidArgumentError, match="exceeds its declared bound"):
        vm.run(dict(inputs, prompt=np.zeros((5, 3), np.int64)))
    with pytest.raises(TimeoutError, match="deadline"):
        vm.run(long_charlm_inputs(), timeout=0)
    np.testing.assert_array_equal(vm.run(inputs)["tokens"], want)
    with pytest.raises(dynvm.InvalidArgumentError, match="threads"):
        dynvm.VirtualMachine(add_exe, threads=0)
    for bad in (-1, os.cpu_count() + 1, 1 << 20):
        with pytest.raises(dynvm.InvalidArgumentError, match=r"threads must be in \[1, "):
            dynvm.VirtualMachine(add_exe, threads=bad)
    with pytest.raises(dynvm.InvalidArgumentError, match="device"):
        dynvm.compile(str(ROOT / "tools/lm/charlm.onnx"), device="tpu")
    charlm = str(ROOT / "tools/lm/charlm.onnx")
    with pytest.raises(ValueError, match="bound batch must be a number, got 'x'"):
        dynvm.compile(charlm, bounds={"batch": "x"})
    with pytest.raises(ValueError, match="bound batch: a bound must be >= 0"):
        dynvm.compile(charlm, bounds={"batch": -1})
    with pytest.raises(ValueError, match="bounds must be a dict"):
        dynvm.compile(charlm, bounds=[("batch", 1)])
    with pytest.raises(ValueError, match="memory_limit must be a number"):
        dynvm.VirtualMachine(add_exe, memory_limit="1G")
    with pytest.raises(ValueError, match="timeout must be a number"):
        vm.run(inputs, timeout="soon")
    with pytest.raises(ValueError, match="timeout must be >= 0"):
        vm.run(inputs, timeout=-1)


def test_bad_input_raises_and_the_vm_stays_usable(add_exe, add_inputs):
    x, y = add_inputs
    vm = dynvm.VirtualMachine(add_exe)
    bad = [
        ({"x": x.astype(np.float64), "y": y}, dynvm.InvalidArgumentError,
         "input 'x' must be float32, got float64"),
        ({"x": x.astype(np.int32), "y": y}, ValueError, "must be float32, got int32"),
        ({"x": x[0], "y": y}, ValueError, r"'x' must have shape \[3, 4, 5\] \(rank 3\), got \[4, 5\]"),
        ({"x": x.reshape(3, 20), "y": y}, ValueError, "rank 3"),
        ({"x": np.zeros((3, 4, 6), np.float32), "y": y}, ValueError, r"got \[3, 4, 6\]"),
        ({"x": x}, dynvm.InvalidArgumentError, "missing input of function 'main': y"),
        ({"x": x, "y": y, "z": y}, KeyError, "no input named 'z'; its inputs are: x, y"),
        ({"x": x.tolist(), "y": y}, ValueError, "'x' must be a numpy.ndarray of float32, got list"),
        ({"x": 1.0, "y": y}, ValueError, "got float"),
        ({"x": None, "y": y}, ValueError, "got NoneType"),
        ({"x": np.float32(1), "y": y}, ValueError, "got numpy.float32"),
        ({1: x, "y": y}, ValueError, "input names must be str"),
    ]
    for inputs, cls, message in bad:
        with pytest.raises(cls, match=message):
            vm.run(inputs)
        np.testing.assert_array_equal(vm.run(x=x, y=y)["sum"], x + y)
    with pytest.raises(ValueError, match="given twice"):
        vm.run({"x": x}, x=x, y=y)
    with pytest.raises(ValueError, match="must be a dict"):
        vm.run([1, 2, 3])
    np.testing.assert_array_equal(vm.run(x=y, y=x)["sum"], x + y)
