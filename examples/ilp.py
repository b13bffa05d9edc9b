# %% [markdown]
# # Instruction-level parallelism: independent chains, not unrolling
#
# The same number of FMAs per thread, split over 1, 2, 4, ... independent
# accumulators (kernels/cuda/ilp.cu), run with one warp per scheduler so
# nothing else hides the FMA latency.
#
# Run:
#
#     python examples/ilp.py
#
# The kernels are CUDA C (CuPy) only: without a GPU this script says so.

# %%
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] if "__file__" in globals() else Path.cwd().parent
sys.path.insert(0, str(ROOT))
import kernels  # noqa: E402,F401
from kernels.device import has_gpu  # noqa: E402


# %%
# --8<-- [start:cupy_chains]
def chains_demo(iters=1 << 16):
    """TFLOP/s of each FMA kernel with 4 warps per SM (one per scheduler)."""
    import cupy as cp
    import numpy as np

    from kernels import harness, ilp

    sms = cp.cuda.Device().attributes["MultiProcessorCount"]
    n = sms * 4 * 32  # 4 blocks of one warp per SM
    x = cp.random.default_rng(0).random(n, dtype=cp.float32) * 0.5 + 0.25
    out = cp.empty_like(x)
    for name in ("ilp_chains_1", "ilp_chain_unrolled", "ilp_chains_4", "ilp_chains_8"):
        chains = 1 if name == "ilp_chain_unrolled" else int(name.split("_")[2])
        ilp.fma_chains_cupy(x, out, kernel=name, iters=2048)
        want = ilp.fma_reference(cp.asnumpy(x), chains, 2048)
        err = np.max(np.abs(cp.asnumpy(out) - want) / np.abs(want))
        ms = harness.time_gpu(lambda: ilp.fma_chains_cupy(x, out, kernel=name, iters=iters))["ms"]
        print(f"{name:20s} {2 * n * iters / ms / 1e9:6.2f} TFLOP/s  "
              f"{ilp.resources(name)['registers']:3d} registers  max rel. error {err:.1e}")
# --8<-- [end:cupy_chains]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="ILP from independent accumulators.")
    p.add_argument("--size", type=int, default=1 << 16, help="FMAs per thread")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    if args.impl in ("all", "numba"):
        print("numba: no Numba version of this example (the lesson is about what nvcc emits)")
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
        else:
            chains_demo(iters=max(2048, args.size // 2048 * 2048))
            print("cupy: max |error| within tolerance")


if __name__ == "__main__":
    main()
