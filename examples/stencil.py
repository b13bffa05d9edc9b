# %% [markdown]
# # A 5 x 5 image convolution, step by step
#
# The kernel of the four-step tuning method: every CUDA C step of the ladder
# in `stencil.cu` (compiled and launched through CuPy) and the two Numba
# steps, each checked against a float64 NumPy reference on an output
# poisoned with NaN, then timed. The script exits non-zero on a wrong answer.

# %%
"""The four-step method's 5 x 5 convolution, step by step, in CUDA C
(through CuPy) and Numba, checked against NumPy and timed.

Run:

    python examples/stencil.py                                # 2048 x 2048, every step
    python examples/stencil.py --size 100 --impl numba
    python examples/stencil.py --variant naive --impl cupy    # one CUDA C step (make profile)

Copy with it: kernels/cuda/stencil.cu (beside this file). Needs numpy and
numba(-cuda); cupy for the CUDA C steps. Without a GPU the Numba steps run
in Numba's CUDA simulator on an image of at most 40 x 40, and the CuPy part
is skipped. A wrong result (an unwritten, NaN pixel included) fails an
assertion, so the script exits non-zero.
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


# %%
import argparse
import time

# %% [markdown]
# ## The convolution in float64
#
# out[y][x] = sum over i, j of w[i][j] * x[y + i - R][x + j - R], zero
# outside the image (a correlation, as image processing and deep learning
# call "convolution": the filter is not flipped).

# %%
# --8<-- [start:reference]
import numpy as np  # noqa: E402

R = 2  # filter radius (R in kernels/cuda/stencil.cu): a 5 x 5 filter
KW = 2 * R + 1


def reference(x, w, xp=np):
    """The convolution in float64 with zero padding. xp is the array module
    (NumPy, or CuPy for a reference computed on the GPU)."""
    H, W = x.shape
    p = xp.zeros((H + 2 * R, W + 2 * R))
    p[R:R + H, R:R + W] = x
    out = xp.zeros((H, W))
    for i in range(KW):
        for j in range(KW):
            out += float(w[i, j]) * p[i:i + H, j:j + W]
    return out
# --8<-- [end:reference]


# %% [markdown]
# ## Two steps in Numba
#
# Step 2 (one thread per output, threads along a row) and step 3 (a 16 x 16
# tile plus its halo in shared memory), launched on 16 x 16 blocks.

# %%
# --8<-- [start:numba_kernels]
from numba import cuda, float32  # noqa: E402

TILE = 16  # tiled16 in Numba: 16 x 16 outputs, a (16 + 4)^2 tile in shared memory
TILE_HALO = TILE + 2 * R


@cuda.jit
def conv_coalesced_numba(x, w, out):
    col, row = cuda.grid(2)  # x along a row: coalesced
    H, W = x.shape
    if row < H and col < W:
        acc = float32(0.0)
        for i in range(KW):
            for j in range(KW):
                yy, xx = row + i - R, col + j - R
                if 0 <= yy < H and 0 <= xx < W:
                    acc += w[i, j] * x[yy, xx]
        out[row, col] = acc


@cuda.jit
def conv_tiled_numba(x, w, out):
    tile = cuda.shared.array((TILE_HALO, TILE_HALO), float32)
    H, W = x.shape
    tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
    x0, y0 = cuda.blockIdx.x * TILE, cuda.blockIdx.y * TILE
    for k in range(ty * TILE + tx, TILE_HALO * TILE_HALO, TILE * TILE):  # tile plus halo
        yy, xx = y0 + k // TILE_HALO - R, x0 + k % TILE_HALO - R
        tile[k // TILE_HALO, k % TILE_HALO] = x[yy, xx] if 0 <= yy < H and 0 <= xx < W else float32(0.0)
    cuda.syncthreads()  # the whole tile before any output reads it
    row, col = y0 + ty, x0 + tx
    if row < H and col < W:
        acc = float32(0.0)
        for i in range(KW):
            for j in range(KW):
                acc += w[i, j] * tile[ty + i, tx + j]
        out[row, col] = acc
# --8<-- [end:numba_kernels]


# --8<-- [start:numba_steps]
import math

import numpy as np
from numba import cuda


def numba_steps(H, W, seed=1):
    """Both Numba steps on one random H x W image, each checked against the
    float64 reference; returns the largest error."""
    rng = np.random.default_rng(seed)
    x_host = rng.standard_normal((H, W), dtype=np.float32)
    w_host = rng.standard_normal((KW, KW), dtype=np.float32)
    ref = reference(x_host, w_host)
    x, w = cuda.to_device(x_host), cuda.to_device(w_host)
    blocks = (math.ceil(W / TILE), math.ceil(H / TILE))  # x: along a row (columns), y: rows
    worst = 0.0
    for kernel in (conv_coalesced_numba, conv_tiled_numba):
        out = cuda.to_device(np.full((H, W), np.nan, dtype=np.float32))  # poison
        kernel[blocks, (TILE, TILE)](x, w, out)
        got = out.copy_to_host()
        # fails on NaN too: a pixel no thread wrote
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=kernel.__name__)
        worst = max(worst, float(np.max(np.abs(got - ref))))
    return worst
# --8<-- [end:numba_steps]


def time_numba(H, W, reps=20):
    """Mean time per launch of each Numba step over `reps` launches, from
    CUDA events (on a GPU: the simulator's events measure nothing)."""
    x = cuda.to_device(np.random.default_rng(0).standard_normal((H, W), dtype=np.float32))
    w = cuda.to_device(np.random.default_rng(1).standard_normal((KW, KW), dtype=np.float32))
    out = cuda.device_array((H, W), dtype=np.float32)
    blocks = (math.ceil(W / TILE), math.ceil(H / TILE))
    for kernel, name in ((conv_coalesced_numba, "coalesced"), (conv_tiled_numba, "tiled16")):
        kernel[blocks, (TILE, TILE)](x, w, out)  # compile and warm up
        start, end = cuda.event(), cuda.event()
        start.record()
        for _ in range(reps):
            kernel[blocks, (TILE, TILE)](x, w, out)
        end.record()
        end.synchronize()
        ms = start.elapsed_time(end) / reps
        print(f"numba {name:10}: {ms:8.3f} ms, {2 * KW * KW * H * W / ms / 1e9:6.2f} TFLOP/s")


# %% [markdown]
# ## The CUDA C steps through CuPy
#
# One launcher for every step of stencil.cu: check the arguments, pick the
# grid (a 1-D grid of 256-thread blocks for steps 1-2; one block per tile of
# outputs for steps 3-4), copy the filter to constant memory for step 4,
# launch.

# %%
# --8<-- [start:cupy_launch]
import math

import numpy as np

FLAT_THREADS = 256  # steps 1-2: one thread per pixel, a 1-D grid of 256-thread blocks
TILED = {  # steps 3-4: threads along x, threads along y, outputs per thread
    "tiled8": (8, 8, 1), "tiled16": (16, 16, 1), "tiled32": (32, 32, 1),
    "tiled16x4": (16, 16, 4), "tuned": (32, 8, 4),
}
VARIANTS = ("naive", "coalesced", *TILED)


def conv2d_cupy(x, w, out, variant="tuned"):
    """out = x convolved with the 5 x 5 filter w (zero padding) by the CUDA C
    step conv_<variant> of stencil.cu; float32, C-contiguous CuPy arrays."""
    import cupy as cp

    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    for name, a in (("x", x), ("w", w), ("out", out)):
        if not isinstance(a, cp.ndarray) or a.dtype != cp.float32 or not a.flags.c_contiguous:
            raise TypeError(f"{name} must be a C-contiguous float32 cupy.ndarray")
    if x.ndim != 2 or x.size == 0 or w.shape != (KW, KW) or out.shape != x.shape:
        raise ValueError(f"need a non-empty 2-D x, a {KW} x {KW} w and out shaped like x; "
                         f"got {x.shape}, {w.shape}, {out.shape}")
    for name, a in (("x", x), ("w", w)):  # the kernels' pointers are __restrict__
        if cp.may_share_memory(out, a):
            raise ValueError(f"out must not overlap {name}: neighbouring threads still read {name} "
                             "while out is written")
    H, W = x.shape
    if variant in TILED:  # steps 3-4: one block per tile of bx x rows outputs
        bx, by, per_thread = TILED[variant]
        rows = by * per_thread  # each thread computes per_thread outputs, by rows apart
        blocks, threads = (math.ceil(W / bx), math.ceil(H / rows)), (bx, by)
    else:  # steps 1-2: one thread per pixel
        blocks, threads = (math.ceil(H * W / FLAT_THREADS),), (FLAT_THREADS,)
    module = load_cuda("stencil.cu")
    if variant == "tuned":  # step 4 reads the filter from __constant__ c_w: copy it there first
        c_w = cp.ndarray((KW * KW,), dtype=cp.float32, memptr=module.get_global("c_w"))
        c_w[...] = w.ravel()  # on the current stream, before the launch
    module.get_function(f"conv_{variant}")(blocks, threads, (x, w, out, np.int32(H), np.int32(W)))
    return out
# --8<-- [end:cupy_launch]


# %% [markdown]
# ## Check and time every CUDA C step

# %%
# --8<-- [start:cupy_steps]
def cupy_steps(H, W, variants=VARIANTS, seed=0):
    """Each CUDA C step on one random H x W image: checked against the
    float64 reference, then timed (median of CUDA-event samples). Returns
    the largest error."""
    import cupy as cp
    from cupyx.profiler import benchmark

    rng = np.random.default_rng(seed)
    x_host = rng.standard_normal((H, W), dtype=np.float32)
    w_host = rng.standard_normal((KW, KW), dtype=np.float32)
    ref = reference(x_host, w_host)
    x, w = cp.asarray(x_host), cp.asarray(w_host)
    worst = 0.0
    for variant in variants:
        out = cp.full((H, W), cp.nan, dtype=cp.float32)  # poison
        got = cp.asnumpy(conv2d_cupy(x, w, out, variant))
        # fails on NaN too: a pixel no thread wrote
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4, err_msg=variant)
        err = float(np.max(np.abs(got - ref)))
        worst = max(worst, err)
        t = benchmark(conv2d_cupy, (x, w, out, variant), n_warmup=3, n_repeat=20)
        ms = float(np.median(t.gpu_times)) * 1e3
        print(f"{variant:10}: {ms:8.3f} ms, {2 * KW * KW * H * W / ms / 1e9:6.2f} TFLOP/s, "
              f"max |error| {err:.1e}")
    return worst
# --8<-- [end:cupy_steps]


# %%
def main(argv=None) -> None:
    p = argparse.ArgumentParser(description="The four-step method's convolution, step by step.")
    p.add_argument("--size", type=int, default=2048, help="image side (pixels)")
    p.add_argument("--impl", choices=("all", "cupy", "numba"), default="all")
    p.add_argument("--variant", choices=VARIANTS, default=None, help="one CUDA C step only")
    args, _ = p.parse_known_args(argv)  # ignore a notebook kernel's own arguments
    n = args.size
    if args.impl in ("all", "numba"):
        simulated = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
        m = min(n, 40) if simulated else n
        if m != n:
            print(f"numba: the CUDA simulator is slow; using a {m} x {m} image")
        t0 = time.perf_counter()
        err = numba_steps(m, m)
        assert err < 1e-3, err
        where = "Numba's CUDA simulator" if simulated else "the GPU"
        print(f"numba steps ({m} x {m}): max |error| = {err:.2e}; "
              f"ran on {where} in {time.perf_counter() - t0:.2f} s (with copies and JIT)")
        if not simulated:
            time_numba(m, m)
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
        else:
            err = cupy_steps(n, n, [args.variant] if args.variant else VARIANTS)
            assert err < 1e-3, err
            print(f"cupy steps ({n} x {n}): max |error| = {err:.2e}")


if __name__ == "__main__":
    main()  # a failed check raises: a non-zero exit
