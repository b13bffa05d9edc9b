# %% [markdown]
# # Vector add: the CUDA programming model in one kernel
#
# `out[i] = a[i] + b[i]` on the GPU, twice: with CuPy (the CUDA C kernels in
# `vector_add.cu`, compiled by `cupy.RawModule`) and with Numba. Each launch
# is a grid of blocks of threads; each result is checked against NumPy in
# float64, and the script exits non-zero on a wrong answer.

# %%
"""Vector add in CUDA C (through CuPy) and in Numba, checked against NumPy.

Run:

    python examples/vector_add.py                     # both; n = 1,000,003 on a GPU
    python examples/vector_add.py --size 1000 --impl numba

Copy with it: kernels/cuda/vector_add.cu (beside this file). Needs numpy and
numba(-cuda); cupy for the CUDA C part. Without a GPU the Numba part runs in
Numba's CUDA simulator (one Python thread per GPU thread, so n defaults to
1000 there) and the CuPy part is skipped.
"""

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


import argparse
import time

# --8<-- [start:numba_import]
from numba import cuda
# --8<-- [end:numba_import]


# %% [markdown]
# ## The Numba kernels
#
# One thread per element with a bounds guard, and a grid-stride loop. (The
# same text as the handbook's kernels/vector_add.py.)

# %%
# --8<-- [start:numba_kernel]
@cuda.jit
def vector_add_kernel(a, b, out, n):
    i = cuda.grid(1)  # blockIdx.x * blockDim.x + threadIdx.x
    if i < n:         # bounds guard: the last block runs past n
        out[i] = a[i] + b[i]
# --8<-- [end:numba_kernel]


# --8<-- [start:numba_grid_stride]
@cuda.jit
def vector_add_grid_stride_kernel(a, b, out, n):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)  # gridDim.x * blockDim.x
    for i in range(start, n, stride):
        out[i] = a[i] + b[i]
# --8<-- [end:numba_grid_stride]


# %% [markdown]
# ## Launch the Numba kernel by hand
#
# Copy the inputs to the device, poison the output with NaN (an element no
# thread writes stays NaN and fails the check), round the grid up to whole
# blocks, launch, copy back.

# %%
# --8<-- [start:numba_launch]
import numpy as np
from numba import cuda


def add_with_numba(a_host, b_host, threads=256):
    n = a_host.size
    a = cuda.to_device(a_host)
    b = cuda.to_device(b_host)
    out = cuda.to_device(np.full(n, np.nan, dtype=np.float32))  # poison
    blocks = (n + threads - 1) // threads  # ceil(n / threads) whole blocks
    vector_add_kernel[blocks, threads](a, b, out, n)  # [grid, block](args)
    return out.copy_to_host()
# --8<-- [end:numba_launch]


# %% [markdown]
# ## A grid-stride loop covers any n with any grid
#
# Two blocks of 64 threads, 128 threads in all, for n elements: each thread
# handles elements i, i + 128, i + 256, ...

# %%
# --8<-- [start:grid_stride_launch]
import numpy as np
from numba import cuda


def add_grid_stride_numba(a_host, b_host, blocks=2, threads=64):
    n = a_host.size
    a = cuda.to_device(a_host)
    b = cuda.to_device(b_host)
    out = cuda.to_device(np.full(n, np.nan, dtype=np.float32))  # poison
    vector_add_grid_stride_kernel[blocks, threads](a, b, out, n)
    return out.copy_to_host()
# --8<-- [end:grid_stride_launch]


# %% [markdown]
# ## The CuPy wrapper: check, allocate, grid, launch
#
# The pattern of every chapter: reject bad arguments before anything reaches
# the GPU (naming the argument), allocate the output, round the grid up,
# launch the CUDA C kernel `vector_add` from `vector_add.cu`.

# %%
# --8<-- [start:cupy_wrapper]
def vector_add_cupy(a, b, out=None, *, threads=256):
    """out = a + b on the GPU with the CUDA C kernel `vector_add`; returns out."""
    import cupy as cp
    import numpy as np

    # 1. check the arguments: device arrays, float32, 1-D, contiguous, one shape
    arrays = {"a": a, "b": b} if out is None else {"a": a, "b": b, "out": out}
    for name, x in arrays.items():
        if not isinstance(x, cp.ndarray):
            raise TypeError(f"{name} must be a cupy.ndarray on the GPU, got "
                            f"{type(x).__module__}.{type(x).__name__} (move a host array with cupy.asarray)")
        if x.dtype != np.float32:
            raise TypeError(f"{name} must have dtype float32, got {x.dtype}")
        if x.ndim != 1:
            raise ValueError(f"{name} must be 1-D, got shape {x.shape}")
        if not x.flags.c_contiguous:
            raise ValueError(f"{name} must be C-contiguous (a strided view is not)")
        if x.shape != a.shape:
            raise ValueError(f"{name} has shape {x.shape}, but a has shape {a.shape}")
    if threads % 32 != 0 or not 32 <= threads <= 1024:
        raise ValueError(f"threads must be a multiple of 32 (whole warps) from 32 to 1024, got {threads}")
    for name, x in (("a", a), ("b", b)):  # the kernel's pointers are __restrict__
        if out is not None and cp.may_share_memory(out, x):
            raise ValueError(f"out must not overlap {name}: other threads still read {name} while out is written")
    n = a.size
    # 2. allocate the output
    if out is None:
        out = cp.empty_like(a)
    if n == 0:
        return out  # nothing to do (and a grid of 0 blocks is not a launch)
    # 3. the grid: round up to whole blocks; the kernel's guard idles the rest
    blocks = (n + threads - 1) // threads
    # 4. launch: grid, block, arguments (scalars with an explicit C type)
    kernel = load_cuda("vector_add.cu").get_function("vector_add")
    kernel((blocks,), (threads,), (a, b, out, np.int64(n)))
    return out
# --8<-- [end:cupy_wrapper]


# %% [markdown]
# ## Launch the CUDA C kernel through CuPy
#
# The same steps as with Numba: copy in, poison, launch (the wrapper picks
# the grid), copy back.

# %%
# --8<-- [start:cupy_launch]
def add_with_cupy(a_host, b_host, threads=256):
    import cupy as cp

    a = cp.asarray(a_host)
    b = cp.asarray(b_host)
    out = cp.full(a.size, cp.nan, dtype=cp.float32)  # poison
    vector_add_cupy(a, b, out, threads=threads)
    return cp.asnumpy(out)
# --8<-- [end:cupy_launch]


# %% [markdown]
# ## The grid-stride loop in CUDA C
#
# `vector_add_grid_stride` with a grid chosen by the caller: any number of
# blocks covers any n.

# %%
# --8<-- [start:grid_stride_cupy]
def add_grid_stride_cupy(a_host, b_host, blocks=2, threads=64):
    import cupy as cp
    import numpy as np

    kernel = load_cuda("vector_add.cu").get_function("vector_add_grid_stride")
    a = cp.asarray(a_host)
    b = cp.asarray(b_host)
    out = cp.full(a.size, cp.nan, dtype=cp.float32)  # poison
    kernel((blocks,), (threads,), (a, b, out, np.int64(a.size)))
    return cp.asnumpy(out)
# --8<-- [end:grid_stride_cupy]


# %% [markdown]
# ## Check against NumPy
#
# Random inputs (never zeros), a float64 reference, and a relative
# tolerance of a few float32 roundings. `assert_allclose` also fails on NaN.

# %%
# --8<-- [start:check]
import numpy as np


def check(add, n, seed=0):
    rng = np.random.default_rng(seed)
    a = rng.standard_normal(n, dtype=np.float32)
    b = rng.standard_normal(n, dtype=np.float32)
    out = add(a, b)
    ref = a.astype(np.float64) + b.astype(np.float64)
    np.testing.assert_allclose(out, ref, rtol=1e-6, atol=1e-7)
    print(f"n = {n:,}: max |error| = {np.max(np.abs(out - ref)):.2e}")
# --8<-- [end:check]


# %% [markdown]
# ## A block holds at most 1024 threads
#
# A grid of one block: 1024 threads launch; a 512 x 512 block would be
# 262,144 threads, and the launch itself fails.

# %%
# --8<-- [start:too_big_block]
def add_in_one_block(a_host, b_host, block):
    """out = a + b with a grid of ONE block of shape `block`, e.g. (1024,)
    or (512, 512); a block over the limit fails at the launch."""
    import cupy as cp
    import numpy as np

    kernel = load_cuda("vector_add.cu").get_function("vector_add")
    a = cp.asarray(a_host)
    b = cp.asarray(b_host)
    out = cp.full(a.size, cp.nan, dtype=cp.float32)  # poison
    kernel((1,), block, (a, b, out, np.int64(a.size)))  # grid: (1,), one block
    return cp.asnumpy(out)
# --8<-- [end:too_big_block]


def show_block_limit():
    import cupy as cp

    limit = cp.cuda.Device().attributes["MaxThreadsPerBlock"]
    print(f"cupy, one block of {limit} threads:", end=" ")
    check(lambda a, b: add_in_one_block(a, b, (limit,)), limit)
    x = np.ones(512 * 512, dtype=np.float32)
    try:
        add_in_one_block(x, x, (512, 512))
    except cp.cuda.driver.CUDADriverError as err:
        print(f"cupy, one block of 512 x 512 = {512 * 512:,} threads: the launch fails: {err}")
    else:
        raise AssertionError(f"a 512 x 512 block launched; the limit is {limit} threads")


# %% [markdown]
# ## Time it
#
# `cupyx.profiler.benchmark` times the wrapper with CUDA events (after a
# warm-up). `make bench` does this properly, over many sizes, with a working
# set larger than the L2 cache and against the copy ceiling; this is one
# line for one size.

# %%
def time_cupy(n, threads=256):
    import cupy as cp
    from cupyx.profiler import benchmark

    rng = cp.random.default_rng(0)
    a, b = (rng.standard_normal(n, dtype=cp.float32) for _ in range(2))
    out = cp.empty_like(a)
    t = benchmark(vector_add_cupy, (a, b, out), kwargs={"threads": threads}, n_warmup=10, n_repeat=200)
    ms = float(np.median(t.gpu_times)) * 1e3
    print(f"cupy vector_add: n = {n:,}: {ms:.4f} ms, "
          f"{12 * n / (ms * 1e-3) / 1e9:.0f} GB/s (12 bytes per element)")


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="Vector add in CuPy and Numba, checked against NumPy.")
    p.add_argument("--size", type=int, default=None,
                   help="number of elements (default 1,000,003; 1000 in Numba's simulator)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    p.add_argument("--threads", type=int, default=256, help="threads per block")
    args, _ = p.parse_known_args(argv)  # ignore a notebook kernel's own arguments
    simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
    n = args.size if args.size is not None else (1000 if simulator else 1_000_003)
    if args.impl in ("all", "numba"):
        t0 = time.perf_counter()
        print("numba:", end=" ")
        check(lambda a, b: add_with_numba(a, b, args.threads), n)
        print("numba grid-stride, 2 blocks of 64 threads:", end=" ")
        check(add_grid_stride_numba, n)
        where = "Numba's CUDA simulator" if simulator else "the GPU"
        print(f"numba: ran on {where} in {time.perf_counter() - t0:.2f} s (with copies and JIT)")
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
            return
        print("cupy:", end=" ")
        check(lambda a, b: add_with_cupy(a, b, args.threads), n)
        for blocks, threads in ((1, 32), (2, 64), (1024, 256)):  # any grid covers any n
            print(f"cupy grid-stride, grid of {blocks} x {threads} threads:", end=" ")
            check(lambda a, b: add_grid_stride_cupy(a, b, blocks, threads), n)
        show_block_limit()
        time_cupy(n, args.threads)


if __name__ == "__main__":
    main()
