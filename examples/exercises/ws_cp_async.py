"""Exercise ws_cp_async (chapter: warp specialization), in CUDA C.

`stream(x, out)` computes out[i] = f^8(x[i]) with f(v) = v * 0.999 + 0.001
(fmaf; x, out: float32 CuPy vectors of one length n >= 1, 16-byte
aligned), the chapter's streaming workload, as its step 3 does: tiles of
2048 floats pass through a ring of 4 shared-memory slots filled by cp.async
(16-byte chunks copied global -> shared through no register), 3 tiles in
flight while one is computed. Each thread copies the chunks it computes
itself, so cp.async.wait_group is all the waiting it needs.

It is right when n is a multiple of 2048 and wrong otherwise, at the end
of x in two ways: the last, partial tile is never read (its chunks are
copied with a source size of 0, which cp.async turns into zeros, so that
tile comes out as f^8(0)), and the last chunk's results are stored as a
whole float4 even when n is not a multiple of 4, past the end of out. Make
it right for every n, reading nothing past the end of x (cp.async's source
size may be anything from 0 to 16 bytes). Then, on a GPU, keep it fast: at
least 0.6 of the speed of the chapter's step 3 (warp_specialization.stream
(..., step="ws_cpasync")) at 2^27 floats. Needs a GPU of compute
capability 8.0 or newer (cp.async).

    python -m kernels.exercises check ws_cp_async examples/exercises/ws_cp_async.py
"""

import cupy as cp
import numpy as np

K_STEPS = 8                          # out[i] = f^8(x[i]), f(v) = v * A + B
A, B = 0.999, 0.001
SOURCE = r"""
constexpr int TILE = 2048;            // floats per tile (8 KB)
constexpr int STAGES = 4;             // a ring of 4 tiles: 3 in flight while one is computed
constexpr int THREADS = 256;
constexpr int CHUNKS = TILE / 4;      // 16-byte chunks per tile

__device__ __forceinline__ unsigned smem_u32(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
// 16 bytes global -> shared, through no register; `bytes` of them read (0..16), the rest zero-filled.
__device__ __forceinline__ void cp_async_16(void* dst, const void* src, int bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n"
                 :: "r"(smem_u32(dst)), "l"(src), "r"(bytes) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
template <int N>  // wait until at most N of this thread's groups are still in flight
__device__ __forceinline__ void cp_async_wait() { asm volatile("cp.async.wait_group %0;\n" :: "n"(N) : "memory"); }

// k FMAs on each of four values: four independent chains.
__device__ __forceinline__ float4 work(float4 v, float a, float b, int k) {
#pragma unroll 4
    for (int j = 0; j < k; ++j) {
        v.x = fmaf(v.x, a, b); v.y = fmaf(v.y, a, b);
        v.z = fmaf(v.z, a, b); v.w = fmaf(v.w, a, b);
    }
    return v;
}

// Block b computes tiles b, b + gridDim.x, ...; its j-th tile goes to ring slot j % STAGES.
// Each thread copies the chunks it will itself compute (chunk q = threadIdx.x + m * THREADS),
// so its own cp.async.wait_group is all the waiting it needs: no barrier.
extern "C" __global__ void __launch_bounds__(THREADS) stream_kernel(
        const float* __restrict__ x, float* __restrict__ out, long long n, int k, float a, float b) {
    __shared__ __align__(16) float4 ring[STAGES][CHUNKS];
    const long long tiles = (n + TILE - 1) / TILE;
    auto issue = [&](long long j) {  // copy this block's j-th tile, if it has one; always close a group
        const long long tile = blockIdx.x + j * gridDim.x;
        if (tile < tiles) {
            const long long base = tile * TILE;
            for (int q = threadIdx.x; q < CHUNKS; q += THREADS) {
                const long long i = base + 4 * q;  // the chunk's first float
                if (i < n) {
                    const int bytes = base + TILE <= n ? 16 : 0;  // whole tiles only: nothing read past the end of x
                    cp_async_16(&ring[j % STAGES][q], x + i, bytes);
                }
            }
        }
        cp_async_commit();  // an empty group past the end keeps the count of groups right
    };
    for (int j = 0; j < STAGES - 1; ++j) issue(j);  // prologue: STAGES - 1 tiles in flight
    for (long long j = 0; blockIdx.x + j * gridDim.x < tiles; ++j) {
        issue(j + STAGES - 1);            // into the slot tile j - 1 used: this thread is done with it
        cp_async_wait<STAGES - 1>();      // groups 0..j have landed: tile j is in slot j % STAGES
        const long long base = (blockIdx.x + j * gridDim.x) * TILE;
        for (int q = threadIdx.x; q < CHUNKS; q += THREADS) {
            const long long i = base + 4 * q;
            if (i >= n) break;
            const float4 v = work(ring[j % STAGES][q], a, b, k);
            *reinterpret_cast<float4*>(out + i) = v;
        }
    }
    cp_async_wait<0>();  // nothing in flight when the block exits
}
"""
THREADS = 256
TILE = 2048
_kernel = cp.RawModule(code=SOURCE, options=("--std=c++17",)).get_function("stream_kernel")
_resident = {}  # device id -> the blocks every SM holds at once, all SMs together (asked once)


def stream(x, out):
    """x, out: float32 CuPy vectors of one length n >= 1, 16-byte aligned; out[i] = f^8(x[i])."""
    n = x.size
    dev = cp.cuda.Device()
    if dev.id not in _resident:  # the grid fills every SM once, as the driver counts
        per_sm = cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(_kernel.kernel.ptr, THREADS, 0)
        _resident[dev.id] = per_sm * dev.attributes["MultiProcessorCount"]
    blocks = min(-(-n // TILE), _resident[dev.id])
    _kernel((blocks,), (THREADS,), (x, out, np.int64(n), np.int32(K_STEPS), np.float32(A), np.float32(B)))
