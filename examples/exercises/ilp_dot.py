"""Exercise ilp_dot (chapter: instruction-level parallelism).

`dot(a, b, out)` sets out[0] to the dot product of a and b (float32,
n >= 1 elements). A fixed grid of blocks walks the vectors with a
grid-stride loop; to keep several loads and FMAs in flight, each thread
has four independent accumulators and handles four elements per trip, one
grid-stride apart. Each block then sums its threads' values in shared
memory, and its thread 0 adds the block's sum to out[0] atomically.

The unrolled loop runs only while all four of a trip's elements exist:
the last (up to 4 x threads-in-the-grid - 1) elements are dropped, so the
answer is wrong for almost every n (for every n below four grid-strides,
it is 0). Keep the four accumulators and make it right for every n.

    python -m kernels.exercises check ilp_dot examples/exercises/ilp_dot.py
"""

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
