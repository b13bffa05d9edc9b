"""Solution of sgemm_register_tiles: each thread keeps a TM x TN block of
out in registers (a local array indexed by constants after unrolling); per
step k it reads TM values of A and TN values of B from shared memory and
does TM * TN multiply-adds with them: 4 per load instead of step 3's 1/2.
A thread's outputs lie TY rows and TX columns apart, so that a warp reads
4 rows of A's tile (a padding column puts them in 4 different banks) and 8
consecutive words of B's, and stores runs of 8 neighbouring columns. The
tile loads and the store are guarded (zeros outside A and B)."""

import math

from numba import cuda, float32

BM, BN, BK = 64, 64, 16  # the tile of out one block computes, and the step along K
TM, TN = 8, 8            # outputs per thread: rows TY apart, columns TX apart
TX, TY = BN // TN, BM // TM  # 8 x 8 threads
THREADS = TX * TY
LOADS = BM * BK // THREADS  # elements of each tile one thread loads (16; BK * BN // THREADS too)
LDA = BK + 1  # A's tile padded by a column: a warp's 4 rows of it in 4 different banks


@cuda.jit
def matmul_kernel(A, B, C):
    As = cuda.shared.array((BM, LDA), dtype=float32)
    Bs = cuda.shared.array((BK, BN), dtype=float32)
    acc = cuda.local.array((TM, TN), dtype=float32)
    a = cuda.local.array(TM, dtype=float32)
    b = cuda.local.array(TN, dtype=float32)
    M, K = A.shape
    N = B.shape[1]
    tid = cuda.threadIdx.x
    tx, ty = tid % TX, tid // TX
    m0, n0 = cuda.blockIdx.y * BM, cuda.blockIdx.x * BN
    for i in range(TM):
        for j in range(TN):
            acc[i, j] = float32(0.0)
    for k0 in range(0, K, BK):
        for l in range(LOADS):
            e = tid + l * THREADS
            r, c = e // BK, e % BK  # A's tile: BK consecutive threads along a row
            As[r, c] = A[m0 + r, k0 + c] if m0 + r < M and k0 + c < K else float32(0.0)
            r, c = e // BN, e % BN  # B's tile: BN consecutive threads along a row
            Bs[r, c] = B[k0 + r, n0 + c] if k0 + r < K and n0 + c < N else float32(0.0)
        cuda.syncthreads()  # the tiles are complete
        for k in range(BK):
            for i in range(TM):
                a[i] = As[ty + i * TY, k]
            for j in range(TN):
                b[j] = Bs[k, tx + j * TX]
            for i in range(TM):
                for j in range(TN):
                    acc[i, j] += a[i] * b[j]
        cuda.syncthreads()  # all reads done before the next tiles overwrite them
    for i in range(TM):
        row = m0 + ty + i * TY
        for j in range(TN):
            col = n0 + tx + j * TX
            if row < M and col < N:
                C[row, col] = acc[i, j]


def matmul(A, B, out):
    """A: M x K, B: K x N, out: M x N, float32 device arrays."""
    M, N = out.shape
    grid = (math.ceil(N / BN), math.ceil(M / BM))
    matmul_kernel[grid, THREADS](A, B, out)
