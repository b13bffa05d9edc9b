// The primitives of warp specialization (chapter "Warp specialization"),
// each a minimal kernel that does something a test can check against NumPy
// (kernels/ws_primitives.py launches them, tests/test_ws_primitives.py checks them).
// Compiles for every target: the sm_90 and sm_90a parts are guarded (WS_SM90, WS_SM90A below).
//
//   pipeline_copy       cuda::memcpy_async into a 2-stage ring, block-scope cuda::pipeline  (sm_80+)
//   barrier_split       cuda::barrier with arrive and wait split around independent work    (sm_80+)
//   mbarrier_bulk_copy  an mbarrier with a transaction count completes on a 1-D bulk copy  (sm_90)
//   mbarrier_bulk_copy_nowait  the same, reading before the wait: a test shows it is wrong
//   tma_tile_2d         a 2-D box by TMA from a CUtensorMap, zeros past the matrix edges    (sm_90)
//   cluster_dsmem       two blocks of a cluster read each other's shared memory (DSMEM)    (sm_90)
//   setmaxnreg_roles    a producer warpgroup gives registers to a consumer warpgroup       (sm_90a)
//
// One source for every GPU: the wrapper compiles it with -arch=sm_90a on a
// compute capability 9.0 GPU (H100, H200) and with CuPy's default -arch
// elsewhere. The sm_90 kernels' bodies exist only where __CUDA_ARCH__ >= 900,
// setmaxnreg_roles's only in the sm_90a feature set; elsewhere they compile
// to empty kernels, which the wrapper refuses to launch. Argument order:
// inputs, output, sizes.
#include <cuda/barrier>
#include <cuda/pipeline>
#include <cooperative_groups.h>

namespace cg = cooperative_groups;

// A __shared__ cuda::barrier has a constructor, which shared memory never
// runs: init() sets the barrier up. Silence nvcc's warning #20054 ("dynamic
// initialization is not supported for a function-scope static __shared__
// variable"), as the CUDA Programming Guide's barrier examples do.
#pragma nv_diag_suppress static_var_with_dynamic_init

#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#define WS_SM90 1   // mbarrier transaction counts, bulk copies, TMA, clusters
#else
#define WS_SM90 0
#endif
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WS_SM90A 1  // the sm_90a feature set: setmaxnreg, wgmma
#else
#define WS_SM90A 0
#endif

// What this module was compiled for: out[0] = __CUDA_ARCH__ (900 for sm_90
// and sm_90a), out[1] = 1 with the sm_90a features. The wrapper asks before
// launching setmaxnreg_roles, so that an -arch=sm_90a that NVRTC did not
// honour cannot pass unnoticed (its body would be empty).
extern "C" __global__ void ws_arch_probe(int* out)
{
#if defined(__CUDA_ARCH__)
    out[0] = __CUDA_ARCH__;
#endif
    out[1] = WS_SM90A;
}

// --8<-- [start:pipeline_copy]
// out[i] = 2 * x[i] + 1, through shared memory: each block walks its tiles
// (blockIdx.x, blockIdx.x + gridDim.x, ...) and copies the tile two steps
// ahead while it computes this one. Every thread is producer and consumer.
// cuda::memcpy_async compiles to cp.async (LDGSTS) on sm_80+.
extern "C" __global__ void pipeline_copy(const float* __restrict__ x, float* __restrict__ out, int n)
{
    constexpr int TILE = 1024, STAGES = 2;
    __shared__ float ring[STAGES][TILE];
    __shared__ cuda::pipeline_shared_state<cuda::thread_scope_block, STAGES> state;
    auto block = cg::this_thread_block();
    auto pipe = cuda::make_pipeline(block, &state);  // collective: every thread of the block calls it
    const int tiles = (n + TILE - 1) / TILE;

    auto load = [&](int tile, int s) {
        pipe.producer_acquire();  // waits until every thread has released stage s (its last tile is read)
        if (tile < tiles) {
            const int count = min(TILE, n - tile * TILE);  // the last tile may be short
            for (int i = threadIdx.x; i < count; i += blockDim.x)
                cuda::memcpy_async(&ring[s][i], &x[tile * TILE + i], cuda::aligned_size_t<4>(sizeof(float)), pipe);
        }
        pipe.producer_commit();  // commit even an empty batch: the stages stay in step with the tiles
    };

    for (int s = 0; s < STAGES; ++s) load(blockIdx.x + s * gridDim.x, s);
    for (int tile = blockIdx.x, s = 0; tile < tiles; tile += gridDim.x, s ^= 1) {
        pipe.consumer_wait();  // stage s has landed: every thread's copies, not only this thread's
        const int count = min(TILE, n - tile * TILE);
        for (int i = threadIdx.x; i < count; i += blockDim.x)
            out[tile * TILE + i] = 2.0f * ring[s][i] + 1.0f;  // reads elements other threads copied
        pipe.consumer_release();  // this thread is done with stage s
        load(tile + STAGES * gridDim.x, s);  // refill it with the tile two steps ahead
    }
}
// --8<-- [end:pipeline_copy]

// --8<-- [start:barrier_split]
// out[i] = x[j] + x[i]^2 with j = i's right neighbour in the block (wrapping
// at the block's end; 0 where j >= n). Each thread publishes x[i] in shared
// memory, arrives, does work that needs nobody else's data, and only then
// waits: the barrier's latency hides behind that work. blockDim.x <= 1024.
extern "C" __global__ void barrier_split(const float* __restrict__ x, float* __restrict__ out, int n)
{
    __shared__ float vals[1024];
    __shared__ cuda::barrier<cuda::thread_scope_block> bar;
    auto block = cg::this_thread_block();
    if (block.thread_rank() == 0) init(&bar, block.size());  // each phase expects every thread
    block.sync();  // nobody may arrive on the barrier before it is initialised

    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    const float v = i < n ? x[i] : 0.0f;  // threads past n still take part: the barrier counts them
    vals[threadIdx.x] = v;
    auto token = bar.arrive();            // "my write is done" (release); does not block
    const float own = v * v;              // independent work: only this thread's data
    bar.wait(std::move(token));           // blocks until all have arrived; their writes are now visible
    if (i < n) out[i] = vals[(threadIdx.x + 1) % blockDim.x] + own;
}
// --8<-- [end:barrier_split]

// --8<-- [start:mbarrier_ptx]
// Hopper mbarriers and bulk copies in inline PTX (PTX ISA: mbarrier,
// cp.async.bulk). An mbarrier is 8 bytes of shared memory that counts
// arrivals and, since sm_90, transaction bytes; a phase completes when both
// reach zero, and the barrier moves to the next phase (parity 0, 1, 0, ...).
__device__ __forceinline__ unsigned smem_u32(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar, unsigned arrivals)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" :: "r"(smem_u32(bar)), "r"(arrivals) : "memory");
}
// Two fences go with them, written inline where they are needed:
// fence.mbarrier_init.release.cluster makes an initialised barrier visible to
// the copy engine (the async proxy) and the cluster before a copy signals it;
// fence.proxy.async.shared::cta orders a thread's earlier shared-memory writes
// (generic proxy) before later async-proxy accesses to the same bytes.
// One arrival, plus `bytes` the phase must also wait for.
__device__ __forceinline__ void mbar_arrive_expect_tx(unsigned long long* bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(smem_u32(bar)), "r"(bytes) : "memory");
}
// Spin until the phase with this parity has completed. try_wait may give up
// after a hardware time limit, hence the loop.
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity)
{
    asm volatile("{\n"
                 ".reg .pred done;\n"
                 "WAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
                 "@!done bra WAIT_%=;\n"
                 "}" :: "r"(smem_u32(bar)), "r"(parity) : "memory");
}
// `bytes` (a multiple of 16; src and dst 16-byte aligned) from global to
// shared memory by the copy engine; it counts them off bar's transaction count.
__device__ __forceinline__ void bulk_copy_g2s(void* dst, const void* src, unsigned bytes, unsigned long long* bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)) : "memory");
}
// --8<-- [end:mbarrier_ptx]

// --8<-- [start:mbarrier_bulk_copy]
// out[i] = x[i] + 1, tile by tile: thread 0 arms the barrier with the tile's
// byte count and issues one bulk copy; every thread waits on the barrier's
// phase, then reads. One barrier serves all of a block's tiles: its k-th
// phase is the block's k-th tile, so the parity to wait for flips each time.
// The tile is poisoned with NaN first, so a read that does not wait for the
// copy shows. n % 4 == 0 (copies of a multiple of 16 bytes); x 16-byte aligned.
template <bool WAIT>
__device__ __forceinline__ void bulk_copy_tiles(const float* __restrict__ x, float* __restrict__ out, int n)
{
#if WS_SM90
    constexpr int TILE = 1024;  // floats: 4 KB per copy
    __shared__ alignas(128) float tile[TILE];
    __shared__ alignas(8) unsigned long long bar;
    if (threadIdx.x == 0) {
        mbar_init(&bar, 1);  // one arrival per phase: thread 0's arrive.expect_tx
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // visible to the copy engine
    }
    __syncthreads();  // nobody waits on the barrier before it is initialised

    const int tiles = (n + TILE - 1) / TILE;
    unsigned parity = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x, parity ^= 1) {
        const int count = min(TILE, n - t * TILE);
        for (int i = threadIdx.x; i < TILE; i += blockDim.x) tile[i] = __int_as_float(0x7fc00000);  // NaN
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");  // the NaNs land before the copy's bytes, not after
        // Everyone has poisoned, has read the previous tile and has seen the
        // previous phase complete before the barrier is armed again: a thread
        // that had not yet seen phase k complete when phase k + 1 completes
        // too would then be waiting for phase k + 2 (same parity) forever.
        __syncthreads();
        if (threadIdx.x == 0) {
            mbar_arrive_expect_tx(&bar, count * sizeof(float));  // the phase ends when these bytes have landed
            bulk_copy_g2s(tile, x + t * TILE, count * sizeof(float), &bar);
        }
        if (WAIT) mbar_wait(&bar, parity);
        for (int i = threadIdx.x; i < count; i += blockDim.x) out[t * TILE + i] = tile[i] + 1.0f;
        // The broken twin waits only here, after its reads: it must neither
        // arm the barrier again nor exit while the copy is still in flight.
        if (!WAIT) mbar_wait(&bar, parity);
    }
#endif
}

extern "C" __global__ void mbarrier_bulk_copy(const float* __restrict__ x, float* __restrict__ out, int n)
{
    bulk_copy_tiles<true>(x, out, n);
}
// --8<-- [end:mbarrier_bulk_copy]

// --8<-- [start:broken_pipeline]
// The same kernel with the wait before the reads missing: the threads read
// the tile while the copy is still in flight and see the NaN poison (or a
// mix). tests/test_ws_primitives.py shows that its output is wrong.
extern "C" __global__ void mbarrier_bulk_copy_nowait(const float* __restrict__ x, float* __restrict__ out, int n)
{
    bulk_copy_tiles<false>(x, out, n);
}
// --8<-- [end:broken_pipeline]

// --8<-- [start:tma_tile_2d]
// TMA: one instruction copies a box_rows x box_cols box of a row-major float
// matrix (rows x cols) into shared memory. The CUtensorMap (from
// cuTensorMapEncodeTiled on the host: address, sizes, row stride, box) is a
// 128-byte kernel parameter; __grid_constant__ keeps it in parameter memory,
// where TMA may read it. Block (bx, by) loads the box at row by * box_rows,
// column bx * box_cols; TMA writes zeros where the box leaves the matrix.
// The block writes the box transposed: out (gridDim.x * box_cols rows,
// gridDim.y * box_rows columns) is the transpose of the zero-padded matrix.
struct alignas(64) TmaDesc { unsigned long long v[16]; };  // a CUtensorMap, passed by value

__device__ __forceinline__ void tma_load_2d(void* dst, const TmaDesc* map, int col, int row, unsigned long long* bar)
{
    asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                 " [%0], [%1, {%2, %3}], [%4];"  // coordinates innermost first: column, then row
                 :: "r"(smem_u32(dst)), "l"(map), "r"(col), "r"(row), "r"(smem_u32(bar)) : "memory");
}

extern "C" __global__ void tma_tile_2d(const __grid_constant__ TmaDesc map, float* __restrict__ out,
                                       int box_rows, int box_cols)
{
#if WS_SM90
    // TMA's destination must be 128-byte aligned: round the dynamic buffer up
    // (the wrapper allocates 128 bytes more than the box). Stepping from
    // smem_raw itself, not from an integer, keeps the reads below LDS.
    extern __shared__ unsigned char smem_raw[];
    float* box = reinterpret_cast<float*>(smem_raw + ((128 - (smem_u32(smem_raw) & 127)) & 127));
    __shared__ alignas(8) unsigned long long bar;
    const int row0 = blockIdx.y * box_rows, col0 = blockIdx.x * box_cols;
    if (threadIdx.x == 0) {
        mbar_init(&bar, 1);
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");  // visible to the copy engine
        // The whole box counts, its zero-filled part too.
        mbar_arrive_expect_tx(&bar, box_rows * box_cols * sizeof(float));
        tma_load_2d(box, &map, col0, row0, &bar);
    }
    __syncthreads();  // the barrier is initialised before anyone waits on it
    mbar_wait(&bar, 0);  // the barrier's first phase: the box has landed

    const int out_cols = gridDim.y * box_rows;
    for (int i = threadIdx.x; i < box_rows * box_cols; i += blockDim.x) {
        const int r = i % box_rows, c = i / box_rows;  // consecutive threads: consecutive columns of out
        out[(long long)(col0 + c) * out_cols + row0 + r] = box[r * box_cols + c];
    }
#endif
}
// --8<-- [end:tma_tile_2d]

// --8<-- [start:cluster_dsmem]
// A cluster of two blocks (__cluster_dims__: CuPy's launch needs no cluster
// attribute, the grid must be a multiple of 2). Each block reads its
// partner's shared array through distributed shared memory:
// out[i] = x[i] + x[i +- blockDim.x] (the partner block's element of the
// same thread; 0 past n).
extern "C" __global__ void
#if WS_SM90 || !defined(__CUDA_ARCH__)
__cluster_dims__(2, 1, 1)  // a compile-time cluster shape (older targets reject the attribute)
#endif
cluster_dsmem(const float* __restrict__ x, float* __restrict__ out, int n)
{
#if WS_SM90
    __shared__ float vals[1024];
    cg::cluster_group cluster = cg::this_cluster();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    vals[threadIdx.x] = i < n ? x[i] : 0.0f;
    cluster.sync();  // both blocks are running and have written vals (release/acquire across the cluster)
    const float* partner = cluster.map_shared_rank(vals, cluster.block_rank() ^ 1);  // the other block's vals
    const float v = vals[threadIdx.x] + partner[threadIdx.x];
    cluster.sync();  // a block's shared memory lives only as long as the block: keep the partner until we have read
    if (i < n) out[i] = v;
#endif
}
// --8<-- [end:cluster_dsmem]

// --8<-- [start:setmaxnreg_roles]
// out (M x 160) = W (M x K) @ X (K x 160), K <= 64: 128 rows per block.
// Warpgroup 0 (threads 0-127), the producer, copies X into shared memory;
// warpgroup 1, the consumer, keeps one row of out in 160 accumulators.
// __maxnreg__(136): each thread starts with 136 registers, too few for 160
// accumulators (ptxas would spill). The producer gives up 96 per thread
// (setmaxnreg.dec to 40), the consumer takes 96 (setmaxnreg.inc to 232):
// 128 x 96 registers pass through the block's pool, so .inc never waits for
// registers that no one will release. Counts are multiples of 8 in 24..256,
// each executed by a whole warpgroup. 256 threads.
// barrier.sync, not bar.sync: bar.sync is barrier.sync.aligned, which needs
// every thread of a warp to reach it together, and the producer's copy loop
// leaves its warps diverged (K * 160 is rarely a multiple of 128); synccheck
// reports the aligned form there as "Divergent thread(s) in block".
__device__ __forceinline__ void named_barrier_sync(int id, int threads)
{
    asm volatile("barrier.sync %0, %1;" :: "r"(id), "r"(threads) : "memory");
}

extern "C" __global__ void __maxnreg__(136)
setmaxnreg_roles(const float* __restrict__ W, const float* __restrict__ X, float* __restrict__ out, int M, int K)
{
#if WS_SM90A
    constexpr int COLS = 160, KMAX = 64;
    __shared__ float xs[KMAX][COLS];
    const int t = threadIdx.x % 128;
    // The two roles never share code after the split: a point both reach is
    // compiled for the smaller register budget. They meet at a named barrier
    // (id 1, 256 threads) from their own branches instead of __syncthreads.
    if (threadIdx.x < 128) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;" ::: "memory");
        for (int i = t; i < K * COLS; i += 128) xs[i / COLS][i % COLS] = X[i];
        named_barrier_sync(1, 256);  // X is in shared memory
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;" ::: "memory");
        const int row = blockIdx.x * 128 + t;
        float acc[COLS];
#pragma unroll
        for (int j = 0; j < COLS; ++j) acc[j] = 0.0f;
        named_barrier_sync(1, 256);
        for (int k = 0; k < K; ++k) {
            const float w = row < M ? W[row * K + k] : 0.0f;
#pragma unroll
            for (int j = 0; j < COLS; ++j) acc[j] = fmaf(w, xs[k][j], acc[j]);  // xs[k][j]: a broadcast
        }
        if (row < M) {
#pragma unroll
            for (int j = 0; j < COLS; ++j) out[row * COLS + j] = acc[j];
        }
    }
#endif
}
// --8<-- [end:setmaxnreg_roles]
