// Host <-> device transfers (chapter "Memory hierarchy and memory
// optimization"): the small kernels that the copies, the stream pipeline,
// managed memory and zero-copy feed. Compiled by CuPy's RawModule (NVRTC);
// `make test` also compiles it with nvcc for sm_90.
// Argument order everywhere: inputs, output, size, then parameters.
// Every kernel is a grid-stride loop: the wrappers launch a grid that fills
// the GPU once, whatever the size of the chunk or array.

// --8<-- [start:poly_chunk]
// The compute stage of the copy/compute pipeline: per element, `iters`
// dependent FMAs v = 0.5 * v + x (Horner's rule for the polynomial
// x * (1 + t + t^2 + ... + t^iters) at t = 0.5; v tends to 2x, so the
// values stay bounded and every output still depends on its input).
// Why so many FMAs: a chunk crosses PCIe at tens of GB/s, 4 bytes per
// element, while the SMs retire tens of TFMA/s; for the kernel to take as
// long as the copy of its chunk (the case where three stages overlap
// best) it needs on the order of a thousand FMAs per element. The bench
// measures both and picks `iters` (balance_iters in kernels/host_transfer.py),
// so the balance holds on any GPU and host link.
extern "C" __global__ void poly_chunk(const float* __restrict__ x,
                                      float* __restrict__ out,
                                      long long n,
                                      int iters)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        float xi = x[i];
        float v = xi;
        // One dependent chain per element: its latency (4 cycles an FMA)
        // is hidden by the other resident warps, not inside the thread.
        for (int k = 0; k < iters; ++k) {
            v = fmaf(v, 0.5f, xi);
        }
        out[i] = v;
    }
}
// --8<-- [end:poly_chunk]

// --8<-- [start:scale_once]
// Reads each input element exactly once: out = s * x. When x is host
// memory (zero-copy) or managed memory that lives on the host, each read
// of x crosses the PCIe link; out is ordinary device memory.
extern "C" __global__ void scale_once(const float* __restrict__ x,
                                      float* __restrict__ out,
                                      long long n,
                                      float s)
{
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        // Consecutive threads, consecutive addresses: a warp asks for one
        // 128-byte line, the unit a zero-copy read moves over the link.
        out[i] = s * x[i];
    }
}
// --8<-- [end:scale_once]

// --8<-- [start:read_twice]
// A computation that needs its input twice: out = x - mean(x), in two
// passes. Pass 1 (sum_once) adds x into total[0]; pass 2 (subtract_mean)
// reads x again. On device memory the second pass reads HBM; on zero-copy
// host memory it pays the PCIe link a second time (the array is far larger
// than the 60 MiB L2, so nothing of pass 1 is still cached).
extern "C" __global__ void sum_once(const float* __restrict__ x,
                                    double* __restrict__ total,
                                    long long n)
{
    __shared__ float warp_sums[32];  // one partial sum per warp (<= 1024 threads)
    float acc = 0.0f;
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        acc += x[i];
    }
    // Reduce within the warp with shuffles (no shared memory, no barrier).
    for (int offset = 16; offset > 0; offset >>= 1) {
        acc += __shfl_down_sync(0xffffffffu, acc, offset);
    }
    int lane = threadIdx.x & 31;
    int warp = threadIdx.x >> 5;
    if (lane == 0) {
        warp_sums[warp] = acc;
    }
    // Every warp's partial must be in shared memory before warp 0 reads them.
    __syncthreads();
    if (warp == 0) {
        // blockDim.x is a multiple of 32 (the wrapper checks): whole warps.
        acc = lane < (int)(blockDim.x >> 5) ? warp_sums[lane] : 0.0f;
        for (int offset = 16; offset > 0; offset >>= 1) {
            acc += __shfl_down_sync(0xffffffffu, acc, offset);
        }
        if (lane == 0) {
            // One atomic per block, in double: the order of the blocks'
            // additions varies from run to run, double keeps that noise
            // far below float32 resolution.
            atomicAdd(total, (double)acc);
        }
    }
}

extern "C" __global__ void subtract_mean(const float* __restrict__ x,
                                         const double* __restrict__ total,
                                         float* __restrict__ out,
                                         long long n)
{
    // Every thread reads the same total: one broadcast load, then cached.
    float mean = (float)(total[0] / (double)n);
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x;
         i < n; i += stride) {
        out[i] = x[i] - mean;  // the second read of x
    }
}
// --8<-- [end:read_twice]
