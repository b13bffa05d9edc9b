# %% [markdown]
# # Vector add: the CUDA programming model in one kernel
#
# `out[i] = a[i] + b[i]` on the GPU, twice: with CuPy (the CUDA C kernel in
# `kernels/cuda/vector_add.cu`, compiled by `cupy.RawModule`) and with Numba
# (`kernels/vector_add.py`). Each launch is a grid of blocks of threads, one
# element per thread; each result is checked against NumPy in float64.
#
# Run:
#
#     python examples/vector_add.py                     # n = 1,000,003, both
#     python examples/vector_add.py --size 1000 --impl numba
#
# Without a GPU the Numba part runs in Numba's CUDA simulator (keep n small:
# it runs one Python thread per GPU thread) and the CuPy part is skipped.

# %%
import argparse
import sys
import time
from pathlib import Path

import numpy as np

# The repo root holds kernels/ (in a notebook, start Jupyter in examples/).
ROOT = Path(__file__).resolve().parents[1] if "__file__" in globals() else Path.cwd().parent
sys.path.insert(0, str(ROOT))
import kernels  # noqa: F401  (picks Numba's simulator when there is no GPU)
from kernels.device import has_gpu, numba_simulator
from kernels.vector_add import vector_add_grid_stride_kernel, vector_add_kernel

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
def add_grid_stride_numba(a_host, b_host, blocks=2, threads=64):
    n = a_host.size
    a = cuda.to_device(a_host)
    b = cuda.to_device(b_host)
    out = cuda.to_device(np.full(n, np.nan, dtype=np.float32))  # poison
    vector_add_grid_stride_kernel[blocks, threads](a, b, out, n)
    return out.copy_to_host()
# --8<-- [end:grid_stride_launch]


# %% [markdown]
# ## Launch the CUDA C kernel through CuPy
#
# `vector_add_cupy` checks its arguments, picks the grid and launches the
# `RawKernel`; here we only move the data.

# %%
# --8<-- [start:cupy_launch]
def add_with_cupy(a_host, b_host, threads=256):
    import cupy as cp

    from kernels.vector_add import vector_add_cupy

    a = cp.asarray(a_host)
    b = cp.asarray(b_host)
    out = cp.full(a.size, cp.nan, dtype=cp.float32)  # poison
    vector_add_cupy(a, b, out, threads=threads)
    return cp.asnumpy(out)
# --8<-- [end:cupy_launch]


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
# A 512 x 512 block would be 262,144 threads: the launch itself fails.

# %%
# --8<-- [start:too_big_block]
def launch_512x512_block():
    import cupy as cp
    import numpy as np

    from kernels.vector_add import cupy_kernel

    limit = cp.cuda.Device().attributes["MaxThreadsPerBlock"]
    x = cp.ones(512 * 512, dtype=cp.float32)
    try:
        cupy_kernel("guard")((1,), (512, 512), (x, x, x, np.int64(x.size)))
        cp.cuda.Device().synchronize()
    except cp.cuda.driver.CUDADriverError as err:
        return f"limit {limit} threads per block; 512 x 512 = {512 * 512}: {err}"
    raise AssertionError("a 512 x 512 block launched; the limit is 1024 threads")
# --8<-- [end:too_big_block]


# %% [markdown]
# ## Time it
#
# The harness in `kernels/harness.py` times the kernel with CUDA events
# (warm-up, median of many samples). `make bench` does this properly, over
# many sizes and against the copy ceiling; this is one line for one size.

# %%
def time_cupy(n, threads=256):
    import cupy as cp

    from kernels import harness
    from kernels.vector_add import vector_add_cupy

    a, b = (cp.random.standard_normal(n, dtype=cp.float32) for _ in range(2))
    out = cp.empty_like(a)
    t = harness.time_gpu(lambda: vector_add_cupy(a, b, out, threads=threads))
    print(f"cupy vector_add: n = {n:,}: {t['ms']:.4f} ms, "
          f"{12 * n / (t['ms'] * 1e-3) / 1e9:.0f} GB/s (12 bytes per element)")


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="Vector add in CuPy and Numba, checked against NumPy.")
    p.add_argument("--size", type=int, default=1_000_003, help="number of elements")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    p.add_argument("--threads", type=int, default=256, help="threads per block")
    args, _ = p.parse_known_args(argv)  # ignore a notebook kernel's own arguments
    if args.impl in ("all", "numba"):
        t0 = time.perf_counter()
        print("numba:", end=" ")
        check(lambda a, b: add_with_numba(a, b, args.threads), args.size)
        where = "Numba's CUDA simulator" if numba_simulator() else "the GPU"
        print("numba grid-stride, 2 blocks of 64 threads:", end=" ")
        check(add_grid_stride_numba, args.size)
        print(f"numba: ran on {where} in {time.perf_counter() - t0:.2f} s (with copies and JIT)")
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
        else:
            print("cupy:", end=" ")
            check(lambda a, b: add_with_cupy(a, b, args.threads), args.size)
            time_cupy(args.size, args.threads)
            print(launch_512x512_block())


if __name__ == "__main__":
    main()
