// Fused attention, forward pass: O = softmax(Q K^T / sqrt(D) (+ causal mask)) V
// for each of BH = batch * heads independent problems. Q, K, V, O are
// row-major [BH][N][D], contiguous, D = 64 or 128; the N x N scores never
// leave the chip. One idea per step (kernels/attention.py launches them):
//
//   1. attention_fp32_rows       one query row per thread (D / 64 threads at D = 128), K and V
//                                tiles in shared memory, online softmax in registers
//   2. attention_fp32_blocked    register blocking as in a good SGEMM: a thread owns TM x TN
//                                scores and TM x TD outputs; P staged through shared memory
//   3. attention_fp32_async      step 2 fed by cp.async: STAGES chunk buffers, STAGES - 1 in flight
//                                while the block computes on the oldest
//   4. attention_fp16            FP16 on the Tensor Cores (mma.sync m16n8k16), FlashAttention-2
//                                style: S and P in registers, O in FP32
//
// Causal (key j > query i masked): every kernel stops at the last key tile its
// query rows can see, and launches its query tiles longest first.
//
// Steps 3 and 4 use the Tensor Core chapter's building blocks (cp.async,
// ldmatrix, mma.sync: kernels/cuda/tensor_cores.cu, section mma_helpers), which
// need sm_80. NVRTC compiles this file for the GPU it runs on: the wrapper puts
// that section in front of it and defines ATTENTION_MMA_HELPERS; below sm_80,
// step 3 copies synchronously and step 4 compiles to an empty kernel that the
// wrapper refuses to launch. nvcc compiling this file alone
// (tests/test_cuda_compile.py) includes the whole tensor_cores.cu instead:
// REQUIRES: sm_90
// REQUIRES: sm_80
// REQUIRES: sm_86
// REQUIRES: sm_89

#include <cuda_fp16.h>
#ifndef ATTENTION_MMA_HELPERS
#include "tensor_cores.cu"
#endif

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define ATTENTION_SM80 0
#else
#define ATTENTION_SM80 1
#endif

// -infinity (NVRTC has no <math.h>, so no INFINITY): the score of a masked key.
__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000u); }

// Causal: query tile blockIdx.x counted from the end, so the tiles with the
// most keys to visit start first and the short ones fill the last wave.
__device__ __forceinline__ int query_tile(int causal) {
    return causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x;
}

// --8<-- [start:attention_fp32_rows]
// Step 1: one query row per thread (D / 64 threads per row, 64 of its d each),
// K and V tiles of BC keys through shared memory, the online softmax in
// registers. Every FMA reads one operand from shared memory (a broadcast), so
// the kernel is bound by shared-memory loads, and each block of 64 rows holds
// only 64 or 128 threads.
template <int D>
__device__ __forceinline__ void attention_fp32_rows_body(const float* __restrict__ Q, const float* __restrict__ K,
                                                         const float* __restrict__ V, float* __restrict__ O,
                                                         int N, float scale_log2, int causal) {
    constexpr int BR = 64, BC = 32, TPR = D / 64, THREADS = BR * TPR;
    __shared__ float Ks[BC][D + 1];  // +1: the threads of a warp read one column of different rows
    __shared__ float Vs[BC][D];
    const int q0 = query_tile(causal) * BR;
    const int bh = blockIdx.y, r = threadIdx.x / TPR, part = threadIdx.x % TPR;
    const int row = q0 + r, d0 = part * 64;
    const size_t base = (size_t)bh * N * D;
    const bool live = row < N;
    float q[64], acc[64];
#pragma unroll
    for (int d = 0; d < 64; ++d) {  // q pre-scaled by log2(e) / sqrt(D): the softmax runs in base 2
        q[d] = live ? Q[base + (size_t)row * D + d0 + d] * scale_log2 : 0.0f;
        acc[d] = 0.0f;
    }
    float m = neg_inf(), l = 0.0f;  // the row's running maximum and sum
    const int end = causal ? min(N, q0 + BR) : N;  // causal: no key past the block's last row
    for (int c0 = 0; c0 < end; c0 += BC) {
        __syncthreads();  // every thread is done with the previous tile
        for (int i = threadIdx.x; i < BC * D; i += THREADS) {
            const int j = i / D, d = i % D;
            const bool in = c0 + j < N;
            Ks[j][d] = in ? K[base + (size_t)(c0 + j) * D + d] : 0.0f;
            Vs[j][d] = in ? V[base + (size_t)(c0 + j) * D + d] : 0.0f;
        }
        __syncthreads();
        float s[BC];
        float tile_max = neg_inf();
#pragma unroll
        for (int j = 0; j < BC; ++j) {
            float dot = 0.0f;
#pragma unroll
            for (int d = 0; d < 64; ++d) dot += q[d] * Ks[j][d0 + d];
            if (TPR == 2) dot += __shfl_xor_sync(0xffffffffu, dot, 1);  // the row's other half
            const int col = c0 + j;
            if (col >= N || (causal && col > row)) dot = neg_inf();
            s[j] = dot;
            tile_max = fmaxf(tile_max, dot);
        }
        const float m_new = fmaxf(m, tile_max);
        if (m_new == neg_inf()) continue;  // every key so far masked (a row past N, causal)
        const float correction = exp2f(m - m_new);  // 0 on the row's first scores (m = -inf)
        l *= correction;
#pragma unroll
        for (int d = 0; d < 64; ++d) acc[d] *= correction;
#pragma unroll
        for (int j = 0; j < BC; ++j) {
            const float p = exp2f(s[j] - m_new);  // masked: exp2(-inf) = 0
            l += p;
#pragma unroll
            for (int d = 0; d < 64; ++d) acc[d] += p * Vs[j][d0 + d];
        }
        m = m_new;
    }
    if (live) {
        const float inv = 1.0f / l;
#pragma unroll
        for (int d = 0; d < 64; ++d) O[base + (size_t)row * D + d0 + d] = acc[d] * inv;
    }
}

extern "C" __global__ void __launch_bounds__(64) attention_fp32_rows_d64(
        const float* Q, const float* K, const float* V, float* O, int N, float scale_log2, int causal) {
    attention_fp32_rows_body<64>(Q, K, V, O, N, scale_log2, causal);
}
extern "C" __global__ void __launch_bounds__(128) attention_fp32_rows_d128(
        const float* Q, const float* K, const float* V, float* O, int N, float scale_log2, int causal) {
    attention_fp32_rows_body<128>(Q, K, V, O, N, scale_log2, causal);
}
// --8<-- [end:attention_fp32_rows]

// --8<-- [start:attention_fp32_tiled]
// Steps 2 and 3: one block per BM = TY * TM query rows of one head, TX * TY
// threads; thread (tx, ty) = (tid % TX, tid / TX) owns
//   scores  S[ty + TY * i][tx + TX * j]        i < TM, j < TN  (a key tile has BN = TX * TN keys)
//   output  O[ty + TY * i][4 * (tx + TX * g) + e]   g < TD / 4, e < 4  (TD = D / TX columns)
// in registers: the same rows, so the row's running max and sum, and the
// rescaling of its outputs, stay with the thread. The TX threads of a row are
// consecutive lanes of one warp: their partial maxima meet by shuffles.
// Per key tile of BN keys:
//   S  = Q K^T, over d in chunks of BK: Qs (the block's Q, loaded once) and a
//        chunk of K (BN keys x BK of d), float4 reads along d;
//   online softmax on S (base 2), P written to shared memory;
//   O += P V, over keys in chunks of BK: P (float4 reads along keys) and a
//        chunk of V (BK keys x D).
// Chunks of K and of V take turns in one ring of STAGES buffers:
// STAGES = 1 loads each chunk between two barriers (step 2); STAGES > 1 keeps
// STAGES - 1 chunks in flight with cp.async (step 3).

// 16 bytes global -> shared; zeros where `in` is false (a row past N).
template <bool ASYNC>
__device__ __forceinline__ void copy16(float* dst, const float* src, bool in) {
#if ATTENTION_SM80
    if constexpr (ASYNC) {
        cp_async_16(dst, src, in ? 16 : 0);  // src-size 0: nothing read, 16 zero bytes written
        return;
    }
#endif
    *reinterpret_cast<float4*>(dst) = in ? *reinterpret_cast<const float4*>(src) : make_float4(0.f, 0.f, 0.f, 0.f);
}

template <bool ASYNC>
__device__ __forceinline__ void pipe_commit() {
#if ATTENTION_SM80
    if constexpr (ASYNC) cp_async_commit();
#endif
}
template <bool ASYNC, int PENDING>
__device__ __forceinline__ void pipe_wait() {  // all but the newest PENDING groups of this thread landed
#if ATTENTION_SM80
    if constexpr (ASYNC) cp_async_wait<PENDING>();
#endif
}

template <int D, int TX, int TY, int TN, int BK_, int STAGES>
struct TiledShape {
    static constexpr int TM = 8;    // query rows per thread
    static constexpr int BK = BK_;  // d (K chunks) or keys (V chunks) per chunk
    static constexpr int THREADS = TX * TY, BM = TY * TM, BN = TX * TN, TD = D / TX;
    static constexpr int QS = D + 4;    // Qs row stride: rows ty and ty + 1 start 4 banks apart
    static constexpr int PS = BN + TX;  // Ps row stride: the warp's rows fall in different banks
    static constexpr int KS = BK + 4;   // K chunk row stride: keys tx, tx + 1 start 4 banks apart
    static constexpr int NK = D / BK, NV = BN / BK, CHUNKS = NK + NV;  // chunks per key tile
    static constexpr int STAGE = BN * KS > BK * D ? BN * KS : BK * D;   // floats per buffer
    static constexpr int SMEM_FLOATS = BM * QS + BM * PS + STAGES * STAGE;
    static_assert(TD % 4 == 0 && D % BK == 0 && BN % BK == 0, "float4 pieces, whole chunks");
    static_assert(32 % TX == 0, "a row's TX threads sit in one warp");
};

// Copies chunks of the key-tile loop into shared memory. Chunk c of a tile
// (keys tile * BN ..) is, for c < NK, K[keys][c * BK .. + BK) (BN rows, row
// stride KS), then V[keys (c - NK) * BK .. + BK][0 .. D) (BK rows, row stride
// D). Each thread copies the 16-byte pieces at a fixed row and column of the
// chunk, STEP rows apart: offsets computed once, and a tile that lies wholly
// inside N is copied without a bounds check.
template <int D, int TX, int TY, int TN, int BK, int STAGES>
struct ChunkLoader {
    using S = TiledShape<D, TX, TY, TN, BK, STAGES>;
    static constexpr bool ASYNC = STAGES > 1;
    static constexpr int K_STEP = S::THREADS / (BK / 4), K_PASSES = S::BN / K_STEP;  // BK / 4 pieces per K row
    static constexpr int V_STEP = S::THREADS / (D / 4), V_PASSES = BK / V_STEP;      // D / 4 pieces per V row
    static_assert(S::THREADS % (BK / 4) == 0 && S::BN % K_STEP == 0, "whole K pieces per thread");
    static_assert(S::THREADS % (D / 4) == 0 && BK % V_STEP == 0, "whole V pieces per thread");
    const float* K;
    const float* V;
    int N, k_row, k_col, v_row, v_col;  // this thread's first piece of a K chunk and of a V chunk

    __device__ ChunkLoader(const float* Kh, const float* Vh, int n)
        : K(Kh), V(Vh), N(n), k_row(threadIdx.x / (BK / 4)), k_col(4 * (threadIdx.x % (BK / 4))),
          v_row(threadIdx.x / (D / 4)), v_col(4 * (threadIdx.x % (D / 4))) {}

    template <int PASSES, int STEP, int LD>
    __device__ __forceinline__ void rows(float* dst, const float* src, const float* fallback, int left) const {
        if (left > (PASSES - 1) * STEP) {  // all this thread's rows exist (everywhere but the last tile)
#pragma unroll
            for (int n = 0; n < PASSES; ++n) copy16<ASYNC>(dst + n * STEP * LD, src + n * STEP * D, true);
        } else {  // rows past N: zeros, read from nowhere (fallback: a valid address)
#pragma unroll
            for (int n = 0; n < PASSES; ++n) {
                const bool in = n * STEP < left;
                copy16<ASYNC>(dst + n * STEP * LD, in ? src + n * STEP * D : fallback, in);
            }
        }
    }

    __device__ __forceinline__ void load(float* dst, int tile, int c) const {
        if (c < S::NK) {
            const int row = tile * S::BN + k_row;
            rows<K_PASSES, K_STEP, S::KS>(dst + k_row * S::KS + k_col, K + (size_t)row * D + c * BK + k_col, K,
                                          N - row);
        } else {
            const int row = tile * S::BN + (c - S::NK) * BK + v_row;
            rows<V_PASSES, V_STEP, D>(dst + v_row * D + v_col, V + (size_t)row * D + v_col, V, N - row);
        }
    }
};

template <int D, int TX, int TY, int TN, int BK, int STAGES>
__device__ __forceinline__ void attention_fp32_tiled(const float* __restrict__ Q, const float* __restrict__ K,
                                                     const float* __restrict__ V, float* __restrict__ O,
                                                     int N, float scale_log2, int causal) {
    using S = TiledShape<D, TX, TY, TN, BK, STAGES>;
    constexpr int TM = S::TM, BM = S::BM, BN = S::BN, TD = S::TD;
    constexpr int QS = S::QS, PS = S::PS, KS = S::KS, NK = S::NK, CHUNKS = S::CHUNKS;
    constexpr bool ASYNC = STAGES > 1;
    extern __shared__ float4 smem4[];  // float4: 16-byte aligned for float4 and cp.async
    float* Qs = reinterpret_cast<float*>(smem4);  // BM x D (row stride QS)
    float* Ps = Qs + BM * QS;                      // BM x BN (row stride PS)
    float* Cs = Ps + BM * PS;                      // STAGES chunk buffers
    const int tx = threadIdx.x % TX, ty = threadIdx.x / TX;
    const int q0 = query_tile(causal) * BM;
    const size_t base = (size_t)blockIdx.y * N * D;
    const float* Kh = K + base;
    const float* Vh = V + base;
    const int kv_end = causal ? min(N, q0 + BM) : N;  // causal: tiles past the block's last row are skipped
    const int tiles = (kv_end + BN - 1) / BN;

    // The block's Q tile (rows past N as zeros), in the first group with chunk 0.
    static_assert(BM * D / 4 % S::THREADS == 0, "whole 16-byte pieces per thread");
#pragma unroll
    for (int n = 0; n < BM * D / 4 / S::THREADS; ++n) {
        const int i = threadIdx.x + n * S::THREADS;
        const int r = i / (D / 4), p = i % (D / 4), row = q0 + r;
        copy16<ASYNC>(Qs + r * QS + 4 * p, Q + base + (size_t)(row < N ? row : 0) * D + 4 * p, row < N);
    }
    const ChunkLoader<D, TX, TY, TN, BK, STAGES> loader(Kh, Vh, N);
    static_assert(STAGES - 1 <= CHUNKS, "the prologue stays in tile 0");
    if constexpr (ASYNC) {
#pragma unroll
        for (int g = 0; g < STAGES - 1; ++g) {  // the pipeline's prologue: chunks 0 .. STAGES-2 of tile 0
            loader.load(Cs + g * S::STAGE, 0, g);
            pipe_commit<ASYNC>();
        }
    }

    float o[TM][TD];
    float m[TM], l[TM];  // each row's running maximum (raw score) and this thread's part of its sum
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        m[i] = neg_inf();
        l[i] = 0.0f;
#pragma unroll
        for (int d = 0; d < TD; ++d) o[i][d] = 0.0f;
    }

    // The next chunk of the sequence (K chunks, then V chunks, tile after tile), landed in shared memory.
    // Chunk g sits in buffer `stage`; chunk g + STAGES - 1 (tile a_tile, index a_c) goes to a_stage.
    int stage = 0, a_tile = 0, a_c = STAGES - 1, a_stage = STAGES - 1;
    auto next_chunk = [&]() -> const float* {
        if constexpr (ASYNC) {
            pipe_wait<ASYNC, STAGES - 2>();  // chunk g (and Q) landed for this thread's copies ...
            __syncthreads();  // ... and for everyone's; all are done with chunk g - 1's buffer, a_stage
            if (a_tile < tiles) loader.load(Cs + a_stage * S::STAGE, a_tile, a_c);
            pipe_commit<ASYNC>();  // an empty group past the end keeps the count of groups uniform
            if (++a_c == CHUNKS) {
                a_c = 0;
                ++a_tile;
            }
            a_stage = a_stage + 1 == STAGES ? 0 : a_stage + 1;
            const float* chunk = Cs + stage * S::STAGE;
            stage = stage + 1 == STAGES ? 0 : stage + 1;
            return chunk;
        } else {
            __syncthreads();  // every thread is done with the previous chunk
            loader.load(Cs, a_tile, a_c);  // STAGES = 1: a_tile, a_c are chunk g's own
            if (++a_c == CHUNKS) {
                a_c = 0;
                ++a_tile;
            }
            __syncthreads();
            return Cs;
        }
    };

    for (int tile = 0; tile < tiles; ++tile) {
        float s[TM][TN];  // defined per tile: dead (its registers free) while O += P V runs
#pragma unroll
        for (int i = 0; i < TM; ++i)
#pragma unroll
            for (int j = 0; j < TN; ++j) s[i][j] = 0.0f;
#pragma unroll 1
        for (int c = 0; c < NK; ++c) {  // S += Q[:, c*BK .. +BK] K[keys, c*BK .. +BK]^T
            const float* chunk = next_chunk();
#pragma unroll
            for (int kk = 0; kk < BK; kk += 4) {
                float4 kv[TN];
#pragma unroll
                for (int j = 0; j < TN; ++j) kv[j] = *reinterpret_cast<const float4*>(chunk + (tx + TX * j) * KS + kk);
#pragma unroll
                for (int i = 0; i < TM; ++i) {
                    const float4 qv = *reinterpret_cast<const float4*>(Qs + (ty + TY * i) * QS + c * BK + kk);
#pragma unroll
                    for (int j = 0; j < TN; ++j) {
                        s[i][j] = fmaf(qv.x, kv[j].x, s[i][j]);
                        s[i][j] = fmaf(qv.y, kv[j].y, s[i][j]);
                        s[i][j] = fmaf(qv.z, kv[j].z, s[i][j]);
                        s[i][j] = fmaf(qv.w, kv[j].w, s[i][j]);
                    }
                }
            }
        }
        // S complete: the online softmax, P to shared memory.
        const int k0 = tile * BN;
        if (k0 + BN > N || (causal && k0 + BN - 1 > q0)) {  // a tile at the end or on the diagonal
#pragma unroll
            for (int i = 0; i < TM; ++i)
#pragma unroll
                for (int j = 0; j < TN; ++j) {
                    const int col = k0 + tx + TX * j, row = q0 + ty + TY * i;
                    if (col >= N || (causal && col > row)) s[i][j] = neg_inf();
                }
        }
#pragma unroll
        for (int i = 0; i < TM; ++i) {
            float mx = m[i];
#pragma unroll
            for (int j = 0; j < TN; ++j) mx = fmaxf(mx, s[i][j]);
#pragma unroll
            for (int w = 1; w < TX; w *= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, w));
            // mx is finite: key 0 is in tile 0 and visible to every row (rows past N too).
            const float corr = exp2f((m[i] - mx) * scale_log2);  // first tile: exp2(-inf) = 0
            m[i] = mx;
            l[i] *= corr;
#pragma unroll
            for (int d = 0; d < TD; ++d) o[i][d] *= corr;
#pragma unroll
            for (int j = 0; j < TN; ++j) {
                // (s - max) first: exact for the scores near the max, however large the logits
                const float p = exp2f((s[i][j] - mx) * scale_log2);  // masked: exp2(-inf) = 0
                l[i] += p;
                Ps[(ty + TY * i) * PS + tx + TX * j] = p;
            }
        }
        // The first V chunk's barrier (in next_chunk) orders these stores before any read of Ps,
        // and the next tile's K chunks' barriers order every read before the next stores.
#pragma unroll 1
        for (int c = 0; c < S::NV; ++c) {  // O += P[:, keys c*BK .. +BK] V[c*BK .. +BK, :]
            const float* chunk = next_chunk();
            const int kb = c * BK;
#pragma unroll
            for (int kk = 0; kk < BK; kk += 4) {
                float4 pv[TM];
#pragma unroll
                for (int i = 0; i < TM; ++i) pv[i] = *reinterpret_cast<const float4*>(Ps + (ty + TY * i) * PS + kb + kk);
#pragma unroll
                for (int e = 0; e < 4; ++e) {
                    float4 vv[TD / 4];
#pragma unroll
                    for (int g4 = 0; g4 < TD / 4; ++g4)
                        vv[g4] = *reinterpret_cast<const float4*>(chunk + (kk + e) * D + 4 * (tx + TX * g4));
#pragma unroll
                    for (int i = 0; i < TM; ++i) {
                        const float p = e == 0 ? pv[i].x : e == 1 ? pv[i].y : e == 2 ? pv[i].z : pv[i].w;
#pragma unroll
                        for (int g4 = 0; g4 < TD / 4; ++g4) {
                            o[i][4 * g4 + 0] = fmaf(p, vv[g4].x, o[i][4 * g4 + 0]);
                            o[i][4 * g4 + 1] = fmaf(p, vv[g4].y, o[i][4 * g4 + 1]);
                            o[i][4 * g4 + 2] = fmaf(p, vv[g4].z, o[i][4 * g4 + 2]);
                            o[i][4 * g4 + 3] = fmaf(p, vv[g4].w, o[i][4 * g4 + 3]);
                        }
                    }
                }
            }
        }
    }
    pipe_wait<ASYNC, 0>();  // no copy may still be in flight when the block exits
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        float sum = l[i];
#pragma unroll
        for (int w = 1; w < TX; w *= 2) sum += __shfl_xor_sync(0xffffffffu, sum, w);  // the row's whole sum
        const int row = q0 + ty + TY * i;
        if (row < N) {
            const float inv = 1.0f / sum;
#pragma unroll
            for (int g4 = 0; g4 < TD / 4; ++g4)
                *reinterpret_cast<float4*>(O + base + (size_t)row * D + 4 * (tx + TX * g4)) =
                    make_float4(o[i][4 * g4] * inv, o[i][4 * g4 + 1] * inv, o[i][4 * g4 + 2] * inv,
                                o[i][4 * g4 + 3] * inv);
        }
    }
}

// One kernel per configuration, named after it: D, BM x BN, BK, STAGES.
// kernels/attention.py lists the same ones (FP32_CONFIGS). The explicit
// minimum of 1 block per SM leaves ptxas all 255 registers: without it, it
// aimed some shapes at 3 blocks per SM (168 registers) and spilled.
#define ATTENTION_FP32_TILED(NAME, D, TX, TY, TN, BK, STAGES)                                          \
    extern "C" __global__ void __launch_bounds__(TX * TY, 1) NAME(                                      \
            const float* Q, const float* K, const float* V, float* O, int N, float scale_log2, int causal) { \
        attention_fp32_tiled<D, TX, TY, TN, BK, STAGES>(Q, K, V, O, N, scale_log2, causal);              \
    }

// Step 2: loads between two barriers.
ATTENTION_FP32_TILED(attention_fp32_blocked_d64_128x64k16, 64, 8, 16, 8, 16, 1)
ATTENTION_FP32_TILED(attention_fp32_blocked_d128_64x128k16, 128, 16, 8, 8, 16, 1)
// Step 3: cp.async, STAGES - 1 chunks in flight; a few tile shapes to tune (BM x BN, BK, STAGES).
ATTENTION_FP32_TILED(attention_fp32_async_d64_128x64k16s3, 64, 8, 16, 8, 16, 3)
ATTENTION_FP32_TILED(attention_fp32_async_d64_128x64k32s2, 64, 8, 16, 8, 32, 2)
ATTENTION_FP32_TILED(attention_fp32_async_d64_64x128k16s3, 64, 16, 8, 8, 16, 3)
ATTENTION_FP32_TILED(attention_fp32_async_d64_128x32k16s3, 64, 8, 16, 4, 16, 3)
ATTENTION_FP32_TILED(attention_fp32_async_d128_64x128k16s3, 128, 16, 8, 8, 16, 3)
ATTENTION_FP32_TILED(attention_fp32_async_d128_64x128k16s2, 128, 16, 8, 8, 16, 2)
ATTENTION_FP32_TILED(attention_fp32_async_d128_64x128k16s4, 128, 16, 8, 8, 16, 4)
ATTENTION_FP32_TILED(attention_fp32_async_d128_64x64k16s3, 128, 16, 8, 4, 16, 3)
ATTENTION_FP32_TILED(attention_fp32_async_d128_64x64k32s2, 128, 16, 8, 4, 32, 2)
ATTENTION_FP32_TILED(attention_fp32_async_d128_128x128k16s3, 128, 16, 16, 8, 16, 3)
ATTENTION_FP32_TILED(attention_fp32_async_d128_128x64k16s3, 128, 16, 16, 4, 16, 3)
// --8<-- [end:attention_fp32_tiled]

// --8<-- [start:attention_fp16]
// Step 4: FP16 inputs on the Tensor Cores, FlashAttention-2 style. Q, K, V:
// [BH][N][D] half; O: [BH][N][D] float. One block of 4 warps per BR = 64 query
// rows of one head; each warp owns 16 rows. K and V stream through shared
// memory in BC = 64-row tiles, two stages (cp.async), so the scores stay in
// registers:
//   S (16 x 64 per warp) = Q K^T: A = Q fragments (kept in registers), B = K
//     rows by ldmatrix (K is key-major with d contiguous: the "col" operand as is);
//   online softmax on the S accumulators (a row lives in the 4 lanes of a quad);
//   P to FP16 A fragments straight from the accumulator layout (n-tiles 2t and
//     2t + 1 of S are the k-slice t of P);
//   O (16 x D per warp) += P V: B = V rows by ldmatrix.trans.
// Shared memory: Q (BR x D) and two stages of K and V (BC x D each), in 16-byte
// chunks swizzled as in the Tensor Core chapter: (BR + 4 BC) D halves, 80 KB at D = 128.
namespace fa {
constexpr int BR = 64, BC = 64, WARPS = 4, THREADS = 32 * WARPS;
static_assert(BR == BC, "load_rows copies BC rows for Q too");
}

template <int D>
__device__ __forceinline__ void load_rows(__half* dst, const __half* src, int row0, int N, int tid) {
    // BC rows of D halves, 16-byte chunks, zeros past row N - 1
    constexpr int CHUNKS = D / 8;
#pragma unroll
    for (int i = tid; i < fa::BC * CHUNKS; i += fa::THREADS) {
        const int r = i / CHUNKS, c = i % CHUNKS;
        const bool in = row0 + r < N;
        cp_async_16(dst + swizzle<CHUNKS>(r, c) * 8, src + (size_t)(in ? row0 + r : 0) * D + c * 8, in ? 16 : 0);
    }
}

__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<unsigned*>(&h);
}

template <int D>
__device__ __forceinline__ void attention_fp16_body(const __half* __restrict__ Q, const __half* __restrict__ K,
                                                    const __half* __restrict__ V, float* __restrict__ O,
                                                    int N, float scale_log2, int causal) {
    using namespace fa;
    constexpr int CHUNKS = D / 8, KS = D / 16, NT = BC / 8, OT = D / 8;
    extern __shared__ __align__(128) unsigned char smem_raw[];
    __half* Qs = reinterpret_cast<__half*>(smem_raw);  // BR x D
    __half* Ks = Qs + BR * D;                            // 2 stages of BC x D
    __half* Vs = Ks + 2 * BC * D;                        // 2 stages of BC x D
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
    const int q0 = query_tile(causal) * BR;
    const size_t base = (size_t)blockIdx.y * N * D;
    const int kv_end = causal ? min(N, q0 + BR) : N;
    const int tiles = (kv_end + BC - 1) / BC;

    load_rows<D>(Qs, Q + base, q0, N, tid);
    load_rows<D>(Ks, K + base, 0, N, tid);
    load_rows<D>(Vs, V + base, 0, N, tid);
    cp_async_commit();
    cp_async_wait<0>();
    __syncthreads();
    unsigned qf[KS][4];  // this warp's 16 query rows as A fragments, every k-slice of D
#pragma unroll
    for (int k = 0; k < KS; ++k)
        ldmatrix_x4(qf[k], Qs + swizzle<CHUNKS>(warp * 16 + lane % 16, 2 * k + lane / 16) * 8);

    float o[OT][4];
#pragma unroll
    for (int j = 0; j < OT; ++j) o[j][0] = o[j][1] = o[j][2] = o[j][3] = 0.0f;
    float m[2] = {neg_inf(), neg_inf()}, l[2] = {0.0f, 0.0f};  // rows lane / 4 and lane / 4 + 8
    const int row_a = q0 + warp * 16 + lane / 4, row_b = row_a + 8;

    for (int t = 0; t < tiles; ++t) {
        const int cur = t & 1;
        if (t > 0) {
            cp_async_wait<0>();
            __syncthreads();  // tile t has landed; every warp is done with tile t - 1's stage
        }
        if (t + 1 < tiles) {  // the next tile flies while this one is computed
            load_rows<D>(Ks + (cur ^ 1) * BC * D, K + base, (t + 1) * BC, N, tid);
            load_rows<D>(Vs + (cur ^ 1) * BC * D, V + base, (t + 1) * BC, N, tid);
            cp_async_commit();
        }
        const __half* ks = Ks + cur * BC * D;
        const __half* vs = Vs + cur * BC * D;
        float s[NT][4];
#pragma unroll
        for (int j = 0; j < NT; ++j) s[j][0] = s[j][1] = s[j][2] = s[j][3] = 0.0f;
#pragma unroll
        for (int k = 0; k < KS; ++k)
#pragma unroll
            for (int j = 0; j < NT; j += 2) {  // keys 8j .. 8j + 15: two n8 tiles from one ldmatrix.x4
                unsigned b[4];
                ldmatrix_x4(b, ks + swizzle<CHUNKS>(8 * j + (lane % 8) + 8 * (lane / 16), 2 * k + (lane / 8) % 2) * 8);
                mma_16816(s[j], qf[k], b[0], b[1]);
                mma_16816(s[j + 1], qf[k], b[2], b[3]);
            }
        // mask, then the online softmax in base 2 (scale_log2 = log2(e) / sqrt(D))
        float mx[2] = {m[0], m[1]};
#pragma unroll
        for (int j = 0; j < NT; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
                const int col = t * BC + 8 * j + 2 * (lane % 4) + (e & 1), row = e < 2 ? row_a : row_b;
                float v = s[j][e] * scale_log2;
                if (col >= N || (causal && col > row)) v = neg_inf();
                s[j][e] = v;
                mx[e >> 1] = fmaxf(mx[e >> 1], v);
            }
#pragma unroll
        for (int h = 0; h < 2; ++h) {  // the row's maximum over its quad
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 1));
            mx[h] = fmaxf(mx[h], __shfl_xor_sync(0xffffffffu, mx[h], 2));
        }
        float corr[2];
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            corr[h] = mx[h] == neg_inf() ? 1.0f : exp2f(m[h] - mx[h]);  // m = -inf at first: exp2 -> 0
            m[h] = mx[h];
            l[h] *= corr[h];
        }
#pragma unroll
        for (int j = 0; j < OT; ++j) {
            o[j][0] *= corr[0]; o[j][1] *= corr[0];
            o[j][2] *= corr[1]; o[j][3] *= corr[1];
        }
        unsigned p[BC / 16][4];  // P as A fragments, one per k-slice of 16 keys
#pragma unroll
        for (int j = 0; j < NT; ++j) {
            const float e0 = m[0] == neg_inf() ? 0.0f : exp2f(s[j][0] - m[0]);
            const float e1 = m[0] == neg_inf() ? 0.0f : exp2f(s[j][1] - m[0]);
            const float e2 = m[1] == neg_inf() ? 0.0f : exp2f(s[j][2] - m[1]);
            const float e3 = m[1] == neg_inf() ? 0.0f : exp2f(s[j][3] - m[1]);
            l[0] += e0 + e1;
            l[1] += e2 + e3;
            p[j / 2][(j % 2) * 2 + 0] = pack_half2(e0, e1);  // a0 / a2: row lane / 4
            p[j / 2][(j % 2) * 2 + 1] = pack_half2(e2, e3);  // a1 / a3: row lane / 4 + 8
        }
#pragma unroll
        for (int kk = 0; kk < BC / 16; ++kk)
#pragma unroll
            for (int j = 0; j < OT; j += 2) {  // d columns 8j .. 8j + 15
                unsigned b[4];
                ldmatrix_x4_trans(b, vs + swizzle<CHUNKS>(16 * kk + lane % 16, j + lane / 16) * 8);
                mma_16816(o[j], p[kk], b[0], b[1]);
                mma_16816(o[j + 1], p[kk], b[2], b[3]);
            }
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {  // the row's sum over its quad
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 1);
        l[h] += __shfl_xor_sync(0xffffffffu, l[h], 2);
    }
#pragma unroll
    for (int j = 0; j < OT; ++j) {
        const int col = 8 * j + 2 * (lane % 4);
        if (row_a < N)
            *reinterpret_cast<float2*>(O + base + (size_t)row_a * D + col) = make_float2(o[j][0] / l[0], o[j][1] / l[0]);
        if (row_b < N)
            *reinterpret_cast<float2*>(O + base + (size_t)row_b * D + col) = make_float2(o[j][2] / l[1], o[j][3] / l[1]);
    }
}

// Below sm_80 (no mma.sync m16n8k16, no cp.async) the kernels are empty; the wrapper refuses them there.
extern "C" __global__ void __launch_bounds__(fa::THREADS) attention_fp16_d64(
        const __half* Q, const __half* K, const __half* V, float* O, int N, float scale_log2, int causal) {
#if ATTENTION_SM80
    attention_fp16_body<64>(Q, K, V, O, N, scale_log2, causal);
#endif
}
extern "C" __global__ void __launch_bounds__(fa::THREADS) attention_fp16_d128(
        const __half* Q, const __half* K, const __half* V, float* O, int N, float scale_log2, int causal) {
#if ATTENTION_SM80
    attention_fp16_body<128>(Q, K, V, O, N, scale_log2, causal);
#endif
}
// --8<-- [end:attention_fp16]
