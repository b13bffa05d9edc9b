# %% [markdown]
# # Matrix multiplication: the ladder from naive to autotuned
#
# Each step (kernels/cuda/matmul.cu, kernels/matmul.py) computes the same
# C = A @ B in FP32; this script checks every one against NumPy in float64
# and, on a GPU, times the CUDA C steps against cuBLAS (cupy.matmul).
#
# Run:
#
#     python examples/matmul.py                     # 1000 x 1013 x 77, then 4096^3 timings
#     python examples/matmul.py --size 1000 --impl numba
#
# Without a GPU the Numba steps run in the CUDA simulator: the size is then
# cut to 33 x 65 x 17 (a 1000 x 1000 product takes minutes there).

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


def check_matmul(matmul_fn, M, N, K, seed=0):
    """matmul_fn(A, B) -> C on host arrays; compared with float64 NumPy."""
    rng = np.random.default_rng(seed)
    A = rng.standard_normal((M, K), dtype=np.float32)  # random, never zeros
    B = rng.standard_normal((K, N), dtype=np.float32)
    C = matmul_fn(A, B)
    ref = A.astype(np.float64) @ B.astype(np.float64)
    rel = np.linalg.norm(C - ref) / np.linalg.norm(ref)
    assert rel < 1e-5, f"relative error {rel:.1e}"
    print(f"{M}x{N}x{K}: relative error {rel:.1e}")
# --8<-- [end:check]


# %%
# --8<-- [start:numba_ladder]
def check_numba_ladder(M, N, K):
    """Every Numba step through its wrapper; C starts as NaN, so an element
    a kernel forgets to write fails the check."""
    from numba import cuda

    from kernels.matmul import NUMBA_KERNELS, matmul_numba

    for variant in NUMBA_KERNELS:
        print(f"{variant:18s}", end=" ")

        def run(A, B, v=variant):
            C = cuda.to_device(np.full((A.shape[0], B.shape[1]), np.nan, dtype=np.float32))
            return matmul_numba(cuda.to_device(A), cuda.to_device(B), C, variant=v).copy_to_host()
        check_matmul(run, M, N, K)
# --8<-- [end:numba_ladder]


# %%
# --8<-- [start:cupy_ladder]
def cupy_ladder(n=4096, M=1000, N=1013, K=77):
    """Every CUDA C step: checked at an odd shape, then timed at n^3
    against cuBLAS (cupy.matmul, TF32 off), measured in the same run."""
    import cupy as cp

    from kernels import harness
    from kernels.matmul import VARIANTS, matmul_cupy

    for variant in VARIANTS:
        print(f"{variant:18s}", end=" ")
        check_matmul(lambda A, B: matmul_cupy(cp.asarray(A), cp.asarray(B), variant=variant).get(), M, N, K)
    A = cp.random.standard_normal((n, n), dtype=cp.float32)
    B = cp.random.standard_normal((n, n), dtype=cp.float32)
    C = cp.empty((n, n), dtype=cp.float32)
    flop = 2 * n**3
    cublas = harness.time_gpu(lambda: cp.matmul(A, B, out=C), max_seconds=1)["ms"]
    print(f"{'cuBLAS':18s} {cublas:8.3f} ms {flop / cublas / 1e9:6.1f} TFLOP/s")
    for variant in VARIANTS[1:]:  # the naive step takes seconds per call at 4096^3
        ms = harness.time_gpu(lambda: matmul_cupy(A, B, C, variant=variant), max_seconds=1)["ms"]
        print(f"{variant:18s} {ms:8.3f} ms {flop / ms / 1e9:6.1f} TFLOP/s  {cublas / ms:5.2f} x cuBLAS")
# --8<-- [end:cupy_ladder]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="The matmul ladder, checked against NumPy.")
    p.add_argument("--size", type=int, default=1000, help="M of the check (N = M + 13, K = 77)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    M, N, K = args.size, args.size + 13, 77
    if args.impl in ("all", "numba"):
        if numba_simulator():
            M, N, K = 33, 65, 17
        check_numba_ladder(M, N, K)
        print("numba: max |error| within tolerance for every step")
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
        else:
            cupy_ladder(n=4096 if args.size >= 1000 else 1024, M=args.size, N=args.size + 13, K=77)
            print("cupy: max |error| within tolerance for every step")


if __name__ == "__main__":
    main()
