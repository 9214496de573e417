"""dynvm's exceptions: one per status code of the C++ API, each also the matching built-in."""


class Error(Exception):
    """Every error dynvm raises. ``code`` is the status code's name ("INVALID_ARGUMENT", ...);
    the message is the VM's or compiler's own (it names the function, pc and node of a run
    error, the node of a compile error)."""

    code = "UNKNOWN"

    def __str__(self):
        return str(self.args[0]) if self.args else ""


class InvalidArgumentError(Error, ValueError):
    """Bad input: wrong dtype, rank or shape, a missing input, a bad option, a bad model."""

    code = "INVALID_ARGUMENT"


class NotFoundError(Error, KeyError):
    """A name that does not exist (an input, a function) or a file that cannot be found."""

    code = "NOT_FOUND"


class ResourceExhaustedError(Error, MemoryError):
    """A memory limit (VirtualMachine(memory_limit=...)) or another VM limit was reached."""

    code = "RESOURCE_EXHAUSTED"


class DeadlineExceededError(Error, TimeoutError):
    """The run passed its deadline (run(..., timeout=seconds))."""

    code = "DEADLINE_EXCEEDED"


class CancelledError(Error):
    """The run was cancelled (VirtualMachine.cancel() from another thread, or a stream closed
    early)."""

    code = "CANCELLED"


class FailedPreconditionError(Error, RuntimeError):
    """The call is not valid in the current state, e.g. a VM already running on another thread."""

    code = "FAILED_PRECONDITION"


class OutOfRangeError(Error, IndexError):
    """An index or a value outside its valid range (e.g. a symbol past its compiled bound)."""

    code = "OUT_OF_RANGE"


class UnimplementedError(Error, NotImplementedError):
    """An operator, type or feature dynvm does not support (the message names the node)."""

    code = "UNIMPLEMENTED"


class InternalError(Error):
    """A bug in dynvm: please report it with the message."""

    code = "INTERNAL"


class DataLossError(Error):
    """A corrupt or truncated file."""

    code = "DATA_LOSS"


__all__ = [
    "Error",
    "InvalidArgumentError",
    "NotFoundError",
    "ResourceExhaustedError",
    "DeadlineExceededError",
    "CancelledError",
    "FailedPreconditionError",
    "OutOfRangeError",
    "UnimplementedError",
    "InternalError",
    "DataLossError",
]
