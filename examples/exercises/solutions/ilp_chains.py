"""Solution of ilp_chains: each accumulator is stepped from its own last
value, so the four FMAs of a step are independent: a warp issues them
back to back, and four chains overlap their latency instead of one."""

import math

from numba import cuda, float32

ITERS = 1 << 16  # FMAs per element, in all four accumulators
CHAINS = 4
THREADS = 32


@cuda.jit
def chains_kernel(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        a = x[i]
        b = float32(1.0) - a
        acc0, acc1, acc2, acc3 = a, a + float32(1.0), a + float32(2.0), a + float32(3.0)
        # a while loop, not range(): numba-cuda 0.30 compiles `for _ in range(...)` with a 64-bit
        # counter check beside every unrolled step (ISETP, SEL, IADD3 per FMA in the SASS); this
        # loop unrolls to bare FFMAs (see kernel.inspect_sass())
        step = 0
        while step < ITERS // CHAINS:
            acc0 = acc0 * a + b  # four independent FMAs
            acc1 = acc1 * a + b
            acc2 = acc2 * a + b
            acc3 = acc3 * a + b
            step += 1
        out[i] = (acc0 + acc1) + (acc2 + acc3)


def chains(x, out):
    """x, out: float32 device arrays of one length n >= 1."""
    chains_kernel[math.ceil(x.shape[0] / THREADS), THREADS](x, out)
