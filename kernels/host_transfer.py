"""Host <-> device transfers: what a copy over the PCIe link costs, how to
hide it behind computation, and what managed memory and zero-copy really do.
CuPy (the CUDA C kernels of kernels/cuda/host_transfer.cu) and Numba.

(a) Pageable vs pinned host memory: `pinned_like`, `copy_h2d`, `copy_d2h`,
    `time_copy` (host clock, see there why), `is_pinned`.
    The copy engine can only read and write page-locked (pinned) host
    memory; from a pageable NumPy array the driver first copies the data
    with the CPU through a pinned staging buffer. `cupyx.empty_pinned`
    allocates pinned memory (cudaHostAlloc).
(b) Copy/compute overlap: `pipeline` cuts an array into chunks and runs
    H2D -> `poly_chunk` -> D2H per chunk, on one stream (serial) or on S
    streams round-robin, and can return the timeline of every operation
    (CUDA events before and after each one); `balance_iters` picks the
    kernel's work so that a chunk computes as long as it copies.
(c) Managed memory and zero-copy: `HostRead` sets up one of the ways a
    kernel can read n float32 that the host has just written (explicit
    copy, managed memory with or without prefetch, zero-copy once or
    twice); `time_host_read` times one from the same starting state each
    run.
(d) Numba: `pipeline_numba`, `roundtrip_numba`, `scale_numba`,
    `managed_array_numba`, with `cuda.pinned_array`, `cuda.stream()`,
    `cuda.to_device(x, stream=s)`, `copy_to_host(out, stream=s)`,
    `cuda.managed_array` and `cuda.mapped_array`. Numba has no prefetch.

Energy (measured by kernels/bench/host_transfer.py) is NVML's board
counter: the GPU board only. The CPU, the host memory and the PCIe root
complex, which do half the work of every transfer, are not in it.

The wrappers check their arguments (host or device arrays, float32, 1-D,
C-contiguous, matching shapes, counts, outputs that share no memory with
inputs) before anything is launched.
"""

from __future__ import annotations

import functools
import math
import statistics
from pathlib import Path

import numpy as np

from . import checks, harness
from .device import cupy_module, numba_simulator

CUDA_SOURCE = Path(__file__).with_name("cuda") / "host_transfer.cu"
CUDA_NAMES = ("poly_chunk", "scale_once", "sum_once", "subtract_mean")
# FMAs per element in poly_chunk when the caller does not calibrate: enough
# to be visible at small sizes. The bench picks iters with `balance_iters`
# so that a chunk's kernel lasts as long as the chunk's copy.
POLY_ITERS = 64
SCALE = 2.0  # scale_once multiplies by 2: exact in float32, so results compare exactly
HOST_READ_MODES = ("explicit_copy", "explicit_copy_twice", "managed", "managed_prefetch",
                   "zero_copy", "zero_copy_twice")
NUMBA_HOST_READ_MODES = ("explicit_copy", "managed", "zero_copy")  # no prefetch in Numba
# cudaMemoryType, as cudaPointerGetAttributes reports it
MEMORY_UNREGISTERED, MEMORY_HOST, MEMORY_DEVICE, MEMORY_MANAGED = 0, 1, 2, 3


# ------------------------------------------------------------- helpers --

def chunk_bounds(n: int, chunks: int) -> list[tuple[int, int]]:
    """[lo, hi) of min(chunks, n) non-empty chunks covering 0..n, sizes
    differing by at most one element (the first n % chunks are longer)."""
    count = min(chunks, n)
    if count <= 0:
        return []
    base, extra = divmod(n, count)
    bounds, lo = [], 0
    for c in range(count):
        hi = lo + base + (c < extra)
        bounds.append((lo, hi))
        lo = hi
    return bounds


def poly_reference(x, iters: int):
    """What poly_chunk computes, in float64: v_0 = x, v_k = 0.5 v_{k-1} + x,
    so v_iters = x * (2 - 2^-iters) (closed form: no loop over iters)."""
    return np.asarray(x, dtype=np.float64) * (2.0 - 2.0 ** -iters)


def grid_blocks(n: int, threads: int, sm_count: int) -> int:
    """Grid-stride launch: at most enough resident blocks to fill every SM
    (2048 threads per SM on sm_80/90), never more blocks than work."""
    return max(1, min(math.ceil(n / threads), sm_count * max(1, 2048 // threads)))


# ---------------------------------------------------------------- CuPy --

def _cp():
    import cupy as cp

    return cp


def cupy_kernel(name: str):
    """A compiled RawKernel of kernels/cuda/host_transfer.cu."""
    if name not in CUDA_NAMES:
        raise ValueError(f"name must be one of {CUDA_NAMES}, got {name!r}")
    return cupy_module(CUDA_SOURCE.name).get_function(name)


@functools.cache
def _sm_count(device_id: int) -> int:
    return int(_cp().cuda.Device(device_id).attributes["MultiProcessorCount"])


def _blocks(n: int, threads: int) -> int:
    return grid_blocks(n, threads, _sm_count(_cp().cuda.Device().id))


def memory_type(x) -> int:
    """cudaPointerGetAttributes(x).type: MEMORY_UNREGISTERED (pageable),
    MEMORY_HOST (pinned), MEMORY_DEVICE or MEMORY_MANAGED."""
    cp = _cp()
    ptr = x.ctypes.data if isinstance(x, np.ndarray) else x.data.ptr
    return int(cp.cuda.runtime.pointerGetAttributes(ptr).type)


def is_pinned(x) -> bool:
    """True when the NumPy array x lies in page-locked host memory that CUDA
    knows (cudaHostAlloc, cudaHostRegister)."""
    return memory_type(x) == MEMORY_HOST


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


def _check_copy(host, dev):
    cp = _cp()
    checks.require_host_vector("host", host, host.dtype if isinstance(host, np.ndarray) else np.float32)
    checks.require_cupy_array("dev", dev)
    checks.require_contiguous("dev", dev)
    if np.dtype(dev.dtype) != host.dtype:
        raise TypeError(f"dev must have the dtype of host {host.dtype}, got {np.dtype(dev.dtype)}")
    checks.require_same_shape("dev", dev, "host", host)
    return cp


# --8<-- [start:pinned_copy]
def copy_h2d(host, dev, *, stream=None):
    """Enqueue dev[:] = host (cudaMemcpyAsync, host to device) on `stream`.

    From pinned memory the copy engine reads `host` itself and the call
    returns at once. From pageable memory the driver first copies the data
    with the CPU into a pinned staging buffer, in pieces, and returns only
    once all of it is staged (CUDA Runtime API, "API synchronization
    behavior"): the CPU is busy for the whole copy and nothing overlaps.
    """
    cp = _check_copy(host, dev)
    rt = cp.cuda.runtime
    stream = cp.cuda.get_current_stream() if stream is None else stream
    if host.nbytes:
        rt.memcpyAsync(dev.data.ptr, host.ctypes.data, host.nbytes, rt.memcpyHostToDevice, stream.ptr)
    return dev


def copy_d2h(dev, host, *, stream=None):
    """Enqueue host[:] = dev (device to host) on `stream`. Into pageable
    memory the call returns only when the copy is complete."""
    cp = _check_copy(host, dev)
    rt = cp.cuda.runtime
    stream = cp.cuda.get_current_stream() if stream is None else stream
    if host.nbytes:
        rt.memcpyAsync(host.ctypes.data, dev.data.ptr, host.nbytes, rt.memcpyDeviceToHost, stream.ptr)
    return host
# --8<-- [end:pinned_copy]


def time_copy(host, dev, direction: str, *, samples: int = 15, min_sample_ms: float = 2.0,
              max_seconds: float | None = None) -> dict:
    """Median time of one synchronous copy (enqueue, then wait for the
    stream, as cudaMemcpy does) between `host` and `dev`, in milliseconds,
    and its bandwidth host.nbytes / time in GB/s.

    Timed with the host's clock (time.perf_counter), not with CUDA events:
    from pageable memory part of a copy is the CPU's work (staging through a
    pinned buffer) and part of that happens before the copy reaches the
    stream, so events around it on the stream would miss it. The host clock
    sees everything the program waits for; pinned copies are timed the same
    way so that the two compare fairly. The wait after each copy (~10 us)
    is part of the cost of a synchronous copy; it dominates small copies.
    The first copies (warm-up: first touch of pageable pages, the driver's
    staging buffers) are not timed.
    """
    cp = _cp()
    if direction not in ("h2d", "d2h"):
        raise ValueError(f"direction must be 'h2d' or 'd2h', got {direction!r}")
    _check_copy(host, dev)
    rt = cp.cuda.runtime
    stream = cp.cuda.Stream(non_blocking=True)
    if direction == "h2d":
        dst, src, kind = dev.data.ptr, host.ctypes.data, rt.memcpyHostToDevice
    else:
        dst, src, kind = host.ctypes.data, dev.data.ptr, rt.memcpyDeviceToHost

    def one():  # the bare runtime call: no Python checks inside the timed loop
        rt.memcpyAsync(dst, src, host.nbytes, kind, stream.ptr)
        stream.synchronize()

    cp.cuda.Device().synchronize()
    t = harness.time_host(one, samples=samples, min_sample_ms=min_sample_ms, max_seconds=max_seconds)
    t.update(gbps=host.nbytes / (t["ms"] * 1e-3) / 1e9, pinned=is_pinned(host))
    return t


# ----------------------------------------------------- (b) the pipeline --

@functools.cache
def _streams(count: int, device_id: int):
    """`count` non-blocking streams, made once per device: they neither wait
    for nor hold up the legacy default stream."""
    cp = _cp()
    with cp.cuda.Device(device_id):
        return tuple(cp.cuda.Stream(non_blocking=True) for _ in range(count))


def _check_pipeline(x_host, out_host, chunks, streams, iters, threads):
    checks.require_host_vector("x_host", x_host)
    checks.require_host_vector("out_host", out_host)
    checks.require_same_shape("out_host", out_host, "x_host", x_host)
    checks.require_int("chunks", chunks, 1, 2**31 - 1)
    checks.require_int("streams", streams, 1, 64)
    checks.require_int("iters", iters, 0, 2**31 - 1)  # an int32 kernel argument
    checks.require_block_size("threads", threads)
    # chunk c's copy out must not land on x_host before a later chunk's copy in reads it
    checks.require_no_overlap("out_host", out_host, x_host=x_host)


def _check_work(work, n: int, lib: str):
    """work = (x_dev, out_dev): two device vectors of n float32 that do not
    overlap (the kernel reads a chunk of one while it writes the other)."""
    x_dev, out_dev = work
    checks.require_vector("work[0]", x_dev, np.float32, lib=lib)
    checks.require_vector("work[1]", out_dev, np.float32, lib=lib)
    if x_dev.shape[0] != n or out_dev.shape[0] != n:
        raise ValueError(f"work must be two device arrays of {n} elements, "
                         f"got {x_dev.shape[0]} and {out_dev.shape[0]}")
    checks.require_no_overlap("work[1]", out_dev, **{"work[0]": x_dev})
    return x_dev, out_dev


def poly_cupy(x, out=None, *, iters: int = POLY_ITERS, threads: int = 256):
    """out = poly_chunk(x) on the device (both cupy arrays); returns out."""
    cp = _cp()
    checks.require_vector("x", x, np.float32, lib="cupy")
    checks.require_int("iters", iters, 0, 2**31 - 1)  # an int32 kernel argument
    checks.require_block_size("threads", threads)
    if out is None:
        out = cp.empty_like(x)
    else:
        checks.require_vector_like("out", out, "x", x, np.float32, lib="cupy")
        checks.require_no_overlap("out", out, x=x)  # x and out are __restrict__ in the kernel
    if x.size:
        cupy_kernel("poly_chunk")((_blocks(x.size, threads),), (threads,),
                                  (x, out, np.int64(x.size), np.int32(iters)))
    return out


# --8<-- [start:pipeline]
def pipeline(x_host, out_host, *, chunks: int, streams: int, iters: int = POLY_ITERS,
             threads: int = 256, timeline: bool = False, work=None):
    """out_host = poly_chunk(x_host) through the GPU, chunk by chunk:
    copy chunk c in (H2D), run the kernel on it, copy it out (D2H), chunk c
    on stream c % streams. With one stream every operation waits for the
    previous one; with several, chunk c + 1's copy in runs while chunk c
    computes and chunk c - 1 copies out: the copy engines (one per
    direction) and the SMs work at the same time. Host buffers must be
    pinned for that: a copy from pageable memory blocks the CPU until it
    is staged, so nothing else gets issued meanwhile.

    work: optional (x_dev, out_dev), device buffers of n float32 to reuse.
    Returns, with timeline=True, one [stream, kind, start_ms, end_ms] per
    operation in issue order (kind "h2d", "kernel" or "d2h"; times from the
    first event). start_ms is when the stream reached the operation: one
    that must wait for a copy engine or SMs busy with another stream's work
    starts later than that; end_ms is exact. Otherwise returns None.
    Returns after the last copy is complete.
    """
    cp = _cp()
    _check_pipeline(x_host, out_host, chunks, streams, iters, threads)
    n = x_host.size
    if work is None:
        work = (cp.empty(n, dtype=cp.float32), cp.empty(n, dtype=cp.float32))
    x_dev, out_dev = _check_work(work, n, "cupy")
    rt = cp.cuda.runtime
    kernel = cupy_kernel("poly_chunk")
    lanes = _streams(streams, cp.cuda.Device().id)
    # The streams start after whatever the caller queued on the current
    # stream (filling `work`, say): non-blocking streams would not wait.
    first = cp.cuda.Event()
    first.record(cp.cuda.get_current_stream())
    for s in lanes:
        s.wait_event(first)
    ops = []

    def issue(k, kind, enqueue):
        if not timeline:
            return enqueue()
        before, after = cp.cuda.Event(), cp.cuda.Event()
        before.record(lanes[k])
        enqueue()
        after.record(lanes[k])
        ops.append((k, kind, before, after))

    for c, (lo, hi) in enumerate(chunk_bounds(n, chunks)):
        k = c % streams
        s, m = lanes[k], hi - lo
        x_c, out_c = x_dev[lo:hi], out_dev[lo:hi]
        issue(k, "h2d", lambda: rt.memcpyAsync(x_c.data.ptr, x_host.ctypes.data + 4 * lo, 4 * m,
                                               rt.memcpyHostToDevice, s.ptr))

        def launch():
            with s:  # RawKernel launches on the current stream
                kernel((_blocks(m, threads),), (threads,), (x_c, out_c, np.int64(m), np.int32(iters)))

        issue(k, "kernel", launch)
        issue(k, "d2h", lambda: rt.memcpyAsync(out_host.ctypes.data + 4 * lo, out_c.data.ptr, 4 * m,
                                               rt.memcpyDeviceToHost, s.ptr))
    for s in lanes:
        s.synchronize()
    if not timeline:
        return None
    ms = cp.cuda.get_elapsed_time
    return [[k, kind, ms(first, before), ms(first, after)] for k, kind, before, after in ops]
# --8<-- [end:pipeline]


def balance_iters(chunk_n: int, *, threads: int = 256, probe_iters: int = 256,
                  max_iters: int = 1 << 16) -> dict:
    """The iters for which poly_chunk on chunk_n elements lasts about as
    long as copying chunk_n float32 in from pinned memory (when the three
    stages of the pipeline take equal time, overlap gains the most: up to
    3x with many chunks). The kernel's time is affine in iters, t0 + iters
    * t1 (t0: reading and writing the chunk in HBM), so two probes give it.
    """
    cp = _cp()
    from . import harness

    checks.require_int("chunk_n", chunk_n, 1, 2**31 - 1)
    x_pin = pinned_like(np.random.default_rng(0).random(chunk_n, dtype=np.float32))
    x = cp.empty(chunk_n, dtype=cp.float32)
    out = cp.empty_like(x)
    t_copy = harness.time_gpu(lambda: copy_h2d(x_pin, x), warmup=3, samples=10)["ms"]
    t_zero = harness.time_gpu(lambda: poly_cupy(x, out, iters=0, threads=threads), warmup=3, samples=10)["ms"]
    t_probe = harness.time_gpu(lambda: poly_cupy(x, out, iters=probe_iters, threads=threads),
                               warmup=3, samples=10)["ms"]
    per_iter = max((t_probe - t_zero) / probe_iters, 1e-9)
    # Tiny chunks: both times are launch overhead and the ratio means little.
    iters = min(max_iters, max(1, round((t_copy - t_zero) / per_iter)))
    return {"iters": int(iters), "copy_ms": t_copy, "kernel_ms_per_iter": per_iter, "kernel_ms_0": t_zero}


# -------------------------------------- (c) managed memory and zero-copy --

def scale_cupy(x, out=None, *, s: float = SCALE, threads: int = 256):
    """out = s * x with scale_once: reads x once (x may be device, managed
    or zero-copy host memory); returns out."""
    cp = _cp()
    checks.require_vector("x", x, np.float32, lib="cupy")
    checks.require_block_size("threads", threads)
    if out is None:
        out = cp.empty_like(x)
    else:
        checks.require_vector_like("out", out, "x", x, np.float32, lib="cupy")
        checks.require_no_overlap("out", out, x=x)
    if x.size:
        cupy_kernel("scale_once")((_blocks(x.size, threads),), (threads,),
                                  (x, out, np.int64(x.size), np.float32(s)))
    return out


def center_cupy(x, out=None, *, threads: int = 256):
    """out = x - mean(x) in two passes (sum_once, then subtract_mean): a
    computation that reads its input twice; returns out."""
    cp = _cp()
    checks.require_vector("x", x, np.float32, lib="cupy")
    checks.require_block_size("threads", threads)
    if out is None:
        out = cp.empty_like(x)
    else:
        checks.require_vector_like("out", out, "x", x, np.float32, lib="cupy")
        checks.require_no_overlap("out", out, x=x)  # the second pass reads x after others wrote out
    if x.size:
        total = cp.zeros(1, dtype=cp.float64)
        blocks = _blocks(x.size, threads)
        cupy_kernel("sum_once")((blocks,), (threads,), (x, total, np.int64(x.size)))
        cupy_kernel("subtract_mean")((blocks,), (threads,), (x, total, out, np.int64(x.size)))
    return out


# --8<-- [start:managed]
def managed_empty(n: int):
    """n float32 of managed (unified) memory as a cupy array: one pointer
    valid on the host and on the GPU. Pages live where they were last
    touched; a GPU access to a page that lives on the host faults, and the
    driver migrates it (cudaMallocManaged, through cupy.cuda.malloc_managed)."""
    cp = _cp()
    checks.require_int("n", n, 0, 2**62)
    return cp.ndarray((n,), dtype=cp.float32, memptr=cp.cuda.malloc_managed(4 * n))


def host_view(x_managed):
    """A NumPy array over the same managed memory: the CPU reads and writes
    it in place (its touches fault the pages back to the host). Wait for
    the GPU (synchronize) before touching it."""
    import ctypes

    if memory_type(x_managed) != MEMORY_MANAGED:
        raise ValueError("x_managed must be managed memory (managed_empty, cupy.cuda.malloc_managed)")
    buf = (ctypes.c_char * x_managed.nbytes).from_address(x_managed.data.ptr)
    buf._owner = x_managed  # the memory lives as long as the view
    return np.frombuffer(buf, dtype=x_managed.dtype, count=x_managed.size)


def prefetch_to_gpu(x_managed, stream=None):
    """cudaMemPrefetchAsync of the whole managed array to the current GPU,
    on `stream`: the pages move in bulk at copy-engine speed before the
    kernel, instead of fault by fault during it. The same bytes cross the
    link either way: prefetch saves the faults, not the transfer."""
    cp = _cp()
    checks.require_cupy_array("x_managed", x_managed)
    mem = x_managed.data.mem
    if not isinstance(mem, cp.cuda.ManagedMemory):
        raise TypeError(f"x_managed must be managed memory (managed_empty), got {checks._kind(mem)}")
    if x_managed.data.ptr != mem.ptr or x_managed.nbytes != mem.size:
        raise ValueError("x_managed must be a whole managed allocation (prefetch moves all of it)")
    # ManagedMemory.prefetch is the spelling that works on CuPy built for
    # CUDA 12 and for CUDA 13, whose cudaMemPrefetchAsync takes a
    # cudaMemLocation and flags instead of a device number: CuPy 14 keeps
    # runtime.memPrefetchAsync(ptr, count, device, stream) and converts.
    mem.prefetch(cp.cuda.get_current_stream() if stream is None else stream)
    return x_managed
# --8<-- [end:managed]


# --8<-- [start:zero_copy]
def zero_copy_view(x_pinned):
    """A cupy array over pinned host memory: kernels that use it read and
    write the host's memory directly, every access crossing the PCIe link
    (zero-copy: no cudaMemcpy first). Good for data read or written once,
    in coalesced order; data read twice crosses the link twice."""
    cp = _cp()
    if not isinstance(x_pinned, np.ndarray):
        raise TypeError(f"x_pinned must be a numpy.ndarray in pinned host memory, got {checks._kind(x_pinned)}")
    checks.require_contiguous("x_pinned", x_pinned)
    attrs = cp.cuda.runtime.pointerGetAttributes(x_pinned.ctypes.data)
    if attrs.type != MEMORY_HOST:
        raise ValueError("x_pinned must be pinned host memory (cupyx.empty_pinned), "
                         "got pageable memory")
    # cudaPointerGetAttributes' devicePointer is what cudaHostGetDevicePointer
    # returns (CuPy wraps only the former). With unified virtual addressing
    # (every 64-bit process) it equals the host pointer for cudaHostAlloc
    # memory, whatever flags it was allocated with.
    mem = cp.cuda.UnownedMemory(attrs.devicePointer, x_pinned.nbytes, x_pinned,
                                device_id=cp.cuda.Device().id)
    return cp.ndarray(x_pinned.shape, dtype=x_pinned.dtype, memptr=cp.cuda.MemoryPointer(mem, 0))
# --8<-- [end:zero_copy]


class HostRead:
    """n float32 that the host has just written, read on the GPU by scale_once
    (out = 2x) or, for the "_twice" modes, by center (out = x - mean, two
    passes over x). `mode` is one of HOST_READ_MODES:

    - explicit_copy: the host writes a pinned buffer; cudaMemcpyAsync copies
      it to device memory; the kernel reads device memory (the baseline);
    - explicit_copy_twice: the same copy, then both passes read device memory;
    - managed: the host writes managed memory; the kernel reads it and the
      GPU's page faults migrate it;
    - managed_prefetch: the same, with cudaMemPrefetchAsync before the kernel;
    - zero_copy: the kernel reads the pinned host buffer itself;
    - zero_copy_twice: both passes read the pinned host buffer.

    reset() waits for the GPU and has the host rewrite the input from src:
    every run starts from the same state, the data in host memory (for
    managed memory the CPU's writes fault its pages back to the host).
    run(stream) enqueues the copy or prefetch and the kernel(s); returns
    the device output. impl="numba" has the modes of NUMBA_HOST_READ_MODES
    (cuda.pinned_array, cuda.managed_array, cuda.mapped_array).
    """

    def __init__(self, mode: str, src, *, impl: str = "cupy", threads: int = 256):
        modes = HOST_READ_MODES if impl == "cupy" else NUMBA_HOST_READ_MODES
        if impl not in ("cupy", "numba"):
            raise ValueError(f"impl must be 'cupy' or 'numba', got {impl!r}")
        if mode not in modes:
            raise ValueError(f"mode must be one of {modes} for impl {impl!r}, got {mode!r}")
        checks.require_host_vector("src", src)
        if src.size == 0:
            raise ValueError("src must hold at least one element")
        checks.require_block_size("threads", threads)
        self.mode, self.impl, self.src, self.threads = mode, impl, src, threads
        self.n = src.size
        self.twice = mode.endswith("_twice")
        self.link_bytes = 4 * self.n  # the input must cross the link once
        if impl == "cupy":
            self._setup_cupy()
        else:
            self._setup_numba()
        self.reset()

    def _setup_cupy(self):
        import cupyx

        cp = _cp()
        self.out = cp.empty(self.n, dtype=cp.float32)
        if self.mode.startswith("managed"):
            self.dev = managed_empty(self.n)
            self.host = host_view(self.dev)  # the same memory, seen from the CPU
        else:
            self.host = cupyx.empty_pinned(self.n, dtype=np.float32)
            if self.mode.startswith("zero_copy"):
                self.dev = zero_copy_view(self.host)
            else:
                self.dev = cp.empty(self.n, dtype=cp.float32)

    def _setup_numba(self):
        from numba import cuda

        self.out = cuda.device_array(self.n, dtype=np.float32)
        if self.mode == "managed":
            self.dev = self.host = managed_array_numba(self.n)
        elif self.mode == "zero_copy":
            self.dev = self.host = cuda.mapped_array(self.n, dtype=np.float32)
        else:
            self.host = cuda.pinned_array(self.n, dtype=np.float32)
            self.dev = cuda.device_array(self.n, dtype=np.float32)

    def reset(self) -> None:
        # The GPU must be done with the buffer before the CPU rewrites it.
        if self.impl == "cupy":
            _cp().cuda.Device().synchronize()
        else:
            from numba import cuda

            cuda.synchronize()
        self.host[:] = self.src

    def run(self, stream=None):
        if self.impl == "numba":
            if self.mode == "explicit_copy":
                self.dev.copy_to_device(self.host)
            return scale_numba(self.dev, self.out, threads=self.threads)
        cp = _cp()
        stream = cp.cuda.get_current_stream() if stream is None else stream
        with stream:
            if self.mode.startswith("explicit_copy"):
                copy_h2d(self.host, self.dev, stream=stream)
            elif self.mode == "managed_prefetch":
                prefetch_to_gpu(self.dev, stream)
            if self.twice:
                return center_cupy(self.dev, self.out, threads=self.threads)
            return scale_cupy(self.dev, self.out, threads=self.threads)

    def result(self) -> np.ndarray:
        """The output, copied to the host."""
        if self.impl == "numba":
            return self.out.copy_to_host()
        return _cp().asnumpy(self.out)

    def expected(self) -> np.ndarray:
        """The float64 reference of the output."""
        x = self.src.astype(np.float64)
        return x - x.mean() if self.twice else SCALE * x


def time_host_read(case: HostRead, *, samples: int = 10, warmup: int = 2) -> dict:
    """Median GPU time of case.run(), after a fresh case.reset() each time,
    in ms: CUDA events around run() only, on the current stream. The
    host's rewrite of the input is not timed (it is the same in every
    mode); page faults, prefetches and copies all happen between the events.
    """
    cp = _cp()
    stream = cp.cuda.get_current_stream()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    times = []
    for k in range(warmup + samples):
        case.reset()
        start.record(stream)
        case.run(stream)
        end.record(stream)
        end.synchronize()
        if k >= warmup:
            times.append(cp.cuda.get_elapsed_time(start, end))
    times.sort()
    return {"ms": statistics.median(times), "ms_min": times[0], "ms_max": times[-1], "samples": samples}


# --------------------------------------------------------------- Numba --

from numba import cuda, float32  # noqa: E402


def _numba_blocks(n: int, threads: int) -> int:
    """Fill the GPU, or 2 blocks in the simulator (one Python thread per GPU thread)."""
    if numba_simulator():
        return max(1, min(math.ceil(n / threads), 2))
    return grid_blocks(n, threads, cuda.get_current_device().MULTIPROCESSOR_COUNT)


# --8<-- [start:numba_kernels]
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


@cuda.jit
def scale_kernel(x, out, n, s):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, n, stride):
        out[i] = s * x[i]
# --8<-- [end:numba_kernels]


def _require_numba_vector(name: str, x):
    """A Numba device array, or a managed or mapped array (NumPy arrays
    whose memory the GPU can address); float32, 1-D, C-contiguous."""
    if not (getattr(x, "__cuda_ndarray__", False) or checks._is_numba_device_array(x)):
        hint = (" (a host array: use numba.cuda.to_device, cuda.managed_array or cuda.mapped_array)"
                if isinstance(x, np.ndarray) else "")
        raise TypeError(f"{name} must be a CUDA device, managed or mapped array, got {checks._kind(x)}{hint}")
    checks.require_dtype(name, x, np.float32)
    checks.require_ndim(name, x, 1)
    checks.require_contiguous(name, x)
    return x


def scale_numba(x, out=None, *, s: float = SCALE, threads: int = 256):
    """out = s * x with the Numba kernel (x: device, managed or mapped array)."""
    _require_numba_vector("x", x)
    checks.require_block_size("threads", threads)
    n = x.shape[0]
    if out is None:
        out = cuda.device_array(n, dtype=np.float32)
    else:
        _require_numba_vector("out", out)
        checks.require_same_shape("out", out, "x", x)
        checks.require_no_overlap("out", out, x=x)
    if n:
        scale_kernel[_numba_blocks(n, threads), threads](x, out, n, np.float32(s))
    return out


# --8<-- [start:numba_managed]
def managed_array_numba(n: int):
    """n float32 of managed memory with Numba: a NumPy array (ManagedNDArray)
    that the host writes in place and kernels take directly, no copy.
    Numba has no prefetch call: the first GPU touch of each page faults."""
    checks.require_int("n", n, 0, 2**62)
    if numba_simulator():
        # The simulator exports no managed_array; its mapped_array is an
        # array the host indexes and kernels take, all the simulator can show.
        return cuda.mapped_array(n, dtype=np.float32)
    return cuda.managed_array(n, dtype=np.float32)
# --8<-- [end:numba_managed]


# --8<-- [start:numba_pinned]
def roundtrip_numba(x_host, out_host=None):
    """x_host -> GPU -> out_host on one stream with Numba; returns out_host.
    With cuda.pinned_array buffers both copies are DMA that the stream
    runs asynchronously; the host waits once, at the end."""
    checks.require_host_vector("x_host", x_host)
    if out_host is None:
        out_host = cuda.pinned_array(x_host.shape, dtype=np.float32)
    else:
        checks.require_host_vector("out_host", out_host)
        checks.require_same_shape("out_host", out_host, "x_host", x_host)
    stream = cuda.stream()
    x_dev = cuda.to_device(x_host, stream=stream)  # H2D, enqueued
    x_dev.copy_to_host(out_host, stream=stream)    # D2H, after it on the stream
    stream.synchronize()
    return out_host
# --8<-- [end:numba_pinned]


# --8<-- [start:numba_pipeline]
def pipeline_numba(x_host, out_host, *, chunks: int, streams: int, iters: int = POLY_ITERS,
                   threads: int = 256, work=None):
    """The chunked pipeline of `pipeline` with Numba: per chunk an
    asynchronous copy in, the kernel, a copy out, chunk c on stream
    c % streams (host buffers from cuda.pinned_array). Returns out_host."""
    _check_pipeline(x_host, out_host, chunks, streams, iters, threads)
    n = x_host.size
    if work is None:
        work = (cuda.device_array(n, dtype=np.float32), cuda.device_array(n, dtype=np.float32))
    x_dev, out_dev = _check_work(work, n, "numba")
    lanes = [cuda.stream() for _ in range(streams)]
    for c, (lo, hi) in enumerate(chunk_bounds(n, chunks)):
        s = lanes[c % streams]
        x_dev[lo:hi].copy_to_device(x_host[lo:hi], stream=s)
        poly_kernel[_numba_blocks(hi - lo, threads), threads, s](x_dev[lo:hi], out_dev[lo:hi], hi - lo, iters)
        out_dev[lo:hi].copy_to_host(out_host[lo:hi], stream=s)
    for s in lanes:
        s.synchronize()
    return out_host
# --8<-- [end:numba_pipeline]
