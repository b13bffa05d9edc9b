"""Exercise transpose_tiled (chapter: memory hierarchy).

`transpose(x, out)` writes out = x.T (x: rows x cols float32, out: cols x
rows). The kernel below is the start of the shared-memory version: each
block reads a TILE x TILE tile of x with coalesced loads into shared
memory, and should then write it transposed with coalesced stores. Two
things are missing: the barrier between the tile's writes and its reads,
and the right indices for the store (it writes the tile back untransposed,
to the wrong place). 1) Make it right at every shape. 2) On a GPU, make it
fast: at least 1.3 x the speed of CuPy's transpose (cp.ascontiguousarray(x.T))
at 8192 x 8192 (pad the tile against bank conflicts).

    python -m kernels.exercises check transpose_tiled examples/exercises/transpose_tiled.py
"""

import math

from numba import cuda, float32

TILE = 32


@cuda.jit
def transpose_kernel(x, out):
    tile = cuda.shared.array((TILE, TILE), dtype=float32)
    rows, cols = x.shape
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    r, c = cuda.blockIdx.y * TILE + ty, cuda.blockIdx.x * TILE + tx
    if r < rows and c < cols:
        tile[ty, tx] = x[r, c]  # coalesced: neighbouring threads read neighbouring columns
    r, c = cuda.blockIdx.y * TILE + ty, cuda.blockIdx.x * TILE + tx
    if c < rows and r < cols:
        out[c, r] = tile[ty, tx]


def transpose(x, out):
    """x: rows x cols float32 device array; out: cols x rows."""
    rows, cols = x.shape
    grid = (math.ceil(cols / TILE), math.ceil(rows / TILE))
    transpose_kernel[grid, (TILE, TILE)](x, out)
