"""Solution of wmma_gemm_edges: the K loop runs while k0 < K (the last,
partial slice of 16 is zero-filled past K, and zeros add nothing), and a
warp leaves only when its tile lies wholly outside C: a tile that crosses
an edge of C is computed like any other, through zero-filled shared tiles,
and its accumulator goes through shared memory to C, element by element,
writing only what lies inside."""

import math

import cupy as cp
import numpy as np

from kernels.tensor_cores import wmma_include_dir

SOURCE = r"""
#include <cuda_fp16.h>
#include <mma.h>

using namespace nvcuda;

// A block: 4 warps, a 2 x 2 grid of 16 x 16 tiles of C (a 32 x 32 tile).
extern "C" __global__ void __launch_bounds__(128) gemm_kernel(
        const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(32) __half As[4][16 * 16];  // per warp: A's 16 x 16 slice, zero past the edges
    __shared__ __align__(32) __half Bs[4][16 * 16];  // per warp: B's 16 x 16 slice, zero past the edges
    __shared__ __align__(32) float Cs[4][16 * 16];   // per warp: its tile of C, before the guarded store
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int row0 = (blockIdx.y * 2 + warp / 2) * 16, col0 = (blockIdx.x * 2 + warp % 2) * 16;
    if (row0 >= M || col0 >= N) return;  // the whole warp leaves: its tile lies outside C
    __half* as = As[warp];
    __half* bs = Bs[warp];
    float* cs = Cs[warp];
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    const __half zero = __float2half(0.0f);
    for (int k0 = 0; k0 < K; k0 += 16) {
        for (int e = lane; e < 16 * 16; e += 32) {
            const int r = e / 16, c = e % 16;
            as[e] = (row0 + r < M && k0 + c < K) ? A[(size_t)(row0 + r) * K + k0 + c] : zero;
            bs[e] = (k0 + r < K && col0 + c < N) ? B[(size_t)(k0 + r) * N + col0 + c] : zero;
        }
        __syncwarp();  // the slices are in shared memory before the fragment loads
        wmma::load_matrix_sync(a, as, 16);
        wmma::load_matrix_sync(b, bs, 16);
        wmma::mma_sync(acc, a, b, acc);
        __syncwarp();  // every lane has its fragments before the slices are refilled
    }
    wmma::store_matrix_sync(cs, acc, 16, wmma::mem_row_major);
    __syncwarp();
    for (int e = lane; e < 16 * 16; e += 32) {
        const int r = e / 16, c = e % 16;
        if (row0 + r < M && col0 + c < N) C[(size_t)(row0 + r) * N + col0 + c] = cs[e];
    }
}
"""
_kernel = cp.RawModule(code=SOURCE, options=("--std=c++17", f"-I{wmma_include_dir()}")).get_function("gemm_kernel")


def gemm(a, b, out):
    """a: M x K float16, b: K x N float16, out: M x N float32 CuPy arrays (C-contiguous); M, N, K >= 1."""
    M, K = a.shape
    N = b.shape[1]
    _kernel((math.ceil(N / 32), math.ceil(M / 32)), (128,), (a, b, out, np.int32(M), np.int32(N), np.int32(K)))
