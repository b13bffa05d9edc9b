"""Solution of ilp_dot: after the unrolled loop, a plain grid-stride loop
adds the elements left over (fewer than four grid-strides of them) into
one of the accumulators; the four independent accumulators stay."""

import math

from numba import cuda, float32

THREADS = 128


@cuda.jit
def dot_kernel(a, b, out):
    partial = cuda.shared.array(THREADS, float32)
    t = cuda.threadIdx.x
    i, stride = cuda.grid(1), cuda.gridsize(1)
    n = a.shape[0]
    s0 = s1 = s2 = s3 = float32(0.0)
    while i + 3 * stride < n:  # four independent accumulators: four loads and FMAs in flight
        s0 += a[i] * b[i]
        s1 += a[i + stride] * b[i + stride]
        s2 += a[i + 2 * stride] * b[i + 2 * stride]
        s3 += a[i + 3 * stride] * b[i + 3 * stride]
        i += 4 * stride
    while i < n:  # the tail: at most three more elements for this thread
        s0 += a[i] * b[i]
        i += stride
    partial[t] = (s0 + s1) + (s2 + s3)
    cuda.syncthreads()
    s = THREADS // 2
    while s > 0:  # the block's sum, a tree in shared memory
        if t < s:
            partial[t] += partial[t + s]
        cuda.syncthreads()
        s //= 2
    if t == 0:
        cuda.atomic.add(out, 0, partial[0])


def blocks(n: int) -> int:
    """Four blocks per SM (one SM in the simulator), and no more than n needs."""
    sms = getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1)
    return max(1, min(4 * sms, math.ceil(n / THREADS)))


def dot(a, b, out):
    """a, b: float32 device arrays of one length n >= 1; out: one float32, set to a . b."""
    out[:] = 0  # the blocks add into it
    dot_kernel[blocks(a.shape[0]), THREADS](a, b, out)
