# %% [markdown]
# # Host <-> device transfers: pinned memory, streams, managed memory, zero-copy
#
# Data that starts on the host must cross the PCIe link before a kernel can
# use it. This script measures what that costs and how to hide it
# (kernels/host_transfer.py, kernels/cuda/host_transfer.cu):
#
# 1. a copy from pageable memory (a NumPy array) against one from pinned
#    memory (`cupyx.empty_pinned`, Numba's `cuda.pinned_array`);
# 2. a chunked pipeline, copy in -> kernel -> copy out, on one stream
#    against 2 and 4 streams, where copies overlap the kernels;
# 3. on a GPU, a kernel reading data the host has just written: copied
#    first, through managed memory (with and without prefetch), or read
#    over the link directly (zero-copy).
#
# Every result is checked against NumPy in float64.
#
# Run:
#
#     python examples/host_transfer.py                    # n = 2**24 (64 MiB of float32)
#     python examples/host_transfer.py --size 1000 --impl numba
#
# Without a GPU the Numba part runs in Numba's CUDA simulator (keep n small:
# it runs one Python thread per GPU thread; its streams run in order and
# time nothing) and the CuPy part is skipped.

# %%
import argparse
import sys
import time
from pathlib import Path

import numpy as np

# The repo root holds kernels/ (in a notebook, start Jupyter in examples/).
ROOT = Path(__file__).resolve().parents[1] if "__file__" in globals() else Path.cwd().parent
sys.path.insert(0, str(ROOT))
import kernels  # noqa: E402,F401  (picks Numba's simulator when there is no GPU)
from kernels import host_transfer as ht  # noqa: E402
from kernels.device import has_gpu, numba_simulator  # noqa: E402

# %% [markdown]
# ## Numba: pinned buffers and a pipeline on streams
#
# `cuda.pinned_array` allocates page-locked host memory; the pipeline cuts
# the array into chunks and gives chunk c to stream c % streams.

# %%
# --8<-- [start:numba_demo]
from numba import cuda


def numba_pipeline_demo(n, iters=8, chunks=4, threads=256):
    rng = np.random.default_rng(0)
    x = cuda.pinned_array(n, dtype=np.float32)  # page-locked: DMA reads it directly
    x[:] = rng.random(n, dtype=np.float32) + np.float32(0.5)
    out = cuda.pinned_array(n, dtype=np.float32)
    ref = ht.poly_reference(x, iters)
    work = (cuda.device_array(n, dtype=np.float32), cuda.device_array(n, dtype=np.float32))
    for streams in (1, 2, 4):
        run = dict(chunks=chunks, streams=streams, iters=iters, threads=threads, work=work)
        ht.pipeline_numba(x, out, **run)  # warm-up (the first call compiles the kernel)
        out[:] = np.nan  # poison: an element no chunk writes stays NaN
        t0 = time.perf_counter()
        ht.pipeline_numba(x, out, **run)
        ms = (time.perf_counter() - t0) * 1e3
        err = np.max(np.abs(out - ref) / ref)  # NaN fails the assert
        assert err < 1e-6, err
        print(f"numba pipeline, {chunks} chunks on {streams} stream(s): {ms:8.2f} ms, "
              f"max |error| = {err:.1e} (relative)")
    back = ht.roundtrip_numba(x)  # to the GPU and back on one stream
    assert np.array_equal(back, x)
    print(f"numba pinned round trip of {n:,} float32: exact, max |error| = 0")
# --8<-- [end:numba_demo]


# %% [markdown]
# ## CuPy: pageable against pinned copies
#
# The same copy, from a NumPy array and from a pinned one, each timed with
# the host's clock (the pageable copy's staging runs on the CPU).

# %%
# --8<-- [start:cupy_copies]
def cupy_copy_demo(n):
    import cupy as cp

    x = np.random.default_rng(1).random(n, dtype=np.float32)  # pageable
    x_pin = ht.pinned_like(x)                                   # cupyx.empty_pinned + copy
    dev = cp.empty(n, dtype=cp.float32)
    for direction in ("h2d", "d2h"):
        for name, host in (("pageable", x), ("pinned", x_pin)):
            t = ht.time_copy(host, dev, direction, samples=5)
            print(f"{direction} {name:8s} {4 * n / 2**20:8.1f} MiB: {t['ms']:8.3f} ms, {t['gbps']:6.1f} GB/s")
    back = np.empty_like(x)
    ht.copy_h2d(x_pin, dev)
    ht.copy_d2h(dev, back)  # into pageable memory: returns when done
    print(f"copy round trip: max |error| = {np.max(np.abs(back - x)):.1e}")
# --8<-- [end:cupy_copies]


# %% [markdown]
# ## CuPy: the pipeline, serial against 2 and 4 streams
#
# `balance_iters` picks the kernel's work per element so that a chunk's
# kernel lasts as long as the chunk's copy: then overlap gains the most.

# %%
# --8<-- [start:cupy_pipeline]
def cupy_pipeline_demo(n, chunks=8):
    iters = ht.balance_iters(max(1, n // chunks))["iters"]
    x = ht.pinned_like(np.random.default_rng(2).random(n, dtype=np.float32) + np.float32(0.5))
    out = ht.pinned_like(np.full(n, np.nan, dtype=np.float32))
    ref = ht.poly_reference(x, iters)
    for streams in (1, 2, 4):
        ht.pipeline(x, out, chunks=chunks, streams=streams, iters=iters)  # warm-up
        out[:] = np.nan
        t0 = time.perf_counter()
        ht.pipeline(x, out, chunks=chunks, streams=streams, iters=iters)
        ms = (time.perf_counter() - t0) * 1e3
        err = np.max(np.abs(out - ref) / ref)
        assert err < 1e-6, err
        print(f"cupy pipeline, {chunks} chunks, {iters} FMAs per element, {streams} stream(s): "
              f"{ms:8.2f} ms, {8 * n / (ms * 1e-3) / 1e9:5.1f} GB/s over the link, max |error| = {err:.1e}")
# --8<-- [end:cupy_pipeline]


# %% [markdown]
# ## CuPy: managed memory, prefetch, zero-copy
#
# Each way starts from the same state, the data just written by the host.

# %%
def cupy_host_read_demo(n):
    x = np.random.default_rng(3).random(n, dtype=np.float32) + np.float32(0.5)
    for mode in ht.HOST_READ_MODES:
        case = ht.HostRead(mode, x)
        t = ht.time_host_read(case, samples=5)
        err = np.max(np.abs(case.result() - case.expected()))
        assert err < 1e-5, (mode, err)
        print(f"{mode:20s} {t['ms']:8.3f} ms, {4 * n / (t['ms'] * 1e-3) / 1e9:6.1f} GB/s of input, "
              f"max |error| = {err:.1e}")


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="Pageable vs pinned copies, streams, managed memory, zero-copy.")
    p.add_argument("--size", type=int, default=2**24, help="number of float32 elements")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)  # ignore a notebook kernel's own arguments
    if args.impl in ("all", "numba"):
        where = "Numba's CUDA simulator" if numba_simulator() else "the GPU"
        t0 = time.perf_counter()
        numba_pipeline_demo(args.size, threads=32 if numba_simulator() else 256)
        print(f"numba: ran on {where} in {time.perf_counter() - t0:.2f} s (with copies and JIT)")
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
        else:
            cupy_copy_demo(args.size)
            cupy_pipeline_demo(args.size)
            cupy_host_read_demo(args.size)
    return 0


if __name__ == "__main__":
    sys.exit(main())
