"""Tensor Core GEMM: the hand-written ladder of kernels/cuda/tensor_cores.cu.

`tc_matmul(A, B, C, step=...)` computes C = A @ B with A (M x K) and B
(K x N) in float16, C (M x N) in float32, all row-major CuPy arrays, FP32
accumulation. The steps:

- wmma_global, wmma_smem: nvcuda::wmma; M, N, K multiples of 16; A, B, C
  32-byte aligned (a WMMA fragment load needs it);
- mma_ldmatrix, mma_async, mma_tuned (and any `config`): mma.sync.m16n8k16
  with ldmatrix; any M; N and K multiples of 8 (rows of 16 bytes); 16-byte
  aligned.

Every step needs compute capability 8.0 or newer. Numba exposes no Tensor
Core instruction; a Numba user reaches them through cuBLAS (the chapter
shows how, on Numba device arrays, without a copy).
"""

from __future__ import annotations

import functools
import math
import os
import shutil
from pathlib import Path

import numpy as np

from . import checks
from .device import CUDA_DIR, CudaBuild, cupy_module, device_info, plain_build

CUDA_SOURCE = CUDA_DIR / "tensor_cores.cu"  # steps 3-5 and the mma.sync ceiling
WMMA_SOURCE = CUDA_DIR / "tensor_cores_wmma.cu"  # steps 1-2
STEPS = ("wmma_global", "wmma_smem", "mma_ldmatrix", "mma_async", "mma_tuned")
WMMA_STEPS = ("wmma_global", "wmma_smem")
MAX_ELEMENTS = 2**31 - 1
MIN_CC = (8, 0)

# (BM, BN, BK, WM, WN, STAGES) of tc_mma_async_t: block tile, slice of K,
# warp tile, slices in flight; the ones instantiated in tensor_cores.cu.
TC_CONFIGS = [
    (128, 128, 32, 64, 32, 3), (128, 128, 32, 64, 32, 4), (128, 128, 64, 64, 32, 3),
    (128, 256, 32, 64, 64, 3), (256, 128, 32, 64, 64, 3), (128, 256, 32, 64, 64, 4),
    (128, 128, 32, 32, 64, 4), (64, 128, 32, 32, 32, 4),
]
# step 5: the fastest of TC_CONFIGS at 8192^3 in the sweep (kernels/bench/tc_ladder.py, variants
# config/...; its claims check that no other configuration beats it by more than the noise)
TUNED = (256, 128, 32, 64, 64, 3)


def config_name(cfg) -> str:
    return "x".join(str(v) for v in cfg)


def config_threads(cfg) -> int:
    bm, bn, _, wm, wn, _ = cfg
    return (bm // wm) * (bn // wn) * 32


def config_smem(cfg) -> int:
    """Dynamic shared memory of one block: STAGES x (BM x BK + BK x BN) halves."""
    bm, bn, bk, _, _, stages = cfg
    return stages * (bm * bk + bk * bn) * 2


def check_config(cfg) -> tuple[int, ...]:
    cfg = tuple(int(v) for v in cfg)
    if cfg not in TC_CONFIGS:
        raise ValueError(f"config {cfg} is not one of TC_CONFIGS (tensor_cores.cu instantiates those): {TC_CONFIGS}")
    return cfg


def require_compute_capability(gpu: str, cc: tuple[int, int], need: tuple[int, int] = MIN_CC) -> None:
    """Refuse a GPU older than `need`, naming it and the requirement."""
    if tuple(cc) < tuple(need):
        raise RuntimeError(f"the Tensor Core steps need compute capability {need[0]}.{need[1]} or newer "
                           f"(mma.sync.m16n8k16, ldmatrix, cp.async); {gpu} is {cc[0]}.{cc[1]}")


def check_operands(A, B, C, *, step: str) -> tuple[int, int, int]:
    """A (M x K) and B (K x N) float16, C (M x N) float32 or None: 2-D,
    C-contiguous, aligned CuPy arrays with matching shapes and the multiples
    the step needs; C must not overlap A or B. Returns (M, N, K)."""
    if step not in STEPS and step != "config":
        raise ValueError(f"step must be one of {STEPS}, got {step!r}")
    align = 32 if step in WMMA_STEPS else 16
    for name, x, dtype in (("A", A, np.float16), ("B", B, np.float16), ("C", C, np.float32)):
        if x is None:
            continue
        checks.require_cupy_array(name, x)
        checks.require_dtype(name, x, dtype)
        checks.require_ndim(name, x, 2)
        checks.require_contiguous(name, x)
        if x.data.ptr % align:
            raise ValueError(f"{name} must start on a {align}-byte boundary for step {step!r} "
                             f"(its address is {x.data.ptr:#x}): pass a fresh array, not an offset view")
    M, N, K = checks.require_gemm_shapes(A, B, C, max_elements=MAX_ELEMENTS)
    if step in WMMA_STEPS and (M % 16 or N % 16 or K % 16):
        raise ValueError(f"step {step!r} needs M, N and K to be multiples of 16 (a WMMA fragment is 16 x 16 x 16), "
                         f"got M={M}, N={N}, K={K}")
    if step not in WMMA_STEPS and (N % 8 or K % 8):
        raise ValueError(f"step {step!r} needs N and K to be multiples of 8 (it moves rows in 16-byte chunks), "
                         f"got N={N}, K={K}")
    if C is not None:
        checks.require_no_overlap("C", C, A=A, B=B)
    return M, N, K


@functools.cache
def config_kernel(cfg):
    """tc_mma_async_t<cfg> compiled by NVRTC, allowed its dynamic shared memory."""
    import cupy as cp

    name = f"tc_mma_async_t<{','.join(str(v) for v in cfg)}>"
    mod = cp.RawModule(code=CUDA_SOURCE.read_text(), options=("--std=c++17",), name_expressions=[name])
    kern = mod.get_function(name)
    kern.max_dynamic_shared_size_bytes = config_smem(cfg)
    return kern


# --8<-- [start:wmma_include_dir]
def wmma_include_dir(environ=os.environ, which=shutil.which) -> Path:
    """Where NVRTC finds crt/mma.h, which <mma.h> (WMMA) includes: the CUDA
    toolkit's include folder (CUDA_PATH, CUDA_HOME, beside nvcc, or
    /usr/local/cuda). The pip wheels CuPy compiles with ship mma.h without
    it; the mma.sync steps need neither."""
    nvcc = which("nvcc")
    candidates = [environ.get("CUDA_PATH"), environ.get("CUDA_HOME"),
                  str(Path(nvcc).resolve().parent.parent) if nvcc else None, "/usr/local/cuda"]
    for c in candidates:
        if c and (Path(c) / "include" / "crt" / "mma.h").is_file():
            return Path(c) / "include"
    raise RuntimeError("the WMMA steps include <mma.h>, whose crt/mma.h comes with the CUDA toolkit, not with "
                       "the pip wheels NVRTC uses: install the toolkit or set CUDA_PATH to it "
                       "(the mma.sync steps need neither)")
# --8<-- [end:wmma_include_dir]


def cuda_builds(cc: tuple[int, int] = (9, 0)) -> list[CudaBuild]:
    """How the two sources compile: tensor_cores.cu as it is; the WMMA steps
    with the toolkit's include folder (wmma_include_dir)."""
    return [plain_build(CUDA_SOURCE.name),
            CudaBuild(WMMA_SOURCE.name, WMMA_SOURCE.read_text(), ("--std=c++17", f"-I{wmma_include_dir()}"))]


@functools.cache
def _wmma_module():
    return cuda_builds()[1].module()


@functools.cache
def _step_kernel(step: str):
    if step in WMMA_STEPS:
        return _wmma_module().get_function(f"tc_{step}")
    kern = cupy_module(CUDA_SOURCE.name).get_function(f"tc_{step}")
    if step == "mma_async":
        kern.max_dynamic_shared_size_bytes = config_smem(ASYNC)
    return kern


ASYNC = (128, 128, 32, 64, 32, 4)  # tc_mma_async's fixed configuration (step 4)


def step_kernel(step: str, config=None):
    """The compiled kernel of a step, or of `config` with step="config"."""
    if step in ("config", "mma_tuned"):
        return config_kernel(config if step == "config" else TUNED)
    return _step_kernel(step)


def launch_shape(step: str, M: int, N: int, cfg=None) -> tuple[tuple, tuple, int]:
    """(grid, block, dynamic shared memory) of a step."""
    if step == "wmma_global":
        return (math.ceil(N / 32), math.ceil(M / 32)), (128,), 0
    if step == "wmma_smem":
        return (math.ceil(N / 64), math.ceil(M / 64)), (128,), 0
    if step == "mma_ldmatrix":
        return (math.ceil(N / 128), math.ceil(M / 128)), (256,), 0
    cfg = ASYNC if step == "mma_async" else (TUNED if step == "mma_tuned" else cfg)
    return (math.ceil(N / cfg[1]), math.ceil(M / cfg[0])), (config_threads(cfg),), config_smem(cfg)


def tc_matmul(A, B, C=None, *, step: str = "mma_tuned", config=None):
    """C = A @ B on the Tensor Cores (FP16 in, FP32 accumulate) with one step
    of the ladder, or with step="config" and `config` one of TC_CONFIGS."""
    import cupy as cp

    if step == "config":
        config = check_config(config)
    M, N, K = check_operands(A, B, C, step=step)
    dev = A.device.id
    info = device_info(dev)
    require_compute_capability(info["name"], info["cc"])
    if C is None:
        C = cp.empty((M, N), dtype=cp.float32)
    grid, block, smem = launch_shape(step, M, N, config)
    kern = step_kernel(step, config)
    kern(grid, block, (A, B, C, np.int32(M), np.int32(N), np.int32(K)), shared_mem=smem)
    return C


def mma_peak(blocks: int, threads: int = 128, iters: int = 4096):
    """Run the register-only mma.sync kernel: returns (out, FLOPs done)."""
    import cupy as cp

    info = device_info(cp.cuda.Device().id)
    require_compute_capability(info["name"], info["cc"])
    out = cp.empty(blocks * threads, dtype=cp.float32)
    _step_kernel("mma_peak")((blocks,), (threads,), (out, np.int32(iters)))
    warps = blocks * threads // 32
    return out, warps * iters * 8 * 2 * 16 * 8 * 16  # PEAK_CHAINS mma of 16 x 8 x 16 per round


# cuBLAS's own FP16 GEMM with FP32 output and accumulation (cublasGemmEx).
# Enum values from cublas_api.h and library_types.h.
CUBLAS_OP_N, CUDA_R_16F, CUDA_R_32F, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT = 0, 2, 0, 68, -1


def cublas_gemm(A, B, C=None):
    """C = A @ B by cublasGemmEx: A, B float16, C float32, compute FP32, row-major.
    cuBLAS is column-major, so it computes C^T = B^T @ A^T, which is the
    same memory."""
    import cupy as cp
    from cupy_backends.cuda.libs import cublas

    M, N, K = check_operands(A, B, C, step="mma_async")
    if C is None:
        C = cp.empty((M, N), dtype=cp.float32)
    one, zero = np.array(1.0, np.float32), np.array(0.0, np.float32)
    cublas.gemmEx(cp.cuda.device.get_cublas_handle(), CUBLAS_OP_N, CUBLAS_OP_N, N, M, K,
                  one.ctypes.data, B.data.ptr, CUDA_R_16F, N, A.data.ptr, CUDA_R_16F, K,
                  zero.ctypes.data, C.data.ptr, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)
    return C
