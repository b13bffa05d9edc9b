"""Is there a CUDA GPU here, and which target should Numba use?

The check asks the CUDA driver directly (through ctypes), so it needs
neither CuPy nor Numba and never initialises either of them.
"""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path

from . import standalone

CUDA_DIR = Path(__file__).with_name("cuda")


@functools.cache
def device_info(device_id: int) -> dict:
    """A CuPy device's name, compute capability (major, minor) and the threads
    one SM holds, asked once per process: wrappers that refuse a GPU are
    timed, and a driver query per call would be measured."""
    import cupy as cp

    name = cp.cuda.runtime.getDeviceProperties(device_id)["name"].decode()
    dev = cp.cuda.Device(device_id)
    cc = dev.compute_capability
    return {"name": name, "cc": (int(cc[:-1]), int(cc[-1])),
            "threads_per_sm": int(dev.attributes["MaxThreadsPerMultiProcessor"])}


@functools.cache
def has_gpu() -> bool:
    """True when the CUDA driver loads and reports at least one device.

    Set HANDBOOK_FORCE_CPU=1 to behave as if there were none (used by the
    tests to check the CPU path on a GPU machine).
    """
    if os.environ.get("HANDBOOK_FORCE_CPU") == "1":
        return False
    return standalone.has_gpu()


def select_numba_target() -> None:
    """Turn on Numba's CUDA simulator when there is no GPU.

    Numba reads NUMBA_ENABLE_CUDASIM when it is first imported, so this must
    run before `numba` is imported; an explicit setting is always respected.
    """
    if "NUMBA_ENABLE_CUDASIM" in os.environ:
        return
    if has_gpu():
        return
    if "numba" in sys.modules:
        raise RuntimeError(
            "numba was imported before kernels and no CUDA GPU is present: "
            "import kernels first, or set NUMBA_ENABLE_CUDASIM=1"
        )
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"


def numba_simulator() -> bool:
    """True when Numba's CUDA target is the simulator."""
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") == "1"


def cupy_module(source: str):
    """kernels/cuda/<source> compiled once per process by CuPy's RawModule (NVRTC)."""
    return standalone.load_cuda(source)


# --8<-- [start:kernel_attributes]
def kernel_attributes(kern, threads: int | None = None, dynamic_smem: int = 0) -> dict:
    """What a compiled CuPy kernel uses and allows (cuFuncGetAttribute):
    registers, static shared and local memory (spills) per thread, its
    largest block (__launch_bounds__) and dynamic shared memory; with
    `threads` (and the bytes of dynamic shared memory each block is
    launched with), also the driver's blocks per SM and occupancy (active
    warps / max warps)."""
    attrs = {"regs": int(kern.num_regs), "smem_bytes": int(kern.shared_size_bytes),
             "local_bytes": int(kern.local_size_bytes),
             "max_threads_per_block": int(kern.max_threads_per_block),
             "max_dynamic_smem": int(kern.max_dynamic_shared_size_bytes)}
    if dynamic_smem:
        attrs["dynamic_smem_bytes"] = int(dynamic_smem)
    if threads is not None:
        import cupy as cp

        blocks = driver_blocks_per_sm(kern, threads, dynamic_smem)
        max_warps = cp.cuda.Device().attributes["MaxThreadsPerMultiProcessor"] // 32
        attrs.update(blocks_per_sm=blocks, occupancy=blocks * -(-threads // 32) / max_warps)
    return attrs


def driver_blocks_per_sm(kern, threads: int, dynamic_smem: int = 0) -> int:
    """The driver's answer: cudaOccupancyMaxActiveBlocksPerMultiprocessor."""
    import cupy as cp

    return int(cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor(kern.kernel.ptr, threads, dynamic_smem))
# --8<-- [end:kernel_attributes]


def numba_kernel_attributes(dispatcher, threads: int) -> dict:
    """kernel_attributes' keys for a Numba kernel compiled once (its only
    overload): registers, shared and local memory per thread from the
    compiled kernel, blocks per SM from the driver
    (cuOccupancyMaxActiveBlocksPerMultiprocessor, through Numba)."""
    from numba import cuda

    kern = next(iter(dispatcher.overloads.values()))
    sms = cuda.get_current_device().MULTIPROCESSOR_COUNT
    blocks = kern.max_cooperative_grid_blocks(threads) // sms
    max_warps = cuda.get_current_device().MAX_THREADS_PER_MULTIPROCESSOR // 32
    return {"regs": int(kern.regs_per_thread), "smem_bytes": int(kern.shared_mem_per_block),
            "local_bytes": int(kern.local_mem_per_thread), "blocks_per_sm": int(blocks),
            "occupancy": blocks * -(-threads // 32) / max_warps}
