"""NumPy in and out: zero-copy inputs, counted copies, output lifetime, sequences and optionals,
signatures."""

import gc

import numpy as np
import pytest

import dynvm
from conftest import ONNX_NODE, onnx_node_model


def test_signature_names_dtypes_and_symbolic_dims(add_exe, charlm_exe):
    (x, y), (out,) = add_exe.signature()
    assert (x.name, y.name, out.name) == ("x", "y", "sum")
    assert x.dtype == np.float32 and x.dtype_name == "f32" and x.kind == "tensor"
    assert x.shape == (3, 4, 5)
    prompt = charlm_exe.inputs[0]
    assert prompt.name == "prompt" and prompt.dtype == np.int64
    assert prompt.shape == ("batch", "prompt_len")
    assert charlm_exe.inputs[1].shape == ()
    assert add_exe.functions == ["main"]
    assert "prompt_len" in repr(prompt)


def test_aligned_contiguous_inputs_are_bound_without_a_copy(add_exe, add_inputs):
    x, y = add_inputs
    vm = dynvm.VirtualMachine(add_exe)
    out = vm.run({"x": x, "y": y})
    assert np.shares_memory(vm.bound_inputs["x"], x)
    assert np.shares_memory(vm.bound_inputs["y"], y)
    stats = vm.last_run_stats
    assert (stats.inputs_zero_copy, stats.inputs_copied) == (2, 0)
    np.testing.assert_array_equal(out["sum"], x + y)
    # Read-only arrays are fine: the VM only reads inputs.
    x.flags.writeable = False
    vm.run(x=x, y=y)
    assert vm.last_run_stats.inputs_copied == 0


def test_other_layouts_are_copied_and_counted(add_exe, add_inputs):
    x, y = add_inputs
    vm = dynvm.VirtualMachine(add_exe)
    # Misaligned: float32 data at an odd byte offset.
    raw = np.zeros(x.nbytes + 1, np.uint8)
    misaligned = np.frombuffer(raw.data, np.float32, count=60, offset=1).reshape(3, 4, 5)
    misaligned[...] = x
    assert not misaligned.flags.aligned
    strided = np.repeat(x, 2, axis=2)[:, :, ::2]  # not contiguous
    fortran = np.asfortranarray(x)
    swapped = x.astype(">f4")  # big-endian
    for value in (misaligned, strided, fortran, swapped):
        np.testing.assert_array_equal(value, x)
        out = vm.run(x=value, y=y)
        np.testing.assert_array_equal(out["sum"], x + y)
        assert (vm.last_run_stats.inputs_copied, vm.last_run_stats.inputs_zero_copy) == (1, 1)
        assert not np.shares_memory(vm.bound_inputs["x"], value)
        assert np.shares_memory(vm.bound_inputs["y"], y)


def test_outputs_outlive_the_vm_and_the_next_run(add_exe, add_inputs):
    x, y = add_inputs
    vm = dynvm.VirtualMachine(add_exe)
    first = vm.run(x=x, y=y)["sum"]
    second = vm.run(x=x, y=x)["sum"]
    assert not np.shares_memory(first, second)
    assert first.flags.writeable and first.flags.c_contiguous
    del vm
    gc.collect()
    np.testing.assert_array_equal(first, x + y)
    np.testing.assert_array_equal(second, x + x)
    first += 1  # the caller owns it
    np.testing.assert_array_equal(first, x + y + 1)


def test_sequences_come_and_go_as_lists():
    exe = dynvm.compile(onnx_node_model("test_sequence_insert_at_back"))
    vm = dynvm.VirtualMachine(exe)
    seq = [np.array([1, 2, 3], np.int64), np.array([4, 5, 6], np.int64)]
    out = vm.run(sequence=seq, tensor=np.array([7, 8, 9], np.int64))["output_sequence"]
    assert isinstance(out, list) and len(out) == 3
    for got, want in zip(out, [[1, 2, 3], [4, 5, 6], [7, 8, 9]]):
        np.testing.assert_array_equal(got, want)


def test_optionals_take_none_or_a_value():
    vm = dynvm.VirtualMachine(dynvm.compile(onnx_node_model("test_optional_has_element_empty")))
    assert vm.run(optional_input=None)["output"].item() is False
    assert vm.run(optional_input=np.array(3, np.int32))["output"].item() is True
    vm = dynvm.VirtualMachine(dynvm.compile(onnx_node_model("test_optional_get_element")))
    value = np.array([1.5, 2, 3, 4], np.float32)
    np.testing.assert_array_equal(vm.run(optional_input=value)["output"], value)


def test_help_is_useful():
    import pydoc

    text = pydoc.render_doc(dynvm, renderer=pydoc.plaintext)
    for word in ("VirtualMachine", "without a copy", "bf16", "timeout", "stream", "cancel"):
        assert word in text
    assert "timeout" in dynvm.VirtualMachine.run.__doc__
    assert dynvm.__version__.count(".") == 2


def test_bf16_is_exchanged_as_uint16():
    to_float = dynvm.compile(onnx_node_model("test_cast_BFLOAT16_to_FLOAT"))
    to_bf16 = dynvm.compile(onnx_node_model("test_cast_FLOAT_to_BFLOAT16"))
    assert to_float.inputs[0].dtype == np.uint16 and to_float.inputs[0].dtype_name == "bf16"
    assert to_bf16.outputs[0].dtype == np.uint16 and to_bf16.outputs[0].dtype_name == "bf16"
    # Values exact in bf16 (8 bits of mantissa): no rounding to argue about.
    values = np.array([1, -2.5, 0.15625, 3e38, -1e-30, 0, 65280, 1 / 3],
                      np.float32).view(np.uint32) & 0xFFFF0000
    values = np.resize(values, 12).reshape(3, 4).view(np.float32)
    bits = (values.view(np.uint32) >> 16).astype(np.uint16)
    out = dynvm.VirtualMachine(to_bf16).run(input=values)["output"]
    assert out.dtype == np.uint16
    np.testing.assert_array_equal(out, bits)
    back = dynvm.VirtualMachine(to_float).run(input=bits)["output"]
    np.testing.assert_array_equal(back, values)
    with pytest.raises(dynvm.InvalidArgumentError, match=r"bf16 \(as numpy.uint16\)"):
        dynvm.VirtualMachine(to_float).run(input=values)


def _onnx_case(name):
    """The inputs and expected outputs of one ONNX node test (its test_data_set_0)."""
    from onnx import numpy_helper, TensorProto

    def load(path):
        t = TensorProto()
        t.ParseFromString(path.read_bytes())
        return numpy_helper.to_array(t)

    d = ONNX_NODE / name / "test_data_set_0"
    return ([load(p) for p in sorted(d.glob("input_*.pb"))],
            [load(p) for p in sorted(d.glob("output_*.pb"))])


def test_strings_go_in_as_str_bytes_or_object_arrays():
    name = "test_strnormalizer_export_monday_insensintive_upper_twodim"
    exe = dynvm.compile(onnx_node_model(name))
    assert exe.inputs[0].dtype_name == "string"
    (x,), (want,) = _onnx_case(name)  # object arrays of str, as ONNX stores them
    vm = dynvm.VirtualMachine(exe)
    for given in (x, x.astype(str), np.char.encode(x.astype(str), "utf-8"), x.astype(object)):
        out = vm.run({exe.inputs[0].name: given})[exe.outputs[0].name]
        assert out.dtype == object and out.shape == want.shape
        assert out.tolist() == want.tolist()
        assert vm.last_run_stats.inputs_copied == 1

    to_float = dynvm.compile(onnx_node_model("test_cast_STRING_to_FLOAT"))
    (s,), (f,) = _onnx_case("test_cast_STRING_to_FLOAT")
    got = dynvm.VirtualMachine(to_float).run({to_float.inputs[0].name: s})
    np.testing.assert_array_equal(got[to_float.outputs[0].name], f)

    bad = x.astype(object)
    bad.flat[1] = 7
    with pytest.raises(dynvm.InvalidArgumentError, match=r"element 1 is int, not str or bytes"):
        vm.run({exe.inputs[0].name: bad})
    with pytest.raises(dynvm.InvalidArgumentError, match=r"is a string tensor: pass a numpy"):
        vm.run({exe.inputs[0].name: np.zeros(x.shape, np.float32)})
    with pytest.raises(dynvm.InvalidArgumentError, match=r"UTF-8"):
        vm.run({exe.inputs[0].name: np.array([[b"\xff\xfe"] * x.shape[1]] * x.shape[0])})
    # The VM is still usable after each error.
    assert vm.run({exe.inputs[0].name: x})[exe.outputs[0].name].tolist() == want.tolist()
