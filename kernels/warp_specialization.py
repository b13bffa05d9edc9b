"""Topic warp_specialization: launch wrappers for the streaming ladder
(kernels/cuda/warp_specialization.cu) and its Numba steps."""

from __future__ import annotations

import functools
from pathlib import Path

import numpy as np

from . import checks
from .checks import overlaps  # the Numba wrappers below call it as the examples do
from .device import CudaBuild, device_info, driver_blocks_per_sm, select_numba_target
from .ws_primitives import compile_options

select_numba_target()

from numba import cuda, float32  # noqa: E402  (after select_numba_target)

CUDA_SOURCE = Path(__file__).with_name("cuda") / "warp_specialization.cu"

# --8<-- [start:ws_launch]
TILE = 2048  # floats per tile, as in warp_specialization.cu
STEPS = ("ws_sync", "ws_regbuf", "ws_cpasync", "ws_pipeline", "ws_tma", "ws_tma_regs")
THREADS = {"ws_sync": 256, "ws_regbuf": 256, "ws_cpasync": 256, "ws_pipeline": 256, "ws_tma": 384, "ws_tma_regs": 384}
# The oldest GPU each step runs on: cp.async from 8.0, the TMA and mbarrier
# transaction counts from 9.0; setmaxnreg only on sm_90a (exactly 9.0).
NEEDS = {"ws_sync": (7, 0), "ws_regbuf": (7, 0), "ws_cpasync": (8, 0), "ws_pipeline": (8, 0),
         "ws_tma": (9, 0), "ws_tma_regs": (9, 0)}


def require_step(step: str, gpu: str, cc: tuple[int, int]) -> None:
    """Refuse a step this GPU cannot run, naming the GPU and the need."""
    if step not in STEPS:
        raise ValueError(f"step must be one of {STEPS}, got {step!r}")
    need = NEEDS[step]
    if tuple(cc) < need:
        raise RuntimeError(f"{step} needs compute capability {need[0]}.{need[1]} or newer; {gpu} is {cc[0]}.{cc[1]}")
    if step == "ws_tma_regs" and tuple(cc) != (9, 0):
        raise RuntimeError(f"ws_tma_regs needs sm_90a (setmaxnreg): compute capability 9.0, an H100 or H200; "
                           f"{gpu} is {cc[0]}.{cc[1]}")


def cuda_builds(cc: tuple[int, int] = (9, 0)) -> list[CudaBuild]:
    """How warp_specialization.cu compiles for a GPU of compute capability cc:
    sm_90a on 9.0 (setmaxnreg), the GPU's own target elsewhere (before 9.0
    the file holds steps 1-4 alone)."""
    return [CudaBuild(CUDA_SOURCE.name, CUDA_SOURCE.read_text(), compile_options(cc))]


@functools.cache
def ws_kernel(step: str, device_id: int = 0):
    import cupy as cp

    with cp.cuda.Device(device_id):
        (build,) = cuda_builds(device_info(device_id)["cc"])
        mod = cp.RawModule(code=build.code, options=build.options)
        return mod.get_function(step)


@functools.cache
def ws_blocks_per_sm(step: str, device_id: int = 0) -> int:
    """The driver's count of resident blocks (asked once): the grid fills every SM once."""
    return driver_blocks_per_sm(ws_kernel(step, device_id), THREADS[step])


def stream(x, out=None, *, k: int, step: str = "ws_regbuf", a: float = 0.999, b: float = 0.001,
           blocks: int | None = None):
    """out[i] = f^k(x[i]), f(v) = v * a + b by fmaf: float32 CuPy vectors,
    x.size a multiple of 4, both 16-byte aligned. Each block walks tiles
    TILE apart by the grid's stride; the grid fills every SM once."""
    import cupy as cp

    checks.require_vector("x", x, np.float32, lib="cupy")
    if out is None:
        out = cp.empty_like(x)
    else:
        checks.require_vector_like("out", out, "x", x, np.float32, lib="cupy")
        checks.require_no_overlap("out", out, x=x)
    if x.size % 4:
        raise ValueError(f"x.size must be a multiple of 4 (16-byte copies), got {x.size}")
    for name, v in (("x", x), ("out", out)):
        if v.data.ptr % 16:
            raise ValueError(f"{name} must start on a 16-byte boundary, got address {v.data.ptr:#x}")
    k = checks.require_int("k", k, 0, 1 << 20)
    dev = cp.cuda.Device()
    info = device_info(dev.id)
    require_step(step, info["name"], info["cc"])
    tiles = -(-x.size // TILE)
    if blocks is None:
        blocks = dev.attributes["MultiProcessorCount"] * ws_blocks_per_sm(step, dev.id)
    blocks = max(1, min(checks.require_int("blocks", blocks, 1), tiles))
    if x.size:
        ws_kernel(step, dev.id)((blocks,), (THREADS[step],),
                                (x, out, np.int64(x.size), np.int32(k), np.float32(a), np.float32(b)))
    return out


def stream_reference(x: np.ndarray, k: int, a: float = 0.999, b: float = 0.001) -> np.ndarray:
    """fmaf k times, on the host: the product of two floats is exact in
    float64, then one rounding to float32 after the add (as fmaf rounds once;
    the add in float64 may itself round, so the last bit can differ)."""
    y = np.asarray(x, dtype=np.float32)
    a64, b64 = np.float64(np.float32(a)), np.float64(np.float32(b))
    for _ in range(k):
        y = (y.astype(np.float64) * a64 + b64).astype(np.float32)
    return y
# --8<-- [end:ws_launch]


# --8<-- [start:ws_numba]
import numpy as np
from numba import cuda, float32

# Numba has no cp.async, pipeline, mbarrier, TMA or setmaxnreg: steps 1 and
# 2 of the ladder are as far as it goes. Four values per thread per tile
# piece, four independent FMA chains, as in the CUDA C steps.
TILE = 2048  # floats per tile, as in warp_specialization.cu
NB_THREADS = 256
NB_PER = TILE // 4 // NB_THREADS  # float4-sized pieces per thread per tile
NB_HELD = 4 * NB_PER  # floats each thread holds for the next tile (step 2)


@cuda.jit
def ws_sync_numba(x, out, k, a, b):
    """Step 1: every thread copies its pieces of the tile, barrier, computes, barrier."""
    buf = cuda.shared.array(TILE, float32)
    n = x.size
    base = cuda.blockIdx.x * TILE
    while base < n:
        for j in range(NB_PER):
            q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
            for e in range(4):
                if base + q + e < n:
                    buf[q + e] = x[base + q + e]
        cuda.syncthreads()
        for j in range(NB_PER):
            q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
            v0, v1, v2, v3 = buf[q], buf[q + 1], buf[q + 2], buf[q + 3]
            for _ in range(k):  # four independent chains
                v0 = cuda.fma(v0, a, b)
                v1 = cuda.fma(v1, a, b)
                v2 = cuda.fma(v2, a, b)
                v3 = cuda.fma(v3, a, b)
            if base + q + 3 < n:
                out[base + q], out[base + q + 1], out[base + q + 2], out[base + q + 3] = v0, v1, v2, v3
        cuda.syncthreads()  # the buffer is refilled next
        base += cuda.gridDim.x * TILE


@cuda.jit
def ws_regbuf_numba(x, out, k, a, b):
    """Step 2: the next tile's pieces are loaded into registers before this
    tile's arithmetic, and land while it runs."""
    buf = cuda.shared.array(TILE, float32)
    nxt = cuda.local.array(NB_HELD, float32)  # constant indices after unrolling: registers
    n = x.size
    stride = cuda.gridDim.x * TILE
    base = cuda.blockIdx.x * TILE
    for j in range(NB_PER):
        q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
        for e in range(4):
            nxt[4 * j + e] = x[base + q + e] if base + q + e < n else float32(0.0)
    while base < n:
        for j in range(NB_PER):
            q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
            for e in range(4):
                buf[q + e] = nxt[4 * j + e]
        cuda.syncthreads()
        for j in range(NB_PER):  # in flight during the arithmetic below
            q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
            for e in range(4):
                nxt[4 * j + e] = x[base + stride + q + e] if base + stride + q + e < n else float32(0.0)
        for j in range(NB_PER):
            q = 4 * (cuda.threadIdx.x + j * NB_THREADS)
            v0, v1, v2, v3 = buf[q], buf[q + 1], buf[q + 2], buf[q + 3]
            for _ in range(k):
                v0 = cuda.fma(v0, a, b)
                v1 = cuda.fma(v1, a, b)
                v2 = cuda.fma(v2, a, b)
                v3 = cuda.fma(v3, a, b)
            if base + q + 3 < n:
                out[base + q], out[base + q + 1], out[base + q + 2], out[base + q + 3] = v0, v1, v2, v3
        cuda.syncthreads()
        base += stride


NB_STEPS = {"ws_sync_numba": ws_sync_numba, "ws_regbuf_numba": ws_regbuf_numba}


def stream_numba(x, out, *, k: int, step: str = "ws_regbuf_numba", a: float = 0.999, b: float = 0.001,
                 blocks: int | None = None):
    """The Numba steps: x and out float32 Numba device arrays of one length,
    a multiple of 4; blocks: the grid (default six blocks per SM)."""
    if step not in NB_STEPS:
        raise ValueError(f"step must be one of {tuple(NB_STEPS)}, got {step!r}")
    for name, v in (("x", x), ("out", out)):
        if not hasattr(v, "copy_to_host"):  # a Numba device array (the simulator's too)
            raise TypeError(f"{name} must be a Numba device array, got {type(v).__name__}")
        if v.dtype != np.float32:
            raise TypeError(f"{name} must have dtype float32, got {v.dtype}")
    if x.shape != out.shape or len(x.shape) != 1:
        raise ValueError(f"x and out must be vectors of one length, got {x.shape} and {out.shape}")
    if x.size % 4:
        raise ValueError(f"x.size must be a multiple of 4, got {x.size}")
    if overlaps(out, x):  # one block's stores could land where another block still reads
        raise ValueError("out must not overlap x: other threads still read x while out is written")
    if not isinstance(k, (int, np.integer)) or not 0 <= k <= 1 << 20:
        raise ValueError(f"k must be an int in [0, {1 << 20}], got {k!r}")
    if x.size:
        NB_STEPS[step][numba_grid(x.size, blocks), NB_THREADS](x, out, k, np.float32(a), np.float32(b))
    return out


def numba_grid(n, blocks=None):
    """Blocks to launch for n floats: `blocks` (default six per SM, what fits
    at 256 threads), never more than there are tiles."""
    if blocks is None:
        blocks = sm_count() * 6
    return max(1, min(blocks, -(-n // TILE)))


def sm_count():
    """The GPU's SM count (the simulator's device has none: one)."""
    return getattr(cuda.get_current_device(), "MULTIPROCESSOR_COUNT", 1)
# --8<-- [end:ws_numba]
