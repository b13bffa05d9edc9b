# %% [markdown]
# # Sum of an array: the reduction ladder
#
# Each step of the ladder (kernels/cuda/reduction.cu, and the Numba kernels
# below) computes the same sum; this script checks every one against NumPy in
# float64, exits non-zero on a wrong answer and, on a GPU, times the CUDA C
# steps against cupy.sum (CUB).
#
# Run:
#
#     python examples/reduction.py                    # n = 2**26 + 7
#     python examples/reduction.py --size 1000 --impl numba
#
# Copy with it: kernels/cuda/reduction.cu (the CuPy part compiles it).
#
# Without a GPU the Numba steps run in the CUDA simulator (keep n small; the
# warp-shuffle step is skipped: the simulator has no warp shuffles) and the
# CuPy part is skipped.

# %%
# --8<-- [start:pick_target]
import ctypes
import os
import sys


def has_gpu() -> bool:
    """True when the CUDA driver loads and reports a device. Asks the driver
    through ctypes, so it initialises neither CuPy nor Numba."""
    try:
        libcuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    count = ctypes.c_int(0)
    if libcuda.cuInit(0) != 0 or libcuda.cuDeviceGetCount(ctypes.byref(count)) != 0:
        return False
    return count.value > 0


# Numba reads NUMBA_ENABLE_CUDASIM when it is first imported: with no GPU,
# run its CUDA simulator (one Python thread per GPU thread: keep sizes small).
if "numba" not in sys.modules and not has_gpu():
    os.environ.setdefault("NUMBA_ENABLE_CUDASIM", "1")
# --8<-- [end:pick_target]

# %%
# --8<-- [start:load_cuda]
import functools
from pathlib import Path


def find_cuda_source(name: str) -> Path:
    """The CUDA C file `name`: beside this script (an example copied with its
    .cu file), else in the handbook's kernels/cuda/ (run from the repository
    or from examples/)."""
    here = Path(__file__).resolve().parent if "__file__" in globals() else Path.cwd()
    for folder in (here, here / "cuda", here.parent / "kernels" / "cuda", Path.cwd() / "kernels" / "cuda"):
        if (folder / name).is_file():
            return folder / name
    raise FileNotFoundError(f"{name}: copy it beside this script (it is in the handbook's kernels/cuda/)")


@functools.cache
def load_cuda(name: str):
    """kernels/cuda/<name> compiled once per process by CuPy's RawModule (NVRTC)."""
    import cupy as cp

    return cp.RawModule(code=find_cuda_source(name).read_text(), options=("--std=c++17",))
# --8<-- [end:load_cuda]

# %%
import argparse  # noqa: E402
import math  # noqa: E402

# %% [markdown]
# ## The Numba steps
#
# Copies of the handbook's kernels (kernels/reduction.py). Each leaves one
# partial sum per block in `partial`.

# %%
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


# %% [markdown]
# ## Launch one step and check it
#
# `partial` is poisoned with NaN first: a block that writes nothing leaves a
# NaN, and the sum of the partials (added on the host, in float64) is NaN.

# %%
# --8<-- [start:numba_sum]
import numpy as np  # noqa: E402
from numba import cuda  # noqa: E402


def sum_numba(kernel, x, blocks, threads):
    """One launch of a ladder step on host array x: blocks x threads, one
    partial sum per block; returns the partials added on the host (float64)."""
    partial = cuda.to_device(np.full(blocks, np.nan, dtype=np.float32))  # poison
    kernel[blocks, threads](cuda.to_device(x), partial, x.size)
    return partial.copy_to_host().sum(dtype=np.float64)
# --8<-- [end:numba_sum]


# %%
def check_numba_ladder(n, threads=256, seed=0):
    """Every Numba step against the float64 sum of the same input."""
    from numba import config, cuda

    x = np.random.default_rng(seed).random(n, dtype=np.float32)  # uniform [0, 1): never zeros
    want = x.sum(dtype=np.float64)
    sms = 1 if config.ENABLE_CUDASIM else cuda.get_current_device().MULTIPROCESSOR_COUNT
    steps = [  # name, kernel, blocks: one or two elements per thread, or (grid_stride) a grid sized to the GPU
        ("interleaved_modulo", reduce_interleaved_modulo_kernel, math.ceil(n / threads)),
        ("sequential", reduce_sequential_kernel, math.ceil(n / threads)),
        ("first_add", reduce_first_add_kernel, math.ceil(n / (2 * threads))),
        ("warp_shuffle", reduce_warp_shuffle_kernel, math.ceil(n / (2 * threads))),
        ("grid_stride", reduce_grid_stride_kernel, min(4 * sms, math.ceil(n / threads))),
    ]
    for name, kernel, blocks in steps:
        if name == "warp_shuffle" and config.ENABLE_CUDASIM:
            print(f"numba {name:20s} skipped: the CUDA simulator has no warp shuffles")
            continue
        got = sum_numba(kernel, x, blocks, threads)
        rel = abs(got - want) / want  # NaN if a partial was never written
        assert rel < 1e-5, f"numba {name}: sum {got}, want {want}, relative error {rel:.1e}"
        print(f"numba {name:20s} n = {n:,}: max |error| = {abs(got - want):.1e} (relative {rel:.1e})")


# %% [markdown]
# ## The CUDA C steps through CuPy
#
# One wrapper for every step: check the arguments, size the grid, poison the
# outputs, launch. Steps 0-6 leave one partial sum per block, which
# `reduce_grid_stride` then sums until one value is left; step 7 finishes in
# one launch (its last block adds the partials) and needs a ticket counter
# that starts at zero: one per call, so that reductions running at once on
# different streams never share one.

# %%
# --8<-- [start:cupy_sum]
VARIANTS = ("interleaved_modulo", "interleaved_strided", "sequential", "first_add",
            "warp_shuffle", "grid_stride", "vectorized", "single_pass")


def reduce_sum_cupy(x, variant="single_pass", threads=256, blocks_per_sm=4):
    """Sum of a float32 CuPy vector by one step of the ladder; a 0-d array."""
    import math

    import cupy as cp
    import numpy as np

    if not isinstance(x, cp.ndarray) or x.dtype != cp.float32 or x.ndim != 1 or not x.flags.c_contiguous:
        raise TypeError(f"x must be a contiguous 1-D float32 cupy array, got {type(x).__name__} "
                        f"{getattr(x, 'dtype', '')} {getattr(x, 'shape', '')}")
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if threads not in (64, 128, 256, 512, 1024):  # the tree halves the block down to one warp
        raise ValueError(f"threads must be a power of two from 64 to 1024, got {threads}")
    n = x.size
    if n == 0:
        return cp.zeros((), dtype=cp.float32)
    if variant in ("vectorized", "single_pass") and x.data.ptr % 16:
        # float4 loads need 16-byte aligned addresses (a view such as x[1:] is
        # not): sum the 1-3 leading elements with the scalar grid-stride step,
        # the aligned rest with the vector one
        head = min(n, (16 - x.data.ptr % 16) // 4)
        return (reduce_sum_cupy(x[head:], variant, threads, blocks_per_sm)
                + reduce_sum_cupy(x[:head], "grid_stride", threads, blocks_per_sm))
    per_block = threads * (2 if variant in ("first_add", "warp_shuffle") else 1)  # elements per block
    blocks = (n + per_block - 1) // per_block  # whole blocks: the last one is partly idle
    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    if variant in ("grid_stride", "vectorized", "single_pass"):  # a grid sized to the GPU: threads loop
        blocks = min(blocks, sms * blocks_per_sm)
    module = load_cuda("reduction.cu")
    partial = cp.full(blocks, cp.nan, dtype=cp.float32)  # poison: a block that writes nothing leaves NaN
    if variant == "single_pass":  # one launch: the last block to finish adds the partials
        total = cp.full((), cp.nan, dtype=cp.float32)
        ticket = cp.zeros((), dtype=cp.uint32)  # this call's own counter, from zero
        module.get_function("reduce_single_pass")(
            (blocks,), (threads,), (x, partial, np.int64(n), ticket, total), shared_mem=threads * 4)
        return total
    module.get_function(f"reduce_{variant}")((blocks,), (threads,), (x, partial, np.int64(n)),
                                             shared_mem=threads * 4)  # blockDim.x floats
    while partial.size > 1:  # the partials, by reduce_grid_stride: a few hundred at most after one pass
        x = partial
        blocks = min(sms * blocks_per_sm, math.ceil(x.size / threads))
        partial = cp.full(blocks, cp.nan, dtype=cp.float32)
        module.get_function("reduce_grid_stride")((blocks,), (threads,), (x, partial, np.int64(x.size)),
                                                  shared_mem=threads * 4)
    return partial.reshape(())
# --8<-- [end:cupy_sum]


# %%
# --8<-- [start:cupy_ladder]
def cupy_ladder(n, threads=256, reps=20, check_sizes=(1, 33, 2**20 + 7), seed=0):
    """Every CUDA C step checked against NumPy (float64) at check_sizes (not
    multiples of the block), then timed with CUDA events on n elements against
    cupy.sum (CUB) on the same data; returns {variant: ms}."""
    import cupy as cp
    import numpy as np

    rng = np.random.default_rng(seed)
    inputs = [rng.random(size, dtype=np.float32) for size in check_sizes]  # uniform [0, 1): never zeros
    x = cp.asarray(rng.random(n, dtype=np.float32))
    start, stop = cp.cuda.Event(), cp.cuda.Event()

    def time_ms(fn):  # mean time of one call over reps calls, after a warm-up call
        fn()
        start.record()
        for _ in range(reps):
            fn()
        stop.record()
        stop.synchronize()
        return cp.cuda.get_elapsed_time(start, stop) / reps

    times = {"cupy.sum": time_ms(lambda: cp.sum(x))}
    for variant in VARIANTS:
        errors = []
        for x_host in inputs:
            x_dev = cp.asarray(x_host)
            for view in (x_dev, x_dev[1:]):  # x[1:] is not 16-byte aligned: the float4 steps take a scalar head
                want = float(cp.asnumpy(view).sum(dtype=np.float64))
                got = float(reduce_sum_cupy(view, variant, threads))
                rel = abs(got - want) / max(want, 1e-30)  # NaN if a kernel left its output unwritten
                assert rel < 1e-5, f"{variant}, n = {view.size}: sum {got}, want {want}, relative error {rel:.1e}"
                errors.append(rel)
        times[variant] = time_ms(lambda: reduce_sum_cupy(x, variant, threads))
        print(f"cupy {variant:20s} max |error| / sum = {max(errors):.1e}  {times[variant]:8.4f} ms  "
              f"{x.nbytes / times[variant] / 1e6:7.0f} GB/s  {times['cupy.sum'] / times[variant]:5.2f}x cupy.sum")
    return times
# --8<-- [end:cupy_ladder]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="The reduction ladder, checked against NumPy.")
    p.add_argument("--size", type=int, default=None,
                   help="elements to sum (default 2^26 + 7; 1000 in Numba's simulator)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    if args.size is None:
        args.size = 1000 if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else 2**26 + 7
    if args.impl in ("all", "numba"):
        from numba import config

        check_numba_ladder(args.size, threads=64 if config.ENABLE_CUDASIM else 256)
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
            return
        cupy_ladder(args.size)


if __name__ == "__main__":
    main()
