"""Host <-> device transfers, part (c): managed memory and zero-copy.
`managed_empty`, `host_view`, `prefetch_to_gpu`, `zero_copy_view`, and the
kernels that read what the host wrote (`scale_cupy`, `center_cupy`); in
Numba `managed_array_numba` (`cuda.managed_array`) and `scale_numba`.
Numba has no prefetch. Shared helpers are in kernels/host_transfer.py.
"""

from __future__ import annotations

import numpy as np

from . import checks
from .device import numba_simulator
from .host_transfer import (MEMORY_HOST, MEMORY_MANAGED, _blocks, _cp, _numba_blocks, _require_numba_vector,
                            cupy_kernel, memory_type)



SCALE = 2.0  # scale_once multiplies by 2: exact in float32, so results compare exactly


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

from numba import cuda  # noqa: E402


@cuda.jit
def scale_kernel(x, out, n, s):
    start = cuda.grid(1)
    stride = cuda.gridsize(1)
    for i in range(start, n, stride):
        out[i] = s * x[i]


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
