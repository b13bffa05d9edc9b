// Tensor Core GEMM, steps 1-2 of the ladder (steps 3-5: tensor_cores.cu):
// C = A @ B with A (M x K) and B (K x N) in FP16, row-major, C (M x N) in
// FP32, row-major, accumulated in FP32, through WMMA (nvcuda::wmma, <mma.h>).
//
//   1. tc_wmma_global   fragments loaded straight from global memory
//   2. tc_wmma_smem     fragments loaded from shared-memory tiles that a block loads once for its warps
//
// M, N, K must be multiples of 16 (a fragment is 16 x 16 x 16) and A, B, C
// 32-byte aligned. Needs sm_80 or newer like the other steps (the wrappers
// refuse older GPUs; WMMA itself dates from sm_70). tests/test_cuda_compile.py builds it for:
// REQUIRES: sm_80
// REQUIRES: sm_86
// REQUIRES: sm_89
// REQUIRES: sm_90

#include <cuda_fp16.h>
#include <mma.h>

// --8<-- [start:wmma_global]
// Step 1: each warp owns one 16 x 16 tile of C; a block is 4 warps (2 x 2).
// Every fragment comes from global memory, so each element of A is read
// N / 16 times and each of B M / 16 times.
extern "C" __global__ void tc_wmma_global(const __half* __restrict__ A, const __half* __restrict__ B,
                                          float* __restrict__ C, int M, int N, int K) {
    using namespace nvcuda;
    const int warp = threadIdx.x / 32;
    const int tile_m = blockIdx.y * 2 + warp / 2;  // which 16-row band of C
    const int tile_n = blockIdx.x * 2 + warp % 2;  // which 16-column band
    if (tile_m * 16 >= M || tile_n * 16 >= N) return;  // warp-uniform: whole warps leave
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
    wmma::fill_fragment(acc, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + (size_t)tile_m * 16 * K + k, K);
        wmma::load_matrix_sync(b, B + (size_t)k * N + tile_n * 16, N);
        wmma::mma_sync(acc, a, b, acc);
    }
    wmma::store_matrix_sync(C + (size_t)tile_m * 16 * N + tile_n * 16, acc, N, wmma::mem_row_major);
}
// --8<-- [end:wmma_global]


// --8<-- [start:wmma_smem]
// Step 2: a block of 4 warps computes a 64 x 64 tile of C, each warp 32 x 32
// (2 x 2 fragments). Per 32-wide slice of K the block copies A's 64 x 32 and
// B's 32 x 64 into shared memory once, and the warps read their fragments
// from there. Rows are padded by 8 halves (16 bytes) so that the rows a
// fragment load reads start in different banks.
constexpr int W2_BM = 64, W2_BN = 64, W2_BK = 32, W2_PAD = 8;

extern "C" __global__ void tc_wmma_smem(const __half* __restrict__ A, const __half* __restrict__ B,
                                        float* __restrict__ C, int M, int N, int K) {
    using namespace nvcuda;
    __shared__ __align__(32) __half As[W2_BM][W2_BK + W2_PAD];
    __shared__ __align__(32) __half Bs[W2_BK][W2_BN + W2_PAD];
    const int warp = threadIdx.x / 32;
    const int wm = (warp / 2) * 32, wn = (warp % 2) * 32;  // the warp's 32 x 32 inside the block tile
    const int m0 = blockIdx.y * W2_BM, n0 = blockIdx.x * W2_BN;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);
    for (int k0 = 0; k0 < K; k0 += W2_BK) {
        // 64 x 32 halves of A and 32 x 64 of B: 256 chunks of 8 halves each, 2 per thread
        for (int c = threadIdx.x; c < W2_BM * W2_BK / 8; c += blockDim.x) {
            int r = c / (W2_BK / 8), col = (c % (W2_BK / 8)) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (m0 + r < M && k0 + col < K) v = *reinterpret_cast<const uint4*>(A + (size_t)(m0 + r) * K + k0 + col);
            *reinterpret_cast<uint4*>(&As[r][col]) = v;
        }
        for (int c = threadIdx.x; c < W2_BK * W2_BN / 8; c += blockDim.x) {
            int r = c / (W2_BN / 8), col = (c % (W2_BN / 8)) * 8;
            uint4 v = make_uint4(0, 0, 0, 0);
            if (k0 + r < K && n0 + col < N) v = *reinterpret_cast<const uint4*>(B + (size_t)(k0 + r) * N + n0 + col);
            *reinterpret_cast<uint4*>(&Bs[r][col]) = v;
        }
        __syncthreads();
        for (int kk = 0; kk < W2_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b[2];
            for (int i = 0; i < 2; ++i) wmma::load_matrix_sync(a[i], &As[wm + i * 16][kk], W2_BK + W2_PAD);
            for (int j = 0; j < 2; ++j) wmma::load_matrix_sync(b[j], &Bs[kk][wn + j * 16], W2_BN + W2_PAD);
            for (int i = 0; i < 2; ++i)
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();
    }
    for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) {
            int r = m0 + wm + i * 16, c = n0 + wn + j * 16;
            if (r < M && c < N)  // M and N are multiples of 16: a fragment is all in or all out
                wmma::store_matrix_sync(C + (size_t)r * N + c, acc[i][j], N, wmma::mem_row_major);
        }
}
// --8<-- [end:wmma_smem]
