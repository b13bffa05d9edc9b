# %% [markdown]
# # A 5 x 5 image convolution, step by step
#
# The kernel of the four-step tuning method: every step of the ladder in
# kernels/cuda/stencil.cu (CuPy) and the two Numba steps, each checked
# against a float64 NumPy reference and timed on a GPU.
#
# Run:
#
#     python examples/stencil.py                          # 2048 x 2048, both
#     python examples/stencil.py --size 100 --impl numba
#     python examples/stencil.py --variant naive --impl cupy   # one step (make profile uses this)
#
# Without a GPU the Numba steps run in Numba's CUDA simulator (keep the
# image small) and the CuPy part is skipped.

# %%
import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1] if "__file__" in globals() else Path.cwd().parent
sys.path.insert(0, str(ROOT))
import kernels  # noqa: F401  (picks Numba's simulator when there is no GPU)
from kernels import stencil as st
from kernels.device import has_gpu, numba_simulator


# %%
# --8<-- [start:cupy_steps]
def cupy_steps(H, W, variants=st.VARIANTS):
    """Every CUDA C step on one random image: error and time of each."""
    import cupy as cp

    from kernels.harness import time_gpu

    rng = np.random.default_rng(0)
    x_host = rng.standard_normal((H, W), dtype=np.float32)
    w_host = rng.standard_normal((st.KW, st.KW), dtype=np.float32)
    ref = st.reference(x_host, w_host)
    x, w = cp.asarray(x_host), cp.asarray(w_host)
    worst = 0.0
    for variant in variants:
        out = cp.full((H, W), cp.nan, dtype=cp.float32)  # poison
        st.conv2d_cupy(x, w, out, variant=variant)
        err = float(np.max(np.abs(cp.asnumpy(out) - ref)))  # NaN where a pixel was never written
        assert err < 1e-3, (variant, err)
        worst = max(worst, err)
        ms = time_gpu(lambda: st.conv2d_cupy(x, w, out, variant=variant))["ms"]
        print(f"step {st.STEP[variant]} {variant:10}: {ms:8.3f} ms, "
              f"{st.flops(H, W) / ms / 1e9:6.2f} TFLOP/s, max |error| {err:.1e}")
    return worst
# --8<-- [end:cupy_steps]


# --8<-- [start:numba_steps]
def numba_steps(H, W):
    """The Numba steps, checked against NumPy; returns the largest error."""
    from numba import cuda

    rng = np.random.default_rng(1)
    x = rng.standard_normal((H, W), dtype=np.float32)
    w = rng.standard_normal((st.KW, st.KW), dtype=np.float32)
    ref = st.reference(x, w)
    worst = 0.0
    for variant in st.NUMBA_VARIANTS:
        out = cuda.to_device(np.full((H, W), np.nan, dtype=np.float32))
        st.conv2d_numba(cuda.to_device(x), cuda.to_device(w), out, variant=variant)
        worst = max(worst, float(np.max(np.abs(out.copy_to_host() - ref))))
    return worst
# --8<-- [end:numba_steps]


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description="The four-step method's convolution, step by step.")
    p.add_argument("--size", type=int, default=2048, help="image side (pixels)")
    p.add_argument("--impl", choices=("all", "cupy", "numba"), default="all")
    p.add_argument("--variant", choices=st.VARIANTS, default=None, help="one CUDA C step only")
    args = p.parse_args(argv)
    n = args.size
    if args.impl in ("all", "numba"):
        m = min(n, 40) if numba_simulator() else n
        if m != n:
            print(f"numba: the CUDA simulator is slow; using a {m} x {m} image")
        err = numba_steps(m, m)
        print(f"numba steps: max |error| = {err:.2e}")
        if not err < 1e-3:
            return 1
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
        else:
            err = cupy_steps(n, n, [args.variant] if args.variant else st.VARIANTS)
            print(f"cupy steps: max |error| = {err:.2e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
