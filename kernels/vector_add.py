"""Vector add, out = a + b (float32), in CuPy (CUDA C) and in Numba.

Two variants of each, the ladder of the first chapter:
- `guard`: one thread per element and a bounds guard (the classic vecAdd);
- `grid_stride`: a grid sized to the GPU, each thread looping with the
  grid's stride, so any n fits any grid.
And one more in CUDA C, from the memory chapter:
- `vec4`: the grid-stride loop with 16-byte (float4) loads, two per
  operand in flight per thread; misaligned views fall back to grid_stride.
  `vec4_u1` and `vec4_u4` (one and four float4 in flight) are its tuning
  experiments.

The wrappers check their arguments (device arrays, float32, 1-D,
C-contiguous, matching shapes, an out that shares no memory with a or b)
before anything is launched.
"""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from . import checks
from .device import cupy_module, numba_simulator

CUDA_SOURCE = Path(__file__).with_name("cuda") / "vector_add.cu"
VARIANTS = ("guard", "grid_stride")  # both languages
CUPY_VARIANTS = VARIANTS + ("vec4",)  # CUDA C only
TUNING = ("vec4_u1", "vec4_u4")
_CUDA_NAMES = {"guard": "vector_add", "grid_stride": "vector_add_grid_stride", "vec4": "vector_add_vec4",
               "vec4_u1": "vector_add_vec4_u1", "vec4_u4": "vector_add_vec4_u4"}


# ---------------------------------------------------------------- CuPy --

def cupy_kernel(variant: str = "guard"):
    """The compiled RawKernel of one variant (for launching by hand)."""
    if variant not in CUPY_VARIANTS + TUNING:
        raise ValueError(f"variant must be one of {CUPY_VARIANTS + TUNING}, got {variant!r}")
    return cupy_module(CUDA_SOURCE.name).get_function(_CUDA_NAMES[variant])


def grid_stride_blocks(threads: int, sm_count: int) -> int:
    """Enough resident blocks to fill every SM (2048 threads per SM on sm_80/90)."""
    return sm_count * max(1, 2048 // threads)


def vec4_aligned(*arrays) -> bool:
    """float4 loads need 16-byte aligned addresses; a view such as a[1:] is not."""
    return all(x.data.ptr % 16 == 0 for x in arrays)


def vec4_blocks(variant: str, n: int, threads: int) -> int:
    """One wave of resident blocks (the driver's occupancy for this kernel),
    no more than the float4 count needs."""
    import cupy as cp

    dev = cp.cuda.Device()
    per_sm = _blocks_per_sm(variant, threads, dev.id)
    return max(1, min(dev.attributes["MultiProcessorCount"] * per_sm, (n // 4 + threads - 1) // threads))


@functools.cache
def _blocks_per_sm(variant: str, threads: int, device_id: int) -> int:
    """Asked of the driver once per kernel, block size and device, not per launch."""
    from .device import driver_blocks_per_sm

    return driver_blocks_per_sm(cupy_kernel(variant), threads)


def vector_add_cupy(a, b, out=None, *, threads: int = 256, variant: str = "guard"):
    """out = a + b on the GPU with the CUDA C kernel; returns out."""
    import cupy as cp

    # 1. check the arguments: device arrays, dtype, rank, layout, shape
    checks.require_vector("a", a, np.float32, lib="cupy")
    checks.require_vector_like("b", b, "a", a, np.float32, lib="cupy")
    checks.require_block_size("threads", threads)
    kernel = cupy_kernel(variant)  # rejects an unknown variant
    n = a.size
    # 2. allocate (or check) the output
    if out is None:
        out = cp.empty_like(a)
    else:
        checks.require_vector_like("out", out, "a", a, np.float32, lib="cupy")
        checks.require_no_overlap("out", out, a=a, b=b)  # the kernel's pointers are __restrict__
    if n == 0:
        return out
    if variant.startswith("vec4") and not vec4_aligned(a, b, out):
        variant, kernel = "grid_stride", cupy_kernel("grid_stride")
    # 3. the grid: round up to whole blocks, or fill the GPU once
    if variant == "guard":
        blocks = (n + threads - 1) // threads
    elif variant.startswith("vec4"):
        blocks = vec4_blocks(variant, n, threads)
    else:
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        blocks = min((n + threads - 1) // threads, grid_stride_blocks(threads, sms))
    # 4. launch: grid, block, arguments (scalars with an explicit C type)
    kernel((blocks,), (threads,), (a, b, out, np.int64(n)))
    return out


# --------------------------------------------------------------- Numba --

# --8<-- [start:numba_import]
from numba import cuda
# --8<-- [end:numba_import]


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


def numba_grid_stride_blocks(threads: int) -> int:
    """Blocks for the grid-stride variant: fill the GPU, or 2 in the simulator
    (which runs every thread as a Python thread)."""
    if numba_simulator():
        return 2
    return grid_stride_blocks(threads, cuda.get_current_device().MULTIPROCESSOR_COUNT)


def vector_add_numba(a, b, out=None, *, threads: int = 256, variant: str = "guard"):
    """out = a + b on the GPU with the Numba kernel; returns out."""
    checks.require_vector("a", a, np.float32, lib="numba")
    checks.require_vector_like("b", b, "a", a, np.float32, lib="numba")
    checks.require_block_size("threads", threads)
    if variant not in VARIANTS:
        raise ValueError(f"variant must be one of {VARIANTS}, got {variant!r}")
    n = a.shape[0]
    if out is None:
        out = cuda.device_array(n, dtype=np.float32)
    else:
        checks.require_vector_like("out", out, "a", a, np.float32, lib="numba")
        checks.require_no_overlap("out", out, a=a, b=b)
    if n == 0:
        return out
    if variant == "guard":
        blocks = (n + threads - 1) // threads
        vector_add_kernel[blocks, threads](a, b, out, n)
    else:
        blocks = min((n + threads - 1) // threads, numba_grid_stride_blocks(threads))
        vector_add_grid_stride_kernel[blocks, threads](a, b, out, n)
    return out
