"""Sum of a float32 array: the reduction ladder in CuPy (CUDA C) and Numba.

CUDA C variants (kernels/cuda/reduction.cu), in ladder order:
    interleaved_modulo, interleaved_strided, sequential, first_add,
    warp_shuffle, grid_stride, vectorized, single_pass
Numba variants (this file): interleaved_modulo, sequential, first_add,
grid_stride run anywhere (the CUDA simulator too); warp_shuffle needs a GPU
(the simulator has no warp shuffles).

Every kernel leaves one partial sum per block; the wrapper then sums the
partials with the grid-stride kernel until one value is left.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from . import checks
from .device import cupy_module, numba_simulator

CUDA_SOURCE = Path(__file__).with_name("cuda") / "reduction.cu"
VARIANTS = ("interleaved_modulo", "interleaved_strided", "sequential", "first_add",
            "warp_shuffle", "grid_stride", "vectorized", "single_pass")
# elements each block covers: per thread, 1 (one load), 2 (first add), or
# "all" (grid-stride: the grid is sized to the GPU, not to n)
_PER_THREAD = {"interleaved_modulo": 1, "interleaved_strided": 1, "sequential": 1,
               "first_add": 2, "warp_shuffle": 2, "grid_stride": None, "vectorized": None,
               "single_pass": None}
BLOCKS_PER_SM = 4  # grid-stride steps: resident blocks per SM
# Step 7's launch: 512 threads x 4 blocks per SM, the best of the sweep in
# kernels/bench/reduction.py on an H200 (make bench, topic reduction).
SINGLE_PASS_THREADS, SINGLE_PASS_BLOCKS_PER_SM = 512, 4
TUNING = ("single_pass_streaming", "single_pass_chunked")  # experiments on step 7


def _check_threads(threads: int) -> None:
    checks.require_block_size("threads", threads)
    if threads < 64 or threads & (threads - 1):
        raise ValueError(f"threads must be a power of two from 64 to 1024, got {threads}")


def grid_size(variant: str, n: int, threads: int, sm_count: int, blocks_per_sm: int | None = None) -> int:
    per = None if variant.startswith("single_pass") else _PER_THREAD[variant]
    if per is None:  # fill the GPU; each thread loops over its share
        if blocks_per_sm is None:
            blocks_per_sm = SINGLE_PASS_BLOCKS_PER_SM if variant.startswith("single_pass") else BLOCKS_PER_SM
        return max(1, min(sm_count * blocks_per_sm, math.ceil(n / threads)))
    return max(1, math.ceil(n / (per * threads)))


# ---------------------------------------------------------------- CuPy --

def cupy_kernel(variant: str):
    if variant not in VARIANTS + TUNING:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    return cupy_module(CUDA_SOURCE.name).get_function(f"reduce_{variant}")


def _launch_cupy(variant: str, x, threads: int, sms: int, blocks_per_sm=None):
    import cupy as cp

    n = x.size
    blocks = grid_size(variant, n, threads, sms, blocks_per_sm)
    partial = cp.empty(blocks, dtype=cp.float32)
    cupy_kernel(variant)((blocks,), (threads,), (x, partial, np.int64(n)), shared_mem=threads * 4)
    return partial


@functools.cache
def _ticket(device_id: int, stream_ptr: int):
    """The single-pass kernel's ticket counter for one stream of one device:
    zero, and left at zero by the last block of every launch. Launches in one
    stream run one after another and can share it; launches in different
    streams may run at once, so each stream has its own."""
    import cupy as cp

    with cp.cuda.Device(device_id):
        return cp.zeros(1, dtype=cp.uint32)


# --8<-- [start:cupy_wrapper]
def reduce_sum_cupy(x, *, variant: str = "single_pass", threads: int | None = None,
                    blocks_per_sm: int | None = None):
    """Sum of a float32 cupy array; returns a 0-d cupy array (float32)."""
    import cupy as cp

    checks.require_vector("x", x, np.float32, lib="cupy")
    if variant not in VARIANTS + TUNING:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if threads is None:
        threads = SINGLE_PASS_THREADS if variant.startswith("single_pass") else 256
    _check_threads(threads)
    if x.size == 0:
        return cp.zeros((), dtype=cp.float32)
    if variant.startswith(("vectorized", "single_pass")) and x.data.ptr % 16:
        # float4 loads need 16-byte aligned addresses (a view such as x[1:] is
        # not): the scalar kernel sums the 1-3 leading elements, the vector
        # kernel the aligned rest
        head = min(x.size, (16 - x.data.ptr % 16) // 4)
        return (reduce_sum_cupy(x[head:], variant=variant, threads=threads, blocks_per_sm=blocks_per_sm)
                + reduce_sum_cupy(x[:head], variant="grid_stride"))
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    if variant.startswith("single_pass"):  # one launch: the last block sums the partials
        blocks = grid_size(variant, x.size, threads, sms, blocks_per_sm)
        partial = cp.empty(blocks, dtype=cp.float32)
        total = cp.empty((), dtype=cp.float32)
        cupy_kernel(variant)((blocks,), (threads,),
                             (x, partial, np.int64(x.size),
                              _ticket(cp.cuda.Device().id, cp.cuda.get_current_stream().ptr), total),
                             shared_mem=threads * 4)
        return total
    partial = _launch_cupy(variant, x, threads, sms, blocks_per_sm)
    while partial.size > 1:  # sum the per-block partials, a few hundred at most after one pass
        partial = _launch_cupy("grid_stride", partial, threads, sms)
    return partial.reshape(())
# --8<-- [end:cupy_wrapper]


# --------------------------------------------------------------- Numba --

# --8<-- [start:numba_import]
from numba import cuda, float32  # noqa: E402

MAX_THREADS = 1024  # shared arrays need a compile-time size: the largest block
# --8<-- [end:numba_import]


# --8<-- [start:numba_interleaved_modulo]
@cuda.jit
def reduce_interleaved_modulo_kernel(x, partial, n):
    sdata = cuda.shared.array(MAX_THREADS, float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    sdata[tid] = x[i] if i < n else float32(0.0)
    cuda.syncthreads()
    s = 1
    while s < cuda.blockDim.x:
        if tid % (2 * s) == 0:  # divergent: a few lanes of every warp
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s *= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = sdata[0]
# --8<-- [end:numba_interleaved_modulo]


# --8<-- [start:numba_sequential]
@cuda.jit
def reduce_sequential_kernel(x, partial, n):
    sdata = cuda.shared.array(MAX_THREADS, float32)
    tid = cuda.threadIdx.x
    i = cuda.grid(1)
    sdata[tid] = x[i] if i < n else float32(0.0)
    cuda.syncthreads()
    s = cuda.blockDim.x // 2
    while s > 0:
        if tid < s:  # contiguous active threads: whole warps agree
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = sdata[0]
# --8<-- [end:numba_sequential]


# --8<-- [start:numba_first_add]
@cuda.jit
def reduce_first_add_kernel(x, partial, n):
    sdata = cuda.shared.array(MAX_THREADS, float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * (2 * cuda.blockDim.x) + tid
    v = x[i] if i < n else float32(0.0)
    if i + cuda.blockDim.x < n:
        v += x[i + cuda.blockDim.x]
    sdata[tid] = v
    cuda.syncthreads()
    s = cuda.blockDim.x // 2
    while s > 0:
        if tid < s:
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = sdata[0]
# --8<-- [end:numba_first_add]


# --8<-- [start:numba_warp_shuffle]
@cuda.jit
def reduce_warp_shuffle_kernel(x, partial, n):
    sdata = cuda.shared.array(MAX_THREADS, float32)
    tid = cuda.threadIdx.x
    i = cuda.blockIdx.x * (2 * cuda.blockDim.x) + tid
    v = x[i] if i < n else float32(0.0)
    if i + cuda.blockDim.x < n:
        v += x[i + cuda.blockDim.x]
    sdata[tid] = v
    cuda.syncthreads()
    s = cuda.blockDim.x // 2
    while s >= 32:
        if tid < s:
            v += sdata[tid + s]
            sdata[tid] = v
        cuda.syncthreads()
        s //= 2
    if tid < 32:  # the last warp: registers and shuffles, no barriers
        offset = 16
        while offset > 0:
            v += cuda.shfl_down_sync(0xFFFFFFFF, v, offset)
            offset //= 2
        if tid == 0:
            partial[cuda.blockIdx.x] = v
# --8<-- [end:numba_warp_shuffle]


# --8<-- [start:numba_grid_stride]
@cuda.jit
def reduce_grid_stride_kernel(x, partial, n):
    sdata = cuda.shared.array(MAX_THREADS, float32)
    tid = cuda.threadIdx.x
    v = float32(0.0)
    for i in range(cuda.grid(1), n, cuda.gridsize(1)):  # many elements per thread
        v += x[i]
    sdata[tid] = v
    cuda.syncthreads()
    s = cuda.blockDim.x // 2
    while s > 0:
        if tid < s:
            sdata[tid] += sdata[tid + s]
        cuda.syncthreads()
        s //= 2
    if tid == 0:
        partial[cuda.blockIdx.x] = sdata[0]
# --8<-- [end:numba_grid_stride]


NUMBA_KERNELS = {
    "interleaved_modulo": reduce_interleaved_modulo_kernel,
    "sequential": reduce_sequential_kernel,
    "first_add": reduce_first_add_kernel,
    "warp_shuffle": reduce_warp_shuffle_kernel,
    "grid_stride": reduce_grid_stride_kernel,
}
NUMBA_GPU_ONLY = ("warp_shuffle",)  # the simulator has no warp shuffles


def _numba_sms() -> int:
    return 1 if numba_simulator() else cuda.get_current_device().MULTIPROCESSOR_COUNT


def _launch_numba(variant: str, x, threads: int, sms: int):
    n = x.shape[0]
    blocks = grid_size(variant, n, threads, sms)
    partial = cuda.device_array(blocks, dtype=np.float32)
    NUMBA_KERNELS[variant][blocks, threads](x, partial, n)
    return partial


def reduce_sum_numba(x, *, variant: str = "grid_stride", threads: int = 256):
    """Sum of a float32 Numba device array; returns a device array of shape (1,)."""
    checks.require_vector("x", x, np.float32, lib="numba")
    _check_threads(threads)
    if variant not in NUMBA_KERNELS:
        raise ValueError(f"variant must be one of {tuple(NUMBA_KERNELS)}, got {variant!r}")
    if variant in NUMBA_GPU_ONLY and numba_simulator():
        raise RuntimeError(f"variant {variant!r} uses warp shuffles: it needs a GPU, not the simulator")
    if x.shape[0] == 0:
        return cuda.to_device(np.zeros(1, dtype=np.float32))
    sms = _numba_sms()
    partial = _launch_numba(variant, x, threads, sms)
    while partial.shape[0] > 1:
        partial = _launch_numba("grid_stride", partial, threads, sms)
    return partial
