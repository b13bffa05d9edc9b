// Tensor Core GEMM, one idea per step: C = A @ B with A (M x K) and B (K x N)
// in FP16, row-major, C (M x N) in FP32, row-major, accumulated in FP32.
// Steps 1-2 (WMMA) are in tensor_cores_wmma.cu: they include <mma.h>, which
// NVRTC finds only with the CUDA toolkit's headers; these steps need none.
//
//   3. tc_mma_ldmatrix  mma.sync.m16n8k16 fed by ldmatrix from an XOR-swizzled shared layout
//   4. tc_mma_async     the same, fed by a cp.async pipeline of STAGES tiles in flight
//   5. tc_mma_tuned     step 4 at the configuration a sweep found fastest
//   tc_mma_peak         mma.sync on registers only: the ceiling of this instruction
//
// Steps 3-5 take any M and need N and K to be multiples of 8 (16-byte rows),
// reading zeros past the edges of A and B and writing only inside C.
// Every step needs sm_80 or newer (mma.sync.m16n8k16, ldmatrix, cp.async); the
// wrappers refuse older GPUs. tests/test_cuda_compile.py builds it for:
// REQUIRES: sm_80
// REQUIRES: sm_86
// REQUIRES: sm_89
// REQUIRES: sm_90

#include <cuda_fp16.h>

// --8<-- [start:mma_helpers]
// The PTX behind steps 3-5. Fragment layouts: PTX ISA, "Matrix Fragments for
// mma.m16n8k16" (f16 A: a0..a3, B: b0..b1, f32 C/D: c0..c3).
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

// Four 8 x 8 matrices of 16-bit values; lane l gives the address of row l % 8
// of matrix l / 8. With .trans each matrix arrives transposed.
__device__ __forceinline__ void ldmatrix_x4(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(unsigned (&r)[4], const void* p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(smem_addr(p)));
}

// The same, from a shared-memory address already converted (smem_addr).
__device__ __forceinline__ void ldmatrix_x4_at(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}
__device__ __forceinline__ void ldmatrix_x4_trans_at(unsigned (&r)[4], unsigned addr) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(addr));
}

// D = A (16 x 16, f16) * B (16 x 8, f16) + D (16 x 8, f32), one warp.
__device__ __forceinline__ void mma_16816(float (&d)[4], const unsigned (&a)[4], unsigned b0, unsigned b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 "
                 "{%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// 16 bytes global -> shared without passing through registers; `bytes` of
// them read (16 or 0: a chunk past the edge of A or B is filled with zeros).
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(smem_addr(dst)), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_16_at(unsigned dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" :: "r"(dst), "l"(src), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int N>
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N)); }

// The shared layouts, in 16-byte chunks (8 halves). A tile row of BK halves
// is BK / 8 chunks; the 8 rows one ldmatrix matrix reads would fall in the
// same banks, so chunk c of row r is stored at c ^ f(r), which spreads them
// over all 32 banks (one 128-byte line per 8 chunks).
template <int CHUNKS>  // chunks per row: 4 (BK = 32) or 8 (BK = 64) for A; BN / 8 for B
__device__ __forceinline__ int swizzle(int row, int chunk) {
    if constexpr (CHUNKS >= 8) return row * CHUNKS + (chunk ^ (row & 7));
    else if constexpr (CHUNKS == 4) return row * CHUNKS + (chunk ^ ((row >> 1) & 3));
    else return row * CHUNKS + (chunk ^ ((row >> 2) & 1));
}
// --8<-- [end:mma_helpers]


// --8<-- [start:mma_warp_tile]
// One BK slice of the block tile, for one warp: its WM x WN part of C is
// (WM / 16) x (WN / 8) mma tiles. A fragments come from As (BM x BK, row-major,
// swizzled), B fragments from Bs (BK x BN, row-major, swizzled) with .trans,
// which turns K-major rows into the "col" operand mma wants.
template <int BM, int BN, int BK, int WM, int WN>
__device__ __forceinline__ void warp_tile_mma(const __half* As, const __half* Bs, float (&acc)[WM / 16][WN / 8][4],
                                              int warp_m, int warp_n, int lane) {
    constexpr int A_CHUNKS = BK / 8, B_CHUNKS = BN / 8;
#pragma unroll
    for (int kk = 0; kk < BK; kk += 16) {
        unsigned a[WM / 16][4], b[WN / 16][4];
#pragma unroll
        for (int i = 0; i < WM / 16; ++i) {  // rows lane % 16, k chunk lane / 16
            int row = warp_m + i * 16 + lane % 16, chunk = kk / 8 + lane / 16;
            ldmatrix_x4(a[i], As + swizzle<A_CHUNKS>(row, chunk) * 8);
        }
#pragma unroll
        for (int j = 0; j < WN / 16; ++j) {  // k rows lane % 16, n chunk lane / 16: two n8 tiles
            int row = kk + lane % 16, chunk = (warp_n + j * 16) / 8 + lane / 16;
            ldmatrix_x4_trans(b[j], Bs + swizzle<B_CHUNKS>(row, chunk) * 8);
        }
#pragma unroll
        for (int i = 0; i < WM / 16; ++i)
#pragma unroll
            for (int j = 0; j < WN / 8; ++j)
                mma_16816(acc[i][j], a[i], b[j / 2][(j % 2) * 2], b[j / 2][(j % 2) * 2 + 1]);
    }
}

// The accumulators to C: c0, c1 at (lane / 4, 2 * (lane % 4) + 0, 1), c2, c3
// eight rows below; only what lies inside C is written.
template <int WM, int WN>
__device__ __forceinline__ void store_acc(float* C, const float (&acc)[WM / 16][WN / 8][4], int row0, int col0,
                                          int M, int N, int lane) {
#pragma unroll
    for (int i = 0; i < WM / 16; ++i)
#pragma unroll
        for (int j = 0; j < WN / 8; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                int r = row0 + i * 16 + lane / 4 + h * 8, c = col0 + j * 8 + 2 * (lane % 4);
                if (r < M && c < N)  // N is a multiple of 8, so c + 1 < N too
                    *reinterpret_cast<float2*>(C + (size_t)r * N + c) = make_float2(acc[i][j][2 * h], acc[i][j][2 * h + 1]);
            }
}
// --8<-- [end:mma_warp_tile]


// --8<-- [start:mma_ldmatrix]
// Step 3: 128 x 128 x 32 block tiles, 8 warps of 64 x 32. Each slice of K is
// copied global -> registers -> shared (swizzled), then every warp runs
// ldmatrix + mma.sync on it. The copy and the math take turns.
constexpr int S3_BM = 128, S3_BN = 128, S3_BK = 32, S3_WM = 64, S3_WN = 32, S3_THREADS = 256;

extern "C" __global__ void __launch_bounds__(S3_THREADS) tc_mma_ldmatrix(
        const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    __shared__ __align__(128) __half As[S3_BM * S3_BK];
    __shared__ __align__(128) __half Bs[S3_BK * S3_BN];
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    const int warp_m = (warp / (S3_BN / S3_WN)) * S3_WM, warp_n = (warp % (S3_BN / S3_WN)) * S3_WN;
    const int m0 = blockIdx.y * S3_BM, n0 = blockIdx.x * S3_BN;
    float acc[S3_WM / 16][S3_WN / 8][4] = {};
    for (int k0 = 0; k0 < K; k0 += S3_BK) {
        for (int c = threadIdx.x; c < S3_BM * S3_BK / 8; c += S3_THREADS) {
            int r = c / (S3_BK / 8), ch = c % (S3_BK / 8);
            uint4 v = make_uint4(0, 0, 0, 0);  // past an edge: zeros, which add nothing
            if (m0 + r < M && k0 + ch * 8 < K) v = *reinterpret_cast<const uint4*>(A + (size_t)(m0 + r) * K + k0 + ch * 8);
            *reinterpret_cast<uint4*>(As + swizzle<S3_BK / 8>(r, ch) * 8) = v;
        }
        for (int c = threadIdx.x; c < S3_BK * S3_BN / 8; c += S3_THREADS) {
            int r = c / (S3_BN / 8), ch = c % (S3_BN / 8);
            uint4 v = make_uint4(0, 0, 0, 0);
            if (k0 + r < K && n0 + ch * 8 < N) v = *reinterpret_cast<const uint4*>(B + (size_t)(k0 + r) * N + n0 + ch * 8);
            *reinterpret_cast<uint4*>(Bs + swizzle<S3_BN / 8>(r, ch) * 8) = v;
        }
        __syncthreads();
        warp_tile_mma<S3_BM, S3_BN, S3_BK, S3_WM, S3_WN>(As, Bs, acc, warp_m, warp_n, lane);
        __syncthreads();
    }
    store_acc<S3_WM, S3_WN>(C, acc, m0 + warp_m, n0 + warp_n, M, N, lane);
}
// --8<-- [end:mma_ldmatrix]


// --8<-- [start:mma_async]
// Steps 4-5: the block tile's slices of K arrive by cp.async, STAGES of them
// in flight: while the warps multiply slice k, slices k + 1 ... k + STAGES - 1
// are on their way. Shared memory is dynamic: STAGES x (BM x BK + BK x BN)
// halves, over 48 KB for the larger configurations (the launcher opts in).
// Every address a thread needs is worked out once, before the loop: in the
// loop only the slice's offset changes, so the issue slots go to the copies,
// ldmatrix and mma.sync rather than to integer arithmetic.
template <int BM, int BN, int BK, int WM, int WN, int STAGES>
__device__ __forceinline__ void tc_mma_async_body(const __half* __restrict__ A, const __half* __restrict__ B,
                                                  float* __restrict__ C, int M, int N, int K) {
    constexpr int THREADS = (BM / WM) * (BN / WN) * 32;
    constexpr int A_CHUNKS = BK / 8, B_CHUNKS = BN / 8, A_TILE = BM * BK, B_TILE = BK * BN;
    constexpr int A_LOADS = BM * A_CHUNKS / THREADS, B_LOADS = BK * B_CHUNKS / THREADS;
    static_assert(A_LOADS * THREADS == BM * A_CHUNKS && B_LOADS * THREADS == BK * B_CHUNKS, "whole chunks per thread");
    constexpr int MI = WM / 16, NJ = WN / 16, KS = BK / 16;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __half* As = reinterpret_cast<__half*>(smem_raw);
    __half* Bs = As + STAGES * A_TILE;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int warp_m = (warp / (BN / WN)) * WM, warp_n = (warp % (BN / WN)) * WN;
    const int m0 = blockIdx.y * BM, n0 = blockIdx.x * BN;
    const int tiles = (K + BK - 1) / BK;

    // the copies: this thread's chunks, their shared offsets and global sources at slice 0
    int a_smem[A_LOADS], b_smem[B_LOADS], a_col[A_LOADS], b_row[B_LOADS];
    const __half* a_src[A_LOADS];
    const __half* b_src[B_LOADS];
    bool a_row_in[A_LOADS], b_col_in[B_LOADS];
#pragma unroll
    for (int i = 0; i < A_LOADS; ++i) {
        int c = tid + i * THREADS, r = c / A_CHUNKS, ch = c % A_CHUNKS;
        a_smem[i] = swizzle<A_CHUNKS>(r, ch) * 8;
        a_col[i] = ch * 8;
        a_row_in[i] = m0 + r < M;
        a_src[i] = A + (size_t)(a_row_in[i] ? m0 + r : 0) * K + ch * 8;
    }
#pragma unroll
    for (int i = 0; i < B_LOADS; ++i) {
        int c = tid + i * THREADS, r = c / B_CHUNKS, ch = c % B_CHUNKS;
        b_smem[i] = swizzle<B_CHUNKS>(r, ch) * 8;
        b_row[i] = r;
        b_col_in[i] = n0 + ch * 8 < N;
        b_src[i] = B + (size_t)r * N + (b_col_in[i] ? n0 + ch * 8 : 0);
    }
    const unsigned as_addr = smem_addr(As), bs_addr = smem_addr(Bs);  // shared addresses of stage 0
    auto load_tile = [&](int stage, int t) {  // slice t of K into buffer `stage`
        const int k0 = t * BK;
        const unsigned as = as_addr + stage * A_TILE * 2, bs = bs_addr + stage * B_TILE * 2;
#pragma unroll
        for (int i = 0; i < A_LOADS; ++i) {
            bool in = a_row_in[i] && k0 + a_col[i] < K;
            cp_async_16_at(as + a_smem[i] * 2, in ? a_src[i] + k0 : A, in ? 16 : 0);
        }
#pragma unroll
        for (int i = 0; i < B_LOADS; ++i) {
            bool in = b_col_in[i] && k0 + b_row[i] < K;
            cp_async_16_at(bs + b_smem[i] * 2, in ? b_src[i] + (size_t)k0 * N : B, in ? 16 : 0);
        }
    };

    // the ldmatrix sources inside one stage, per fragment and 16-wide step of K
    int a_frag[KS][MI], b_frag[KS][NJ];
#pragma unroll
    for (int ks = 0; ks < KS; ++ks) {
#pragma unroll
        for (int i = 0; i < MI; ++i)
            a_frag[ks][i] = swizzle<A_CHUNKS>(warp_m + i * 16 + lane % 16, ks * 2 + lane / 16) * 8;
#pragma unroll
        for (int j = 0; j < NJ; ++j)
            b_frag[ks][j] = swizzle<B_CHUNKS>(ks * 16 + lane % 16, (warp_n + j * 16) / 8 + lane / 16) * 8;
    }

    float acc[MI][WN / 8][4] = {};
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {  // fill the pipeline (empty groups past the end keep the count)
        if (s < tiles) load_tile(s, s);
        cp_async_commit();
    }
    // Fragments in two register buffers: those of step ks + 1 load while
    // step ks multiplies, and the first of slice t + 1 while the last of
    // slice t multiplies, so the barrier between slices overlaps mma work.
    unsigned fa[2][MI][4], fb[2][NJ][4];
    auto load_frags = [&](int buf, unsigned as, unsigned bs, int ks) {
#pragma unroll
        for (int i = 0; i < MI; ++i) ldmatrix_x4_at(fa[buf][i], as + a_frag[ks][i] * 2);
#pragma unroll
        for (int j = 0; j < NJ; ++j) ldmatrix_x4_trans_at(fb[buf][j], bs + b_frag[ks][j] * 2);
    };
    cp_async_wait<STAGES - 2>();
    __syncthreads();
    load_frags(0, as_addr, bs_addr, 0);
    for (int t = 0; t < tiles; ++t) {
        const int cur = t % STAGES, nxt = (t + 1) % STAGES;
#pragma unroll
        for (int ks = 0; ks < KS; ++ks) {
            if (ks == 0) {  // slice t + STAGES - 1 into the buffer slice t - 1 left (every warp is past it)
                int next = t + STAGES - 1;
                if (next < tiles) load_tile(next % STAGES, next);
                cp_async_commit();
            }
            if (ks == KS - 1) {  // slice t + 1 has landed, for every thread
                cp_async_wait<STAGES - 2>();
                __syncthreads();
                load_frags((ks + 1) % 2, as_addr + nxt * A_TILE * 2, bs_addr + nxt * B_TILE * 2, 0);
            } else {
                load_frags((ks + 1) % 2, as_addr + cur * A_TILE * 2, bs_addr + cur * B_TILE * 2, ks + 1);
            }
#pragma unroll
            for (int i = 0; i < MI; ++i)
#pragma unroll
                for (int j = 0; j < WN / 8; ++j)
                    mma_16816(acc[i][j], fa[ks % 2][i], fb[ks % 2][j / 2][(j % 2) * 2], fb[ks % 2][j / 2][(j % 2) * 2 + 1]);
        }
    }
    cp_async_wait<0>();
    store_acc<WM, WN>(C, acc, m0 + warp_m, n0 + warp_n, M, N, lane);
}

// any configuration, by name: tc_mma_async_t<BM, BN, BK, WM, WN, STAGES>
template <int BM, int BN, int BK, int WM, int WN, int STAGES>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32) tc_mma_async_t(
        const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    tc_mma_async_body<BM, BN, BK, WM, WN, STAGES>(A, B, C, M, N, K);
}

// The configurations the bench sweeps (kernels/tensor_cores.py: TC_CONFIGS),
// instantiated here too so that nvcc checks each for spills.
template __global__ void tc_mma_async_t<128, 128, 32, 64, 32, 3>(const __half*, const __half*, float*, int, int, int);
template __global__ void tc_mma_async_t<128, 128, 32, 64, 32, 4>(const __half*, const __half*, float*, int, int, int);
template __global__ void tc_mma_async_t<128, 128, 64, 64, 32, 3>(const __half*, const __half*, float*, int, int, int);
template __global__ void tc_mma_async_t<128, 256, 32, 64, 64, 3>(const __half*, const __half*, float*, int, int, int);
template __global__ void tc_mma_async_t<256, 128, 32, 64, 64, 3>(const __half*, const __half*, float*, int, int, int);
template __global__ void tc_mma_async_t<128, 256, 32, 64, 64, 4>(const __half*, const __half*, float*, int, int, int);
template __global__ void tc_mma_async_t<128, 128, 32, 32, 64, 4>(const __half*, const __half*, float*, int, int, int);
template __global__ void tc_mma_async_t<64, 128, 32, 32, 32, 4>(const __half*, const __half*, float*, int, int, int);

// Step 4: step 3's tiles (128 x 128 x 32, 8 warps of 64 x 32), 4 stages.
extern "C" __global__ void __launch_bounds__(256) tc_mma_async(
        const __half* __restrict__ A, const __half* __restrict__ B, float* __restrict__ C, int M, int N, int K) {
    tc_mma_async_body<128, 128, 32, 64, 32, 4>(A, B, C, M, N, K);
}
// --8<-- [end:mma_async]


// --8<-- [start:mma_peak]
// The ceiling: mma.sync on fragments that never leave registers. Each warp
// keeps CHAINS independent accumulators (so mma latency hides behind the
// others) and runs `iters` rounds; the sum of its accumulators is written
// so that nothing is optimised away. 2 * 16 * 8 * 16 FLOPs per mma.
constexpr int PEAK_CHAINS = 8;

extern "C" __global__ void tc_mma_peak(float* __restrict__ out, int iters) {
    const unsigned lane = threadIdx.x % 32;
    unsigned a[4] = {0x3c003c00u ^ lane, 0x3c003c00u, 0x3c003c00u, 0x3c003c00u};  // halves near 1.0
    unsigned b0 = 0x3c003c00u, b1 = 0x3c003c00u ^ (lane << 1);
    float acc[PEAK_CHAINS][4] = {};
    for (int it = 0; it < iters; ++it)
#pragma unroll
        for (int c = 0; c < PEAK_CHAINS; ++c) mma_16816(acc[c], a, b0, b1);
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < PEAK_CHAINS; ++c) s += acc[c][0] + acc[c][1] + acc[c][2] + acc[c][3];
    out[blockIdx.x * blockDim.x + threadIdx.x] = s;
}
// --8<-- [end:mma_peak]

