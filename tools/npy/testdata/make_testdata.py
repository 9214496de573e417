#!/usr/bin/python3
"""Writes the .npy files that tools/npy/npy_test.cc reads.

Run with Debian's Python (it has numpy), from any directory:
  /usr/bin/python3 tools/npy/testdata/make_testdata.py
The values are asserted exactly in npy_test.cc; change both together.
"""
import os

import numpy as np
from numpy.lib import format as npformat

HERE = os.path.dirname(os.path.abspath(__file__))


def save(name, array, version=None):
    path = os.path.join(HERE, name)
    with open(path, "wb") as f:
        if version is None:
            np.save(f, array)
        else:
            npformat.write_array(f, array, version=version)


def main():
    # One file per dtype, little-endian, C order.
    save("f4.npy", np.array([[1.5, -2.25, 0.0], [1024.0, -0.5, 3.0e-3]], dtype="<f4"))
    save("f8.npy", np.array([0.1, -1e300, np.inf], dtype="<f8"))
    save("f2.npy", np.array([1.0, -2.0, 0.5, 65504.0], dtype="<f2"))
    save("i1.npy", np.array([-128, -1, 0, 1, 127], dtype="|i1"))
    save("i2.npy", np.array([-32768, -1, 0, 32767], dtype="<i2"))
    save("i4.npy", np.array([[-2147483648, 7], [0, 2147483647]], dtype="<i4"))
    save("i8.npy", np.array([-(2**63), -1, 2**63 - 1], dtype="<i8"))
    save("u1.npy", np.array([0, 1, 254, 255], dtype="|u1"))
    save("u2.npy", np.array([0, 1, 65535], dtype="<u2"))
    save("u4.npy", np.array([0, 4294967295], dtype="<u4"))
    save("u8.npy", np.array([0, 2**64 - 1, 12345678901234567890], dtype="<u8"))
    save("b1.npy", np.array([True, False, True, True], dtype="|b1"))
    # Shapes.
    save("scalar_f8.npy", np.array(3.5, dtype="<f8"))
    save("empty_f4.npy", np.zeros((0, 3), dtype="<f4"))
    # Fortran order: the same values as np.arange(n).reshape(shape) in C order.
    save("fortran_i4.npy", np.asfortranarray(np.arange(6, dtype="<i4").reshape(2, 3)))
    save("fortran_u1.npy", np.asfortranarray(np.arange(24, dtype="|u1").reshape(2, 3, 4)))
    # Big-endian.
    save("be_f4.npy", np.array([1.5, -2.25, 1024.0], dtype=">f4"))
    save("be_i8.npy", np.array([-(2**63), -2, 0x0102030405060708], dtype=">i8"))
    save("be_u2.npy", np.array([0x0102, 0xFFFE], dtype=">u2"))
    save("be_fortran_f8.npy",
         np.asfortranarray((np.arange(6).reshape(2, 3) / 4).astype(">f8")))
    # Strings (docs/strings.md): NumPy's str arrays are fixed-width UTF-32.
    save("str_u.npy", np.array([["a", "caf\u00e9"], ["", "\u20ac\U0001F600"]]))
    save("be_fortran_str.npy",
         np.asfortranarray(np.array([["x", "yz", ""], ["\u00e9", "w", "v"]], dtype=">U2")))
    # Other format versions.
    save("v2_f4.npy", np.array([[1.0, 2.0], [3.0, 4.0]], dtype="<f4"), version=(2, 0))
    save("v3_i2.npy", np.array([-3, 4, 5], dtype="<i2"), version=(3, 0))


if __name__ == "__main__":
    main()
