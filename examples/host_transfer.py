# %% [markdown]
# # Host <-> device transfers: pinned memory, streams, managed memory, zero-copy
#
# Data that starts on the host must cross the PCIe link before a kernel can
# use it: what that costs, and how to hide it.

# %%
"""Host <-> device transfers: pinned memory, streams, managed memory, zero-copy.

1. A copy from pageable memory (a NumPy array) against one from pinned
   memory (`cupyx.empty_pinned`), each way.
2. A chunked pipeline, copy in -> kernel -> copy out, on one stream against
   2 and 4 streams, where copies overlap the kernels (CuPy with
   host_transfer.cu's `poly_chunk`; Numba with `cuda.pinned_array` and
   `cuda.stream()`).
3. On a GPU, a kernel reading data the host has just written: copied first,
   through managed memory (with and without prefetch), or read over the
   link directly (zero-copy).

Run:

    python host_transfer.py                    # n = 2**24 (64 MiB of float32)
    python host_transfer.py --size 1000 --impl numba

Copy with it: kernels/cuda/host_transfer.cu (beside this file). Needs numpy
and numba(-cuda); cupy for the CUDA C part. Without a GPU the Numba part
runs in Numba's CUDA simulator (n is cut to 256 there: one Python thread per
GPU thread; its streams run in order and time nothing) and the CuPy part is
skipped. Every result is checked against NumPy; a wrong one fails an
assertion, so the script exits non-zero.
"""

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


import argparse
import time

from numba import cuda, float32  # the Numba kernel below uses both


# %% [markdown]
# ## CuPy: pageable against pinned copies
#
# The same copy, from a NumPy array and from a pinned one, each timed with
# the host's clock around one synchronous copy (from pageable memory part
# of the copy is the CPU's work, before the stream sees it).

# %%
# --8<-- [start:pinned_alloc]
def pinned_like(x):
    """A copy of the NumPy array x in pinned (page-locked) host memory.

    cupyx.empty_pinned returns an ordinary numpy.ndarray whose buffer comes
    from cudaHostAlloc (through CuPy's pinned memory pool): the OS may not
    page it out, so the GPU's copy engine can read and write it directly.
    Pinned memory is a scarce resource of the host: allocate it once, reuse it.
    """
    import cupyx

    out = cupyx.empty_pinned(x.shape, dtype=x.dtype)
    out[...] = x
    return out
# --8<-- [end:pinned_alloc]


# --8<-- [start:cupy_copies]
def time_copy(host, dev, direction, samples=5):
    """Median time in ms of one synchronous copy between the NumPy array
    `host` and the cupy array `dev` (direction "h2d" or "d2h"): enqueue
    (cudaMemcpyAsync), then wait for the stream, as cudaMemcpy does."""
    import statistics
    import time

    import cupy as cp

    if dev.nbytes != host.nbytes or not dev.flags.c_contiguous or not host.flags.c_contiguous:
        raise ValueError(f"host and dev must be contiguous and of one size, got {host.nbytes} and {dev.nbytes} bytes")
    rt = cp.cuda.runtime
    stream = cp.cuda.get_current_stream()
    if direction == "h2d":
        copy = (dev.data.ptr, host.ctypes.data, host.nbytes, rt.memcpyHostToDevice, stream.ptr)
    elif direction == "d2h":
        copy = (host.ctypes.data, dev.data.ptr, host.nbytes, rt.memcpyDeviceToHost, stream.ptr)
    else:
        raise ValueError(f"direction must be h2d or d2h, got {direction!r}")
    rt.memcpyAsync(*copy)  # warm-up
    stream.synchronize()
    times = []
    for sample in range(samples):
        t0 = time.perf_counter()
        rt.memcpyAsync(*copy)
        stream.synchronize()
        times.append(time.perf_counter() - t0)
    return statistics.median(times) * 1e3


def cupy_copy_demo(n):
    """Pageable and pinned copies, both ways: timed, then a round trip
    through pinned memory checked exactly."""
    import cupy as cp
    import numpy as np

    x = np.random.default_rng(1).random(n, dtype=np.float32)  # pageable: an ordinary NumPy array
    x_pin = pinned_like(x)
    # cudaPointerGetAttributes: 0 unregistered (pageable), 1 host (pinned), 2 device, 3 managed
    assert cp.cuda.runtime.pointerGetAttributes(x_pin.ctypes.data).type == 1, "x_pin is not pinned"
    dev = cp.empty(n, dtype=cp.float32)
    for direction in ("h2d", "d2h"):
        for name, host in (("pageable", x), ("pinned", x_pin)):
            gbps = x.nbytes / (time_copy(host, dev, direction) * 1e-3) / 1e9
            assert 1e-3 < gbps < 1000, f"{direction} {name}: {gbps} GB/s is not a PCIe link"
            print(f"{direction} {name:8s} {x.nbytes / 2**20:8.1f} MiB: {gbps:6.1f} GB/s")
    dev.fill(cp.nan)
    back = np.full(n, np.nan, dtype=np.float32)
    time_copy(x_pin, dev, "h2d", samples=1)
    time_copy(back, dev, "d2h", samples=1)
    np.testing.assert_array_equal(back, x)
    print(f"copy round trip: exact, max |error| = {np.max(np.abs(back - x)):.1e}")
# --8<-- [end:cupy_copies]


# %% [markdown]
# ## CuPy: the pipeline, serial against 2 and 4 streams
#
# Chunk c goes to stream c % streams: its copy in, its kernel, its copy
# out. With one stream each waits for the previous one; with several, the
# two copy engines and the SMs work at once. `iters` sets the kernel's work
# per element (the bench picks it so that a chunk computes as long as it
# copies: then overlap gains the most).

# %%
# --8<-- [start:cupy_pipeline]
def pipeline(x_host, out_host, *, chunks, streams, iters, threads=256):
    """out_host = poly_chunk(x_host) through the GPU, chunk by chunk: copy
    chunk c in (H2D), run host_transfer.cu's poly_chunk on it, copy it out
    (D2H), chunk c on stream c % streams. Host buffers must be pinned for
    copies to overlap anything (a copy from pageable memory blocks the CPU
    until it is staged). Returns out_host when the last copy is done."""
    import cupy as cp
    import numpy as np

    n = x_host.size
    bounds = [n * c // chunks for c in range(chunks + 1)]  # chunk c: [bounds[c], bounds[c + 1])
    if x_host.dtype != np.float32 or out_host.dtype != np.float32 or out_host.shape != x_host.shape:
        raise ValueError("x_host and out_host must be float32 arrays of one shape")
    if not 1 <= chunks <= n or streams < 1:
        raise ValueError(f"need 1 <= chunks <= n and streams >= 1, got {chunks} and {streams}")
    if np.may_share_memory(out_host, x_host):  # a chunk copied out could land on one not yet copied in
        raise ValueError("out_host must not overlap x_host: later chunks still read x_host while out_host is written")
    x_dev, out_dev = cp.empty(n, dtype=cp.float32), cp.empty(n, dtype=cp.float32)
    kernel = load_cuda("host_transfer.cu").get_function("poly_chunk")
    rt = cp.cuda.runtime
    lanes = [cp.cuda.Stream(non_blocking=True) for lane in range(streams)]
    for c in range(chunks):
        lo, hi = bounds[c], bounds[c + 1]
        s, nbytes = lanes[c % streams], 4 * (hi - lo)
        rt.memcpyAsync(x_dev[lo:].data.ptr, x_host[lo:].ctypes.data, nbytes, rt.memcpyHostToDevice, s.ptr)
        with s:  # a RawKernel launches on the current stream
            blocks = min(1024, (hi - lo - 1) // threads + 1)  # a grid-stride loop: any grid covers the chunk
            kernel((blocks,), (threads,), (x_dev[lo:hi], out_dev[lo:hi], np.int64(hi - lo), np.int32(iters)))
        rt.memcpyAsync(out_host[lo:].ctypes.data, out_dev[lo:].data.ptr, nbytes, rt.memcpyDeviceToHost, s.ptr)
    for s in lanes:
        s.synchronize()
    return out_host


def cupy_pipeline_demo(n, chunks=8, iters=16):
    """The pipeline on 1, 2 and 4 streams: each run timed with the host's
    clock and checked against poly_chunk's closed form in float64."""
    import time

    import numpy as np

    x = pinned_like(np.random.default_rng(2).random(n, dtype=np.float32))
    out = pinned_like(np.full(n, np.nan, dtype=np.float32))
    ref = x.astype(np.float64) * (2.0 - 2.0**-iters)  # v_0 = x, v_k = 0.5 v_(k-1) + x
    for streams in (1, 2, 4):
        pipeline(x, out, chunks=chunks, streams=streams, iters=iters)  # warm-up
        out[:] = np.nan  # poison: an element no chunk writes stays NaN
        t0 = time.perf_counter()
        pipeline(x, out, chunks=chunks, streams=streams, iters=iters)
        ms = (time.perf_counter() - t0) * 1e3
        np.testing.assert_allclose(out, ref, rtol=1e-6)
        print(f"cupy pipeline, {chunks} chunks, {streams} stream(s): {ms:8.2f} ms, "
              f"{8 * n / (ms * 1e-3) / 1e9:5.1f} GB/s over the link, "
              f"max |error| = {np.max(np.abs(out - ref) / ref):.1e} (relative)")
# --8<-- [end:cupy_pipeline]


# %% [markdown]
# ## Numba: pinned buffers and the pipeline on streams
#
# `cuda.pinned_array` allocates page-locked host memory; the pipeline cuts
# the array into chunks and gives chunk c to stream c % streams. (The
# kernel is the same text as the handbook's kernels/host_transfer.py.)

# %%
# --8<-- [start:numba_poly]
@cuda.jit
def poly_kernel(x, out, n, iters):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, n, stride):
        xi = x[i]
        v = xi
        for _ in range(iters):
            v = v * float32(0.5) + xi  # float32 constant: no promotion to float64
        out[i] = v
# --8<-- [end:numba_poly]


# --8<-- [start:numba_streams]
def pipeline_numba(x_host, out_host, *, chunks, streams, iters, threads=256):
    """The chunked pipeline with Numba: per chunk an asynchronous copy in,
    poly_kernel, a copy out, chunk c on stream c % streams (host buffers
    from cuda.pinned_array, so the copies are DMA the streams run
    asynchronously). Returns out_host when the last copy is done."""
    import numpy as np
    from numba import cuda

    n = x_host.size
    bounds = [n * c // chunks for c in range(chunks + 1)]  # chunk c: [bounds[c], bounds[c + 1])
    if x_host.dtype != np.float32 or out_host.dtype != np.float32 or out_host.shape != x_host.shape:
        raise ValueError("x_host and out_host must be float32 arrays of one shape")
    if not 1 <= chunks <= n or streams < 1:
        raise ValueError(f"need 1 <= chunks <= n and streams >= 1, got {chunks} and {streams}")
    if np.may_share_memory(out_host, x_host):  # a chunk copied out could land on one not yet copied in
        raise ValueError("out_host must not overlap x_host: later chunks still read x_host while out_host is written")
    x_dev = cuda.device_array(n, dtype=np.float32)
    out_dev = cuda.device_array(n, dtype=np.float32)
    lanes = [cuda.stream() for lane in range(streams)]
    for c in range(chunks):
        lo, hi = bounds[c], bounds[c + 1]
        s = lanes[c % streams]
        blocks = min(1024, (hi - lo - 1) // threads + 1)  # a grid-stride loop: any grid covers the chunk
        x_dev[lo:hi].copy_to_device(x_host[lo:hi], stream=s)
        poly_kernel[blocks, threads, s](x_dev[lo:hi], out_dev[lo:hi], hi - lo, iters)
        out_dev[lo:hi].copy_to_host(out_host[lo:hi], stream=s)
    for s in lanes:
        s.synchronize()
    return out_host
# --8<-- [end:numba_streams]


# --8<-- [start:numba_demo]
def numba_pipeline_demo(n=256, iters=8, chunks=4, threads=32):
    """The Numba pipeline on 1, 2 and 4 streams, each run checked against
    poly_kernel's closed form in float64."""
    import time

    import numpy as np
    from numba import cuda

    x = cuda.pinned_array(n, dtype=np.float32)  # page-locked: the copy engine reads it directly
    x[:] = np.random.default_rng(0).random(n, dtype=np.float32)
    out = cuda.pinned_array(n, dtype=np.float32)
    ref = x.astype(np.float64) * (2.0 - 2.0**-iters)  # v_0 = x, v_k = 0.5 v_(k-1) + x
    pipeline_numba(x, out, chunks=chunks, streams=1, iters=iters, threads=threads)  # compiles the kernel
    for streams in (1, 2, 4):
        out[:] = np.nan  # poison: an element no chunk writes stays NaN
        t0 = time.perf_counter()
        pipeline_numba(x, out, chunks=chunks, streams=streams, iters=iters, threads=threads)
        ms = (time.perf_counter() - t0) * 1e3
        np.testing.assert_allclose(out, ref, rtol=1e-6)
        print(f"numba pipeline, {chunks} chunks on {streams} stream(s): {ms:8.2f} ms, "
              f"max |error| = {np.max(np.abs(out - ref) / ref):.1e} (relative)")
# --8<-- [end:numba_demo]


# %% [markdown]
# ## CuPy: managed memory, prefetch, zero-copy
#
# Managed memory is one pointer valid on both sides, its pages migrating
# on demand (or in bulk, prefetched); zero-copy has the kernel read pinned
# host memory itself, every access crossing the link.

# %%
# --8<-- [start:cupy_managed]
def managed_like(src):
    """Managed (unified) memory with the shape and dtype of the NumPy array
    src, as a cupy array (cudaMallocManaged): one pointer valid on the host
    and on the GPU. Pages live where they were last touched; a GPU access
    to a page on the host faults, and the driver migrates it."""
    import cupy as cp

    return cp.ndarray(src.shape, dtype=src.dtype, memptr=cp.cuda.malloc_managed(src.nbytes))


def host_view(x_managed):
    """A NumPy array over the same managed memory: the CPU reads and writes
    it in place (its touches fault the pages back to the host). Wait for
    the GPU before touching it."""
    import ctypes

    import cupy as cp
    import numpy as np

    if not isinstance(x_managed.data.mem, cp.cuda.ManagedMemory):
        raise TypeError("x_managed must be managed memory (managed_like)")
    buf = (ctypes.c_char * x_managed.nbytes).from_address(x_managed.data.ptr)
    buf.owner = x_managed  # the memory lives as long as the view
    return np.frombuffer(buf, dtype=x_managed.dtype).reshape(x_managed.shape)


def prefetch_to_gpu(x_managed, stream):
    """cudaMemPrefetchAsync of the whole managed allocation to the current
    GPU, on `stream`: the pages move in bulk at copy-engine speed before
    the kernel, instead of fault by fault during it. The same bytes cross
    the link either way: prefetch saves the faults, not the transfer."""
    import cupy as cp

    mem = x_managed.data.mem
    if not isinstance(mem, cp.cuda.ManagedMemory):
        raise TypeError("x_managed must be managed memory (managed_like)")
    mem.prefetch(stream)  # ManagedMemory.prefetch: the spelling CuPy keeps across CUDA 12 and 13
    return x_managed
# --8<-- [end:cupy_managed]


# --8<-- [start:cupy_zero_copy]
def zero_copy_view(x_pinned):
    """A cupy array over pinned host memory: kernels that use it read and
    write the host's memory directly, every access crossing the PCIe link
    (zero-copy: no cudaMemcpy first). Good for data read or written once,
    in coalesced order; data read twice crosses the link twice."""
    import cupy as cp

    attrs = cp.cuda.runtime.pointerGetAttributes(x_pinned.ctypes.data)
    if attrs.type != 1:  # cudaMemoryTypeHost: page-locked host memory CUDA knows
        raise ValueError("x_pinned must be pinned host memory (cupyx.empty_pinned), not pageable")
    # With unified virtual addressing (every 64-bit process) the device
    # pointer of cudaHostAlloc memory is its host pointer.
    mem = cp.cuda.UnownedMemory(attrs.devicePointer, x_pinned.nbytes, x_pinned, device_id=cp.cuda.Device().id)
    return cp.ndarray(x_pinned.shape, dtype=x_pinned.dtype, memptr=cp.cuda.MemoryPointer(mem, 0))
# --8<-- [end:cupy_zero_copy]


# --8<-- [start:cupy_host_read]
def scale_cupy(x, out, *, s=2.0, blocks=1024, threads=256):
    """out = s * x with host_transfer.cu's scale_once, a grid-stride loop
    (any grid covers any n); x may be device, managed or zero-copy memory."""
    import cupy as cp
    import numpy as np

    if x.shape != out.shape or x.dtype != np.float32 or out.dtype != np.float32 or x.ndim != 1:
        raise ValueError(f"x and out must be 1-D float32 arrays of one shape, got {x.shape} and {out.shape}")
    if cp.may_share_memory(out, x):  # x and out are __restrict__ in the kernel
        raise ValueError("out must not overlap x: other threads still read x while out is written")
    kernel = load_cuda("host_transfer.cu").get_function("scale_once")
    kernel((blocks,), (threads,), (x, out, np.int64(x.size), np.float32(s)))
    return out


def host_read_demo(n, samples=5):
    """A kernel (scale_once, out = 2x) reads n float32 that the host has just
    written, four ways: copied first from pinned memory, through managed
    memory (with and without prefetch), or zero-copy. CUDA events time the
    copy or prefetch and the kernel; the host's rewrite of the input before
    each run is not timed. Every run is checked exactly (2x is exact)."""
    import cupy as cp
    import cupyx
    import numpy as np

    src = np.random.default_rng(3).random(n, dtype=np.float32)
    out = cp.empty(n, dtype=cp.float32)
    stream = cp.cuda.get_current_stream()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for mode in ("explicit_copy", "managed", "managed_prefetch", "zero_copy"):
        if mode.startswith("managed"):
            dev = managed_like(src)
            host = host_view(dev)  # the same memory, seen from the CPU
        else:
            host = cupyx.empty_pinned(n, dtype=np.float32)
            dev = zero_copy_view(host) if mode == "zero_copy" else cp.empty(n, dtype=cp.float32)
        times = []
        for sample in range(samples):
            stream.synchronize()  # the GPU is done with the buffer before the host rewrites it
            host[:] = src  # managed: the CPU's writes fault the pages back to the host
            out.fill(cp.nan)
            start.record(stream)
            if mode == "explicit_copy":
                cp.cuda.runtime.memcpyAsync(dev.data.ptr, host.ctypes.data, host.nbytes,
                                            cp.cuda.runtime.memcpyHostToDevice, stream.ptr)
            elif mode == "managed_prefetch":
                prefetch_to_gpu(dev, stream)
            scale_cupy(dev, out)
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
            np.testing.assert_array_equal(out.get(), 2 * src)
        ms = float(np.median(times))
        print(f"{mode:18s} {ms:8.3f} ms, {src.nbytes / (ms * 1e-3) / 1e9:6.1f} GB/s of input, max |error| = 0")
# --8<-- [end:cupy_host_read]


# %%
def main(argv=None):
    p = argparse.ArgumentParser(description="Pageable vs pinned copies, streams, managed memory, zero-copy.")
    p.add_argument("--size", type=int, default=2**24, help="number of float32 elements")
    p.add_argument("--impl", choices=["all", "cupy", "numba"], default="all")
    args, _ = p.parse_known_args(argv)  # ignore a notebook kernel's own arguments
    if args.impl in ("all", "numba"):
        simulator = os.environ.get("NUMBA_ENABLE_CUDASIM") == "1"
        t0 = time.perf_counter()
        if simulator:
            numba_pipeline_demo(min(args.size, 256), threads=32)
        else:
            numba_pipeline_demo(args.size, iters=64, chunks=8, threads=256)
        where = "Numba's CUDA simulator" if simulator else "the GPU"
        print(f"numba: ran on {where} in {time.perf_counter() - t0:.2f} s (with copies and JIT)")
    if args.impl in ("all", "cupy"):
        if not has_gpu():
            print("cupy: skipped (needs a CUDA GPU)")
            return
        cupy_copy_demo(args.size)
        cupy_pipeline_demo(args.size)
        host_read_demo(args.size)


if __name__ == "__main__":
    main()
