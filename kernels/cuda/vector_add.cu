// Vector add, out[i] = a[i] + b[i], in float32: the first kernel of the
// handbook (chapter "The CUDA programming model"). Compiled by CuPy's
// RawModule (NVRTC); `make test` also compiles it with nvcc for sm_90.
// Argument order everywhere: inputs, output, size.

// --8<-- [start:vector_add]
// One thread per element. Launch with ceil(n / blockDim.x) blocks.
extern "C" __global__ void vector_add(const float* __restrict__ a,
                                      const float* __restrict__ b,
                                      float* __restrict__ out,
                                      long long n)
{
    // Global index = which block * threads per block + which thread.
    // Widen before multiplying: blockIdx.x * blockDim.x + threadIdx.x is
    // unsigned 32-bit arithmetic. Stored in an int (the common `int i = ...`),
    // an index past 2^31 - 1 does not fit and turns negative; stored in a
    // long long without the cast, the 32-bit result wraps past 2^32 - 1.
    long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    // Bounds guard: the grid is rounded up to whole blocks, so the last
    // block has threads past the end of the arrays.
    if (i < n) {
        out[i] = a[i] + b[i];
    }
}
// --8<-- [end:vector_add]

// --8<-- [start:vector_add_grid_stride]
// Grid-stride loop: any grid size covers any n; each thread steps by the
// total number of threads in the grid. Launch a grid that fills the GPU
// (a few blocks per SM), not one thread per element.
extern "C" __global__ void vector_add_grid_stride(const float* __restrict__ a,
                                                  const float* __restrict__ b,
                                                  float* __restrict__ out,
                                                  long long n)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        out[i] = a[i] + b[i];  // consecutive threads, consecutive addresses
    }
}
// --8<-- [end:vector_add_grid_stride]

// --8<-- [start:vector_add_vec4]
// Memory chapter: the same loop moving 16 bytes per load (float4) and
// UNROLL loads per operand in flight per thread before any store, so each
// SM has more bytes in flight (what that buys is measured in the memory
// chapter, not assumed). Needs a, b and out 16-byte aligned (the wrapper
// checks); the last n % 4 elements are done one by one.
template <int UNROLL>
__device__ void add_vec4(const float* __restrict__ a, const float* __restrict__ b,
                         float* __restrict__ out, long long n)
{
    const float4* a4 = reinterpret_cast<const float4*>(a);
    const float4* b4 = reinterpret_cast<const float4*>(b);
    float4* out4 = reinterpret_cast<float4*>(out);
    long long n4 = n / 4;
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long base = tid; base < n4; base += UNROLL * stride) {
        float4 x[UNROLL], y[UNROLL];
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {  // all loads first ...
            long long i = base + u * stride;
            if (i < n4) {
                x[u] = a4[i];
                y[u] = b4[i];
            }
        }
#pragma unroll
        for (int u = 0; u < UNROLL; ++u) {  // ... then the stores
            long long i = base + u * stride;
            if (i < n4) {
                out4[i] = make_float4(x[u].x + y[u].x, x[u].y + y[u].y,
                                      x[u].z + y[u].z, x[u].w + y[u].w);
            }
        }
    }
    long long t = 4 * n4 + tid;  // the tail, fewer than 4 elements
    if (t < n) {
        out[t] = a[t] + b[t];
    }
}

extern "C" __global__ void vector_add_vec4(const float* __restrict__ a,
                                           const float* __restrict__ b,
                                           float* __restrict__ out, long long n)
{
    add_vec4<2>(a, b, out, n);
}
// --8<-- [end:vector_add_vec4]

// Experiments for the memory chapter's tuning table (make bench, topic
// vector_add): one float4 per thread per step, and four.
extern "C" __global__ void vector_add_vec4_u1(const float* __restrict__ a,
                                              const float* __restrict__ b,
                                              float* __restrict__ out, long long n)
{
    add_vec4<1>(a, b, out, n);
}

extern "C" __global__ void vector_add_vec4_u4(const float* __restrict__ a,
                                              const float* __restrict__ b,
                                              float* __restrict__ out, long long n)
{
    add_vec4<4>(a, b, out, n);
}
