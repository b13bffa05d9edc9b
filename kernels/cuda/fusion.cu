// Topic fusion (kernels/fusion.py): two chains a reader meets every day, each
// in one kernel, so that what one step hands to the next stays on the chip.
//   bias + GELU + residual   out[r, c] = gelu(x[r, c] + bias[c]) + residual[r, c]
//                            (GELU in its tanh approximation): x and residual read
//                            once, out written once; the bias row stays in registers.
//   row softmax              out[r, :] = exp(x[r, :] - max) / sum(exp(x[r, :] - max)):
//     softmax_warp_<VPT>     a warp per row, the row in registers (N <= 32 * VPT <= 1024)
//     softmax_block          a block per row, the row in shared memory (read once)
//     softmax_online         a block per row, two passes over HBM (online max and sum,
//                            then the output): any N, one more read of x
// Matrices are row-major M x N float32; argument order: inputs, out, M, N.
// Rows are indexed with 64-bit offsets (M * N may pass 2^31); M, N themselves are int.
// Inputs must be finite: the max subtraction makes large logits safe, not inf or NaN.

// --8<-- [start:gelu_tanh]
// GELU, tanh approximation (Hendrycks and Gimpel; what GPT-2 and BERT use):
// 0.5 h (1 + tanh(sqrt(2 / pi) (h + 0.044715 h^3))). Within 5e-4 of the erf form.
__device__ __forceinline__ float gelu_tanh(float h)
{
    const float k0 = 0.7978845608028654f;  // sqrt(2 / pi)
    const float k1 = 0.044715f;
    return 0.5f * h * (1.0f + tanhf(k0 * (h + k1 * h * h * h)));
}
// --8<-- [end:gelu_tanh]

// --8<-- [start:bias_gelu_residual_vec4]
// One pass, 16-byte loads and stores (N % 4 == 0, every pointer 16-byte aligned).
// A thread owns four neighbouring columns: it loads their bias once, then walks
// rows blockIdx.y, blockIdx.y + gridDim.y, ... (grid.y is capped at 65535, M is not).
// GELU_ROWS rows are loaded before any is computed: 8 loads of 16 bytes in flight
// per thread, enough to keep HBM busy (a load waits several hundred ns; one row at a
// time would leave the memory system idle while tanhf runs). __launch_bounds__(256, 4) lets
// ptxas spend up to 64 registers; without it, it sinks each load to just before
// its use to save registers, and only two loads are in flight.
#define GELU_ROWS 4

__device__ __forceinline__ float4 bias_gelu_residual4(float4 v, float4 b, float4 s)
{
    return make_float4(gelu_tanh(v.x + b.x) + s.x, gelu_tanh(v.y + b.y) + s.y,
                       gelu_tanh(v.z + b.z) + s.z, gelu_tanh(v.w + b.w) + s.w);
}

extern "C" __global__ void __launch_bounds__(256, 4)
bias_gelu_residual_vec4(const float* __restrict__ x, const float* __restrict__ bias,
                        const float* __restrict__ residual, float* __restrict__ out, int M, int N)
{
    const int N4 = N / 4;
    const int c4 = blockIdx.x * blockDim.x + threadIdx.x;  // which group of four columns
    if (c4 >= N4) return;
    const float4 b = reinterpret_cast<const float4*>(bias)[c4];
    const float4* x4 = reinterpret_cast<const float4*>(x);
    const float4* r4 = reinterpret_cast<const float4*>(residual);
    float4* o4 = reinterpret_cast<float4*>(out);
    const int step = gridDim.y;
    int r = blockIdx.y;
    for (; r + (GELU_ROWS - 1) * step < M; r += GELU_ROWS * step) {
        float4 v[GELU_ROWS], s[GELU_ROWS];
#pragma unroll
        for (int k = 0; k < GELU_ROWS; ++k) {  // all loads first
            const long long i = (long long)(r + k * step) * N4 + c4;
            v[k] = x4[i];
            s[k] = r4[i];
        }
#pragma unroll
        for (int k = 0; k < GELU_ROWS; ++k)
            o4[(long long)(r + k * step) * N4 + c4] = bias_gelu_residual4(v[k], b, s[k]);
    }
    for (; r < M; r += step) {  // the last rows, fewer than GELU_ROWS
        const long long i = (long long)r * N4 + c4;
        o4[i] = bias_gelu_residual4(x4[i], b, r4[i]);
    }
}
// --8<-- [end:bias_gelu_residual_vec4]

// --8<-- [start:bias_gelu_residual]
// The same pass one float at a time: any N, any alignment of a float32 array.
extern "C" __global__ void __launch_bounds__(256, 4)
bias_gelu_residual(const float* __restrict__ x, const float* __restrict__ bias,
                   const float* __restrict__ residual, float* __restrict__ out, int M, int N)
{
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= N) return;
    const float b = bias[c];
    const int step = gridDim.y;
    int r = blockIdx.y;
    for (; r + (GELU_ROWS - 1) * step < M; r += GELU_ROWS * step) {
        float v[GELU_ROWS], s[GELU_ROWS];
#pragma unroll
        for (int k = 0; k < GELU_ROWS; ++k) {
            const long long i = (long long)(r + k * step) * N + c;
            v[k] = x[i];
            s[k] = residual[i];
        }
#pragma unroll
        for (int k = 0; k < GELU_ROWS; ++k)
            out[(long long)(r + k * step) * N + c] = gelu_tanh(v[k] + b) + s[k];
    }
    for (; r < M; r += step) {
        const long long i = (long long)r * N + c;
        out[i] = gelu_tanh(x[i] + b) + residual[i];
    }
}
// --8<-- [end:bias_gelu_residual]

// --8<-- [start:softmax_reduce]
// Reductions for the softmax kernels. Every lane of a warp ends with the
// warp's answer (xor butterfly); a block reduction has every warp write its
// answer to red[warp], waits once, and has every warp reduce red[] again, so
// every thread gets the block's answer after a single barrier. Each call needs
// its own red[] array: a second call writing the same array could overwrite
// values a slower warp has not read yet. blockDim.x: a multiple of 32.
#define NEG_INF (-__int_as_float(0x7f800000))

__device__ __forceinline__ float warp_max(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

__device__ __forceinline__ float warp_sum(float v)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float block_max(float v, float* red)
{
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    v = warp_max(v);
    if (lane == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    return warp_max(lane < warps ? red[lane] : NEG_INF);
}

__device__ __forceinline__ float block_sum(float v, float* red)
{
    const int lane = threadIdx.x & 31, warps = blockDim.x >> 5;
    v = warp_sum(v);
    if (lane == 0) red[threadIdx.x >> 5] = v;
    __syncthreads();
    return warp_sum(lane < warps ? red[lane] : 0.0f);
}
// --8<-- [end:softmax_reduce]

// --8<-- [start:softmax_warp]
// Short rows (N <= 32 * VPT): one warp per row, the row held in registers (VPT
// values per lane, indices known at compile time after unrolling), max and sum
// by shuffles alone: no shared memory, no barrier. One kernel per VPT (4, 8, 16,
// 32: rows up to 128, 256, 512, 1024 floats), so a short row does not pay the
// registers of a long one (fewer registers: more warps resident per SM).
template <int VPT>
__device__ __forceinline__ void softmax_warp_row(const float* __restrict__ x, float* __restrict__ out, int M, int N)
{
    const int lane = threadIdx.x & 31;
    const long long row = (long long)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= M) return;  // the whole warp leaves: the shuffles below see 32 lanes
    const float* xr = x + row * N;
    float v[VPT];
    float m = NEG_INF;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = lane + 32 * k;  // lanes read neighbouring columns: coalesced
        v[k] = c < N ? xr[c] : NEG_INF;
        m = fmaxf(m, v[k]);
    }
    m = warp_max(m);
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        v[k] = lane + 32 * k < N ? expf(v[k] - m) : 0.0f;  // x - max <= 0: no overflow
        s += v[k];
    }
    const float inv = 1.0f / warp_sum(s);
    float* orow = out + row * N;
#pragma unroll
    for (int k = 0; k < VPT; ++k) {
        const int c = lane + 32 * k;
        if (c < N) orow[c] = v[k] * inv;
    }
}

// __launch_bounds__(1024): any block the wrapper allows (softmax_warp_32 would
// otherwise take 71 registers, and 1024 threads of it would not fit an SM).
#define SOFTMAX_WARP(VPT)                                                                                      \
    extern "C" __global__ void __launch_bounds__(1024)                                                         \
    softmax_warp_##VPT(const float* __restrict__ x, float* __restrict__ out, int M, int N)                    \
    {                                                                                                          \
        softmax_warp_row<VPT>(x, out, M, N);                                                                   \
    }
SOFTMAX_WARP(4)
SOFTMAX_WARP(8)
SOFTMAX_WARP(16)
SOFTMAX_WARP(32)
// --8<-- [end:softmax_warp]

// --8<-- [start:softmax_block]
// One block per row; the row is read from HBM once into dynamic shared memory
// (N floats), max and sum are reduced in the block, and out is written once.
// Each thread touches the same columns c = threadIdx.x + k * blockDim.x in all
// three loops, so row[] needs no barrier of its own (block_max's orders the rest).
// The first loop issues four loads before it stores any: four in flight per thread.
extern "C" __global__ void softmax_block(const float* __restrict__ x, float* __restrict__ out, int M, int N)
{
    extern __shared__ float row[];
    __shared__ float red_max[32], red_sum[32];
    const long long base = (long long)blockIdx.x * N;
    const int T = blockDim.x;
    float m = NEG_INF;
    int c = threadIdx.x;
    for (; c + 3 * T < N; c += 4 * T) {
        const float v0 = x[base + c], v1 = x[base + c + T], v2 = x[base + c + 2 * T], v3 = x[base + c + 3 * T];
        row[c] = v0; row[c + T] = v1; row[c + 2 * T] = v2; row[c + 3 * T] = v3;
        m = fmaxf(m, fmaxf(fmaxf(v0, v1), fmaxf(v2, v3)));
    }
    for (; c < N; c += T) {
        const float v = x[base + c];
        row[c] = v;
        m = fmaxf(m, v);
    }
    m = block_max(m, red_max);
    float s = 0.0f;
    for (c = threadIdx.x; c < N; c += T) {
        const float e = expf(row[c] - m);
        row[c] = e;  // kept for the last loop: exp once per element
        s += e;
    }
    const float inv = 1.0f / block_sum(s, red_sum);
    for (c = threadIdx.x; c < N; c += T) out[base + c] = row[c] * inv;
}
// --8<-- [end:softmax_block]

// --8<-- [start:softmax_online]
// Any N: a running maximum m and a running sum s of exp(v - m) per thread in
// one pass over x (when a larger value comes, the sum so far is rescaled by
// exp(old m - new m)), pairs merged across the block, then a second pass reads
// x again and writes out. One more read of x than softmax_block, no row cache.
__device__ __forceinline__ void online_merge(float& m, float& s, float m2, float s2)
{
    if (m2 == NEG_INF) return;                  // the other side saw no element
    if (m == NEG_INF) { m = m2; s = s2; return; }
    const float mx = fmaxf(m, m2);
    s = s * expf(m - mx) + s2 * expf(m2 - mx);
    m = mx;
}

__device__ __forceinline__ void warp_online(float& m, float& s)
{
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float m2 = __shfl_xor_sync(0xffffffffu, m, o);
        const float s2 = __shfl_xor_sync(0xffffffffu, s, o);
        online_merge(m, s, m2, s2);
    }
}

extern "C" __global__ void softmax_online(const float* __restrict__ x, float* __restrict__ out, int M, int N)
{
    __shared__ float red_m[32], red_s[32];
    const long long base = (long long)blockIdx.x * N;
    const int T = blockDim.x;
    float m = NEG_INF, s = 0.0f;
    int c = threadIdx.x;
    for (; c + 3 * T < N; c += 4 * T) {  // four loads in flight, then one rescale for the four
        const float v0 = x[base + c], v1 = x[base + c + T], v2 = x[base + c + 2 * T], v3 = x[base + c + 3 * T];
        const float mx = fmaxf(m, fmaxf(fmaxf(v0, v1), fmaxf(v2, v3)));
        s = s * expf(m - mx) + (expf(v0 - mx) + expf(v1 - mx)) + (expf(v2 - mx) + expf(v3 - mx));
        m = mx;  // first time: s = 0 * exp(-inf) + ... = the four terms
    }
    for (; c < N; c += T) {
        const float v = x[base + c];
        const float mx = fmaxf(m, v);
        s = s * expf(m - mx) + expf(v - mx);
        m = mx;
    }
    warp_online(m, s);
    const int lane = threadIdx.x & 31, warps = T >> 5;
    if (lane == 0) { red_m[threadIdx.x >> 5] = m; red_s[threadIdx.x >> 5] = s; }
    __syncthreads();
    m = lane < warps ? red_m[lane] : NEG_INF;
    s = lane < warps ? red_s[lane] : 0.0f;
    warp_online(m, s);  // every warp merges the block's pairs: all threads get (m, s)
    const float inv = 1.0f / s;
    for (c = threadIdx.x; c + 3 * T < N; c += 4 * T) {  // second pass: x read again
        const float v0 = x[base + c], v1 = x[base + c + T], v2 = x[base + c + 2 * T], v3 = x[base + c + 3 * T];
        out[base + c] = expf(v0 - m) * inv;
        out[base + c + T] = expf(v1 - m) * inv;
        out[base + c + 2 * T] = expf(v2 - m) * inv;
        out[base + c + 3 * T] = expf(v3 - m) * inv;
    }
    for (; c < N; c += T) out[base + c] = expf(x[base + c] - m) * inv;
}
// --8<-- [end:softmax_online]
