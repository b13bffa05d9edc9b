"""Solution of occupancy_block_size: enough blocks to cover n (the number
rounded up), and 256 threads per block, so that 8 blocks fill all 64 warp
slots of an SM."""

from numba import cuda

THREADS = 256


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] + b[i]


def add(a, b, out):
    """a, b, out: float32 device arrays of one length n >= 1."""
    n = out.shape[0]
    add_kernel[(n + THREADS - 1) // THREADS, THREADS](a, b, out)
