# %% [markdown]
# # Instruction-level parallelism: independent chains, not unrolling
#
# The same number of FMAs per thread, split over 1, 2, 4, ... independent
# accumulators (kernels/cuda/ilp.cu), run with one warp per scheduler so
# nothing else hides the FMA latency; then integer division by a run-time
# divisor against a shift and a mask. Every kernel is checked against a
# float64 (or exact integer) NumPy reference, its output poisoned first,
# and the script exits non-zero on a wrong result.
#
# Run:
#
#     python ilp.py                  # check every kernel, then time the chains
#     python ilp.py --size 65536     # FMAs per thread in the timed runs
#
# Copy with it: kernels/cuda/ilp.cu (beside this file).
# Needs numpy and cupy. The kernels are CUDA C only (the lesson is about what
# nvcc emits): without a GPU this script says so and exits.

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

# %%
import argparse

# %%
# --8<-- [start:fma_launcher]
FMA_KERNELS = ("ilp_chains_1", "ilp_chains_2", "ilp_chains_4", "ilp_chains_8", "ilp_chains_16",
               "ilp_chains_32", "ilp_chain_unrolled", "ilp_chains_32_capped")


@functools.cache
def sm_threads(device_id):
    """How many threads one SM of the device holds; asked once per device,
    since a driver query inside a timed wrapper would be timed too."""
    import cupy as cp

    return cp.cuda.Device(device_id).attributes["MaxThreadsPerMultiProcessor"]


def fma_chains_cupy(x, out=None, *, kernel="ilp_chains_4", iters=1024, threads=32):
    """Run one FMA kernel of ilp.cu: one thread per element of x, iters FMAs
    per thread; out[t] is the sum of the thread's chains. The kernels have
    no bounds check, so x.size must be a multiple of threads. Returns out."""
    import cupy as cp
    import numpy as np

    if kernel not in FMA_KERNELS:
        raise ValueError(f"kernel must be one of {FMA_KERNELS}, got {kernel!r}")
    if not isinstance(x, cp.ndarray) or x.dtype != cp.float32 or x.ndim != 1 or not x.flags.c_contiguous:
        raise TypeError(f"x must be a contiguous 1-D float32 cupy.ndarray, got {type(x).__name__} "
                        f"{getattr(x, 'dtype', '')} {getattr(x, 'shape', '')}")
    if threads not in range(32, 1025, 32):
        raise ValueError(f"threads must be a multiple of 32 between 32 and 1024, got {threads}")
    blocks, rest = divmod(x.size, threads)
    if rest:
        raise ValueError(f"x.size must be a multiple of threads ({threads}), got {x.size}")
    if iters % 32:
        raise ValueError(f"iters must be a multiple of 32 (every chain count divides it), got {iters}")
    if out is None:
        out = cp.empty_like(x)
    elif not isinstance(out, cp.ndarray) or out.dtype != x.dtype or out.shape != x.shape:
        raise ValueError(f"out must be a float32 cupy.ndarray of shape {x.shape}")
    elif cp.may_share_memory(out, x):  # x and out are __restrict__ in the kernels
        raise ValueError("out must not overlap x: other threads still read x while out is written")
    if kernel == "ilp_chains_32_capped":  # 2 blocks of 1024 per SM: only sm_80 and sm_90 hold 2048 threads
        held = sm_threads(cp.cuda.Device().id)
        if held < 2048:
            raise RuntimeError(f"{kernel} needs an SM that holds 2048 threads; this GPU's holds {held}")
    load_cuda("ilp.cu").get_function(kernel)((blocks,), (threads,), (x, out, np.int32(iters)))
    return out


def fma_reference(x, chains, iters):
    """fma_chains<chains> in float64 on the host (the kernels round in float32):
    chain k starts at a + k and steps acc = acc * a + b, b = 1 - a."""
    import numpy as np

    a = x.astype(np.float64)
    b = 1.0 - a
    s = np.zeros_like(a)
    for k in range(chains):
        acc = a + k
        for step in range(iters // chains):
            acc = acc * a + b
        s += acc
    return s
# --8<-- [end:fma_launcher]


# %%
# --8<-- [start:fma_check]
def check_fma(kernel, n=32 * 37, iters=2048, seed=0):
    """One FMA kernel on n random inputs in [0.25, 0.75), its output poisoned
    with NaN first, against the float64 reference."""
    import cupy as cp
    import numpy as np

    chains = 1 if kernel == "ilp_chain_unrolled" else int(kernel.split("_")[2])
    x = np.random.default_rng(seed).uniform(0.25, 0.75, n).astype(np.float32)
    out = cp.full(n, cp.nan, dtype=cp.float32)
    fma_chains_cupy(cp.asarray(x), out, kernel=kernel, iters=iters)
    want = fma_reference(x, chains, iters)
    np.testing.assert_allclose(out.get(), want, rtol=1e-4)
    print(f"{kernel:22s} {chains:2d} chains  max |error| {np.max(np.abs(out.get() - want)):.1e}")
# --8<-- [end:fma_check]


# %%
# --8<-- [start:cupy_chains]
def chains_demo(iters=1 << 16, kernels=FMA_KERNELS, threads=32, blocks_per_sm=4):
    """TFLOP/s of each FMA kernel, by default with one warp per scheduler
    (4 blocks of 32 threads per SM). The output of the timed runs is checked
    too: with b = 1 - a every chain converges to 1, so each thread's sum is
    its number of chains."""
    import cupy as cp
    import numpy as np
    from cupyx.profiler import benchmark

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    n = sms * blocks_per_sm * threads
    x = cp.asarray(np.random.default_rng(0).uniform(0.25, 0.75, n).astype(np.float32))
    for name in kernels:
        chains = 1 if name == "ilp_chain_unrolled" else int(name.split("_")[2])
        out = cp.full_like(x, cp.nan)
        result = benchmark(fma_chains_cupy, (x, out), {"kernel": name, "iters": iters, "threads": threads},
                           n_repeat=20, n_warmup=3)
        np.testing.assert_allclose(out.get(), chains, rtol=1e-4)
        ms = float(np.median(result.gpu_times)) * 1e3
        kern = load_cuda("ilp.cu").get_function(name)
        print(f"{name:22s} {2 * n * iters / ms / 1e9:6.2f} TFLOP/s  {kern.num_regs:3d} registers  "
              f"{kern.local_size_bytes:4d} B local (spills)")
# --8<-- [end:cupy_chains]


# %%
# --8<-- [start:int_launcher]
INT_KERNELS = ("int_div_mod", "int_shift_mask")


def int_cupy(x, out=None, *, kernel="int_div_mod", divisor_log2=5, iters=64, threads=256):
    """v = v / d + v % d + i, iters times, with d = 2**divisor_log2: int_div_mod
    divides by d (a run-time value), int_shift_mask shifts by divisor_log2
    and masks. One thread per element of x (uint32; x.size a multiple of
    threads: no bounds check). Returns out."""
    import cupy as cp
    import numpy as np

    if kernel not in INT_KERNELS:
        raise ValueError(f"kernel must be one of {INT_KERNELS}, got {kernel!r}")
    if not isinstance(x, cp.ndarray) or x.dtype != cp.uint32 or x.ndim != 1 or not x.flags.c_contiguous:
        raise TypeError(f"x must be a contiguous 1-D uint32 cupy.ndarray, got {type(x).__name__} "
                        f"{getattr(x, 'dtype', '')} {getattr(x, 'shape', '')}")
    if threads not in range(32, 1025, 32):
        raise ValueError(f"threads must be a multiple of 32 between 32 and 1024, got {threads}")
    blocks, rest = divmod(x.size, threads)
    if rest:
        raise ValueError(f"x.size must be a multiple of threads ({threads}), got {x.size}")
    if divisor_log2 not in range(1, 32):
        raise ValueError(f"divisor_log2 must be in 1..31, got {divisor_log2}")
    if out is None:
        out = cp.empty_like(x)
    elif not isinstance(out, cp.ndarray) or out.dtype != x.dtype or out.shape != x.shape:
        raise ValueError(f"out must be a uint32 cupy.ndarray of shape {x.shape}")
    elif cp.may_share_memory(out, x):
        raise ValueError("out must not overlap x: other threads still read x while out is written")
    arg = np.uint32(1 << divisor_log2) if kernel == "int_div_mod" else np.uint32(divisor_log2)
    load_cuda("ilp.cu").get_function(kernel)((blocks,), (threads,), (x, out, arg, np.int32(iters)))
    return out


def int_reference(x, divisor_log2, iters):
    """The same steps on the host, exactly (uint64, wrapped to 32 bits)."""
    import numpy as np

    v = x.astype(np.uint64)
    d = 1 << divisor_log2
    for i in range(iters):
        v = (v // d + v % d + i) & 0xFFFFFFFF
    return v.astype(np.uint32)


def check_int(kernel, n=256 * 9, iters=100, seed=0):
    """One integer kernel on n random uint32 values against the host
    reference, exactly; out starts as 2^32 - 1, which no step produces."""
    import cupy as cp
    import numpy as np

    top = np.iinfo(np.uint32).max
    x = np.random.default_rng(seed).integers(top, size=n, dtype=np.uint32)
    out = cp.full(n, top, dtype=cp.uint32)
    int_cupy(cp.asarray(x), out, kernel=kernel, divisor_log2=5, iters=iters)
    np.testing.assert_array_equal(out.get(), int_reference(x, 5, iters))
    print(f"{kernel:22s} {n} values, {iters} steps: exact (max |error| 0)")
# --8<-- [end:int_launcher]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="ILP from independent accumulators; integer division.")
    p.add_argument("--size", type=int, default=1 << 16, help="FMAs per thread in the timed runs")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    if args.impl in ("all", "numba"):
        print("numba: no Numba version of this example (the lesson is about what nvcc emits)")
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
            return
        for name in FMA_KERNELS:
            check_fma(name)
        for name in INT_KERNELS:
            check_int(name)
        chains_demo(iters=max(2048, args.size // 2048 * 2048))


if __name__ == "__main__":
    main()
