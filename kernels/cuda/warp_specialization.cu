// Topic warp_specialization: the streaming ladder. out[i] = f^k(in[i]) with
// f(x) = x * a + b: k FMAs (2k FLOP) per element read (4 B) and written (4 B),
// so the arithmetic intensity, k / 4 FLOP per byte, is dialled by k. Tiles of
// TILE floats pass through shared memory as a GEMM's operand tiles do; each
// step changes how the copy into shared memory overlaps the arithmetic:
//   1 ws_sync        load, barrier, compute, barrier
//   2 ws_regbuf      the next tile held in registers while this one computes
//   3 ws_cpasync     cp.async through a STAGES-deep ring, every warp copies and computes
//                    (cuda::pipeline, thread scope; sm_80)
//   4 ws_pipeline    producer warps copy, consumer warps compute (cuda::pipeline, block
//                    scope: producer_acquire/commit, consumer_wait/release; sm_80)
//   5 ws_tma         one thread issues 1-D bulk copies (cp.async.bulk, the TMA) into a ring
//                    guarded by full/empty mbarriers with transaction counts; two consumer
//                    warpgroups compute (sm_90)
//   6 ws_tma_regs    step 5 with setmaxnreg: the producer warpgroup gives registers to the
//                    consumers (sm_90a)
// n: a multiple of 4 (16-byte copies); in and out 16-byte aligned.
// Compiled for an older GPU, the file holds steps 1-4 alone (WS_SM90 below).
#include <cuda/pipeline>
#include <cooperative_groups.h>

#pragma nv_diag_suppress static_var_with_dynamic_init  // cuda::pipeline_shared_state: make_pipeline initialises it

namespace ws {
constexpr int TILE = 2048;   // floats per tile: 8 KB
constexpr int STAGES = 4;
}

// --8<-- [start:ws_work]
// k FMAs on each of four values; the four chains are independent, so a warp
// has four FMAs to issue while each one's 4-cycle latency runs.
__device__ __forceinline__ float4 work(float4 v, float a, float b, int k) {
#pragma unroll 4
    for (int j = 0; j < k; ++j) {
        v.x = fmaf(v.x, a, b); v.y = fmaf(v.y, a, b);
        v.z = fmaf(v.z, a, b); v.w = fmaf(v.w, a, b);
    }
    return v;
}
// --8<-- [end:ws_work]

// --8<-- [start:ws_sync]
// Step 1. Every thread copies, waits at the barrier, computes, waits again.
// 16-byte pieces: n % 4 == 0.
extern "C" __global__ void __launch_bounds__(256) ws_sync(const float* __restrict__ in, float* __restrict__ out,
                                                          long long n, int k, float a, float b) {
    using namespace ws;
    __shared__ float4 buf[TILE / 4];
    const float4* in4 = reinterpret_cast<const float4*>(in);
    float4* out4 = reinterpret_cast<float4*>(out);
    const long long n4 = n / 4;
    for (long long base = (long long)blockIdx.x * TILE / 4; base < n4; base += (long long)gridDim.x * TILE / 4) {
        for (int q = threadIdx.x; q < TILE / 4; q += blockDim.x)
            if (base + q < n4) buf[q] = in4[base + q];
        __syncthreads();
        for (int q = threadIdx.x; q < TILE / 4; q += blockDim.x)
            if (base + q < n4) out4[base + q] = work(buf[q], a, b, k);
        __syncthreads();  // the buffer is refilled next
    }
}
// --8<-- [end:ws_sync]

// --8<-- [start:ws_regbuf]
// Step 2. The next tile's loads are issued into registers before this tile's
// arithmetic; they land while it runs. 256 threads: two float4 each per tile.
extern "C" __global__ void __launch_bounds__(256) ws_regbuf(const float* __restrict__ in, float* __restrict__ out,
                                                            long long n, int k, float a, float b) {
    using namespace ws;
    constexpr int PER = TILE / 4 / 256;
    __shared__ float4 buf[TILE / 4];
    const float4* in4 = reinterpret_cast<const float4*>(in);
    float4* out4 = reinterpret_cast<float4*>(out);
    const long long n4 = n / 4, stride = (long long)gridDim.x * TILE / 4;
    long long base = (long long)blockIdx.x * TILE / 4;
    float4 next[PER];
#pragma unroll
    for (int j = 0; j < PER; ++j) {
        const long long q = base + threadIdx.x + j * 256;
        if (q < n4) next[j] = in4[q];
    }
    for (; base < n4; base += stride) {
#pragma unroll
        for (int j = 0; j < PER; ++j) buf[threadIdx.x + j * 256] = next[j];
        __syncthreads();
#pragma unroll
        for (int j = 0; j < PER; ++j) {  // in flight during the arithmetic below
            const long long q = base + stride + threadIdx.x + j * 256;
            if (q < n4) next[j] = in4[q];
        }
        for (int q = threadIdx.x; q < TILE / 4; q += 256)
            if (base + q < n4) out4[base + q] = work(buf[q], a, b, k);
        __syncthreads();
    }
}
// --8<-- [end:ws_regbuf]

// --8<-- [start:ws_cpasync]
// Step 3. A ring of STAGES tiles filled by cp.async (cuda::memcpy_async with
// a per-thread pipeline): each thread copies the 16-byte pieces it will
// itself compute, so no barrier is needed between copy and use.
extern "C" __global__ void __launch_bounds__(256) ws_cpasync(const float* __restrict__ in, float* __restrict__ out,
                                                             long long n, int k, float a, float b) {
    using namespace ws;
    __shared__ __align__(16) float4 ring[STAGES][TILE / 4];
    cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
    const long long stride = (long long)gridDim.x * TILE;
    const long long first = (long long)blockIdx.x * TILE;
    auto issue = [&](long long base, int s) {
        pipe.producer_acquire();
        for (int q = threadIdx.x; q < TILE / 4; q += 256)
            if (base + 4 * q < n)
                cuda::memcpy_async(&ring[s][q], reinterpret_cast<const float4*>(in + base) + q,
                                   cuda::aligned_size_t<16>(16), pipe);
        pipe.producer_commit();
    };
    for (int s = 0; s < STAGES - 1; ++s) issue(first + s * stride, s);
    int s = 0;
    for (long long base = first; base < n; base += stride) {
        issue(base + (STAGES - 1) * stride, (s + STAGES - 1) % STAGES);
        pipe.consumer_wait();
        for (int q = threadIdx.x; q < TILE / 4; q += 256) {
            if (base + 4 * q >= n) continue;
            reinterpret_cast<float4*>(out + base)[q] = work(ring[s][q], a, b, k);
        }
        pipe.consumer_release();
        s = (s + 1) % STAGES;
    }
}
// --8<-- [end:ws_cpasync]

// --8<-- [start:ws_pipeline]
// Step 4. Warp specialization with a block-scope pipeline: the first
// PRODUCERS warps only copy, the others only compute.
extern "C" __global__ void __launch_bounds__(256) ws_pipeline(const float* __restrict__ in, float* __restrict__ out,
                                                              long long n, int k, float a, float b) {
    using namespace ws;
    namespace cg = cooperative_groups;
    constexpr int PRODUCERS = 2, THREADS = 256, CONSUMER_THREADS = THREADS - 32 * PRODUCERS;
    __shared__ __align__(16) float4 ring[STAGES][TILE / 4];
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> state;
    auto block = cg::this_thread_block();
    const bool producer = threadIdx.x < 32 * PRODUCERS;
    auto pipe = cuda::make_pipeline(block, &state, producer ? cuda::pipeline_role::producer
                                                            : cuda::pipeline_role::consumer);
    const long long stride = (long long)gridDim.x * TILE;
    if (producer) {
        for (long long base = (long long)blockIdx.x * TILE, s = 0; base < n; base += stride, s = (s + 1) % STAGES) {
            pipe.producer_acquire();
            for (int q = threadIdx.x; q < TILE / 4; q += 32 * PRODUCERS)
                if (base + 4 * q < n)
                    cuda::memcpy_async(&ring[s][q], reinterpret_cast<const float4*>(in + base) + q,
                                       cuda::aligned_size_t<16>(16), pipe);
            pipe.producer_commit();
        }
    } else {
        const int t = threadIdx.x - 32 * PRODUCERS;
        for (long long base = (long long)blockIdx.x * TILE, s = 0; base < n; base += stride, s = (s + 1) % STAGES) {
            pipe.consumer_wait();
            for (int q = t; q < TILE / 4; q += CONSUMER_THREADS) {
                if (base + 4 * q >= n) continue;
                reinterpret_cast<float4*>(out + base)[q] = work(ring[s][q], a, b, k);
            }
            pipe.consumer_release();
        }
    }
    __syncthreads();  // no thread leaves while the pipeline's barriers are in use
}
// --8<-- [end:ws_pipeline]

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // steps 5 and 6: sm_90 and newer
// --8<-- [start:ws_mbarrier]
// Steps 5 and 6: mbarriers and 1-D bulk copies (sm_90). An mbarrier counts
// arrivals and, after expect_tx, the bytes still to land; when both reach
// zero its phase completes and its parity flips (0, 1, 0, ...).
__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" :: "r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void mbar_expect_tx(unsigned long long* bar, unsigned bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(unsigned long long* bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" :: "r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    asm volatile("{\n.reg .pred done;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT_%=;\n}\n" :: "r"(smem_u32(bar)), "r"(parity) : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, unsigned bytes, unsigned long long* bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}
// --8<-- [end:ws_mbarrier]

// --8<-- [start:ws_tma]
// One producer warp (its lane 0 issues each tile as one bulk copy and sets the
// transaction count on the slot's full barrier), CONSUMER_WG warpgroups of
// consumers (each warp arrives once on the slot's empty barrier when done).
// Slot s of round r: full[s] completes its phase r; the producer waits for
// empty[s] of round r - 1 before refilling it. With REGS (sm_90a), the
// producer's warpgroup drops to 24 registers and the consumers rise to 104.
template <bool REGS>
__device__ __forceinline__ void ws_tma_body(const float* __restrict__ in, float* __restrict__ out, long long n,
                                            int k, float a, float b) {
    using namespace ws;
    constexpr int CONSUMER_WG = 2, CONSUMER_WARPS = 4 * CONSUMER_WG;
    __shared__ __align__(128) float4 ring[STAGES][TILE / 4];
    __shared__ __align__(8) unsigned long long full[STAGES], empty[STAGES];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; ++s) {
            mbar_init(&full[s], 1);
            mbar_init(&empty[s], CONSUMER_WARPS);
        }
        asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
    }
    __syncthreads();
    const long long stride = (long long)gridDim.x * TILE;
    if (warp < 4) {  // the producer warpgroup: warp 0 works, warps 1-3 only give up registers
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        if (REGS) asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n");
#endif
        if (warp == 0 && lane == 0) {
            int round = 0, s = 0;
            for (long long base = (long long)blockIdx.x * TILE; base < n; base += stride) {
                if (round > 0) mbar_wait(&empty[s], (round - 1) & 1);
                const unsigned bytes = (unsigned)(min((long long)TILE, n - base) * 4);  // n % 4 == 0: a multiple of 16
                mbar_expect_tx(&full[s], bytes);
                bulk_load(&ring[s][0], in + base, bytes, &full[s]);
                if (++s == STAGES) { s = 0; ++round; }
            }
        }
    } else {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
        if (REGS) asm volatile("setmaxnreg.inc.sync.aligned.u32 104;\n");
#endif
        const int t = threadIdx.x - 128;
        int round = 0, s = 0;
        for (long long base = (long long)blockIdx.x * TILE; base < n; base += stride) {
            mbar_wait(&full[s], round & 1);
            for (int q = t; q < TILE / 4; q += 32 * CONSUMER_WARPS) {
                if (base + 4 * q >= n) continue;
                reinterpret_cast<float4*>(out + base)[q] = work(ring[s][q], a, b, k);
            }
            __syncwarp();
            if (lane == 0) mbar_arrive(&empty[s]);
            if (++s == STAGES) { s = 0; ++round; }
        }
    }
}

extern "C" __global__ void __launch_bounds__(384) ws_tma(const float* __restrict__ in, float* __restrict__ out,
                                                            long long n, int k, float a, float b) {
    ws_tma_body<false>(in, out, n, k, a, b);
}

// Two blocks per SM: 80 registers a thread at launch (65536 / 768, rounded down to
// a multiple of 8); then 128 x 24 + 256 x 104 = 29696 <= 384 x 80 per block.
extern "C" __global__ void __launch_bounds__(384, 2) ws_tma_regs(const float* __restrict__ in, float* __restrict__ out,
                                                                 long long n, int k, float a, float b) {
    ws_tma_body<true>(in, out, n, k, a, b);
}
// --8<-- [end:ws_tma]
#endif  // __CUDA_ARCH__ >= 900
