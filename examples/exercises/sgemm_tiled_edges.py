"""Exercise sgemm_tiled_edges (chapter: matrix multiplication).

`matmul(A, B, out)` computes out = A @ B for float32 matrices, A M x K, B
K x N, out M x N, with the chapter's shared-memory tiling (step 3): each
block of TILE x TILE threads computes a TILE x TILE tile of out, and walks
K in steps of TILE, staging a tile of A and a tile of B in shared memory.
It is right when M, N and K are all multiples of TILE and wrong otherwise:
the tile loads read past the end of A and B (past the last row or the last
column), and the last blocks store past the end of out. Make it right for
every M, N, K >= 1 (a tile's element outside the matrix must count as 0).

    python -m kernels.exercises check sgemm_tiled_edges examples/exercises/sgemm_tiled_edges.py
"""

import math

from numba import cuda, float32

TILE = 16


@cuda.jit
def matmul_kernel(A, B, C):
    As = cuda.shared.array((TILE, TILE), dtype=float32)
    Bs = cuda.shared.array((TILE, TILE), dtype=float32)
    K = A.shape[1]
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    row = cuda.blockIdx.y * TILE + ty
    col = cuda.blockIdx.x * TILE + tx
    acc = float32(0.0)
    for k0 in range(0, K, TILE):
        As[ty, tx] = A[row, k0 + tx]  # neighbouring threads read neighbouring columns: coalesced
        Bs[ty, tx] = B[k0 + ty, col]
        cuda.syncthreads()  # both tiles complete before anyone reads them
        for k in range(TILE):
            acc += As[ty, k] * Bs[k, tx]
        cuda.syncthreads()  # all reads done before the next tiles overwrite them
    C[row, col] = acc


def matmul(A, B, out):
    """A: M x K, B: K x N, out: M x N, float32 device arrays."""
    M, N = out.shape
    grid = (math.ceil(N / TILE), math.ceil(M / TILE))
    matmul_kernel[grid, (TILE, TILE)](A, B, out)
