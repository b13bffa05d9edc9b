# %% [markdown]
# # Sum of an array: the reduction ladder
#
# Each step of the ladder (kernels/cuda/reduction.cu, kernels/reduction.py)
# computes the same sum; this script checks every one against NumPy in
# float64 and, on a GPU, times them against cupy.sum (CUB).
#
# Run:
#
#     python examples/reduction.py                    # n = 2**20 + 7
#     python examples/reduction.py --size 1000 --impl numba
#
# Without a GPU the Numba steps run in the CUDA simulator (keep n small);
# the warp-shuffle step and the CuPy ladder need a GPU.

# %%
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] if "__file__" in globals() else Path.cwd().parent
sys.path.insert(0, str(ROOT))
import kernels  # noqa: E402,F401  (picks Numba's simulator when there is no GPU)
from kernels.device import has_gpu, numba_simulator  # noqa: E402

# %%
# --8<-- [start:check]
import numpy as np


def check_sum(sum_fn, n, seed=0):
    x = np.random.default_rng(seed).random(n, dtype=np.float32)  # uniform [0, 1): never zeros
    got = sum_fn(x)
    want = x.astype(np.float64).sum()
    rel = abs(got - want) / want
    assert rel < 1e-5, f"relative error {rel:.1e}"
    print(f"n = {n:,}: sum {got:.6g}, relative error {rel:.1e}")
# --8<-- [end:check]


# %%
# --8<-- [start:numba_ladder]
def check_numba_ladder(n, threads=64):
    """Every Numba step through its wrapper (the simulator skips the shuffle step)."""
    from numba import cuda

    from kernels.device import numba_simulator
    from kernels.reduction import NUMBA_GPU_ONLY, NUMBA_KERNELS, reduce_sum_numba

    for variant in NUMBA_KERNELS:
        if variant in NUMBA_GPU_ONLY and numba_simulator():
            print(f"{variant:20s} skipped: warp shuffles need a GPU")
            continue
        print(f"{variant:20s}", end=" ")
        check_sum(lambda x: float(reduce_sum_numba(cuda.to_device(x), variant=variant, threads=threads)
                                  .copy_to_host()[0]), n)
# --8<-- [end:numba_ladder]


# %%
# --8<-- [start:cupy_ladder]
def cupy_ladder(n, threads=256):
    """Every CUDA C step, checked, then timed against cupy.sum (CUB)."""
    import cupy as cp

    from kernels import harness
    from kernels.reduction import VARIANTS, reduce_sum_cupy

    x = cp.random.default_rng(0).random(n, dtype=cp.float32)
    want = float(cp.sum(x, dtype=cp.float64))
    cub = harness.time_gpu(lambda: cp.sum(x))["ms"]
    for variant in VARIANTS:
        got = float(reduce_sum_cupy(x, variant=variant, threads=threads))
        assert abs(got - want) <= 1e-5 * want, variant
        ms = harness.time_gpu(lambda: reduce_sum_cupy(x, variant=variant, threads=threads))["ms"]
        print(f"{variant:20s} {ms:8.4f} ms  {4 * n / ms / 1e6:7.0f} GB/s  {cub / ms:5.2f}x cupy.sum")
    return cub
# --8<-- [end:cupy_ladder]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="The reduction ladder, checked against NumPy.")
    p.add_argument("--size", type=int, default=2**20 + 7)
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    if args.impl in ("all", "numba"):
        check_numba_ladder(args.size, threads=64 if numba_simulator() else 256)
        print("numba: max |error| within tolerance for every step")
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
        else:
            cupy_ladder(args.size)
            print("cupy: max |error| within tolerance for every step")


if __name__ == "__main__":
    main()
