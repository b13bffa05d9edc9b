"""Topic attention_hopper: launch wrappers for kernels/cuda/hopper_attention.cu,
attention's forward pass on Hopper in the style of FlashAttention-3 (TMA,
mbarriers, wgmma, a producer warp, ping-pong consumers, softmax overlapped
with the second matrix product), FP16 or BF16, d 64 or 128."""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import numpy as np

from . import checks
from .device import CudaBuild, device_info
from .hopper_gemm import CUDA_SOURCE as GEMM_SOURCE
from .hopper_gemm import TMAP, require_sm90a

CUDA_SOURCE = Path(__file__).with_name("cuda") / "hopper_attention.cu"

# --8<-- [start:ha_launch]
BN = 128  # keys per tile
# kernel -> (threads, query rows per block, stages of the K / V ring), as instantiated for d 128;
# D64 the same for d 64 where it differs
KERNELS = {
    "ha_plain": (128, 64, 2),      # one warpgroup: copies and math
    "ha_ws": (384, 128, 2),        # a producer warp, two consumer warpgroups
    "ha_pingpong": (384, 128, 2),  # + the consumers take turns at the Tensor Cores
    "ha_overlap": (384, 128, 2),   # + softmax of tile j beside P(j-1) V(j-1)
}
D64 = {"ha_overlap": (512, 192, 2)}  # three consumers take turns


def launch_shape(kernel: str, d: int) -> tuple[int, int, int]:
    """(threads, query rows per block, stages) of a kernel at head dimension d."""
    return D64.get(kernel, KERNELS[kernel]) if d == 64 else KERNELS[kernel]
FORMATS = {"fp16": (np.float16, ()), "bf16": (np.uint16, ("-DHG_BF16",))}
FROM_DTYPE = {np.dtype(np.float16): "fp16", np.dtype(np.uint16): "bf16"}


def smem_bytes(kernel: str, d: int) -> int:
    _, bm, stages = launch_shape(kernel, d)
    return (bm * d + 2 * stages * BN * d) * 2 + (4 * stages + 1) * 8 + 1024  # Q, the ring, barriers, slack


@functools.lru_cache(maxsize=64)
def tensor_map_3d(ptr: int, bh: int, n: int, d: int, box_rows: int):
    """The TMA descriptor of a (BH, N, d) array of 16-bit values: boxes of 64
    columns x box_rows rows of one head, 128-byte swizzle, zeros past row N."""
    from cuda.bindings import driver as cu  # cuda-bindings 12.x / 13.x

    err, tmap = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3, ptr,
        [cu.cuuint64_t(d), cu.cuuint64_t(n), cu.cuuint64_t(bh)],  # sizes, innermost first
        [cu.cuuint64_t(2 * d), cu.cuuint64_t(2 * d * n)],        # strides in bytes of rows and heads
        [cu.cuuint32_t(64), cu.cuuint32_t(box_rows), cu.cuuint32_t(1)],
        [cu.cuuint32_t(1)] * 3,
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err}")
    return np.frombuffer(ctypes.string_at(tmap.getPtr(), 128), dtype=TMAP)[0]


def nvrtc_source() -> str:
    """hopper_gemm.cu up to the end of its hg_wgmma section (the barrier, TMA
    and wgmma helpers), then hopper_attention.cu."""
    gemm = GEMM_SOURCE.read_text()
    return gemm[: gemm.index("// --8<-- [end:hg_wgmma]")] + CUDA_SOURCE.read_text()


def cuda_builds(cc: tuple[int, int] = (9, 0)) -> list[CudaBuild]:
    """For sm_90a whatever the GPU, once per format."""
    return [CudaBuild(CUDA_SOURCE.name, nvrtc_source(), ("-arch=sm_90a", "--std=c++17", *defines))
            for _, defines in FORMATS.values()]


@functools.cache
def ha_kernel(kernel: str, d: int, fmt: str):
    k = cuda_builds()[list(FORMATS).index(fmt)].module().get_function(f"{kernel}_d{d}")
    k.max_dynamic_shared_size_bytes = smem_bytes(kernel, d)
    return k


def hopper_attention(q, k, v, causal: bool = False, out=None, *, kernel: str = "ha_overlap"):
    """O = softmax(Q K^T / sqrt(d)) V (causal: key j > query i masked) for q,
    k, v of shape (BH, N, d) or (B, H, N, d), all float16 (FP16) or all
    uint16 (BF16 bit patterns), C-contiguous CuPy arrays, d 64 or 128; out
    the same shape and dtype (None: a new array), not overlapping them.
    FP32 accumulation and softmax; O rounded to the input's format. Needs
    sm_90a (an H100 or H200)."""
    import cupy as cp

    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {tuple(KERNELS)}, got {kernel!r}")
    if not isinstance(causal, bool):
        raise TypeError(f"causal must be a bool, got {type(causal).__name__}")
    checks.require_cupy_array("q", q)
    fmt = FROM_DTYPE.get(np.dtype(q.dtype))
    if fmt is None:
        raise TypeError(f"q must have dtype float16 (FP16) or uint16 (BF16 bit patterns), got {np.dtype(q.dtype)}")
    if q.ndim not in (3, 4):
        raise ValueError(f"q must be (BH, N, d) or (B, H, N, d), got shape {q.shape}")
    for name, x in (("q", q), ("k", k), ("v", v), ("out", out)):
        if x is None:
            continue
        checks.require_cupy_array(name, x)
        checks.require_dtype(name, x, q.dtype)
        checks.require_same_shape(name, x, "q", q)
        checks.require_contiguous(name, x)
        if x.data.ptr % 16:
            raise ValueError(f"{name} must start on a 16-byte boundary (TMA), got address {x.data.ptr:#x}")
    *lead, n, d = q.shape
    bh = math.prod(lead)
    if d not in (64, 128):
        raise ValueError(f"d (the last dimension) must be 64 or 128, got {d}")
    if n < 1 or bh < 1:
        raise ValueError(f"N and the heads must be >= 1, got shape {q.shape}")
    if out is None:
        out = cp.empty_like(q)
    else:
        checks.require_no_overlap("out", out, q=q, k=k, v=v)
    info = device_info(q.device.id)
    require_sm90a(info["name"], info["cc"])
    threads, bm, _ = launch_shape(kernel, d)
    maps = (tensor_map_3d(q.data.ptr, bh, n, d, bm), tensor_map_3d(k.data.ptr, bh, n, d, BN),
            tensor_map_3d(v.data.ptr, bh, n, d, BN))
    scale_log2 = np.float32(math.log2(math.e) / math.sqrt(d))
    ha_kernel(kernel, d, fmt)((math.ceil(n / bm), bh), (threads,),
                              (*maps, out, np.int32(n), scale_log2, np.int32(causal)),
                              shared_mem=smem_bytes(kernel, d))
    return out
# --8<-- [end:ha_launch]
