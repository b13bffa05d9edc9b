"""Solution of wmma_gemm_smem: a fragment load's leading dimension is the
row length of the array it reads, padding included (BN + PAD halves for
the tile of B, as BK + PAD for A's); and each warp stores each of its four
fragments whose 16 x 16 tile lies inside C (M and N are multiples of 16,
so a fragment is wholly in or wholly out), not only when the whole block
tile does. The block's 64 x 64 tile reuses every slice of A and B it
stages four times (2 x 2 fragments a warp), from shared memory."""

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
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[kk][wn + j * 16], BN + PAD);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // every warp is done with the slices before they are refilled
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            const int r = m0 + wm + i * 16, c = n0 + wn + j * 16;
            if (r < M && c < N)  // M and N are multiples of 16: a fragment is wholly in or wholly out
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
