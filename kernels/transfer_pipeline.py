"""Host <-> device transfers, part (b): copy/compute overlap. `pipeline`
cuts an array into chunks and runs H2D -> `poly_chunk` -> D2H per chunk, on
one stream (serial) or on S streams round-robin, and can return the
timeline of every operation (CUDA events before and after each one).
Numba: `pipeline_numba` with `cuda.stream()`, `cuda.to_device(x,
stream=s)` and `copy_to_host(out, stream=s)`. Shared helpers are in
kernels/host_transfer.py.
"""

from __future__ import annotations

import functools

import numpy as np

from . import checks
from .host_transfer import _blocks, _cp, _numba_blocks, cupy_kernel



# FMAs per element in poly_chunk when the caller does not calibrate: enough
# to be visible at small sizes. The bench picks iters with `balance_iters`
# so that a chunk's kernel lasts as long as the chunk's copy.
POLY_ITERS = 64


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

from numba import cuda, float32  # noqa: E402


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
