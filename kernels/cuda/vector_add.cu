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
    // Widen before multiplying: blockIdx.x * blockDim.x is 32-bit and
    // overflows past 2^31 elements.
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
