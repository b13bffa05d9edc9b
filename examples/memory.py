# %% [markdown]
# # The memory hierarchy: latency, coalescing, data layout
#
# Three small experiments from the chapter "Memory hierarchy and energy":
#
# - a pointer chase: how many cycles one load takes from shared memory,
#   L1, L2 and HBM (CuPy; Numba only in nanoseconds, it has no cycle counter);
# - a strided copy, out[i] = x[i * stride]: the bandwidth follows the number
#   of 32-byte sectors a warp touches;
# - points stored as an array of structures (AoS) or a structure of arrays
#   (SoA), read whole or one field at a time.
#
# Every result is checked against NumPy.
#
# Run:
#
#     python examples/memory.py                     # n = 2^22, both
#     python examples/memory.py --size 1000 --impl numba
#
# Without a GPU the Numba part runs in Numba's CUDA simulator (keep n small)
# and the CuPy part is skipped.

# %%
import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1] if "__file__" in globals() else Path.cwd().parent
sys.path.insert(0, str(ROOT))
import kernels  # noqa: F401  (picks Numba's simulator when there is no GPU)
from kernels import memory
from kernels.device import has_gpu, numba_simulator


# %% [markdown]
# ## Latency by pointer chasing (CuPy)

# %%
# --8<-- [start:cupy_latency]
def latency_demo():
    """Cycles per dependent load from each level; returns {level: cycles}."""
    levels = {
        "shared": memory.latency_shared(),
        "L1 (16 KiB chain)": memory.latency_global(16 << 10),
        "L2 (16 KiB, __ldcg)": memory.latency_global(16 << 10, l2_only=True),
        "HBM (1 GiB chain)": memory.latency_global(1 << 30, warm=0, l2_only=True),
    }
    for name, r in levels.items():
        print(f"{name:22} {r['cycles']:7.0f} cycles {r['ns']:7.1f} ns")
    return {name: r["cycles"] for name, r in levels.items()}
# --8<-- [end:cupy_latency]


# %% [markdown]
# ## A strided copy and AoS vs SoA (CuPy)

# %%
# --8<-- [start:cupy_strided]
def strided_demo(n=1 << 22, strides=(1, 2, 4, 8, 32)):
    """Useful bandwidth of out[i] = x[i * stride]; checks every copy."""
    import cupy as cp

    from kernels.harness import time_gpu

    errors = []
    for stride in strides:
        x = cp.random.random((n - 1) * stride + 1, dtype=cp.float32)
        out = cp.full(n, cp.nan, dtype=cp.float32)
        memory.copy_strided_cupy(x, out, stride)
        errors.append(float(cp.max(cp.abs(out - x[::stride]))))
        ms = time_gpu(lambda: memory.copy_strided_cupy(x, out, stride))["ms"]
        print(f"stride {stride:2}: {8 * n / ms / 1e6:7.0f} GB/s of useful bytes")
    return max(errors)
# --8<-- [end:cupy_strided]


def aos_soa_cupy(n):
    import cupy as cp

    aos = cp.random.standard_normal((n, 3), dtype=cp.float32)
    soa = cp.ascontiguousarray(aos.T)
    want = cp.sqrt(cp.sum(aos.astype(cp.float64) ** 2, axis=1))
    err = max(float(cp.max(cp.abs(memory.norm_cupy(aos, "aos") - want))),
              float(cp.max(cp.abs(memory.norm_cupy(soa, "soa") - want))),
              float(cp.max(cp.abs(memory.scale_x_cupy(aos, "aos") - 2 * aos[:, 0]))),
              float(cp.max(cp.abs(memory.scale_x_cupy(soa, "soa") - 2 * aos[:, 0]))))
    return err


# %% [markdown]
# ## The same in Numba (runs in the simulator too)

# %%
# --8<-- [start:numba_demo]
def numba_demo(n):
    """Strided copy, AoS/SoA and a short chase in Numba; returns max |error|."""
    from numba import cuda

    errors = []
    for stride in (1, 3, 8):
        x = np.random.default_rng(stride).random((n - 1) * stride + 1, dtype=np.float32)
        out = cuda.to_device(np.full(n, np.nan, dtype=np.float32))
        memory.copy_strided_numba(cuda.to_device(x), out, stride)
        errors.append(np.max(np.abs(out.copy_to_host() - x[::stride])))
    aos = np.random.default_rng(0).standard_normal((n, 3), dtype=np.float32)
    for layout, p in (("aos", aos), ("soa", np.ascontiguousarray(aos.T))):
        got = memory.points_numba("norm", cuda.to_device(p), layout).copy_to_host()
        errors.append(np.max(np.abs(got - np.linalg.norm(aos.astype(np.float64), axis=1))))
    r = memory.latency_global_numba(4096, steps=64)  # 32 nodes: a tiny chain
    succ, node = memory.random_cycle(32), 0
    for _ in range(64):
        node = succ[node]
    errors.append(abs(r["end"] - node * 32))  # 32 int32 per 128-byte node
    return float(max(errors))
# --8<-- [end:numba_demo]


# %%
def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    p.add_argument("--size", type=int, default=1 << 22, help="elements (points) per experiment")
    p.add_argument("--impl", choices=("all", "cupy", "numba"), default="all")
    args = p.parse_args(argv)
    n = args.size
    if args.impl in ("all", "numba"):
        if numba_simulator() and n > 2000:
            n_numba = 1000
            print(f"numba: the CUDA simulator is slow; using n = {n_numba}")
        else:
            n_numba = n
        err = numba_demo(n_numba)
        print(f"numba: strided copy, AoS/SoA norm, chase: max |error| = {err:.2e}")
        if not err <= 1e-6:
            return 1
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
        else:
            latency_demo()
            err = max(strided_demo(n), aos_soa_cupy(n))
            print(f"cupy: strided copy, AoS/SoA: max |error| = {err:.2e}")
            if not err <= 1e-6:
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
