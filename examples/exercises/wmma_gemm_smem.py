"""Exercise wmma_gemm_smem (chapter: Tensor Cores), in CUDA C.

`gemm(a, b, out)` computes out = a @ b on the Tensor Cores with WMMA:
a (M x K) and b (K x N) float16, out (M x N) float32, row-major CuPy
arrays, FP32 accumulation; M, N and K multiples of 16. Loading every
fragment straight from global memory (the chapter's step 1) reads each
element of a N / 16 times; this kernel is the skeleton of step 2 instead:
a block of 4 warps computes a 64 x 64 tile of out, and for every 32-wide
slice of K it first copies a's 64 x 32 and b's 32 x 64 into shared memory
(rows padded by 8 halves against bank conflicts), from which each warp
loads the fragments of its 32 x 32 part (2 x 2 fragments).

The skeleton is wrong in two places: the fragments of b are loaded with
the wrong leading dimension (the padding is part of a row of Bs), and only
a block whose whole 64 x 64 tile lies inside out stores anything (M and N
need not be multiples of 64). 1) Make it right at every size. 2) On a GPU,
make it fast: at least 0.75 of the speed of the chapter's step 2
(tc_matmul(..., step="wmma_smem")) at 4096 x 4096 x 4096. Needs a GPU of
compute capability 8.0 or newer and the CUDA toolkit's headers (<mma.h>:
see the chapter on wmma_include_dir).

    python -m kernels.exercises check wmma_gemm_smem examples/exercises/wmma_gemm_smem.py
"""

import math

import cupy as cp
import numpy as np

from kernels.tensor_cores import wmma_include_dir

SOURCE = r"""
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

// A block: 4 warps compute a BM x BN tile of C, each warp 32 x 32 of it
// (2 x 2 fragments). Per BK-wide slice of K, the block copies A's BM x BK
// and B's BK x BN into shared memory in 16-byte chunks, zero past the edges;
// rows are padded by PAD halves so that the rows of one fragment load start
// in different banks.
constexpr int BM = 64, BN = 64, BK = 32, PAD = 8;

extern "C" __global__ void gemm_kernel(
        const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(32) __half As[BM][BK + PAD];
    __shared__ __align__(32) __half Bs[BK][BN + PAD];
    const int warp = threadIdx.x / 32;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's 32 x 32 inside the block tile
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k0 = 0; k0 < K; k0 += BK) {
        for (int c = threadIdx.x; c < BM * BK / 8; c += blockDim.x) {  // 8 halves (16 bytes) a chunk
            const int r = c / (BK / 8), col = (c % (BK / 8)) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (m0 + r < M && k0 + col < K) v = *reinterpret_cast<const uint4*>(A + (size_t)(m0 + r) * K + k0 + col);
            *reinterpret_cast<uint4*>(&As[r][col]) = v;
        }
        for (int c = threadIdx.x; c < BK * BN / 8; c += blockDim.x) {
            const int r = c / (BN / 8), col = (c % (BN / 8)) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (k0 + r < K && n0 + col < N) v = *reinterpret_cast<const uint4*>(B + (size_t)(k0 + r) * N + n0 + col);
            *reinterpret_cast<uint4*>(&Bs[r][col]) = v;
        }
        __syncthreads();  // the slices are in shared memory
        for (int kk = 0; kk < BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b[2];
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &As[wm + i * 16][kk], BK + PAD);
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[kk][wn + j * 16], BN);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // every warp is done with the slices before they are refilled
    }
    if (m0 + BM <= M && n0 + BN <= N)  // the block tile lies inside C
        for (int i = 0; i < 2; ++i)
            for (int j = 0; j < 2; ++j) {
                const int r = m0 + wm + i * 16, c = n0 + wn + j * 16;
                wmma::store_matrix_sync(C + (size_t)r * N + c, acc[i][j], N, wmma::mem_row_major);
            }
}
"""
_kernel = cp.RawModule(code=SOURCE, options=("--std=c++17", f"-I{wmma_include_dir()}")).get_function("gemm_kernel")
BM = BN = 64  # the block tile, as in SOURCE
THREADS = 128  # 4 warps


def gemm(a, b, out):
    """a: M x K float16, b: K x N float16, out: M x N float32 CuPy arrays
    (C-contiguous, 32-byte aligned); M, N, K multiples of 16."""
    M, K = a.shape
    N = b.shape[1]
    if M % 16 or N % 16 or K % 16:
        raise ValueError(f"M, N and K must be multiples of 16, got M={M}, N={N}, K={K}")
    _kernel((math.ceil(N / BN), math.ceil(M / BM)), (THREADS,), (a, b, out, np.int32(M), np.int32(N), np.int32(K)))
