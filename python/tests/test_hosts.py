"""What a long-running host needs (issue: long-running hosts): safe default limits, Ctrl-C and
other signal handlers during a run, every vm-compile option and every model form in compile(),
weights kept in memory, and trim().

The runaway programs are ONNX Loops made with onnx.helper: one whose condition never turns
false (no trip count), and one that grows a tensor every iteration.
"""
import os
import pathlib
import signal
import threading
import time
import warnings

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import dynvm
from conftest import ROOT, onnx_node_model


def check_decode_sampling():
    """decode=True on the checked-in step model (tests/data/llama_step): the sampling inputs
    (temperature, top_k, top_p, repetition_penalty, seed, stop_token) are the entry's; greedy
    tokens are PyTorch's, top_k=1 at a temperature is greedy, a bad top_p raises naming it."""
    case = ROOT / "tests/data/llama_step"
    exe = dynvm.compile(str(case / "model.onnx"), decode=True)
    names = [i.name for i in exe.inputs]
    assert names == ["prompt", "max_new_tokens", "temperature", "top_k", "top_p",
                     "repetition_penalty", "seed", "stop_token"], names
    vm = dynvm.VirtualMachine(exe)
    want = np.load(case / "case0/output_tokens.npy")
    feeds = dict(prompt=np.load(case / "case0/input_prompt.npy"),
                 max_new_tokens=np.array(want.shape[1], np.int64),
                 temperature=np.array(0, np.float32), top_k=np.array(0, np.int64),
                 top_p=np.array(1, np.float32), repetition_penalty=np.array(1, np.float32),
                 seed=np.array(3, np.int64), stop_token=np.array(-1, np.int64))
    np.testing.assert_array_equal(vm.run(feeds)["tokens"], want)
    feeds.update(temperature=np.array(0.9, np.float32), top_k=np.array(1, np.int64))
    np.testing.assert_array_equal(vm.run(feeds)["tokens"], want)
    feeds.update(top_p=np.array(1.5, np.float32))
    with pytest.raises(dynvm.InvalidArgumentError, match=r"top_p must be in \(0, 1\]"):
        vm.run(feeds)


def endless_loop_model(grow=False):
    """y = Loop(no trip count, cond=true): x + 1 forever (or x concatenated with itself)."""
    body_nodes = [helper.make_node("Identity", ["cond_in"], ["cond_out"])]
    if grow:
        body_nodes.append(helper.make_node("Concat", ["x_in", "x_in"], ["x_out"], axis=0))
    else:
        body_nodes.append(helper.make_node("Add", ["x_in", "one"], ["x_out"]))
    body = helper.make_graph(
        body_nodes, "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_in", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("x_out", TensorProto.FLOAT, None)],
        [helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["", "true", "x"], ["y"], body=body)], "endless",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [helper.make_tensor("true", TensorProto.BOOL, [], [True])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])


@pytest.fixture(scope="module")
def endless_exe():
    return dynvm.compile(endless_loop_model())


X = np.zeros(4, np.float32)


def test_defaults_are_vm_runs_and_zero_or_none_remove_them(endless_exe):
    assert dynvm.DEFAULT_MAX_ITERATIONS == 10_000_000
    assert dynvm.DEFAULT_MEMORY_LIMIT == 4 << 30
    vm = dynvm.VirtualMachine(endless_exe, max_iterations=1000)
    with pytest.raises(dynvm.ResourceExhaustedError, match="loop iteration limit of 1000"):
        vm.run(x=X)
    # The default budget stops an endless loop too (10,000,000 iterations, a few seconds).
    vm = dynvm.VirtualMachine(endless_exe)
    start = time.monotonic()
    with pytest.raises(dynvm.ResourceExhaustedError, match="loop iteration limit of 10000000"):
        vm.run(x=X)
    assert time.monotonic() - start < 60
    # 0 and None remove a limit: the timeout ends the run instead.
    for unlimited in (0, None):
        vm = dynvm.VirtualMachine(endless_exe, max_iterations=unlimited, memory_limit=unlimited)
        with pytest.raises(dynvm.DeadlineExceededError):
            vm.run(x=X, timeout=0.2)
        assert vm.last_run_stats.loop_iterations > 0
    with pytest.raises(dynvm.InvalidArgumentError, match="max_iterations"):
        dynvm.VirtualMachine(endless_exe, max_iterations=-1)
    with pytest.raises(dynvm.InvalidArgumentError, match="memory_limit"):
        dynvm.VirtualMachine(endless_exe, memory_limit=-5)


def test_a_loop_that_grows_a_tensor_stops_at_the_default_memory_limit():
    exe = dynvm.compile(endless_loop_model(grow=True))
    vm = dynvm.VirtualMachine(exe)
    with pytest.raises(dynvm.ResourceExhaustedError, match="memory limit"):
        vm.run(x=X)
    assert vm.memory_stats["bytes_reserved"] <= dynvm.DEFAULT_MEMORY_LIMIT
    small = dynvm.VirtualMachine(exe, memory_limit=1 << 20)
    with pytest.raises(dynvm.ResourceExhaustedError):
        small.run(x=X)


def _interrupt_after(seconds, signum=signal.SIGINT):
    sent = []

    def send():
        sent.append(time.monotonic())
        os.kill(os.getpid(), signum)

    timer = threading.Timer(seconds, send)
    timer.start()
    return timer, sent


def test_a_real_sigint_stops_run_within_100_ms(endless_exe):
    vm = dynvm.VirtualMachine(endless_exe, max_iterations=0)
    timer, sent = _interrupt_after(0.3)
    with pytest.raises(KeyboardInterrupt):
        vm.run(x=X)
    stopped = time.monotonic()
    timer.join()
    assert sent and stopped - sent[0] < 0.1, f"stopped {stopped - sent[0]:.3f} s after SIGINT"
    # The VM is usable after it.
    bounded = dynvm.VirtualMachine(endless_exe, max_iterations=10)
    with pytest.raises(dynvm.ResourceExhaustedError):
        bounded.run(x=X)
    with pytest.raises(dynvm.DeadlineExceededError):
        vm.run(x=X, timeout=0.05)


def test_a_real_sigint_stops_stream_within_100_ms(charlm_exe):
    from conftest import ROOT, charlm_case
    # 4096 tokens take about 0.3 s on a fast core, the time the signal comes: a million
    # (about 70 s) makes sure the stream is still running when it does.
    long_exe = dynvm.compile(str(ROOT / "tools/lm/charlm.onnx"),
                             bounds={"batch": 1, "max_new_tokens": 1 << 20, "prompt_len": 64})
    vm = dynvm.VirtualMachine(long_exe, max_iterations=0)
    inputs, _ = charlm_case("greedy_b1")
    inputs["max_new_tokens"] = np.array(1 << 20, np.int64)
    timer, sent = _interrupt_after(0.3)
    stream = vm.stream(inputs)
    with pytest.raises(KeyboardInterrupt):
        for _ in stream:
            pass
    stopped = time.monotonic()
    timer.join()
    assert sent and stopped - sent[0] < 0.1, f"stopped {stopped - sent[0]:.3f} s after SIGINT"
    assert not vm.running  # the worker is gone: the process can exit
    out = vm.run(charlm_exe_inputs(), timeout=30)  # usable after it
    assert "tokens" in out


def charlm_exe_inputs():
    from conftest import charlm_case
    inputs, _ = charlm_case("greedy_b1")
    return inputs


def test_python_signal_handlers_run_while_a_run_is_in_progress(endless_exe):
    seen = []
    previous = signal.signal(signal.SIGUSR1, lambda *_: seen.append(time.monotonic()))
    try:
        vm = dynvm.VirtualMachine(endless_exe, max_iterations=0)
        timer, sent = _interrupt_after(0.2, signal.SIGUSR1)
        start = time.monotonic()
        with pytest.raises(dynvm.DeadlineExceededError):
            vm.run(x=X, timeout=1.0)
        timer.join()
        # The handler ran during the run (well before its deadline), not after it.
        assert seen and seen[0] - sent[0] < 0.1 and seen[0] - start < 0.5
    finally:
        signal.signal(signal.SIGUSR1, previous)


def test_compile_takes_a_path_pathlike_bytes_and_a_model_proto(add_inputs):
    path = onnx_node_model("test_add")
    x, y = add_inputs
    want = x + y
    proto = onnx.load(path)
    for model in (path, pathlib.Path(path), proto.SerializeToString(),
                  bytearray(proto.SerializeToString()), proto):
        exe = dynvm.compile(model)
        out = dynvm.VirtualMachine(exe).run(x=x, y=y)
        np.testing.assert_array_equal(out["sum"], want)
    with pytest.raises(dynvm.InvalidArgumentError, match="protobuf parsing failed"):
        dynvm.compile(b"not a model")
    with pytest.raises(dynvm.InvalidArgumentError, match="model must be"):
        dynvm.compile(42)


def test_compile_has_every_vm_compile_option(tmp_path):
    lm = str(ROOT / "tools/lm/charlm.onnx")
    # --quantize-weights / --quantize-min-bytes, and --report.
    exe = dynvm.compile(lm, quantize_weights="int8", quantize_min_bytes=0)
    assert "quantize" in exe.report and " i8 " in exe.report
    assert "pass codegen" in exe.report and "kernel 0:" in exe.report
    f32 = dynvm.compile(lm)
    assert "pass quantize_weights" not in f32.report and "pass quantize_weights" in exe.report
    with pytest.raises(dynvm.InvalidArgumentError, match="quantize_weights"):
        dynvm.compile(lm, quantize_weights="int2")
    with pytest.raises(dynvm.InvalidArgumentError, match="need quantize_weights='int4'"):
        dynvm.compile(lm, quantize_weights="int8", quantize_block=64)
    int4 = dynvm.compile(lm, quantize_weights="int4", quantize_min_bytes=0, quantize_block=64,
                         quantize_zero_points=True)
    assert " int4 " in int4.report and "MatMulNBits" in int4.report
    # --quantize-accuracy-level: 0-4, int4 only.
    dynvm.compile(lm, quantize_weights="int4", quantize_accuracy_level=0)
    with pytest.raises(dynvm.InvalidArgumentError, match="quantize_accuracy_level must be 0 to 4"):
        dynvm.compile(lm, quantize_weights="int4", quantize_accuracy_level=5)
    with pytest.raises(dynvm.InvalidArgumentError, match="needs quantize_weights='int4'"):
        dynvm.compile(lm, quantize_weights="int8", quantize_accuracy_level=4)
    # --decode: the char LM is a whole decode already, not a step model.
    with pytest.raises(dynvm.InvalidArgumentError, match="--decode: unexpected input 'prompt'"):
        dynvm.compile(lm, decode=True)
    check_decode_sampling()
    with pytest.raises(dynvm.InvalidArgumentError, match="needs quantize_weights"):
        dynvm.compile(lm, quantize_min_bytes=10)
    # --disable-rewrite.
    gpt = str(ROOT / "tools/models/gpt/model.onnx")
    fused = dynvm.compile(gpt)
    plain = dynvm.compile(gpt, disable_rewrites=["attention", "attention_transpose"])
    assert "rewrite attention: 4" in fused.report
    assert "rewrite attention: 0" in plain.report or "rewrite attention:" not in plain.report
    with pytest.raises(dynvm.InvalidArgumentError, match="unknown rewrite rule 'nope'"):
        dynvm.compile(gpt, disable_rewrites=["nope"])
    # --dump-ir.
    assert "func main" in dynvm.compile(gpt, dump_ir=True).ir
    # A misspelt bound warns, as vm-compile does, and the compile goes on.
    with pytest.warns(UserWarning, match="bound max_new_tokns: no input dim"):
        dynvm.compile(gpt, bounds={"max_new_tokns": 8})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dynvm.compile(gpt, bounds={"max_new_tokens": 8})


def test_weights_apart_stay_in_memory_and_save_writes_them(tmp_path, monkeypatch):
    lm = str(ROOT / "tools/lm/charlm.onnx")
    # No temporary .dvw file is written: the weights load from memory.
    monkeypatch.setenv("TMPDIR", str(tmp_path / "nowhere"))
    exe = dynvm.compile(lm, weights="charlm.dvw")
    assert exe.weight_bytes > 1_000_000
    inputs = charlm_exe_inputs()
    a = dynvm.VirtualMachine(exe).run(inputs)
    b = dynvm.VirtualMachine(dynvm.compile(lm)).run(inputs)
    np.testing.assert_array_equal(a["tokens"], b["tokens"])
    exe.save(str(tmp_path / "charlm.dvm"))
    assert (tmp_path / "charlm.dvw").exists()
    c = dynvm.VirtualMachine(dynvm.load(str(tmp_path / "charlm.dvm"))).run(inputs)
    np.testing.assert_array_equal(a["tokens"], c["tokens"])


def test_trim_returns_cached_memory(add_exe, add_inputs):
    x, y = add_inputs
    vm = dynvm.VirtualMachine(add_exe)
    vm.run(x=x, y=y)
    vm.trim()
    after = vm.memory_stats
    assert after["bytes_reserved"] <= after["bytes_in_use"] + 64 * 1024
    out = vm.run(x=x, y=y)  # usable after it
    np.testing.assert_array_equal(out["sum"], x + y)


def test_constant_bytes_copied_and_mapped_count_the_constants_file(tmp_path):
    lm = str(ROOT / "tools/lm/charlm.onnx")
    path = tmp_path / "charlm.dvm"
    dynvm.compile(lm).save(str(path))
    size = path.stat().st_size
    inputs = charlm_exe_inputs()
    mapped = dynvm.load(str(path), constant_pages="mapped")
    assert (mapped.constant_bytes_copied, mapped.constant_bytes_mapped) == (0, size)
    # In 2 MB pages: no table of 2 MiB or more is only gathered from here, so all is copied.
    huge = dynvm.load(str(path), constant_pages="huge")
    assert (huge.constant_bytes_copied, huge.constant_bytes_mapped) == (size, 0)
    np.testing.assert_array_equal(dynvm.VirtualMachine(mapped).run(inputs)["tokens"],
                                  dynvm.VirtualMachine(huge).run(inputs)["tokens"])
