"""Exercise sgemm_register_tiles (chapter: matrix multiplication).

`matmul(A, B, out)` computes out = A @ B for float32 matrices, A M x K, B
K x N, out M x N. In the tiled kernel of step 3 every multiply-add costs
two shared-memory loads, and shared memory, not the FMA units, sets the
pace. This kernel is the start of register tiling (steps 4 and 5): a block
of THREADS threads computes a BM x BN tile of out, and should give each
thread a TM x TN block of outputs, kept in registers (`cuda.local.array`),
so that each value read from shared memory feeds several multiply-adds.
The grid, the shared tiles and their loads are done; the compute is not:
each thread still computes one output, the first of its TM x TN, and the
others are never written. 1) Make it right for every M, N, K >= 1 (every
thread computes and stores its TM x TN outputs; guard the store). 2) On a
GPU, make it fast: at least 0.6 of the speed of the chapter's Numba
register-blocked kernel (`matmul_numba(variant="register_blocked")`) at
4096 x 4096 x 4096, which the tiled kernel of step 3 does not reach.

    python -m kernels.exercises check sgemm_register_tiles examples/exercises/sgemm_register_tiles.py
"""

import math

from numba import cuda, float32

BM, BN, BK = 64, 64, 16  # the tile of out one block computes, and the step along K
TM, TN = 8, 8            # outputs per thread
TX, TY = BN // TN, BM // TM  # 8 x 8 threads
THREADS = TX * TY
LOADS = BM * BK // THREADS  # elements of each tile one thread loads (16; BK * BN // THREADS too)


@cuda.jit
def matmul_kernel(A, B, C):
    As = cuda.shared.array((BM, BK), dtype=float32)
    Bs = cuda.shared.array((BK, BN), dtype=float32)
    M, K = A.shape
    N = B.shape[1]
    tid = cuda.threadIdx.x
    tx, ty = tid % TX, tid // TX
    m0, n0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    acc = float32(0.0)  # TODO: a TM x TN block of accumulators (cuda.local.array)
    for k0 in range(0, K, BK):
        for l in range(LOADS):
            e = tid + l * THREADS
            r, c = e // BK, e % BK  # A's tile: BK consecutive threads along a row
            As[r, c] = A[m0 + r, k0 + c] if m0 + r < M and k0 + c < K else float32(0.0)
            r, c = e // BN, e % BN  # B's tile: BN consecutive threads along a row
            Bs[r, c] = B[k0 + r, n0 + c] if k0 + r < K and n0 + c < N else float32(0.0)
        cuda.syncthreads()  # the tiles are complete
        for k in range(BK):
            acc += As[ty, k] * Bs[k, tx]  # TODO: TM values of A, TN of B, TM * TN multiply-adds
        cuda.syncthreads()  # all reads done before the next tiles overwrite them
    row, col = m0 + ty, n0 + tx  # TODO: store all TM x TN outputs
    if row < M and col < N:
        C[row, col] = acc


def matmul(A, B, out):
    """A: M x K, B: K x N, out: M x N, float32 device arrays."""
    M, N = out.shape
    grid = (math.ceil(N / BN), math.ceil(M / BM))
    matmul_kernel[grid, THREADS](A, B, out)
