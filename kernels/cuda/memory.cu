// The memory hierarchy, measured (chapter "Memory hierarchy and energy"):
// - pointer chasing for the latency of shared memory, L1, L2 and HBM;
// - streaming kernels for the energy of a byte from HBM, from L2, from
//   shared memory, and of an FMA kept in registers;
// - strided and misaligned copies, and AoS vs SoA, for coalescing.
// Compiled by CuPy's RawModule (NVRTC); `make test` also compiles it with
// nvcc for sm_90. Argument order everywhere: inputs, outputs, sizes.

// --8<-- [start:chase_global]
// One thread follows a chain of pointers, p = *p: each load's address is
// the previous load's value, so nothing overlaps and the time per step is
// the latency of wherever the chain lives (no arithmetic in between: the
// chain holds addresses, not indices). `warm` steps (untimed) pull the
// chain into the caches first; the next `steps` are timed with the SM
// cycle counter (clock64) and the global nanosecond timer.
template <bool L2_ONLY>
__device__ void chase(const unsigned long long* start, int warm, int steps,
                      long long* __restrict__ timing, unsigned long long* __restrict__ sink)
{
    const unsigned long long* p = start;
    for (int s = 0; s < warm; ++s) {
        p = (const unsigned long long*)(L2_ONLY ? __ldcg(p) : *p);
    }
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    long long c0 = clock64();
    for (int s = 0; s < steps; ++s) {
        // __ldcg caches in L2 only ("cache global"): the L1 never hits.
        p = (const unsigned long long*)(L2_ONLY ? __ldcg(p) : *p);
    }
    long long c1 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    timing[0] = c1 - c0;
    timing[1] = (long long)(t1 - t0);
    sink[0] = (unsigned long long)p;  // the chain's end is an output: no load can be dropped
}

extern "C" __global__ void chase_global(const unsigned long long* start, int warm, int steps,
                                        long long* __restrict__ timing,
                                        unsigned long long* __restrict__ sink)
{
    chase<false>(start, warm, steps, timing, sink);  // L1, then L2, then HBM
}

extern "C" __global__ void chase_global_cg(const unsigned long long* start, int warm, int steps,
                                           long long* __restrict__ timing,
                                           unsigned long long* __restrict__ sink)
{
    chase<true>(start, warm, steps, timing, sink);  // L2, then HBM
}
// --8<-- [end:chase_global]

// --8<-- [start:chase_shared]
#define CHASE_SHARED_MAX 4096  // 16 KB
// The same chase through shared memory. The chain holds byte offsets into
// the shared array (a shared address is a 32-bit offset): the block copies
// it in, then thread 0 alone follows it.
extern "C" __global__ void chase_shared(const unsigned* __restrict__ offsets, int len, int steps,
                                        long long* __restrict__ timing,
                                        unsigned long long* __restrict__ sink)
{
    __shared__ unsigned s_next[CHASE_SHARED_MAX];
    for (int i = threadIdx.x; i < len; i += blockDim.x) {
        s_next[i] = offsets[i];
    }
    __syncthreads();
    if (threadIdx.x != 0) {
        return;
    }
    const char* base = (const char*)s_next;
    unsigned j = 0;
    for (int s = 0; s < len; ++s) {  // warm-up pass, untimed
        j = *(const unsigned*)(base + j);
    }
    unsigned long long t0, t1;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    long long c0 = clock64();
    for (int s = 0; s < steps; ++s) {
        j = *(const unsigned*)(base + j);
    }
    long long c1 = clock64();
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
    timing[0] = c1 - c0;
    timing[1] = (long long)(t1 - t0);
    sink[0] = j;
}
// --8<-- [end:chase_shared]

// --8<-- [start:energy_kernels]
// Energy per operation: each kernel does one kind of work many times, and
// the board's energy counter (NVML) over >= 2 s of calls divides by the
// count. Every result feeds an output, so the compiler can drop nothing.

// Stream n4 float4 from global memory `reps` times. With n4 a power of two
// the start is rotated each rep, so no load can be hoisted out of the rep
// loop. __ldcg keeps the data out of L1: a small buffer is served by L2,
// a large one by HBM.
extern "C" __global__ void read_global(const float4* __restrict__ x, long long n4, int reps,
                                       float* __restrict__ out)
{
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    long long stride = (long long)gridDim.x * blockDim.x;
    float acc = 0.0f;
    for (int r = 0; r < reps; ++r) {
        long long shift = (long long)r * 4096;
        for (long long i = tid; i < n4; i += stride) {
            float4 v = __ldcg(x + ((i + shift) & (n4 - 1)));
            acc += (v.x + v.y) + (v.z + v.w);
        }
    }
    out[tid] = acc;
}

// Each block copies 16 KB into shared memory once, then reads it `reps`
// times as float4 (one 128-bit load per thread per rep, no bank conflicts:
// a warp reads 512 consecutive bytes).
#define READ_SHARED_F4 1024
extern "C" __global__ void read_shared(const float4* __restrict__ x, int reps,
                                       float* __restrict__ out)
{
    __shared__ float4 s[READ_SHARED_F4];
    for (int i = threadIdx.x; i < READ_SHARED_F4; i += blockDim.x) {
        s[i] = x[i];
    }
    __syncthreads();
    float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int r = 0; r < reps; ++r) {
        // The index moves every rep (a warp's 32 float4 stay consecutive).
        float4 v = s[(threadIdx.x + r * 32) & (READ_SHARED_F4 - 1)];
        acc.x += v.x; acc.y += v.y; acc.z += v.z; acc.w += v.w;
    }
    out[(long long)blockIdx.x * blockDim.x + threadIdx.x] = (acc.x + acc.y) + (acc.z + acc.w);
}

// FMAs on registers only: 8 independent chains per thread (enough ILP to
// keep the FMA pipes busy), `iters` steps each. x = x * a + b with |a| < 1
// converges, so no value overflows or turns denormal.
extern "C" __global__ void fma_registers(int iters, float a, float b, float* __restrict__ out)
{
    long long tid = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    float x[8];
#pragma unroll
    for (int k = 0; k < 8; ++k) {
        x[k] = (float)(threadIdx.x + k);
    }
    for (int i = 0; i < iters; ++i) {
#pragma unroll
        for (int k = 0; k < 8; ++k) {
            x[k] = fmaf(x[k], a, b);
        }
    }
    out[tid] = ((x[0] + x[1]) + (x[2] + x[3])) + ((x[4] + x[5]) + (x[6] + x[7]));
}
// --8<-- [end:energy_kernels]

// --8<-- [start:per_thread]
// The kernels below move 4 elements per thread, a block's width apart: a
// warp's loads stay 32 consecutive elements, and each thread issues all 4
// loads before its first store: four loads in flight per thread. Little's
// law (bytes in flight = bandwidth x latency) gives the scale HBM asks for;
// the chapter works it out from the measured copy bandwidth and HBM latency.
// What the strided copies rely on is measured: at stride 1 this reaches
// the device copy's bandwidth, so a stride's cost is not hidden by another
// limit.
#define PER_THREAD 4
template <typename Load, typename Store>
__device__ void per_thread(long long n, Load load, Store store)
{
    long long base = (long long)blockIdx.x * blockDim.x * PER_THREAD + threadIdx.x;
    float v[PER_THREAD];
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) {
        long long i = base + k * blockDim.x;
        if (i < n) {
            v[k] = load(i);
        }
    }
#pragma unroll
    for (int k = 0; k < PER_THREAD; ++k) {
        long long i = base + k * blockDim.x;
        if (i < n) {
            store(i, v[k]);
        }
    }
}
// --8<-- [end:per_thread]

// --8<-- [start:copy_strided]
// out[i] = in[i * stride]: reads with a stride, writes coalesced. A warp's
// 32 loads touch min(32, 4 * stride) 32-byte sectors for 128 useful bytes.
extern "C" __global__ void copy_strided(const float* __restrict__ in, float* __restrict__ out,
                                        long long n, int stride)
{
    per_thread(n, [&](long long i) { return in[i * stride]; },
               [&](long long i, float v) { out[i] = v; });
}
// --8<-- [end:copy_strided]

// --8<-- [start:copy_offset]
// out[i] = in[i + offset]: every warp's 128 bytes start `offset` floats
// past a sector boundary, so each load spans 5 sectors instead of 4.
extern "C" __global__ void copy_offset(const float* __restrict__ in, float* __restrict__ out,
                                       long long n, int offset)
{
    per_thread(n, [&](long long i) { return in[i + offset]; },
               [&](long long i, float v) { out[i] = v; });
}
// --8<-- [end:copy_offset]

// --8<-- [start:aos_soa]
// n points (x, y, z) stored two ways:
//   AoS (array of structures):  x0 y0 z0 x1 y1 z1 ...   p[3 * i + k]
//   SoA (structure of arrays):  x0 x1 ... y0 y1 ... z0 z1 ...   p[k * n + i]
// Two uses of them: the norm reads every field, scale_x reads only x.
__device__ float norm3(float x, float y, float z)
{
    return sqrtf(x * x + y * y + z * z);
}

extern "C" __global__ void norm_aos(const float* __restrict__ p, float* __restrict__ out,
                                    long long n)
{
    // Three loads 12 bytes apart per point: a warp's loads each span the
    // same 384 bytes (12 sectors); L1 serves the second and third.
    per_thread(n, [&](long long i) { return norm3(p[3 * i], p[3 * i + 1], p[3 * i + 2]); },
               [&](long long i, float v) { out[i] = v; });
}

extern "C" __global__ void norm_soa(const float* __restrict__ p, float* __restrict__ out,
                                    long long n)
{
    // Three coalesced loads, one from each field's array.
    per_thread(n, [&](long long i) { return norm3(p[i], p[n + i], p[2 * n + i]); },
               [&](long long i, float v) { out[i] = v; });
}

extern "C" __global__ void scale_x_aos(const float* __restrict__ p, float* __restrict__ out,
                                       long long n)
{
    // 4 useful bytes of every 12 fetched: the y and z of each point come along.
    per_thread(n, [&](long long i) { return 2.0f * p[3 * i]; },
               [&](long long i, float v) { out[i] = v; });
}

extern "C" __global__ void scale_x_soa(const float* __restrict__ p, float* __restrict__ out,
                                       long long n)
{
    // Only the x array is touched.
    per_thread(n, [&](long long i) { return 2.0f * p[i]; },
               [&](long long i, float v) { out[i] = v; });
}
// --8<-- [end:aos_soa]
