"""2-D convolution with a 5 x 5 filter: the kernel of the four-step tuning
method, in CuPy (CUDA C, kernels/cuda/stencil.cu) and Numba. "Convolution"
as image-processing and deep-learning code use the word: strictly it is a
correlation (the filter is not flipped); the reference does the same.

CUDA C variants, by step of the method:
    1 naive        one thread per output, column-major thread order (uncoalesced)
    2 coalesced    row-major thread order
    3 tiled8, tiled16, tiled32   shared-memory tiles of 8x8, 16x16, 32x32 outputs
    3 tiled16x4    16x16 threads, 4 outputs per thread (the source's final choice)
    4 tuned        32x8 threads x 4 outputs, filter in constant memory, unrolled FMAs
Numba: coalesced (2-D grid) and tiled16 run anywhere (the simulator too).
"""

from __future__ import annotations

import math
from pathlib import Path

from . import checks
from .device import cupy_module

CUDA_SOURCE = Path(__file__).with_name("cuda") / "stencil.cu"
VARIANTS = ("naive", "coalesced", "tiled8", "tiled16", "tiled32", "tiled16x4", "tuned")
STEP = {"naive": 1, "coalesced": 2, "tiled8": 3, "tiled16": 3, "tiled32": 3, "tiled16x4": 3, "tuned": 4}
# (BX, BY, OUT): block shape and outputs per thread of the tiled steps
_TILED = {"tiled8": (8, 8, 1), "tiled16": (16, 16, 1), "tiled32": (32, 32, 1), "tiled16x4": (16, 16, 4),
          "tuned": (32, 8, 4)}
FLAT_THREADS = 256  # steps 1-2: a 1-D grid of 256-thread blocks


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


def flops(H: int, W: int) -> int:
    """Useful floating-point operations: one multiply and one add per tap."""
    return 2 * KW * KW * H * W


def check_operands(x, w, out, lib: str) -> tuple[int, int]:
    (checks.require_cupy_array if lib == "cupy" else checks.require_numba_array)("x", x)
    (checks.require_cupy_array if lib == "cupy" else checks.require_numba_array)("w", w)
    for name, a in (("x", x), ("w", w)):
        checks.require_dtype(name, a, np.float32)
        checks.require_ndim(name, a, 2)
        checks.require_contiguous(name, a)
    if tuple(w.shape) != (KW, KW):
        raise ValueError(f"w must have shape ({KW}, {KW}), got {tuple(w.shape)}")
    H, W = x.shape
    if H == 0 or W == 0:
        raise ValueError(f"x must not be empty, got shape {tuple(x.shape)}")
    if H * W >= 2**31:
        raise ValueError(f"x must have fewer than 2^31 pixels, got {H * W}")
    if out is not None:
        (checks.require_cupy_array if lib == "cupy" else checks.require_numba_array)("out", out)
        checks.require_dtype("out", out, np.float32)
        checks.require_contiguous("out", out)
        checks.require_same_shape("out", out, "x", x)
        # x and w are __restrict__: a pixel written early would be read as
        # input by the neighbouring threads that have not loaded it yet
        checks.require_no_overlap("out", out, x=x, w=w)
    return H, W


# ---------------------------------------------------------------- CuPy --

def cupy_kernel(variant: str):
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    return cupy_module(CUDA_SOURCE.name).get_function(f"conv_{variant}")


def grid(variant: str, H: int, W: int) -> tuple[tuple, tuple]:
    """(grid, block) of a CUDA C step."""
    if variant in ("naive", "coalesced"):
        return (math.ceil(H * W / FLAT_THREADS),), (FLAT_THREADS,)
    bx, by, out = _TILED[variant]
    return (math.ceil(W / bx), math.ceil(H / (by * out))), (bx, by)


def _set_constant_filter(w) -> None:
    """Copy w into the module's __constant__ c_w (step 4 reads it there). The
    copy is ordered on the current stream, before the launch that uses it.
    There is one c_w per device: launches of step 4 with different filters
    on different streams at the same time would race for it."""
    import cupy as cp

    ptr = cupy_module(CUDA_SOURCE.name).get_global("c_w")
    cp.ndarray((KW * KW,), dtype=cp.float32, memptr=ptr)[...] = w.ravel()


# --8<-- [start:cupy_wrapper]
def conv2d_cupy(x, w, out=None, *, variant: str = "tuned"):
    """out = x convolved with the 5 x 5 filter w (zero padding), float32 cupy
    arrays, with one step of the ladder; returns out."""
    import cupy as cp

    kern = cupy_kernel(variant)  # rejects an unknown variant
    H, W = check_operands(x, w, out, "cupy")
    if out is None:
        out = cp.empty_like(x)
    if variant == "tuned":
        _set_constant_filter(w)
    blocks, threads = grid(variant, H, W)
    kern(blocks, threads, (x, w, out, np.int32(H), np.int32(W)))
    return out
# --8<-- [end:cupy_wrapper]


# --------------------------------------------------------------- Numba --

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


NUMBA_VARIANTS = ("coalesced", "tiled16")


def conv2d_numba(x, w, out=None, *, variant: str = "tiled16"):
    """The Numba steps; x, w, out Numba device arrays; returns out."""
    if variant not in NUMBA_VARIANTS:
        raise ValueError(f"variant must be one of {NUMBA_VARIANTS}, got {variant!r}")
    H, W = check_operands(x, w, out, "numba")
    if out is None:
        out = cuda.device_array((H, W), dtype=np.float32)
    if variant == "coalesced":
        conv_coalesced_numba[(math.ceil(W / 16), math.ceil(H / 16)), (16, 16)](x, w, out)
    else:
        conv_tiled_numba[(math.ceil(W / TILE), math.ceil(H / TILE)), (TILE, TILE)](x, w, out)
    return out
