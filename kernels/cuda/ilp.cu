// Instruction-level parallelism (chapter "Instruction-level parallelism").
// A GPU issues each warp's instructions in order; a dependent instruction
// waits for its input (about 4 cycles for an FMA). With few warps per
// scheduler, only independent instructions within a warp keep the pipeline
// busy. The kernels below do the same number of FMAs per thread, ITERS in
// all, split over K independent chains.
//
// Contract of every kernel in this file: one thread per element, the grid
// covering x exactly, so x's size is a multiple of the block size and there
// is no bounds check (a check would be one more instruction in a
// microbenchmark of instruction issue). The wrappers (kernels/ilp.py and
// examples/ilp.py) reject any other size before launching; a launch that
// breaks the contract reads and writes past the end of x and out.

// --8<-- [start:chains]
// K independent accumulators, each a dependent chain of iters / K FMAs.
// The inner loop is unrolled (K is a compile-time constant) so the K FMAs
// of one step are independent instructions the scheduler can issue back to
// back. No bounds check: the grid covers x exactly (x.size a multiple of
// the block; the wrappers reject anything else).
template <int K>
__device__ __forceinline__ void fma_chains(const float* __restrict__ x, float* __restrict__ out,
                                           int iters)
{
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    float a = x[t], b = 1.0f - a;
    float acc[K];
#pragma unroll
    for (int k = 0; k < K; ++k) acc[k] = a + k;
    for (int i = 0; i < iters / K; ++i) {
#pragma unroll
        for (int k = 0; k < K; ++k) acc[k] = fmaf(acc[k], a, b);
    }
    float s = 0.0f;
#pragma unroll
    for (int k = 0; k < K; ++k) s += acc[k];
    out[t] = s;  // keep the result, so nothing is optimized away
}
// --8<-- [end:chains]

extern "C" __global__ void ilp_chains_1(const float* x, float* out, int iters) { fma_chains<1>(x, out, iters); }
extern "C" __global__ void ilp_chains_2(const float* x, float* out, int iters) { fma_chains<2>(x, out, iters); }
extern "C" __global__ void ilp_chains_4(const float* x, float* out, int iters) { fma_chains<4>(x, out, iters); }
extern "C" __global__ void ilp_chains_8(const float* x, float* out, int iters) { fma_chains<8>(x, out, iters); }
extern "C" __global__ void ilp_chains_16(const float* x, float* out, int iters) { fma_chains<16>(x, out, iters); }
extern "C" __global__ void ilp_chains_32(const float* x, float* out, int iters) { fma_chains<32>(x, out, iters); }

// --8<-- [start:chain_unrolled]
// One chain, unrolled 8 times: eight FMAs per loop trip, but each needs the
// previous one's result. Fewer loop instructions, no more parallelism.
extern "C" __global__ void ilp_chain_unrolled(const float* __restrict__ x, float* __restrict__ out,
                                              int iters)
{
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    float a = x[t], b = 1.0f - a, acc = a;
#pragma unroll 8
    for (int i = 0; i < iters; ++i) acc = fmaf(acc, a, b);
    out[t] = acc;
}
// --8<-- [end:chain_unrolled]

// EXPECT_SPILLS: ilp_chains_32_capped  (tests/test_cuda_compile.py)
// --8<-- [start:chains_capped]
// 32 chains again, but __launch_bounds__(1024, 2) promises 2 blocks of 1024
// threads per SM, which caps the kernel at 65536 / 2048 = 32 registers per
// thread: 32 accumulators no longer fit, and the compiler spills them to
// local memory (ptxas reports the spill stores and loads).
// Two such blocks fit only an SM that holds 2048 threads (sm_80, sm_90).
// Turing (sm_75: 1024) and consumer Ampere and Ada (sm_86, sm_89: 1536)
// cannot keep that promise, and ptxas would ignore it with a warning: there
// the kernel is compiled without it, and the launch wrappers refuse it.
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ != 800 && __CUDA_ARCH__ < 900
#define CAPPED_MIN_BLOCKS 1
#else
#define CAPPED_MIN_BLOCKS 2
#endif
extern "C" __global__ void __launch_bounds__(1024, CAPPED_MIN_BLOCKS)
ilp_chains_32_capped(const float* x, float* out, int iters) { fma_chains<32>(x, out, iters); }
// --8<-- [end:chains_capped]

// --8<-- [start:intdiv]
// Integer division and modulo by a run-time divisor: there is no integer
// divide instruction; nvcc emits a sequence (a float reciprocal, multiplies
// and corrections) for each / and %. Like every kernel here: one thread per
// element of x, no bounds check (x.size a multiple of the block).
extern "C" __global__ void int_div_mod(const unsigned int* __restrict__ x, unsigned int* __restrict__ out,
                                       unsigned int d, int iters)
{
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int v = x[t];
    for (int i = 0; i < iters; ++i) v = v / d + v % d + i;  // dependent chain
    out[t] = v;
}
// --8<-- [end:intdiv]

// --8<-- [start:shift_mask]
// The same for a power-of-two divisor d = 2^s, written as a shift and a
// mask: two instructions instead of the division sequence.
extern "C" __global__ void int_shift_mask(const unsigned int* __restrict__ x, unsigned int* __restrict__ out,
                                          unsigned int s, int iters)
{
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    unsigned int v = x[t], m = (1u << s) - 1u;
    for (int i = 0; i < iters; ++i) v = (v >> s) + (v & m) + i;
    out[t] = v;
}
// --8<-- [end:shift_mask]
