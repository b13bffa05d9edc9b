"""Exercise ilp_chains (chapter: instruction-level parallelism).

`chains(x, out)` does, for every element a = x[i] (0 < a < 1), the work
of the chapter's kernel ilp_chains_4 (kernels/cuda/ilp.cu): four
accumulators, acc_k = a + k for k = 0, 1, 2, 3, each stepped ITERS / 4
times by acc_k = acc_k * a + (1 - a), an FMA; out[i] is their sum.

The kernel below unrolls the step over the four accumulators, but chains
them: each FMA reads the accumulator the previous FMA has just written.
So a step is four dependent FMAs (a warp waits out an FMA's latency
before each one), and accumulators 1 to 3 start each step from
accumulator 0's new value instead of their own: the answer is wrong.

1) Make it right at every n.
2) On a GPU, make it fast: at least 0.7 of the speed of the chapter's
   ilp_chains_4 at the chapter's latency-bound launch (4 warps per SM,
   one per scheduler: n = 128 x the SMs), where only independent FMAs
   within a warp can fill the pipeline. (Stepping the four accumulators
   one after the other is right too, but it is one dependent chain: about
   0.3 of that speed, as the chapter's ilp_chains_1.)

    python -m kernels.exercises check ilp_chains examples/exercises/ilp_chains.py
"""

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
            acc0 = acc0 * a + b
            acc1 = acc0 * a + b  # each FMA waits for the one before it
            acc2 = acc1 * a + b
            acc3 = acc2 * a + b
            step += 1
        out[i] = (acc0 + acc1) + (acc2 + acc3)


def chains(x, out):
    """x, out: float32 device arrays of one length n >= 1."""
    chains_kernel[math.ceil(x.shape[0] / THREADS), THREADS](x, out)
