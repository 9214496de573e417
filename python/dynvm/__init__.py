"""dynvm: compile ONNX models to verified bytecode and run them, from Python.

    import dynvm, numpy as np
    exe = dynvm.compile("model.onnx", bounds={"batch": 8})   # or dynvm.load("model.dvm")
    vm = dynvm.VirtualMachine(exe)                          # one per thread; exe is shared
    out = vm.run({"x": np.ones((2, 64), np.float32)})       # dict: output name -> ndarray
    for stream, value in vm.stream(prompt=p): ...           # tensors from `emit`, as produced

Inputs are bound without a copy when they are C-contiguous, aligned ndarrays of the input's
dtype (otherwise copied once: VirtualMachine.last_run_stats counts both). Outputs are ndarrays
over the VM's output storage, owned by the array (valid after the VM is gone and after the next
run). bf16 is exchanged as uint16 (the same 16 bits); sequences are lists, empty optionals None.
Errors are dynvm.Error subclasses that are also the matching built-ins (InvalidArgumentError is
a ValueError, NotFoundError a KeyError, ResourceExhaustedError a MemoryError,
DeadlineExceededError a TimeoutError). The GIL is released while compiling, loading and running.
See docs/python.md.
"""

import os as _os
import queue as _queue
import threading as _threading
import warnings as _warnings

from . import _errors
from ._dynvm import (  # noqa: F401
    DEFAULT_MAX_ITERATIONS, DEFAULT_MEMORY_LIMIT, Executable, RunStats, TensorInfo,
    _VirtualMachine, __version__)
from ._errors import (  # noqa: F401
    CancelledError, DataLossError, DeadlineExceededError, Error, FailedPreconditionError,
    InternalError, InvalidArgumentError, NotFoundError, OutOfRangeError, ResourceExhaustedError,
    UnimplementedError)
from ._dynvm import compile as _compile
from ._dynvm import load as _load

__all__ = ["compile", "load", "Executable", "VirtualMachine", "Stream", "RunStats",
           "TensorInfo", "DEFAULT_MEMORY_LIMIT", "DEFAULT_MAX_ITERATIONS"] + _errors.__all__


def compile(model, *, bounds=None, optimize=True, strip_debug=False, device="cpu", weights=None,
            compress=False, onnx_check=False, quantize_weights=None, quantize_min_bytes=None,
            quantize_block=None, quantize_zero_points=False, disable_rewrites=None,
            dump_ir=False, decode=False, quantize_accuracy_level=None):
    """Compiles an ONNX model into an Executable (in memory; save() writes it).

    `model` is a path (str or os.PathLike), the model's bytes, or an onnx.ModelProto. The options
    are vm-compile's: `bounds` maps a symbolic dim (or a one-element integer input read as a trip
    count) to its upper bound, e.g. {"batch": 8, "max_new_tokens": 64} (a bound naming nothing
    in the model is a warning, as vm-compile's); `optimize=False` is --no-optimize;
    `strip_debug` leaves out node names; `device` is "cpu" or "cuda"; `weights="model.dvw"` keeps
    the constants apart (save() writes that file beside the .dvm); `compress` stores constants
    zstd-compressed; `onnx_check` runs ONNX's checker first; `quantize_weights` is "int8",
    "bf16", "int4" or None, with `quantize_min_bytes` the smallest weight quantized (int4:
    MatMul/Gemm weights as MatMulNBits blocks of `quantize_block` values, default 32, with a
    zero point per block when `quantize_zero_points`, and MatMulNBits' accuracy_level
    `quantize_accuracy_level`, default 4: int8 activations; 0: f32); `disable_rewrites`
    lists pattern-rewrite rules not to apply; `dump_ir` keeps the compiled IR in `exe.ir`;
    `decode=True` (vm-compile --decode) wraps an Optimum/GenAI step model into one in-VM decode
    loop (docs/llm.md).
    The result's `report` is vm-compile --report's text. Raises a dynvm.Error naming the node for
    a model it cannot compile.
    """
    if isinstance(model, (bytes, bytearray, memoryview)):
        model = bytes(model)
    elif hasattr(model, "SerializeToString") and not isinstance(model, str):
        model = model.SerializeToString()
    elif isinstance(model, _os.PathLike):
        model = _os.fspath(model)
        if isinstance(model, bytes):
            model = _os.fsdecode(model)
    exe = _compile(model, bounds=bounds, optimize=optimize, strip_debug=strip_debug,
                   device=device, weights=weights, compress=compress, onnx_check=onnx_check,
                   quantize_weights=quantize_weights, quantize_min_bytes=quantize_min_bytes,
                   quantize_block=quantize_block, quantize_zero_points=quantize_zero_points,
                   disable_rewrites=disable_rewrites, dump_ir=dump_ir, decode=decode,
                   quantize_accuracy_level=quantize_accuracy_level)
    for warning in exe.warnings:
        _warnings.warn(warning, stacklevel=2)
    return exe


def load(path, *, weights=None, verify_weights_hash=False, constant_pages="auto"):
    """Loads a .dvm file: verified and shared (constants are one copy per process).

    `weights` names the .dvw file when it is not beside the .dvm; `verify_weights_hash` hashes
    every byte of the weights at load. `constant_pages`: "mapped" (the file's mapping, zero
    copy), "huge" (read at load into 2 MB pages: faster to stream), or "auto" (huge for files
    of 64 MiB or more where transparent huge pages are enabled).
    """
    return _load(path, weights=weights, verify_weights_hash=verify_weights_hash,
                 constant_pages=constant_pages)


def _feeds(inputs, kwargs):
    if inputs is None:
        return kwargs
    if not kwargs and isinstance(inputs, dict):
        return inputs
    try:
        feeds = dict(inputs)
    except (TypeError, ValueError):
        raise InvalidArgumentError(
            "inputs must be a dict of input name -> numpy.ndarray, got "
            + type(inputs).__name__) from None
    for name, value in kwargs.items():
        if name in feeds:
            raise InvalidArgumentError(
                f"input '{name}' is given twice (in the dict and as a keyword)")
        feeds[name] = value
    return feeds


class VirtualMachine(_VirtualMachine):
    """Runs the functions of an Executable:
    VirtualMachine(exe, threads=1, memory_limit=DEFAULT_MEMORY_LIMIT,
                   max_iterations=DEFAULT_MAX_ITERATIONS).

    `threads` is the number of intra-op threads each kernel may use. Safe by default, as
    vm-run: `memory_limit` caps the VM's memory pool (4 GiB) and `max_iterations` the loop
    iterations of one run (10,000,000); past either a run raises ResourceExhaustedError. Give a
    larger number to raise a limit, 0 or None to remove it. Ctrl-C (any Python signal handler
    that raises) stops a run on the main thread within about 10 ms of loop work, and the VM stays
    usable. Creating a VM is cheap (no weights are copied): make one per thread. A VM runs one
    call at a time; a second thread calling run() while a run is in progress gets
    FailedPreconditionError.

    run(inputs=None, /, *, function="", timeout=None, on_emit=None, **inputs_by_name) runs a
    function and returns its outputs (see help(VirtualMachine.run)); stream(...) yields the
    tensors the program emits as they are produced; cancel() stops a run from another thread.
    """

    def stream(self, inputs=None, /, *, function="", timeout=None, **kwargs):
        """Runs like run() on a worker thread and yields (stream, value) for each tensor the
        program emits (the `emit` instruction: a decode loop's tokens), as they are produced.

        The returned Stream's `outputs` holds the run's outputs once it is exhausted; an error
        of the run is raised from the iteration. Closing the stream early (break, close(), or
        dropping it) cancels the run.
        """
        return Stream(self, _feeds(inputs, kwargs), function, timeout)


class _Closed(Exception):
    pass


_DONE = object()


class Stream:
    """An iterator over (stream, value) pairs emitted by a run (VirtualMachine.stream)."""

    def __init__(self, vm, feeds, function, timeout):
        self._vm = vm
        self._feeds = feeds
        self._function = function
        self._timeout = timeout
        self._queue = _queue.SimpleQueue()
        self._thread = None
        self._closed = False
        self._finished = False
        self._error = None
        self.outputs = None
        """The run's outputs (dict), once the stream is exhausted."""

    def _emit(self, stream, value):
        if self._closed:
            raise _Closed()
        self._queue.put((stream, value))

    def _work(self):
        try:
            self.outputs = self._vm._run(self._feeds, self._function, self._timeout, self._emit)
        except BaseException as e:  # noqa: B902 (handed to the consuming thread)
            self._error = e
        finally:
            self._queue.put(_DONE)

    def __iter__(self):
        return self

    def __next__(self):
        if self._finished:
            raise StopIteration
        if self._thread is None:
            self._thread = _threading.Thread(target=self._work, name="dynvm-stream")
            self._thread.start()
        try:
            item = self._queue.get()
        except BaseException:
            # Ctrl-C (or any exception) while waiting: the run stops with the consumer.
            self.close()
            raise
        if item is _DONE:
            self._finished = True
            self._thread.join()
            self._feeds = None
            if self._error is not None:
                error, self._error = self._error, None
                raise error
            raise StopIteration
        return item

    def close(self):
        """Stops the run (if it is still going) and waits for it."""
        if self._thread is not None and not self._finished:
            self._closed = True
            self._vm.cancel()
            self._thread.join()
            self._finished = True
            self._error = None

    def __del__(self):
        try:
            self.close()
        except Exception:  # noqa: BLE001 (never raise from a finalizer)
            pass

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False
