"""Is there a CUDA GPU here, and which target should Numba use?

The check asks the CUDA driver directly (through ctypes), so it needs
neither CuPy nor Numba and never initialises either of them.
"""

from __future__ import annotations

import dataclasses
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


NVRTC_OPTIONS = ("--std=c++17",)  # what standalone.load_cuda gives NVRTC


@dataclasses.dataclass(frozen=True)
class CudaBuild:
    """One compile of a kernels/cuda source, exactly as its wrapper makes it:
    the text NVRTC is given and its options. NVRTC sees no folder, so the
    text must hold whatever the file includes with quotes.

    A kernels module whose sources compile otherwise than `plain_build`
    (another text, other options) says so in `cuda_builds(cc)`, and its
    wrappers compile through those builds; `all_cuda_builds` collects them,
    and the tests compile each one with nvcc (CPU) and NVRTC (GPU)."""

    source: str                       # the file's name in kernels/cuda
    code: str                         # the text compiled
    options: tuple[str, ...] = NVRTC_OPTIONS

    def module(self):
        """The CuPy RawModule, compiled once per process (NVRTC compiles at
        its first get_function, for the current device)."""
        return _raw_module(self.code, self.options)

    def nvcc_flags(self, arch: str = "sm_90") -> list[str]:
        """The same compile for nvcc: NVRTC's options, and a target (an
        -arch in the options wins)."""
        from .sass import arch_flag

        named = [o.split("=", 1)[1] for o in self.options if o.startswith("-arch=")]
        rest = [o for o in self.options if not o.startswith("-arch=")]
        return [arch_flag(named[0] if named else arch), *rest]


@functools.cache
def _raw_module(code: str, options: tuple[str, ...]):
    import cupy as cp

    return cp.RawModule(code=code, options=options)


@functools.cache
def plain_build(source: str) -> CudaBuild:
    """kernels/cuda/<source> as it is, with standalone.load_cuda's options."""
    return CudaBuild(source, (CUDA_DIR / source).read_text())


def all_cuda_builds(cc: tuple[int, int] = (9, 0)) -> list[CudaBuild]:
    """Every compile of every kernels/cuda/*.cu for a GPU of compute
    capability `cc`: each kernels module's `cuda_builds(cc)`, then
    `plain_build` for every source no module claims."""
    import importlib
    import pkgutil

    package = importlib.import_module(__package__)
    builds: list[CudaBuild] = []
    for info in pkgutil.iter_modules(package.__path__):
        if not info.ispkg:
            module = importlib.import_module(f"{package.__name__}.{info.name}")
            if callable(getattr(module, "cuda_builds", None)):
                builds += module.cuda_builds(tuple(cc))
    claimed = {b.source for b in builds}
    return builds + [plain_build(p.name) for p in sorted(CUDA_DIR.glob("*.cu")) if p.name not in claimed]


@functools.cache
def cupy_module(source: str):
    """kernels/cuda/<source> compiled once per process by CuPy's RawModule
    (NVRTC), as standalone.load_cuda compiles it in the examples."""
    return plain_build(source).module()


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
