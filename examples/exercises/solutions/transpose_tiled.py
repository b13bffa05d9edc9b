"""Solution of transpose_tiled: the tile is read with coalesced loads,
the block waits at a barrier, and each thread then stores the element at
the transposed position, so that neighbouring threads write neighbouring
columns of `out`; one column of padding puts a tile's column in 32
different banks."""

import math

from numba import cuda, float32

TILE = 32
PADDED = TILE + 1  # a tile row and one more column: a tile's column falls in 32 different banks
# (a module constant: numba-cuda on a GPU takes a shared array's shape only as constants, not TILE + 1)


@cuda.jit
def transpose_kernel(x, out):
    tile = cuda.shared.array((TILE, PADDED), dtype=float32)  # no bank conflicts on the column reads
    rows, cols = x.shape
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    r, c = cuda.blockIdx.y * TILE + ty, cuda.blockIdx.x * TILE + tx
    if r < rows and c < cols:
        tile[ty, tx] = x[r, c]
    cuda.syncthreads()  # the whole tile is in shared memory before anyone reads it
    r, c = cuda.blockIdx.x * TILE + ty, cuda.blockIdx.y * TILE + tx  # out's row r = x's column
    if r < cols and c < rows:
        out[r, c] = tile[tx, ty]


def transpose(x, out):
    """x: rows x cols float32 device array; out: cols x rows."""
    rows, cols = x.shape
    grid = (math.ceil(cols / TILE), math.ceil(rows / TILE))
    transpose_kernel[grid, (TILE, TILE)](x, out)
