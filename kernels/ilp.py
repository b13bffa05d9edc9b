"""Instruction-level parallelism: launch wrappers for kernels/cuda/ilp.cu."""

from __future__ import annotations


from pathlib import Path

import numpy as np

from . import checks
from .device import cupy_module, device_info, kernel_attributes

CUDA_SOURCE = Path(__file__).with_name("cuda") / "ilp.cu"
CHAINS = (1, 2, 4, 8, 16, 32)
FMA_KERNELS = tuple(f"ilp_chains_{k}" for k in CHAINS) + ("ilp_chain_unrolled", "ilp_chains_32_capped")
INT_KERNELS = ("int_div_mod", "int_shift_mask")


def cupy_kernel(name: str):
    if name not in FMA_KERNELS + INT_KERNELS:
        raise ValueError(f"kernel must be one of {FMA_KERNELS + INT_KERNELS}, got {name!r}")
    return cupy_module(CUDA_SOURCE.name).get_function(name)


def resources(name: str) -> dict:
    """Registers and local memory (spills) per thread of a compiled kernel."""
    a = kernel_attributes(cupy_kernel(name))
    return {"registers": a["regs"], "local_bytes": a["local_bytes"]}


# ilp_chains_32_capped promises two blocks of 1024 threads per SM: only an
# SM that holds 2048 threads can keep that promise (ilp.cu).
CAPPED_THREADS_PER_SM = 2048


def require_threads_per_sm(kernel: str, gpu: str, threads_per_sm: int) -> None:
    """Refuse a kernel the GPU cannot run as written, naming the GPU and what
    the kernel needs (the capped kernel's register cap comes from 2048
    resident threads per SM; a GPU with fewer would run it uncapped)."""
    if kernel == "ilp_chains_32_capped" and threads_per_sm < CAPPED_THREADS_PER_SM:
        raise RuntimeError(f"{kernel} needs an SM that holds {CAPPED_THREADS_PER_SM} threads (sm_80, sm_90); "
                           f"{gpu} holds {threads_per_sm}")


def fma_chains_cupy(x, out=None, *, kernel: str = "ilp_chains_4", iters: int = 1024,
                    blocks: int | None = None, threads: int = 32):
    """Run one FMA kernel: one thread per element of x; iters FMAs per thread."""
    import cupy as cp

    checks.require_vector("x", x, np.float32, lib="cupy")
    checks.require_block_size("threads", threads)
    if kernel not in FMA_KERNELS:
        raise ValueError(f"kernel must be one of {FMA_KERNELS}, got {kernel!r}")
    if x.size % threads:
        raise ValueError(f"x.size must be a multiple of threads ({threads}), got {x.size}")
    if iters % 32:
        raise ValueError(f"iters must be a multiple of 32 (every chain count divides it), got {iters}")
    if out is None:
        out = cp.empty_like(x)
    else:
        checks.require_vector_like("out", out, "x", x, np.float32, lib="cupy")
        checks.require_no_overlap("out", out, x=x)
    if kernel == "ilp_chains_32_capped":
        info = device_info(cp.cuda.Device().id)
        require_threads_per_sm(kernel, info["name"], info["threads_per_sm"])
    cupy_kernel(kernel)((x.size // threads,), (threads,), (x, out, np.int32(iters)))
    return out


def fma_reference(x: np.ndarray, chains: int, iters: int) -> np.ndarray:
    """Host reference of fma_chains<K> in float64 (the kernels round in float32)."""
    a = x.astype(np.float64)
    b = 1.0 - a
    s = np.zeros_like(a)
    for k in range(chains):
        acc = a + k
        for _ in range(iters // chains):
            acc = acc * a + b
        s += acc
    return s


def int_cupy(x, out=None, *, kernel: str = "int_div_mod", divisor_log2: int = 5, iters: int = 64,
             threads: int = 256):
    """v = v / d + v % d + i (or the shift/mask form with d = 2**divisor_log2), iters times."""
    import cupy as cp

    checks.require_vector("x", x, np.uint32, lib="cupy")
    checks.require_block_size("threads", threads)
    if kernel not in INT_KERNELS:
        raise ValueError(f"kernel must be one of {INT_KERNELS}, got {kernel!r}")
    if not 0 < divisor_log2 < 32:
        raise ValueError(f"divisor_log2 must be in 1..31, got {divisor_log2}")
    if x.size % threads:
        raise ValueError(f"x.size must be a multiple of threads ({threads}), got {x.size}")
    if out is None:
        out = cp.empty_like(x)
    else:
        checks.require_vector_like("out", out, "x", x, np.uint32, lib="cupy")
        checks.require_no_overlap("out", out, x=x)
    arg = np.uint32(1 << divisor_log2) if kernel == "int_div_mod" else np.uint32(divisor_log2)
    cupy_kernel(kernel)((x.size // threads,), (threads,), (x, out, arg, np.int32(iters)))
    return out


def int_reference(x: np.ndarray, divisor_log2: int, iters: int) -> np.ndarray:
    v = x.astype(np.uint64)
    d = 1 << divisor_log2
    for i in range(iters):
        v = (v // d + v % d + i) & 0xFFFFFFFF
    return v.astype(np.uint32)
