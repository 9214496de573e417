"""Reference counts and memory over 10,000 runs: nothing grows."""

import gc
import os
import sys

import numpy as np

import dynvm


def rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def test_ten_thousand_runs_leak_nothing(add_exe, add_inputs):
    x, y = add_inputs
    misaligned = np.frombuffer(np.zeros(x.nbytes + 1, np.uint8).data, np.float32, 60, 1)
    misaligned = misaligned.reshape(3, 4, 5)
    vm = dynvm.VirtualMachine(add_exe)

    def runs(n, vm=vm):
        for i in range(n):
            out = vm.run(x=x, y=misaligned if i % 2 else y)["sum"]
            assert sys.getrefcount(out) == 2  # this name and getrefcount's argument
        return out

    runs(1000)  # warm up the pool and NumPy's caches
    gc.collect()
    x_refs, y_refs = sys.getrefcount(x), sys.getrefcount(y)
    objects = len(gc.get_objects())
    rss = rss_bytes()
    out = runs(10000)
    gc.collect()
    new_objects = len(gc.get_objects()) - objects
    growth = rss_bytes() - rss
    assert new_objects < 100, f"{new_objects} more objects tracked by gc after 10,000 runs"
    # One leaked output array (240 bytes of data) per run would be over 2 MiB.
    assert growth < 1 << 20, f"RSS grew by {growth} bytes over 10,000 runs"
    np.testing.assert_array_equal(out, x + misaligned)
    # The VM holds its last inputs (x stays bound); no reference is gained per run.
    assert sys.getrefcount(x) == x_refs
    assert sys.getrefcount(y) <= y_refs
    del runs, vm  # drops the binding's reference and bound_inputs'
    gc.collect()
    assert sys.getrefcount(x) == x_refs - 2
