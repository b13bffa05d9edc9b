# %% [markdown]
# # Tensor Cores: a hand-written FP16 GEMM, step by step, against cuBLAS
#
# C = A @ B with A, B in FP16 and C in FP32 (row-major, FP32 accumulation),
# with each step of the ladder in kernels/cuda/tensor_cores_wmma.cu (WMMA)
# and kernels/cuda/tensor_cores.cu (mma.sync, ldmatrix, cp.async), and with
# cuBLAS (cublasGemmEx). Every result is checked against a float64 product
# of the same FP16 inputs, its output poisoned with NaN first, and the
# script exits non-zero on a wrong one. Numba has no Tensor Core
# instructions: the last part calls cuBLAS on Numba device arrays, without
# a copy.
#
# Run:
#
#     python tensor_cores.py               # check every step, then time them at 4096^3
#     python tensor_cores.py --size 1024   # time at 1024^3
#     python tensor_cores.py --impl numba  # only the Numba part
#
# Copy with it: kernels/cuda/tensor_cores.cu and kernels/cuda/tensor_cores_wmma.cu
# (beside this file). Needs numpy, cupy and a GPU of compute capability 8.0
# or newer; the WMMA steps also need the CUDA toolkit's headers (crt/mma.h).

# %%
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

# %%
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

import argparse
import shutil

import numpy as np

# %% [markdown]
# ## Compiling: WMMA needs the toolkit's headers
#
# <mma.h> includes crt/mma.h, which the pip wheels NVRTC compiles with do
# not ship; the mma.sync steps need neither.

# %%
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


# %% [markdown]
# ## The launcher: check, then launch
#
# FP16 A and B, FP32 C, contiguous and aligned; the multiples each step
# needs; C must not overlap A or B.

# %%
# --8<-- [start:tc_launch]
@functools.cache
def load_wmma():
    """tensor_cores_wmma.cu compiled with the toolkit's headers."""
    import cupy as cp

    return cp.RawModule(code=find_cuda_source("tensor_cores_wmma.cu").read_text(),
                        options=("--std=c++17", f"-I{wmma_include_dir()}"))


STEPS = {  # step: (kernel, needs multiples of 16, block tile BM x BN, threads, dynamic shared memory)
    "wmma_global": ("tc_wmma_global", True, (32, 32), 128, 0),
    "wmma_smem": ("tc_wmma_smem", True, (64, 64), 128, 0),
    "mma_ldmatrix": ("tc_mma_ldmatrix", False, (128, 128), 256, 0),
    "mma_async": ("tc_mma_async", False, (128, 128), 256, 4 * (128 * 32 + 32 * 128) * 2),
    # step 5: the template at the configuration the sweep found fastest (BM, BN, BK, WM, WN, STAGES)
    "mma_tuned": ("tc_mma_async_t<256, 128, 32, 64, 64, 3>", False, (256, 128), 256, 3 * (256 * 32 + 32 * 128) * 2),
}


@functools.cache
def load_step(kernel: str):
    """A step's kernel: WMMA from tensor_cores_wmma.cu, the rest from
    tensor_cores.cu; a template (step 5) named to NVRTC by name_expressions."""
    import cupy as cp

    if kernel.startswith("tc_wmma"):
        return load_wmma().get_function(kernel)
    if "<" in kernel:
        module = cp.RawModule(code=find_cuda_source("tensor_cores.cu").read_text(), options=("--std=c++17",),
                              name_expressions=[kernel])
        return module.get_function(kernel)
    return load_cuda("tensor_cores.cu").get_function(kernel)


def tc_matmul(A, B, C=None, *, step="mma_async"):
    """C = A @ B on the Tensor Cores: A (M x K), B (K x N) float16, C (M x N)
    float32 CuPy arrays, row-major; C is allocated when not given."""
    import cupy as cp

    if step not in STEPS:
        raise ValueError(f"step must be one of {list(STEPS)}, got {step!r}")
    kernel, wmma, (bm, bn), threads, smem = STEPS[step]
    align = 32 if wmma else 16
    for name, x, dtype in (("A", A, cp.float16), ("B", B, cp.float16), ("C", C, cp.float32)):
        if x is None:
            continue
        if not isinstance(x, cp.ndarray) or x.dtype != dtype or x.ndim != 2:
            raise TypeError(f"{name} must be a 2-D {np.dtype(dtype).name} cupy.ndarray, got {type(x).__name__} "
                            f"{getattr(x, 'dtype', '')}")
        if not x.flags.c_contiguous or x.data.ptr % align:
            raise ValueError(f"{name} must be C-contiguous and start on a {align}-byte boundary")
    (M, K), (K2, N) = A.shape, B.shape
    if K2 != K or (C is not None and C.shape != (M, N)):
        raise ValueError(f"shapes do not match: A {A.shape}, B {B.shape}, C {None if C is None else C.shape}")
    if wmma and (M % 16 or N % 16 or K % 16):
        raise ValueError(f"step {step} needs M, N, K to be multiples of 16, got {M}, {N}, {K}")
    if not wmma and (N % 8 or K % 8):
        raise ValueError(f"step {step} needs N and K to be multiples of 8, got N={N}, K={K}")
    if C is None:
        C = cp.empty((M, N), dtype=cp.float32)
    for name, x in (("A", A), ("B", B)):
        if cp.may_share_memory(C, x):
            raise ValueError(f"C must not overlap {name}: other threads still read {name} while C is written")
    cc = cp.cuda.Device().compute_capability
    if int(cc[:-1]) < 8:
        raise RuntimeError(f"the Tensor Core steps need compute capability 8.0 or newer; this GPU is {cc[:-1]}.{cc[-1]}")
    kern = load_step(kernel)
    if smem:
        kern.max_dynamic_shared_size_bytes = smem
    kern(((N + bn - 1) // bn, (M + bm - 1) // bm), (threads,), (A, B, C, np.int32(M), np.int32(N), np.int32(K)),
         shared_mem=smem)
    return C
# --8<-- [end:tc_launch]


# %% [markdown]
# ## cuBLAS: the same product, FP16 in, FP32 out
#
# cuBLAS is column-major: it computes C^T = B^T A^T, which is the same memory
# as the row-major C = A B.

# %%
# --8<-- [start:cublas_gemm]
def cublas_gemm(A, B, C=None):
    """C = A @ B by cublasGemmEx: A, B float16, C float32, FP32 compute."""
    import cupy as cp
    from cupy_backends.cuda.libs import cublas

    (M, K), (_, N) = A.shape, B.shape
    if C is None:
        C = cp.empty((M, N), dtype=cp.float32)
    one, zero = np.array(1.0, np.float32), np.array(0.0, np.float32)
    # enums from cublas_api.h / library_types.h: CUBLAS_OP_N 0, CUDA_R_16F 2, CUDA_R_32F 0,
    # CUBLAS_COMPUTE_32F 68, CUBLAS_GEMM_DEFAULT -1
    cublas.gemmEx(cp.cuda.device.get_cublas_handle(), 0, 0, N, M, K,
                  one.ctypes.data, B.data.ptr, 2, N, A.data.ptr, 2, K,
                  zero.ctypes.data, C.data.ptr, 0, N, 68, -1)
    return C
# --8<-- [end:cublas_gemm]


# %% [markdown]
# ## Every step against float64

# %%
# --8<-- [start:check]
def check(gemm, M, N, K, seed=0):
    """gemm(A, B, C) at M x N x K against float64: the error of an FP32 sum
    of exact FP16 products stays within K * 2^-20 * (|A| @ |B|)."""
    import cupy as cp

    rng = cp.random.default_rng(seed)
    A = rng.standard_normal((M, K), dtype=cp.float32).astype(cp.float16)
    B = rng.standard_normal((K, N), dtype=cp.float32).astype(cp.float16)
    C = cp.full((M, N), cp.nan, dtype=cp.float32)  # poison: an element left unwritten fails
    gemm(A, B, C)
    A64, B64 = A.astype(cp.float64), B.astype(cp.float64)
    err = cp.abs(C - A64 @ B64)
    bound = K * 2.0**-20 * (cp.abs(A64) @ cp.abs(B64))
    worst = float((err / bound).max())
    assert not bool(cp.isnan(C).any()) and worst <= 1.0, f"{M}x{N}x{K}: error {worst:.2f} x the bound"
    return worst
# --8<-- [end:check]


# %% [markdown]
# ## Numba arrays, cuBLAS's Tensor Cores, no copy
#
# CuPy wraps a Numba device array through __cuda_array_interface__: the same
# device memory, no copy; Numba wraps the CuPy result back the same way.

# %%
# --8<-- [start:numba_cublas]
def numba_gemm(A_nb, B_nb):
    """A @ B for Numba device arrays (float16) by cuBLAS on the Tensor Cores;
    returns a Numba device array (float32) over the result's memory."""
    import cupy as cp
    from numba import cuda

    A, B = cp.asarray(A_nb), cp.asarray(B_nb)  # views of Numba's memory
    assert A.data.ptr == A_nb.__cuda_array_interface__["data"][0]  # no copy
    C = cublas_gemm(A, B)
    return cuda.as_cuda_array(C)  # Numba's view of CuPy's memory
# --8<-- [end:numba_cublas]


# %% [markdown]
# ## The ceiling: mma.sync on registers only
#
# tc_mma_peak's operands are constants near 1.0 (a lane's number in a few
# mantissa bits), so what it writes follows from the PTX ISA's fragment
# layouts of mma.m16n8k16 ("Matrix Fragments for mma.m16n8k16"): with
# g = lane / 4 and t = lane % 4, register a[0] holds A[g][2t] (low half) and
# A[g][2t+1], b1 holds B[2t+8][g] (low half) and B[2t+9][g], and the
# accumulators are C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1].

# %%
# --8<-- [start:mma_peak]
PEAK_CHAINS = 8  # independent accumulators per warp, as in tensor_cores.cu


def mma_peak(blocks, threads=128, iters=4096):
    """Run tc_mma_peak: returns (what each thread wrote, FLOPs done)."""
    import cupy as cp

    out = cp.full(blocks * threads, cp.nan, dtype=cp.float32)
    load_cuda("tensor_cores.cu").get_function("tc_mma_peak")((blocks,), (threads,), (out, np.int32(iters)))
    return out, blocks * threads // 32 * iters * PEAK_CHAINS * 2 * 16 * 8 * 16


def mma_peak_expected(blocks, threads, iters):
    """What tc_mma_peak writes per thread, from the fragment layouts."""
    A, B = np.ones((16, 16)), np.ones((16, 8))
    for lane in range(32):
        g, t = divmod(lane, 4)
        A[g, 2 * t] = 1 + lane / 1024      # a[0] = 0x3c003c00 ^ lane: 1.0 with lane in the low mantissa bits
        B[2 * t + 8, g] = 1 + 2 * lane / 1024  # b1 = 0x3c003c00 ^ (lane << 1)
    C = A @ B
    per_lane = [C[g, 2 * t] + C[g, 2 * t + 1] + C[g + 8, 2 * t] + C[g + 8, 2 * t + 1]
                for g, t in (divmod(lane, 4) for lane in range(32))]
    return np.tile(np.array(per_lane) * iters * PEAK_CHAINS, blocks * threads // 32)
# --8<-- [end:mma_peak]


# %% [markdown]
# ## INT8 inference, calibrated
#
# Y = X @ W with X quantized by one scale found beforehand on a calibration
# batch (max |x| there -> 127; larger values saturate) and W by one scale per
# output column; the INT32 sums by cuBLAS's INT8 Tensor Core path, which
# wants the first operand transposed (TN).

# %%
# --8<-- [start:int8_layer]
def calibrate_int8(W, calib):
    """(W's INT8 values, transposed: N x K; its per-column scales; X's scale
    from the calibration batch)."""
    import cupy as cp

    sx = float(cp.abs(calib).max()) / 127
    sw = cp.abs(W).max(axis=0) / 127
    sw[sw == 0] = 1
    Wq_t = cp.ascontiguousarray(cp.clip(cp.rint(W / sw[None, :]), -127, 127).astype(cp.int8).T)
    return Wq_t, sw, sx


def int8_layer(X, Wq_t, sw, sx):
    """X @ W in INT8 (INT32 sums by cublasGemmEx), back in X's units as float64."""
    import cupy as cp
    from cupy_backends.cuda.libs import cublas

    Xq = cp.clip(cp.rint(X / sx), -127, 127).astype(cp.int8)
    (M, K), N = X.shape, Wq_t.shape[0]
    C = cp.empty((M, N), dtype=cp.int32)
    one, zero = np.array(1, np.int32), np.array(0, np.int32)
    # enums from cublas_api.h / library_types.h: CUBLAS_OP_T 1, CUBLAS_OP_N 0, CUDA_R_8I 3, CUDA_R_32I 10,
    # CUBLAS_COMPUTE_32I 72, CUBLAS_GEMM_DEFAULT -1. cuBLAS is column-major: it computes
    # C^T (N x M) = W^T Xq^T, the same memory as the row-major C (M x N)
    cublas.gemmEx(cp.cuda.device.get_cublas_handle(), 1, 0, N, M, K,
                  one.ctypes.data, Wq_t.data.ptr, 3, K, Xq.data.ptr, 3, K,
                  zero.ctypes.data, C.data.ptr, 10, N, 72, -1)
    return C.astype(cp.float64) * sx * sw[None, :].astype(cp.float64)
# --8<-- [end:int8_layer]


# %% [markdown]
# ## The ladder: every step checked, then timed against cuBLAS

# %%
# --8<-- [start:tc_ladder]
def check_ladder():
    """Every step at 16^3 and at a shape that is not a multiple of its tile;
    cuBLAS too. Returns {step: worst error over its bound}."""
    worst = {}
    for step in STEPS:
        shapes = [(16, 16, 16), (48, 80, 32)] if step.startswith("wmma") else [(16, 16, 16), (1000, 1016, 72)]
        worst[step] = max(check(lambda A, B, C, s=step: tc_matmul(A, B, C, step=s), *shape) for shape in shapes)
    worst["cublas"] = check(cublas_gemm, 1000, 1016, 72)
    return worst


def time_ladder(n=4096, reps=5):
    """{name: TFLOP/s} of cuBLAS and every step at n^3 (CUDA events, mean of reps)."""
    import cupy as cp

    A = cp.random.default_rng(1).standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    B = cp.random.default_rng(2).standard_normal((n, n), dtype=cp.float32).astype(cp.float16)
    C = cp.empty((n, n), dtype=cp.float32)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    rates = {}
    for name, fn in [("cublas", cublas_gemm)] + [(s, lambda A, B, C, s=s: tc_matmul(A, B, C, step=s)) for s in STEPS]:
        fn(A, B, C)  # compile and warm up
        start.record()
        for _ in range(reps):
            fn(A, B, C)
        stop.record()
        stop.synchronize()
        ms = cp.cuda.get_elapsed_time(start, stop) / reps
        rates[name] = 2 * n**3 / ms / 1e9
        print(f"{name:13s} {n}^3: {ms:8.3f} ms  {rates[name]:7.1f} TFLOP/s")
    return rates
# --8<-- [end:tc_ladder]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="The Tensor Core ladder, checked against float64, timed against cuBLAS.")
    p.add_argument("--size", type=int, default=4096, help="n of the n^3 timing")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    if not has_gpu():
        print("cupy: skipped (needs a CUDA GPU); numba: no Tensor Core instructions, and cuBLAS needs a GPU too")
        return
    from numba import cuda

    if args.impl in ("all", "cupy"):
        import cupy as cp

        rng = cp.random.default_rng(7)
        X, calib = cp.maximum(rng.standard_normal((512, 256)), 0), cp.maximum(rng.standard_normal((64, 256)), 0)
        W = rng.standard_normal((256, 128)) / 16
        Y = int8_layer(X, *calibrate_int8(W, calib))
        Xs = cp.minimum(X, float(calib.max()))  # what the saturated INT8 activations stand for
        err = float(cp.linalg.norm(Y - Xs @ W) / cp.linalg.norm(Xs @ W))
        assert err < 2e-2, f"int8_layer: relative error {err:.2e}"
        print(f"INT8 layer: correct (relative error {err:.2e})")
        for step, worst in check_ladder().items():
            print(f"{step}: correct (worst error {worst:.2f} x its bound)")
        time_ladder(args.size - args.size % 16)
        out, _ = mma_peak(4, 128, 8)
        assert np.allclose(out.get(), mma_peak_expected(4, 128, 8), rtol=1e-5), "tc_mma_peak wrote the wrong sums"
        sms = cp.cuda.Device().attributes["MultiProcessorCount"]
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        _, flops = mma_peak(sms * 8, 128, 4096)
        stop.record()
        stop.synchronize()
        print(f"mma.sync on registers: {flops / cp.cuda.get_elapsed_time(start, stop) / 1e9:7.1f} TFLOP/s")
    if args.impl in ("all", "numba"):
        rng = np.random.default_rng(3)
        A = rng.standard_normal((256, 128)).astype(np.float16)
        B = rng.standard_normal((128, 64)).astype(np.float16)
        C = numba_gemm(cuda.to_device(A), cuda.to_device(B)).copy_to_host()
        A64, B64 = A.astype(np.float64), B.astype(np.float64)
        assert np.all(np.abs(C - A64 @ B64) <= 128 * 2.0**-20 * (np.abs(A64) @ np.abs(B64))), "numba_gemm is wrong"
        print("numba arrays through cuBLAS: correct")


if __name__ == "__main__":
    main()
