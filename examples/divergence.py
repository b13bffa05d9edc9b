# %% [markdown]
# # What a split warp costs
#
# Lanes 0 .. split-1 of every warp take path A, the others path B
# (kernels/cuda/divergence.cu). A long branch diverges: the warp runs both
# paths. A short one is predicated: both paths' instructions always issue.
# Every kernel's output is checked against a host reference (NumPy) and the
# script exits non-zero on a wrong answer.
#
# Run:
#
#     python examples/divergence.py                  # n = 2**22 threads
#     python examples/divergence.py --size 1000 --impl numba
#
# Copy with it: kernels/cuda/divergence.cu (the CuPy part compiles it).
#
# Without a GPU the Numba kernel runs in the CUDA simulator (results only:
# the simulator has no warps, so no timing; keep n small) and the CuPy part
# is skipped.

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
import argparse  # noqa: E402

# %% [markdown]
# ## The host reference
#
# Element i sits in lane i % 32 (blocks are whole warps); each path is a
# chain of float32 FMAs, rounded once per step as the GPU rounds them.

# %%
# --8<-- [start:reference]
import numpy as np  # noqa: E402  (here too: pages show this section alone)


def reference(x: np.ndarray, split: int, iters: int) -> np.ndarray:
    """What the kernels compute, on the host (blocks are whole warps, so the
    lane of element i is i % 32)."""
    lane = np.arange(x.size) % 32
    a = np.where(lane < split, np.float32(0.999), np.float32(1.001)).astype(np.float32)
    b = np.where(lane < split, np.float32(0.001), np.float32(-0.001)).astype(np.float32)
    v = x.astype(np.float64)
    for _ in range(iters):
        v = (v * a + b).astype(np.float32).astype(np.float64)  # float32 FMA: one rounding
    return v.astype(np.float32)
# --8<-- [end:reference]


# %% [markdown]
# ## The long branch in Numba
#
# The same kernel as `branch_long` in divergence.cu (a copy of the one in the
# handbook's kernels/divergence.py).

# %%
# --8<-- [start:numba_import]
from numba import cuda, float32  # noqa: E402
# --8<-- [end:numba_import]


# --8<-- [start:numba_branch_long]
@cuda.jit
def branch_long_kernel(x, out, n, split, iters):
    i = cuda.grid(1)
    if i < n:
        v = x[i]
        if (cuda.threadIdx.x & 31) < split:  # lanes [0, split): path A
            for _ in range(iters):
                v = v * float32(0.999) + float32(0.001)
        else:                                # the others: path B
            for _ in range(iters):
                v = v * float32(1.001) - float32(0.001)
        out[i] = v
# --8<-- [end:numba_branch_long]


# %% [markdown]
# ## Launch it by hand and check it
#
# The output is poisoned with NaN first: an element no thread writes stays
# NaN and fails the check.

# %%
# --8<-- [start:numba_check]
import math  # noqa: E402

import numpy as np  # noqa: E402


def check_branch(kernel, x, split, iters=16, threads=64):
    """Launch a branch kernel on host array x; compare with the host reference."""
    from numba import cuda

    out = cuda.to_device(np.full(x.size, np.nan, dtype=np.float32))  # poison
    kernel[math.ceil(x.size / threads), threads](cuda.to_device(x), out, x.size, split, iters)
    got, want = out.copy_to_host(), reference(x, split, iters)
    err = np.linalg.norm(got - want) / np.linalg.norm(want)  # relative; NaN if any element is NaN
    assert err < 1e-5, f"split {split}: relative error {err}"
    print(f"numba split {split:2d}: max |error| = {np.max(np.abs(got - want)):.1e} (relative {err:.1e})")
# --8<-- [end:numba_check]


# %% [markdown]
# ## The source's example, in CUDA C through CuPy
#
# `seed_if_else` and `seed_ternary` double the elements above a threshold and
# halve the others, in place. Nothing to poison (the input is the output),
# but an element the kernel skips keeps its old value, which is neither twice
# nor half of it.

# %%
# --8<-- [start:seed_launch]
def seed_cupy(data, threshold, kind="seed_if_else", threads=256):
    """The source's example, in place: data > threshold ? data * 2 : data / 2."""
    import cupy as cp
    import numpy as np

    if not isinstance(data, cp.ndarray) or data.dtype != cp.float32 or data.ndim != 1 \
            or not data.flags.c_contiguous:
        raise TypeError(f"data must be a contiguous 1-D float32 cupy array, got {type(data).__name__} "
                        f"{getattr(data, 'dtype', '')} {getattr(data, 'shape', '')}")
    if kind not in ("seed_if_else", "seed_ternary"):
        raise ValueError(f"kind must be 'seed_if_else' or 'seed_ternary', got {kind!r}")
    n = data.size
    if n:
        blocks = (n + threads - 1) // threads  # whole blocks: the last one is partly idle
        load_cuda("divergence.cu").get_function(kind)((blocks,), (threads,),
                                                      (data, np.float32(threshold), np.int64(n)))
    return data
# --8<-- [end:seed_launch]


# --8<-- [start:seed_check]
def check_seed(kind, h, threshold):
    """Run the kernel on a device copy of h; compare with NumPy in float64."""
    import cupy as cp
    import numpy as np

    got = cp.asnumpy(seed_cupy(cp.asarray(h), threshold, kind=kind))
    h64 = h.astype(np.float64)
    want = np.where(h64 > threshold, h64 * 2, h64 / 2)
    np.testing.assert_array_equal(got, want)  # exact: x2 and /2 are exact in float32
    print(f"cupy {kind}: max |error| = {np.max(np.abs(got - want)):.1e}")
# --8<-- [end:seed_check]


# %% [markdown]
# ## Both branch kernels in CUDA C: checked, then timed
#
# The launcher checks its arguments, rounds the grid up to whole blocks and
# launches. `time_splits` first checks each kernel and split on a small
# input (NaN-poisoned output), then times it on n elements with CUDA events.

# %%
# --8<-- [start:cupy_launch]
def branch_cupy(x, out, split, iters, kind="branch_long", threads=256):
    """Lanes [0, split) of each warp take path A, the rest path B; returns out."""
    import cupy as cp
    import numpy as np

    for name, a in (("x", x), ("out", out)):
        if not isinstance(a, cp.ndarray) or a.dtype != cp.float32 or a.ndim != 1 or not a.flags.c_contiguous:
            raise TypeError(f"{name} must be a contiguous 1-D float32 cupy array, got {type(a).__name__} "
                            f"{getattr(a, 'dtype', '')} {getattr(a, 'shape', '')}")
    if out.shape != x.shape:
        raise ValueError(f"out must have the shape of x {x.shape}, got {out.shape}")
    if not 0 <= split <= 32:
        raise ValueError(f"split must be between 0 and 32 lanes, got {split}")
    if iters < 0:
        raise ValueError(f"iters must be >= 0, got {iters}")
    if kind not in ("branch_long", "branch_short"):
        raise ValueError(f"kind must be 'branch_long' or 'branch_short', got {kind!r}")
    if threads % 32 or not 32 <= threads <= 1024:  # whole warps: the lane of element i is i % 32
        raise ValueError(f"threads must be a multiple of 32 from 32 to 1024, got {threads}")
    if cp.may_share_memory(out, x):  # x and out are __restrict__ in the kernels
        raise ValueError("out must not overlap x: other threads still read x while out is written")
    n = x.size
    if n:
        blocks = (n + threads - 1) // threads
        load_cuda("divergence.cu").get_function(kind)(
            (blocks,), (threads,), (x, out, np.int64(n), np.int32(split), np.int32(iters)))
    return out
# --8<-- [end:cupy_launch]


# --8<-- [start:cupy_split]
def time_splits(n, iters=1024, splits=(0, 1, 16, 31, 32), check_n=4099, reps=20, seed=0):
    """Both kernels for several splits: each checked on check_n elements
    against the host reference, then timed on n; returns {(kind, split): ms}."""
    import cupy as cp
    import numpy as np

    rng = np.random.default_rng(seed)
    small = rng.random(check_n, dtype=np.float32)  # [0, 1): never zeros
    x = cp.asarray(rng.random(n, dtype=np.float32))
    out = cp.empty_like(x)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    times = {}
    for kind in ("branch_long", "branch_short"):
        for split in splits:
            poisoned = cp.full(small.size, cp.nan, dtype=cp.float32)  # an unwritten element stays NaN
            got = cp.asnumpy(branch_cupy(cp.asarray(small), poisoned, split, iters, kind))
            want = reference(small, split, iters)
            err = np.linalg.norm(got - want) / np.linalg.norm(want)  # relative; NaN if any element is NaN
            assert err < 1e-5, f"{kind} split {split}: relative error {err}"
            branch_cupy(x, out, split, iters, kind)  # warm-up
            start.record()
            for _ in range(reps):
                branch_cupy(x, out, split, iters, kind)
            stop.record()
            stop.synchronize()
            times[kind, split] = cp.cuda.get_elapsed_time(start, stop) / reps  # ms per launch
            print(f"cupy {kind:12s} split {split:2d}: max |error| = {np.max(np.abs(got - want)):.1e}, "
                  f"{times[kind, split]:.4f} ms")
    return times
# --8<-- [end:cupy_split]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="Cost of a split warp.")
    p.add_argument("--size", type=int, default=None,
                   help="threads, one element each (default 2^22; 1024 in Numba's simulator)")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)
    if args.size is None:
        args.size = 1024 if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1" else 2**22
    rng = np.random.default_rng(0)
    if args.impl in ("all", "numba"):
        x = rng.random(args.size, dtype=np.float32)
        for split in (0, 1, 16, 31, 32):
            check_branch(branch_long_kernel, x, split)
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
            return
        h = rng.uniform(50, 150, args.size).astype(np.float32)  # around the threshold, never zero
        for kind in ("seed_if_else", "seed_ternary"):
            check_seed(kind, h, 100.0)
        times = time_splits(args.size)
        for kind in ("branch_long", "branch_short"):  # a diverged long branch runs both paths: about 2x
            print(f"{kind}: split 16 / split 0 = {times[kind, 16] / times[kind, 0]:.2f}x")


if __name__ == "__main__":
    main()
