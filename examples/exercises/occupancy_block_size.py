"""Exercise occupancy_block_size (chapter: occupancy).

`add(a, b, out)` computes out = a + b (float32, n >= 1 elements), one
thread per element, in blocks of THREADS = 32 threads. Two things are wrong
with it:

1) it is wrong: the launcher rounds the number of blocks down, so the last
   n % THREADS elements are never written;
2) it is slow on a GPU: an SM holds at most 32 blocks (sm_80, sm_90), so
   blocks of one warp fill at most 32 of its 64 warp slots, half the
   occupancy a memory-bound kernel wants to keep enough loads in flight.

Make it right for every n, then, on a GPU, make it fast: at least 0.8 of
the speed of the chapter's vector add (256 threads per block).

    python -m kernels.exercises check occupancy_block_size examples/exercises/occupancy_block_size.py
"""

from numba import cuda

THREADS = 32


@cuda.jit
def add_kernel(a, b, out):
    i = cuda.grid(1)
    if i < out.shape[0]:
        out[i] = a[i] + b[i]


def add(a, b, out):
    """a, b, out: float32 device arrays of one length n >= 1."""
    n = out.shape[0]
    add_kernel[max(1, n // THREADS), THREADS](a, b, out)
