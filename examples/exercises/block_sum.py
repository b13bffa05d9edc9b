"""Exercise block_sum (chapter: warp divergence).

`total(x, out)` adds up x (float32, n >= 1 elements) into out[0]: each block
sums THREADS elements in shared memory by a tree (sequential addressing, as
the chapter's step 2), and its thread 0 adds the block's sum to out[0]
atomically. It is right when n is a multiple of THREADS and wrong
otherwise: the last block's threads read past the end of x. Make it right
for every n.

    python -m kernels.exercises check block_sum examples/exercises/block_sum.py
"""

import math

from numba import cuda, float32

THREADS = 128


@cuda.jit
def block_sum_kernel(x, out):
    partial = cuda.shared.array(THREADS, dtype=float32)
    t = cuda.threadIdx.x
    i = cuda.blockIdx.x * THREADS + t
    partial[t] = x[i]
    cuda.syncthreads()
    s = THREADS // 2
    while s > 0:
        if t < s:
            partial[t] += partial[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        cuda.atomic.add(out, 0, partial[0])


def total(x, out):
    """x: float32 device array of n >= 1 elements; out: one float32, set to their sum."""
    out[:] = 0  # the blocks add into it
    block_sum_kernel[math.ceil(x.shape[0] / THREADS), THREADS](x, out)
