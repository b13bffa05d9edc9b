"""Matrix transpose out = x.T (float32): the shared-memory ladder in CuPy
(CUDA C) and Numba.

CUDA C steps (kernels/cuda/transpose.cu), in ladder order:
    naive, smem, padded, coarsened
and `copy_tiled`, the same tiles as `coarsened` copied without transposing
(the yardstick of NVIDIA's "An Efficient Matrix Transpose in CUDA C/C++").
Step 4 is a template, (TILE, RY, VEC); COARSENED is its default and TUNING
the configurations the bench sweeps (kernels/bench/transpose.py).
Numba steps (this file): naive, padded, coarsened; all run in the CUDA
simulator too (at tiny sizes: it is slow).

x is rows x cols, row-major; out is cols x rows: out[c, r] = x[r, c], for
any rows, cols >= 1 (every kernel guards its tails). A transpose moves
values without arithmetic, so the result is exact.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path

import numpy as np

from . import checks
from .device import CUDA_DIR, cupy_module

CUDA_SOURCE = Path(__file__).with_name("cuda") / "transpose.cu"
VARIANTS = ("naive", "smem", "padded", "coarsened")
NUMBA_VARIANTS = ("naive", "padded", "coarsened")
MAX_ELEMENTS = 2**31 - 1  # the kernels index with int
MAX_GRID_Y = 65535        # blocks along y: one per TILE rows of x

# --8<-- [start:numba_tile]
TILE, ROWS = 32, 8  # steps 2-3 (and Numba): 32 x 32 tiles, 32 x 8 threads
TILE_PADDED = TILE + 1  # a padded tile row (a shared array's shape must be constants)
# --8<-- [end:numba_tile]
NAIVE_BLOCK = (32, 8)

# Step 4's knobs, (TILE, RY, VEC): a TILE x TILE tile, (TILE / VEC) x RY
# threads, VEC-wide accesses; each thread moves TILE * VEC / RY elements.
# The default must match `namespace co` in transpose.cu (a test checks).
COARSENED = (64, 16, 4)
TUNING = (
    (64, 16, 4),  # the default: 16 elements per thread, 4 float4 loads, 256 threads, 32 registers
    (64, 8, 4),   # twice the loads in flight per thread (8 float4), 128 threads
    (64, 4, 4),   # four times (16 float4, 64 elements), 64 threads, ~80 registers
    (32, 8, 4),   # float4 on 32 x 32 tiles: 128-byte row pieces of out instead of 256
    (64, 8, 2),   # float2: does the width of an access matter?
    (64, 8, 1),   # coarsening without vectors: 8 floats per thread, 512 threads
    (32, 8, 1),   # step 3's shape with the XOR swizzle instead of the padding (a control)
)


def check_operands(x, out=None, *, lib: str, transpose: bool = True) -> tuple[int, int]:
    """x (rows x cols) and out (cols x rows, or rows x cols for a copy; None:
    the wrapper allocates it): float32, 2-D, C-contiguous device arrays (lib
    "cupy" or "numba"); returns (rows, cols). The wrappers then check that
    out shares no memory with x (`checks.require_no_overlap`)."""
    device_check = {"cupy": checks.require_cupy_array, "numba": checks.require_numba_array}.get(lib)
    for name, a in (("x", x), ("out", out)):
        if a is None:
            continue
        if device_check is not None:
            device_check(name, a)
        checks.require_dtype(name, a, np.float32)
        checks.require_ndim(name, a, 2)
        checks.require_contiguous(name, a)
    rows, cols = (int(s) for s in x.shape)
    if out is not None:
        want = (cols, rows) if transpose else (rows, cols)
        if tuple(out.shape) != want:
            what = "x.T" if transpose else "x"
            raise ValueError(f"out must have the shape of {what}, {want}, for x of shape {(rows, cols)}; "
                             f"got {tuple(out.shape)}")
    if rows * cols > MAX_ELEMENTS:
        raise ValueError(f"x has 2^31 elements or more ({rows} x {cols}): the kernels index with 32-bit int")
    return rows, cols


def check_config(config) -> tuple[int, int, int]:
    """A (TILE, RY, VEC) of step 4: TILE a multiple of 32 whose tile fits
    48 KB of static shared memory, VEC 1, 2 or 4, RY dividing TILE / VEC,
    whole warps of at most 1024 threads."""
    try:
        tile, ry, vec = (int(v) for v in config)
    except (TypeError, ValueError):
        raise TypeError(f"config must be a (TILE, RY, VEC) tuple of ints, got {config!r}") from None
    threads = tile // vec * ry if vec else 0
    if (tile < 32 or tile % 32 or tile * tile * 4 > 48 * 1024 or vec not in (1, 2, 4) or ry < 1
            or (tile // vec) % ry or threads % 32 or threads > 1024):
        raise ValueError(f"config (TILE, RY, VEC) = {config!r} is not a valid step-4 shape: TILE a multiple "
                         "of 32 up to 96, VEC 1, 2 or 4, RY dividing TILE / VEC, TILE / VEC * RY a multiple "
                         "of 32 up to 1024 threads")
    return tile, ry, vec


def config_name(config) -> str:
    """coarsened_<TILE>x<RY>x<VEC>, the variant name of a bench record."""
    return "coarsened_{}x{}x{}".format(*config)


def grid(variant: str, rows: int, cols: int, config=None) -> tuple[tuple, tuple]:
    """(grid, block) of a CUDA C step ("copy_tiled" too): blocks along x
    cover the columns of x, blocks along y its rows."""
    if variant == "naive":
        (bx, by), tile_x, tile_y = NAIVE_BLOCK, NAIVE_BLOCK[0], NAIVE_BLOCK[1]
    elif variant in ("smem", "padded"):
        bx, by, tile_x, tile_y = TILE, ROWS, TILE, TILE
    elif variant in ("coarsened", "copy_tiled"):
        tile, ry, vec = check_config(COARSENED if config is None else config)
        bx, by, tile_x, tile_y = tile // vec, ry, tile, tile
    else:
        raise ValueError(f"variant must be one of {VARIANTS + ('copy_tiled',)}, got {variant!r}")
    blocks = (math.ceil(cols / tile_x), math.ceil(rows / tile_y))
    if blocks[1] > MAX_GRID_Y:
        raise ValueError(f"x has {rows} rows: variant {variant!r} would need {blocks[1]} blocks along y "
                         f"(at most {MAX_GRID_Y})")
    return blocks, (bx, by)


def threads_of(variant: str, config=None) -> int:
    return math.prod(grid(variant, 1, 1, config)[1])


# ---------------------------------------------------------------- CuPy --

_CUDA_NAMES = {"naive": "transpose_naive", "smem": "transpose_smem", "padded": "transpose_padded",
               "coarsened": "transpose_coarsened", "copy_tiled": "copy_tiled"}


def cupy_kernel(variant: str):
    """The compiled RawKernel of a step ("copy_tiled" too), at its default shape."""
    if variant not in _CUDA_NAMES:
        raise ValueError(f"variant must be one of {tuple(_CUDA_NAMES)}, got {variant!r}")
    return cupy_module(CUDA_SOURCE.name).get_function(_CUDA_NAMES[variant])


def _template_names(config) -> tuple[str, str]:
    args = ",".join(str(v) for v in config)
    return f"transpose_coarsened_t<{args}>", f"copy_tiled_t<{args}>"


@functools.cache
def _config_module(config):
    import cupy as cp

    return cp.RawModule(code=(CUDA_DIR / CUDA_SOURCE.name).read_text(), options=("--std=c++17",),
                        name_expressions=list(_template_names(config)))


def config_kernel(config, *, transpose: bool = True):
    """Step 4's template (or copy_tiled's) instantiated at config = (TILE,
    RY, VEC): one NVRTC module per config, compiled on first use."""
    config = check_config(config)
    name = _template_names(config)[0 if transpose else 1]
    return _config_module(config).get_function(name)


def _launch(variant, x, out, rows, cols, config, transpose):
    blocks, threads = grid(variant, rows, cols, config)
    kernel = cupy_kernel(variant) if config is None else config_kernel(config, transpose=transpose)
    # arguments: in, out, rows, cols (int32: the kernels index with int)
    kernel(blocks, threads, (x, out, np.int32(rows), np.int32(cols)))


# --8<-- [start:cupy_wrapper]
def transpose_cupy(x, out=None, *, variant: str = "coarsened", config=None):
    """out = x.T for a float32 cupy matrix with one step of the ladder; out
    (cols x rows) is allocated when not given. config = (TILE, RY, VEC)
    picks another shape of step 4. Returns out."""
    import cupy as cp

    # 1. check the arguments: device arrays, dtype, rank, layout, shapes
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    if config is not None and variant != "coarsened":
        raise ValueError(f"config applies to variant 'coarsened' only, not {variant!r}")
    rows, cols = check_operands(x, out, lib="cupy")
    # 2. allocate the output (or check that it shares no memory with x:
    # the kernels cannot transpose in place, other blocks still read x)
    if out is None:
        out = cp.empty((cols, rows), dtype=cp.float32)
    else:
        checks.require_no_overlap("out", out, x=x)
    if rows * cols == 0:
        return out
    # 3. the grid: one block per tile of x;  4. launch
    _launch(variant, x, out, rows, cols, config, transpose=True)
    return out
# --8<-- [end:cupy_wrapper]


def copy_tiled_cupy(x, out=None, *, config=None):
    """out = x (a copy, same shape) with step 4's tiles and accesses: what a
    tile-shaped copy can do, the ceiling a transpose can hope for."""
    import cupy as cp

    rows, cols = check_operands(x, out, lib="cupy", transpose=False)
    if out is None:
        out = cp.empty((rows, cols), dtype=cp.float32)
    else:
        checks.require_no_overlap("out", out, x=x)
    if rows * cols == 0:
        return out
    _launch("copy_tiled", x, out, rows, cols, config, transpose=False)
    return out


# --------------------------------------------------------------- Numba --

# --8<-- [start:numba_import]
from numba import cuda, float32  # noqa: E402
# --8<-- [end:numba_import]


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


NUMBA_KERNELS = {"naive": transpose_naive_numba, "padded": transpose_padded_numba,
                 "coarsened": transpose_coarsened_numba}


def numba_grid(variant: str, rows: int, cols: int) -> tuple[tuple, tuple]:
    """(grid, block) of a Numba step: naive 32 x 8 threads, one element
    each; padded a 32 x 32 block, one element each; coarsened 32 x 8
    threads, 4 elements each."""
    if variant == "naive":
        threads, tile_x, tile_y = NAIVE_BLOCK, NAIVE_BLOCK[0], NAIVE_BLOCK[1]
    elif variant == "padded":
        threads, tile_x, tile_y = (TILE, TILE), TILE, TILE
    elif variant == "coarsened":
        threads, tile_x, tile_y = (TILE, ROWS), TILE, TILE
    else:
        raise ValueError(f"variant must be one of {NUMBA_VARIANTS}, got {variant!r}")
    blocks = (math.ceil(cols / tile_x), math.ceil(rows / tile_y))
    if blocks[1] > MAX_GRID_Y:
        raise ValueError(f"x has {rows} rows: variant {variant!r} would need {blocks[1]} blocks along y "
                         f"(at most {MAX_GRID_Y})")
    return blocks, threads


# --8<-- [start:numba_wrapper]
def transpose_numba(x, out=None, *, variant: str = "coarsened"):
    """out = x.T for a float32 Numba device matrix; returns out (cols x rows)."""
    if variant not in NUMBA_KERNELS:
        raise ValueError(f"variant must be one of {NUMBA_VARIANTS}, got {variant!r}")
    rows, cols = check_operands(x, out, lib="numba")
    if out is None:
        out = cuda.device_array((cols, rows), dtype=np.float32)
    else:
        checks.require_no_overlap("out", out, x=x)  # no transpose in place
    if rows * cols == 0:
        return out
    blocks, threads = numba_grid(variant, rows, cols)
    NUMBA_KERNELS[variant][blocks, threads](x, out, rows, cols)
    return out
# --8<-- [end:numba_wrapper]
