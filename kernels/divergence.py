"""Warp divergence: launch wrappers for kernels/cuda/divergence.cu, and the
long-branch kernel in Numba (it runs in the CUDA simulator too)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from . import checks
from .device import cupy_module

CUDA_SOURCE = Path(__file__).with_name("cuda") / "divergence.cu"
BRANCHES = ("branch_long", "branch_short")
SEED = ("seed_if_else", "seed_ternary")


def cupy_kernel(name: str):
    if name not in BRANCHES + SEED:
        raise ValueError(f"kernel must be one of {BRANCHES + SEED}, got {name!r}")
    return cupy_module(CUDA_SOURCE.name).get_function(name)


def _check_split_iters(split: int, iters: int) -> None:
    if not 0 <= int(split) <= 32:
        raise ValueError(f"split must be between 0 and 32 lanes, got {split}")
    if int(iters) < 0:
        raise ValueError(f"iters must be >= 0, got {iters}")


# --8<-- [start:cupy_branch]
def branch_cupy(x, out=None, *, split: int, iters: int, kind: str = "branch_long", threads: int = 256):
    """Lanes [0, split) of each warp take path A, the rest path B; returns out."""
    import cupy as cp

    checks.require_vector("x", x, np.float32, lib="cupy")
    checks.require_block_size("threads", threads)
    _check_split_iters(split, iters)
    if kind not in BRANCHES:
        raise ValueError(f"kind must be one of {BRANCHES}, got {kind!r}")
    if out is None:
        out = cp.empty_like(x)
    else:
        checks.require_vector_like("out", out, "x", x, np.float32, lib="cupy")
        checks.require_no_overlap("out", out, x=x)  # x and out are __restrict__ in the kernels
    n = x.size
    if n:
        blocks = (n + threads - 1) // threads
        cupy_kernel(kind)((blocks,), (threads,), (x, out, np.int64(n), np.int32(split), np.int32(iters)))
    return out
# --8<-- [end:cupy_branch]


def seed_cupy(data, threshold: float, *, kind: str = "seed_if_else", threads: int = 256):
    """The source's example, in place: data > threshold ? data * 2 : data / 2."""
    checks.require_vector("data", data, np.float32, lib="cupy")
    checks.require_block_size("threads", threads)
    if kind not in SEED:
        raise ValueError(f"kind must be one of {SEED}, got {kind!r}")
    n = data.size
    if n:
        cupy_kernel(kind)(((n + threads - 1) // threads,), (threads,),
                          (data, np.float32(threshold), np.int64(n)))
    return data


# --8<-- [start:reference]
import numpy as np  # noqa: E402  (here too: pages show this section alone)


def reference(x: np.ndarray, split: int, iters: int) -> np.ndarray:
    """What the kernels compute, on the host (blocks are whole warps, so the
    lane of element i is i % 32)."""
    lane = np.arange(x.size) % 32
    a = np.where(lane < split, np.float32(0.999), np.float32(1.001)).astype(np.float32)
    b = np.where(lane < split, np.float32(0.001), np.float32(-0.001)).astype(np.float32)
    v = x.astype(np.float64)
    for _ in range(iters):
        v = (v * a + b).astype(np.float32).astype(np.float64)  # float32 FMA: one rounding
    return v.astype(np.float32)
# --8<-- [end:reference]


# --------------------------------------------------------------- Numba --

# --8<-- [start:numba_import]
from numba import cuda, float32  # noqa: E402
# --8<-- [end:numba_import]


# --8<-- [start:numba_branch_long]
@cuda.jit
def branch_long_kernel(x, out, n, split, iters):
    i = cuda.grid(1)
    if i < n:
        v = x[i]
        if (cuda.threadIdx.x & 31) < split:  # lanes [0, split): path A
            for _ in range(iters):
                v = v * float32(0.999) + float32(0.001)
        else:                                # the others: path B
            for _ in range(iters):
                v = v * float32(1.001) - float32(0.001)
        out[i] = v
# --8<-- [end:numba_branch_long]


def branch_numba(x, out=None, *, split: int, iters: int, threads: int = 256):
    checks.require_vector("x", x, np.float32, lib="numba")
    checks.require_block_size("threads", threads)
    _check_split_iters(split, iters)
    n = x.shape[0]
    if out is None:
        out = cuda.device_array(n, dtype=np.float32)
    else:
        checks.require_vector_like("out", out, "x", x, np.float32, lib="numba")
        checks.require_no_overlap("out", out, x=x)
    if n:
        branch_long_kernel[(n + threads - 1) // threads, threads](x, out, n, split, iters)
    return out
