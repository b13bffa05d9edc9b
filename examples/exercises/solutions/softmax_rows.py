"""Solution of softmax_rows: online softmax. Each thread keeps a running
maximum m and a sum s of exp(x - m) over its elements, rescaling s by
exp(m_old - m_new) when the maximum grows; the block merges the threads'
(m, s) pairs in shared memory the same way (a thread with no element has
s = 0 and m = -inf, and adds nothing); then out = exp(x - m) / s, where
x - m <= 0 cannot overflow and the largest term is exactly 1."""

import math

import numpy as np
from numba import cuda, float32

THREADS = 128  # a power of two (the tree below halves it)
NEG_INF = np.float32(-np.inf)


@cuda.jit(device=True)
def merge(m1, s1, m2, s2):
    """(m, s) of two parts of a row: m the larger maximum, s both sums rescaled to it."""
    if s2 == 0:
        return m1, s1
    if s1 == 0:
        return m2, s2
    m = max(m1, m2)
    return m, s1 * math.exp(m1 - m) + s2 * math.exp(m2 - m)


@cuda.jit
def softmax_kernel(x, out):
    red_m = cuda.shared.array(THREADS, dtype=float32)
    red_s = cuda.shared.array(THREADS, dtype=float32)
    r, t = cuda.blockIdx.x, cuda.threadIdx.x
    N = x.shape[1]
    m, s = NEG_INF, float32(0.0)
    for c in range(t, N, THREADS):  # one pass: the running maximum and the sum rescaled to it
        v = x[r, c]
        if v > m:
            s = s * math.exp(m - v) + float32(1.0)
            m = v
        else:
            s += math.exp(v - m)
    red_m[t], red_s[t] = m, s
    cuda.syncthreads()
    h = THREADS // 2
    while h > 0:
        if t < h:
            red_m[t], red_s[t] = merge(red_m[t], red_s[t], red_m[t + h], red_s[t + h])
        cuda.syncthreads()
        h //= 2
    m, s = red_m[0], red_s[0]
    for c in range(t, N, THREADS):
        out[r, c] = math.exp(x[r, c] - m) / s


def softmax(x, out):
    """x, out: M x N float32 device arrays (M, N >= 1)."""
    softmax_kernel[x.shape[0], THREADS](x, out)
