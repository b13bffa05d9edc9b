# %% [markdown]
# # What a split warp costs
#
# Lanes 0 .. split-1 of every warp take path A, the others path B
# (kernels/cuda/divergence.cu). A long branch diverges: the warp runs both
# paths. A short one is predicated: both paths' instructions always issue.
#
# Run:
#
#     python examples/divergence.py                  # n = 2**22 threads
#     python examples/divergence.py --size 1000 --impl numba
#
# Without a GPU the Numba kernel runs in the CUDA simulator (results only:
# the simulator has no warps, so no timing).

# %%
import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] if "__file__" in globals() else Path.cwd().parent
sys.path.insert(0, str(ROOT))
import numpy as np  # noqa: E402

import kernels  # noqa: E402,F401
from kernels.device import has_gpu  # noqa: E402
from kernels.divergence import branch_numba, reference  # noqa: E402


# %%
# --8<-- [start:numba_check]
def check_branch(kernel, n=1000, split=16, iters=16, threads=64):
    """Launch a branch kernel by hand and compare with the host reference."""
    import numpy as np
    from numba import cuda

    from kernels.divergence import reference

    x = np.random.default_rng(split).random(n, dtype=np.float32) + np.float32(0.5)
    out = cuda.to_device(np.full(n, np.nan, dtype=np.float32))  # poison
    kernel[(n + threads - 1) // threads, threads](cuda.to_device(x), out, n, split, iters)
    err = np.max(np.abs(out.copy_to_host() - reference(x, split, iters)))
    assert err < 1e-5, err
    print(f"split {split}: max |error| = {err:.1e}")
# --8<-- [end:numba_check]


# %%
# --8<-- [start:cupy_split]
def time_splits(n, iters=1024, splits=(0, 1, 16, 31, 32)):
    """Time both kernels for several splits; returns {(kind, split): ms}."""
    import cupy as cp

    from kernels import harness
    from kernels.divergence import branch_cupy

    x = cp.random.default_rng(0).random(n, dtype=cp.float32) + 0.5
    out = cp.empty_like(x)
    times = {}
    for kind in ("branch_long", "branch_short"):
        for split in splits:
            t = harness.time_gpu(lambda: branch_cupy(x, out, split=split, iters=iters, kind=kind))
            times[kind, split] = t["ms"]
            print(f"{kind:12s} split {split:2d}: {t['ms']:.4f} ms")
    return times
# --8<-- [end:cupy_split]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="Cost of a split warp.")
    p.add_argument("--size", type=int, default=2**22)
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    if args.impl in ("all", "numba"):
        from numba import cuda

        x = np.random.default_rng(0).random(args.size, dtype=np.float32) + np.float32(0.5)
        for split in (0, 1, 16, 32):
            out = branch_numba(cuda.to_device(x), split=split, iters=16, threads=64).copy_to_host()
            err = np.max(np.abs(out - reference(x, split, 16)))
            assert err < 1e-5, err
        print(f"numba branch_long: n = {args.size:,}, max |error| = {err:.1e}")
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
        else:
            import cupy as cp

            from kernels.divergence import branch_cupy

            x = np.random.default_rng(1).random(args.size, dtype=np.float32) + np.float32(0.5)
            out = cp.asnumpy(branch_cupy(cp.asarray(x), split=16, iters=64))
            print(f"cupy branch_long: max |error| = {np.max(np.abs(out - reference(x, 16, 64))):.1e}")
            time_splits(args.size)


if __name__ == "__main__":
    main()
