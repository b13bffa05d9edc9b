// Sum of a float32 array: the reduction ladder (chapter "Warp divergence").
// NVIDIA's classic steps (Harris, "Optimizing Parallel Reduction in CUDA")
// and beyond. Every kernel writes one partial sum per block to
// partial[blockIdx.x]; the wrapper (kernels/reduction.py) sums the partials
// with reduce_grid_stride until one value is left. Block size: a power of
// two from 64 to 1024, with blockDim.x floats of dynamic shared memory.
// Argument order: x, partial, n.

// --8<-- [start:reduce_interleaved_modulo]
// Step 0: interleaved addressing with a modulo test. Correct, but in the
// first round only even threads work, then every 4th, ...: while s <= 16
// every warp has active and idle lanes (divergence); from s = 32 on only
// lane 0 of every (2 * s / 32)-th warp works and the other warps sit idle.
// And `%` is slow.
extern "C" __global__ void reduce_interleaved_modulo(const float* __restrict__ x,
                                                     float* __restrict__ partial,
                                                     long long n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    long long i = (long long)blockIdx.x * blockDim.x + tid;
    sdata[tid] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        if (tid % (2 * s) == 0) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();  // every round reads what the previous one wrote
    }
    if (tid == 0) partial[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce_interleaved_modulo]

// --8<-- [start:reduce_interleaved_strided]
// Step 1: the same pairs, but thread t works on index 2*s*t: the active
// threads are contiguous, so whole warps retire together (no divergence
// while the active count is >= 32). Still slow: the strided shared-memory
// accesses conflict in banks (2-way at s = 1, 4-way at s = 2, ...).
extern "C" __global__ void reduce_interleaved_strided(const float* __restrict__ x,
                                                      float* __restrict__ partial,
                                                      long long n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    long long i = (long long)blockIdx.x * blockDim.x + tid;
    sdata[tid] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = 1; s < blockDim.x; s *= 2) {
        unsigned int index = 2 * s * tid;
        if (index < blockDim.x) {
            sdata[index] += sdata[index + s];
        }
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce_interleaved_strided]

// --8<-- [start:reduce_sequential]
// Step 2: sequential addressing. Thread t adds element t + s, s halving:
// contiguous active threads and conflict-free, consecutive accesses. Still
// slow: half the threads idle from the first round, and each thread loads
// a single element.
extern "C" __global__ void reduce_sequential(const float* __restrict__ x,
                                             float* __restrict__ partial,
                                             long long n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    long long i = (long long)blockIdx.x * blockDim.x + tid;
    sdata[tid] = (i < n) ? x[i] : 0.0f;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce_sequential]

// --8<-- [start:reduce_first_add]
// Step 3: first add during load. Each block covers 2 * blockDim.x elements
// and each thread adds two of them before the tree: half the blocks, no
// thread idle at the start. Still slow: a barrier per round even when only
// one warp is left working.
extern "C" __global__ void reduce_first_add(const float* __restrict__ x,
                                            float* __restrict__ partial,
                                            long long n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    long long i = (long long)blockIdx.x * (2 * blockDim.x) + tid;
    float v = (i < n) ? x[i] : 0.0f;
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (tid < s) {
            sdata[tid] += sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid == 0) partial[blockIdx.x] = sdata[0];
}
// --8<-- [end:reduce_first_add]

// --8<-- [start:warp_reduce]
// Sum over the 32 lanes of a warp with register shuffles: no shared memory,
// no barrier (the lanes of a warp exchange registers directly).
__device__ __forceinline__ float warp_reduce_sum(float v)
{
    for (int offset = 16; offset > 0; offset >>= 1) {
        v += __shfl_down_sync(0xffffffffu, v, offset);
    }
    return v;  // lane 0 holds the warp's sum
}
// --8<-- [end:warp_reduce]

// --8<-- [start:reduce_warp_shuffle]
// Step 4: the last warp with shuffles. Rounds with s >= 32 keep the tree in
// shared memory, down to 64 -> 32 (s = 32, the last barrier); the final
// 32 -> 1 happens in registers inside one warp, with shuffles and without
// barriers. Still slow: each thread handles only two elements, so
// the grid has n / (2 * blockDim.x) blocks and most time goes to starting
// blocks and writing partials.
extern "C" __global__ void reduce_warp_shuffle(const float* __restrict__ x,
                                               float* __restrict__ partial,
                                               long long n)
{
    extern __shared__ float sdata[];
    unsigned int tid = threadIdx.x;
    long long i = (long long)blockIdx.x * (2 * blockDim.x) + tid;
    float v = (i < n) ? x[i] : 0.0f;
    if (i + blockDim.x < n) v += x[i + blockDim.x];
    sdata[tid] = v;
    __syncthreads();
    for (unsigned int s = blockDim.x / 2; s >= 32; s >>= 1) {
        if (tid < s) {
            sdata[tid] = v = v + sdata[tid + s];
        }
        __syncthreads();
    }
    if (tid < 32) {
        v = warp_reduce_sum(v);  // v already holds sdata[tid] for tid < 32
        if (tid == 0) partial[blockIdx.x] = v;
    }
}
// --8<-- [end:reduce_warp_shuffle]

// --8<-- [start:block_reduce]
// Sum over a whole block: each warp reduces with shuffles, warp 0 then
// reduces the per-warp sums. Two barriers in all, whatever the block size.
__device__ __forceinline__ float block_reduce_sum(float v, float* warp_sums)
{
    unsigned int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_reduce_sum(v);
    if (lane == 0) warp_sums[warp] = v;
    __syncthreads();
    unsigned int nwarps = blockDim.x >> 5;
    v = (threadIdx.x < nwarps) ? warp_sums[threadIdx.x] : 0.0f;
    if (warp == 0) v = warp_reduce_sum(v);
    return v;  // thread 0 holds the block's sum
}
// --8<-- [end:block_reduce]

// --8<-- [start:reduce_grid_stride]
// Step 5: many elements per thread. A grid sized to the GPU (a few blocks
// per SM); each thread sums its share with a grid-stride loop in a register,
// then one block_reduce_sum. The tree costs the same, but it now covers
// thousands of elements per thread instead of two. Still slow: one 4-byte
// load per iteration, a single dependent accumulator.
extern "C" __global__ void reduce_grid_stride(const float* __restrict__ x,
                                              float* __restrict__ partial,
                                              long long n)
{
    extern __shared__ float warp_sums[];
    float v = 0.0f;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += stride) {
        v += x[i];
    }
    v = block_reduce_sum(v, warp_sums);
    if (threadIdx.x == 0) partial[blockIdx.x] = v;
}
// --8<-- [end:reduce_grid_stride]

// --8<-- [start:reduce_vectorized]
// Step 6: 16-byte loads and independent accumulators. Each iteration loads
// UNROLL float4 (x must be 16-byte aligned: cupy allocations are) before
// adding any of them, so each thread keeps UNROLL * 16 bytes in flight;
// separate accumulators keep the adds independent. The last n % 4 elements
// are summed by block 0.
#define UNROLL 4
extern "C" __global__ void reduce_vectorized(const float* __restrict__ x,
                                             float* __restrict__ partial,
                                             long long n)
{
    extern __shared__ float warp_sums[];
    const float4* x4 = reinterpret_cast<const float4*>(x);
    long long n4 = n / 4;
    long long stride = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float acc[UNROLL] = {};
    for (; i + (UNROLL - 1) * stride < n4; i += UNROLL * stride) {
        float4 q[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) q[u] = x4[i + u * stride];  // all loads first
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc[u] += (q[u].x + q[u].y) + (q[u].z + q[u].w);
    }
    for (; i < n4; i += stride) {  // fewer than UNROLL strides left
        float4 q = x4[i];
        acc[0] += (q.x + q.y) + (q.z + q.w);
    }
    float v = 0.0f;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v += acc[u];
    if (blockIdx.x == 0 && threadIdx.x < (n & 3)) v += x[4 * n4 + threadIdx.x];  // tail
    v = block_reduce_sum(v, warp_sums);
    if (threadIdx.x == 0) partial[blockIdx.x] = v;
}
// --8<-- [end:reduce_vectorized]

// --8<-- [start:reduce_single_pass]
// Step 7: one launch. Step 6's loads, and the last block to finish sums the
// per-block partials itself: each block writes its partial, makes it visible
// to the whole device (__threadfence) and draws a ticket; the block that
// draws the last ticket reads every partial (through L2: __ldcg, since L1 is
// not coherent across SMs) and writes the total. Saves the second launch
// that steps 0-6 need. `ticket` must be 0 before the launch; the last block
// resets it, so one ticket serves launches that follow each other in a
// stream (not launches running concurrently).
template <bool STREAMING, bool CHUNKED>
__device__ __forceinline__ void single_pass(const float* __restrict__ x, float* __restrict__ partial,
                                            long long n, unsigned int* __restrict__ ticket,
                                            float* __restrict__ total, float* warp_sums)
{
    __shared__ bool am_last;
    const float4* x4 = reinterpret_cast<const float4*>(x);
    long long n4 = n / 4;
    // Grid-stride order (blocks interleaved), or CHUNKED: each block sweeps
    // its own contiguous n4 / gridDim.x slice, as CUB does.
    long long begin = 0, end = n4, step = (long long)gridDim.x * blockDim.x;
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    if (CHUNKED) {
        long long chunk = (n4 + gridDim.x - 1) / gridDim.x;
        begin = min(n4, chunk * blockIdx.x);
        end = min(n4, begin + chunk);
        step = blockDim.x;
        i = begin + threadIdx.x;
    }
    float acc[UNROLL] = {};
    for (; i + (UNROLL - 1) * step < end; i += UNROLL * step) {
        float4 q[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) q[u] = STREAMING ? __ldcs(&x4[i + u * step]) : x4[i + u * step];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) acc[u] += (q[u].x + q[u].y) + (q[u].z + q[u].w);
    }
    for (; i < end; i += step) {
        float4 q = x4[i];
        acc[0] += (q.x + q.y) + (q.z + q.w);
    }
    float v = 0.0f;
#pragma unroll
    for (int u = 0; u < UNROLL; ++u) v += acc[u];
    if (blockIdx.x == 0 && threadIdx.x < (n & 3)) v += x[4 * n4 + threadIdx.x];
    v = block_reduce_sum(v, warp_sums);
    if (threadIdx.x == 0) {
        partial[blockIdx.x] = v;
        __threadfence();  // the partial is visible device-wide before the ticket is drawn
        am_last = (atomicAdd(ticket, 1u) == gridDim.x - 1);
    }
    __syncthreads();  // also: every warp is done with warp_sums before it is reused
    if (am_last) {
        float s = 0.0f;
        for (unsigned int b = threadIdx.x; b < gridDim.x; b += blockDim.x) s += __ldcg(&partial[b]);
        s = block_reduce_sum(s, warp_sums);
        if (threadIdx.x == 0) {
            *total = s;
            *ticket = 0u;  // ready for the next launch
        }
    }
}

extern "C" __global__ void reduce_single_pass(const float* __restrict__ x, float* __restrict__ partial,
                                              long long n, unsigned int* __restrict__ ticket,
                                              float* __restrict__ total)
{
    extern __shared__ float warp_sums[];  // blockDim.x / 32 floats
    single_pass<false, false>(x, partial, n, ticket, total, warp_sums);
}
// --8<-- [end:reduce_single_pass]

// Tuning experiments for step 7 (kernels/bench/reduction.py measures them):
// streaming loads (__ldcs: evict-first, the data is read once) and
// contiguous per-block chunks instead of the grid-stride order.
extern "C" __global__ void reduce_single_pass_streaming(const float* __restrict__ x, float* __restrict__ partial,
                                                        long long n, unsigned int* __restrict__ ticket,
                                                        float* __restrict__ total)
{
    extern __shared__ float warp_sums[];  // blockDim.x / 32 floats
    single_pass<true, false>(x, partial, n, ticket, total, warp_sums);
}

extern "C" __global__ void reduce_single_pass_chunked(const float* __restrict__ x, float* __restrict__ partial,
                                                      long long n, unsigned int* __restrict__ ticket,
                                                      float* __restrict__ total)
{
    extern __shared__ float warp_sums[];  // blockDim.x / 32 floats
    single_pass<false, true>(x, partial, n, ticket, total, warp_sums);
}
