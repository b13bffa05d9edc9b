# %% [markdown]
# # Matrix transpose: shared memory, bank conflicts and bytes in flight
#
# out = x.T in float32, step by step: naive, a shared-memory tile, the tile
# padded, a coarsened tile with float4 accesses, and the Numba steps; each
# checked against NumPy, then timed against a device copy.

# %%
"""Matrix transpose out = x.T in float32, step by step (transpose.cu):
naive (strided writes), a shared-memory tile (coalesced writes, 32-way
bank conflicts), the tile padded (no conflicts), and a coarsened tile
(float4, 16 elements per thread), plus the Numba steps.

Each step is checked against NumPy, exactly (a transpose computes
nothing), with out poisoned with NaN; the CUDA C steps also must write
nothing past the end of out. On a GPU each step is then timed against a
device-to-device copy of the same bytes.

Run:

    python transpose.py                     # 1000 x 1013 checks, then 8192^2 timings
    python transpose.py --size 1000 --impl numba

Copy with it: kernels/cuda/transpose.cu (beside this file). Needs numpy and
numba(-cuda); cupy for the CUDA C part. Without a GPU the Numba steps run
in the CUDA simulator at 33 x 65 (one Python thread per GPU thread) and the
CuPy part is skipped. A wrong result fails an assertion, so the script
exits non-zero.
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

# %%
# --8<-- [start:check]
import numpy as np


def check_transpose(transpose_fn, rows, cols, seed=0):
    """transpose_fn(x) -> out on host arrays; out must be x.T exactly (a
    transpose moves values, it computes nothing; NaN, where an element was
    never written, fails too)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols), dtype=np.float32)  # random, never zeros
    out = transpose_fn(x)
    np.testing.assert_array_equal(out, x.T)
    print(f"{rows}x{cols}: max |error| = {np.max(np.abs(out - x.T)):.1e}")
# --8<-- [end:check]


# %% [markdown]
# ## The CUDA C steps through CuPy
#
# One launcher for the four steps: check the arguments, one block per tile
# of x, launch. Step 4 is a template; `transpose_coarsened_config`
# compiles another shape of it by name.

# %%
# --8<-- [start:cupy_transpose]
def transpose_cupy(x, out, *, variant="coarsened"):
    """out = x.T with one step of transpose.cu: x rows x cols, out cols x
    rows, both C-contiguous float32 cupy matrices. Returns out."""
    import cupy as cp
    import numpy as np

    # 1. check the arguments before anything reaches the GPU
    if variant not in ("naive", "smem", "padded", "coarsened"):
        raise ValueError(f"variant must be naive, smem, padded or coarsened, got {variant!r}")
    for name, a in (("x", x), ("out", out)):
        if a.ndim != 2 or a.dtype != np.float32 or not a.flags.c_contiguous:
            raise ValueError(f"{name} must be a C-contiguous 2-D float32 array, got {a.dtype} {a.shape}")
    rows, cols = x.shape
    if out.shape != (cols, rows) or rows * cols >= 2**31:  # the kernels index with int
        raise ValueError(f"out must have shape {(cols, rows)} (x has {x.shape}, under 2^31 elements)")
    if cp.may_share_memory(out, x):  # no transpose in place: other blocks still read x
        raise ValueError("out must not overlap x: other blocks still read x while out is written")
    # 2. the grid: one block per tile of x (naive: per 32 x 8 piece, one element per thread)
    tile, threads = {"naive": ((32, 8), (32, 8)), "smem": ((32, 32), (32, 8)),
                     "padded": ((32, 32), (32, 8)), "coarsened": ((64, 64), (16, 16))}[variant]
    blocks = ((cols - 1) // tile[0] + 1, (rows - 1) // tile[1] + 1)
    # 3. launch: arguments in, out, rows, cols (int32)
    if rows * cols:
        kernel = load_cuda("transpose.cu").get_function(f"transpose_{variant}")
        kernel(blocks, threads, (x, out, np.int32(rows), np.int32(cols)))
    return out


def transpose_coarsened_config(x, out, config=(32, 8, 4)):
    """Step 4 at another shape (TILE, RY, VEC): the template
    transpose_coarsened_t instantiated by name (one NVRTC module per
    shape), TILE x TILE tiles, (TILE / VEC) x RY threads. Returns out."""
    import cupy as cp
    import numpy as np

    tile, ry, vec = config
    rows, cols = x.shape
    blocks = ((cols - 1) // tile + 1, (rows - 1) // tile + 1)
    if out.shape != (cols, rows) or x.dtype != np.float32 or out.dtype != np.float32:
        raise ValueError(f"x must be float32 and out float32 of shape {(cols, rows)}")
    if cp.may_share_memory(out, x):
        raise ValueError("out must not overlap x: other blocks still read x while out is written")
    name = f"transpose_coarsened_t<{tile},{ry},{vec}>"
    module = cp.RawModule(code=find_cuda_source("transpose.cu").read_text(), options=("--std=c++17",),
                          name_expressions=[name])
    module.get_function(name)(blocks, (tile // vec, ry), (x, out, np.int32(rows), np.int32(cols)))
    return out
# --8<-- [end:cupy_transpose]


# %%
# --8<-- [start:cupy_check]
def check_transpose_cupy(transpose, rows, cols, seed=0):
    """transpose(x, out) on cupy matrices must leave out = x.T exactly and
    write nothing past the end of out: out is the front of a longer buffer
    filled with NaN, whose tail must still be NaN afterwards (a tail tile
    stored without its bounds check lands there)."""
    import cupy as cp
    import numpy as np

    x = cp.asarray(np.random.default_rng(seed).standard_normal((rows, cols), dtype=np.float32))
    buf = cp.full(rows * cols + 64 * max(rows, cols), cp.nan, dtype=cp.float32)
    out = buf[:rows * cols].reshape(cols, rows)
    transpose(x, out)
    np.testing.assert_array_equal(out.get(), x.get().T)
    assert bool(cp.isnan(buf[rows * cols:]).all()), "a store past the end of out"
    print(f"{rows}x{cols}: exact, nothing written past out, max |error| = 0")


def check_cupy_ladder(shapes=((1000, 1013), (1024, 1012), (1, 1))):
    """Every CUDA C step, and step 4 at another shape, at sizes that are not
    multiples of the tile (1013 columns: no float4 loads; 1012: float4
    loads in whole tiles and scalar ones at the edges)."""
    for rows, cols in shapes:
        for variant in ("naive", "smem", "padded", "coarsened"):
            print(f"{variant:12s}", end=" ")
            check_transpose_cupy(lambda x, out: transpose_cupy(x, out, variant=variant), rows, cols)
        print(f"{'(32, 8, 4)':12s}", end=" ")
        check_transpose_cupy(lambda x, out: transpose_coarsened_config(x, out, (32, 8, 4)), rows, cols)
# --8<-- [end:cupy_check]


# %%
def time_cupy_ladder(n=8192):
    """Every CUDA C step at n x n against a device-to-device copy of the
    same bytes (read + written), measured in the same run."""
    import cupy as cp
    from cupyx.profiler import benchmark

    x = cp.random.default_rng(0).standard_normal((n, n), dtype=cp.float32)
    out = cp.empty((n, n), dtype=cp.float32)
    nbytes = 2 * x.nbytes  # bytes read + bytes written
    copy_ms = np.median(benchmark(cp.copyto, (out, x), n_repeat=20).gpu_times) * 1e3
    print(f"{'device copy':12s} {copy_ms:8.4f} ms {nbytes / copy_ms / 1e6:7.0f} GB/s")
    for variant in ("naive", "smem", "padded", "coarsened"):
        ms = np.median(benchmark(transpose_cupy, (x, out), {"variant": variant}, n_repeat=20).gpu_times) * 1e3
        print(f"{variant:12s} {ms:8.4f} ms {nbytes / ms / 1e6:7.0f} GB/s  {copy_ms / ms:5.2f} x the copy")


# %% [markdown]
# ## The Numba steps
#
# naive (32 x 8 threads, one element each, no tile), padded (a 32 x 32
# block, one element each) and coarsened (32 x 8 threads, 4 elements each),
# the last two on a padded 32 x 33 tile. (The same text as the handbook's
# kernels/transpose.py.)

# %%
# --8<-- [start:numba_import]
from numba import cuda, float32  # noqa: E402
# --8<-- [end:numba_import]


# --8<-- [start:numba_tile]
TILE, ROWS = 32, 8  # steps 2-3 (and Numba): 32 x 32 tiles, 32 x 8 threads
TILE_PADDED = TILE + 1  # a padded tile row (a shared array's shape must be constants)
# --8<-- [end:numba_tile]


# --8<-- [start:numba_naive]
@cuda.jit
def transpose_naive_numba(x, out, rows, cols):
    c, r = cuda.grid(2)  # x (fastest) runs along a row of x: coalesced reads
    if r < rows and c < cols:
        out[c, r] = x[r, c]  # consecutive threads write `rows` floats apart
# --8<-- [end:numba_naive]


# --8<-- [start:numba_padded]
@cuda.jit
def transpose_padded_numba(x, out, rows, cols):
    tile = cuda.shared.array((TILE, TILE_PADDED), float32)  # + 1: no bank conflicts
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y  # a TILE x TILE block, one element each
    c = cuda.blockIdx.x * TILE + tx
    r = cuda.blockIdx.y * TILE + ty
    if r < rows and c < cols:
        tile[ty, tx] = x[r, c]
    cuda.syncthreads()  # the tile is complete before anyone reads it
    c = cuda.blockIdx.y * TILE + tx  # block (x, y) of x is block (y, x) of out
    r = cuda.blockIdx.x * TILE + ty
    if r < cols and c < rows:
        out[r, c] = tile[tx, ty]  # a column of the tile: 33 floats apart, 32 banks
# --8<-- [end:numba_padded]


# --8<-- [start:numba_coarsened]
@cuda.jit
def transpose_coarsened_numba(x, out, rows, cols):
    tile = cuda.shared.array((TILE, TILE_PADDED), float32)
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y  # TILE x ROWS threads, TILE / ROWS elements each
    c = cuda.blockIdx.x * TILE + tx
    r = cuda.blockIdx.y * TILE + ty
    for j in range(0, TILE, ROWS):
        if r + j < rows and c < cols:
            tile[ty + j, tx] = x[r + j, c]
    cuda.syncthreads()
    c = cuda.blockIdx.y * TILE + tx
    r = cuda.blockIdx.x * TILE + ty
    for j in range(0, TILE, ROWS):
        if r + j < cols and c < rows:
            out[r + j, c] = tile[tx, ty + j]
# --8<-- [end:numba_coarsened]


# %%
# --8<-- [start:numba_ladder]
def transpose_numba(x, variant):
    """out = x.T for a host float32 matrix through one Numba step (out starts as NaN)."""
    import numpy as np
    from numba import cuda

    rows, cols = x.shape
    # a block covers a TILE x TILE tile of x (naive: a 32 x 8 piece, one element per thread)
    span = (32, 8) if variant == "naive" else (TILE, TILE)
    blocks = ((cols - 1) // span[0] + 1, (rows - 1) // span[1] + 1)
    threads = {"naive": (32, 8), "padded": (TILE, TILE), "coarsened": (TILE, ROWS)}[variant]
    kernel = {"naive": transpose_naive_numba, "padded": transpose_padded_numba,
              "coarsened": transpose_coarsened_numba}[variant]
    out = cuda.to_device(np.full((cols, rows), np.nan, dtype=np.float32))  # never written: stays NaN
    kernel[blocks, threads](cuda.to_device(x), out, rows, cols)
    return out.copy_to_host()


def check_numba_ladder(rows=33, cols=65):
    """Every Numba step against NumPy at a shape that is not a multiple of the tile."""
    for variant in ("naive", "padded", "coarsened"):
        print(f"{variant:12s}", end=" ")
        check_transpose(lambda x: transpose_numba(x, variant), rows, cols)
# --8<-- [end:numba_ladder]


# %%
def time_numba_ladder(n):
    """The Numba steps at n x n on the GPU (CUDA events), against a device copy."""
    from numba import cuda

    x = cuda.to_device(np.random.default_rng(0).standard_normal((n, n), dtype=np.float32))
    out = cuda.device_array((n, n), dtype=np.float32)
    copy_ms = None
    for variant in ("copy", "naive", "padded", "coarsened"):
        span = (32, 8) if variant == "naive" else (TILE, TILE)
        blocks = ((n - 1) // span[0] + 1, (n - 1) // span[1] + 1)
        threads = {"naive": (32, 8), "padded": (TILE, TILE), "coarsened": (TILE, ROWS)}.get(variant)
        kernel = {"naive": transpose_naive_numba, "padded": transpose_padded_numba,
                  "coarsened": transpose_coarsened_numba}.get(variant)
        times = []
        for k in range(12):
            start, end = cuda.event(), cuda.event()
            start.record()
            if kernel is None:
                out.copy_to_device(x)
            else:
                kernel[blocks, threads](x, out, n, n)
            end.record()
            end.synchronize()
            if k >= 2:  # the first two: warm-up and compilation
                times.append(start.elapsed_time(end))
        ms = float(np.median(times))
        copy_ms = copy_ms or ms
        print(f"numba {variant:10s} {ms:8.4f} ms {8 * n * n / ms / 1e6:7.0f} GB/s  {copy_ms / ms:5.2f} x the copy")


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="The transpose ladder, checked against NumPy.")
    p.add_argument("--size", type=int, default=1000, help="rows of the check (cols = rows + 13)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)  # ignore a notebook kernel's own arguments
    rows, cols = args.size, args.size + 13
    n = 8192 if args.size >= 1000 else 1024  # timing size: 8192^2 is 512 MiB moved, beyond the L2 cache
    if args.impl in ("all", "numba"):
        simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
        check_numba_ladder(*((33, 65) if simulator else (rows, cols)))
        print("numba: max |error| is zero for every step")
        if not simulator:
            time_numba_ladder(n)
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
            return
        check_cupy_ladder(((rows, cols), (rows + 24, cols - 1), (1, 1)))
        print("cupy: max |error| is zero for every step")
        time_cupy_ladder(n)


if __name__ == "__main__":
    main()
