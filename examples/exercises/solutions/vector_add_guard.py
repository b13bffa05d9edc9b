"""Solution of vector_add_guard: every thread checks its index against n
before it loads or stores."""

import math

from numba import cuda

THREADS = 128


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] + b[i]


def add(a, b, out):
    """a, b, out: float32 device arrays of one length n >= 1."""
    n = out.shape[0]
    add_kernel[math.ceil(n / THREADS), THREADS](a, b, out)
