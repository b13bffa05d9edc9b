// Topic attention_hopper: attention's forward pass on Hopper (sm_90a) in
// the style of FlashAttention-3: TMA, mbarriers, wgmma, warp specialization.
// REQUIRES: sm_90a
//
// Compiled after the sections hg_barriers and hg_wgmma of hopper_gemm.cu
// (the mbarrier and TMA helpers, the shared-memory descriptor, wgmma from
// shared memory), which kernels/hopper_attention.py puts in front of this
// text; -DHG_BF16 makes the whole thing BF16, as it does the GEMM.
//
// O = softmax(Q K^T / sqrt(d)) V for every head: Q, K, V, O (BH, N, d),
// 16-bit (FP16, or BF16 bit patterns), d 64 or 128, any N; FP32 inside.
// A block takes BM = 64 query rows per consumer warpgroup and walks the keys
// in tiles of BN = 128: S = Q K^T by wgmma from shared memory (K-major, as
// the GEMM's Bt); the online softmax in registers, base 2; P converted to
// 16 bits in place, because the accumulator of S is laid out as wgmma's A
// operand from registers wants it; O += P V by wgmma with P from registers
// and V from shared memory as loaded (N-major: imm-trans-b = 1).
//
// The ladder, one template:
//   ha_plain       one warpgroup computes 64 rows; thread 0 also issues the copies
//   ha_ws          a producer warp fills a ring of K and V tiles; two consumer
//                  warpgroups (128 rows) share it; setmaxnreg moves registers
//   ha_pingpong    + named barriers take turns between the consumers: one
//                  issues its matrix products while the other does softmax
//   ha_overlap     + within a warpgroup, the softmax of tile j runs while
//                  the wgmma of P(j-1) V(j-1) is still in flight; at d = 64
//                  three consumers (192 rows) take turns
#include <cuda_fp16.h>

// --8<-- [start:ha_helpers]
// TMA of a 3-D box (c0 innermost: columns of d; c1: rows of N; c2: the head).
__device__ __forceinline__ void tma_load_3d(void* dst, const TmaDesc* map, int c0, int c1, int c2,
                                            unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.3d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3, %4}], [%5];\n"
                 :: "r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(bar)) : "memory");
}
// Two floats rounded to one 32-bit register of two 16-bit values, lo in the low half.
__device__ __forceinline__ unsigned pack_half2(float lo, float hi) {
    unsigned r;
#if defined(HG_BF16)
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#else
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(r) : "f"(hi), "f"(lo));
#endif
    return r;
}
__device__ __forceinline__ float exp2_approx(float x) {  // MUFU.EX2: 2^x, exp2(-inf) = 0
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;\n" : "=f"(y) : "f"(x));
    return y;
}
// Named barriers 1 and 2 (0 is __syncthreads'), counted over `threads`:
// bar.sync waits for them all; bar.arrive counts itself and goes on.
__device__ __forceinline__ void named_sync(int id, int threads) {
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_arrive(int id, int threads) {
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(threads) : "memory");
}
// The descriptor of a tile that is N-major for wgmma's B (V: each row of the
// tile is one key, 64 values of d in 128 bytes, 128-byte swizzle): CUTLASS's
// canonical MN-major SW128 layout ((8,8,m),(8,k)) : ((1,8,LBO),(64,SBO)) in
// 16-byte units: a group of 8 keys is 1024 B (SBO), the next 64 columns of d
// are the next 64-column slab, BN * 128 B further (LBO).
template <int BN>
__device__ __forceinline__ unsigned long long smem_desc_mn(const void* tile) {
    unsigned long long addr = smem_u32(tile);
    return ((addr & 0x3FFFF) >> 4) | ((unsigned long long)(BN * 128 >> 4) << 16) | ((1024ull >> 4) << 32) |
           (1ull << 62);
}

// D (64 x N, FP32) += A (64 x 16, 16-bit, from registers: four registers of
// two values, the layout of wgmma's A fragment) B (16 x N, N-major in shared memory).
template <int N>
__device__ __forceinline__ void wgmma_rs(float (&d)[N / 2], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned long long desc_b);
template <>
__device__ __forceinline__ void wgmma_rs<64>(float (&d)[32], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                              unsigned long long desc_b) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n64" HG_MMA_TAIL " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, "
        "{%32, %33, %34, %35}, %36, 1, 1, 1, 1;\n"
        :
          "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b));
}

template <>
__device__ __forceinline__ void wgmma_rs<128>(float (&d)[64], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                              unsigned long long desc_b) {
    asm volatile(
        "wgmma.mma_async.sync.aligned.m64n128" HG_MMA_TAIL " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "{%64, %65, %66, %67}, %68, 1, 1, 1, 1;\n"
        :
          "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "l"(desc_b));
}
// --8<-- [end:ha_helpers]

// --8<-- [start:ha_kernel]
constexpr int HA_BN = 128;  // keys per tile
#define HA_NEG_INF __int_as_float(0xff800000)  // -inf (NVRTC has no INFINITY)

template <int D, int STAGES, int CONSUMERS>
struct HaSmem {  // Q, then the ring of K and V tiles, then the barriers; 1024-byte aligned
    static constexpr int BM = 64 * CONSUMERS;                  // query rows per block
    static constexpr int TILE_Q = BM * D, TILE_KV = HA_BN * D;  // 16-bit values
    static constexpr int BYTES = (TILE_Q + 2 * STAGES * TILE_KV) * 2 + (4 * STAGES + 1) * 8 + 1024;
};

// WS: warpgroup 0 is a producer (one thread issues every copy), warpgroups 1
// ... CONSUMERS consume; else one warpgroup does both. PINGPONG and OVERLAP need WS.
template <int D, int STAGES, bool WS, int CONSUMERS, bool PINGPONG, bool OVERLAP>
__device__ __forceinline__ void ha_forward(const TmaDesc& map_q, const TmaDesc& map_k, const TmaDesc& map_v,
                                           unsigned* __restrict__ O, int N, float scale_log2, int causal) {
    static_assert(WS || (CONSUMERS == 1 && !PINGPONG && !OVERLAP), "one warpgroup, or a producer and consumers");
    static_assert(!PINGPONG || CONSUMERS > 1, "ping-pong needs two consumers or more");
    using S = HaSmem<D, STAGES, CONSUMERS>;
    constexpr int BM = S::BM, KV_BYTES = S::TILE_KV * 2;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* base = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
    // every tile is stored as slabs of 64 columns (128 bytes, what a 128-byte swizzle covers):
    // Q [D / 64][BM][64], each K and V tile [D / 64][HA_BN][64]
    __half* Qs = reinterpret_cast<__half*>(base);
    __half* Ks = Qs + S::TILE_Q;
    __half* Vs = Ks + STAGES * S::TILE_KV;
    unsigned long long* full_k = reinterpret_cast<unsigned long long*>(Vs + STAGES * S::TILE_KV);
    unsigned long long* full_v = full_k + STAGES;
    unsigned long long* empty_k = full_v + STAGES;  // K and V slots are freed apart: K as soon as S is done
    unsigned long long* empty_v = empty_k + STAGES;
    unsigned long long* full_q = empty_v + STAGES;

    const int head = blockIdx.y;
    const int m0 = (causal ? gridDim.x - 1 - blockIdx.x : blockIdx.x) * BM;  // causal: longest rows first
    const int tiles = ((causal ? min(N, m0 + BM) : N) + HA_BN - 1) / HA_BN;  // key tiles this block reads
    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full_k[s], 1);
            mbar_init(&full_v[s], 1);
            mbar_init(&empty_k[s], 4 * CONSUMERS);  // one arrive per consumer warp
            mbar_init(&empty_v[s], 4 * CONSUMERS);
        }
        mbar_init(full_q, 1);
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();

    auto load_kv = [&](int j) {  // key tile j into slot j % STAGES (one thread), once its readers are done
        const int s = j % STAGES;
        if (j >= STAGES) mbar_wait(&empty_k[s], (j / STAGES - 1) & 1);
        mbar_arrive_expect_tx(&full_k[s], KV_BYTES);
        for (int c = 0; c < D / 64; ++c)
            tma_load_3d(Ks + s * S::TILE_KV + c * HA_BN * 64, &map_k, 64 * c, j * HA_BN, head, &full_k[s]);
        if (j >= STAGES) mbar_wait(&empty_v[s], (j / STAGES - 1) & 1);
        mbar_arrive_expect_tx(&full_v[s], KV_BYTES);
        for (int c = 0; c < D / 64; ++c)
            tma_load_3d(Vs + s * S::TILE_KV + c * HA_BN * 64, &map_v, 64 * c, j * HA_BN, head, &full_v[s]);
    };
    auto load_q = [&]() {
        mbar_arrive_expect_tx(full_q, S::TILE_Q * 2);
        for (int c = 0; c < D / 64; ++c) tma_load_3d(Qs + c * BM * 64, &map_q, 64 * c, m0, head, full_q);
    };

    if (WS && wg == 0) {  // the producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
        if (tid == 0) {
            load_q();
            for (int j = 0; j < tiles; ++j) load_kv(j);
        }
        return;
    }
    if (WS && CONSUMERS == 2) asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n");
    if (WS && CONSUMERS == 3) asm volatile("setmaxnreg.inc.sync.aligned.u32 160;\n");  // 24 + 3 x 160 <= 512
    if (!WS && threadIdx.x == 0) {  // one warpgroup: thread 0 fills the ring first
        load_q();
        for (int j = 0; j < min(STAGES, tiles); ++j) load_kv(j);
    }
    const int c = WS ? wg - 1 : 0;  // this consumer's 64 rows: m0 + 64 c ...
    const int warp = tid / 32, lane = tid % 32;
    const int row0 = m0 + 64 * c + 16 * warp + lane / 4;  // this thread's rows: row0 and row0 + 8

    // The accumulator layout of m64nNk16: register 4j + 2h + e holds row
    // row0 + 8h, column 8j + 2(lane % 4) + e.
    float s[HA_BN / 2];        // S of a key tile, then P in FP32
    unsigned p[HA_BN / 4];     // P in 16 bits: 4 registers per 16 keys, wgmma's A fragment
    float o[D / 2];
    float m_run[2] = {HA_NEG_INF, HA_NEG_INF}, l_run[2] = {0.f, 0.f}, corr[2] = {1.f, 1.f};
#pragma unroll
    for (int i = 0; i < D / 2; ++i) o[i] = 0.f;

    auto qk = [&](int j) {  // issue S = Q K_j^T (D / 16 wgmmas, one group)
        const int st = j % STAGES;
        mbar_wait(&full_k[st], (j / STAGES) & 1);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
            wgmma_f16<HA_BN>(s, smem_desc(Qs + (kk / 4) * BM * 64 + 64 * c * 64) + 2 * (kk % 4),
                             smem_desc(Ks + st * S::TILE_KV + (kk / 4) * HA_BN * 64) + 2 * (kk % 4), kk > 0);
        wgmma_commit();
    };
    auto pv = [&](int j) {  // issue O += P V_j (HA_BN / 16 wgmmas, one group)
        const int st = j % STAGES;
        mbar_wait(&full_v[st], (j / STAGES) & 1);
        wgmma_fence();
#pragma unroll
        for (int kc = 0; kc < HA_BN / 16; ++kc)  // 16 keys = 16 rows of 128 B = 128 in 16-byte units
            wgmma_rs<D>(o, p[4 * kc], p[4 * kc + 1], p[4 * kc + 2], p[4 * kc + 3],
                        smem_desc_mn<HA_BN>(Vs + st * S::TILE_KV) + 128 * kc);
        wgmma_commit();
    };
    auto softmax = [&](int j) {  // S -> P = 2^(S log2(e) / sqrt(d) - m) in place; m, l, corr updated
        const int kv0 = j * HA_BN;
        if (kv0 + HA_BN > N || (causal && kv0 + HA_BN - 1 > m0 + 64 * c)) {  // some key masked here
#pragma unroll
            for (int jj = 0; jj < HA_BN / 8; ++jj)
#pragma unroll
                for (int h = 0; h < 2; ++h)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        const int col = kv0 + 8 * jj + 2 * (lane % 4) + e;
                        if (col >= N || (causal && col > row0 + 8 * h)) s[4 * jj + 2 * h + e] = HA_NEG_INF;
                    }
        }
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            float mx = HA_NEG_INF;
#pragma unroll
            for (int jj = 0; jj < HA_BN / 8; ++jj) mx = fmaxf(mx, fmaxf(s[4 * jj + 2 * h], s[4 * jj + 2 * h + 1]));
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 1));  // the 4 threads of a row
            mx = fmaxf(mx, __shfl_xor_sync(0xffffffff, mx, 2));
            const float m_new = fmaxf(m_run[h], mx);
            const float m_use = m_new == HA_NEG_INF ? 0.f : m_new;  // a row with every key masked so far
            corr[h] = exp2_approx((m_run[h] - m_use) * scale_log2);
            m_run[h] = m_new;
            const float shift = m_use * scale_log2;
            float sum = 0.f;
#pragma unroll
            for (int jj = 0; jj < HA_BN / 8; ++jj)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const float v = exp2_approx(fmaf(s[4 * jj + 2 * h + e], scale_log2, -shift));
                    s[4 * jj + 2 * h + e] = v;
                    sum += v;
                }
            l_run[h] = l_run[h] * corr[h] + sum;  // this thread's part of the row's sum
        }
    };
    auto rescale = [&]() {  // O *= corr, row by row
#pragma unroll
        for (int jj = 0; jj < D / 8; ++jj)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                o[4 * jj + 2 * h] *= corr[h];
                o[4 * jj + 2 * h + 1] *= corr[h];
            }
    };
    auto to_p = [&]() {  // accumulator columns 16 kc ... 16 kc + 15 are A fragment kc: no shuffle
#pragma unroll
        for (int kc = 0; kc < HA_BN / 16; ++kc)
#pragma unroll
            for (int r = 0; r < 4; ++r) p[4 * kc + r] = pack_half2(s[8 * kc + 2 * r], s[8 * kc + 2 * r + 1]);
    };
    auto release_k = [&](int j) {  // this warp is done with K of slot j % STAGES
        if (lane == 0) mbar_arrive(&empty_k[j % STAGES]);
    };
    auto release_v = [&](int j) {  // ... and with V
        if (lane == 0) mbar_arrive(&empty_v[j % STAGES]);
        if (!WS && threadIdx.x == 0 && j + STAGES < tiles) load_kv(j + STAGES);  // one warpgroup: refill
    };
    // Ping-pong: consumer c issues its wgmmas after named barrier 1 + c, then
    // arrives on the next one's (a ring); the last consumer lets consumer 0
    // start, and leaves out its own last arrive, so every barrier ends balanced.
    int turn = 0;
    auto my_turn = [&]() {
        if (PINGPONG) named_sync(1 + c, 256);
    };
    auto your_turn = [&]() {
        if (PINGPONG && !(c == CONSUMERS - 1 && ++turn == tiles)) named_arrive(1 + (c + 1) % CONSUMERS, 256);
    };
    if (PINGPONG && c == CONSUMERS - 1) named_arrive(1, 256);

    mbar_wait(full_q, 0);
    if (!OVERLAP) {
        for (int j = 0; j < tiles; ++j) {
            my_turn();
            qk(j);
            your_turn();
            wgmma_wait<0>();
            release_k(j);
            softmax(j);
            rescale();
            to_p();
            pv(j);
            wgmma_wait<0>();
            release_v(j);
        }
    } else {  // P(j-1) V(j-1) in flight while the softmax of tile j runs
        my_turn();
        qk(0);
        your_turn();
        wgmma_wait<0>();
        release_k(0);
        softmax(0);
        to_p();
        for (int j = 1; j < tiles; ++j) {
            my_turn();
            qk(j);
            rescale();  // by tile j - 1's correction, before P(j-1) V(j-1) adds to O
            pv(j - 1);
            your_turn();
            wgmma_wait<1>();  // S_j is ready; P(j-1) V(j-1) may still run
            release_k(j);
            softmax(j);
            wgmma_wait<0>();
            release_v(j - 1);
            to_p();
        }
        rescale();
        pv(tiles - 1);
        wgmma_wait<0>();
        release_v(tiles - 1);
    }

    // O / l, rounded to 16 bits: two values (one register) per store
#pragma unroll
    for (int h = 0; h < 2; ++h) {
        float l = l_run[h];
        l += __shfl_xor_sync(0xffffffff, l, 1);
        l += __shfl_xor_sync(0xffffffff, l, 2);
        const float inv = 1.f / l;
        const int row = row0 + 8 * h;
        if (row < N) {
            unsigned* out = O + ((size_t)head * N + row) * (D / 2) + lane % 4;
#pragma unroll
            for (int jj = 0; jj < D / 8; ++jj) out[4 * jj] = pack_half2(o[4 * jj + 2 * h] * inv, o[4 * jj + 2 * h + 1] * inv);
        }
    }
}
// --8<-- [end:ha_kernel]

// --8<-- [start:ha_instances]
#define HA_ARGS const __grid_constant__ TmaDesc map_q, const __grid_constant__ TmaDesc map_k, \
                const __grid_constant__ TmaDesc map_v, unsigned* O, int N, float scale_log2, int causal
#define HA_KERNEL(NAME, THREADS, D, STAGES, WS, CONSUMERS, PINGPONG, OVERLAP)                                  \
    extern "C" __global__ void __launch_bounds__(THREADS, 1) NAME(HA_ARGS) {                                   \
        ha_forward<D, STAGES, WS, CONSUMERS, PINGPONG, OVERLAP>(map_q, map_k, map_v, O, N, scale_log2, causal); \
    }
HA_KERNEL(ha_plain_d64, 128, 64, 2, false, 1, false, false)
HA_KERNEL(ha_plain_d128, 128, 128, 2, false, 1, false, false)
HA_KERNEL(ha_ws_d64, 384, 64, 2, true, 2, false, false)
HA_KERNEL(ha_ws_d128, 384, 128, 2, true, 2, false, false)
HA_KERNEL(ha_pingpong_d64, 384, 64, 2, true, 2, true, false)
HA_KERNEL(ha_pingpong_d128, 384, 128, 2, true, 2, true, false)
// d = 64: a tile's products take half as long, its softmax as long: a third
// consumer (192 rows) keeps the Tensor Cores busy while two do their softmax
HA_KERNEL(ha_overlap_d64, 512, 64, 2, true, 3, true, true)
HA_KERNEL(ha_overlap_d128, 384, 128, 2, true, 2, true, true)
// --8<-- [end:ha_instances]
