"""Topic tc_hopper_gemm: launch wrappers for kernels/cuda/hopper_gemm.cu, a
warp-specialized FP16 GEMM for Hopper (TMA, mbarriers, wgmma, setmaxnreg),
its twin without specialization, and cuBLAS's GEMM of the same layout."""

from __future__ import annotations

import ctypes
import functools
import math
from pathlib import Path

import numpy as np

from . import checks
from .device import CudaBuild, device_info

CUDA_SOURCE = Path(__file__).with_name("cuda") / "hopper_gemm.cu"

# --8<-- [start:hg_launch]
BM, BK = 128, 64
# kernel name -> (BN, stages, threads, persistent, cluster)
KERNELS = {
    "hg_plain_128": (128, 6, 256, False, 1),
    "hg_plain_256": (256, 4, 256, False, 1),
    "hg_ws_128": (128, 6, 384, False, 1),
    "hg_ws_256": (256, 4, 384, False, 1),
    "hg_ws_persistent_128": (128, 6, 384, True, 1),
    "hg_ws_persistent_256": (256, 4, 384, True, 1),
    "hg_ws_cluster_256": (256, 4, 384, False, 2),
    "hg_ws_cluster_persistent_256": (256, 4, 384, True, 2),
}
TMAP = np.dtype([("v", "<u8", (16,))])  # a CUtensorMap: 128 opaque bytes, passed by value


def smem_bytes(kernel: str) -> int:
    bn, stages, _, _, _ = KERNELS[kernel]
    return stages * (BM + bn) * BK * 2 + 2 * stages * 8 + 1024  # the ring, its barriers, alignment slack


def require_sm90a(gpu: str, cc: tuple[int, int]) -> None:
    """wgmma and setmaxnreg exist only on sm_90a: compute capability 9.0 exactly.
    (Kept here rather than taken from ws_primitives, so that this topic's
    freshness stamp does not follow every change to the primitives.)"""
    if tuple(cc) != (9, 0):
        raise RuntimeError(f"the Hopper GEMM needs sm_90a (wgmma, setmaxnreg): compute capability 9.0, "
                           f"an H100 or H200; {gpu} is {cc[0]}.{cc[1]}")


def tensor_map_f16(X, box_rows: int, box_cols: int = BK):
    """The TMA descriptor of a row-major FP16 matrix X: boxes of box_rows x
    box_cols, 128-byte swizzle (the layout wgmma's descriptor names), zeros
    read past the edges."""
    return _tensor_map_f16(X.data.ptr, *X.shape, X.strides[0], box_rows, box_cols)


@functools.lru_cache(maxsize=64)  # a descriptor depends only on these numbers
def _tensor_map_f16(ptr: int, rows: int, cols: int, row_bytes: int, box_rows: int, box_cols: int):
    from cuda.bindings import driver as cu  # cuda-bindings 12.x / 13.x

    err, tmap = cu.cuTensorMapEncodeTiled(
        cu.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2, ptr,
        [cu.cuuint64_t(cols), cu.cuuint64_t(rows)],   # sizes, innermost first
        [cu.cuuint64_t(row_bytes)],                    # the row stride in bytes (the innermost is implied)
        [cu.cuuint32_t(box_cols), cu.cuuint32_t(box_rows)],
        [cu.cuuint32_t(1), cu.cuuint32_t(1)],
        cu.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        cu.CUtensorMapSwizzle.CU_TENSOR_MAP_SWIZZLE_128B,
        cu.CUtensorMapL2promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
        cu.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE)
    if err != cu.CUresult.CUDA_SUCCESS:
        raise RuntimeError(f"cuTensorMapEncodeTiled failed: {err}")
    return np.frombuffer(ctypes.string_at(tmap.getPtr(), 128), dtype=TMAP)[0]


def cuda_builds(cc: tuple[int, int] = (9, 0)) -> list[CudaBuild]:
    """How hopper_gemm.cu is compiled: for sm_90a (wgmma, setmaxnreg), whatever the GPU."""
    return [CudaBuild(CUDA_SOURCE.name, CUDA_SOURCE.read_text(), ("-arch=sm_90a", "--std=c++17"))]


@functools.cache
def hg_module():
    (build,) = cuda_builds()
    return build.module()


def hg_kernel(kernel: str):
    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {tuple(KERNELS)}, got {kernel!r}")
    k = hg_module().get_function(kernel)
    k.max_dynamic_shared_size_bytes = smem_bytes(kernel)
    return k


def hopper_gemm(A, Bt, C=None, *, kernel: str = "hg_ws_persistent_256"):
    """C = A @ Bt.T: A (M x K) and Bt (N x K) float16, C (M x N) float32,
    all C-contiguous CuPy arrays; K a multiple of 8."""
    import cupy as cp

    if kernel not in KERNELS:
        raise ValueError(f"kernel must be one of {tuple(KERNELS)}, got {kernel!r}")
    checks.require_cupy_array("A", A)
    checks.require_cupy_array("Bt", Bt)
    for name, X in (("A", A), ("Bt", Bt)):
        checks.require_dtype(name, X, np.float16)
        checks.require_ndim(name, X, 2)
        checks.require_contiguous(name, X)
        if X.data.ptr % 16:
            raise ValueError(f"{name} must start on a 16-byte boundary (TMA), got address {X.data.ptr:#x}")
    (M, K), (N, K2) = A.shape, Bt.shape
    if K2 != K:
        raise ValueError(f"A is {M}x{K} and Bt is {N}x{K2}: they must share K (the second dimension)")
    if K % 8:
        raise ValueError(f"K must be a multiple of 8 (TMA copies rows of a multiple of 16 bytes), got {K}")
    if C is None:
        C = cp.empty((M, N), dtype=cp.float32)
    else:
        checks.require_cupy_array("C", C)
        checks.require_dtype("C", C, np.float32)
        checks.require_contiguous("C", C)
        if C.shape != (M, N):
            raise ValueError(f"C must be {M}x{N}, got {'x'.join(map(str, C.shape))}")
        checks.require_no_overlap("C", C, A=A, Bt=Bt)
    dev = cp.cuda.Device()
    info = device_info(dev.id)
    require_sm90a(info["name"], info["cc"])
    if M == 0 or N == 0:
        return C
    if K == 0:
        return C.fill(0) or C
    bn, _, threads, persistent, cluster = KERNELS[kernel]
    tiles = math.ceil(M / (BM * cluster)) * math.ceil(N / bn)  # tiles of the whole cluster
    sms = dev.attributes["MultiProcessorCount"]
    grid = cluster * (min(tiles, sms // cluster) if persistent else tiles)
    hg_kernel(kernel)((grid,), (threads,), (tensor_map_f16(A, BM), tensor_map_f16(Bt, bn // cluster), C,
                                            np.int32(M), np.int32(N), np.int32(K)), shared_mem=smem_bytes(kernel))
    return C
# --8<-- [end:hg_launch]


# cuBLAS on the same layout: C = A @ Bt.T with A (M x K), Bt (N x K) row-major,
# FP16 in, FP32 out and accumulation (cublasGemmEx). cuBLAS is column-major:
# it computes C^T (N x M) = Bt (as K x N, transposed) @ A^T (K x M).
CUBLAS_OP_N, CUBLAS_OP_T, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT = 0, 1, 2, 0, 68, -1


def cublas_gemm_tn(A, Bt, C=None):
    import cupy as cp
    from cupy_backends.cuda.libs import cublas

    (M, K), (N, _) = A.shape, Bt.shape
    if C is None:
        C = cp.empty((M, N), dtype=cp.float32)
    one, zero = np.array(1.0, np.float32), np.array(0.0, np.float32)
    cublas.gemmEx(cp.cuda.device.get_cublas_handle(), CUBLAS_OP_T, CUBLAS_OP_N, N, M, K,
                  one.ctypes.data, Bt.data.ptr, CUDA_R_16F, K, A.data.ptr, CUDA_R_16F, K,
                  zero.ctypes.data, C.data.ptr, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
    return C
