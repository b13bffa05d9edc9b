"""Exercise softmax_rows (chapter: algorithm-level optimization, online softmax).

`softmax(x, out)` writes the softmax of each row of x (M x N float32) to
out: out[r, c] = exp(x[r, c]) / sum_c' exp(x[r, c']). One block per row:
the block's threads add up exp(x) over the row, reduce their sums in
shared memory, and each writes its elements as exp(x - lse), where
lse = log(sum exp(x)) is the row's log-sum-exp. That is right on paper and
wrong in float32 as soon as the logits are large: exp overflows to inf
above 88.7 (then lse = inf and every output is 0), and underflows to 0 far
below 0 (then lse = -inf). The grader's rows are shifted by up to +-100,
as unnormalised scores can be. Softmax does not change when a constant is
subtracted from a row: make it right for any finite logits (subtract the
row's maximum; in one pass over the row, as online softmax does, if you
like: rescale the running sum each time the maximum grows).

    python -m kernels.exercises check softmax_rows examples/exercises/softmax_rows.py
"""

import math

from numba import cuda, float32

THREADS = 128  # a power of two (the tree below halves it)


@cuda.jit(device=True)
def block_sum(red, v):
    """The sum of every thread's v, returned to all threads (a tree in shared memory)."""
    t = cuda.threadIdx.x
    red[t] = v
    cuda.syncthreads()
    s = THREADS // 2
    while s > 0:
        if t < s:
            red[t] += red[t + s]
        cuda.syncthreads()
        s //= 2
    total = red[0]
    cuda.syncthreads()  # everyone has read red[0] before red is written again
    return total


@cuda.jit
def softmax_kernel(x, out):
    red = cuda.shared.array(THREADS, dtype=float32)
    r, t = cuda.blockIdx.x, cuda.threadIdx.x
    N = x.shape[1]
    s = float32(0.0)
    for c in range(t, N, THREADS):
        s += math.exp(x[r, c])
    lse = math.log(block_sum(red, s))  # log sum exp(x): softmax = exp(x - lse)
    for c in range(t, N, THREADS):
        out[r, c] = math.exp(x[r, c] - lse)


def softmax(x, out):
    """x, out: M x N float32 device arrays (M, N >= 1)."""
    softmax_kernel[x.shape[0], THREADS](x, out)
