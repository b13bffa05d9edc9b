// Topic tc_hopper_gemm: a warp-specialized FP16 / BF16 GEMM for Hopper (sm_90a).
// REQUIRES: sm_90a
//
// C (M x N, FP32, row-major) = A (M x K, FP16, row-major) @ Bt^T, with B given
// transposed as Bt (N x K, row-major: the "TN" layout, the way a linear layer
// stores its weights), FP32 accumulation. Every block computes BM x BN tiles
// of C. TMA copies 128 x 64 tiles of A and BN x 64 tiles of Bt into a ring of
// STAGES shared-memory slots (128-byte swizzle); wgmma multiplies straight
// from shared memory into registers; full and empty mbarriers hand each slot
// between the warps that fill it and the warps that read it.
//
//   hg_ws<BN, STAGES, PERSISTENT, CLUSTER, PINGPONG>  warp-specialized: warpgroup 0
//       is the producer (one thread issues the copies; setmaxnreg.dec gives its
//       registers away), warpgroups 1 and 2 are consumers (setmaxnreg.inc), 64 x BN
//       rows of each tile apiece (cooperative). PERSISTENT: one block per SM walks
//       the tiles, so the producer fills the ring for the next tile while the
//       consumers store this one. CLUSTER = 2: two blocks share Bt's tile by
//       multicast. PINGPONG: each consumer takes whole tiles, turn about, and
//       stores one while the other computes. The consumers store C through
//       shared memory by TMA (hg_store_tma) where C's rows allow it.
//   hg_plain<BN, STAGES>  the same tiles without specialization: two warpgroups
//       both compute, and thread 0 also issues the copies between its wgmmas.
//
// Split K: hg_ws launched with gridDim.y = S > 1 gives slice y of the k tiles
// to the blocks of row y of the grid, each writing its partial sums to
// C + y * M * N (a workspace of S matrices); hg_split_sum then adds the S
// slices into C in a fixed order (the same bits every run).
//
// With -DHG_B_KN, B comes as it is (K x N, row-major: the "NN" layout) and
// wgmma reads it transposed (section hg_b_layout); FP16 and BF16 only.
//
// Compiled as is, A and Bt hold FP16; with -DHG_BF16, BF16 (bit patterns in
// 16-bit words); with -DHG_FP8_E4M3 or -DHG_FP8_E5M2, FP8 (bytes): only the
// wgmma instruction differs. C = alpha * A Bt^T (alpha: FP8's per-tensor scales).
//
// Needs sm_90a (wgmma, setmaxnreg); K a multiple of 8 (TMA wants rows of a
// multiple of 16 bytes); M and N any: TMA fills zeros past the edges of A and
// Bt, and the epilogue writes only inside C.
#include <cuda_fp16.h>

// The wgmma shape's K and the input types, after m64nBN: 16 two-byte values
// (32 bytes) a row per instruction, or 32 one-byte FP8 values (the same 32
// bytes). The kernels count K in two-byte words either way: the host passes
// K / 2 for FP8, so every tile, descriptor and copy stays as it is.
// The operands after the descriptors: scale-d (p), A and B not negated (1, 1)
// and, for 16-bit types only, A not transposed (0: K-major) and B K-major
// (0), or with -DHG_B_KN MN-major (1: wgmma reads it transposed).
#if defined(HG_B_KN) && (defined(HG_FP8_E4M3) || defined(HG_FP8_E5M2))
#error "FP8 wgmma reads B K-major only: the NN layout (HG_B_KN) is for 16-bit types"
#endif
#if defined(HG_B_KN)
#define HG_TNSP_B "1"
#else
#define HG_TNSP_B "0"
#endif
#if defined(HG_FP8_E4M3)
#define HG_MMA_TAIL "k32.f32.e4m3.e4m3"
#define HG_MMA_FLAGS "p, 1, 1"
#elif defined(HG_FP8_E5M2)
#define HG_MMA_TAIL "k32.f32.e5m2.e5m2"
#define HG_MMA_FLAGS "p, 1, 1"
#elif defined(HG_BF16)
#define HG_MMA_TAIL "k16.f32.bf16.bf16"
#define HG_MMA_FLAGS "p, 1, 1, 0, " HG_TNSP_B
#else
#define HG_MMA_TAIL "k16.f32.f16.f16"
#define HG_MMA_FLAGS "p, 1, 1, 0, " HG_TNSP_B
#endif

// --8<-- [start:hg_barriers]
struct alignas(64) TmaDesc { unsigned long long v[16]; };  // a CUtensorMap, passed by value

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// An mbarrier counts arrivals and, with expect_tx, bytes still to land; its
// phase completes when both reach zero, and then flips parity (0, 1, 0, ...).
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned arrivals) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_u32(bar)), "r"(arrivals));
}
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n"
                 :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_u32(bar)) : "memory");
}
// Wait until the phase of the given parity has completed.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    asm volatile("{\n.reg .pred done;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT_%=;\n}\n" :: "r"(smem_u32(bar)), "r"(parity) : "memory");
}
// TMA: the box at column c0, row c1 of the tensor map into shared memory; the
// bytes are counted off bar's transaction count as they land.
__device__ __forceinline__ void tma_load_2d(void* dst, const TmaDesc* map, int c0, int c1,
                                            unsigned long long* bar) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];\n"
                 :: "r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(smem_u32(bar)) : "memory");
}
// The same box, written at the same offset into the shared memory of every
// block of the cluster in cta_mask, each block's bar at that offset counting it.
__device__ __forceinline__ void tma_load_2d_multicast(void* dst, const TmaDesc* map, int c0, int c1,
                                                      unsigned long long* bar, unsigned cta_mask) {
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
                 " [%0], [%1, {%2, %3}], [%4], %5;\n"
                 :: "r"(smem_u32(dst)), "l"(map), "r"(c0), "r"(c1), "r"(smem_u32(bar)), "h"((unsigned short)cta_mask)
                 : "memory");
}
// Arrive on the barrier at bar's offset in block `rank` of the cluster (mapa
// turns the offset into that block's address in the cluster's shared window).
// The default .release.cta order is enough, as in CUTLASS's ClusterBarrier:
// what is released is the reads of wgmma, already complete (wgmma.wait_group).
__device__ __forceinline__ void mbar_arrive_cluster(unsigned long long* bar, unsigned rank) {
    asm volatile("{\n.reg .b32 remote;\nmapa.shared::cluster.u32 remote, %0, %1;\n"
                 "mbarrier.arrive.shared::cluster.b64 _, [remote];\n}\n"
                 :: "r"(smem_u32(bar)), "r"(rank) : "memory");
}
// --8<-- [end:hg_barriers]

// --8<-- [start:hg_wgmma]
// The shared-memory matrix descriptor of a K-major tile written by TMA with
// 128-byte swizzle: rows of 64 halves (128 B); 8-row groups 1024 B apart
// (stride byte offset, bits 32-45, in 16-byte units); the leading byte offset
// (bits 16-29) unused by this layout and set to 1; swizzle mode 128 B = 1 in
// bits 62-63. Start address in bits 0-13, in 16-byte units. Fields from the
// PTX ISA ("Matrix Descriptor Format"), as CUTLASS's GmmaDescriptor has them.
__device__ __forceinline__ unsigned long long smem_desc(const void* tile) {
    unsigned long long addr = smem_u32(tile);
    return ((addr & 0x3FFFF) >> 4) | (1ull << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
// Wait until at most N committed groups of this warpgroup are still running.
template <int N>
__device__ __forceinline__ void wgmma_wait() { asm volatile("wgmma.wait_group.sync.aligned %0;\n" :: "n"(N) : "memory"); }

// D (64 x BN, FP32, 64 x BN / 128 registers per thread) += A (64 x 16) B (16 x BN)
// (FP16; BF16 or FP8 as HG_MMA_TAIL says, 32 bytes of a row per instruction),
// issued by one warpgroup; A and B (as Bt, BN x 16) both K-major in shared memory.
template <int BN>
__device__ __forceinline__ void wgmma_f16(float (&d)[BN / 2], unsigned long long desc_a,
                                          unsigned long long desc_b, int scale_d);
template <>
__device__ __forceinline__ void wgmma_f16<128>(float (&d)[64], unsigned long long desc_a,
                                                  unsigned long long desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128" HG_MMA_TAIL " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, "
        "%64, %65, " HG_MMA_FLAGS ";\n}\n"
        :
          "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

template <>
__device__ __forceinline__ void wgmma_f16<256>(float (&d)[128], unsigned long long desc_a,
                                                  unsigned long long desc_b, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256" HG_MMA_TAIL " "
        "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, "
        "%128, %129, " HG_MMA_FLAGS ";\n}\n"
        :
          "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}
// --8<-- [end:hg_wgmma]

// --8<-- [start:hg_tma_store]
// TMA store: the box in shared memory at src to column c0, row c1, matrix c2 of
// the tensor map (the parts of the box past the tensor's edges are not
// written). The copy runs in the background, in this thread's bulk group.
__device__ __forceinline__ void tma_store_3d(const TmaDesc* map, const void* src, int c0, int c1, int c2) {
    asm volatile("cp.async.bulk.tensor.3d.global.shared::cta.bulk_group [%0, {%1, %2, %3}], [%4];\n"
                 :: "l"(map), "r"(c0), "r"(c1), "r"(c2), "r"(smem_u32(src)) : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
// Wait until at most N of this thread's bulk groups still read shared memory.
template <int N>
__device__ __forceinline__ void bulk_wait_read() { asm volatile("cp.async.bulk.wait_group.read %0;\n" :: "n"(N) : "memory"); }
// Make this thread's ordinary shared-memory writes visible to TMA (the async proxy).
__device__ __forceinline__ void fence_async_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }
// A barrier for the `count` threads that name barrier `id` (0 is __syncthreads').
__device__ __forceinline__ void hg_named_sync(int id, int count) {
    asm volatile("bar.sync %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
// Arrive on named barrier `id` without waiting (the threads that wait there make up the count).
__device__ __forceinline__ void hg_named_arrive(int id, int count) {
    asm volatile("bar.arrive %0, %1;\n" :: "r"(id), "r"(count) : "memory");
}
// --8<-- [end:hg_tma_store]

// --8<-- [start:hg_b_layout]
// B's two layouts in a ring slot (of k tiles of 64). As compiled, B comes
// transposed (Bt, N x K, K-major) like A: one TMA box of ROWS rows of 64
// halves, read through the same descriptor as A. With -DHG_B_KN, B comes as
// it is (K x N, N-major): TMA copies boxes of 64 k rows x 64 n columns (128
// bytes a row, 128-byte swizzle, 8 KB a box), ROWS / 64 of them side by
// side, and wgmma reads them transposed. In that MN-major layout the descriptor's leading byte offset is
// the distance from one box of 64 columns to the next (8192 B) and its stride
// byte offset from one group of 8 k rows to the next (1024 B); a k16 step
// moves 16 rows of 128 B (2048 B: 128 in the 16-byte address field).
// (Canonical layouts: PTX ISA, "Shared Memory Matrix Layout"; the offsets as
// CUTLASS's make_gmma_desc<Major::MN> computes them for this tile.)
#if defined(HG_B_KN)
constexpr int HG_B_STEP = 2048 >> 4;
__device__ __forceinline__ unsigned long long smem_desc_b(const void* tile) {
    const unsigned long long addr = smem_u32(tile);
    return ((addr & 0x3FFFF) >> 4) | ((8192ull >> 4) << 16) | ((1024ull >> 4) << 32) | (1ull << 62);
}
#else
constexpr int HG_B_STEP = 32 >> 4;  // 16 halves of a K-major row
__device__ __forceinline__ unsigned long long smem_desc_b(const void* tile) { return smem_desc(tile); }
#endif

// B's columns (Bt's rows) [n0, n0 + ROWS) by KROWS k rows from k0, into dst,
// counted on bar; a cta_mask multicasts them into every block of the cluster it names.
template <int ROWS, int KROWS>
__device__ __forceinline__ void hg_load_b(__half* dst, const TmaDesc* map, int k0, int n0,
                                          unsigned long long* bar, unsigned cta_mask) {
#if defined(HG_B_KN)
#pragma unroll
    for (int b = 0; b < ROWS / 64; ++b) {  // box b: columns n0 + 64 b .. + 63, all KROWS k rows
        if (cta_mask) tma_load_2d_multicast(dst + b * 64 * KROWS, map, n0 + 64 * b, k0, bar, cta_mask);
        else tma_load_2d(dst + b * 64 * KROWS, map, n0 + 64 * b, k0, bar);
    }
#else
    if (cta_mask) tma_load_2d_multicast(dst, map, k0, n0, bar, cta_mask);
    else tma_load_2d(dst, map, k0, n0, bar);
#endif
}
// --8<-- [end:hg_b_layout]

// --8<-- [start:hg_kernel]
constexpr int HG_BM = 128, HG_BK = 64, HG_GROUP_M = 16;

// The epilogue's staging: each consumer warpgroup owns two buffers of 64 rows
// x 32 floats (128 bytes a row, the TMA store's box, 128-byte swizzle).
constexpr int HG_EPI_COLS = 32, HG_EPI_FLOATS = 64 * HG_EPI_COLS;

template <int BN, int STAGES>
struct HgSmem {  // the ring, the epilogue's buffers (hg_ws), the barriers; the base is 1024-byte aligned
    static constexpr int TILE_A = HG_BM * HG_BK, TILE_B = BN * HG_BK;  // halves per slot
    static constexpr unsigned TX_BYTES = (TILE_A + TILE_B) * 2;        // bytes one slot receives
    static constexpr int EPI_BYTES = 2 * 2 * HG_EPI_FLOATS * 4;         // two consumers, two buffers
};

// Tile `tile` of C in a grouped order: `group` rows of tiles at a time,
// going down the rows first, so blocks running together share rows of A and
// columns of Bt in the L2 cache.
__device__ __forceinline__ void hg_tile(int tile, int tiles_m, int tiles_n, int group, int& tm, int& tn) {
    const int per_group = group * tiles_n, first = tile / per_group * group;
    const int rows = min(tiles_m - first, group);
    tm = first + tile % per_group % rows;
    tn = tile % per_group / rows;
}

// Store one consumer's 64 x BN accumulators. The wgmma accumulator layout:
// warp w of the warpgroup holds rows 16w + lane/4 (+ 8), and register 4j + 2h + e
// holds column 8j + 2(lane % 4) + e of row half h.
template <int BN>
__device__ __forceinline__ void hg_store(const float (&d)[BN / 2], float* __restrict__ C, int M, int N,
                                         int row0, int col0, float alpha) {
    const int warp = threadIdx.x % 128 / 32, lane = threadIdx.x % 32;
    const bool pairs = N % 2 == 0 && reinterpret_cast<size_t>(C) % 8 == 0;  // a pair of columns is 8-byte aligned
#pragma unroll
    for (int j = 0; j < BN / 8; ++j) {
        const int col = col0 + 8 * j + 2 * (lane % 4);
#pragma unroll
        for (int h = 0; h < 2; ++h) {
            const int row = row0 + 16 * warp + lane / 4 + 8 * h;
            if (row >= M) continue;
            float* p = C + (size_t)row * N + col;
            if (pairs && col + 1 < N) {
                *reinterpret_cast<float2*>(p) = make_float2(alpha * d[4 * j + 2 * h], alpha * d[4 * j + 2 * h + 1]);
            } else {
                if (col < N) p[0] = alpha * d[4 * j + 2 * h];
                if (col + 1 < N) p[1] = alpha * d[4 * j + 2 * h + 1];
            }
        }
    }
}

// The same 64 x BN accumulators stored through shared memory: 32 columns at a
// time into one of the warpgroup's two buffers (float2 writes, conflict-free
// under the 128-byte swizzle: 16-byte chunk c of row r sits at chunk c ^ (r % 8)),
// then one thread hands the buffer to a TMA store and the warpgroup goes on.
// The stores run behind the next chunk and the next tile's main loop; before
// a buffer is written again its store from two chunks back must have read it.
// TMA clips the box at C's edges, and z = slice picks split K's matrix.
template <int BN>
__device__ __forceinline__ void hg_store_tma(const float (&d)[BN / 2], const TmaDesc& map_c, float* buf,
                                             int row0, int col0, int slice, float alpha) {
    const int tid = threadIdx.x % 128, warp = tid / 32, lane = tid % 32;
    const int bar = 1 + threadIdx.x / 128;  // named barriers 2 and 3: one per consumer warpgroup
#pragma unroll
    for (int q = 0; q < BN / HG_EPI_COLS; ++q) {
        float* b = buf + q % 2 * HG_EPI_FLOATS;
        if (tid == 0) bulk_wait_read<1>();  // the store that last read buffer q % 2 is done with it
        hg_named_sync(bar, 128);
#pragma unroll
        for (int jj = 0; jj < HG_EPI_COLS / 8; ++jj) {
            const int j = q * HG_EPI_COLS / 8 + jj, c = 8 * jj + 2 * (lane % 4);
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int r = 16 * warp + lane / 4 + 8 * h;
                *reinterpret_cast<float2*>(b + r * HG_EPI_COLS + ((c / 4) ^ (r % 8)) * 4 + c % 4) =
                    make_float2(alpha * d[4 * j + 2 * h], alpha * d[4 * j + 2 * h + 1]);
            }
        }
        fence_async_smem();
        hg_named_sync(bar, 128);
        if (tid == 0) {
            tma_store_3d(&map_c, b, col0 + q * HG_EPI_COLS, row0, slice);
            bulk_commit();
        }
    }
}

template <int BN, int STAGES, bool PERSISTENT, int CLUSTER, bool PINGPONG = false>
__device__ __forceinline__ void hg_ws(const TmaDesc& map_a, const TmaDesc& map_b, float* __restrict__ C,
                                      int M, int N, int K, float alpha, const TmaDesc& map_c, int tma_c) {
    using S = HgSmem<BN, STAGES>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    // 128-byte swizzle wants every tile 1024-byte aligned: round the base up
    // (the same offset in every block, so a multicast lands at the same place)
    unsigned char* base = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
    __half* As = reinterpret_cast<__half*>(base);
    __half* Bs = As + STAGES * S::TILE_A;
    float* epi = reinterpret_cast<float*>(Bs + STAGES * S::TILE_B);  // 1024-byte aligned too
    unsigned long long* full = reinterpret_cast<unsigned long long*>(epi + S::EPI_BYTES / 4);
    unsigned long long* empty = full + STAGES;

    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    // CLUSTER = 2: the two blocks of a cluster compute vertically adjacent tiles
    // (rows tm, tm + 1 of tiles), which need the same tile of Bt: each block
    // loads half of it and multicasts that half into both blocks.
    const int rank = CLUSTER == 1 ? 0 : blockIdx.x % CLUSTER;
    const int tiles_m = (M + HG_BM * CLUSTER - 1) / (HG_BM * CLUSTER), tiles_n = (N + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n;
    const int first = blockIdx.x / CLUSTER, step = PERSISTENT ? gridDim.x / CLUSTER : tiles;
    // split K: this row of the grid takes k tiles [k0, k1) (the host makes none empty)
    // and writes its partial sums to matrix blockIdx.y of the workspace C
    const int k_all = (K + HG_BK - 1) / HG_BK, k_per = (k_all + gridDim.y - 1) / gridDim.y;
    const int k0 = blockIdx.y * k_per, k1 = min(k_all, k0 + k_per);
    C += (size_t)blockIdx.y * M * N;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);  // the producer's arrive, which also sets the bytes to expect
            // one arrive per consumer warp of every block that writes this slot,
            // after that warp's wgmmas on the slot have finished (ping-pong: one
            // warpgroup reads each slot, the one whose tile it holds)
            mbar_init(&empty[s], (PINGPONG ? 4 : 8) * CLUSTER);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");  // visible to the async proxy
    }
    if (CLUSTER > 1) {  // the partner's barriers must exist before anything arrives on them
        asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    } else {
        __syncthreads();
    }

    if (wg == 0) {  // the producer warpgroup
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n");
        if (tid == 0) {
            int it = 0;  // k tiles issued so far, over all of this block's tiles: slot it % STAGES, round it / STAGES
            for (int tile = first; tile < tiles; tile += step) {
                int tm, tn;
                hg_tile(tile, tiles_m, tiles_n, HG_GROUP_M / CLUSTER, tm, tn);  // HG_GROUP_M rows of blocks
                for (int kt = k0; kt < k1; ++kt, ++it) {
                    const int s = it % STAGES, round = it / STAGES;
                    if (round > 0) mbar_wait(&empty[s], (round - 1) & 1);  // every reader of round - 1 is done
                    mbar_arrive_expect_tx(&full[s], S::TX_BYTES);  // A, and all of Bt's tile (both halves)
                    tma_load_2d(As + s * S::TILE_A, &map_a, kt * HG_BK, (tm * CLUSTER + rank) * HG_BM, &full[s]);
                    constexpr int ROWS = BN / CLUSTER;  // a cluster: each block loads its share, into both
                    hg_load_b<ROWS, HG_BK>(Bs + s * S::TILE_B + rank * ROWS * HG_BK, &map_b, kt * HG_BK,
                                           tn * BN + rank * ROWS, &full[s], CLUSTER == 1 ? 0u : (1u << CLUSTER) - 1);
                }
            }
        }
    } else if (PINGPONG) {  // consumers taking turns: warpgroup 1 the block's even tiles, warpgroup 2 the odd
        static_assert(!PINGPONG || PERSISTENT, "ping-pong needs a block that walks several tiles");
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int half = wg - 1;
        float lo[BN / 2], hi[BN / 2];  // rows 0-63 and 64-127 of the tile, all of it this warpgroup's
        const int k_tiles = k1 - k0;
        const int nt = first < tiles ? (tiles - 1 - first) / step + 1 : 0;  // this block's tiles
        auto release = [&](int slot) {
            if (tid % 32 == 0) {
                if (CLUSTER == 1) {
                    mbar_arrive(&empty[slot]);
                } else {
                    for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(&empty[slot], r);
                }
            }
        };
        // Turns: warpgroup h issues a tile's wgmmas after named barrier 4 + h, then lets
        // the other start (an arrive on its barrier) while it stores its tile. Tile j of
        // the block is turn j: every barrier gets as many arrives as waits.
        if (half == 1 && nt > 0) hg_named_arrive(4, 256);
        for (int j = half; j < nt; j += 2) {
            const int tile = first + j * step;
            int tm, tn;
            hg_tile(tile, tiles_m, tiles_n, HG_GROUP_M / CLUSTER, tm, tn);
            hg_named_sync(4 + half, 256);  // my turn
            int it = j * k_tiles;  // the producer's count of k tiles issued before this tile
            for (int kt = k0; kt < k1; ++kt, ++it) {
                const int s = it % STAGES;
                mbar_wait(&full[s], (it / STAGES) & 1);
                const unsigned long long da = smem_desc(As + s * S::TILE_A);
                const unsigned long long da_hi = smem_desc(As + s * S::TILE_A + 64 * HG_BK);
                const unsigned long long db = smem_desc_b(Bs + s * S::TILE_B);
                wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < HG_BK / 16; ++kk) {
                    wgmma_f16<BN>(lo, da + 2 * kk, db + HG_B_STEP * kk, kt > k0 || kk > 0);
                    wgmma_f16<BN>(hi, da_hi + 2 * kk, db + HG_B_STEP * kk, kt > k0 || kk > 0);
                }
                wgmma_commit();
                wgmma_wait<1>();
                if (kt > k0) release((it - 1) % STAGES);
            }
            if (j + 1 < nt) hg_named_arrive(4 + (1 - half), 256);  // your turn: the Tensor Cores are free
            wgmma_wait<0>();
            release((it - 1) % STAGES);
            const int row0 = (tm * CLUSTER + rank) * HG_BM;
            if (tma_c) {
                hg_store_tma<BN>(lo, map_c, epi + half * 2 * HG_EPI_FLOATS, row0, tn * BN, blockIdx.y, alpha);
                hg_store_tma<BN>(hi, map_c, epi + half * 2 * HG_EPI_FLOATS, row0 + 64, tn * BN, blockIdx.y, alpha);
            } else {
                hg_store<BN>(lo, C, M, N, row0, tn * BN, alpha);
                hg_store<BN>(hi, C, M, N, row0 + 64, tn * BN, alpha);
            }
        }
        if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");
    } else {  // consumers: warpgroup 1 computes rows 0-63 of the tile, warpgroup 2 rows 64-127
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n");
        const int half = wg - 1;
        float d[BN / 2];  // the first wgmma of each tile runs with scale_d = 0 (D = A B): no zeroing
        int it = 0;
        auto release = [&](int slot) {  // this warp is done reading the slot: tell every block that writes it
            if (tid % 32 == 0) {
                if (CLUSTER == 1) {
                    mbar_arrive(&empty[slot]);
                } else {
                    for (int r = 0; r < CLUSTER; ++r) mbar_arrive_cluster(&empty[slot], r);
                }
            }
        };
        for (int tile = first; tile < tiles; tile += step) {
            int tm, tn;
            hg_tile(tile, tiles_m, tiles_n, HG_GROUP_M / CLUSTER, tm, tn);  // HG_GROUP_M rows of blocks
            for (int kt = k0; kt < k1; ++kt, ++it) {
                const int s = it % STAGES;
                mbar_wait(&full[s], (it / STAGES) & 1);
                const unsigned long long da = smem_desc(As + s * S::TILE_A + half * 64 * HG_BK);
                const unsigned long long db = smem_desc_b(Bs + s * S::TILE_B);
                wgmma_fence();  // orders the registers' earlier use (the last tile's stores) before wgmma
#pragma unroll
                for (int kk = 0; kk < HG_BK / 16; ++kk)  // A: 16 halves = 32 bytes = 2 in the start-address field
                    wgmma_f16<BN>(d, da + 2 * kk, db + HG_B_STEP * kk, kt > k0 || kk > 0);
                wgmma_commit();
                wgmma_wait<1>();  // the previous k tile's group has finished: its slot can be refilled
                if (kt > k0) release((it - 1) % STAGES);
            }
            wgmma_wait<0>();
            release((it - 1) % STAGES);
            const int row0 = (tm * CLUSTER + rank) * HG_BM + half * 64;
            if (tma_c) {  // C's rows 16-byte aligned (N a multiple of 4): stored by TMA behind the next tile
                hg_store_tma<BN>(d, map_c, epi + half * 2 * HG_EPI_FLOATS, row0, tn * BN, blockIdx.y, alpha);
            } else {
                hg_store<BN>(d, C, M, N, row0, tn * BN, alpha);
            }
        }
        if (tid == 0) asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory");  // the last stores are done
    }
    if (CLUSTER > 1) {  // stay until the partner no longer writes into this block's memory
        asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
    }
}

template <int BN, int STAGES>
__device__ __forceinline__ void hg_plain(const TmaDesc& map_a, const TmaDesc& map_b, float* __restrict__ C,
                                         int M, int N, int K, float alpha) {
    using S = HgSmem<BN, STAGES>;
    extern __shared__ __align__(1024) unsigned char smem_raw[];
    unsigned char* base = reinterpret_cast<unsigned char*>(
        (reinterpret_cast<unsigned long long>(smem_raw) + 1023) & ~1023ull);
    __half* As = reinterpret_cast<__half*>(base);
    __half* Bs = As + STAGES * S::TILE_A;
    unsigned long long* full = reinterpret_cast<unsigned long long*>(Bs + STAGES * S::TILE_B);
    unsigned long long* empty = full + STAGES;

    const int wg = threadIdx.x / 128, tid = threadIdx.x % 128;
    const int tiles_m = (M + HG_BM - 1) / HG_BM, tiles_n = (N + BN - 1) / BN;
    const int k_tiles = (K + HG_BK - 1) / HG_BK;
    int tm, tn;
    hg_tile(blockIdx.x, tiles_m, tiles_n, HG_GROUP_M, tm, tn);
    auto load = [&](int kt) {  // thread 0 only
        const int s = kt % STAGES;
        mbar_arrive_expect_tx(&full[s], S::TX_BYTES);
        tma_load_2d(As + s * S::TILE_A, &map_a, kt * HG_BK, tm * HG_BM, &full[s]);
        hg_load_b<BN, HG_BK>(Bs + s * S::TILE_B, &map_b, kt * HG_BK, tn * BN, &full[s], 0u);
    };
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], 8);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
        for (int kt = 0; kt < min(STAGES, k_tiles); ++kt) load(kt);  // fill the ring
    }
    __syncthreads();

    float d[BN / 2];  // no zeroing: the first wgmma of the tile runs with scale_d = 0 (D = A B)
    for (int kt = 0; kt < k_tiles; ++kt) {
        const int s = kt % STAGES;
        mbar_wait(&full[s], (kt / STAGES) & 1);
        const unsigned long long da = smem_desc(As + s * S::TILE_A + wg * 64 * HG_BK);
        const unsigned long long db = smem_desc_b(Bs + s * S::TILE_B);
        wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < HG_BK / 16; ++kk)
            wgmma_f16<BN>(d, da + 2 * kk, db + HG_B_STEP * kk, kt > 0 || kk > 0);
        wgmma_commit();
        wgmma_wait<1>();
        if (kt > 0) {
            if (tid % 32 == 0) mbar_arrive(&empty[(kt - 1) % STAGES]);
            // The same threads that compute also refill: thread 0 waits until every
            // warp is done with k tile kt - 1, then loads k tile kt - 1 + STAGES into its slot.
            const int next = kt - 1 + STAGES;
            if (threadIdx.x == 0 && next < k_tiles) {
                mbar_wait(&empty[(kt - 1) % STAGES], ((kt - 1) / STAGES) & 1);
                load(next);
            }
            __syncwarp();
        }
    }
    wgmma_wait<0>();
    hg_store<BN>(d, C, M, N, tm * HG_BM + wg * 64, tn * BN, alpha);
}
// --8<-- [end:hg_kernel]

// --8<-- [start:hg_instances]
#define HG_ARGS const __grid_constant__ TmaDesc map_a, const __grid_constant__ TmaDesc map_b, float* C, int M, int N, \
                int K, float alpha, const __grid_constant__ TmaDesc map_c, int tma_c
#define HG_PLAIN(NAME, BN, STAGES)                                         \
    extern "C" __global__ void __launch_bounds__(256, 1) NAME(HG_ARGS) {  \
        hg_plain<BN, STAGES>(map_a, map_b, C, M, N, K, alpha);            \
    }
#define HG_WS(NAME, BN, STAGES, PERSISTENT)                                                 \
    extern "C" __global__ void __launch_bounds__(384, 1) NAME(HG_ARGS) {                   \
        hg_ws<BN, STAGES, PERSISTENT, 1>(map_a, map_b, C, M, N, K, alpha, map_c, tma_c);   \
    }
#define HG_WS_PINGPONG(NAME, BN, STAGES)                                                   \
    extern "C" __global__ void __launch_bounds__(384, 1) NAME(HG_ARGS) {                   \
        hg_ws<BN, STAGES, true, 1, true>(map_a, map_b, C, M, N, K, alpha, map_c, tma_c);   \
    }
#define HG_WS_CLUSTER(NAME, BN, STAGES, PERSISTENT)                                                   \
    extern "C" __global__ void __cluster_dims__(2, 1, 1) __launch_bounds__(384, 1) NAME(HG_ARGS) {   \
        hg_ws<BN, STAGES, PERSISTENT, 2>(map_a, map_b, C, M, N, K, alpha, map_c, tma_c);             \
    }

HG_PLAIN(hg_plain_128, 128, 6)
HG_PLAIN(hg_plain_256, 256, 4)
HG_WS(hg_ws_128, 128, 6, false)
HG_WS(hg_ws_256, 256, 4, false)
HG_WS(hg_ws_persistent_128, 128, 6, true)
HG_WS(hg_ws_persistent_256, 256, 4, true)
HG_WS_CLUSTER(hg_ws_cluster_256, 256, 4, false)
HG_WS_CLUSTER(hg_ws_cluster_persistent_256, 256, 4, true)
HG_WS_PINGPONG(hg_ws_pingpong_128, 128, 6)
// --8<-- [end:hg_instances]

// --8<-- [start:hg_split_sum]
// The sum of split K's partial matrices: C[i] = W[i] + W[mn + i] + ... +
// W[(splits - 1) mn + i], in that order. Four floats a thread when mn is a
// multiple of 4 (then every slice starts 16-byte aligned), else one.
__device__ __forceinline__ void split_sum(const float* __restrict__ W, float* __restrict__ C,
                                          long long mn, int splits) {
    const long long n4 = mn % 4 == 0 ? mn / 4 : 0, stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n4; i += stride) {
        float4 s = reinterpret_cast<const float4*>(W)[i];
        for (int p = 1; p < splits; ++p) {
            const float4 w = reinterpret_cast<const float4*>(W + p * mn)[i];
            s.x += w.x; s.y += w.y; s.z += w.z; s.w += w.w;
        }
        reinterpret_cast<float4*>(C)[i] = s;
    }
    for (long long i = 4 * n4 + blockIdx.x * (long long)blockDim.x + threadIdx.x; i < mn; i += stride) {
        float s = W[i];
        for (int p = 1; p < splits; ++p) s += W[p * mn + i];
        C[i] = s;
    }
}
extern "C" __global__ void __launch_bounds__(256) hg_split_sum(const float* W, float* C, long long mn, int splits) {
    split_sum(W, C, mn, splits);
}
// --8<-- [end:hg_split_sum]
