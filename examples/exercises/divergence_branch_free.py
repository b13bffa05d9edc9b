"""Exercise divergence_branch_free (chapter: warp divergence).

`apply(x, out)` runs, for each element, ITERS steps of v = a * v + b from
v = x[i], with the constants of one of two paths chosen by the sign of
x[i]: path A (x[i] >= 0) a = 0.999, b = 0.001; path B (x[i] < 0)
a = 1.001, b = -0.001. `branchy_kernel` below does it as written, with an
if/else around two loops, like the chapter's branch_long, except that the
condition is the data: a warp whose 32 elements have both signs runs both
loops, one after the other, and random signs split nearly every warp.
`branch_free_kernel` is its rewrite, begun: choose the path's constants
with selects (a ternary on each constant compiles to a select, not a
branch), then run one loop for every lane. The rewrite picks the
multiplier by the sign but not the addend, which is path A's for every
element: the negative elements come out wrong. 1) Make it right (apply()
calls branch_free_kernel). 2) On a GPU, make it fast: at least 0.55 of the
speed of the chapter's branch_long with no warp diverged (split 0), the
time of one path, at 2^26 elements.

    python -m kernels.exercises check divergence_branch_free examples/exercises/divergence_branch_free.py
"""

import math

from numba import cuda, float32

THREADS = 256
ITERS = 256  # steps per element (the grader's reference runs 256 too)
A_POS, B_POS = float32(0.999), float32(0.001)    # path A: x >= 0
A_NEG, B_NEG = float32(1.001), float32(-0.001)   # path B: x < 0
# Every loop is a while loop, not range(): numba-cuda 0.30 compiles `for _ in range(ITERS)` with a
# 64-bit counter check beside every unrolled step (ISETP, SEL, IADD3 per FFMA in the SASS, about
# six instructions per FMA); `while k < ITERS` unrolls to bare FFMAs (see kernel.inspect_sass()).


@cuda.jit
def branchy_kernel(x, out):
    """Right, but a warp with elements of both signs runs both loops."""
    i = cuda.grid(1)
    if i < x.shape[0]:
        v = x[i]
        if v >= 0:
            k = 0
            while k < ITERS:
                v = v * A_POS + B_POS
                k += 1
        else:
            k = 0
            while k < ITERS:
                v = v * A_NEG + B_NEG
                k += 1
        out[i] = v


@cuda.jit
def branch_free_kernel(x, out):
    i = cuda.grid(1)
    if i < x.shape[0]:
        v = x[i]
        a = A_POS if v >= 0 else A_NEG  # a select: every lane runs the same instructions
        b = B_POS  # TODO: the addend of the element's path
        k = 0
        while k < ITERS:
            v = v * a + b
            k += 1
        out[i] = v


def apply(x, out):
    """x, out: float32 device arrays of one length n >= 1."""
    branch_free_kernel[math.ceil(x.shape[0] / THREADS), THREADS](x, out)
