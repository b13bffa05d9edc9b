"""Exercise vector_add_guard (chapter: the CUDA programming model).

`add(a, b, out)` computes out = a + b with one thread per element. It is
right when n is a multiple of the block size and wrong otherwise: the last
block has threads past the end of the arrays. Make it right for every n >= 1.

Check it (in Numba's CUDA simulator without a GPU, on the GPU with one):

    python -m kernels.exercises check vector_add_guard examples/exercises/vector_add_guard.py
"""

import math

from numba import cuda

THREADS = 128


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    out[i] = a[i] + b[i]


def add(a, b, out):
    """a, b, out: float32 device arrays of one length n >= 1."""
    n = out.shape[0]
    add_kernel[math.ceil(n / THREADS), THREADS](a, b, out)
