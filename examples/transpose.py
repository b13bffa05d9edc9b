# %% [markdown]
# # Matrix transpose: shared memory, bank conflicts and bytes in flight
#
# out = x.T in float32, step by step (kernels/cuda/transpose.cu,
# kernels/transpose.py): naive (strided writes), a shared-memory tile
# (coalesced writes, 32-way bank conflicts), the tile padded (no
# conflicts), and a coarsened tile (float4, 16 elements per thread). Each
# step is checked against NumPy (a transpose is exact); on a GPU each is
# timed against a device-to-device copy of the same bytes.
#
# Run:
#
#     python examples/transpose.py                     # 1000 x 1013 check, then 8192^2 timings
#     python examples/transpose.py --size 1000 --impl numba
#
# Without a GPU the Numba steps run in the CUDA simulator: the size is then
# cut to 33 x 40 (it runs one Python thread per GPU thread).

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


def check_transpose(transpose_fn, rows, cols, seed=0):
    """transpose_fn(x) -> out on host arrays; out must be x.T exactly (a
    transpose moves values, it computes nothing)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, cols), dtype=np.float32)  # random, never zeros
    out = transpose_fn(x)
    assert out.shape == (cols, rows), out.shape
    err = float(np.max(np.abs(out - x.T)))  # NaN where an element was never written
    assert np.array_equal(out, x.T), f"max |error| {err}"
    print(f"{rows}x{cols}: max |error| = {err:.1e}")
# --8<-- [end:check]


# %%
# --8<-- [start:numba_ladder]
def check_numba_ladder(rows, cols):
    """Every Numba step through its wrapper; out starts as NaN, so an
    element a kernel forgets to write fails the check."""
    from numba import cuda

    from kernels.transpose import NUMBA_VARIANTS, transpose_numba

    for variant in NUMBA_VARIANTS:
        print(f"{variant:12s}", end=" ")

        def run(x, v=variant):
            out = cuda.to_device(np.full(x.shape[::-1], np.nan, dtype=np.float32))
            return transpose_numba(cuda.to_device(x), out, variant=v).copy_to_host()
        check_transpose(run, rows, cols)
# --8<-- [end:numba_ladder]


# %%
def time_numba_ladder(n):
    """The Numba steps at n x n on the GPU (CUDA events through CuPy)."""
    import cupy as cp
    from numba import cuda

    from kernels import harness
    from kernels.transpose import NUMBA_VARIANTS, transpose_numba

    x = cuda.as_cuda_array(cp.random.standard_normal((n, n), dtype=cp.float32))
    out = cuda.as_cuda_array(cp.empty((n, n), dtype=cp.float32))
    for variant in NUMBA_VARIANTS:
        ms = harness.time_gpu(lambda v=variant: transpose_numba(x, out, variant=v), max_seconds=1)["ms"]
        print(f"numba {variant:12s} {ms:8.4f} ms {8 * n * n / ms / 1e6:7.0f} GB/s")


# %%
# --8<-- [start:cupy_ladder]
def cupy_ladder(n=8192, rows=1000, cols=1013):
    """Every CUDA C step and the tiled copy: checked at an odd shape, then
    timed at n x n against a device-to-device copy of the same bytes
    (read + written), measured in the same run."""
    import cupy as cp

    from kernels import harness
    from kernels.transpose import VARIANTS, copy_tiled_cupy, transpose_cupy

    for variant in VARIANTS:
        print(f"{variant:12s}", end=" ")
        check_transpose(lambda x: transpose_cupy(cp.asarray(x), variant=variant).get(), rows, cols)
    print(f"{'copy_tiled':12s}", end=" ")
    check_transpose(lambda x: copy_tiled_cupy(cp.asarray(x)).get().T, rows, cols)  # a copy: compare its .T
    x = cp.random.standard_normal((n, n), dtype=cp.float32)
    out = cp.empty((n, n), dtype=cp.float32)
    nbytes = 2 * x.nbytes  # bytes read + bytes written

    def memcpy():
        cp.cuda.runtime.memcpyAsync(out.data.ptr, x.data.ptr, x.nbytes, cp.cuda.runtime.memcpyDeviceToDevice,
                                    cp.cuda.get_current_stream().ptr)
    copy_ms = harness.time_gpu(memcpy, max_seconds=1)["ms"]
    print(f"{'cudaMemcpy':12s} {copy_ms:8.4f} ms {nbytes / copy_ms / 1e6:7.0f} GB/s")
    timed = [(v, lambda v=v: transpose_cupy(x, out, variant=v)) for v in VARIANTS]
    timed.append(("copy_tiled", lambda: copy_tiled_cupy(x, out)))
    for name, fn in timed:
        ms = harness.time_gpu(fn, max_seconds=1)["ms"]
        print(f"{name:12s} {ms:8.4f} ms {nbytes / ms / 1e6:7.0f} GB/s  {copy_ms / ms:5.2f} x cudaMemcpy")
# --8<-- [end:cupy_ladder]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="The transpose ladder, checked against NumPy.")
    p.add_argument("--size", type=int, default=1000, help="rows of the check (cols = rows + 13)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)  # ignore a notebook kernel's own arguments
    rows, cols = args.size, args.size + 13
    n = 8192 if args.size >= 1000 else 1024  # timing size: 8192^2 is 512 MiB moved, beyond the L2 cache
    if args.impl in ("all", "numba"):
        if numba_simulator():
            rows, cols = 33, 40
        check_numba_ladder(rows, cols)
        print("numba: max |error| is zero for every step")
        if has_gpu():
            time_numba_ladder(n)
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
        else:
            cupy_ladder(n, args.size, args.size + 13)
            print("cupy: max |error| is zero for every step")


if __name__ == "__main__":
    sys.exit(main())
