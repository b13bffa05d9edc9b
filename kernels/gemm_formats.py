"""One GEMM, C = A @ B, in each format the H200's Tensor Cores (and its
FP32 and FP64 units) take, through cuBLAS from CuPy.

    q = quantize(A, B, "bf16")   # A (M x K), B (K x N): float64 or float32 CuPy arrays
    C = matmul(q)                # cuBLAS, in the format's own output type
    R = dequantize(q, C)         # float64, comparable with A @ B

Formats (FORMATS): fp64, fp32 (TF32 off), tf32, bf16, fp16 (FP32
accumulation), fp16_acc16 (FP16 accumulation), int8 (INT32 accumulation,
a scale per row of A and per column of B) and fp8_e4m3 / fp8_e5m2.

FP8: cuBLAS multiplies FP8 only through cuBLASLt, which CuPy does not wrap.
Here the FP8 operands are rounded to the FP8 grid (after a power-of-two
scale per matrix, so that the largest |value| fits), held exactly in FP16
and multiplied by the FP16 Tensor Cores with FP32 accumulation: the same
products and sums an FP8 GEMM forms, so the error is FP8's, but the time is
FP16's (EMULATED lists these formats).

cuBLAS is column-major; a row-major C = A @ B is the column-major
C^T = B^T @ A^T, the same memory, so every call passes B first.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from . import checks

FORMATS = ("fp64", "fp32", "tf32", "bf16", "fp16", "fp16_acc16", "int8", "fp8_e4m3", "fp8_e5m2")
EMULATED = ("fp8_e4m3", "fp8_e5m2")

# Enum values from library_types.h and cublas_api.h (CUDA 12 and 13).
CUDA_R_32F, CUDA_R_64F, CUDA_R_16F, CUDA_R_8I, CUDA_R_32I, CUDA_R_16BF = 0, 1, 2, 3, 10, 14
COMPUTE_16F, COMPUTE_32F, COMPUTE_64F, COMPUTE_32I, COMPUTE_32F_FAST_TF32 = 64, 68, 70, 72, 77
OP_N, OP_T, GEMM_DEFAULT = 0, 1, -1

# format -> (storage of A and B, cuBLAS type of A and B, of C, compute type, numpy type of alpha and beta)
_CUBLAS = {
    "fp64": ("float64", CUDA_R_64F, CUDA_R_64F, COMPUTE_64F, np.float64),
    "fp32": ("float32", CUDA_R_32F, CUDA_R_32F, COMPUTE_32F, np.float32),
    "tf32": ("float32", CUDA_R_32F, CUDA_R_32F, COMPUTE_32F_FAST_TF32, np.float32),
    "bf16": ("uint16", CUDA_R_16BF, CUDA_R_32F, COMPUTE_32F, np.float32),
    "fp16": ("float16", CUDA_R_16F, CUDA_R_32F, COMPUTE_32F, np.float32),
    "fp16_acc16": ("float16", CUDA_R_16F, CUDA_R_16F, COMPUTE_16F, np.float16),
    "int8": ("int8", CUDA_R_8I, CUDA_R_32I, COMPUTE_32I, np.int32),
    "fp8_e4m3": ("float16", CUDA_R_16F, CUDA_R_32F, COMPUTE_32F, np.float32),
    "fp8_e5m2": ("float16", CUDA_R_16F, CUDA_R_32F, COMPUTE_32F, np.float32),
}
_C_DTYPE = {CUDA_R_64F: "float64", CUDA_R_32F: "float32", CUDA_R_16F: "float16", CUDA_R_32I: "int32"}
# FP8: (mantissa bits, exponent of the smallest normal, largest finite value)
FP8 = {"fp8_e4m3": (3, -6, 448.0), "fp8_e5m2": (2, -14, 57344.0)}


@dataclasses.dataclass
class Operands:
    """A and B stored for one format, with what turns C back into A @ B."""
    fmt: str
    A: object             # M x K
    B: object             # K x N; for int8 stored transposed (N x K)
    M: int
    N: int
    K: int
    row_scale: object = None  # int8: per row of A (M); fp8: a power of two (float)
    col_scale: object = None  # int8: per column of B (N); fp8: a power of two


def check_format(fmt: str) -> str:
    if fmt not in FORMATS:
        raise ValueError(f"format must be one of {FORMATS}, got {fmt!r}")
    return fmt


# --8<-- [start:to_bf16]
def to_bf16(x):
    """float32 CuPy array -> its bfloat16 bit patterns (uint16), rounded to
    nearest, ties to even: add 0x7FFF plus the lowest kept bit, keep the
    top 16 bits. CuPy has no bfloat16 dtype; cuBLAS reads these bits as
    CUDA_R_16BF."""
    import cupy as cp

    u = cp.ascontiguousarray(x, dtype=cp.float32).view(cp.uint32)
    return ((u + 0x7FFF + ((u >> 16) & 1)) >> 16).astype(cp.uint16)


def from_bf16(bits):
    """uint16 bfloat16 bit patterns -> float32 (exact)."""
    import cupy as cp

    return (bits.astype(cp.uint32) << 16).view(cp.float32)
# --8<-- [end:to_bf16]


# --8<-- [start:round_fp8]
def round_fp8(x, fmt: str):
    """x (float32 CuPy array) rounded to the nearest value of an FP8 format,
    ties to even, saturating at its largest finite value (as FP8 recipes
    do), returned as float16 (which holds every FP8 value exactly)."""
    import cupy as cp

    man, emin, top = FP8[fmt]
    kern = cp.ElementwiseKernel(
        "float32 x, int32 man, int32 emin, float32 top", "float16 y",
        """
        int e;
        frexpf(fabsf(x), &e);                   // |x| = f * 2^e, f in [0.5, 1)
        float quantum = ldexpf(1.0f, max(e - 1, emin) - man);  // spacing of values near |x|
        float r = rintf(x / quantum) * quantum; // rintf: ties to even; x / quantum is exact
        y = __float2half(fminf(fmaxf(r, -top), top));
        """, "round_fp8")
    return kern(cp.ascontiguousarray(x, dtype=cp.float32), np.int32(man), np.int32(emin), np.float32(top))
# --8<-- [end:round_fp8]


def _pow2_scale(x, top: float) -> float:
    """The power of two that brings max |x| to at most `top`."""
    import cupy as cp

    amax = float(cp.abs(x).max())
    return float(2.0 ** np.ceil(np.log2(amax / top))) if amax > 0 else 1.0


# --8<-- [start:quantize]
def quantize(A, B, fmt: str) -> Operands:
    """A (M x K) and B (K x N), float64 or float32 CuPy arrays, stored in
    `fmt`. int8: symmetric, one scale per row of A and per column of B
    (max |value| -> 127); fp8: one power-of-two scale per matrix."""
    import cupy as cp

    check_format(fmt)
    if A.ndim != 2 or B.ndim != 2 or A.shape[1] != B.shape[0]:
        raise ValueError(f"A (M x K) and B (K x N) must be 2-D with matching K, got {A.shape} and {B.shape}")
    (M, K), N = A.shape, B.shape[1]
    A32, B32 = A.astype(cp.float32), B.astype(cp.float32)
    if fmt == "fp64":
        return Operands(fmt, cp.ascontiguousarray(A, dtype=cp.float64), cp.ascontiguousarray(B, dtype=cp.float64),
                        M, N, K)
    if fmt in ("fp32", "tf32"):
        return Operands(fmt, cp.ascontiguousarray(A32), cp.ascontiguousarray(B32), M, N, K)
    if fmt == "bf16":
        return Operands(fmt, to_bf16(A32), to_bf16(B32), M, N, K)
    if fmt in ("fp16", "fp16_acc16"):
        return Operands(fmt, cp.ascontiguousarray(A32.astype(cp.float16)),
                        cp.ascontiguousarray(B32.astype(cp.float16)), M, N, K)
    if fmt == "int8":
        sa = cp.abs(A32).max(axis=1) / 127  # per row of A
        sb = cp.abs(B32).max(axis=0) / 127  # per column of B
        sa[sa == 0], sb[sb == 0] = 1, 1
        Aq = cp.clip(cp.rint(A32 / sa[:, None]), -127, 127).astype(cp.int8)
        Bq = cp.clip(cp.rint(B32 / sb[None, :]), -127, 127).astype(cp.int8)
        return Operands(fmt, Aq, cp.ascontiguousarray(Bq.T), M, N, K, sa, sb)  # B transposed: cuBLAS's INT8 layout
    top = FP8[fmt][2]
    sa, sb = _pow2_scale(A32, top), _pow2_scale(B32, top)
    return Operands(fmt, round_fp8(A32 / sa, fmt), round_fp8(B32 / sb, fmt), M, N, K, sa, sb)
# --8<-- [end:quantize]


# --8<-- [start:matmul]
def matmul(q: Operands, out=None):
    """C = A @ B by cublasGemmEx in q's format; C is row-major M x N in the
    format's output type (float64, float32, float16 or int32)."""
    import cupy as cp
    from cupy_backends.cuda.libs import cublas

    _, ab_type, c_type, compute, scalar = _CUBLAS[q.fmt]
    if out is None:
        out = cp.empty((q.M, q.N), dtype=_C_DTYPE[c_type])
    if out.shape != (q.M, q.N) or out.dtype != np.dtype(_C_DTYPE[c_type]) or not out.flags.c_contiguous:
        raise ValueError(f"out must be a C-contiguous {_C_DTYPE[c_type]} array of shape {(q.M, q.N)}")
    checks.require_no_overlap("out", out, A=q.A, B=q.B)  # cuBLAS would read what it has overwritten
    one, zero = np.array(1, scalar), np.array(0, scalar)
    handle = cp.cuda.device.get_cublas_handle()
    if q.fmt == "int8":  # cuBLAS's INT8 Tensor Core path wants the first operand transposed (TN)
        cublas.gemmEx(handle, OP_T, OP_N, q.N, q.M, q.K, one.ctypes.data, q.B.data.ptr, ab_type, q.K,
                      q.A.data.ptr, ab_type, q.K, zero.ctypes.data, out.data.ptr, c_type, q.N, compute,
                      GEMM_DEFAULT)
    else:
        cublas.gemmEx(handle, OP_N, OP_N, q.N, q.M, q.K, one.ctypes.data, q.B.data.ptr, ab_type, q.N,
                      q.A.data.ptr, ab_type, q.K, zero.ctypes.data, out.data.ptr, c_type, q.N, compute,
                      GEMM_DEFAULT)
    return out
# --8<-- [end:matmul]


def dequantize(q: Operands, C):
    """cuBLAS's C back in A @ B's units, as float64."""
    import cupy as cp

    R = C.astype(cp.float64)
    if q.fmt == "int8":
        return R * q.row_scale[:, None].astype(cp.float64) * q.col_scale[None, :].astype(cp.float64)
    if q.fmt in EMULATED:
        return R * (q.row_scale * q.col_scale)
    return R


def values(q: Operands):
    """The float64 values q's A and B stand for (what the GEMM multiplies):
    their exact product is the reference for the arithmetic alone."""
    import cupy as cp

    if q.fmt == "bf16":
        return from_bf16(q.A).astype(cp.float64), from_bf16(q.B).astype(cp.float64)
    if q.fmt == "int8":
        return (q.A.astype(cp.float64) * q.row_scale[:, None].astype(cp.float64),
                q.B.T.astype(cp.float64) * q.col_scale[None, :].astype(cp.float64))
    if q.fmt in EMULATED:
        return q.A.astype(cp.float64) * q.row_scale, q.B.astype(cp.float64) * q.col_scale
    return q.A.astype(cp.float64), q.B.astype(cp.float64)
