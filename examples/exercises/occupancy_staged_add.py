"""Exercise occupancy_staged_add (chapter: occupancy).

`add(a, b, out)` computes out = a + b (float32, n >= 1 elements). Each
block of THREADS = 32 threads stages a TILE of a and of b in shared memory
(2 x 6144 floats: 48 KB, all a block may have without opting in), waits
at a barrier, then adds from shared memory and stores. Two things are
wrong with it:

1) it is wrong: the loads of the last tile are guarded, but the stores
   are not, so the last block writes past the end of `out` whenever n is
   not a multiple of TILE;
2) it is slow. 48 KB + 1 KB reserved per block lets only 4 blocks fit on
   an SM (228 KB), 4 warps of 64: 6.25 % occupancy, far too few loads in
   flight for a memory-bound kernel (in the chapter's sweeps the vector
   add ran at a third of the copy's bandwidth there). And each element is
   used once: the staging buys nothing.

Make it right for every n, then, on a GPU, make it fast: at least 0.7 of
the speed of the chapter's grid-stride vector add (the kernel of the
occupancy sweeps). Work out the blocks per SM of your launch first, e.g.
with kernels.occupancy.occupancy(regs, threads, static_smem).

    python -m kernels.exercises check occupancy_staged_add examples/exercises/occupancy_staged_add.py
"""

import math

from numba import cuda, float32

THREADS = 32
TILE = 6144  # elements of a and of b per block: 2 x 24 KB of shared memory


@cuda.jit
def add_kernel(a, b, out):
    sa = cuda.shared.array(TILE, float32)
    sb = cuda.shared.array(TILE, float32)
    n = out.shape[0]
    base, t = cuda.blockIdx.x * TILE, cuda.threadIdx.x
    for k in range(t, TILE, THREADS):  # stage the block's tile: neighbouring threads, neighbouring elements
        if base + k < n:
            sa[k] = a[base + k]
            sb[k] = b[base + k]
    cuda.syncthreads()
    for k in range(t, TILE, THREADS):
        out[base + k] = sa[k] + sb[k]


def add(a, b, out):
    """a, b, out: float32 device arrays of one length n >= 1."""
    add_kernel[math.ceil(out.shape[0] / TILE), THREADS](a, b, out)
