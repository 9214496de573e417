"""The seeded input the benchmarks and their node scripts (ort_cnn.js) build alike."""

import numpy as np


def lcg(n):
    """n float32 values in [-1, 1) from the linear congruential generator ort_cnn.js also runs."""
    out = np.empty(n, dtype=np.float32)
    s = 12345
    for i in range(n):
        s = (s * 1103515245 + 12345) % 2147483648
        out[i] = s / 2147483648 * 2 - 1
    return out
