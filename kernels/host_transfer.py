"""Host <-> device transfers, part (a): pageable vs pinned host memory, and
what the other two parts share (the CUDA C module, launch sizing, Numba's
grid and argument checks). The chapter's other parts are
kernels/transfer_pipeline.py (copy/compute overlap) and
kernels/managed_memory.py (managed memory and zero-copy); what times them
is kernels/bench/host_transfer.py.

`pinned_like`, `copy_h2d`, `copy_d2h`, `is_pinned`, and in Numba
`roundtrip_numba` (`cuda.pinned_array`, streams). The copy engine can only
read and write page-locked (pinned) host memory; from a pageable NumPy
array the driver first copies the data with the CPU through a pinned
staging buffer. `cupyx.empty_pinned` allocates pinned memory
(cudaHostAlloc).

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
from pathlib import Path

import numpy as np

from . import checks
from .device import cupy_module, numba_simulator



CUDA_SOURCE = Path(__file__).with_name("cuda") / "host_transfer.cu"


CUDA_NAMES = ("poly_chunk", "scale_once", "sum_once", "subtract_mean")


# cudaMemoryType, as cudaPointerGetAttributes reports it
MEMORY_UNREGISTERED, MEMORY_HOST, MEMORY_DEVICE, MEMORY_MANAGED = 0, 1, 2, 3


def grid_blocks(n: int, threads: int, sm_count: int) -> int:
    """Grid-stride launch: at most enough resident blocks to fill every SM
    (2048 threads per SM on sm_80/90), never more blocks than work."""
    return max(1, min(math.ceil(n / threads), sm_count * max(1, 2048 // threads)))


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

from numba import cuda  # noqa: E402


def _numba_blocks(n: int, threads: int) -> int:
    """Fill the GPU, or 2 blocks in the simulator (one Python thread per GPU thread)."""
    if numba_simulator():
        return max(1, min(math.ceil(n / threads), 2))
    return grid_blocks(n, threads, cuda.get_current_device().MULTIPROCESSOR_COUNT)


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
